//! Running a scenario: build the testbed, run each variant's transfer, collect the report.

use crate::emulator::PathCounters;
use crate::error::LabError;
use crate::scenario::{Mode, Scenario, Variant};
use crate::sys::StreamProto;
use crate::testbed::{Links, Testbed};
use crate::traffic::{self, BulkResult, CpuUse, FlowSpec, TcpStats};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Port the bulk transfer's flow `i` listens on.
pub const BASE_PORT: u16 = 5201;
/// TCP payload bytes per Ethernet frame of a full-size segment with timestamps
/// (1448 of 1514): the fraction of a link's rate a single TCP flow can carry.
pub const TCP_PAYLOAD_PER_FRAME: f64 = 1448.0 / 1514.0;

/// A running braid tunnel between the testbed's client and server namespaces.
pub trait Tunnel {
    /// Address of the tunnel device in the client namespace (the bulk TCP's source).
    fn client_addr(&self) -> Ipv4Addr;
    /// Address of the tunnel device in the server namespace (the bulk TCP's destination).
    fn server_addr(&self) -> Ipv4Addr;
    /// Both ends' own view of the run (`braid status --json` of client and server), taken
    /// after the transfer; `None` if the tunnel has nothing to say.
    fn status(&self) -> Option<serde_json::Value> {
        None
    }
    /// A way to read the sending end's status (`braid status --json` of the client) while the
    /// transfer runs, from another thread; `None` if the tunnel has nothing to say.
    fn status_sampler(&self) -> Option<StatusSampler> {
        None
    }
    /// Stop both ends.
    fn stop(self: Box<Self>) -> Result<(), LabError>;
}

/// Reads the sending end's status ([`Tunnel::status_sampler`]).
pub type StatusSampler = Box<dyn Fn() -> Option<serde_json::Value> + Send>;

/// How often the `braid` variant samples the client's status during the transfer.
pub const STATUS_INTERVAL: Duration = Duration::from_millis(250);

/// One sample of the sending end's status ([`VariantReport::status_series`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusSample {
    /// Seconds since the transfer started (within a few ms: the sampler starts just before it).
    pub t_s: f64,
    /// The rate the client's egress was shaped at, Mbit/s (PET's shaper, or `[qos]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shaping_mbit: Option<f64>,
    /// The client daemon's event-loop wake-ups more than 10 ms late so far (`event_loop` in
    /// its status): a rise between two samples says the host kept braid waiting then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_late_wakeups: Option<u64>,
    /// Per path.
    pub paths: Vec<PathSample>,
}

/// One path in a [`StatusSample`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathSample {
    /// PET's (or adaptive SRR's) estimate of the path's rate, Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_mbit: Option<f64>,
    /// The session's smoothed transmit rate on the path, Mbit/s.
    pub tx_mbit: f64,
    /// PET: whether the path is in PET's choice (not blacked out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_active: Option<bool>,
    /// Mode `sequence`, what the client receives: times packets of other paths waited 20 ms
    /// or more behind this path's, so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<u64>,
}

/// A [`StatusSample`] from the client's `braid status --json` at `t_s`.
pub fn status_sample(t_s: f64, status: &serde_json::Value) -> Option<StatusSample> {
    let session = &status["peers"][0]["session"];
    let mbit = |v: &serde_json::Value| v.as_f64().map(|b| b / 1e6);
    let paths = session["paths"]
        .as_array()?
        .iter()
        .map(|p| PathSample {
            estimate_mbit: mbit(&p["pet_estimate_bps"]),
            tx_mbit: mbit(&p["tx_bps"]).unwrap_or(0.0),
            pet_active: p["pet_active"].as_bool(),
            holds: p["holds"].as_u64(),
        })
        .collect();
    Some(StatusSample {
        t_s,
        shaping_mbit: mbit(&session["shaping_rate_bps"]),
        loop_late_wakeups: status["event_loop"]["late_wakeups"].as_u64(),
        paths,
    })
}

/// Starts a braid tunnel over a testbed: the extension point of the `braid` variant. The
/// `braid` command installs one once the daemon exists; without one the variant fails with
/// [`LabError::BraidNotBuilt`].
pub trait TunnelLauncher {
    /// Start both ends over every path of `testbed`, with the scenario's `[braid]` table and
    /// path rates, and return once the tunnel carries traffic.
    fn start(&self, testbed: &Testbed, scenario: &Scenario) -> Result<Box<dyn Tunnel>, LabError>;
}

/// A pTCP transfer between the testbed's client and server namespaces: the extension point of
/// the `ptcp` variant (the `braid` command installs one that runs `braid send`/`braid recv`'s
/// code in the namespaces); without one the variant fails with [`LabError::PtcpNotInstalled`].
pub trait PtcpLauncher {
    /// Start both ends over every path of `testbed` (the scenario's rates and congestion
    /// control) and return once the pTCP connection is open and ready to send.
    fn start(
        &self,
        testbed: &Testbed,
        scenario: &Scenario,
    ) -> Result<Box<dyn PtcpTransfer>, LabError>;
}

/// Where a pTCP receiver reports its reads: `(when, bytes)`.
pub type DataSink = Arc<dyn Fn(Instant, u64) + Send + Sync>;

/// A pTCP connection ready to send (from [`PtcpLauncher::start`]).
pub trait PtcpTransfer {
    /// The sender writes as fast as the connection takes data until `end`; the receiver
    /// reports every read to `on_data`. Returns at once: both ends run on their own threads.
    fn go(&mut self, end: Instant, on_data: DataSink) -> Result<(), LabError>;
    /// After `end`: stop both ends and say what they counted.
    fn finish(self: Box<Self>) -> Result<PtcpOutcome, LabError>;
}

/// What a pTCP transfer's ends counted.
#[derive(Clone, Debug, Default)]
pub struct PtcpOutcome {
    /// Virtual packets the sender's micro-flows resent.
    pub retransmits: u64,
    /// Caveats and per-flow figures.
    pub notes: Vec<String>,
    /// Both sessions' status (`{"client": ..., "server": ...}`) and the connection's counters.
    pub status: Option<serde_json::Value>,
}

/// Progress of a run, for live displays.
pub trait Observer {
    /// A transfer starts. `label` is the variant name, with the path for `best_single`.
    fn transfer_started(&mut self, _label: &str, _duration: Duration) {}
    /// About every 100 ms during a transfer.
    fn tick(&mut self, _tick: &Tick) {}
    /// A variant is done.
    fn variant_finished(&mut self, _report: &VariantReport) {}
    /// Something worth saying (settling, setting up MPTCP, ...).
    fn note(&mut self, _msg: &str) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// A progress sample.
#[derive(Clone, Debug)]
pub struct Tick {
    /// Time since the transfer started.
    pub elapsed: Duration,
    /// The transfer's length.
    pub duration: Duration,
    /// Mean goodput so far, Mbit/s.
    pub goodput_mbit: f64,
    /// Rate on each path since the last tick, Mbit/s of Ethernet frames (client to server).
    pub path_mbit: Vec<f64>,
}

/// One flow of a variant, in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowReport {
    /// Path index (for MPTCP: the path of the first subflow).
    pub path: usize,
    /// Goodput, Mbit/s.
    pub goodput_mbit: f64,
    /// `tcpi_total_retrans` of the sender.
    pub retransmits: Option<u64>,
    /// Longest stall, ms.
    pub max_stall_ms: f64,
    /// The sender's TCP statistics, if it could read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpStats>,
    /// Why there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_info_error: Option<String>,
    /// Goodput per 100 ms, Mbit/s.
    pub series_mbit: Vec<f64>,
    /// The DSCP the flow's packets were marked with (`braid` with the scenario's `dscp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
}

/// One variant's results. `goodput_mbit`, `retransmits` and `max_stall_ms` are the keys the
/// issue asks for; the rest are extras (see `docs/lab.md`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VariantReport {
    /// Variant name.
    #[serde(skip)]
    pub name: String,
    /// Payload goodput, Mbit/s (for `best_single`: the best path's).
    pub goodput_mbit: Option<f64>,
    /// Sender retransmissions (`tcpi_total_retrans`, summed over flows/subflows).
    pub retransmits: Option<u64>,
    /// Longest stall, ms.
    pub max_stall_ms: Option<f64>,
    /// `goodput_mbit` / the `sum` variant's goodput in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// Largest `tcpi_reordering` seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reordering: Option<u32>,
    /// `best_single`: the index of the best path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_path: Option<usize>,
    /// Why the variant has no results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Caveats on the figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Goodput per 100 ms, Mbit/s (for `best_single`: the best path's).
    pub series_mbit: Vec<f64>,
    /// The flows (one per path for `sum` and `best_single`, one for `mptcp` and `braid`).
    pub flows: Vec<FlowReport>,
    /// CPU use during the transfer (for `best_single`: the best path's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// Emulator counters of every path during this variant (empty in direct mode).
    pub emulator: Vec<PathCounters>,
    /// The latency probe beside the transfer (`[probe]`; for `best_single`: the best path's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<crate::probe::ProbeResult>,
    /// The sending namespace's `TcpExt` counters over the transfer
    /// ([`traffic::SENDER_TCP_EXT`]: fast retransmits, loss probes, RTOs, D-SACKs).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sender_tcp_ext: std::collections::BTreeMap<String, u64>,
    /// `braid`: both daemons' status after the transfer (`{"client": ..., "server": ...}`,
    /// as `braid status --json`): per-path RTT, loss, rates, and the receivers' counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel_status: Option<serde_json::Value>,
    /// `braid`: the sending end's rate estimates and shaping rate every
    /// [`STATUS_INTERVAL`] during the transfer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_series: Vec<StatusSample>,
}

/// What the report says about a path.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathReport {
    /// Index.
    pub path: usize,
    /// Client address.
    pub client_addr: Ipv4Addr,
    /// Server address.
    pub server_addr: Ipv4Addr,
    /// Base rate (client to server), Mbit/s; `None` in direct mode.
    pub rate_mbit: Option<f64>,
    /// One-way delay, ms.
    pub delay_ms: Option<f64>,
    /// Jitter, ms.
    pub jitter_ms: Option<f64>,
    /// Mean loss of the loss model, percent.
    pub loss_pct: Option<f64>,
    /// Queue, KiB.
    pub queue_kb: Option<f64>,
    /// Scheduled changes.
    pub schedule: Vec<serde_json::Value>,
}

/// The result of `braid lab run`: the JSON written by `--json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LabReport {
    /// Scenario name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Sum of the paths' rates, Mbit/s of Ethernet frames (`null` in direct mode).
    pub capacity_mbit: Option<f64>,
    /// The most TCP payload that capacity can carry: `capacity_mbit * 1448 / 1514`.
    pub tcp_payload_capacity_mbit: Option<f64>,
    /// Length of each transfer, s.
    pub duration_s: f64,
    /// `emulated` or `direct`.
    pub mode: String,
    /// Bin width of every `series_mbit`, ms.
    pub interval_ms: u64,
    /// Seed of the emulator's draws.
    pub seed: u64,
    /// TCP congestion control used by every plain TCP flow and MPTCP subflow.
    pub congestion_control: String,
    /// The machine's 1-minute load average when the run started and when it ended: other work
    /// on the machine shows here (and in the emulator's lateness counters).
    pub load_average: [f64; 2],
    /// CPUs of the machine.
    pub cpus: usize,
    /// The command that produced the report (set by the CLI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Paths.
    pub paths: Vec<PathReport>,
    /// Variants by name, in the order run.
    #[serde(serialize_with = "variants_as_map")]
    pub variants: Vec<VariantReport>,
}

fn variants_as_map<S: Serializer>(v: &[VariantReport], s: S) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(v.len()))?;
    for r in v {
        m.serialize_entry(&r.name, r)?;
    }
    m.end()
}

impl LabReport {
    /// The report of variant `name`.
    pub fn variant(&self, name: &str) -> Option<&VariantReport> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// Variants that failed.
    pub fn failures(&self) -> Vec<&VariantReport> {
        self.variants.iter().filter(|v| v.error.is_some()).collect()
    }
}

/// Options of a run beyond the scenario.
#[derive(Default)]
pub struct RunOptions {
    /// Starts the braid tunnel; `None` until the daemon exists.
    pub tunnel: Option<Box<dyn TunnelLauncher>>,
    /// Starts the `ptcp` variant's transfer.
    pub ptcp: Option<Box<dyn PtcpLauncher>>,
}

/// Build the scenario's testbed, run its variants in order, tear the testbed down and return
/// the report. A variant that fails is reported with its `error` and the others still run;
/// only a testbed that cannot be built is an `Err`.
pub fn run(
    scenario: &Scenario,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<LabReport, LabError> {
    let links = match scenario.mode {
        Mode::Direct => Links::Direct {
            paths: scenario.paths.len(),
        },
        Mode::Emulated => Links::Emulated(
            scenario
                .paths
                .iter()
                .filter_map(|p| p.direction_configs())
                .collect(),
        ),
    };
    let load_start = load_average();
    observer.note("building the testbed");
    let testbed = Testbed::new(&links, scenario.seed)?;
    let congestion_control = congestion_control(&testbed, scenario.congestion_control.as_deref())?;
    let mut report = LabReport {
        scenario: scenario.name.clone(),
        capacity_mbit: scenario.capacity_mbit(),
        tcp_payload_capacity_mbit: scenario.capacity_mbit().map(|c| c * TCP_PAYLOAD_PER_FRAME),
        duration_s: scenario.duration.as_secs_f64(),
        mode: match scenario.mode {
            Mode::Emulated => "emulated".into(),
            Mode::Direct => "direct".into(),
        },
        interval_ms: traffic::INTERVAL.as_millis() as u64,
        seed: scenario.seed,
        congestion_control,
        load_average: [load_start, 0.0],
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        command: None,
        paths: path_reports(scenario, &testbed),
        variants: Vec::new(),
    };
    let settle = settle_time(scenario);
    for (k, &variant) in scenario.variants.iter().enumerate() {
        if k > 0 {
            observer.note(&format!("settling for {} ms", settle.as_millis()));
            std::thread::sleep(settle);
        }
        let before = testbed.counters();
        let mut r = match variant {
            Variant::Braid => braid_variant("braid", scenario, options, &testbed, observer),
            Variant::BraidAccel => {
                let mut accelerated = scenario.clone();
                accelerated
                    .braid
                    .insert("tcp_accelerate".into(), toml::Value::Boolean(true));
                braid_variant("braid_accel", &accelerated, options, &testbed, observer)
            }
            Variant::Mptcp => mptcp_variant(scenario, &testbed, observer),
            Variant::BestSingle => best_single_variant(scenario, &testbed, settle, observer),
            Variant::Sum => sum_variant(scenario, &testbed, observer),
            Variant::Ptcp => ptcp_variant(scenario, options, &testbed, observer),
        }
        .unwrap_or_else(|e| VariantReport {
            error: Some(e.to_string()),
            ..VariantReport::default()
        });
        r.name = variant.name().to_string();
        r.emulator = testbed
            .counters()
            .iter()
            .zip(&before)
            .map(|(a, b)| a.since(b))
            .collect();
        observer.variant_finished(&r);
        report.variants.push(r);
    }
    if let Some(sum) = report.variant("sum").and_then(|s| s.goodput_mbit) {
        for v in &mut report.variants {
            if let Some(g) = v.goodput_mbit {
                v.efficiency = (sum > 0.0).then(|| g / sum);
            }
        }
    }
    testbed.close()?;
    report.load_average[1] = load_average();
    Ok(report)
}

/// The 1-minute load average (0 if unknown).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0.0)
}

/// The congestion control in force: the scenario's, checked against what the kernel has, or
/// the client namespace's default.
fn congestion_control(testbed: &Testbed, wanted: Option<&str>) -> Result<String, LabError> {
    let Some(cc) = wanted else {
        return testbed.client().sysctl("net.ipv4.tcp_congestion_control");
    };
    let available = testbed
        .client()
        .sysctl("net.ipv4.tcp_available_congestion_control")?;
    if !available.split_whitespace().any(|a| a == cc) {
        // Loading a module on demand is left to the kernel: try it on a socket.
        let probe = testbed.client().run(|| {
            let fd = crate::sys::stream_socket(StreamProto::Tcp)?;
            crate::sys::set_congestion(std::os::fd::AsRawFd::as_raw_fd(&fd), cc)
        })?;
        if let Err(e) = probe {
            return Err(LabError::Traffic(format!(
                "congestion_control = {cc:?}: {e}; this kernel has {available}"
            )));
        }
    }
    Ok(cc.to_string())
}

fn path_reports(scenario: &Scenario, testbed: &Testbed) -> Vec<PathReport> {
    scenario
        .paths
        .iter()
        .zip(testbed.paths())
        .map(|(spec, info)| {
            let f = spec.forward.as_ref();
            PathReport {
                path: info.index,
                client_addr: info.client_addr,
                server_addr: info.server_addr,
                rate_mbit: f.map(|l| l.rate_mbit),
                delay_ms: f.map(|l| l.delay_ms),
                jitter_ms: f.map(|l| l.jitter_ms),
                loss_pct: f.map(|l| l.loss.mean_loss() * 100.0),
                queue_kb: f.map(|l| l.queue_kb),
                schedule: spec
                    .schedule
                    .iter()
                    .map(|s| match *s {
                        crate::scenario::ScheduleItem::Rate { at_s, rate_mbit } => {
                            serde_json::json!({ "at_s": at_s, "rate_mbit": rate_mbit })
                        }
                        crate::scenario::ScheduleItem::Down { at_s, down_s } => {
                            serde_json::json!({ "at_s": at_s, "down_s": down_s })
                        }
                        crate::scenario::ScheduleItem::DownOneWay {
                            at_s,
                            down_s,
                            forward,
                        } => serde_json::json!({
                            "at_s": at_s,
                            "down_s": down_s,
                            "direction": if forward { "forward" } else { "reverse" },
                        }),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Time for the previous transfer's frames to leave the emulator: the fullest queue at the
/// slowest rate plus the delays, and a margin.
pub fn settle_time(scenario: &Scenario) -> Duration {
    let worst = scenario
        .paths
        .iter()
        .filter_map(|p| p.direction_configs())
        .flat_map(|(f, r)| [f, r])
        .map(|d| {
            let slowest = d
                .schedule
                .iter()
                .filter_map(|e| match e.change {
                    crate::emulator::model::Change::Rate { rate_bps } => Some(rate_bps),
                    _ => None,
                })
                .fold(d.rate_bps, u64::min);
            crate::emulator::model::DirectionConfig {
                rate_bps: slowest,
                ..d
            }
            .max_transit()
        })
        .max()
        .unwrap_or_default();
    (Duration::from_nanos(u64::try_from(worst.as_nanos()).unwrap_or(u64::MAX)) * 2
        + Duration::from_millis(300))
    .min(Duration::from_secs(10))
}

/// Run one transfer with live ticks; the emulator schedules restart as it begins.
fn transfer(
    label: &str,
    scenario: &Scenario,
    testbed: &Testbed,
    flows: &[FlowSpec],
    observer: &mut dyn Observer,
) -> Result<BulkResult, LabError> {
    observer.transfer_started(label, scenario.duration);
    let mut last = path_bytes(testbed);
    let mut last_t = Duration::ZERO;
    testbed.restart_schedules();
    let duration = scenario.duration;
    let mut tick = |elapsed: Duration, bytes: u64| {
        let now = path_bytes(testbed);
        let dt = (elapsed - last_t.min(elapsed)).as_secs_f64().max(1e-3);
        let path_mbit = now
            .iter()
            .zip(&last)
            .map(|(a, b)| a.saturating_sub(*b) as f64 * 8.0 / dt / 1e6)
            .collect();
        last = now;
        last_t = elapsed;
        observer.tick(&Tick {
            elapsed,
            duration,
            goodput_mbit: bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-3) / 1e6,
            path_mbit,
        });
    };
    // The probe goes where the first flow goes: the same server address, the same path.
    let probe = match (&scenario.probe, flows.first()) {
        (Some(spec), Some(f)) => Some(crate::probe::Probe::start(
            testbed.client(),
            testbed.server(),
            f.server,
            f.bind,
            spec,
        )?),
        _ => None,
    };
    let result = traffic::run_bulk(
        testbed.client(),
        testbed.server(),
        flows,
        duration,
        &mut tick,
    );
    let probe = probe.map(crate::probe::Probe::finish);
    result.map(|r| BulkResult { probe, ..r })
}

/// Bytes that went client-to-server on each path so far: the emulator's output, or the
/// server's interface counters in direct mode.
fn path_bytes(testbed: &Testbed) -> Vec<u64> {
    if testbed.is_emulated() {
        testbed
            .counters()
            .iter()
            .map(|c| c.forward.bytes_out)
            .collect()
    } else {
        testbed.server_rx_bytes().unwrap_or_default()
    }
}

fn flow_report(path: usize, f: &traffic::FlowResult) -> FlowReport {
    FlowReport {
        path,
        goodput_mbit: f.goodput_mbit,
        retransmits: f.tcp.as_ref().ok().map(|t| t.retransmits),
        max_stall_ms: f.max_stall_ms,
        tcp_info: f.tcp.as_ref().ok().cloned(),
        tcp_info_error: f.tcp.as_ref().err().cloned(),
        series_mbit: f.series_mbit.clone(),
        dscp: None,
    }
}

fn from_bulk(r: &BulkResult, paths: &[usize]) -> VariantReport {
    let flows: Vec<FlowReport> = r
        .flows
        .iter()
        .zip(paths)
        .map(|(f, &p)| flow_report(p, f))
        .collect();
    let retransmits = flows.iter().map(|f| f.retransmits).sum::<Option<u64>>();
    let reordering = flows
        .iter()
        .filter_map(|f| f.tcp_info.as_ref().map(|t| t.reordering))
        .max();
    let mut notes = Vec::new();
    for f in &flows {
        if let Some(e) = &f.tcp_info_error {
            notes.push(format!("path {}: no TCP statistics: {e}", f.path));
        }
    }
    VariantReport {
        goodput_mbit: Some(r.goodput_mbit),
        retransmits,
        max_stall_ms: Some(r.max_stall_ms),
        reordering,
        notes,
        series_mbit: r.series_mbit.clone(),
        flows,
        cpu: r.cpu.clone(),
        probe: r.probe.clone(),
        sender_tcp_ext: r.sender_tcp_ext.clone(),
        ..VariantReport::default()
    }
}

fn tcp_flow(scenario: &Scenario, testbed: &Testbed, i: usize, port: u16) -> FlowSpec {
    let p = &testbed.paths()[i];
    FlowSpec {
        proto: StreamProto::Tcp,
        bind: Some(SocketAddrV4::new(p.client_addr, 0)),
        server: SocketAddrV4::new(p.server_addr, port),
        congestion: scenario.congestion_control.clone(),
        dscp: None,
    }
}

fn sum_variant(
    scenario: &Scenario,
    testbed: &Testbed,
    observer: &mut dyn Observer,
) -> Result<VariantReport, LabError> {
    let n = testbed.paths().len();
    let flows: Vec<FlowSpec> = (0..n)
        .map(|i| tcp_flow(scenario, testbed, i, BASE_PORT + i as u16))
        .collect();
    let r = transfer("sum", scenario, testbed, &flows, observer)?;
    Ok(from_bulk(&r, &(0..n).collect::<Vec<_>>()))
}

fn best_single_variant(
    scenario: &Scenario,
    testbed: &Testbed,
    settle: Duration,
    observer: &mut dyn Observer,
) -> Result<VariantReport, LabError> {
    let mut flows = Vec::new();
    let mut best: Option<(usize, BulkResult)> = None;
    let mut notes = Vec::new();
    for i in 0..testbed.paths().len() {
        if i > 0 {
            std::thread::sleep(settle);
        }
        let label = format!("best_single (path {i})");
        match transfer(
            &label,
            scenario,
            testbed,
            &[tcp_flow(scenario, testbed, i, BASE_PORT)],
            observer,
        ) {
            Ok(r) => {
                flows.push(flow_report(i, &r.flows[0]));
                if best
                    .as_ref()
                    .is_none_or(|(_, b)| r.goodput_mbit > b.goodput_mbit)
                {
                    best = Some((i, r));
                }
            }
            Err(e) => notes.push(format!("path {i}: {e}")),
        }
    }
    let Some((i, b)) = best else {
        return Err(LabError::Traffic(notes.join("; ")));
    };
    let mut r = from_bulk(&b, &[i]);
    r.best_path = Some(i);
    r.flows = flows;
    r.notes.extend(notes);
    Ok(r)
}

fn mptcp_variant(
    scenario: &Scenario,
    testbed: &Testbed,
    observer: &mut dyn Observer,
) -> Result<VariantReport, LabError> {
    let n = testbed.paths().len();
    let limit = n.to_string();
    observer.note("configuring kernel MPTCP endpoints");
    for ns in [testbed.client(), testbed.server()] {
        ns.ip(&["mptcp", "endpoint", "flush"])?;
        ns.ip(&[
            "mptcp",
            "limits",
            "set",
            "subflows",
            &limit,
            "add_addr_accepted",
            &limit,
        ])?;
    }
    for (p, spec) in testbed.paths()[1..].iter().zip(&scenario.paths[1..]) {
        let addr = p.client_addr.to_string();
        let mut args = vec![
            "mptcp",
            "endpoint",
            "add",
            &addr,
            "dev",
            &p.client_dev,
            "subflow",
        ];
        // The kernel's scheduler sends on a backup subflow only while no other works.
        if spec.backup {
            args.push("backup");
        }
        testbed.client().ip(&args)?;
    }
    let p0 = &testbed.paths()[0];
    let flow = FlowSpec {
        proto: StreamProto::Mptcp,
        bind: Some(SocketAddrV4::new(p0.client_addr, 0)),
        server: SocketAddrV4::new(p0.server_addr, BASE_PORT),
        congestion: scenario.congestion_control.clone(),
        dscp: None,
    };
    let result = transfer("mptcp", scenario, testbed, &[flow], observer);
    let flushed = testbed.client().ip(&["mptcp", "endpoint", "flush"]);
    let r = result?;
    flushed?;
    let mut report = from_bulk(&r, &[0]);
    if let Ok(t) = r.flows[0].tcp.as_ref() {
        if t.fallback == Some(true) {
            report
                .notes
                .push("the connection fell back to plain TCP (no MPTCP)".into());
        }
        if n > 1 && t.subflows.is_some_and(|s| (s as usize) < n) {
            report.notes.push(format!(
                "only {} of {n} subflows were open at the end",
                t.subflows.unwrap_or(0)
            ));
        }
        report.notes.push(t.source.clone());
    }
    Ok(report)
}

fn braid_variant(
    name: &str,
    scenario: &Scenario,
    options: &RunOptions,
    testbed: &Testbed,
    observer: &mut dyn Observer,
) -> Result<VariantReport, LabError> {
    let Some(launcher) = options.tunnel.as_ref() else {
        return Err(LabError::BraidNotBuilt);
    };
    observer.note("starting the braid tunnel");
    let tunnel = launcher.start(testbed, scenario)?;
    // One flow, or one per DSCP of the scenario, all at once through the tunnel.
    let marks: Vec<Option<u8>> = if scenario.dscp.is_empty() {
        vec![None]
    } else {
        scenario.dscp.iter().map(|&d| Some(d)).collect()
    };
    let flows: Vec<FlowSpec> = marks
        .iter()
        .enumerate()
        .map(|(k, &dscp)| FlowSpec {
            proto: StreamProto::Tcp,
            bind: Some(SocketAddrV4::new(tunnel.client_addr(), 0)),
            server: SocketAddrV4::new(tunnel.server_addr(), BASE_PORT + k as u16),
            congestion: scenario.congestion_control.clone(),
            dscp,
        })
        .collect();
    let sampling = tunnel.status_sampler().map(|read| {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let t0 = Instant::now();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut next = t0;
            while !flag.load(Ordering::Relaxed) {
                let t_s = t0.elapsed().as_secs_f64();
                if let Some(s) = read().and_then(|v| status_sample(t_s, &v)) {
                    samples.push(s);
                }
                next += STATUS_INTERVAL;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            samples
        });
        (stop, thread)
    });
    let result = transfer(name, scenario, testbed, &flows, observer);
    let series = sampling.map_or_else(Vec::new, |(stop, thread)| {
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap_or_default()
    });
    let status = tunnel.status();
    let stopped = tunnel.stop();
    let r = result?;
    stopped?;
    let mut report = from_bulk(&r, &vec![0; flows.len()]);
    for (f, dscp) in report.flows.iter_mut().zip(&marks) {
        f.dscp = *dscp;
    }
    // An accelerated run whose client carried no connection measured the striped tunnel:
    // say so rather than let its figures pass under the accelerated name.
    let accelerated = scenario
        .braid
        .get("tcp_accelerate")
        .and_then(|v| v.as_bool())
        == Some(true);
    if accelerated {
        let carried = status
            .as_ref()
            .and_then(|s| s["client"]["tcp"]["connections"].as_u64())
            .unwrap_or(0);
        if carried == 0 {
            report.notes.push(
                "NOT ACCELERATED: the client carried no connection over pTCP (its nftables \
                 redirect failed, or the server did not take accelerated TCP), so these are \
                 the striped tunnel's figures; see the daemons' logs"
                    .into(),
            );
        }
    }
    report.tunnel_status = status;
    report.status_series = series;
    Ok(report)
}

/// The `ptcp` variant: pTCP inside the braid session, one micro-flow per path, measured as the
/// TCP variants are (payload read by the receiver in the window, per 100 ms, longest stall).
fn ptcp_variant(
    scenario: &Scenario,
    options: &RunOptions,
    testbed: &Testbed,
    observer: &mut dyn Observer,
) -> Result<VariantReport, LabError> {
    let Some(launcher) = options.ptcp.as_ref() else {
        return Err(LabError::PtcpNotInstalled);
    };
    observer.note("starting pTCP over the braid session");
    let mut run = launcher.start(testbed, scenario)?;
    let duration = scenario.duration;
    observer.transfer_started("ptcp", duration);
    let mut last = path_bytes(testbed);
    let mut last_t = Duration::ZERO;
    testbed.restart_schedules();
    let t0 = Instant::now();
    let end = t0 + duration;
    let meter = Arc::new(Mutex::new(traffic::StreamMeter::new(t0, duration)));
    let total = Arc::new(AtomicU64::new(0));
    let (m2, tot2) = (meter.clone(), total.clone());
    let sink: DataSink = Arc::new(move |t, n| {
        m2.lock().unwrap_or_else(|p| p.into_inner()).data_at(t, n);
        tot2.fetch_add(n, Ordering::Relaxed);
    });
    let cpu = traffic::CpuMeter::start();
    run.go(end, sink)?;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(traffic::INTERVAL.min(end - now));
        let elapsed = t0.elapsed().min(duration);
        let now_bytes = path_bytes(testbed);
        let dt = (elapsed - last_t.min(elapsed)).as_secs_f64().max(1e-3);
        let path_mbit = now_bytes
            .iter()
            .zip(&last)
            .map(|(a, b)| a.saturating_sub(*b) as f64 * 8.0 / dt / 1e6)
            .collect();
        last = now_bytes;
        last_t = elapsed;
        observer.tick(&Tick {
            elapsed,
            duration,
            goodput_mbit: total.load(Ordering::Relaxed) as f64 * 8.0
                / elapsed.as_secs_f64().max(1e-3)
                / 1e6,
            path_mbit,
        });
    }
    let cpu = cpu.finish();
    let outcome = run.finish()?;
    let flow = meter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .result(Err("pTCP: no TCP_INFO (its counters are in notes)".into()));
    if flow.bytes == 0 {
        return Err(LabError::Traffic(format!(
            "pTCP: no data arrived; {}",
            outcome.notes.join("; ")
        )));
    }
    Ok(VariantReport {
        goodput_mbit: Some(flow.goodput_mbit),
        retransmits: Some(outcome.retransmits),
        max_stall_ms: Some(flow.max_stall_ms),
        notes: outcome.notes,
        series_mbit: flow.series_mbit.clone(),
        flows: vec![FlowReport {
            path: 0,
            goodput_mbit: flow.goodput_mbit,
            retransmits: Some(outcome.retransmits),
            max_stall_ms: flow.max_stall_ms,
            tcp_info: None,
            tcp_info_error: None,
            series_mbit: flow.series_mbit,
            dscp: None,
        }],
        cpu,
        tunnel_status: outcome.status,
        ..VariantReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_sample_reads_the_estimates_and_the_shaping_rate() {
        let status = serde_json::json!({"peers": [{"session": {
            "shaping_rate_bps": 13_500_000u64,
            "paths": [
                {"tx_bps": 8.0e6, "pet_estimate_bps": 7_900_000u64, "pet_active": true, "holds": 2u64},
                {"tx_bps": 0.0},
            ],
        }}], "event_loop": {"late_wakeups": 3u64}});
        let s = status_sample(1.25, &status).unwrap();
        assert_eq!(s.t_s, 1.25);
        assert_eq!(s.shaping_mbit, Some(13.5));
        assert_eq!(s.loop_late_wakeups, Some(3));
        assert_eq!(s.paths.len(), 2);
        assert_eq!(s.paths[0].estimate_mbit, Some(7.9));
        assert_eq!(s.paths[0].tx_mbit, 8.0);
        assert_eq!(s.paths[0].pet_active, Some(true));
        assert_eq!(s.paths[0].holds, Some(2));
        assert_eq!(s.paths[1].holds, None);
        assert_eq!(s.paths[1].estimate_mbit, None);
        assert_eq!(s.paths[1].pet_active, None);
        // A daemon with no session yet says nothing.
        assert_eq!(status_sample(0.0, &serde_json::json!({"peers": []})), None);
    }
}

//! `tcp-check`: the simulator's TCP model ([`crate::tcp`]) against the lab's kernel TCP on the
//! same scenario (issue 5, item 6).
//!
//! Each path of a lab scenario gets one model TCP transfer of its own, as the lab's `sum`
//! variant (every path at once, each path its own emulator, so the flows do not meet) and
//! `best_single` variant (each path alone) run one kernel TCP per path. The path is the lab
//! emulator's own link model ([`crate::emulated::LinkModel`]), both directions, with the
//! scenario's rate, drop-tail queue, delay, jitter, loss and schedule, seeded as the lab seeds
//! it, and driven in virtual time. Frames are sized as on the lab's veths: a full segment is a
//! 1514-byte Ethernet frame carrying 1448 bytes of payload (TCP timestamps on), an ACK 66 bytes
//! plus its SACK option, a SYN 74 bytes. The transfer starts with the SYN at time zero, as the
//! lab's window starts just before `connect`, and goodput is the payload delivered in order
//! within the scenario's duration, over that duration, in Mbit/s: the lab's definition.
//!
//! The model is set up like Linux with `reno` ([`TcpConfig::linux`]: SACK, initial window 10,
//! RTO floor 200 ms, byte counting), with Linux's delayed ACKs: the first
//! [`QUICK_ACKS`] segments acknowledged at once, then every second segment or after
//! [`DELAYED_ACK`], and at once while a hole is open.

use super::{round, Output};
use crate::emulated::{DirectionConfig, LinkModel, Verdict};
use crate::report::{Plot, Report, Row, Series};
use crate::tcp::{Ack, TcpConfig, TcpReceiver, TcpSender};
use braid_proto::time::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// TCP payload of a full segment on the lab's links: 1500-byte MTU less 20 bytes of IP, 20 of
/// TCP and 12 of the timestamp option.
pub const MSS_BYTES: u64 = 1448;
/// A full segment's Ethernet frame, as the emulator counts it (no preamble or FCS).
pub const DATA_FRAME_BYTES: u64 = MSS_BYTES + 66;
/// A pure ACK with timestamps: 14 + 20 + 32 bytes; SACK blocks add [`sack_option_bytes`].
pub const ACK_FRAME_BYTES: u64 = 66;
/// A SYN or SYN-ACK with Linux's options (MSS, SACK-permitted, timestamps, window scale).
pub const SYN_FRAME_BYTES: u64 = 74;
/// Linux's delayed-ACK timer (`TCP_ATO_MIN`, 40 ms; it stays there under bulk transfer).
pub const DELAYED_ACK: Duration = Duration::from_millis(40);
/// Segments Linux acknowledges at once at the start of a connection (`TCP_MAX_QUICKACKS`).
pub const QUICK_ACKS: u32 = 16;
/// Linux's first SYN retransmission timeout (`TCP_TIMEOUT_INIT`), doubled on each retry.
pub const SYN_RTO: Duration = Duration::from_secs(1);
/// Bin of the goodput series, as the lab's `interval_ms`.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// Bytes the SACK option adds to an ACK carrying `blocks` blocks (two NOPs, kind, length and
/// eight bytes a block).
pub fn sack_option_bytes(blocks: usize) -> u64 {
    if blocks == 0 {
        0
    } else {
        4 + 8 * blocks as u64
    }
}

/// One path: the emulator's two directions.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckPath {
    /// Client to server (data).
    pub forward: DirectionConfig,
    /// Server to client (ACKs).
    pub reverse: DirectionConfig,
}

/// A lab scenario as the check needs it (the `braid` command reads the TOML with
/// `braid_lab::Scenario` and converts it).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckScenario {
    /// Name, for rows and titles.
    pub name: String,
    /// Length of each transfer.
    pub duration: Duration,
    /// The scenario's seed (the emulator's draws derive from it as in the lab).
    pub seed: u64,
    /// The paths, path 0 first.
    pub paths: Vec<CheckPath>,
}

/// The seeds of path `index`'s two directions, derived from the scenario seed exactly as the
/// lab's testbed derives them (`braid_lab::testbed`), so a lossy path draws the same sequence.
pub fn direction_seeds(seed: u64, index: usize) -> (u64, u64) {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let path_seed = seed.wrapping_mul(GOLDEN).wrapping_add(index as u64 + 1);
    (path_seed, path_seed ^ GOLDEN)
}

/// The TCP model's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// The sender.
    pub tcp: TcpConfig,
    /// Delayed-ACK timer (`None`: every segment acknowledged at once).
    pub delayed_ack: Option<Duration>,
    /// Segments acknowledged at once before delayed ACKs start.
    pub quick_acks: u32,
}

impl Default for Model {
    /// Linux with `reno`, as described in the module docs.
    fn default() -> Self {
        Model {
            tcp: TcpConfig::linux(),
            delayed_ack: Some(DELAYED_ACK),
            quick_acks: QUICK_ACKS,
        }
    }
}

/// What the model did on one path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathResult {
    /// Payload delivered in order within the duration, Mbit/s.
    pub goodput_mbit: f64,
    /// Segments delivered in order within the duration.
    pub delivered: u64,
    /// Segments retransmitted (the kernel's `tcpi_total_retrans`).
    pub retransmits: u64,
    /// Entries into fast recovery.
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Duplicate ACKs the sender received.
    pub dup_acks: u64,
    /// Frames the forward direction's drop-tail queue turned away.
    pub queue_drops: u64,
    /// Frames the loss model or an outage took, both directions.
    pub lost: u64,
    /// Goodput per [`INTERVAL`], Mbit/s.
    pub series_mbit: Vec<f64>,
    /// Events processed.
    pub events: u64,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// The SYN reaches the server.
    Syn,
    /// The SYN-ACK reaches the client.
    SynAck,
    /// The client's SYN timer.
    SynTimer,
    /// A segment reaches the receiver.
    Data(u64),
    /// An ACK reaches the sender.
    Ack(Ack),
    /// The sender's retransmission timer.
    TxTimer,
    /// The receiver's delayed-ACK timer.
    RxTimer,
}

/// Pending events in time order (ties in the order pushed).
#[derive(Default)]
struct Events {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    slab: Vec<Option<Ev>>,
}

impl Events {
    fn push(&mut self, at: Instant, ev: Ev) {
        self.slab.push(Some(ev));
        self.heap.push(Reverse((at, self.slab.len() as u64 - 1)));
    }

    fn pop(&mut self) -> Option<(Instant, Ev)> {
        let Reverse((at, k)) = self.heap.pop()?;
        let ev = self.slab.get_mut(k as usize).and_then(Option::take)?;
        Some((at, ev))
    }
}

/// Drops on the path.
#[derive(Default)]
struct Drops {
    queue: u64,
    lost: u64,
}

/// Put a frame on a direction; `Some(arrival)` unless it was dropped (counted).
fn send(
    link: &mut LinkModel,
    now: Instant,
    bytes: u64,
    drops: &mut Drops,
    forward: bool,
) -> Option<Instant> {
    match link.on_frame(now, bytes) {
        Verdict::Deliver { at } => Some(at),
        Verdict::QueueFull => {
            if forward {
                drops.queue += 1;
            }
            None
        }
        Verdict::Lost | Verdict::Down => {
            drops.lost += 1;
            None
        }
    }
}

/// Run the model over one path for `duration`, the two directions seeded with `seeds`
/// (forward, reverse; [`direction_seeds`] gives the lab's).
pub fn run_path(
    path: &CheckPath,
    duration: Duration,
    seeds: (u64, u64),
    model: &Model,
) -> PathResult {
    let mut fwd = LinkModel::new(path.forward.clone(), seeds.0);
    let mut rev = LinkModel::new(path.reverse.clone(), seeds.1);
    fwd.restart_schedule(Instant::ZERO);
    rev.restart_schedule(Instant::ZERO);
    let mut sender = TcpSender::new(model.tcp);
    let mut receiver = TcpReceiver::new(model.delayed_ack);
    receiver.set_quick_acks(model.quick_acks);

    let end = Instant::ZERO + duration;
    let bins = duration.as_nanos().div_ceil(INTERVAL.as_nanos()).max(1) as usize;
    let mut per_bin = vec![0u64; bins];
    let mut drops = Drops::default();
    let mut events = Events::default();
    let mut processed = 0u64;

    // The handshake: a SYN at time zero, retried with backoff until the SYN-ACK arrives.
    let mut now = Instant::ZERO;
    let mut syn_sent = now;
    let mut syn_rto = SYN_RTO;
    let mut established = false;
    if let Some(at) = send(&mut fwd, now, SYN_FRAME_BYTES, &mut drops, true) {
        events.push(at, Ev::Syn);
    }
    events.push(now + syn_rto, Ev::SynTimer);

    let mut tx_wake: Option<Instant> = None;
    let mut rx_wake: Option<Instant> = None;
    while let Some((t, ev)) = events.pop() {
        if t > end {
            break;
        }
        now = t;
        processed += 1;
        match ev {
            Ev::Syn => {
                if let Some(at) = send(&mut rev, now, SYN_FRAME_BYTES, &mut drops, false) {
                    events.push(at, Ev::SynAck);
                }
            }
            Ev::SynAck => {
                if !established {
                    established = true;
                    sender.on_handshake_rtt(now.saturating_duration_since(syn_sent));
                }
            }
            Ev::SynTimer => {
                if !established {
                    syn_sent = now;
                    syn_rto *= 2;
                    if let Some(at) = send(&mut fwd, now, SYN_FRAME_BYTES, &mut drops, true) {
                        events.push(at, Ev::Syn);
                    }
                    events.push(now + syn_rto, Ev::SynTimer);
                }
            }
            Ev::Data(seq) => {
                let delivered = receiver.on_segment(now, seq);
                let bin = ((now - Instant::ZERO).as_nanos() / INTERVAL.as_nanos()) as usize;
                per_bin[bin.min(bins - 1)] += delivered;
            }
            Ev::Ack(ack) => sender.on_ack(now, ack),
            Ev::TxTimer => {
                if tx_wake == Some(now) {
                    tx_wake = None;
                    sender.on_timeout(now);
                }
            }
            Ev::RxTimer => {
                if rx_wake == Some(now) {
                    rx_wake = None;
                    receiver.on_timeout(now);
                }
            }
        }
        // The receiver's ACKs go back over the reverse direction.
        while let Some(ack) = receiver.poll_ack() {
            let blocks = ack.sack.iter().flatten().count();
            let bytes = ACK_FRAME_BYTES + sack_option_bytes(blocks);
            if let Some(at) = send(&mut rev, now, bytes, &mut drops, false) {
                events.push(at, Ev::Ack(ack));
            }
        }
        // The sender's segments go out over the forward direction (the emulator's queue is
        // the only queue on the lab's path: veths have no qdisc).
        if established {
            while let Some(seg) = sender.poll_transmit(now) {
                if let Some(at) = send(&mut fwd, now, DATA_FRAME_BYTES, &mut drops, true) {
                    events.push(at, Ev::Data(seg.seq));
                }
            }
        }
        let t = sender.poll_timeout();
        if t != tx_wake {
            tx_wake = t;
            if let Some(t) = t {
                events.push(t.max(now), Ev::TxTimer);
            }
        }
        let t = receiver.poll_timeout();
        if t != rx_wake {
            rx_wake = t;
            if let Some(t) = t {
                events.push(t.max(now), Ev::RxTimer);
            }
        }
    }
    let delivered: u64 = per_bin.iter().sum();
    let to_mbit = |segments: u64, secs: f64| (segments * MSS_BYTES * 8) as f64 / secs / 1e6;
    let stats = sender.stats();
    PathResult {
        goodput_mbit: to_mbit(delivered, duration.as_secs_f64()),
        delivered,
        retransmits: stats.retransmits,
        fast_retransmits: stats.fast_retransmits,
        timeouts: stats.timeouts,
        dup_acks: stats.dup_acks,
        queue_drops: drops.queue,
        lost: drops.lost,
        series_mbit: per_bin
            .iter()
            .map(|&n| to_mbit(n, INTERVAL.as_secs_f64()))
            .collect(),
        events: processed,
    }
}

/// One kernel TCP flow of a lab report (`braid lab run --json`).
#[derive(Clone, Debug, PartialEq)]
pub struct LabFlow {
    /// `sum` or `best_single`.
    pub variant: String,
    /// Path index.
    pub path: usize,
    /// Goodput, Mbit/s.
    pub goodput_mbit: f64,
    /// `tcpi_total_retrans`.
    pub retransmits: Option<u64>,
    /// Goodput per `interval_ms`, Mbit/s.
    pub series_mbit: Vec<f64>,
}

/// What the check reads from a lab report.
#[derive(Clone, Debug, PartialEq)]
pub struct LabRun {
    /// The kernel's congestion control in the run.
    pub congestion_control: String,
    /// Length of each transfer, s.
    pub duration_s: f64,
    /// Bin of the series, ms.
    pub interval_ms: u64,
    /// Number of paths.
    pub paths: usize,
    /// The machine's 1-minute load average at the start and end of the run.
    pub load_average: Vec<f64>,
    /// The command that made it.
    pub command: Option<String>,
    /// Per-path flows of the `sum` and `best_single` variants.
    pub flows: Vec<LabFlow>,
}

/// A lab report the check cannot use.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LabReportError {
    /// A key is missing or of the wrong type.
    #[error("the lab report has no {0}: give the JSON that `braid lab run --json` writes")]
    Missing(String),
    /// Neither per-path variant ran.
    #[error("the lab report has neither a `sum` nor a `best_single` variant: run the lab with --variants sum,best_single")]
    NoPerPathVariant,
}

impl LabRun {
    /// Read the parts of a `braid lab run --json` report the check compares with.
    pub fn from_json(v: &serde_json::Value) -> Result<LabRun, LabReportError> {
        let missing = |k: &str| LabReportError::Missing(k.to_owned());
        let variants = v
            .get("variants")
            .and_then(|x| x.as_object())
            .ok_or_else(|| missing("`variants` object"))?;
        let mut flows = Vec::new();
        let mut any = false;
        for name in ["sum", "best_single"] {
            let Some(var) = variants.get(name) else {
                continue;
            };
            any = true;
            let list = var
                .get("flows")
                .and_then(|f| f.as_array())
                .ok_or_else(|| missing(&format!("`variants.{name}.flows` list")))?;
            for f in list {
                let path = f
                    .get("path")
                    .and_then(|p| p.as_u64())
                    .ok_or_else(|| missing(&format!("`path` in a flow of {name}")))?;
                let goodput = f
                    .get("goodput_mbit")
                    .and_then(|g| g.as_f64())
                    .ok_or_else(|| missing(&format!("`goodput_mbit` in a flow of {name}")))?;
                flows.push(LabFlow {
                    variant: name.to_owned(),
                    path: path as usize,
                    goodput_mbit: goodput,
                    retransmits: f.get("retransmits").and_then(|r| r.as_u64()),
                    series_mbit: f
                        .get("series_mbit")
                        .and_then(|s| s.as_array())
                        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                        .unwrap_or_default(),
                });
            }
        }
        if !any {
            return Err(LabReportError::NoPerPathVariant);
        }
        Ok(LabRun {
            congestion_control: v
                .get("congestion_control")
                .and_then(|c| c.as_str())
                .unwrap_or("unknown")
                .to_owned(),
            duration_s: v
                .get("duration_s")
                .and_then(|d| d.as_f64())
                .ok_or_else(|| missing("`duration_s`"))?,
            interval_ms: v.get("interval_ms").and_then(|d| d.as_u64()).unwrap_or(100),
            paths: v
                .get("paths")
                .and_then(|p| p.as_array())
                .map_or(0, |p| p.len()),
            load_average: v
                .get("load_average")
                .and_then(|l| l.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default(),
            command: v.get("command").and_then(|c| c.as_str()).map(str::to_owned),
            flows,
        })
    }
}

/// A path's TCP payload capacity: its base forward rate times 1448/1514, Mbit/s.
pub fn payload_capacity_mbit(path: &CheckPath) -> f64 {
    path.forward.rate_bps as f64 / 1e6 * MSS_BYTES as f64 / DATA_FRAME_BYTES as f64
}

/// Run the check: the model on every path, and beside it the lab's flows if given.
pub fn run(scenario: &CheckScenario, lab: Option<&LabRun>, model: &Model) -> Output {
    let results: Vec<PathResult> = scenario
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            run_path(
                p,
                scenario.duration,
                direction_seeds(scenario.seed, i),
                model,
            )
        })
        .collect();
    let name = scenario.name.clone();
    let mut rows = Vec::new();
    for (i, (p, r)) in scenario.paths.iter().zip(&results).enumerate() {
        let capacity = payload_capacity_mbit(p);
        rows.push(Row {
            scenario: Some(name.clone()),
            path: Some(i as u64),
            source: Some("sim".into()),
            link_mbit: Some(vec![p.forward.rate_bps as f64 / 1e6]),
            goodput_mbit: Some(round(r.goodput_mbit, 3)),
            goodput_ratio: Some(round(r.goodput_mbit / capacity, 4)),
            dup_acks: Some(r.dup_acks),
            retransmits: Some(r.retransmits),
            timeouts: Some(r.timeouts),
            events: Some(r.events),
            ..Row::default()
        });
        for f in lab.iter().flat_map(|l| &l.flows).filter(|f| f.path == i) {
            rows.push(Row {
                scenario: Some(name.clone()),
                path: Some(i as u64),
                source: Some("lab".into()),
                variant: Some(f.variant.clone()),
                link_mbit: Some(vec![p.forward.rate_bps as f64 / 1e6]),
                goodput_mbit: Some(round(f.goodput_mbit, 3)),
                goodput_ratio: Some(round(f.goodput_mbit / capacity, 4)),
                retransmits: f.retransmits,
                sim_over_lab: (f.goodput_mbit > 0.0)
                    .then(|| round(r.goodput_mbit / f.goodput_mbit, 3)),
                ..Row::default()
            });
        }
    }

    let mut checks = vec![(
        format!(
            "the model never carries more than a path's TCP payload capacity ({})",
            scenario
                .paths
                .iter()
                .zip(&results)
                .map(|(p, r)| format!("{:.2} <= {:.2}", r.goodput_mbit, payload_capacity_mbit(p)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        scenario
            .paths
            .iter()
            .zip(&results)
            .all(|(p, r)| r.goodput_mbit <= payload_capacity_mbit(p) * 1.0001),
    )];
    if let Some(l) = lab {
        checks.push((
            format!(
                "the lab ran reno, the model's congestion control (it ran {})",
                l.congestion_control
            ),
            l.congestion_control == "reno",
        ));
        checks.push((
            format!(
                "the lab report matches the scenario: {} paths and {} s (scenario: {} paths, {} s)",
                l.paths,
                l.duration_s,
                scenario.paths.len(),
                scenario.duration.as_secs_f64()
            ),
            l.paths == scenario.paths.len()
                && (l.duration_s - scenario.duration.as_secs_f64()).abs() < 1e-6,
        ));
    }

    // Goodput by path: the model, the lab's variants, the capacity.
    let mut by_path = vec![Series {
        name: "sim (model)".into(),
        points: results
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, r.goodput_mbit))
            .collect(),
        dashed: false,
    }];
    for variant in ["sum", "best_single"] {
        let points: Vec<(f64, f64)> = lab
            .iter()
            .flat_map(|l| &l.flows)
            .filter(|f| f.variant == variant)
            .map(|f| (f.path as f64, f.goodput_mbit))
            .collect();
        if !points.is_empty() {
            by_path.push(Series {
                name: format!("lab kernel TCP, {variant}"),
                points,
                dashed: false,
            });
        }
    }
    by_path.push(Series {
        name: "TCP payload capacity".into(),
        points: scenario
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| (i as f64, payload_capacity_mbit(p)))
            .collect(),
        dashed: true,
    });
    // Goodput over time: the model solid, the lab's `sum` flows (or `best_single`) dashed.
    let mut over_time = Vec::new();
    let step = INTERVAL.as_secs_f64();
    for (i, r) in results.iter().enumerate() {
        over_time.push(Series {
            name: format!("path {i} sim"),
            points: r
                .series_mbit
                .iter()
                .enumerate()
                .map(|(k, &g)| ((k as f64 + 0.5) * step, g))
                .collect(),
            dashed: false,
        });
        let flows = lab.map(|l| l.flows.as_slice()).unwrap_or_default();
        let flow = flows
            .iter()
            .find(|f| f.path == i && f.variant == "sum")
            .or_else(|| flows.iter().find(|f| f.path == i));
        if let (Some(f), Some(l)) = (flow, lab) {
            let lab_step = l.interval_ms as f64 / 1e3;
            over_time.push(Series {
                name: format!("path {i} lab ({})", f.variant),
                points: f
                    .series_mbit
                    .iter()
                    .enumerate()
                    .map(|(k, &g)| ((k as f64 + 0.5) * lab_step, g))
                    .collect(),
                dashed: true,
            });
        }
    }
    Output {
        report: Report {
            experiment: "tcp-check".into(),
            seed: scenario.seed,
            rows,
        },
        plots: vec![
            (
                "tcp-check-goodput.svg".into(),
                Plot {
                    title: format!("{name}: TCP goodput by path, model vs kernel"),
                    x_label: "path".into(),
                    y_label: "goodput (Mbit/s)".into(),
                    log_x: false,
                    log_y: false,
                    series: by_path,
                },
            ),
            (
                "tcp-check-series.svg".into(),
                Plot {
                    title: format!("{name}: goodput per 100 ms, model (solid) vs kernel (dashed)"),
                    x_label: "time (s)".into(),
                    y_label: "goodput (Mbit/s)".into(),
                    log_x: false,
                    log_y: false,
                    series: over_time,
                },
            ),
        ],
        columns: vec![
            "scenario",
            "path",
            "source",
            "variant",
            "link_mbit",
            "goodput_mbit",
            "goodput_ratio",
            "retransmits",
            "timeouts",
            "sim_over_lab",
        ],
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rate_mbit: u64, delay_ms: u64, queue_kb: u64) -> CheckPath {
        let d = DirectionConfig::new(
            rate_mbit * 1_000_000,
            Duration::from_millis(delay_ms),
            queue_kb * 1024,
        );
        CheckPath {
            forward: d.clone(),
            reverse: d,
        }
    }

    /// One lossless 10 Mbit/s, 10 ms path with the lab's 64 KiB queue: after slow start the
    /// model keeps the bottleneck busy (the queue is larger than the path's BDP, so Reno's
    /// halving never empties it), so 20 s carry within 3% of the payload rate, 1448/1514 of the
    /// link; the slow-start overshoot is repaired by SACK recovery, without a timeout.
    #[test]
    fn a_lossless_path_runs_at_the_bottleneck_payload_rate() {
        let p = path(10, 10, 64);
        let r = run_path(&p, Duration::from_secs(20), (1, 2), &Model::default());
        let capacity = payload_capacity_mbit(&p);
        assert!((capacity - 9.564).abs() < 0.001, "{capacity}");
        assert!(
            r.goodput_mbit <= capacity && r.goodput_mbit >= 0.97 * capacity,
            "{r:?}"
        );
        assert!(r.queue_drops > 0 && r.retransmits >= r.queue_drops, "{r:?}");
        assert_eq!(r.timeouts, 0, "{r:?}");
        assert_eq!(r.lost, 0, "{r:?}");
    }

    /// With a queue no window reaches in 5 s nothing is lost or resent, and what is missing
    /// from the capacity is the handshake and slow start: about log2(BDP / 10) round trips.
    #[test]
    fn without_drops_nothing_is_resent() {
        let p = path(10, 10, 16 * 1024);
        let r = run_path(&p, Duration::from_secs(5), (1, 2), &Model::default());
        assert_eq!(
            (r.retransmits, r.queue_drops, r.timeouts),
            (0, 0, 0),
            "{r:?}"
        );
        let capacity = payload_capacity_mbit(&p);
        assert!(r.goodput_mbit >= 0.97 * capacity, "{r:?}");
        // The first 100 ms bin holds the handshake and the first windows of slow start.
        assert!(
            r.series_mbit[0] < 0.75 * capacity,
            "{:?}",
            &r.series_mbit[..5]
        );
    }

    /// Random loss on both directions costs goodput and is repaired by retransmissions; the
    /// transfer keeps going.
    #[test]
    fn a_lossy_path_retransmits_and_keeps_going() {
        let mut p = path(4, 40, 64);
        p.forward.loss = crate::link::LossModel::Bernoulli(0.01);
        p.reverse.loss = crate::link::LossModel::Bernoulli(0.01);
        let r = run_path(
            &p,
            Duration::from_secs(20),
            direction_seeds(1, 1),
            &Model::default(),
        );
        assert!(r.lost > 0 && r.retransmits >= r.lost / 2, "{r:?}");
        assert!(r.goodput_mbit > 0.2 * payload_capacity_mbit(&p), "{r:?}");
        assert!(r.goodput_mbit < 0.95 * payload_capacity_mbit(&p), "{r:?}");
        // The last second still delivers.
        assert!(r.series_mbit[190..].iter().sum::<f64>() > 0.0, "{r:?}");
    }

    #[test]
    fn the_seeds_are_the_labs() {
        // braid_lab::testbed: seed * golden + index + 1, the reverse direction xor golden.
        assert_eq!(direction_seeds(1, 0), (0x9e37_79b9_7f4a_7c16, 3));
        assert_ne!(direction_seeds(1, 1), direction_seeds(1, 0));
    }

    #[test]
    fn a_lab_report_is_read_and_compared_path_by_path() {
        let json = serde_json::json!({
            "congestion_control": "reno",
            "duration_s": 2.0,
            "interval_ms": 100,
            "load_average": [0.5, 0.7],
            "paths": [{"path": 0}],
            "variants": {
                "mptcp": {"goodput_mbit": 1.0, "flows": []},
                "sum": {"goodput_mbit": 9.0, "flows": [
                    {"path": 0, "goodput_mbit": 9.0, "retransmits": 12, "series_mbit": [8.0, 9.0]}
                ]},
            }
        });
        let lab = LabRun::from_json(&json).unwrap();
        assert_eq!(lab.flows.len(), 1);
        assert_eq!(lab.flows[0].retransmits, Some(12));
        let scenario = CheckScenario {
            name: "one".into(),
            duration: Duration::from_secs(2),
            seed: 1,
            paths: vec![path(10, 10, 64)],
        };
        let out = run(&scenario, Some(&lab), &Model::default());
        assert!(out.checks.iter().all(|c| c.1), "{:?}", out.checks);
        let rows = &out.report.rows;
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].source.as_deref(), Some("sim"));
        assert_eq!(rows[1].variant.as_deref(), Some("sum"));
        let ratio = rows[1].sim_over_lab.unwrap();
        assert!(
            (ratio - rows[0].goodput_mbit.unwrap() / 9.0).abs() < 0.01,
            "{ratio}"
        );

        let e = LabRun::from_json(&serde_json::json!({"variants": {"mptcp": {}}})).unwrap_err();
        assert_eq!(e, LabReportError::NoPerPathVariant);
        assert!(e.to_string().contains("--variants sum,best_single"), "{e}");
    }
}

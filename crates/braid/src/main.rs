//! The `braid` command.

mod bench_cmd;
mod daemon_cmd;
mod forward_cmd;
mod lab_cmd;
mod lab_ptcp;
mod lab_tunnel;
mod relay;
mod spec;
mod transfer_cmd;

use anyhow::{bail, Context, Result};
use braid_proto::credit::CreditConfig;
use braid_proto::resequence::{ResequenceMode, ResequencerConfig};
use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};
use braid_proto::striper::{MarkerConfig, MarkerPosition, StriperConfig};
use braid_proto::time::Duration;
use braid_sim::experiments::{self, Output};
use braid_sim::source::{Arrivals, SourceConfig};
use braid_sim::Scenario;
use clap::{Parser, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The flag SIGINT and SIGTERM set once [`stop_signal`] has installed its handler.
static STOP: OnceLock<Result<Arc<AtomicBool>, String>> = OnceLock::new();

/// From the first call on, SIGINT and SIGTERM no longer kill the process: they set the flag
/// returned, so a command stops cleanly (a daemon takes its routes down, a transfer resets
/// its connection). One flag for every caller: the handler can be installed only once.
fn stop_signal() -> Result<Arc<AtomicBool>> {
    STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
            .map(|()| stop)
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(|e| anyhow::anyhow!("cannot install the SIGINT/SIGTERM handler: {e}"))
}

/// Whether SIGINT or SIGTERM came since [`stop_signal`] was first called.
fn stop_requested() -> bool {
    STOP.get()
        .is_some_and(|s| s.as_ref().is_ok_and(|s| s.load(Ordering::Relaxed)))
}

/// braid: bond several links into one (strIPe striping with logical reception).
#[derive(Parser, Debug)]
#[command(name = "braid", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main demo: as root, the lab demo (three dissimilar emulated links, real TCP through
    /// braid beside Linux MPTCP, single paths and their sum); otherwise the simulator's
    /// experiments.
    Demo {
        /// Output directory.
        #[arg(long, default_value = "out")]
        out: PathBuf,
    },
    /// Run one end of a bond (client or server) in the foreground.
    Up(daemon_cmd::UpArgs),
    /// Send one file over pTCP inside braid's secure session, one micro-flow per path of the
    /// client's config (no TUN needed; not while `braid up` holds the same sockets).
    Send(transfer_cmd::SendArgs),
    /// Receive one file sent with `braid send`, verify its length and SHA-256, and exit.
    Recv(transfer_cmd::RecvArgs),
    /// Forward TCP over pTCP inside the session: the client's --listen port to the server's
    /// --target, one pTCP connection per TCP connection (not beside `braid up` of the config).
    Forward(forward_cmd::ForwardArgs),
    /// Show what a running daemon's paths are doing.
    Status(daemon_cmd::StatusArgs),
    /// Take a client's path out of use, or give it back, while the daemon runs.
    Path(daemon_cmd::PathArgs),
    /// Print a new private key (base64).
    Genkey,
    /// Read a private key on stdin and print its public key.
    Pubkey,
    Lab(lab_cmd::LabArgs),
    /// Forward a path through this host (the pTCP paper's overlay, section 4.3): UDP from
    /// each client address to --to over an upstream socket of its own, and the answers back.
    /// The relay holds no key and sees only ciphertext.
    Relay(relay::RelayArgs),
    /// The deterministic simulator: the papers' experiments, or a scenario of your own.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// Per-class service (JoBS) tools.
    Qos {
        #[command(subcommand)]
        command: QosCommand,
    },
    /// Per-packet costs of the protocol cores, measured on this machine.
    Bench {
        #[command(subcommand)]
        command: bench_cmd::BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
enum QosCommand {
    /// Turn a QoSbox/ALTQ JoBS configuration (the QoSbox paper's Figure 1 syntax) into the
    /// `[qos]` table of braid.toml, printed on stdout.
    Import {
        /// The ALTQ configuration file (`-` for stdin).
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Table I / Fig. 15: SRR, GRR, RR, RFQ with and without logical reception over a 10 Mbit/s
    /// link and one swept from 4 to 26 Mbit/s.
    StripeThroughput(ExperimentArgs),
    /// Section 6.2: alternating 1000/200-byte packets on two equal links, SRR vs GRR.
    GrrWorstCase(ExperimentArgs),
    /// Lemma 3.4: max |bytes_i - K q_i| against the largest packet, SRR and RFQ.
    Fairness(ExperimentArgs),
    /// Theorem 5.1: time to FIFO after loss stops; misordering vs marker interval and position.
    Resync(ExperimentArgs),
    /// QoSbox paper Table 1 / Figs. 8-9: JoBS on a 100 Mbit/s bottleneck, four classes with
    /// delay, loss and rate bounds and proportional differentiation.
    Qosbox(QosboxArgs),
    /// BAG paper Table I: TCP over 50/100/200 kbit/s paths with MTCP, ASI, EDPF, WRR, WRR with
    /// a buffer and PET-BMP; 1 s on the slow path; cross traffic and 1% loss; a halved path.
    Bag(ExperimentArgs),
    /// pTCP paper Figure 4: pTCP, striping over multiple sockets and the sum of independent
    /// flows over (a) a 500 kbit/s 400 ms path and a 100 ms path of 1 to 10 times its rate,
    /// (b) 2 to 5 paths, (c) 2 to 5 paths fluctuating between 20% and 100% of their rates.
    PtcpFig4(ExperimentArgs),
    /// pTCP paper Figure 6(a): one connection of weight 1 to 100 (w micro-flows on one path)
    /// against 9 regular connections at a 100 Mbit/s RED bottleneck of 240 ms.
    PtcpWeights(ExperimentArgs),
    /// pTCP's micro-flow congestion controllers (NewReno, CUBIC, BBR): a 4 Mbit/s 80 ms path
    /// with 1% random loss, the same path without, and two paths of 40 and 200 ms.
    PtcpCc(ExperimentArgs),
    /// The simulator's TCP model against the lab's kernel TCP: one model TCP (set up like
    /// Linux with reno) per path of a lab scenario, over the lab emulator's link model in
    /// virtual time, beside the per-path figures of a `braid lab run --json` report.
    TcpCheck(TcpCheckArgs),
    /// All the experiments, one subdirectory of --out each.
    All(ExperimentArgs),
    /// List the experiments (all of them run by `sim all` but tcp-check, which needs a lab
    /// scenario).
    List,
    /// Run one scenario of your own and print what it measured.
    Run(Box<RunArgs>),
}

#[derive(Parser, Debug)]
struct ExperimentArgs {
    /// Output directory for results.json, results.csv and the SVG plots.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Seed: a run is fixed by the commit, the experiment and the seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Parser, Debug)]
struct TcpCheckArgs {
    /// The lab scenario to simulate (e.g. examples/lab/two-path.toml).
    #[arg(long, value_name = "SCENARIO.toml")]
    scenario: PathBuf,
    /// Output directory for results.json, results.csv and the SVG plots.
    #[arg(long, default_value = "out/tcp-check")]
    out: PathBuf,
    /// A lab report of the same scenario to compare with, from
    /// `braid lab run SCENARIO.toml --variants sum,best_single --congestion-control reno --json LAB.json`.
    #[arg(long, value_name = "LAB.json")]
    lab: Option<PathBuf>,
    /// Seed of the links' loss and jitter draws (default: the scenario's, as the lab seeds them).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Parser, Debug)]
struct QosboxArgs {
    #[command(flatten)]
    common: ExperimentArgs,
    /// Adjust rates on every T-th arrival (QoSbox paper section 3.3).
    #[arg(long, default_value_t = 1, value_name = "T")]
    sample_every: u32,
    /// Which bound gives way: loss-first (the paper's) or delay-first.
    #[arg(long, default_value = "loss-first")]
    relaxation: String,
    /// While minimum rates exceed the link: greedy (greedy_alloc) or drop (Figure 4, 14-17).
    #[arg(long, default_value = "greedy")]
    feasibility: String,
}

#[derive(Parser, Debug)]
struct RunArgs {
    /// A path, repeated once per path: RATE[,delay=D][,jitter=D][,loss=P%]
    /// [,ge=PGB%:PBG%:LG%:LB%][,loss-window=START-END][,outage=START-END].
    /// Example: --link 10mbit,delay=5ms --link 20mbit,delay=30ms,jitter=3ms,loss=1%
    #[arg(long = "link", required = true, value_name = "SPEC")]
    links: Vec<String>,
    /// Striping scheduler: srr, grr (or wrr), rr, rfq, edpf (on the links' rates) or pet
    /// (edpf and pet need --resequence sequence or none; pet needs sequence).
    #[arg(long, default_value = "srr")]
    scheduler: String,
    /// Resequencing at the receiver: logical, sequence or none.
    #[arg(long, default_value = "logical")]
    resequence: String,
    /// Packet sizes: fixed:N, uniform:MIN-MAX, bimodal:SMALL,LARGE,P_LARGE, alternating or
    /// trace:FILE (one size per line).
    #[arg(long, default_value = "bimodal:200,1400,0.5")]
    sizes: String,
    /// Poisson arrivals at this many packets per second (default: a backlogged source).
    #[arg(long, value_name = "PPS")]
    poisson: Option<f64>,
    /// A marker every this many rounds on each path (0: no markers).
    #[arg(long, default_value_t = 1)]
    marker_interval: u64,
    /// Marker position in the round: start, middle or end.
    #[arg(long, default_value = "end")]
    marker_position: String,
    /// Receiver hold time before it gives up on a missing packet (e.g. 100ms); `none` waits
    /// for markers.
    #[arg(long, default_value = "100ms")]
    hold: String,
    /// Credit flow control with a receive buffer of this many bytes (default: off).
    #[arg(long, value_name = "BYTES")]
    credits: Option<u64>,
    /// Transmit queue limit per path, bytes. EDPF and PET (without --equalize-delay) place a
    /// packet on a slower path only once the faster ones hold a backlog of the difference in
    /// delay, so they need queues of about the fast paths' rate times that difference.
    #[arg(long, default_value_t = 16384)]
    queue: u64,
    /// With --resequence sequence: the receiver holds what arrives on a faster path until a
    /// packet sent at the same time on the slowest would have arrived, and PET schedules for
    /// that, as the daemon does by default (`[bond] equalize_delay`).
    #[arg(long)]
    equalize_delay: bool,
    /// Virtual time to simulate.
    #[arg(long, default_value = "3s")]
    duration: String,
    /// Deliveries before this are not counted in goodput.
    #[arg(long, default_value = "500ms")]
    warmup: String,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the measurements as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn qos_import(file: &std::path::Path) -> Result<()> {
    let text = if file == std::path::Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let imported =
        braid_qos::altq::import(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut t = toml::Table::new();
    t.insert(
        "qos".into(),
        toml::Value::try_from(&imported.config).context("encoding the [qos] table")?,
    );
    println!(
        "# imported from {} (ALTQ interface {}); paste into braid.toml",
        file.display(),
        imported.interface
    );
    print!(
        "{}",
        toml::to_string(&t).context("encoding the [qos] table")?
    );
    Ok(())
}

fn main() {
    // Exit quietly when stdout is closed early (`braid status | head`), like other CLI tools.
    // SAFETY: restoring the default disposition of SIGPIPE at start-up, before any threads.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim { command } => sim(command),
        Command::Bench { command } => bench_cmd::run(command),
        Command::Qos {
            command: QosCommand::Import { file },
        } => qos_import(&file),
        Command::Up(args) => daemon_cmd::up(&args),
        Command::Status(args) => daemon_cmd::status(&args),
        Command::Path(args) => daemon_cmd::path(&args),
        Command::Send(args) => transfer_cmd::send(&args),
        Command::Recv(args) => transfer_cmd::recv(&args),
        Command::Forward(args) => forward_cmd::forward(&args),
        Command::Genkey => daemon_cmd::genkey(),
        Command::Pubkey => daemon_cmd::pubkey(),
        Command::Lab(args) => lab_cmd::run(args),
        Command::Relay(args) => relay::run(&args),
        Command::Demo { out } => demo(out),
    };
    if let Err(e) = result {
        eprintln!("braid: error: {e:#}");
        std::process::exit(1);
    }
}

fn demo(out: PathBuf) -> Result<()> {
    if braid_lab::is_root() {
        return lab_cmd::default_demo(out.join("lab-demo"));
    }
    eprintln!(
        "braid demo: not root, so no network namespaces: running the simulator's experiments instead (run as root for the lab demo)"
    );
    sim(SimCommand::All(ExperimentArgs {
        out,
        seed: 1,
        quiet: false,
    }))
}

fn sim(command: SimCommand) -> Result<()> {
    let (name, args) = match command {
        SimCommand::List => {
            for name in experiments::NAMES {
                println!("{name}");
            }
            // Not in `sim all`: it needs a lab scenario (--scenario).
            println!("tcp-check");
            eprintln!(
                "(tcp-check needs --scenario SCENARIO.toml, so `braid sim all` leaves it out)"
            );
            return Ok(());
        }
        SimCommand::Run(args) => return run_scenario(&args),
        SimCommand::All(args) => {
            let mut failed = Vec::new();
            for name in experiments::NAMES {
                let run = |seed, progress: experiments::Progress<'_>| {
                    experiments::run(name, seed, progress).expect("name from NAMES")
                };
                if !run_one(name, &args.out.join(name), &args, &run)? {
                    failed.push(name);
                }
            }
            if !failed.is_empty() {
                bail!("claims did not hold in: {}", failed.join(", "));
            }
            return Ok(());
        }
        SimCommand::StripeThroughput(a) => ("stripe-throughput", a),
        SimCommand::GrrWorstCase(a) => ("grr-worst-case", a),
        SimCommand::Fairness(a) => ("fairness", a),
        SimCommand::Resync(a) => ("resync", a),
        SimCommand::Bag(a) => ("bag", a),
        SimCommand::PtcpFig4(a) => ("ptcp-fig4", a),
        SimCommand::PtcpWeights(a) => ("ptcp-weights", a),
        SimCommand::PtcpCc(a) => ("ptcp-cc", a),
        SimCommand::Qosbox(a) => return qosbox(&a),
        SimCommand::TcpCheck(a) => return tcp_check(&a),
    };
    claims_held(run_one(name, &args.out, &args, &|seed, progress| {
        experiments::run(name, seed, progress).expect("name checked")
    })?)
}

fn claims_held(held: bool) -> Result<()> {
    if held {
        Ok(())
    } else {
        bail!("some of the paper's claims did not hold; see the checks above")
    }
}

/// `sim tcp-check`: the TCP model over a lab scenario's paths, beside the lab's figures.
fn tcp_check(args: &TcpCheckArgs) -> Result<()> {
    use braid_sim::experiments::tcp_check::{self, CheckPath, CheckScenario, LabRun, Model};
    let scenario = braid_lab::Scenario::from_file(&args.scenario).map_err(anyhow::Error::msg)?;
    if scenario.mode == braid_lab::Mode::Direct {
        bail!(
            "{}: mode = \"direct\" has no emulated links to simulate; give an emulated scenario",
            args.scenario.display()
        );
    }
    let paths = scenario
        .paths
        .iter()
        .filter_map(|p| p.direction_configs())
        .map(|(forward, reverse)| CheckPath { forward, reverse })
        .collect();
    let name = scenario.name.clone().unwrap_or_else(|| {
        args.scenario
            .file_stem()
            .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned())
    });
    let check = CheckScenario {
        name,
        duration: Duration::from_nanos(scenario.duration.as_nanos() as u64),
        seed: args.seed.unwrap_or(scenario.seed),
        paths,
    };
    let lab = match &args.lab {
        None => None,
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the lab report {}", file.display()))?;
            let json: serde_json::Value = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not JSON: give the file `braid lab run --json` wrote",
                    file.display()
                )
            })?;
            Some(LabRun::from_json(&json).with_context(|| format!("in {}", file.display()))?)
        }
    };
    let started = Instant::now();
    let output = tcp_check::run(&check, lab.as_ref(), &Model::default());
    let dir = &args.out;
    write_output("tcp-check", &output, dir, started)?;
    if let Some(l) = &lab {
        println!(
            "  lab: {} (load average {:?}, congestion control {})",
            l.command.as_deref().unwrap_or("command not recorded"),
            l.load_average,
            l.congestion_control
        );
    }
    claims_held(output.checks.iter().all(|c| c.1))
}

/// `sim qosbox`, with the JoBS settings the flags give (Table 1's service either way).
fn qosbox(args: &QosboxArgs) -> Result<()> {
    let mut config = braid_qos::JobsConfig::table1(experiments::qosbox::CAPACITY_BPS);
    config.sample_every = args.sample_every;
    config.relaxation = match args.relaxation.as_str() {
        "loss-first" => braid_qos::Relaxation::LossFirst,
        "delay-first" => braid_qos::Relaxation::DelayFirst,
        other => bail!("--relaxation {other}: use loss-first or delay-first"),
    };
    config.feasibility = match args.feasibility.as_str() {
        "greedy" => braid_qos::Feasibility::Greedy,
        "drop" => braid_qos::Feasibility::Drop,
        other => bail!("--feasibility {other}: use greedy or drop"),
    };
    config.validate().context("in --sample-every")?;
    let a = &args.common;
    claims_held(run_one("qosbox", &a.out, a, &|seed, progress| {
        experiments::qosbox::run_with(seed, progress, &config)
    })?)
}

/// `--scheduler` and `--resequence` that work together, or the flag to give: the logical
/// receiver simulates the sender's scheduler, which pet (it looks at the packet and the
/// clock) does not allow, and pet's striper numbers its packets only for `sequence`.
fn causal_enough(kind: SchedulerKind, mode: ResequenceMode) -> Result<()> {
    match (kind, mode) {
        (SchedulerKind::Pet, ResequenceMode::Sequence) => Ok(()),
        (SchedulerKind::Pet, _) => bail!(
            "--scheduler pet needs --resequence sequence: it is not causal (it looks at the \
             packet and the clock), so a logical receiver cannot simulate it, and its pairs \
             are told apart by sequence numbers"
        ),
        // EDPF is not causal either: the receiver needs the sequence numbers.
        (SchedulerKind::Edpf, ResequenceMode::Logical) => bail!(
            "--scheduler edpf needs --resequence sequence (or none): it is not causal (it \
             looks at the clock), so a logical receiver cannot simulate it"
        ),
        _ => Ok(()),
    }
}

fn run_scenario(args: &RunArgs) -> Result<()> {
    let links = args
        .links
        .iter()
        .map(|l| spec::link(l))
        .collect::<Result<Vec<_>>>()?;
    if links.len() > braid_proto::MAX_PATHS {
        bail!("{} links given: braid bonds at most 64 paths", links.len());
    }
    let kind: SchedulerKind = args.scheduler.parse()?;
    let mode: ResequenceMode = args.resequence.parse().map_err(anyhow::Error::msg)?;
    causal_enough(kind, mode)?;
    if args.equalize_delay && mode != ResequenceMode::Sequence {
        bail!("--equalize-delay needs --resequence sequence: only sequence numbers tell the receiver when a packet was sent");
    }
    let position: MarkerPosition = args.marker_position.parse().map_err(anyhow::Error::msg)?;
    let sizes = spec::sizes(&args.sizes)?;
    let rates: Vec<u64> = links.iter().map(|l| l.rate_bps).collect();
    let mut sched = SchedulerConfig::new(kind, rates.clone());
    sched.max_packet = sizes.max().max(1);
    sched.seed = args.seed;
    // What braid's header adds to each packet on a link: EDPF counts it in each packet's
    // time on the link (without it, its model of the links ran ahead of them).
    sched.overhead_bytes = braid_wire::data_overhead(mode == ResequenceMode::Sequence) as u32;
    sched.quanta()?;
    let mut striper = StriperConfig::new(sched.clone());
    striper.sequence_numbers = mode == ResequenceMode::Sequence;
    striper.queue_limit_bytes = args.queue.max(u64::from(sched.max_packet));
    striper.receiver_equalizes = args.equalize_delay;
    // PET measures with padding pairs of its own, as the daemon's does.
    striper.pet_padding = kind == SchedulerKind::Pet;
    striper.markers = MarkerConfig {
        interval_rounds: args.marker_interval,
        position,
    };
    let mut receiver = ResequencerConfig::new(mode, sched);
    receiver.equalize_delay = args.equalize_delay;
    receiver.hold = match args.hold.as_str() {
        "none" => None,
        h => Some(spec::duration(h).context("in --hold")?),
    };
    let credits = args
        .credits
        .map(|bytes| CreditConfig::proportional(bytes, &rates, Duration::from_millis(10)));
    let arrivals = match args.poisson {
        Some(pps) if pps.is_finite() && pps > 0.0 => Arrivals::Poisson { rate_pps: pps },
        Some(pps) => bail!("--poisson {pps}: give a positive number of packets per second"),
        None => Arrivals::Backlogged,
    };
    let duration = spec::duration(&args.duration).context("in --duration")?;
    let warmup = spec::duration(&args.warmup).context("in --warmup")?;
    if warmup >= duration {
        bail!("--warmup must be shorter than --duration");
    }
    let scenario = Scenario {
        links,
        source: SourceConfig { sizes, arrivals },
        striper,
        receiver,
        credits,
        link_overhead_bytes: 0,
        duration,
        warmup,
        watch_markers_after: None,
    };
    let started = Instant::now();
    let r = braid_sim::run(&scenario, args.seed)?;
    let wall = started.elapsed().as_secs_f64();
    let sum_bps: u64 = rates.iter().sum();
    let window = (duration - warmup).as_secs_f64();
    let summary = serde_json::json!({
        "scheme": kind.name(),
        "resequence": mode.name(),
        "equalize_delay": args.equalize_delay,
        "link_mbit": rates.iter().map(|&r| r as f64 / 1e6).collect::<Vec<_>>(),
        "sum_mbit": sum_bps as f64 / 1e6,
        "goodput_mbit": r.goodput_bps / 1e6,
        "goodput_ratio": r.goodput_bps / sum_bps as f64,
        "sent_packets": r.sent_packets,
        "delivered": r.delivered,
        "out_of_order": r.out_of_order,
        "link_lost": r.link_lost,
        "declared_lost": r.receiver.lost,
        "link_utilisation": r.link_sent_bytes.iter().zip(&rates)
            .map(|(&b, &rate)| b as f64 * 8.0 / (rate as f64 * duration.as_secs_f64()))
            .collect::<Vec<_>>(),
        "pet_estimate_mbit": r.pet_estimates_bps.iter()
            .map(|e| e.map(|b| b as f64 / 1e6))
            .collect::<Vec<_>>(),
        "max_buffered_bytes": r.max_buffered_bytes,
        "marker_skips": r.receiver.marker_skips,
        "marker_resets": r.receiver.marker_resets,
        "hold_skips": r.receiver.hold_skips,
        "credit_stalls": r.striper.credit_stalls,
        "source_drops": r.source_drops,
        "events": r.events,
        "events_per_second": r.events as f64 / wall.max(1e-9),
        "measured_seconds": window,
        "seed": args.seed,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["measure", "value"]);
    if let serde_json::Value::Object(m) = &summary {
        for (k, v) in m {
            let v = match v {
                serde_json::Value::Number(n) if n.is_f64() => {
                    format!("{:.4}", n.as_f64().unwrap_or(0.0))
                }
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|x| match x.as_f64() {
                        Some(f) if x.is_f64() => format!("{f:.3}"),
                        _ => x.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            table.add_row([k.as_str(), v.as_str()]);
        }
    }
    println!("{table}");
    Ok(())
}

/// Run one experiment; returns whether all its checks held.
fn run_one(
    name: &str,
    dir: &Path,
    args: &ExperimentArgs,
    experiment: &dyn Fn(u64, experiments::Progress<'_>) -> Output,
) -> Result<bool> {
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>18} [{bar:30}] {pos}/{len} runs {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(name.to_owned());
    let started = Instant::now();
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let output = experiment(args.seed, &progress);
    bar.finish_and_clear();
    write_output(name, &output, dir, started)?;
    Ok(output.checks.iter().all(|c| c.1))
}

/// Write an experiment's results and plots into `dir` and print its summary.
fn write_output(name: &str, output: &Output, dir: &Path, started: Instant) -> Result<()> {
    output
        .report
        .write(dir)
        .with_context(|| format!("cannot write results to {}", dir.display()))?;
    for (file, plot) in &output.plots {
        plot.write_svg(&dir.join(file))
            .with_context(|| format!("cannot write plot {}", dir.join(file).display()))?;
    }
    print_summary(name, output, dir, started.elapsed().as_secs_f64());
    Ok(())
}

fn print_summary(name: &str, output: &Output, dir: &Path, secs: f64) {
    println!("\n{name} (seed {}), {secs:.1} s", output.report.seed);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(output.columns.iter().copied());
    for row in &output.report.rows {
        let value = serde_json::to_value(row).unwrap_or_default();
        table.add_row(output.columns.iter().map(|c| {
            match value.get(*c) {
                None | Some(serde_json::Value::Null) => String::new(),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("+"),
                Some(v) => v.to_string(),
            }
        }));
    }
    println!("{table}");
    for (claim, held) in &output.checks {
        println!("  [{}] {claim}", if *held { "ok" } else { "FAILED" });
    }
    let mut files = vec!["results.json".to_owned(), "results.csv".to_owned()];
    files.extend(output.plots.iter().map(|p| p.0.clone()));
    println!("  wrote {} in {}", files.join(", "), dir.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_run_names_the_flag_a_scheduler_needs() {
        let e = causal_enough(SchedulerKind::Pet, ResequenceMode::Logical)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--resequence sequence"), "{e}");
        assert!(
            !e.contains("resequence = "),
            "a TOML key is no CLI flag: {e}"
        );
        causal_enough(SchedulerKind::Pet, ResequenceMode::Sequence).unwrap();
        causal_enough(SchedulerKind::Srr, ResequenceMode::Logical).unwrap();
        causal_enough(SchedulerKind::Edpf, ResequenceMode::Sequence).unwrap();
        let e = causal_enough(SchedulerKind::Edpf, ResequenceMode::Logical)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--resequence sequence"), "{e}");
    }

    #[test]
    fn sim_run_help_lists_every_scheduler_it_runs() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let run = cli
            .find_subcommand_mut("sim")
            .and_then(|s| s.find_subcommand_mut("run"))
            .expect("sim run");
        let help = run.render_long_help().to_string();
        for name in ["srr", "grr", "rr", "rfq", "edpf", "pet"] {
            assert!(help.contains(name), "{name} missing from: {help}");
        }
    }
}

//! `braid lab`: the real-kernel lab. Network namespaces joined by braid's userspace link
//! emulator, a built-in bulk TCP transfer, and the variants `braid`, `mptcp`, `best_single`
//! and `sum` side by side. Needs root. See `docs/lab.md`.

use anyhow::{bail, Context, Result};
use braid_lab::runner::{Observer, Silent, Tick, VariantReport};
use braid_lab::{LabReport, RunOptions, Scenario, TunnelLauncher, Variant};
use braid_sim::report::{Plot, Series};
use clap::{Args, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The real-kernel lab: namespaces, braid's link emulator, bulk TCP (needs root).
#[derive(Args, Debug)]
#[command(about = "The real-kernel lab: namespaces, braid's link emulator, bulk TCP (needs root)")]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand, Debug)]
enum LabCommand {
    /// Run a scenario file: every variant it lists, one after the other, over the same testbed.
    Run(RunArgs),
    /// Three dissimilar links (10 Mbit/s 10 ms, 4 Mbit/s 40 ms, 1 Mbit/s 150 ms): live
    /// per-path rates, a final table and a plot of goodput over time per variant.
    Demo(DemoArgs),
    /// Build a scenario's testbed and keep it up until Ctrl-C, to try things by hand.
    Up(UpArgs),
    /// Remove namespaces left behind by lab runs that were killed (SIGKILL).
    Clean,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The scenario (TOML; every key is in docs/lab.md).
    scenario: PathBuf,
    /// Write the results as JSON here.
    #[arg(long, value_name = "OUT.json")]
    json: Option<PathBuf>,
    /// Write a plot of goodput over time per variant here (SVG).
    #[arg(long, value_name = "OUT.svg")]
    plot: Option<PathBuf>,
    /// Run these variants instead of the scenario's (comma-separated: braid, braid_accel,
    /// ptcp, mptcp, best_single, sum).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    /// Run each transfer this many seconds instead of the scenario's duration_s.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// TCP congestion control for every flow instead of the scenario's (e.g. cubic, bbr); the
    /// ptcp variant's micro-flows take cubic, reno or bbr (anything else, or none: bbr, as
    /// the kernel's default in the lab).
    #[arg(long, value_name = "NAME")]
    congestion_control: Option<String>,
    /// The braid variant's scheduler instead of the scenario's `[braid] scheduler` (srr,
    /// edpf, pet, wrr...; with pet the paths' rates are not given to braid).
    #[arg(long, value_name = "NAME")]
    scheduler: Option<String>,
    /// Set a key of the braid variant's `[braid]` table (braid.toml's `[bond]` keys), e.g.
    /// `--bond adaptive=true --bond backup_rtt_multiple=2`; the value is TOML. Repeatable.
    #[arg(long = "bond", value_name = "KEY=VALUE")]
    bond: Vec<String>,
    /// No live display.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Directory for results.json and goodput.svg.
    #[arg(long, default_value = "out/lab-demo")]
    out: PathBuf,
    /// Seconds per transfer.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Run these variants (comma-separated; default: every variant that can run).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    /// TCP congestion control for every flow (default: the kernel's).
    #[arg(long, value_name = "NAME")]
    congestion_control: Option<String>,
    /// No live display.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct UpArgs {
    /// The scenario whose paths to build.
    scenario: PathBuf,
}

/// The demo's links, as a scenario (the same as `examples/lab/three-path.toml`).
const DEMO_SCENARIO: &str = r#"
name = "demo: three dissimilar links"
duration_s = 10
[[path]]
rate_mbit = 10.0
delay_ms = 10.0
queue_kb = 64
[[path]]
rate_mbit = 4.0
delay_ms = 40.0
queue_kb = 64
[[path]]
rate_mbit = 1.0
delay_ms = 150.0
queue_kb = 32
"#;

/// `braid demo` as root: the lab demo with its defaults.
pub fn default_demo(out: PathBuf) -> Result<()> {
    demo(&DemoArgs {
        out,
        duration: 10.0,
        variants: None,
        congestion_control: None,
        quiet: false,
    })
}

/// Run `braid lab ...`.
pub fn run(args: LabArgs) -> Result<()> {
    match args.command {
        LabCommand::Run(a) => run_file(&a),
        LabCommand::Demo(a) => demo(&a),
        LabCommand::Up(a) => up(&a),
        LabCommand::Clean => clean(),
    }
}

/// The braid variant's tunnel. `None` until the daemon (`braid up`) exists; then return a
/// launcher that starts it in the testbed's namespaces.
fn tunnel_launcher() -> Option<Box<dyn TunnelLauncher>> {
    Some(Box::new(crate::lab_tunnel::DaemonLauncher))
}

fn parse_variants(list: &[String]) -> Result<Vec<Variant>> {
    let mut out = Vec::new();
    for v in list {
        let v: Variant = v.trim().parse().map_err(anyhow::Error::msg)?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        bail!(
            "--variants is empty: give some of braid, braid_accel, ptcp, mptcp, best_single, sum"
        );
    }
    Ok(out)
}

fn set_duration(s: &mut Scenario, seconds: f64, flag: &str) -> Result<()> {
    if !(seconds.is_finite() && (0.5..=3600.0).contains(&seconds)) {
        bail!("{flag} {seconds}: give seconds from 0.5 to 3600");
    }
    s.duration = Duration::from_secs_f64(seconds);
    Ok(())
}

fn need_root() -> Result<()> {
    if !braid_lab::is_root() {
        bail!(
            "the lab needs root for network namespaces: run it as root (e.g. sudo braid lab ...)"
        );
    }
    Ok(())
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn run_file(a: &RunArgs) -> Result<()> {
    let mut scenario = Scenario::from_file(&a.scenario)?;
    if let Some(v) = &a.variants {
        scenario.variants = parse_variants(v)?;
    }
    if let Some(d) = a.duration {
        set_duration(&mut scenario, d, "--duration")?;
    }
    if let Some(cc) = &a.congestion_control {
        scenario.congestion_control = Some(cc.clone());
    }
    if let Some(s) = &a.scheduler {
        scenario
            .braid
            .insert("scheduler".into(), toml::Value::String(s.clone()));
    }
    for kv in &a.bond {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--bond {kv}: write KEY=VALUE, e.g. adaptive=true"))?;
        let value: toml::Table = toml::from_str(&format!("v = {v}")).or_else(|_| {
            // A bare word is a string: --bond scheduler=pet.
            toml::from_str(&format!("v = {:?}", v))
        })?;
        scenario
            .braid
            .insert(k.trim().to_owned(), value["v"].clone());
    }
    need_root()?;
    let report = execute(&scenario, a.quiet)?;
    if let Some(path) = &a.json {
        write_json(&report, path)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &a.plot {
        plot(&report, path)?;
        eprintln!("wrote {}", path.display());
    }
    finish(&report)
}

fn demo(a: &DemoArgs) -> Result<()> {
    let mut scenario = Scenario::parse(DEMO_SCENARIO).context("the built-in demo scenario")?;
    set_duration(&mut scenario, a.duration, "--duration")?;
    scenario.variants = match &a.variants {
        Some(v) => parse_variants(v)?,
        None if tunnel_launcher().is_some() => Variant::ALL.to_vec(),
        None => vec![Variant::Mptcp, Variant::BestSingle, Variant::Sum],
    };
    if let Some(cc) = &a.congestion_control {
        scenario.congestion_control = Some(cc.clone());
    }
    need_root()?;
    let report = execute(&scenario, a.quiet)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    write_json(&report, &a.out.join("results.json"))?;
    plot(&report, &a.out.join("goodput.svg"))?;
    eprintln!(
        "wrote {} and {}",
        a.out.join("results.json").display(),
        a.out.join("goodput.svg").display()
    );
    finish(&report)
}

fn execute(scenario: &Scenario, quiet: bool) -> Result<LabReport> {
    let options = RunOptions {
        tunnel: tunnel_launcher(),
        ptcp: Some(Box::new(crate::lab_ptcp::Launcher)),
    };
    let started = Instant::now();
    let mut report = if quiet {
        braid_lab::run(scenario, &options, &mut Silent)?
    } else {
        let mut live = Live::new(scenario);
        braid_lab::run(scenario, &options, &mut live)?
    };
    report.command = Some(command_line());
    if !quiet {
        eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    }
    println!("{}", table(&report));
    Ok(report)
}

fn finish(report: &LabReport) -> Result<()> {
    let failed = report.failures();
    if failed.is_empty() {
        return Ok(());
    }
    let list = failed
        .iter()
        .map(|v| format!("{}: {}", v.name, v.error.as_deref().unwrap_or("")))
        .collect::<Vec<_>>()
        .join("; ");
    bail!("{} variant(s) did not run: {list}", failed.len())
}

fn write_json(report: &LabReport, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn table(report: &LabReport) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "variant",
        "goodput Mbit/s",
        "/ sum",
        "retransmits",
        "max stall ms",
        "reordering",
        "notes",
    ]);
    for v in &report.variants {
        let mut notes = Vec::new();
        if let Some(e) = &v.error {
            notes.push(e.clone());
        }
        if let Some(b) = v.best_path {
            let per: Vec<String> = v
                .flows
                .iter()
                .map(|f| format!("p{} {:.2}", f.path, f.goodput_mbit))
                .collect();
            notes.push(format!("best: path {b} ({})", per.join(", ")));
        } else if v.name == "sum" {
            let per: Vec<String> = v
                .flows
                .iter()
                .map(|f| format!("p{} {:.2}", f.path, f.goodput_mbit))
                .collect();
            notes.push(per.join(", "));
        } else if v.flows.iter().any(|f| f.dscp.is_some()) {
            let per: Vec<String> = v
                .flows
                .iter()
                .map(|f| {
                    let rtt = f
                        .tcp_info
                        .as_ref()
                        .map_or(String::new(), |t| format!(" rtt {:.0} ms", t.rtt_ms));
                    format!("dscp {} {:.2}{rtt}", f.dscp.unwrap_or(0), f.goodput_mbit)
                })
                .collect();
            notes.push(per.join(", "));
        }
        if let Some(p) = &v.probe {
            notes.push(format!(
                "probe dscp {}: rtt p50 {} p95 {} max {} ms, {}/{} back",
                p.dscp,
                fmt_opt(p.rtt_ms_p50, 1),
                fmt_opt(p.rtt_ms_p95, 1),
                fmt_opt(p.rtt_ms_max, 1),
                p.received,
                p.sent
            ));
        }
        if let Some(s) = v
            .flows
            .first()
            .and_then(|f| f.tcp_info.as_ref())
            .and_then(|t| t.subflows)
        {
            if v.name == "mptcp" {
                notes.push(format!("{s} subflows"));
            }
        }
        t.add_row([
            v.name.clone(),
            fmt_opt(v.goodput_mbit, 2),
            fmt_opt(v.efficiency, 3),
            v.retransmits.map_or_else(|| "-".into(), |r| r.to_string()),
            fmt_opt(v.max_stall_ms, 0),
            v.reordering.map_or_else(|| "-".into(), |r| r.to_string()),
            notes.join("; "),
        ]);
    }
    let cap = match (report.capacity_mbit, report.tcp_payload_capacity_mbit) {
        (Some(c), Some(p)) => format!(
            "capacity {c:.2} Mbit/s of frames ({p:.2} Mbit/s of TCP payload), {} s per transfer, TCP {}",
            report.duration_s, report.congestion_control
        ),
        _ => format!(
            "unshaped veths, {} s per transfer, TCP {}",
            report.duration_s, report.congestion_control
        ),
    };
    format!("{t}\n{cap}")
}

/// Average consecutive 100 ms bins into 500 ms points, so the plot stays readable.
fn smooth(series: &[f64], interval_s: f64) -> Vec<(f64, f64)> {
    const K: usize = 5;
    series
        .chunks(K)
        .enumerate()
        .map(|(i, c)| {
            let t = (i * K) as f64 * interval_s + c.len() as f64 * interval_s / 2.0;
            (t, c.iter().sum::<f64>() / c.len() as f64)
        })
        .collect()
}

fn plot(report: &LabReport, path: &Path) -> Result<()> {
    let interval_s = report.interval_ms as f64 / 1e3;
    let mut series: Vec<Series> = report
        .variants
        .iter()
        .filter(|v| v.error.is_none() && !v.series_mbit.is_empty())
        .map(|v| Series {
            name: match v.best_path {
                Some(b) => format!("{} (path {b})", v.name),
                None => v.name.clone(),
            },
            points: smooth(&v.series_mbit, interval_s),
            dashed: false,
        })
        .collect();
    if let Some(c) = report.tcp_payload_capacity_mbit {
        series.push(Series {
            name: "TCP payload capacity".into(),
            points: vec![(0.0, c), (report.duration_s, c)],
            dashed: true,
        });
    }
    let title = match &report.scenario {
        Some(n) => format!("goodput over time: {n}"),
        None => "goodput over time".into(),
    };
    Plot {
        title,
        x_label: "time (s)".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: false,
        log_y: false,
        series,
    }
    .write_svg(path)
    .with_context(|| format!("writing {}", path.display()))
}

/// The live display: a progress bar per transfer with the per-path rates, or a line a second
/// when stderr is not a terminal.
struct Live {
    bar: Option<ProgressBar>,
    tty: bool,
    last_line: Instant,
    label: String,
    rates: Vec<String>,
}

impl Live {
    fn new(scenario: &Scenario) -> Live {
        let rates = scenario
            .paths
            .iter()
            .map(|p| match &p.forward {
                Some(f) => format!("{}/{}ms", f.rate_mbit, f.delay_ms),
                None => "veth".into(),
            })
            .collect();
        Live {
            bar: None,
            tty: std::io::stderr().is_terminal(),
            last_line: Instant::now(),
            label: String::new(),
            rates,
        }
    }

    fn line(&self, t: &Tick) -> String {
        let paths: Vec<String> = t
            .path_mbit
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let cfg = self.rates.get(i).map(String::as_str).unwrap_or("");
                format!("p{i}[{cfg}] {r:6.2}")
            })
            .collect();
        format!(
            "{:>24} {:5.1}/{:.0}s  goodput {:7.2} Mbit/s | {}",
            self.label,
            t.elapsed.as_secs_f64(),
            t.duration.as_secs_f64(),
            t.goodput_mbit,
            paths.join("  ")
        )
    }
}

impl Observer for Live {
    fn transfer_started(&mut self, label: &str, duration: Duration) {
        self.label = label.to_string();
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.tty {
            let b = ProgressBar::new(duration.as_millis() as u64);
            b.set_style(
                ProgressStyle::with_template("{bar:20} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.bar = Some(b);
        } else {
            eprintln!("{label}: {} s transfer", duration.as_secs_f64());
        }
        self.last_line = Instant::now();
    }

    fn tick(&mut self, t: &Tick) {
        let line = self.line(t);
        if let Some(b) = &self.bar {
            b.set_position(t.elapsed.as_millis() as u64);
            b.set_message(line);
        } else if self.last_line.elapsed() >= Duration::from_secs(1) {
            eprintln!("{line}");
            self.last_line = Instant::now();
        }
    }

    fn variant_finished(&mut self, r: &VariantReport) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        match (&r.error, r.goodput_mbit) {
            (Some(e), _) => eprintln!("{}: {e}", r.name),
            (None, Some(g)) => eprintln!(
                "{}: {g:.2} Mbit/s, {} retransmits, longest stall {:.0} ms{}",
                r.name,
                r.retransmits.map_or_else(|| "?".into(), |x| x.to_string()),
                r.max_stall_ms.unwrap_or(0.0),
                cpu_note(r)
            ),
            _ => {}
        }
    }

    fn note(&mut self, msg: &str) {
        if self.bar.is_none() {
            eprintln!("{msg}");
        }
    }
}

/// CPU use of a finished variant: the lab process (the TCP ends) and the machine in cores over
/// the transfer, and for `braid` the daemons' CPU time since they started.
fn cpu_note(r: &VariantReport) -> String {
    let mut note = String::new();
    if let Some(c) = &r.cpu {
        note = format!(
            "; CPU: TCP ends {:.2} cores, machine {:.2} cores",
            c.lab_cores, c.machine_cores
        );
    }
    if let Some(st) = &r.tunnel_status {
        let cpu = |end: &str| {
            let v = &st[end];
            Some(v["cpu_user_s"].as_f64()? + v["cpu_system_s"].as_f64()?)
        };
        if let (Some(c), Some(s)) = (cpu("client"), cpu("server")) {
            note.push_str(&format!(", daemons {c:.2} + {s:.2} CPU-s"));
        }
    }
    note
}

fn up(a: &UpArgs) -> Result<()> {
    let scenario = Scenario::from_file(&a.scenario)?;
    need_root()?;
    let links = match scenario.mode {
        braid_lab::Mode::Direct => braid_lab::Links::Direct {
            paths: scenario.paths.len(),
        },
        braid_lab::Mode::Emulated => braid_lab::Links::Emulated(
            scenario
                .paths
                .iter()
                .filter_map(|p| p.direction_configs())
                .collect(),
        ),
    };
    let tb = braid_lab::Testbed::new(&links, scenario.seed)?;
    tb.restart_schedules();
    println!("client namespace: {}", tb.client().name());
    println!("server namespace: {}", tb.server().name());
    for p in tb.paths() {
        println!(
            "path {}: client {} dev {}  <->  server {} dev {}{}",
            p.index,
            p.client_addr,
            p.client_dev,
            p.server_addr,
            p.server_dev,
            p.emulator
                .as_ref()
                .map(|e| format!("  (emulator: {})", e.name()))
                .unwrap_or_default()
        );
    }
    println!(
        "run a command in a namespace with: ip netns exec {} COMMAND",
        tb.client().name()
    );
    println!("Ctrl-C removes everything.");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn clean() -> Result<()> {
    need_root()?;
    let removed = braid_lab::testbed::clean_stale()?;
    if removed.is_empty() {
        println!("nothing to remove");
    }
    for n in removed {
        println!("removed {n}");
    }
    let left = braid_lab::testbed::lab_namespaces();
    if !left.is_empty() {
        println!("still in use by running processes: {}", left.join(", "));
    }
    Ok(())
}

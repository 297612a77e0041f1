//! pTCP's micro-flow congestion controllers side by side (issue 6): NewReno, CUBIC and BBR on
//! one path with random loss, on the same path without loss, and over two paths of different
//! round-trip times striped by one connection, and over the three paths of issue 5's BAG
//! scenario behind drop-tail queues shallower than the slow paths' bandwidth-delay products,
//! with the usual receive buffer and with one small enough to freeze the flows.
//!
//! The lossy path is the lab's: 4 Mbit/s, 40 ms each way, a drop-tail queue of 64 KB and 1%
//! random loss each way (a radio link, not congestion). A loss-based controller halves its
//! window on every such loss; BBR (`braid_ptcp::congestion::Bbr`) keeps its bandwidth
//! estimate. Goodput is what the receiving application read between [`WARMUP`] and [`END`]
//! of virtual time; the RTT is each flow's latest sample, averaged over a 10 ms grid in the
//! same window (so a controller that fills the queue shows it).

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::{Config, CongestionAlgorithm, StripedConnection};

use super::ptcp::{drain, fill, loaded, Link, Net, PathSpec};
use super::{par_map, round, Output, Progress};
use crate::report::{Plot, Report, Row, Series};

/// Measurement window.
pub const WARMUP: Duration = Duration::from_secs(10);
/// End of a run.
pub const END: Duration = Duration::from_secs(60);
/// The lab's lossy path: 4 Mbit/s, 80 ms round trip.
pub const LOSSY_PATH: PathSpec = PathSpec::steady(4_000_000, 80);
/// Its drop-tail queue.
pub const LOSSY_QUEUE_BYTES: u64 = 64 << 10;
/// Its random loss, each way.
pub const LOSS: f64 = 0.01;
/// The two paths of the two-flow run: 4 Mbit/s at 40 ms and 2 Mbit/s at 200 ms.
pub const TWO_PATHS: [PathSpec; 2] = [
    PathSpec::steady(4_000_000, 40),
    PathSpec::steady(2_000_000, 200),
];

/// The BAG paths of issue 5 (the lab's `bag.toml`): 8 Mbit/s at 20 ms, 4 at 200 ms and 2 at
/// 500 ms round trip ...
pub const BAG_PATHS: [PathSpec; 3] = [
    PathSpec::steady(8_000_000, 20),
    PathSpec::steady(4_000_000, 200),
    PathSpec::steady(2_000_000, 500),
];
/// ... each behind a 64 KB drop-tail queue, as in the lab: less than the 100 and 125 KB
/// bandwidth-delay products of the slow two.
pub const BAG_QUEUE_BYTES: u64 = 64 << 10;

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct CcRun {
    /// Goodput, bit/s.
    pub goodput_bps: f64,
    /// Each flow's mean RTT over the window.
    pub rtt_mean: Vec<Duration>,
    /// Each flow's smallest RTT sample.
    pub rtt_min: Vec<Duration>,
    /// Datagrams the links dropped (queue full or random loss), both ways.
    pub dropped: u64,
    /// Datagrams put on the links, both ways.
    pub offered: u64,
    /// The longest time the receiving application waited for data in the window.
    pub stall_max: Duration,
}

/// One bulk connection of `algorithm` over `links` (its `PathId(i)` is `links[i]`), with a
/// receive buffer of twice the paper's rule at the RTTs under load of `specs`.
fn run_links(links: Vec<[Link; 2]>, specs: &[PathSpec], algorithm: CongestionAlgorithm) -> CcRun {
    let buffer = 2 * Config::receive_buffer_for(&loaded(specs, false));
    run_links_with_buffer(links, buffer, algorithm)
}

/// [`run_links`] with a receive buffer of `receive_buffer_bytes`.
fn run_links_with_buffer(
    links: Vec<[Link; 2]>,
    receive_buffer_bytes: u64,
    algorithm: CongestionAlgorithm,
) -> CcRun {
    let mut config = Config {
        receive_buffer_bytes,
        ..Config::default()
    };
    config.flow.congestion.algorithm = algorithm;
    let paths: Vec<usize> = (0..links.len()).collect();
    let ids: Vec<PathId> = (0..links.len()).map(|i| PathId(i as u8)).collect();
    let mut net = Net::with_links(links);
    let client = StripedConnection::connect(config, net.now, &ids);
    net.add(client, config, &paths);
    let (warm, end) = (Instant::ZERO + WARMUP, Instant::ZERO + END);
    let tick = Duration::from_millis(10);
    let chunk = vec![0x5a; 64 << 10];
    let mut buf = vec![0; 256 << 10];
    let (mut read, mut at_warm) = (0, None);
    let (mut last_read, mut stall_max) = (warm, Duration::ZERO);
    let mut next_tick = warm;
    let mut rtt_sum = vec![Duration::ZERO; paths.len()];
    let mut ticks = 0u32;
    loop {
        let c = &mut net.conns[0];
        fill(&mut c.client, &chunk);
        let n = drain(&mut c.server, &mut buf);
        read += n;
        if n > 0 && net.now >= warm && net.now <= end {
            stall_max = stall_max.max(net.now.saturating_duration_since(last_read));
            last_read = net.now;
        }
        if at_warm.is_none() && net.now >= warm {
            at_warm = Some(read);
        }
        while net.now >= next_tick && next_tick < end {
            for (sum, f) in rtt_sum.iter_mut().zip(c.client.flows()) {
                *sum += f.rtt().latest();
            }
            ticks += 1;
            next_tick = next_tick + tick;
        }
        if !net.step(end) {
            break;
        }
    }
    let flows = net.conns[0].client.flows();
    CcRun {
        goodput_bps: (read - at_warm.unwrap_or(0)) as f64 * 8.0 / (END - WARMUP).as_secs_f64(),
        rtt_mean: rtt_sum.iter().map(|&s| s / ticks.max(1)).collect(),
        rtt_min: flows.iter().map(|f| f.rtt().min()).collect(),
        dropped: net
            .links
            .iter()
            .map(|l| l[0].dropped() + l[1].dropped())
            .sum(),
        offered: net
            .links
            .iter()
            .map(|l| l[0].offered() + l[1].offered())
            .sum(),
        stall_max: stall_max.max(end.saturating_duration_since(last_read)),
    }
}

/// [`LOSSY_PATH`] with its queue and `loss` each way, drawn from `seed`.
pub fn run_lossy(algorithm: CongestionAlgorithm, loss: f64, seed: u64) -> CcRun {
    let link = |s| Link::lossy(LOSSY_PATH, LOSSY_QUEUE_BYTES, loss, s);
    let links = vec![[link(seed), link(seed ^ 0x5555)]];
    run_links(links, &[LOSSY_PATH], algorithm)
}

/// [`TWO_PATHS`] (drop-tail queues of one bandwidth-delay product, no random loss).
pub fn run_two_paths(algorithm: CongestionAlgorithm) -> CcRun {
    let links = TWO_PATHS
        .iter()
        .map(|&p| [Link::new(p), Link::new(p)])
        .collect();
    run_links(links, &TWO_PATHS, algorithm)
}

/// [`BAG_PATHS`] behind [`BAG_QUEUE_BYTES`] each, no random loss; with a receive buffer of
/// `receive_buffer_bytes`, or twice the paper's rule.
pub fn run_shallow(algorithm: CongestionAlgorithm, receive_buffer_bytes: Option<u64>) -> CcRun {
    let link = |p| Link::lossy(p, BAG_QUEUE_BYTES, 0.0, 0);
    let links = BAG_PATHS.iter().map(|&p| [link(p), link(p)]).collect();
    match receive_buffer_bytes {
        Some(b) => run_links_with_buffer(links, b, algorithm),
        None => run_links(links, &BAG_PATHS, algorithm),
    }
}

/// The small receive buffer of the `shallow-1mib` scenario: it, not the paths, limits the
/// connection, so the flows are frozen in turn.
pub const SMALL_RECEIVE_BUFFER: u64 = 1 << 20;

/// The scenarios, in the order of the table: name and capacity in bit/s.
pub const SCENARIOS: [(&str, u64); 5] = [
    ("lossy", LOSSY_PATH.rate_bps),
    ("lossless", LOSSY_PATH.rate_bps),
    ("two-paths", TWO_PATHS[0].rate_bps + TWO_PATHS[1].rate_bps),
    ("shallow", BAG_RATE),
    ("shallow-1mib", BAG_RATE),
];
/// The sum of [`BAG_PATHS`]' rates, bit/s.
const BAG_RATE: u64 = BAG_PATHS[0].rate_bps + BAG_PATHS[1].rate_bps + BAG_PATHS[2].rate_bps;
/// The controllers compared, by name.
pub const ALGORITHMS: [&str; 3] = ["newreno", "cubic", "bbr"];

/// The experiment: every controller in every scenario; `seed` draws the random loss.
pub fn run(seed: u64, progress: Progress<'_>) -> Output {
    let points: Vec<(usize, &str)> = (0..SCENARIOS.len())
        .flat_map(|s| ALGORITHMS.iter().map(move |&a| (s, a)))
        .collect();
    let runs = par_map(
        &points,
        |_, &(s, a)| {
            let algorithm = a.parse().expect("a built-in name");
            match SCENARIOS[s].0 {
                "lossy" => run_lossy(algorithm, LOSS, seed),
                "lossless" => run_lossy(algorithm, 0.0, seed),
                "shallow" => run_shallow(algorithm, None),
                "shallow-1mib" => run_shallow(algorithm, Some(SMALL_RECEIVE_BUFFER)),
                _ => run_two_paths(algorithm),
            }
        },
        progress,
    );
    let get = |scenario: &str, algorithm: &str| {
        points
            .iter()
            .zip(&runs)
            .find(|((s, a), _)| SCENARIOS[*s].0 == scenario && *a == algorithm)
            .map(|(_, r)| r.clone())
            .expect("every point ran")
    };
    let rows = points
        .iter()
        .zip(&runs)
        .map(|(&(s, a), r)| {
            let (name, capacity) = SCENARIOS[s];
            let rtt_ms: Vec<f64> = r.rtt_mean.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            Row {
                sweep: Some(name.into()),
                scheme: Some(a.into()),
                paths: Some(r.rtt_mean.len() as u64),
                sum_mbit: Some(capacity as f64 / 1e6),
                goodput_mbit: Some(round(r.goodput_bps / 1e6, 3)),
                goodput_ratio: Some(round(r.goodput_bps / capacity as f64, 3)),
                delay_ms_mean: Some(round(rtt_ms.iter().sum::<f64>() / rtt_ms.len() as f64, 1)),
                delay_ms_max: Some(round(rtt_ms.iter().copied().fold(0.0, f64::max), 1)),
                loss_pct: Some(round(100.0 * r.dropped as f64 / r.offered.max(1) as f64, 2)),
                stall_ms_max: Some(round(r.stall_max.as_secs_f64() * 1e3, 1)),
                ..Row::default()
            }
        })
        .collect();
    let rate = LOSSY_PATH.rate_bps as f64;
    let (bbr_lossy, cubic_lossy) = (get("lossy", "bbr"), get("lossy", "cubic"));
    let (bbr_clean, cubic_clean) = (get("lossless", "bbr"), get("lossless", "cubic"));
    let bbr_two = get("two-paths", "bbr");
    let bbr_shallow = get("shallow", "bbr");
    let bbr_window = get("shallow-1mib", "bbr");
    let checks = vec![
        (
            "1% random loss: BBR at least 80% of the path, CUBIC below 60%".into(),
            bbr_lossy.goodput_bps >= 0.8 * rate && cubic_lossy.goodput_bps < 0.6 * rate,
        ),
        (
            "no random loss: BBR at least 85% of the path, mean RTT at most twice the base and \
             below CUBIC's"
                .into(),
            bbr_clean.goodput_bps >= 0.85 * rate
                && bbr_clean.rtt_mean[0] <= 2 * LOSSY_PATH.rtt
                && bbr_clean.rtt_mean[0] < cubic_clean.rtt_mean[0],
        ),
        (
            "two BBR flows of 40 and 200 ms fill at least 85% of both paths, each RTT at most \
             twice its base"
                .into(),
            bbr_two.goodput_bps >= 0.85 * SCENARIOS[2].1 as f64
                && bbr_two
                    .rtt_mean
                    .iter()
                    .zip(TWO_PATHS)
                    .all(|(&r, p)| r <= 2 * p.rtt),
        ),
        (
            "three BAG paths behind 64 KB queues: BBR fills at least 90% of them and the \
             receiver never waits 100 ms for data"
                .into(),
            bbr_shallow.goodput_bps >= 0.9 * BAG_RATE as f64
                && bbr_shallow.stall_max < Duration::from_millis(100),
        ),
        (
            "the same with a 1 MiB receive buffer, which freezes the flows in turn: BBR fills \
             at least 90% of them"
                .into(),
            bbr_window.goodput_bps >= 0.9 * BAG_RATE as f64,
        ),
    ];
    let plot = Plot {
        title: "pTCP micro-flow congestion control: 1: 1% loss, 2: lossless, 3: two paths, 4: shallow queues, 5: same, 1 MiB buffer".into(),
        x_label: "scenario".into(),
        y_label: "goodput / capacity".into(),
        log_x: false,
        log_y: false,
        series: ALGORITHMS
            .iter()
            .map(|&a| Series {
                name: a.into(),
                points: SCENARIOS
                    .iter()
                    .enumerate()
                    .map(|(i, &(s, c))| (i as f64 + 1.0, get(s, a).goodput_bps / c as f64))
                    .collect(),
                dashed: false,
            })
            .collect(),
    };
    Output {
        report: Report {
            experiment: "ptcp-cc".into(),
            seed,
            rows,
        },
        plots: vec![("ptcp-cc.svg".into(), plot)],
        columns: vec![
            "sweep",
            "scheme",
            "paths",
            "sum_mbit",
            "goodput_mbit",
            "goodput_ratio",
            "delay_ms_mean",
            "delay_ms_max",
            "loss_pct",
            "stall_ms_max",
        ],
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claims (BBR >= 80% under 1% loss where CUBIC < 60%; >= 85% without loss at a mean
    /// RTT <= 2x base; two flows of 40 and 200 ms fill >= 85% of both paths; the BAG paths
    /// behind shallow queues filled >= 90% without a 100 ms wait, and >= 90% with a 1 MiB
    /// receive buffer) hold at seed 1
    /// (`braid sim ptcp-cc` prints the table).
    #[test]
    fn claims_hold() {
        let out = run(1, &|_, _| {});
        for (claim, held) in &out.checks {
            assert!(held, "{claim}: {:?}", out.report.rows);
        }
    }

    /// Random loss on a long fat path (20 Mbit/s, 200 ms, a queue of one BDP, 1% each way)
    /// does not bound BBR's window: small rounds of Startup that lose one packet are over 2%,
    /// and the first version of the loss bound held such a flow at 0.28-0.41 of the path at
    /// seeds 2, 4, 5 and 6 (v1 and this version: 0.92-0.94 at seeds 1-6, `--release`).
    #[test]
    fn random_loss_on_a_long_fat_path_leaves_bbr_its_rate() {
        let spec = PathSpec::steady(20_000_000, 200);
        let bdp = spec.rate_bps * 200 / 8000;
        let link = |s| Link::lossy(spec, bdp, LOSS, s);
        let r = run_links(
            vec![[link(2), link(2 ^ 0x5555)]],
            &[spec],
            CongestionAlgorithm::Bbr,
        );
        assert!(r.goodput_bps >= 0.85 * spec.rate_bps as f64, "{r:?}");
    }

    #[test]
    fn deterministic() {
        let a = run_lossy(CongestionAlgorithm::Bbr, LOSS, 3);
        assert_eq!(a, run_lossy(CongestionAlgorithm::Bbr, LOSS, 3));
    }
}

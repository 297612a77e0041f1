//! pTCP's micro-flow congestion controllers side by side (issue 6): NewReno, CUBIC and BBR on
//! one path with random loss, on the same path without loss, and over two paths of different
//! round-trip times striped by one connection.
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
}

/// One bulk connection of `algorithm` over `links` (its `PathId(i)` is `links[i]`), with a
/// receive buffer of twice the paper's rule at the RTTs under load of `specs`.
fn run_links(links: Vec<[Link; 2]>, specs: &[PathSpec], algorithm: CongestionAlgorithm) -> CcRun {
    let mut config = Config {
        receive_buffer_bytes: 2 * Config::receive_buffer_for(&loaded(specs, false)),
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
    let mut next_tick = warm;
    let mut rtt_sum = vec![Duration::ZERO; paths.len()];
    let mut ticks = 0u32;
    loop {
        let c = &mut net.conns[0];
        fill(&mut c.client, &chunk);
        read += drain(&mut c.server, &mut buf);
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

/// The scenarios, in the order of the table: name and capacity in bit/s.
pub const SCENARIOS: [(&str, u64); 3] = [
    ("lossy", LOSSY_PATH.rate_bps),
    ("lossless", LOSSY_PATH.rate_bps),
    ("two-paths", TWO_PATHS[0].rate_bps + TWO_PATHS[1].rate_bps),
];
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
                ..Row::default()
            }
        })
        .collect();
    let rate = LOSSY_PATH.rate_bps as f64;
    let (bbr_lossy, cubic_lossy) = (get("lossy", "bbr"), get("lossy", "cubic"));
    let (bbr_clean, cubic_clean) = (get("lossless", "bbr"), get("lossless", "cubic"));
    let bbr_two = get("two-paths", "bbr");
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
    ];
    let plot = Plot {
        title: "pTCP micro-flow congestion control: 1: 1% loss, 2: lossless, 3: two paths".into(),
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
        ],
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claims (BBR >= 80% under 1% loss where CUBIC < 60%; >= 85% without loss at a mean
    /// RTT <= 2x base; two flows of 40 and 200 ms fill >= 85% of both paths) hold at seed 1
    /// (`braid sim ptcp-cc` prints the table).
    #[test]
    fn claims_hold() {
        let out = run(1, &|_, _| {});
        for (claim, held) in &out.checks {
            assert!(held, "{claim}: {:?}", out.report.rows);
        }
    }

    #[test]
    fn deterministic() {
        let a = run_lossy(CongestionAlgorithm::Bbr, LOSS, 3);
        assert_eq!(a, run_lossy(CongestionAlgorithm::Bbr, LOSS, 3));
    }
}

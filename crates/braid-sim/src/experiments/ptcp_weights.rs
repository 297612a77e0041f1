//! The pTCP paper's Figure 6(a) (section 4.2, "Weighted Rate Differentiation"): one connection
//! of weight `w` against 9 regular connections at a shared bottleneck.
//!
//! The striped approach of section 4.2: "a connection with weight w is actually composed of w
//! micro-flows of the default weight of one (note that the w micro-flows share the same path)",
//! so it "would theoretically receive w times the bandwidth enjoyed by a default connection
//! provided the aggregate bandwidth can be achieved". Here that connection is one
//! [`StripedConnection::connect_weighted`] with `w` micro-flows on the bottleneck's path, and each
//! regular connection is a `StripedConnection` with one micro-flow (TCP-v: NewReno with SACK, as
//! the paper's TCP-SACK flows).
//!
//! Setup (section 4.2.2, Figure 5): 10 connections of 240 ms round-trip time through one
//! bottleneck whose queue is RED (`Red` in `experiments/ptcp.rs`) with a buffer of one bandwidth-delay
//! product, as the paper's "RED queues with buffer size approximately equal to the
//! bandwidth-delay product of the bottleneck link". The paper does not give the bottleneck's
//! rate in the text. Here it grows with the number of flows, [`bottleneck`]: `(w + 9)` times
//! [`FAIR_SHARE_BPS`] (1 Mbit/s), 10 Mbit/s at w = 1 and 109 Mbit/s at w = 100, so that every
//! one of the `w + 9` flows has a fair-share window of about 24 segments (plus its share of the
//! queue) at every weight: enough to recover from a loss by fast retransmit, as a flow of a
//! real backbone does, and small enough that a flow goes through many AIMD cycles in a run.
//! (With one fixed 100 Mbit/s bottleneck the flows of the w = 1 and 2 runs have windows of
//! about 250 segments and take some 40 s per AIMD cycle: one or two flows' goodput over two
//! minutes then wanders by 15%; see `docs/ptcp.md`.) The paper's 4 short background TCP flows
//! (90 ms) are not modelled. Every sender is backlogged and each connection opens at a seeded
//! time in the first [`START_SPREAD`]. Each connection's receive buffer is twice the paper's
//! rule over the whole bottleneck (its rate times its RTT under load): a hole on one of the
//! weighted connection's flows holds the buffer for a round trip while the other flows go on,
//! and with the rule alone the weighted connection FREEZEs (see `docs/ptcp.md`). Goodput is
//! what each receiving application read between [`WARMUP`] and [`END`] of virtual time,
//! averaged over [`RUNS`] seeds of the RED drops and start times.
//!
//! The claims checked: the weighted connection's goodput is within 10% of `w` times the mean
//! goodput of the regular connections, and within 10% of its fair share `w / (w + 9)` of what
//! the bottleneck delivered, at every weight up to 100.

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::{Config, StripedConnection};

use super::ptcp::{drain, fill, loaded, Conn, Link, Net, PathSpec};
use super::{derive_seed, par_map, round, Output, Progress};
use crate::report::{Plot, Report, Row, Series};

/// Every flow's fair share of the bottleneck, bit/s.
pub const FAIR_SHARE_BPS: u64 = 1_000_000;
/// Every connection's round-trip time (ms), the paper's.
pub const RTT_MS: u64 = 240;

/// The bottleneck of the run at weight `w`: `(w + 9)` fair shares, 240 ms.
pub fn bottleneck(w: u32) -> PathSpec {
    PathSpec::steady((u64::from(w) + REGULAR as u64) * FAIR_SHARE_BPS, RTT_MS)
}
/// The weights of the weighted connection (Figure 6(a)'s range, 1 to 100).
pub const WEIGHTS: [u32; 7] = [1, 2, 5, 10, 20, 50, 100];
/// Regular (weight 1) connections beside the weighted one.
pub const REGULAR: usize = 9;
/// Runs (seeds of the RED drops and the start times) averaged per weight.
pub const RUNS: u64 = 4;
/// The connections open at seeded times in `[0, START_SPREAD)`.
pub const START_SPREAD: Duration = Duration::from_secs(5);
/// Measurement window.
pub const WARMUP: Duration = Duration::from_secs(40);
/// End of a run.
pub const END: Duration = Duration::from_secs(160);

/// What one run measured, in bit/s.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightRun {
    /// The weighted connection's goodput.
    pub weighted_bps: f64,
    /// Each regular connection's goodput.
    pub regular_bps: Vec<f64>,
    /// Datagrams the bottleneck dropped (both directions).
    pub dropped: u64,
}

impl WeightRun {
    /// Mean goodput of the regular connections.
    pub fn regular_mean_bps(&self) -> f64 {
        self.regular_bps.iter().sum::<f64>() / self.regular_bps.len().max(1) as f64
    }
    /// Everything the bottleneck delivered to the applications.
    pub fn total_bps(&self) -> f64 {
        self.weighted_bps + self.regular_bps.iter().sum::<f64>()
    }
}

/// One connection of weight `w` and [`REGULAR`] regular ones over `bottleneck` (RED drawing from
/// `seed`) until `end`; goodput over `[warmup, end]`.
pub fn run_weight(
    bottleneck: PathSpec,
    w: u32,
    seed: u64,
    warmup: Duration,
    end: Duration,
) -> WeightRun {
    let (bps, net) = simulate(bottleneck, w, seed, warmup, end);
    WeightRun {
        weighted_bps: bps[0],
        regular_bps: bps[1..].to_vec(),
        dropped: net.links[0].iter().map(Link::dropped).sum(),
    }
}

/// [`run_weight`]'s simulation: each connection's goodput and the network at the end.
fn simulate(
    bottleneck: PathSpec,
    w: u32,
    seed: u64,
    warmup: Duration,
    end: Duration,
) -> (Vec<f64>, Net) {
    let links = vec![[
        Link::with_red(bottleneck, derive_seed(seed, 0)),
        Link::with_red(bottleneck, derive_seed(seed, 1)),
    ]];
    let mut net = Net::with_links(links);
    let buffer = 2 * Config::receive_buffer_for(&loaded(&[bottleneck], false));
    let config = Config {
        receive_buffer_bytes: buffer,
        send_buffer_bytes: 2 * buffer,
        ..Config::default()
    };
    // Connection 0 is the weighted one. Each opens at its own time in the first
    // [`START_SPREAD`], drawn from the seed, so that no connection is first in every slow start.
    let spread = START_SPREAD.as_nanos() as u64;
    let mut starts: Vec<(Instant, usize)> = (0..=REGULAR)
        .map(|i| {
            let at = derive_seed(seed, 2 + i as u64) % spread.max(1);
            (Instant::from_nanos(at), i)
        })
        .collect();
    starts.sort();
    let mut index = [usize::MAX; REGULAR + 1];
    let chunk = vec![0x5a; 64 << 10];
    let mut buf = vec![0; 1 << 20];
    let mut read = vec![0u64; REGULAR + 1];
    let warm = Instant::ZERO + warmup;
    let end_at = Instant::ZERO + end;
    let mut at_warm = None;
    let mut next = 0;
    loop {
        while next < starts.len() && starts[next].0 <= net.now {
            let (now, i) = (net.now, starts[next].1);
            let client = if i == 0 {
                StripedConnection::connect_weighted(config, now, &[(PathId(0), w)])
            } else {
                StripedConnection::connect(config, now, &[PathId(0)])
            };
            index[i] = net.conns.len();
            net.add(client, config, &[0]);
            next += 1;
        }
        for (i, r) in read.iter_mut().enumerate() {
            if let Some(c) = net.conns.get_mut(index[i]) {
                fill(&mut c.client, &chunk);
                *r += drain(&mut c.server, &mut buf);
            }
        }
        if at_warm.is_none() && net.now >= warm {
            at_warm = Some(read.clone());
        }
        let limit = starts.get(next).map_or(end_at, |s| s.0.min(end_at));
        if !net.step(limit) && limit == end_at {
            break;
        }
    }
    // Back in connection order (they were added in start order).
    let mut slots: Vec<Option<Conn>> = std::mem::take(&mut net.conns)
        .into_iter()
        .map(Some)
        .collect();
    net.conns = index
        .iter()
        .filter_map(|&k| slots.get_mut(k).and_then(Option::take))
        .collect();
    let at_warm = at_warm.unwrap_or_else(|| vec![0; read.len()]);
    let secs = (end - warmup).as_secs_f64();
    let bps: Vec<f64> = read
        .iter()
        .zip(&at_warm)
        .map(|(r, w)| (r - w) as f64 * 8.0 / secs)
        .collect();
    (bps, net)
}

/// The experiment: Figure 6(a), weights [`WEIGHTS`] against [`REGULAR`] regular connections.
pub fn run(seed: u64, progress: Progress<'_>) -> Output {
    let points: Vec<(u32, u64)> = WEIGHTS
        .iter()
        .flat_map(|&w| (0..RUNS).map(move |r| (w, r)))
        .collect();
    let runs = par_map(
        &points,
        |_, &(w, r)| run_weight(bottleneck(w), w, derive_seed(seed, r), WARMUP, END),
        progress,
    );
    // Per weight, means over the runs (Mbit/s): weighted, regular mean, total.
    let mean = |w: u32, f: &dyn Fn(&WeightRun) -> f64| {
        let v: Vec<f64> = points
            .iter()
            .zip(&runs)
            .filter(|((pw, _), _)| *pw == w)
            .map(|(_, run)| f(run))
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64 / 1e6
    };
    let weighted = |w| mean(w, &|r| r.weighted_bps);
    let regular = |w| mean(w, &WeightRun::regular_mean_bps);
    let total = |w| mean(w, &WeightRun::total_bps);
    let share = |w: u32| total(w) * f64::from(w) / (f64::from(w) + REGULAR as f64);
    let mut rows = Vec::new();
    for &w in &WEIGHTS {
        let wf = f64::from(w);
        rows.push(Row {
            scheme: Some("ptcp".into()),
            paths: Some(u64::from(w)),
            ratio: Some(round(weighted(w) / regular(w).max(1e-9), 2)),
            weight: Some(u64::from(w)),
            goodput_mbit: Some(round(weighted(w), 3)),
            ideal_mbit: Some(round(share(w), 3)),
            ..Row::default()
        });
        rows.push(Row {
            scheme: Some("regular".into()),
            paths: Some(1),
            ratio: Some(1.0),
            weight: Some(u64::from(w)),
            goodput_mbit: Some(round(regular(w), 3)),
            ideal_mbit: Some(round(total(w) / (wf + REGULAR as f64), 3)),
            ..Row::default()
        });
    }
    let checks = vec![
        (
            "(a) the weighted connection's goodput within 10% of w times a regular one's, w = 1 to 100"
                .into(),
            WEIGHTS.iter().all(|&w| {
                let ratio = weighted(w) / (f64::from(w) * regular(w)).max(1e-9);
                (0.9..=1.1).contains(&ratio)
            }),
        ),
        (
            "(a) the weighted connection's goodput within 10% of its share w/(w+9) of the bottleneck"
                .into(),
            WEIGHTS.iter().all(|&w| {
                let ratio = weighted(w) / share(w).max(1e-9);
                (0.9..=1.1).contains(&ratio)
            }),
        ),
        (
            "the bottleneck stays busy: total goodput above 85% of its rate at every weight".into(),
            WEIGHTS
                .iter()
                .all(|&w| total(w) > 0.85 * bottleneck(w).rate_bps as f64 / 1e6),
        ),
    ];
    let series = |name: &str, f: &dyn Fn(u32) -> f64, dashed: bool| Series {
        name: name.into(),
        points: WEIGHTS.iter().map(|&w| (f64::from(w), f(w))).collect(),
        dashed,
    };
    let plot = Plot {
        title: "pTCP Figure 6(a): weight w against 9 regular flows, (w+9) Mbit/s, 240 ms".into(),
        x_label: "weight w (micro-flows)".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: true,
        log_y: true,
        series: vec![
            series("ptcp (weight w)", &weighted, false),
            series("ideal: w/(w+9) of the bottleneck", &share, true),
            series(
                "w x regular (mean of 9)",
                &|w| f64::from(w) * regular(w),
                true,
            ),
            series("regular (mean of 9)", &regular, false),
        ],
    };
    Output {
        report: Report {
            experiment: "ptcp-weights".into(),
            seed,
            rows,
        },
        plots: vec![("ptcp-weights.svg".into(), plot)],
        columns: vec![
            "scheme",
            "paths",
            "ratio",
            "weight",
            "goodput_mbit",
            "ideal_mbit",
        ],
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_drops_early_and_evenly() {
        // A 10 Mbit/s link with a 100 ms queue: offered twice its rate, RED drops before the
        // queue is full, and more as the average grows.
        let spec = PathSpec::steady(10_000_000, 100);
        let mut l = Link::with_red(spec, 1);
        let mut t = Instant::ZERO;
        let gap = Duration::from_micros(600); // 1200 B every 0.6 ms: 16 Mbit/s
        let mut accepted = 0;
        for _ in 0..20_000 {
            if l.send(t, 1200).is_some() {
                accepted += 1;
            }
            t = t + gap;
        }
        assert!(l.dropped() > 0);
        // Most of what gets through is what the link can carry.
        let carried = accepted as f64 * 1228.0 * 8.0 / (20_000.0 * 0.0006);
        assert!(carried > 9e6 && carried < 11e6, "{carried}");
    }

    #[test]
    fn two_equal_connections_share_a_bottleneck() {
        // Weight 1 against the regulars, small and short: everyone within a factor of 2 of the
        // mean, the weighted one included (a sanity check of the harness, not the claim).
        let run = run_weight(
            PathSpec::steady(20_000_000, 100),
            1,
            7,
            Duration::from_secs(5),
            Duration::from_secs(20),
        );
        let mean = run.total_bps() / 10.0;
        assert!(run.total_bps() > 15e6, "{}", run.total_bps());
        for g in run.regular_bps.iter().chain([&run.weighted_bps]) {
            assert!(*g > mean / 2.0 && *g < mean * 2.0, "{g} vs {mean}");
        }
    }

    /// Diagnostics: `cargo test --release -p braid-sim --lib weights_debug -- --ignored --nocapture`.
    #[test]
    #[ignore = "diagnostics, prints"]
    fn weights_debug() {
        let w: u32 = std::env::var("W")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let seed: u64 = std::env::var("SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let secs = |k: &str, d: Duration| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(d, Duration::from_secs)
        };
        let mbit: u64 = std::env::var("MBIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        let spec = PathSpec::steady(mbit * 1_000_000, 240);
        let (bps, net) = simulate(spec, w, seed, secs("WARMUP", WARMUP), secs("END", END));
        let mean = bps[1..].iter().sum::<f64>() / 9.0;
        println!(
            "w {w}: weighted {:.3}, regular mean {mean:.3}, ratio/w {:.3}",
            bps[0] / 1e6,
            bps[0] / mean / f64::from(w)
        );
        for (i, (c, g)) in net.conns.iter().zip(&bps).enumerate() {
            let fs = c.client.flow_stats();
            let sum = |f: &dyn Fn(&braid_ptcp::micro_flow::FlowStats) -> u64| -> u64 {
                fs.iter().map(|(_, _, s)| f(s)).sum()
            };
            println!(
                "conn {i}: {:.3} Mbit/s, flows {}, sent {}, rtx {}, fast {}, timeouts {}, shrunk {}, cwnd {:?}, stats {:?}",
                g / 1e6,
                fs.len(),
                sum(&|s| s.packets_sent),
                sum(&|s| s.retransmits),
                sum(&|s| s.fast_retransmits),
                sum(&|s| s.timeouts),
                sum(&|s| s.shrunk),
                c.client.flows().iter().take(3).map(|f| f.window()).collect::<Vec<_>>(),
                c.client.stats(),
            );
        }
        for l in &net.links[0] {
            println!("link: dropped {} early {}", l.dropped(), l.dropped_early());
        }
    }
}

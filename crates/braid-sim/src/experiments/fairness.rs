//! `fairness`: Lemma 3.4 of the stripe paper, and RFQ's probabilistic fairness (section 3.7).
//!
//! Random packet sizes (uniform 64-1500 bytes) and random path rates (1-10 Mbit/s, quanta from
//! the rates); after `K` rounds, `max_i |bytes_i - K q_i|` for SRR against the bound `Max`
//! (the largest packet). RFQ has no rounds: it is measured after the same number of bytes
//! (`K * sum q_i`) with the same weights; its absolute deviation grows like `sqrt(K)` but its
//! deviation relative to `K q_i` shrinks as `K` grows.

use super::{derive_seed, par_map, round, Output, Progress};
use crate::report::{Plot, Report, Row, Series};
use braid_proto::scheduler::{CausalScheduler, SchedulerConfig, SchedulerKind};
use braid_proto::PathId;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Rounds at which deviation is measured.
pub const K_ROUNDS: [u64; 5] = [1, 10, 100, 1_000, 10_000];
/// Path counts.
pub const PATHS: [usize; 3] = [2, 4, 8];
/// Trials per (scheme, paths).
pub const TRIALS: u64 = 20;
/// Largest packet.
pub const MAX_PACKET: u32 = 1500;

/// Deviation of each path after each `K` in [`K_ROUNDS`]: `(K, per-path (bytes, K q_i))`.
pub fn trial(kind: SchedulerKind, paths: usize, seed: u64) -> Vec<(u64, Vec<(u64, u64)>)> {
    // Sizes and rates from one stream, RFQ's shared sequence from another.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(super::derive_seed(seed, 0));
    let rates: Vec<u64> = (0..paths)
        .map(|_| rng.random_range(1_000_000..=10_000_000))
        .collect();
    let mut config = SchedulerConfig::new(SchedulerKind::Srr, rates);
    config.max_packet = MAX_PACKET;
    config.seed = super::derive_seed(seed, 1);
    let quanta: Vec<u64> = config
        .quanta()
        .expect("valid config")
        .into_iter()
        .map(u64::from)
        .collect();
    let kmax = *K_ROUNDS.last().expect("non-empty");
    let mut out = Vec::new();
    match kind {
        SchedulerKind::Srr => {
            let mut s = config.build().expect("valid config");
            // bytes[i][k]: bytes sent on path i in rounds <= k, for k in K_ROUNDS.
            let mut bytes = vec![vec![0u64; K_ROUNDS.len()]; paths];
            loop {
                let p = s.select();
                let round = s.number(p).expect("SRR has rounds").round;
                if (0..paths).all(|i| s.number(PathId(i as u8)).expect("rounds").round > kmax) {
                    break;
                }
                let len = rng.random_range(64..=MAX_PACKET);
                for (j, &k) in K_ROUNDS.iter().enumerate() {
                    if round <= k {
                        bytes[p.index()][j] += u64::from(len);
                    }
                }
                s.update(len);
            }
            for (j, &k) in K_ROUNDS.iter().enumerate() {
                out.push((
                    k,
                    (0..paths).map(|i| (bytes[i][j], k * quanta[i])).collect(),
                ));
            }
        }
        SchedulerKind::Rfq => {
            config.kind = SchedulerKind::Rfq;
            config.rates_bps = quanta.clone();
            let mut s = config.build().expect("valid config");
            let per_round: u64 = quanta.iter().sum();
            let mut bytes = vec![0u64; paths];
            let mut total = 0u64;
            for &k in &K_ROUNDS {
                while total < k * per_round {
                    let len = rng.random_range(64..=MAX_PACKET);
                    bytes[s.select().index()] += u64::from(len);
                    total += u64::from(len);
                    s.update(len);
                }
                out.push((k, (0..paths).map(|i| (bytes[i], k * quanta[i])).collect()));
            }
        }
        other => unreachable!("fairness covers SRR and RFQ, not {other}"),
    }
    out
}

/// Run all trials.
pub fn run(seed: u64, progress: Progress<'_>) -> Output {
    let kinds = [SchedulerKind::Srr, SchedulerKind::Rfq];
    let mut jobs = Vec::new();
    for kind in kinds {
        for paths in PATHS {
            for t in 0..TRIALS {
                jobs.push((kind, paths, t));
            }
        }
    }
    let trials = par_map(
        &jobs,
        |i, &(kind, paths, _)| trial(kind, paths, derive_seed(seed, i as u64)),
        progress,
    );
    let mut rows = Vec::new();
    for kind in kinds {
        for paths in PATHS {
            for (j, &k) in K_ROUNDS.iter().enumerate() {
                let mut max_dev = 0f64;
                let mut rel_sum = 0f64;
                let mut n = 0u64;
                for (job, res) in jobs.iter().zip(&trials) {
                    if job.0 != kind || job.1 != paths {
                        continue;
                    }
                    for &(bytes, ideal) in &res[j].1 {
                        let dev = (bytes as f64 - ideal as f64).abs();
                        max_dev = max_dev.max(dev);
                        rel_sum += dev / ideal as f64;
                        n += 1;
                    }
                }
                rows.push(Row {
                    scheme: Some(kind.name().into()),
                    paths: Some(paths as u64),
                    k_rounds: Some(k),
                    max_deviation_bytes: Some(max_dev),
                    mean_relative_deviation: Some(round(rel_sum / n as f64, 6)),
                    bound_bytes: Some(f64::from(MAX_PACKET)),
                    ..Row::default()
                });
            }
        }
    }
    let of = |kind: &'static str| {
        rows.iter()
            .filter(move |r| r.scheme.as_deref() == Some(kind))
    };
    let srr_ok = of("srr").all(|r| r.max_deviation_bytes <= r.bound_bytes);
    let rfq_shrinks = PATHS.iter().all(|&p| {
        let rel: Vec<f64> = of("rfq")
            .filter(|r| r.paths == Some(p as u64))
            .map(|r| r.mean_relative_deviation.unwrap_or(0.0))
            .collect();
        rel.windows(2).all(|w| w[1] < w[0])
    });
    let series_for = |value: fn(&Row) -> f64| -> Vec<Series> {
        let mut s = Vec::new();
        for kind in kinds {
            for paths in PATHS {
                s.push(Series {
                    name: format!("{} {} paths", kind.name().to_uppercase(), paths),
                    points: of(kind.name())
                        .filter(|r| r.paths == Some(paths as u64))
                        .map(|r| (r.k_rounds.unwrap_or(0) as f64, value(r)))
                        .collect(),
                    dashed: false,
                });
            }
        }
        s
    };
    let mut abs = series_for(|r| r.max_deviation_bytes.unwrap_or(0.0).max(1.0));
    abs.push(Series {
        name: "bound: Max = 1500 bytes".into(),
        points: K_ROUNDS
            .iter()
            .map(|&k| (k as f64, f64::from(MAX_PACKET)))
            .collect(),
        dashed: true,
    });
    let rel = series_for(|r| r.mean_relative_deviation.unwrap_or(0.0).max(1e-7));
    Output {
        report: Report {
            experiment: "fairness".into(),
            seed,
            rows,
        },
        plots: vec![
            (
                "fairness.svg".into(),
                Plot {
                    title: "max |bytes_i - K q_i| after K rounds (Lemma 3.4)".into(),
                    x_label: "rounds K".into(),
                    y_label: "largest deviation (bytes)".into(),
                    log_x: true,
                    log_y: true,
                    series: abs,
                },
            ),
            (
                "fairness-relative.svg".into(),
                Plot {
                    title: "mean |bytes_i - K q_i| / (K q_i)".into(),
                    x_label: "rounds K".into(),
                    y_label: "relative deviation".into(),
                    log_x: true,
                    log_y: true,
                    series: rel,
                },
            ),
        ],
        columns: vec![
            "scheme",
            "paths",
            "k_rounds",
            "max_deviation_bytes",
            "bound_bytes",
            "mean_relative_deviation",
        ],
        checks: vec![
            ("SRR never exceeds the bound (Lemma 3.4)".into(), srr_ok),
            (
                "RFQ's mean relative deviation shrinks as K grows".into(),
                rfq_shrinks,
            ),
        ],
    }
}

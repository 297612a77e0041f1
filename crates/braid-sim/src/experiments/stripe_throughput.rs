//! `stripe-throughput`: the stripe paper's Table I and Figure 15.
//!
//! One 10 Mbit/s link and one swept from 4 to 26 Mbit/s, with skew between them. For SRR, GRR,
//! RR and RFQ, with logical reception on (`logical`) and off (`none`), the goodput of a
//! backlogged source with a random mix of small and large packets. Goodput counts only packets
//! delivered in order, as a reordering-sensitive receiver (TCP in the paper) would use them.

use super::{derive_seed, endpoints, par_map, round, Output, Progress};
use crate::engine::{run as run_scenario, Scenario};
use crate::link::LinkConfig;
use crate::report::{Plot, Report, Row, Series};
use crate::source::{Arrivals, SizeDist, SourceConfig};
use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::time::Duration;

/// Rates of the swept link, Mbit/s.
pub const SWEEP_MBIT: [u64; 12] = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26];

/// The scenario for one point.
pub fn scenario(kind: SchedulerKind, logical: bool, swept_mbit: u64, seed: u64) -> Scenario {
    let rates = [10_000_000, swept_mbit * 1_000_000];
    let mode = if logical {
        ResequenceMode::Logical
    } else {
        ResequenceMode::None
    };
    let (striper, receiver) = endpoints(kind, &rates, mode, seed);
    let mut a = LinkConfig::new(rates[0], Duration::from_millis(5));
    a.jitter = Duration::from_millis(2);
    let mut b = LinkConfig::new(rates[1], Duration::from_millis(15));
    b.jitter = Duration::from_millis(4);
    Scenario {
        links: vec![a, b],
        source: SourceConfig {
            sizes: SizeDist::Bimodal {
                small: 200,
                large: 1400,
                p_large: 0.5,
            },
            arrivals: Arrivals::Backlogged,
        },
        striper,
        receiver,
        credits: None,
        link_overhead_bytes: 0,
        duration: Duration::from_secs(3),
        warmup: Duration::from_millis(500),
        watch_markers_after: None,
    }
}

/// Run the sweep.
pub fn run(seed: u64, progress: Progress<'_>) -> Output {
    let mut points = Vec::new();
    for kind in SchedulerKind::ALL {
        for logical in [true, false] {
            for mbit in SWEEP_MBIT {
                points.push((kind, logical, mbit));
            }
        }
    }
    let rows = par_map(
        &points,
        |i, &(kind, logical, mbit)| {
            let r = run_scenario(
                &scenario(kind, logical, mbit, seed),
                derive_seed(seed, i as u64),
            )
            .expect("experiment configs are valid");
            let sum = 10.0 + mbit as f64;
            let goodput = r.goodput_bps / 1e6;
            Row {
                scheme: Some(kind.name().into()),
                logical_reception: Some(logical),
                link_mbit: Some(vec![10.0, mbit as f64]),
                sum_mbit: Some(sum),
                goodput_mbit: Some(round(goodput, 3)),
                goodput_ratio: Some(round(goodput / sum, 4)),
                out_of_order: Some(r.out_of_order),
                events: Some(r.events),
                ..Row::default()
            }
        },
        progress,
    );
    let mut series = Vec::new();
    for kind in SchedulerKind::ALL {
        for logical in [true, false] {
            series.push(Series {
                name: format!(
                    "{} {}",
                    kind.name().to_uppercase(),
                    if logical {
                        "logical reception"
                    } else {
                        "no resequencing"
                    }
                ),
                points: rows
                    .iter()
                    .filter(|r| {
                        r.scheme.as_deref() == Some(kind.name())
                            && r.logical_reception == Some(logical)
                    })
                    .map(|r| {
                        (
                            r.link_mbit.as_ref().map_or(0.0, |l| l[1]),
                            r.goodput_mbit.unwrap_or(0.0),
                        )
                    })
                    .collect(),
                dashed: false,
            });
        }
    }
    series.push(Series {
        name: "sum of link rates".into(),
        points: SWEEP_MBIT
            .iter()
            .map(|&m| (m as f64, 10.0 + m as f64))
            .collect(),
        dashed: true,
    });
    let srr_lr: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scheme.as_deref() == Some("srr") && r.logical_reception == Some(true))
        .collect();
    let rr_lr: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scheme.as_deref() == Some("rr") && r.logical_reception == Some(true))
        .collect();
    let checks = vec![
        (
            "SRR with logical reception: >= 95% of the summed rate at every point".into(),
            srr_lr
                .iter()
                .all(|r| r.goodput_ratio.unwrap_or(0.0) >= 0.95),
        ),
        (
            "SRR with logical reception: zero misordered packets".into(),
            srr_lr.iter().all(|r| r.out_of_order == Some(0)),
        ),
        (
            "RR with logical reception: within 10% of twice the slower link".into(),
            rr_lr.iter().all(|r| {
                let l = r.link_mbit.as_ref().expect("set");
                let twice = 2.0 * l[0].min(l[1]);
                (r.goodput_mbit.unwrap_or(0.0) - twice).abs() <= 0.1 * twice
            }),
        ),
    ];
    Output {
        report: Report {
            experiment: "stripe-throughput".into(),
            seed,
            rows,
        },
        plots: vec![(
            "stripe-throughput.svg".into(),
            Plot {
                title: "Goodput over a 10 Mbit/s link and a swept link (stripe paper Fig. 15)"
                    .into(),
                x_label: "rate of the swept link (Mbit/s)".into(),
                y_label: "in-order goodput (Mbit/s)".into(),
                log_x: false,
                log_y: false,
                series,
            },
        )],
        columns: vec![
            "scheme",
            "logical_reception",
            "link_mbit",
            "goodput_mbit",
            "goodput_ratio",
            "out_of_order",
        ],
        checks,
    }
}

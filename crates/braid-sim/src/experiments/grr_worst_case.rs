//! `grr-worst-case`: the stripe paper's section 6.2 experiment.
//!
//! Two links of equal rate, packets alternating 1000 and 200 bytes. GRR (which on equal links is
//! round robin) sends every large packet on one link and every small one on the other, so the
//! large-packet link limits the bond; SRR balances bytes and keeps the sum. The paper measured
//! 11.2 Mbit/s for SRR and 6.8 Mbit/s for GRR with two links of about 6 Mbit/s.

use super::{derive_seed, endpoints, par_map, round, Output, Progress};
use crate::engine::{run as run_scenario, Scenario};
use crate::link::LinkConfig;
use crate::report::{Plot, Report, Row, Series};
use crate::source::{Arrivals, SizeDist, SourceConfig};
use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::time::Duration;

/// Link rates swept, Mbit/s (each of the two links).
pub const RATES_MBIT: [u64; 5] = [2, 4, 6, 8, 10];

/// The scenario for one point.
pub fn scenario(kind: SchedulerKind, mbit: u64, seed: u64) -> Scenario {
    let rate = mbit * 1_000_000;
    let (striper, receiver) = endpoints(kind, &[rate, rate], ResequenceMode::Logical, seed);
    Scenario {
        links: vec![
            LinkConfig::new(rate, Duration::from_millis(5)),
            LinkConfig::new(rate, Duration::from_millis(5)),
        ],
        source: SourceConfig {
            sizes: SizeDist::alternating(),
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
    let kinds = [SchedulerKind::Srr, SchedulerKind::Grr];
    let points: Vec<(SchedulerKind, u64)> = kinds
        .iter()
        .flat_map(|&k| RATES_MBIT.iter().map(move |&m| (k, m)))
        .collect();
    let rows = par_map(
        &points,
        |i, &(kind, mbit)| {
            let r = run_scenario(&scenario(kind, mbit, seed), derive_seed(seed, i as u64))
                .expect("experiment configs are valid");
            let sum = 2.0 * mbit as f64;
            let goodput = r.goodput_bps / 1e6;
            Row {
                scheme: Some(kind.name().into()),
                logical_reception: Some(true),
                link_mbit: Some(vec![mbit as f64, mbit as f64]),
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
    let goodput = |kind: &str, m: u64| {
        rows.iter()
            .find(|r| r.scheme.as_deref() == Some(kind) && r.sum_mbit == Some(2.0 * m as f64))
            .and_then(|r| r.goodput_mbit)
            .unwrap_or(0.0)
    };
    let checks = vec![
        (
            "SRR keeps >= 95% of the summed rate at every rate".into(),
            RATES_MBIT
                .iter()
                .all(|&m| goodput("srr", m) >= 0.95 * 2.0 * m as f64),
        ),
        (
            "SRR delivers >= 1.5x GRR at every rate (paper: 11.2 vs 6.8 Mbit/s)".into(),
            RATES_MBIT
                .iter()
                .all(|&m| goodput("srr", m) >= 1.5 * goodput("grr", m)),
        ),
    ];
    let series = kinds
        .iter()
        .map(|k| Series {
            name: k.name().to_uppercase(),
            points: RATES_MBIT
                .iter()
                .map(|&m| (m as f64, goodput(k.name(), m)))
                .collect(),
            dashed: false,
        })
        .chain(std::iter::once(Series {
            name: "sum of link rates".into(),
            points: RATES_MBIT
                .iter()
                .map(|&m| (m as f64, 2.0 * m as f64))
                .collect(),
            dashed: true,
        }))
        .collect();
    Output {
        report: Report {
            experiment: "grr-worst-case".into(),
            seed,
            rows,
        },
        plots: vec![(
            "grr-worst-case.svg".into(),
            Plot {
                title: "Alternating 1000/200-byte packets on two equal links (section 6.2)".into(),
                x_label: "rate of each link (Mbit/s)".into(),
                y_label: "in-order goodput (Mbit/s)".into(),
                log_x: false,
                log_y: false,
                series,
            },
        )],
        columns: vec![
            "scheme",
            "link_mbit",
            "goodput_mbit",
            "goodput_ratio",
            "out_of_order",
        ],
        checks,
    }
}

//! `resync`: marker resynchronisation (stripe paper Theorem 5.1; conference paper section 6.3).
//!
//! SRR with logical reception over two links (10 Mbit/s, 10 ms and 20 Mbit/s, 25 ms, both with
//! jitter). Both links lose packets (data and markers alike) at a given rate for one second; then
//! loss stops. The run measures how long after loss stops the receiver keeps delivering out of
//! order (`resync_ms`: the last inversion, a delivery of a packet older than the one before
//! it), against the bound `marker interval + largest one-way delay` (`bound_ms`), and the `t`
//! of Theorem 5.1 itself (`marker_crossing_ms`: when a marker sent after loss stopped has been
//! received and processed on every path, Appendix B Lemma B.4).
//!
//! Two sweeps: loss from 1% to 90% with a marker at the end of every round (`loss`), and, at a
//! fixed loss, marker interval and position (`markers`). Each row is [`TRIALS`] runs with
//! different seeds: `out_of_order` is their mean, `resync_ms` and `marker_crossing_ms` their
//! maximum, and `within_bound` holds only if every run recovered within the bound and no later
//! than its own marker crossing.

use super::{derive_seed, endpoints, par_map, round, Output, Progress};
use crate::engine::{run as run_scenario, Scenario};
use crate::link::{LinkConfig, LossModel, Window};
use crate::report::{Plot, Report, Row, Series};
use crate::source::{Arrivals, SizeDist, SourceConfig};
use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::{MarkerConfig, MarkerPosition};
use braid_proto::time::{Duration, Instant};

/// Loss rates of the loss sweep, percent.
pub const LOSS_PCT: [f64; 8] = [1.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 90.0];
/// Marker intervals of the marker sweep, rounds.
pub const INTERVALS: [u64; 5] = [1, 2, 4, 8, 16];
/// Loss rate of the marker sweep, percent.
pub const MARKER_SWEEP_LOSS_PCT: f64 = 5.0;
/// Loss period.
pub const LOSS_START: Duration = Duration::from_secs(1);
/// End of the loss period.
pub const LOSS_END: Duration = Duration::from_secs(2);

const RATES: [u64; 2] = [10_000_000, 20_000_000];

/// The scenario for one point.
pub fn scenario(loss_pct: f64, markers: MarkerConfig, seed: u64) -> Scenario {
    let (mut striper, mut receiver) =
        endpoints(SchedulerKind::Srr, &RATES, ResequenceMode::Logical, seed);
    striper.markers = markers;
    // The paper's receiver: wait for markers, no hold timer.
    receiver.hold = None;
    let window = Window {
        start: Instant::ZERO + LOSS_START,
        end: Instant::ZERO + LOSS_END,
    };
    let link = |rate: u64, delay_ms: u64| {
        let mut l = LinkConfig::new(rate, Duration::from_millis(delay_ms));
        l.jitter = Duration::from_millis(2);
        l.loss = LossModel::Bernoulli(loss_pct / 100.0);
        l.loss_windows = Some(vec![window]);
        l
    };
    Scenario {
        links: vec![link(RATES[0], 10), link(RATES[1], 25)],
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
        duration: LOSS_END + Duration::from_millis(1500),
        warmup: Duration::from_millis(500),
        watch_markers_after: Some(Instant::ZERO + LOSS_END),
    }
}

/// The bound of the issue: marker interval (in time) plus the largest one-way delay, where the
/// one-way delay of a marker includes waiting behind a full transmit queue.
pub fn bound(s: &Scenario) -> Duration {
    let quanta = s.striper.scheduler.quanta().expect("valid config");
    let round_bytes: u64 = quanta.iter().map(|&q| u64::from(q)).sum();
    let rate: u64 = s.links.iter().map(|l| l.rate_bps).sum();
    let round_time = braid_proto::time::transmission_time(round_bytes, rate);
    let interval = round_time * s.striper.markers.interval_rounds.max(1) as u32;
    let one_way = s
        .links
        .iter()
        .map(|l| {
            let queue =
                s.striper.queue_limit_bytes + u64::from(s.striper.scheduler.max_packet) + 64;
            l.max_one_way(queue)
        })
        .max()
        .unwrap_or_default();
    interval + one_way
}

/// Independent runs (seeds) behind each row.
pub const TRIALS: u64 = 5;

fn row(sweep: &str, loss_pct: f64, markers: MarkerConfig, seed: u64, index: u64) -> Row {
    let s = scenario(loss_pct, markers, seed);
    let end = Instant::ZERO + LOSS_END;
    let bound = bound(&s);
    let (mut resync, mut crossing) = (Duration::ZERO, Duration::ZERO);
    let (mut out_of_order, mut goodput, mut events) = (0u64, 0f64, 0u64);
    let mut theorem_holds = true;
    for trial in 0..TRIALS {
        let r = run_scenario(&s, derive_seed(seed, index * TRIALS + trial))
            .expect("experiment configs are valid");
        let this_resync = r
            .inversion_times
            .iter()
            .filter(|&&t| t >= end)
            .max()
            .map_or(Duration::ZERO, |&t| t - end);
        let this_crossing = r
            .watched_marker_processed
            .map_or(Duration::MAX, |t| t - end);
        // Theorem 5.1 / Lemma B.4: FIFO from the time t a post-loss marker has been received
        // and processed on every path.
        theorem_holds &= this_resync <= this_crossing;
        resync = resync.max(this_resync);
        crossing = crossing.max(this_crossing);
        out_of_order += r.out_of_order;
        goodput += r.goodput_bps;
        events += r.events;
    }
    let r = RunSummary {
        out_of_order: out_of_order.div_ceil(TRIALS),
        goodput_bps: goodput / TRIALS as f64,
        events,
    };
    Row {
        sweep: Some(sweep.into()),
        scheme: Some("srr".into()),
        logical_reception: Some(true),
        loss_pct: Some(loss_pct),
        marker_interval_rounds: Some(markers.interval_rounds),
        marker_position: Some(markers.position.name().into()),
        out_of_order: Some(r.out_of_order),
        resync_ms: Some(round(resync.as_secs_f64() * 1e3, 3)),
        bound_ms: Some(round(bound.as_secs_f64() * 1e3, 3)),
        marker_crossing_ms: Some(round(crossing.as_secs_f64() * 1e3, 3)),
        within_bound: Some(resync <= bound && theorem_holds),
        goodput_mbit: Some(round(r.goodput_bps / 1e6, 3)),
        events: Some(r.events),
        ..Row::default()
    }
}

struct RunSummary {
    out_of_order: u64,
    goodput_bps: f64,
    events: u64,
}

/// Run both sweeps.
pub fn run(seed: u64, progress: Progress<'_>) -> Output {
    let mut jobs: Vec<(&str, f64, MarkerConfig)> = LOSS_PCT
        .iter()
        .map(|&l| {
            (
                "loss",
                l,
                MarkerConfig {
                    interval_rounds: 1,
                    position: MarkerPosition::End,
                },
            )
        })
        .collect();
    for position in [
        MarkerPosition::Start,
        MarkerPosition::Middle,
        MarkerPosition::End,
    ] {
        for interval in INTERVALS {
            jobs.push((
                "markers",
                MARKER_SWEEP_LOSS_PCT,
                MarkerConfig {
                    interval_rounds: interval,
                    position,
                },
            ));
        }
    }
    let rows = par_map(
        &jobs,
        |i, &(sweep, loss, markers)| row(sweep, loss, markers, seed, i as u64),
        progress,
    );
    let loss_rows = || rows.iter().filter(|r| r.sweep.as_deref() == Some("loss"));
    let marker_rows = |pos: &'static str| {
        rows.iter().filter(move |r| {
            r.sweep.as_deref() == Some("markers") && r.marker_position.as_deref() == Some(pos)
        })
    };
    let checks = vec![
        (
            "every trial of every row recovers FIFO within its bound, and no later than Theorem 5.1's t (up to 90% loss)".into(),
            rows.iter().all(|r| r.within_bound == Some(true)),
        ),
        (
            "more frequent markers, fewer misordered deliveries (interval 1 vs 16, end)".into(),
            {
                let v: Vec<u64> = marker_rows("end").filter_map(|r| r.out_of_order).collect();
                v.first() < v.last()
            },
        ),
        (
            "markers at the start or end of a round misorder less than in the middle (interval 1)"
                .into(),
            {
                let at = |pos: &'static str| {
                    marker_rows(pos)
                        .find(|r| r.marker_interval_rounds == Some(1))
                        .and_then(|r| r.out_of_order)
                        .unwrap_or(0)
                };
                at("start") < at("middle") && at("end") < at("middle")
            },
        ),
    ];
    let plots = vec![
        (
            "resync.svg".into(),
            Plot {
                title: "Time to FIFO after loss stops (Theorem 5.1)".into(),
                x_label: "loss rate during the loss period (%)".into(),
                y_label: "ms after loss stops".into(),
                log_x: false,
                log_y: false,
                series: vec![
                    Series {
                        name: "resync_ms (last inversion)".into(),
                        points: loss_rows()
                            .map(|r| (r.loss_pct.unwrap_or(0.0), r.resync_ms.unwrap_or(0.0)))
                            .collect(),
                        dashed: false,
                    },
                    Series {
                        name: "marker_crossing_ms (t of Theorem 5.1: markers processed on every path)".into(),
                        points: loss_rows()
                            .map(|r| (r.loss_pct.unwrap_or(0.0), r.marker_crossing_ms.unwrap_or(0.0)))
                            .collect(),
                        dashed: false,
                    },
                    Series {
                        name: "bound_ms (marker interval + largest one-way delay)".into(),
                        points: loss_rows()
                            .map(|r| (r.loss_pct.unwrap_or(0.0), r.bound_ms.unwrap_or(0.0)))
                            .collect(),
                        dashed: true,
                    },
                ],
            },
        ),
        (
            "resync-markers.svg".into(),
            Plot {
                title: format!(
                    "Misordered deliveries vs marker interval and position ({MARKER_SWEEP_LOSS_PCT}% loss)"
                ),
                x_label: "marker interval (rounds)".into(),
                y_label: "misordered deliveries".into(),
                log_x: true,
                log_y: false,
                series: ["start", "middle", "end"]
                    .iter()
                    .map(|&pos| Series {
                        name: format!("marker at {pos} of round"),
                        points: marker_rows(pos)
                            .map(|r| {
                                (
                                    r.marker_interval_rounds.unwrap_or(1) as f64,
                                    r.out_of_order.unwrap_or(0) as f64,
                                )
                            })
                            .collect(),
                        dashed: false,
                    })
                    .collect(),
            },
        ),
    ];
    Output {
        report: Report {
            experiment: "resync".into(),
            seed,
            rows,
        },
        plots,
        columns: vec![
            "sweep",
            "loss_pct",
            "marker_interval_rounds",
            "marker_position",
            "out_of_order",
            "resync_ms",
            "marker_crossing_ms",
            "bound_ms",
            "within_bound",
        ],
        checks,
    }
}

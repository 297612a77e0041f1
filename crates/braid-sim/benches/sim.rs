//! Simulator speed: events per second of [`braid_sim::run`] on the stripe-throughput scenario.
//!
//! The event count of a run is fixed by its scenario and seed, so it is computed once and given
//! to criterion as `Throughput::Elements`: `thrpt` is events per second of wall-clock time.
//!
//! Run with `cargo bench -p braid-sim --bench sim [-- FILTER]`; figures are in
//! `docs/benchmarks.md`.

use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};
use braid_sim::experiments::stripe_throughput::scenario;
use braid_sim::link::LinkConfig;
use braid_sim::{run, Scenario};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

const SEED: u64 = 1;

/// The stripe-throughput point SRR, logical reception, 10 + 20 Mbit/s, for 1 s of virtual time
/// without warmup.
fn two_paths() -> Scenario {
    let mut s = scenario(SchedulerKind::Srr, true, 20, SEED);
    s.duration = Duration::from_secs(1);
    s.warmup = Duration::ZERO;
    s
}

/// The same with 8 paths of 10, 20, ..., 80 Mbit/s, 5 to 19 ms delay and 2 ms jitter, for
/// 0.25 s of virtual time.
fn eight_paths() -> Scenario {
    let mut s = two_paths();
    let rates: Vec<u64> = (1..=8).map(|i| i * 10_000_000).collect();
    s.links = rates
        .iter()
        .enumerate()
        .map(|(i, &rate)| {
            let mut l = LinkConfig::new(rate, Duration::from_millis(5 + 2 * i as u64));
            l.jitter = Duration::from_millis(2);
            l
        })
        .collect();
    let mut sched = SchedulerConfig::new(SchedulerKind::Srr, rates);
    sched.seed = SEED;
    s.striper.scheduler = sched.clone();
    s.receiver.scheduler = sched;
    s.duration = Duration::from_millis(250);
    s
}

fn sim(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    for (name, s) in [
        ("stripe_throughput_srr_2paths", two_paths()),
        ("srr_8paths", eight_paths()),
    ] {
        let r = run(&s, SEED).expect("valid scenario");
        assert_eq!(r.out_of_order, 0, "SRR with logical reception is FIFO");
        g.throughput(Throughput::Elements(r.events));
        g.bench_function(name, |b| {
            b.iter(|| run(black_box(&s), SEED).expect("valid scenario"))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = sim
}
criterion_main!(benches);

//! Per-packet costs of JoBS (the QoSbox paper's section 4.4, Tables 3 and 5): nanoseconds per
//! `enqueue` and per `dequeue` on a heavily loaded 100 Mbit/s link with a full shared buffer of
//! 200 packets.
//!
//! - `enqueue/classes/Q`, `dequeue/classes/Q`: constraint set 1 (Table 1) with Q = 2, 4, 6, 8,
//!   16 classes (Table 5).
//! - `enqueue/set/S`, `dequeue/set/S`: the four constraint sets with 4 classes (Table 3).
//!
//! The workload ([`braid_qos::workload::Workload`]) alternates 17 arrivals (each followed by
//! `poll_dropped` until `None`) and 16 departures, so the buffer stays full and about one
//! arrival in 17 causes a drop. Only the calls of one kind are timed; criterion's `time` is per
//! batch and `thrpt` (elements) is calls per second, so the cost per call is `time / 17` for
//! enqueue and `time / 16` for dequeue. `braid bench jobs` prints these per-call figures.
//!
//! Run with `cargo bench -p braid-qos --bench jobs [-- FILTER]`; figures are in
//! `docs/benchmarks.md`.

use braid_qos::workload::{Workload, DEQUEUE_BATCH, ENQUEUE_BATCH};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};

/// Class counts of Table 5 (and 16).
const CLASSES: [usize; 5] = [2, 4, 6, 8, 16];

/// Time `iters` batches of enqueues (or dequeues), running the other kind untimed in between.
fn timed(w: &mut Workload, iters: u64, enqueue: bool) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        if enqueue {
            let t = Instant::now();
            black_box(w.enqueue_batch());
            total += t.elapsed();
            black_box(w.dequeue_batch());
        } else {
            black_box(w.enqueue_batch());
            let t = Instant::now();
            black_box(w.dequeue_batch());
            total += t.elapsed();
        }
    }
    total
}

fn bench(c: &mut Criterion, points: &[(&str, usize, u8)]) {
    for (kind, batch) in [("enqueue", ENQUEUE_BATCH), ("dequeue", DEQUEUE_BATCH)] {
        let mut g = c.benchmark_group(kind);
        g.throughput(Throughput::Elements(batch as u64));
        for &(axis, classes, set) in points {
            let mut w = Workload::new(classes, set, 1).expect("valid constraint set");
            let param = if axis == "classes" {
                classes
            } else {
                usize::from(set)
            };
            g.bench_function(BenchmarkId::new(axis, param), |b| {
                b.iter_custom(|iters| timed(&mut w, iters, kind == "enqueue"))
            });
        }
        g.finish();
    }
}

/// Set 1 with 2 to 16 classes (Table 5).
fn by_classes(c: &mut Criterion) {
    let points: Vec<(&str, usize, u8)> = CLASSES.iter().map(|&q| ("classes", q, 1)).collect();
    bench(c, &points);
}

/// Sets 1 to 4 with 4 classes (Table 3).
fn by_set(c: &mut Criterion) {
    let points: Vec<(&str, usize, u8)> = (1..=4).map(|s| ("set", 4, s)).collect();
    bench(c, &points);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = by_classes, by_set
}
criterion_main!(benches);

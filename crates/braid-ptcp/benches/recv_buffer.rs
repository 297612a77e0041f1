//! Per-segment cost of the SM's receive buffer ([`braid_ptcp::recv_buffer::RecvBuffer`]): 1,024
//! segments of 1,300 bytes inserted and then read out in 64 KiB reads, in three orders.
//!
//! - `recv_buffer/in_order`: each segment at the contiguous end (joins the run before it).
//! - `recv_buffer/head_lost`: the first segment arrives last, so every other one is held out
//!   of order until it comes (a loss at the head of the line, repaired).
//! - `recv_buffer/interleaved`: odd segments first, then even ones (two paths of very different
//!   delay, the worst case for runs: every odd segment is its own run until its neighbours come).
//!
//! Criterion's `time` is per batch of 1,024 segments; `thrpt` is segments per second.
//! Run with `cargo bench -p braid-ptcp --bench recv_buffer`; figures are in
//! `docs/benchmarks.md`.

use braid_ptcp::recv_buffer::RecvBuffer;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

const SEGMENTS: u64 = 1024;
const MSS: u64 = 1300;

fn run(order: &[u64], payload: &[u8], out: &mut [u8]) -> usize {
    let mut b = RecvBuffer::new(4 << 20);
    for &i in order {
        black_box(b.insert(i * MSS, payload));
    }
    let mut n = 0;
    loop {
        let k = b.read(out);
        if k == 0 {
            return n;
        }
        n += k;
    }
}

fn bench(c: &mut Criterion) {
    let payload = vec![7u8; MSS as usize];
    let mut out = vec![0u8; 64 << 10];
    let in_order: Vec<u64> = (0..SEGMENTS).collect();
    let head_lost: Vec<u64> = (1..SEGMENTS).chain([0]).collect();
    let interleaved: Vec<u64> = (1..SEGMENTS)
        .step_by(2)
        .chain((0..SEGMENTS).step_by(2))
        .collect();
    let mut g = c.benchmark_group("recv_buffer");
    g.throughput(Throughput::Elements(SEGMENTS));
    for (name, order) in [
        ("in_order", &in_order),
        ("head_lost", &head_lost),
        ("interleaved", &interleaved),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| assert_eq!(run(order, &payload, &mut out), (SEGMENTS * MSS) as usize));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Per-packet costs of the sans-IO striping cores: the SRR decision (stripe paper section 3.6),
//! logical reception (section 4), marker processing (section 5) and the striper's send path.
//!
//! Every benchmark works on a batch of [`BATCH`] packets per iteration and reports
//! `Throughput::Elements`, so criterion's `time` divided by the batch is the cost per packet and
//! `thrpt` is packets per second. Packet sizes are uniform in 64..=1500 bytes from a seeded PRNG.
//! Path `i` runs at `10 (i + 1)` Mbit/s, so SRR quanta are `1500 (i + 1)` bytes.
//!
//! Run with `cargo bench -p braid-proto --bench core [-- FILTER]`; figures and targets are in
//! `docs/benchmarks.md`.

use braid_proto::resequence::{LogicalReceiver, ResequenceMode, Resequencer, ResequencerConfig};
use braid_proto::scheduler::{CausalScheduler, SchedulerConfig, SchedulerKind, Srr};
use braid_proto::striper::{MarkerConfig, MarkerPosition, Outgoing, Striper, StriperConfig};
use braid_proto::{Instant, Marker, PathId};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::time::Duration;

/// Packets per iteration.
const BATCH: usize = 1024;

/// Path counts benchmarked.
const PATHS: [u64; 2] = [2, 8];

/// The cores never read a clock; none of these code paths looks at `now`.
const NOW: Instant = Instant::ZERO;

/// `count` packet sizes uniform in 64..=1500 bytes.
fn sizes(count: usize, seed: u64) -> Vec<u32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..count).map(|_| 64 + rng.next_u32() % 1437).collect()
}

/// SRR over `paths` paths of 10, 20, ... Mbit/s, quanta from the rates, 1500-byte packets.
fn sched_config(paths: u64) -> SchedulerConfig {
    let rates = (1..=paths).map(|i| i * 10_000_000).collect();
    SchedulerConfig::new(SchedulerKind::Srr, rates)
}

/// A logical receiver that waits for markers (no hold timer), built through
/// `Resequencer::new` as the simulator builds it.
fn logical_receiver(paths: u64) -> LogicalReceiver<u64> {
    let mut config = ResequencerConfig::new(ResequenceMode::Logical, sched_config(paths));
    config.hold = None;
    match Resequencer::new(&config).expect("valid config") {
        Resequencer::Logical(r) => r,
        _ => unreachable!("mode is logical"),
    }
}

/// A striper with markers every round at the end of the round, or with markers off.
fn striper(paths: u64, markers: bool) -> Striper<u64> {
    let mut config = StriperConfig::new(sched_config(paths));
    config.markers = MarkerConfig {
        interval_rounds: u64::from(markers),
        position: MarkerPosition::End,
    };
    Striper::new(&config).expect("valid config")
}

/// `f(s)` then `g(s, p)` for every packet.
fn decide<S: CausalScheduler>(s: &mut S, sizes: &[u32]) {
    for &len in sizes {
        black_box(s.select());
        s.update(len);
    }
}

/// The SRR striping decision, on the bare [`Srr`] and through the `Scheduler` enum.
fn srr(c: &mut Criterion) {
    let sizes = sizes(BATCH, 1);
    let mut g = c.benchmark_group("srr");
    g.throughput(Throughput::Elements(BATCH as u64));
    for n in PATHS {
        let config = sched_config(n);
        let mut srr = Srr::new(&config.quanta().expect("valid config"));
        g.bench_function(BenchmarkId::new("select_update/Srr", n), |b| {
            b.iter(|| decide(&mut srr, black_box(&sizes)))
        });
        let mut sched = config.build().expect("valid config");
        g.bench_function(BenchmarkId::new("select_update/Scheduler", n), |b| {
            b.iter(|| decide(&mut sched, black_box(&sizes)))
        });
    }
    g.finish();
}

/// How a batch reaches the receiver.
#[derive(Clone, Copy)]
enum Arrival {
    /// In the sender's order, each packet delivered as soon as it arrives (no skew).
    InOrder,
    /// All of path 0's packets first, then path 1's, ... (maximum skew); the whole batch is
    /// buffered, then drained.
    PathByPath,
}

impl Arrival {
    fn name(self) -> &'static str {
        match self {
            Arrival::InOrder => "in_order",
            Arrival::PathByPath => "path_by_path",
        }
    }
}

/// Logical reception: `handle_data` + `poll_deliver` until `None`, per packet.
///
/// The receiver is reused across iterations so its queues are warm. Before each timed batch,
/// the sender's decisions for the next [`BATCH`] packets are computed (untimed) from a clone of
/// the receiver's own scheduler, which is exactly the state a Striper with markers off would be
/// in, so the receiver stays in sync.
fn logical_receive(c: &mut Criterion) {
    let sizes = sizes(BATCH, 2);
    let mut g = c.benchmark_group("logical_receive");
    g.throughput(Throughput::Elements(BATCH as u64));
    for arrival in [Arrival::InOrder, Arrival::PathByPath] {
        for n in PATHS {
            let mut rx = logical_receiver(n);
            let mut batch: Vec<(PathId, u32, u64)> = Vec::with_capacity(BATCH);
            g.bench_function(BenchmarkId::new(arrival.name(), n), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        batch.clear();
                        let mut sender = rx.scheduler().clone();
                        for (id, &len) in sizes.iter().enumerate() {
                            batch.push((sender.select(), len, id as u64));
                            sender.update(len);
                        }
                        if let Arrival::PathByPath = arrival {
                            batch.sort_by_key(|&(path, _, _)| path);
                        }
                        let mut next = 0u64;
                        let mut in_order = true;
                        let start = std::time::Instant::now();
                        for &(path, len, id) in &batch {
                            rx.handle_data(NOW, path, None, len, id);
                            if let Arrival::InOrder = arrival {
                                while let Some(d) = rx.poll_deliver(NOW) {
                                    in_order &= d.payload == next;
                                    next += 1;
                                }
                            }
                        }
                        while let Some(d) = rx.poll_deliver(NOW) {
                            in_order &= d.payload == next;
                            next += 1;
                        }
                        total += start.elapsed();
                        assert!(in_order && next == BATCH as u64, "receiver out of sync");
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

/// Sender and receiver in lockstep: `send`, `poll_transmit` until `None`, `handle_*`,
/// `poll_deliver` until `None`, per packet, with markers off and every round.
fn stripe_receive(c: &mut Criterion) {
    let sizes = sizes(BATCH, 3);
    let mut g = c.benchmark_group("stripe_receive");
    g.throughput(Throughput::Elements(BATCH as u64));
    for markers in [false, true] {
        let name = if markers {
            "markers_every_round"
        } else {
            "markers_off"
        };
        for n in PATHS {
            let mut tx = striper(n, markers);
            let mut rx = logical_receiver(n);
            let mut id = 0u64;
            let mut next = 0u64;
            let mut in_order = true;
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    for &len in &sizes {
                        let path = tx.send(NOW, len, id).expect("queue drained");
                        id += 1;
                        while let Some(t) = tx.poll_transmit(NOW, path) {
                            match t.message {
                                Outgoing::Data { seq, len, payload } => {
                                    rx.handle_data(NOW, path, seq, len, payload)
                                }
                                Outgoing::Marker(m) => rx.handle_marker(NOW, path, m),
                                Outgoing::Padding { .. } => {}
                            }
                        }
                        while let Some(d) = rx.poll_deliver(NOW) {
                            in_order &= d.payload == next;
                            next += 1;
                        }
                    }
                });
                // Checked here, not after `bench_function`: a filtered-out benchmark never runs.
                assert!(in_order && next == id, "receiver out of sync");
                assert_eq!(rx.stats().marker_skips, 0, "in-sync markers never skip");
            });
        }
    }
    g.finish();
}

/// A marker that finds the receiver in sync: `handle_marker` + the `poll_deliver` that
/// consumes it (and returns `None`, nothing else being buffered), per marker.
fn marker(c: &mut Criterion) {
    let sizes = sizes(BATCH, 4);
    let mut g = c.benchmark_group("marker");
    g.throughput(Throughput::Elements(BATCH as u64));
    for n in PATHS {
        let mut rx = logical_receiver(n);
        // Move the receiver into the middle of the stream.
        let mut sender = rx.scheduler().clone();
        for (id, &len) in sizes.iter().enumerate() {
            rx.handle_data(NOW, sender.select(), None, len, id as u64);
            sender.update(len);
        }
        while rx.poll_deliver(NOW).is_some() {}
        // What the sender would put on the current path now (an in-sync marker leaves the
        // receiver's state unchanged, so the same one stays in sync).
        let path = rx.scheduler().select();
        let m = Marker {
            path,
            number: rx.scheduler().number(path).expect("SRR has rounds"),
            tx_bytes: 0,
        };
        let before = rx.stats().markers;
        g.bench_function(BenchmarkId::new("in_sync", n), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    rx.handle_marker(NOW, path, black_box(m));
                    black_box(rx.poll_deliver(NOW));
                }
            });
            assert!(rx.stats().markers > before, "markers processed");
            assert_eq!(rx.stats().marker_skips, 0, "in-sync markers never skip");
            assert_eq!(rx.total_buffered_bytes(), 0);
        });
    }
    g.finish();
}

/// The striper: `send` + `poll_transmit` on the chosen path until `None`, per packet.
fn striper_send(c: &mut Criterion) {
    let sizes = sizes(BATCH, 5);
    let mut g = c.benchmark_group("striper");
    g.throughput(Throughput::Elements(BATCH as u64));
    for markers in [false, true] {
        let name = if markers {
            "markers_every_round"
        } else {
            "markers_off"
        };
        for n in PATHS {
            let mut tx = striper(n, markers);
            let mut id = 0u64;
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    for &len in &sizes {
                        let path = tx.send(NOW, len, id).expect("queue drained");
                        id += 1;
                        while let Some(t) = tx.poll_transmit(NOW, path) {
                            black_box(t);
                        }
                    }
                })
            });
        }
    }
    g.finish();
}

/// PET in the striper (scheduler `pet`, sequence numbers, equalised releases, as the daemon
/// runs it), per packet: `send` (PET's choice and accounting), `queue_padding`,
/// `poll_transmit` until `None` on the paths that have something, and a share of the
/// SIG-ACKs: every packet's arrival comes back in batches of 8, at the time a model of the
/// paths (delay `5 + 10 i` ms, FIFO bottleneck at the path's rate, 10 ms back) says. The
/// offered load is 80% of the paths' sum, so queues stay bounded. The model (a heap push and
/// pop per packet) is inside the timing.
fn pet_send(c: &mut Criterion) {
    use braid_proto::pet::SigAckEntry;
    use braid_proto::time::{transmission_time, Duration as D};
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    let sizes = sizes(BATCH, 6);
    let mean_bits = sizes.iter().map(|&l| u64::from(l + 12) * 8).sum::<u64>() / BATCH as u64;
    let mut g = c.benchmark_group("pet");
    g.throughput(Throughput::Elements(BATCH as u64));
    for padding in [false, true] {
        let name = if padding { "padding" } else { "data_probes" };
        for n in PATHS {
            let rates: Vec<u64> = (1..=n).map(|i| i * 10_000_000).collect();
            let mut sched = SchedulerConfig::new(SchedulerKind::Pet, vec![10_000_000; n as usize]);
            sched.overhead_bytes = 12;
            let mut config = StriperConfig::new(sched);
            config.sequence_numbers = true;
            config.receiver_equalizes = true;
            config.pet_padding = padding;
            config.queue_limit_bytes = 1 << 20;
            let mut tx: Striper<u64> = Striper::new(&config).expect("valid config");
            let delays: Vec<D> = (0..n).map(|i| D::from_millis(5 + 10 * i)).collect();
            for (i, &d) in delays.iter().enumerate() {
                tx.pet_mut()
                    .expect("pet")
                    .set_probe_rtt(PathId(i as u8), d * 2);
            }
            let gap =
                D::from_nanos(mean_bits * 1_000_000_000 / (rates.iter().sum::<u64>() * 8 / 10));
            let mut now = Instant::ZERO;
            let mut free = vec![Instant::ZERO; n as usize];
            // (when the SIG-ACK entry reaches the sender, the entry)
            let mut feedback: BinaryHeap<Reverse<(Instant, u64, u8, u64)>> = BinaryHeap::new();
            let mut batch: Vec<SigAckEntry> = Vec::with_capacity(8);
            let mut id = 0u64;
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    for &len in &sizes {
                        now = now + gap;
                        while let Some(&Reverse((t, seq, path, arrival))) = feedback.peek() {
                            if t > now {
                                break;
                            }
                            feedback.pop();
                            batch.push(SigAckEntry {
                                path: PathId(path),
                                seq,
                                arrival: Instant::from_nanos(arrival),
                            });
                            if batch.len() == 8 {
                                let pet = tx.pet_mut().expect("pet");
                                pet.handle_sig_ack(now, batch.drain(..));
                            }
                        }
                        let path = tx.send(now, len, id).expect("queue drained");
                        id += 1;
                        let padded = tx.queue_padding(now) > 0;
                        for p in 0..n as usize {
                            if p != path.index() && !padded {
                                continue;
                            }
                            while let Some(t) = tx.poll_transmit(now, PathId(p as u8)) {
                                let (seq, bytes) = match t.message {
                                    Outgoing::Data { seq, len, .. } => (seq.unwrap_or(0), len),
                                    Outgoing::Padding { id, len } => (id, len),
                                    Outgoing::Marker(_) => continue,
                                };
                                let air = transmission_time(u64::from(bytes) + 12, rates[p]);
                                free[p] = (now + delays[p]).max(free[p]) + air;
                                let back = free[p] + D::from_millis(10);
                                feedback.push(Reverse((back, seq, p as u8, free[p].as_nanos())));
                            }
                        }
                        black_box(path);
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = srr, logical_receive, stripe_receive, marker, striper_send, pet_send
}
criterion_main!(benches);

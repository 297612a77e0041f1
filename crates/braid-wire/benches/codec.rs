//! Per-packet cost of the wire codec: [`Repr::parse_bytes`] and [`Repr::emit_into`] for a
//! 1400-byte data packet with and without a sequence number, a marker, and a 2-path feedback.
//!
//! One packet per iteration, reported as `Throughput::Elements(1)`: criterion's `time` is the
//! cost per packet. Parsing is zero-copy; emitting a data packet copies its payload.
//!
//! Run with `cargo bench -p braid-wire --bench codec [-- FILTER]`; figures are in
//! `docs/benchmarks.md`.

use braid_proto::{Credit, Marker, PacketNumber, PathId};
use braid_wire::{Credits, Repr};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

const PAYLOAD: [u8; 1400] = [0xa5; 1400];

const CREDITS: [Credit; 2] = [
    Credit {
        path: PathId(0),
        limit_bytes: 1 << 20,
    },
    Credit {
        path: PathId(1),
        limit_bytes: 3 << 20,
    },
];

fn cases() -> [(&'static str, Repr<'static>); 4] {
    [
        (
            "data_1400",
            Repr::Data {
                path: PathId(1),
                seq: None,
                payload: &PAYLOAD,
            },
        ),
        (
            "data_1400_seq",
            Repr::Data {
                path: PathId(1),
                seq: Some(0x0123_4567_89ab),
                payload: &PAYLOAD,
            },
        ),
        (
            "marker",
            Repr::Marker(Marker {
                path: PathId(1),
                number: PacketNumber {
                    round: 123_456,
                    deficit: -321,
                },
                tx_bytes: 987_654_321,
            }),
        ),
        ("feedback_2", Repr::Feedback(Credits::from_slice(&CREDITS))),
    ]
}

/// What a receiver reads out of a parsed packet: every field, folded into one word so the
/// compiler can neither skip the parse nor has to spill the whole `Repr` (a feedback's credits
/// are decoded lazily, so they are read here too).
fn digest(repr: Result<Repr<'_>, braid_wire::Error>) -> u64 {
    match repr {
        Ok(Repr::Data { path, seq, payload }) => {
            u64::from(path.0) ^ seq.unwrap_or(0) ^ payload.len() as u64
        }
        Ok(Repr::Marker(m)) => {
            u64::from(m.path.0) ^ m.number.round ^ m.number.deficit as u64 ^ m.tx_bytes
        }
        Ok(Repr::Feedback(credits)) => credits
            .into_iter()
            .fold(0, |acc, c| acc ^ u64::from(c.path.0) ^ c.limit_bytes),
        Ok(Repr::Nack(n)) => u64::from(n.path.0) ^ n.first ^ u64::from(n.count),
        Ok(Repr::Abandon(a)) => u64::from(a.path.0) ^ a.first ^ u64::from(a.count),
        Ok(Repr::Unheard(u)) => u64::from(u.path.0) ^ u.first ^ u.next_seq,
        Ok(Repr::Probe(p) | Repr::ProbeAck(p)) => {
            u64::from(p.path.0) ^ u64::from(p.id) ^ p.timestamp
        }
        Ok(Repr::SigAck(entries)) => entries.iter().fold(0, |acc, e| {
            acc ^ u64::from(e.path.0) ^ e.seq ^ e.arrival.as_nanos()
        }),
        Ok(Repr::Ptcp { conn, segment }) => u64::from(conn) ^ segment.len() as u64,
        Ok(Repr::Padding { path, id, len }) => u64::from(path.0) ^ id ^ u64::from(len),
        Ok(Repr::ContextInstall {
            cid,
            generation,
            template,
        }) => u64::from(cid) ^ u64::from(generation) ^ template.len() as u64,
        Ok(Repr::ContextAck { cid, generation }) => u64::from(cid) ^ u64::from(generation),
        Err(_) => u64::MAX,
    }
}

/// Parse and read every field.
fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    for (name, repr) in cases() {
        let bytes = repr.emit_to_vec().expect("valid repr");
        assert_eq!(Repr::parse_bytes(&bytes), Ok(repr));
        g.bench_function(name, |b| {
            b.iter(|| digest(Repr::parse_bytes(black_box(&bytes))))
        });
    }
    g.finish();
}

/// Emit into a reused 1500-byte buffer.
fn emit(c: &mut Criterion) {
    let mut g = c.benchmark_group("emit");
    g.throughput(Throughput::Elements(1));
    let mut buf = [0u8; 1500];
    for (name, repr) in cases() {
        g.bench_function(name, |b| {
            b.iter(|| black_box(black_box(&repr).emit_into(black_box(&mut buf))))
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
    targets = parse, emit
}
criterion_main!(benches);

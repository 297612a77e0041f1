//! Per-packet cost of the session, both ends: a batch of 1400-byte packets sent at the client
//! (`send`), sealed (`poll_transmit`), opened at the server (`handle_datagram`), resequenced
//! and delivered (`poll_deliver`, then `recycle`). One path, sequence mode, no delay: the
//! daemon's work minus the system calls.
//!
//! Reported per packet (`Throughput::Elements`). Run with
//! `cargo bench -p braid-session --bench session`; figures are in `docs/benchmarks.md`.

use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::MarkerPosition;
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_session::compress::{exchange_contexts, Compressor, Decompressor};
use braid_session::hostile::tcp_ts_segment;
use braid_session::{BondParams, PrivateKey, Role, Session, SessionConfig};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

const BATCH: usize = 32;
const LEN: usize = 1400;

/// Move every datagram between the two ends once (path 0, no delay).
fn exchange(c: &mut Session, s: &mut Session, now: Instant, buf: &mut [u8]) {
    while let Some(n) = c.poll_transmit(now, PathId(0), buf) {
        let _ = s.handle_datagram(now, None, &buf[..n]);
    }
    while let Some(n) = s.poll_transmit(now, PathId(0), buf) {
        let _ = c.handle_datagram(now, Some(PathId(0)), &buf[..n]);
    }
}

fn session(cr: &mut Criterion) {
    let params = BondParams {
        scheduler: SchedulerKind::Srr,
        rates_bps: vec![1_000_000_000],
        max_packet: LEN as u32,
        seed: 1,
        resequence: ResequenceMode::Sequence,
        marker_interval_rounds: 32,
        marker_position: MarkerPosition::End,
        hold_ms: 100,
        credit_buffer_bytes: 0,
        queue_limit_bytes: 1 << 20,
        equalize_delay: false,
        retransmit: true,
        backup_rtt_multiple: 0,
        adaptive: false,
        compress_headers: false,
        policies: Vec::new(),
        backup_paths: 0,
        path_names: Vec::new(),
    };
    let ck = PrivateKey::from_random([1; 32]);
    let sk = PrivateKey::from_random([2; 32]);
    let mut c = Session::new(
        SessionConfig::new(Role::Initiator, ck.clone(), sk.public_key(), Some(params)),
        Instant::ZERO,
        [3; 32],
        1_700_000_000_000_000_000,
    );
    let mut s = Session::new(
        SessionConfig::new(Role::Responder, sk, ck.public_key(), None),
        Instant::ZERO,
        [4; 32],
        1_700_000_000_000_000_000,
    );
    let mut buf = vec![0u8; 2048];
    let mut now = Instant::ZERO;
    for _ in 0..100 {
        c.handle_timeout(now);
        s.handle_timeout(now);
        exchange(&mut c, &mut s, now, &mut buf);
        now = now + Duration::from_millis(1);
    }
    assert!(c.is_established() && s.is_established(), "no handshake");
    let packet = [0x45u8; LEN];
    let mut g = cr.benchmark_group("session");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("send_seal_open_deliver_1400", |b| {
        b.iter(|| {
            now = now + Duration::from_micros(10);
            c.handle_timeout(now);
            s.handle_timeout(now);
            for _ in 0..BATCH {
                c.send(now, &packet);
            }
            exchange(&mut c, &mut s, now, &mut buf);
            while let Some(p) = s.poll_deliver(now) {
                black_box(&p);
                s.recycle(p);
            }
        })
    });
    g.finish();
}

/// The TCP retransmission check PET's endpoints run on every data packet
/// (`braid_session::tcp_retransmit`): parse, look up, record, for 1400-byte segments of 64
/// flows in turn, one in eight a resend.
fn tcp_retransmit(cr: &mut Criterion) {
    use braid_session::tcp_retransmit::{data_segment, TcpRetransmits};
    let segment = |flow: u16, seq: u32| {
        let mut p = vec![0u8; LEN];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(LEN as u16).to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&(5000 + flow).to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x10;
        p
    };
    let packets: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| {
            let round = i / 64;
            let resend = i % 8 == 7;
            let seq = (if resend {
                round.saturating_sub(1)
            } else {
                round
            }) * 1360;
            segment((i % 64) as u16, seq)
        })
        .collect();
    let mut g = cr.benchmark_group("tcp_retransmit");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.bench_function("check_and_record_1400", |b| {
        let mut t = TcpRetransmits::new();
        b.iter(|| {
            let mut n = 0u32;
            for p in &packets {
                if let Some(seg) = data_segment(p) {
                    n += u32::from(t.is_retransmission(&seg));
                    t.record(&seg);
                }
            }
            black_box(n)
        })
    });
    g.finish();
}

/// Header compression (`braid_session::compress`) of 1,400-byte IPv4 TCP segments with
/// timestamps, 64 flows whose contexts are installed: what each end adds per packet. The
/// compressor works in place, so each packet is first copied into a buffer (`copy_1400` is
/// that copy alone).
fn compress(cr: &mut Criterion) {
    let segment = |flow: u16, seq: u32| tcp_ts_segment(5000 + flow, seq, LEN - 52);
    let packets: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| segment((i % 64) as u16, i * 1348))
        .collect();
    let (mut c, mut d) = (Compressor::new(), Decompressor::new());
    for p in &packets {
        c.compress(Instant::ZERO, &mut p.clone());
    }
    exchange_contexts(&mut c, &mut d);
    let squeezed: Vec<Vec<u8>> = packets
        .iter()
        .map(|p| {
            let mut q = p.clone();
            assert!(c.compress(Instant::ZERO, &mut q));
            q
        })
        .collect();
    let mut g = cr.benchmark_group("compress");
    g.throughput(Throughput::Elements(packets.len() as u64));
    let mut buf = Vec::with_capacity(LEN);
    g.bench_function("copy_1400", |b| {
        b.iter(|| {
            for p in &packets {
                buf.clear();
                buf.extend_from_slice(p);
                black_box(&buf);
            }
        })
    });
    g.bench_function("copy_and_compress_1400", |b| {
        b.iter(|| {
            for p in &packets {
                buf.clear();
                buf.extend_from_slice(p);
                black_box(c.compress(Instant::ZERO, &mut buf));
            }
        })
    });
    g.bench_function("decompress_1400", |b| {
        b.iter(|| {
            for q in &squeezed {
                black_box(d.decompress(q, &mut buf));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, session, tcp_retransmit, compress);
criterion_main!(benches);

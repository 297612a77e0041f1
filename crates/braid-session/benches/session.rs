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
        policies: Vec::new(),
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

criterion_group!(benches, session);
criterion_main!(benches);

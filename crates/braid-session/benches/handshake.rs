//! What a handshake initiation costs a server, with and without the cookie guard
//! (`braid_session::cookie`): the guard's verdicts (a wrong `mac1`; a cookie reply under load;
//! a good `mac2`), against what an initiation that reaches the session costs (garbage behind a
//! good `mac1`, which fails at the first Diffie-Hellman; a genuine one, accepted and answered),
//! and a proxy's lookup of the initiator's key.
//!
//! Run with `cargo bench -p braid-session --bench handshake`; figures are in
//! `docs/benchmarks.md`.

use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::MarkerPosition;
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_session::cookie::{CookieGuard, CookieKeys, Refused, Verdict, LOAD_BURST};
use braid_session::{initiator_key, BondParams, PrivateKey, Role, Session, SessionConfig};
use braid_wire::outer::Outer;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use std::net::SocketAddr;

fn params() -> BondParams {
    BondParams {
        scheduler: SchedulerKind::Srr,
        rates_bps: vec![100_000_000, 50_000_000],
        max_packet: 1400,
        seed: 1,
        resequence: ResequenceMode::Sequence,
        marker_interval_rounds: 32,
        marker_position: MarkerPosition::End,
        hold_ms: 100,
        credit_buffer_bytes: 0,
        queue_limit_bytes: 1 << 20,
        equalize_delay: true,
        retransmit: true,
        backup_rtt_multiple: 0,
        adaptive: false,
        compress_headers: false,
        policies: Vec::new(),
        backup_paths: 0,
        path_names: Vec::new(),
    }
}

/// A genuine initiation from a client session whose wall clock reads `wall_ns`.
fn genuine_init(ck: &PrivateKey, server: &PrivateKey, wall_ns: u64) -> Vec<u8> {
    let mut c = Session::new(
        SessionConfig::new(
            Role::Initiator,
            ck.clone(),
            server.public_key(),
            Some(params()),
        ),
        Instant::ZERO,
        [3; 32],
        wall_ns,
    );
    c.handle_timeout(Instant::ZERO);
    let mut buf = vec![0u8; 2048];
    let n = (0..2)
        .find_map(|p| c.poll_transmit(Instant::ZERO, PathId(p), &mut buf))
        .expect("an initiation");
    buf.truncate(n);
    buf
}

/// An initiation with a good `mac1` and garbage behind it: what a flood by someone who knows
/// the server's public key looks like.
fn garbage_init(keys: &CookieKeys, len: usize) -> Vec<u8> {
    keys.initiation(PathId(0), 1, &vec![0x5A; len], None).0
}

fn handshake(cr: &mut Criterion) {
    let ck = PrivateKey::from_random([1; 32]);
    let sk = PrivateKey::from_random([2; 32]);
    let spub = sk.public_key();
    let keys = CookieKeys::new(&spub);
    let init = genuine_init(&ck, &sk, 1_700_000_000_000_000_000);
    let garbage = garbage_init(&keys, init.len() - 40);
    let src: SocketAddr = "192.0.2.7:40000".parse().unwrap();
    let mut g = cr.benchmark_group("handshake");

    // The guard, not under load: a wrong mac1 is one BLAKE2s.
    let mut bad = init.clone();
    let at = bad.len() - 20;
    bad[at] ^= 1;
    let mut guard = CookieGuard::new(&spub, Instant::ZERO, [9; 32]);
    g.bench_function("guard_bad_mac1", |b| {
        b.iter(|| {
            assert_eq!(
                guard.check(Instant::ZERO, src, || false, black_box(&bad)),
                Verdict::Drop(Refused::BadMac)
            )
        })
    });

    // Under load: an initiation without a cookie gets a cookie reply.
    let mut loaded = CookieGuard::new(&spub, Instant::ZERO, [9; 32]);
    for _ in 0..=LOAD_BURST {
        let _ = loaded.check(Instant::ZERO, src, || false, &garbage);
    }
    let now = Instant::ZERO + Duration::from_millis(1);
    assert!(loaded.under_load(now));
    g.bench_function("guard_cookie_reply", |b| {
        b.iter(|| {
            assert!(matches!(
                loaded.check(now, src, || false, black_box(&garbage)),
                Verdict::Reply(_)
            ))
        })
    });

    // Under load, an initiation with the cookie of its source: both MACs and the source's
    // bucket (which runs dry at once here: the verdict is a drop, the work the same).
    let Verdict::Reply(reply) = loaded.check(now, src, || false, &init) else {
        panic!("a cookie reply");
    };
    let Ok(Outer::CookieReply { nonce, cookie, .. }) = Outer::parse(&reply) else {
        panic!("parses");
    };
    let Ok(Outer::HandshakeInit {
        path,
        sender_index,
        noise,
        mac1,
        ..
    }) = Outer::parse(&init)
    else {
        panic!("an initiation");
    };
    let c = keys.open_cookie(&mac1, &nonce, &cookie).unwrap();
    let (with_cookie, _) = keys.initiation(path, sender_index, noise, Some(&c));
    g.bench_function("guard_good_mac2", |b| {
        b.iter(|| loaded.check(now, src, || false, black_box(&with_cookie)))
    });

    // What reaches the session without a guard in front: garbage behind a good mac1 costs one
    // X25519 before Noise fails.
    let mut server = Session::new(
        SessionConfig::new(Role::Responder, sk.clone(), ck.public_key(), None),
        Instant::ZERO,
        [4; 32],
        1_700_000_000_000_000_000,
    );
    g.bench_function("session_garbage_init", |b| {
        b.iter(|| server.handle_datagram(Instant::ZERO, None, black_box(&garbage)))
    });

    // A genuine initiation, accepted and answered (four X25519, the bond set up).
    let mut wall = 1_700_000_000_000_000_000u64;
    g.bench_function("session_genuine_init", |b| {
        b.iter_batched(
            || {
                wall += 1_000_000;
                let mut s = Session::new(
                    SessionConfig::new(Role::Responder, sk.clone(), ck.public_key(), None),
                    Instant::ZERO,
                    [4; 32],
                    wall,
                );
                let _ = &mut s;
                (s, genuine_init(&ck, &sk, wall))
            },
            |(mut s, d)| {
                assert!(s.handle_datagram(Instant::ZERO, None, &d).is_ok());
                s
            },
            BatchSize::SmallInput,
        )
    });

    // A proxy's lookup of which client an initiation is from (two X25519).
    g.bench_function("proxy_initiator_key", |b| {
        b.iter(|| initiator_key(&sk, black_box(&init)))
    });
    g.finish();
}

criterion_group!(benches, handshake);
criterion_main!(benches);

//! End-to-end transfers between two `StripedConnection`s over in-memory paths: every byte
//! exactly once and in order, under loss, reordering, duplication and path death; the receive
//! buffer within its bound. All in virtual time; nothing here measures the wall clock.

mod common;

use braid_proto::path::PathId;
use braid_proto::time::{Duration, Instant};
use braid_ptcp::{Config, CongestionAlgorithm, Event};
use common::{check_exact, transfer, transfer_with, LinkSpec, Pair, Reader};
use proptest::prelude::*;

fn secs(s: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(s)
}

fn config() -> Config {
    Config::default()
}

#[test]
fn two_clean_paths() {
    let paths = [LinkSpec::new(10_000_000, 10), LinkSpec::new(2_000_000, 50)];
    let mut pair = Pair::new(config(), &paths, 1);
    let len = 2_000_000;
    let out = transfer(&mut pair, len, secs(60));
    check_exact(&out, len).unwrap();
    assert!(out.closed, "both ends close");
    assert_eq!(
        pair.client_events[..2],
        [
            Event::FlowEstablished(braid_ptcp::FlowId(0)),
            Event::Established
        ]
    );
    assert!(pair.client_events.contains(&Event::Established));
    assert_eq!(pair.client_events.last(), Some(&Event::Closed));
    assert_eq!(pair.server_events.last(), Some(&Event::Closed));
    // Both paths carried data.
    for (_, _, s) in pair.client.flow_stats() {
        assert!(s.packets_sent > 10, "{s:?}");
    }
}

#[test]
fn aggregates_both_paths() {
    // 2 MB over 8 + 8 Mbit/s takes 1 s of pure transmission; one path alone needs 2 s. In
    // virtual time, so this is a property of the protocol, not of the machine.
    let paths = [LinkSpec::new(8_000_000, 20), LinkSpec::new(8_000_000, 40)];
    let mut pair = Pair::new(config(), &paths, 2);
    let len = 2_000_000;
    let out = transfer(&mut pair, len, secs(60));
    check_exact(&out, len).unwrap();
    let done = out.done_at.unwrap().as_secs_f64();
    assert!(done < 2.0, "took {done} s of virtual time");
}

/// A rate cap below a path's rate keeps the path's queue empty whatever the controller does
/// (BBR's start-up sends at 2.89 times its estimate; CUBIC does not pace and sends its window
/// in bursts), and the transfer still arrives whole, at the cap.
fn capped(algorithm: CongestionAlgorithm) {
    let paths = [LinkSpec::new(10_000_000, 10), LinkSpec::new(4_000_000, 40)];
    let run = |cap: Option<u64>| {
        let mut c = config();
        c.flow.congestion.algorithm = algorithm;
        let mut pair = Pair::new(c, &paths, 3);
        // 0.97 of the path's rate, in payload bytes per second (a 1,460-byte segment is about
        // 1,500 bytes on the link).
        pair.client
            .set_rate_cap(PathId(0), cap.map(|c| c * 1460 / 1500));
        let len = 4_000_000;
        let out = transfer(&mut pair, len, secs(60));
        check_exact(&out, len).unwrap();
        let (backlog, dropped) = pair.upstream_queue(0);
        (out.done_at.unwrap(), backlog, dropped)
    };
    let (free_done, free_backlog, _) = run(None);
    let (done, backlog, dropped) = run(Some(10_000_000 / 8 * 97 / 100));
    // Unpaced or in start-up, the flow fills the path's queue (one round trip's worth: 20 ms).
    assert!(
        free_backlog >= Duration::from_millis(10),
        "{free_backlog:?}"
    );
    // Capped, the path's queue holds at most the pacing's burst allowance of two segments
    // and whatever the flow's ACK-clocked retransmissions add: a few ms, no drops.
    assert!(backlog <= Duration::from_millis(5), "{backlog:?}");
    assert_eq!(dropped, 0);
    // 4 MB at 14 Mbit/s is 2.3 s; the cap costs the 3% margin on the one path and the start.
    let (done, free_done) = (done.as_secs_f64(), free_done.as_secs_f64());
    assert!(done < free_done * 1.1, "{done} s capped, {free_done} s not");
}

#[test]
fn a_rate_cap_keeps_the_paths_queue_empty_with_bbr() {
    capped(CongestionAlgorithm::Bbr);
}

#[test]
fn a_rate_cap_keeps_the_paths_queue_empty_with_cubic() {
    capped(CongestionAlgorithm::Cubic);
}

/// 500 kB over a 5 Mbit/s path with 5% loss and a 1 Mbit/s one with 10%, with `algorithm`.
fn lossy_paths(algorithm: CongestionAlgorithm) {
    let mut a = LinkSpec::new(5_000_000, 20);
    a.loss = 0.05;
    let mut b = LinkSpec::new(1_000_000, 80);
    b.loss = 0.1;
    let mut cfg = config();
    cfg.flow.congestion.algorithm = algorithm;
    let mut pair = Pair::new(cfg, &[a, b], 3);
    let len = 500_000;
    let out = transfer(&mut pair, len, secs(600));
    check_exact(&out, len).unwrap();
}

#[test]
fn lossy_paths_with_cubic() {
    lossy_paths(CongestionAlgorithm::Cubic);
}

#[test]
fn lossy_paths_with_bbr() {
    lossy_paths(CongestionAlgorithm::Bbr);
}

#[test]
fn path_dies_mid_transfer() {
    let a = LinkSpec::new(4_000_000, 20);
    let mut b = LinkSpec::new(4_000_000, 30);
    b.dies_at = Some(Instant::ZERO + Duration::from_millis(500));
    let mut pair = Pair::new(config(), &[a, b], 4);
    let len = 1_000_000;
    let out = transfer(&mut pair, len, secs(3600));
    check_exact(&out, len).unwrap();
    let s = pair.client.stats();
    assert!(s.restriped_bytes > 0 || s.redundant_bytes > 0, "{s:?}");
    // The dead flow gives up on its FIN; the connection still closes.
    assert!(out.closed);
}

#[test]
fn five_second_blackout_loses_nothing_and_the_path_comes_back() {
    // The lab criterion in miniature: one of two paths blacked out for 5 s.
    let a = LinkSpec::new(4_000_000, 20);
    let mut b = LinkSpec::new(4_000_000, 30);
    let start = Instant::ZERO + Duration::from_secs(2);
    b.outage = Some((start, start + Duration::from_secs(5)));
    let mut pair = Pair::new(config(), &[a, b], 9);
    let len = 8_000_000;
    let out = transfer(&mut pair, len, secs(600));
    check_exact(&out, len).unwrap();
    // The flow on the blacked-out path timed out; its data went on over the other path
    // (re-striping and redundant striping) without stalling the reader for a second (the
    // issue's criterion, here in virtual time: 344 ms at this seed; 258 ms before the RTO's
    // variance floor, which makes the silent flow's timer fire at SRTT + 200 ms at the earliest).
    let flows = pair.client.flow_stats();
    assert!(flows[1].2.timeouts > 0, "{flows:?}");
    assert!(pair.client.stats().restriped_bytes > 0);
    assert!(
        out.max_read_gap < Duration::from_secs(1),
        "stalled {:?}",
        out.max_read_gap
    );
}

#[test]
fn reordering_and_duplication() {
    let mut a = LinkSpec::new(5_000_000, 20);
    a.jitter = Duration::from_millis(15);
    a.duplicate = 0.05;
    let mut b = LinkSpec::new(3_000_000, 40);
    b.jitter = Duration::from_millis(30);
    b.duplicate = 0.05;
    let mut pair = Pair::new(config(), &[a, b], 5);
    let len = 800_000;
    let out = transfer(&mut pair, len, secs(600));
    check_exact(&out, len).unwrap();
}

#[test]
fn small_receive_buffer_bounds_the_receiver() {
    let mut cfg = config();
    cfg.receive_buffer_bytes = 64 << 10;
    let paths = [LinkSpec::new(10_000_000, 10), LinkSpec::new(1_000_000, 100)];
    let mut pair = Pair::new(cfg, &paths, 6);
    let len = 1_000_000;
    let out = transfer(&mut pair, len, secs(600));
    check_exact(&out, len).unwrap();
    assert_eq!(out.capacity, 64 << 10);
}

#[test]
fn slow_reader_closes_the_window_and_the_sender_waits() {
    // The reader takes 8 KiB every 100 ms (655 kbit/s) from a 64 KiB buffer fed by 10 Mbit/s:
    // the window closes again and again; the buffer never overflows and nothing is lost.
    let mut cfg = config();
    cfg.receive_buffer_bytes = 64 << 10;
    let paths = [LinkSpec::new(10_000_000, 10), LinkSpec::new(2_000_000, 30)];
    let mut pair = Pair::new(cfg, &paths, 8);
    let len = 300_000;
    let reader = Reader {
        period: Duration::from_millis(100),
        bytes_per_read: 8 << 10,
    };
    let out = transfer_with(&mut pair, len, secs(600), reader);
    check_exact(&out, len).unwrap();
    assert_eq!(out.max_buffered, 64 << 10, "the window was filled");
    assert!(pair.client.stats().freezes > 0);
}

#[test]
fn garbage_is_dropped_and_counted() {
    let paths = [LinkSpec::new(10_000_000, 10)];
    let mut pair = Pair::new(config(), &paths, 7);
    pair.server
        .handle_datagram(Instant::ZERO, braid_proto::PathId(0), &[1, 2, 3]);
    pair.server
        .handle_datagram(Instant::ZERO, braid_proto::PathId(0), &[9; 100]);
    assert_eq!(pair.server.stats().malformed, 2);
    let len = 10_000;
    let out = transfer(&mut pair, len, secs(60));
    check_exact(&out, len).unwrap();
}

#[derive(Clone, Debug)]
struct PathParams {
    rate_kbps: u64,
    delay_ms: u64,
    loss_pct: u32,
    jitter_ms: u64,
    dup_pct: u32,
    dies_at_ms: Option<u64>,
}

fn arb_path() -> impl Strategy<Value = PathParams> {
    (
        500u64..20_000,
        1u64..150,
        0u32..12,
        0u64..30,
        0u32..6,
        prop::option::weighted(0.3, 0u64..3000),
    )
        .prop_map(
            |(rate_kbps, delay_ms, loss_pct, jitter_ms, dup_pct, dies_at_ms)| PathParams {
                rate_kbps,
                delay_ms,
                loss_pct,
                jitter_ms,
                dup_pct,
                dies_at_ms,
            },
        )
}

fn spec(p: &PathParams) -> LinkSpec {
    let mut s = LinkSpec::new(p.rate_kbps * 1000, p.delay_ms);
    s.loss = f64::from(p.loss_pct) / 100.0;
    s.jitter = Duration::from_millis(p.jitter_ms);
    s.duplicate = f64::from(p.dup_pct) / 100.0;
    s.dies_at = p
        .dies_at_ms
        .map(|ms| Instant::ZERO + Duration::from_millis(ms));
    s
}

proptest! {
    // 48 cases in the suite; `PROPTEST_CASES=5000` for a soak.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// Every byte delivered exactly once and in order under loss, reordering, duplication and
    /// path death (at least one path survives), with any controller, an eager or a slow reader
    /// and rate caps on some paths; the receive buffer never exceeds its bound.
    #[test]
    fn exactly_once_in_order(
        paths in prop::collection::vec(arb_path(), 1..4),
        survivor in 0usize..4,
        len in 1u64..300_000,
        buffer_kib in prop::option::of(64u64..512),
        // At worst 300 kB at 2000 bytes per 200 ms: 30 s, well inside the limit.
        slow_reader in prop::option::weighted(0.3, (1u64..200, 2000usize..32_000)),
        algorithm in prop::sample::select(&[
            CongestionAlgorithm::NewReno,
            CongestionAlgorithm::Cubic,
            CongestionAlgorithm::Bbr,
        ][..]),
        seed in any::<u64>(),
        // Rate caps on some paths, in percent of the path's rate (`set_rate_cap`).
        caps in prop::option::weighted(0.3, prop::collection::vec(
            prop::option::of(10u64..200), 4)),
    ) {
        let mut specs: Vec<LinkSpec> = paths.iter().map(spec).collect();
        let keep = survivor % specs.len();
        specs[keep].dies_at = None;
        let mut cfg = Config::default();
        if let Some(k) = buffer_kib {
            cfg.receive_buffer_bytes = k << 10;
        }
        cfg.flow.congestion.algorithm = algorithm;
        let mut pair = Pair::new(cfg, &specs, seed);
        for (i, pct) in caps.iter().flatten().enumerate().take(paths.len()) {
            let cap = pct.map(|p| paths[i].rate_kbps * 1000 / 8 * p / 100);
            pair.client.set_rate_cap(PathId(i as u8), cap);
            pair.server.set_rate_cap(PathId(i as u8), cap);
        }
        let reader = slow_reader.map_or(Reader::EAGER, |(ms, bytes)| Reader {
            period: Duration::from_millis(ms),
            bytes_per_read: bytes,
        });
        let out = transfer_with(&mut pair, len, secs(3600), reader);
        if let Err(e) = check_exact(&out, len) {
            return Err(TestCaseError::fail(format!("{e}; client {:?}; flows {:?}",
                pair.client.stats(), pair.client.flow_stats())));
        }
        // Both ends closed on their own, not by the user timeout (which a flow waiting for a
        // FIN on a dead path once needed).
        prop_assert!(!pair.client.timed_out() && !pair.server.timed_out());
    }
}

/// A path of a regression case: `spec` of the property test's parameters.
fn link(kbps: u64, ms: u64, loss: u32, jitter: u64, dup: u32, dies: Option<u64>) -> LinkSpec {
    spec(&PathParams {
        rate_kbps: kbps,
        delay_ms: ms,
        loss_pct: loss,
        jitter_ms: jitter,
        dup_pct: dup,
        dies_at_ms: dies,
    })
}

/// The case CI's proptest found (cc 625dd0dc): the first path dies at 804 ms, after the
/// server's FIN on it was acknowledged and before the client's came; the second (500 kbit/s,
/// 123 ms) and third (18 Mbit/s, 2 ms, 6% loss, duplication) survive. The stream finishes, and
/// the server's flow on the dead path stops waiting for the client's FIN (it waited for the
/// user timeout, 15 minutes after the client went quiet).
#[test]
fn a_path_dies_between_the_two_fins() {
    let specs = [
        link(500, 129, 4, 27, 0, Some(804)),
        link(500, 123, 0, 28, 0, None),
        link(18_378, 2, 6, 20, 1, None),
    ];
    let mut cfg = Config::default();
    cfg.flow.congestion.algorithm = CongestionAlgorithm::Cubic;
    let mut pair = Pair::new(cfg, &specs, 7665339387882448595);
    let len = 71_989;
    let out = transfer(&mut pair, len, secs(3600));
    check_exact(&out, len).unwrap();
    assert!(out.closed, "both ends close");
    assert!(!pair.server.timed_out() && !pair.client.timed_out());
    assert!(pair.server_events.contains(&Event::FlowClosed {
        flow: braid_ptcp::FlowId(0),
        aborted: true
    }));
}

/// The soak's case (cc 5b058b77): the fast path dies at 707 ms with everything delivered over
/// it, before the slow reader finishes and the server closes; the client's flow on the path
/// that lives lost its SYNs until then. The server took no new flow once closing, so the
/// client could never finish its close and gave up at the 15-minute user timeout. A closing
/// server now takes the flow, and both ends close on their own.
#[test]
fn a_flow_opened_while_the_peer_closes_lets_the_close_finish() {
    let specs = [
        link(500, 1, 7, 0, 0, None),
        link(14088, 39, 3, 8, 5, Some(707)),
    ];
    let mut cfg = Config::default();
    cfg.flow.congestion.algorithm = CongestionAlgorithm::Bbr;
    let mut pair = Pair::new(cfg, &specs, 9927376429930000021);
    let len = 127_189;
    let reader = Reader {
        period: Duration::from_millis(22),
        bytes_per_read: 2000,
    };
    let out = transfer_with(&mut pair, len, secs(3600), reader);
    check_exact(&out, len).unwrap();
    assert!(out.closed, "both ends close");
    assert!(!pair.client.timed_out() && !pair.server.timed_out());
    let established =
        |events: &[Event]| events.contains(&Event::FlowEstablished(braid_ptcp::FlowId(0)));
    assert!(established(&pair.client_events) && established(&pair.server_events));
}

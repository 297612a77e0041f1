//! A misbehaving peer cannot make a connection panic or overflow its receive buffer: arbitrary
//! bytes and arbitrary well-formed segments (any flags, acknowledgements of what was never sent,
//! SACK blocks anywhere, offsets and FINs anywhere) are fed to both ends of an open connection
//! between normal polls.

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::wire::{Flags, SackBlock, Segment};
use braid_ptcp::{Config, CongestionAlgorithm, FlowId, StripedConnection, VirtualSeq};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Input {
    Bytes(Vec<u8>),
    Segment {
        flags: u8,
        flow: u8,
        vseq: u64,
        vack: u64,
        data_ack: u64,
        window: u32,
        offset: u64,
        sack: Option<(u64, u64)>,
        payload: Vec<u8>,
    },
    Write(usize),
    Read(usize),
    Wait(u64),
    /// `set_memory_limits(send, receive)` on the target.
    Limits(u64, u64),
}

fn small_or_any() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..64, 0u64..200_000, any::<u64>()]
}

fn arb_input() -> impl Strategy<Value = Input> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80).prop_map(Input::Bytes),
        (
            0u8..0x80,
            0u8..4,
            small_or_any(),
            small_or_any(),
            small_or_any(),
            any::<u32>(),
            small_or_any(),
            prop::option::of((small_or_any(), 1u64..100)),
            prop::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(flags, flow, vseq, vack, data_ack, window, offset, sack, payload)| {
                    Input::Segment {
                        flags,
                        flow,
                        vseq,
                        vack,
                        data_ack,
                        window,
                        offset: offset.min(u64::MAX - 1000),
                        sack: sack.map(|(s, l)| (s.min(u64::MAX - 200), l)),
                        payload,
                    }
                }
            ),
        (0usize..20_000).prop_map(Input::Write),
        (0usize..20_000).prop_map(Input::Read),
        (0u64..3000).prop_map(Input::Wait),
        (small_or_any(), small_or_any()).prop_map(|(a, b)| Input::Limits(a, b)),
    ]
}

fn pump(c: &mut StripedConnection, s: &mut StripedConnection, now: Instant) {
    for _ in 0..10_000 {
        let mut any = false;
        if let Some((p, b)) = c.poll_transmit(now) {
            s.handle_datagram(now, p, &b);
            any = true;
        }
        if let Some((p, b)) = s.poll_transmit(now) {
            c.handle_datagram(now, p, &b);
            any = true;
        }
        if !any {
            return;
        }
    }
}

proptest! {
    #[test]
    fn hostile_input_never_panics(
        inputs in prop::collection::vec(arb_input(), 1..60),
        to_server in prop::collection::vec(any::<bool>(), 60),
        algorithm in prop::sample::select(&[
            CongestionAlgorithm::NewReno,
            CongestionAlgorithm::Cubic,
            CongestionAlgorithm::Bbr,
        ]),
        autotune in prop::option::of(1u64..2000),
    ) {
        let mut cfg = Config { receive_buffer_bytes: 64 << 10, ..Config::default() };
        cfg.flow.congestion.algorithm = algorithm;
        cfg.autotune_receive_window = autotune.map(Duration::from_millis);
        let mut now = Instant::ZERO;
        let mut c = StripedConnection::connect(cfg, now, &[PathId(0), PathId(1)]);
        let mut s = StripedConnection::accept(cfg);
        pump(&mut c, &mut s, now);
        let mut buf = vec![0u8; 20_000];
        for (i, input) in inputs.into_iter().enumerate() {
            let target = if to_server[i] { &mut s } else { &mut c };
            match input {
                Input::Bytes(b) => target.handle_datagram(now, PathId(0), &b),
                Input::Segment { flags, flow, vseq, vack, data_ack, window, offset, sack, payload } => {
                    let mut seg = Segment::new(FlowId(flow), Flags::from_bits(flags).unwrap());
                    seg.vseq = VirtualSeq(vseq);
                    seg.vack = VirtualSeq(vack);
                    seg.data_ack = data_ack;
                    seg.window = window;
                    seg.offset = offset;
                    if let Some((a, l)) = sack {
                        seg.sacks[0] = SackBlock { start: VirtualSeq(a), end: VirtualSeq(a + l) };
                        seg.sack_len = 1;
                    }
                    seg.payload = &payload;
                    target.handle_datagram(now, PathId(flow % 2), &seg.to_vec());
                }
                Input::Write(n) => {
                    target.write(&vec![5; n]);
                }
                Input::Read(n) => {
                    target.read(&mut buf[..n]);
                }
                Input::Limits(send, receive) => target.set_memory_limits(send, receive),
                Input::Wait(ms) => {
                    now = now + Duration::from_millis(ms);
                    if c.poll_timeout().is_some_and(|t| t <= now) {
                        c.handle_timeout(now);
                    }
                    if s.poll_timeout().is_some_and(|t| t <= now) {
                        s.handle_timeout(now);
                    }
                }
            }
            pump(&mut c, &mut s, now);
            for end in [&c, &s] {
                prop_assert!(end.receive_buffered_bytes() <= 64 << 10);
                prop_assert!(end.receive_window_bytes() <= 64 << 10);
                // Bytes and entries: the window and a quarter out of order, an entry per
                // KiB or so in order; a peer's every-other-byte once cost 50 times the window.
                prop_assert!(
                    end.receive_held_charge() <= 96 << 10,
                    "charge {}",
                    end.receive_held_charge()
                );
            }
            while c.poll_event().is_some() {}
            while s.poll_event().is_some() {}
        }
    }
}

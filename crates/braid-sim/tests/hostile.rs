//! Bad input never crashes anything: arbitrary bytes and well-formed but lying messages fed to
//! an endpoint, in every resequencing mode, between valid traffic.

use braid_proto::credit::CreditConfig;
use braid_proto::resequence::{ResequenceMode, ResequencerConfig};
use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};
use braid_proto::striper::StriperConfig;
use braid_proto::time::{Duration, Instant};
use braid_proto::{Credit, Marker, PacketNumber, PathId};
use braid_sim::pair::{Endpoint, EndpointConfig};
use braid_wire::{Credits, Repr};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Input {
    Bytes(Vec<u8>),
    Data {
        path: u8,
        seq: Option<u64>,
        len: u16,
    },
    Marker {
        path: u8,
        round: u64,
        deficit: i64,
        tx_bytes: u64,
    },
    Feedback(Vec<(u8, u64)>),
    Advance(u32),
}

/// Any u64, with the edges (0, 1, MAX-1, MAX) well represented.
fn edgy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX - 1),
        Just(u64::MAX),
        0u64..1000,
        any::<u64>(),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64).prop_map(Input::Bytes),
        (0u8..4, prop::option::of(edgy()), 0u16..2000).prop_map(|(path, seq, len)| Input::Data {
            path,
            seq,
            len
        }),
        (0u8..4, edgy(), any::<i64>(), edgy()).prop_map(|(path, round, deficit, tx_bytes)| {
            Input::Marker {
                path,
                round,
                deficit,
                tx_bytes,
            }
        }),
        prop::collection::vec((0u8..64, edgy()), 0..5).prop_map(Input::Feedback),
        (0u32..1_000_000_000).prop_map(Input::Advance),
    ]
}

fn endpoint(mode: ResequenceMode) -> Endpoint {
    let sched = SchedulerConfig::new(SchedulerKind::Srr, vec![10_000_000, 20_000_000, 5_000_000]);
    let mut striper = StriperConfig::new(sched.clone());
    striper.sequence_numbers = mode == ResequenceMode::Sequence;
    let credits = CreditConfig::proportional(1 << 20, &[1, 2, 1], Duration::from_millis(10));
    striper.initial_credit_bytes = Some(credits.share_bytes.clone());
    let mut receiver = ResequencerConfig::new(mode, sched);
    receiver.buffer_limit_bytes = 256 * 1024;
    Endpoint::new(&EndpointConfig {
        striper,
        receiver,
        credits: Some(credits),
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn endpoint_survives_anything(inputs in prop::collection::vec(input(), 0..300)) {
        for mode in [ResequenceMode::Logical, ResequenceMode::Sequence, ResequenceMode::None] {
            let mut e = endpoint(mode);
            let mut now = Instant::ZERO;
            let mut buf = Vec::new();
            for inp in &inputs {
                let bytes = match inp {
                    Input::Bytes(b) => b.clone(),
                    Input::Data { path, seq, len } => Repr::Data {
                        path: PathId(*path),
                        seq: *seq,
                        payload: &vec![0u8; *len as usize],
                    }
                    .emit_to_vec()
                    .unwrap(),
                    Input::Marker { path, round, deficit, tx_bytes } => Repr::Marker(Marker {
                        path: PathId(*path),
                        number: PacketNumber { round: *round, deficit: *deficit },
                        tx_bytes: *tx_bytes,
                    })
                    .emit_to_vec()
                    .unwrap(),
                    Input::Feedback(c) => {
                        let credits: Vec<Credit> = c
                            .iter()
                            .map(|&(p, l)| Credit { path: PathId(p), limit_bytes: l })
                            .collect();
                        Repr::Feedback(Credits::from_slice(&credits)).emit_to_vec().unwrap()
                    }
                    Input::Advance(ns) => {
                        now = now + Duration::from_nanos(u64::from(*ns));
                        Vec::new()
                    }
                };
                let path = PathId(bytes.get(2).copied().unwrap_or(0) % 4);
                e.handle_datagram(now, path, &bytes);
                while e.poll_deliver(now).is_some() {}
                // Our own sending must keep working too.
                let _ = e.send(now, vec![1; 100]);
                for p in 0..3 {
                    while e.poll_transmit(now, PathId(p), &mut buf) {}
                }
                prop_assert!(e.receiver().total_buffered_bytes() <= 512 * 1024);
            }
        }
    }
}

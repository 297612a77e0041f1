//! A hostile peer: authenticated, but lying. A proxy serves many clients, and any one of them
//! holds a valid key, so whatever its session can seal reaches the server's session past the
//! cryptography: data with any sequence number, markers, credits, probes and their
//! acknowledgements with any clock or rate, NACKs and abandons of any range, SIG-ACKs with any
//! arrival times, pTCP segments of any connection, and bytes that parse as nothing. None of it
//! may panic the session (a panic takes every client's tunnel down) or make it hold more than
//! its bounds, and the session must keep sending and polling as before. The same holds the
//! other way round, for a client whose server lies.
//!
//! Each case builds a bond of random shape (scheduler, resequencing, in-tunnel retransmission,
//! delay equalisation, adaptive SRR, a `[qos]` shaper), establishes it honestly, then
//! interleaves forged frames with honest traffic both ways and time steps
//! (`braid_session::hostile`, feature `fuzzing`, which the fuzz target
//! `fuzz/fuzz_targets/hostile_peer.rs` drives with raw bytes too).

use braid_proto::pet::SigAckEntry;
use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::time::{Duration, Instant};
use braid_proto::{Credit, Marker, PacketNumber, PathId};
use braid_session::hostile::{held_bound, Pair, Shape, HELD_BOUND, PATHS};
use braid_session::params::{
    PathPolicy, PolicyStriping, MAX_CREDIT_BUFFER_BYTES, MAX_QUEUE_LIMIT_BYTES,
};
use braid_wire::sigack::SigAcks;
use braid_wire::{Abandon, Credits, Nack, Probe, Repr, Unheard};
use proptest::prelude::*;

/// A frame the liar seals and sends on wire path `wire` (its inner path fields are separate:
/// they may name another path, or one the bond does not have).
#[derive(Debug, Clone)]
enum Frame {
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
    Probe {
        ack: bool,
        path: u8,
        id: u32,
        timestamp: u64,
        rate_kbps: u32,
        unheard: bool,
    },
    Nack {
        path: u8,
        first: u64,
        count: u32,
    },
    Abandon {
        path: u8,
        first: u64,
        count: u32,
    },
    /// "Nothing heard on this path": the receiver takes it out of its sending half and
    /// reinjects what it sent there from `first` on (not below `next_seq`).
    Unheard {
        path: u8,
        first: u64,
        next_seq: u64,
    },
    SigAck(Vec<(u8, u64, u64)>),
    /// PET's padding: an id (its top bit set if the wire is to take it) and zeros.
    Padding {
        path: u8,
        id: u64,
        len: u16,
    },
    Ptcp {
        conn: u16,
        segment: Vec<u8>,
    },
    /// A header compression context: a template made from an IPv4 TCP header (`valid`) or
    /// any bytes.
    ContextInstall {
        cid: u8,
        generation: u8,
        valid: bool,
        bytes: Vec<u8>,
    },
    ContextAck {
        cid: u8,
        generation: u8,
    },
    /// A data packet whose payload claims to be compressed: generation, context id, then
    /// `rest`.
    Compressed {
        path: u8,
        seq: Option<u64>,
        generation: u8,
        cid: u8,
        rest: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
enum Step {
    /// The liar seals `frame` and sends it on wire path `wire`.
    Forge { wire: u8, frame: Frame },
    /// The liar floods data on wire path `wire`: `times` packets of `len` bytes naming inner
    /// path `path`, their sequence numbers counting up from `seq` (if any). Enough to pass
    /// the bounds: 4,000-8,000 packets of 1,200-1,400 bytes are 4.8-11.2 MB.
    Flood {
        wire: u8,
        path: u8,
        seq: Option<u64>,
        len: u16,
        times: u16,
    },
    /// Both ends send `n` honest packets to each other.
    Honest(u8),
    /// Time passes (nanoseconds), with the honest datagrams in flight delivered.
    Advance(u32),
}

/// Any u64, with the edges well represented: 0, 1, the top, the transport counters' limit
/// (2^56: a NACK's range), the top of an i64, and small values near a fresh session's
/// counters and sequence numbers.
fn edgy() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            u64::MAX - 1,
            u64::MAX,
            (1 << 56) - 1,
            1 << 56,
            i64::MAX as u64,
        ]),
        0u64..2000,
        any::<u64>(),
    ]
}

/// [`edgy`] for a u32 (its top edges become u32's).
fn edgy32() -> impl Strategy<Value = u32> {
    edgy().prop_map(|v| v as u32)
}

fn frame() -> impl Strategy<Value = Frame> {
    // Inner path fields: mostly the bond's (0..3), sometimes past it.
    let path = || prop_oneof![4 => 0u8..3, 1 => 3u8..64];
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80).prop_map(Frame::Bytes),
        (path(), prop::option::of(edgy()), 0u16..1500).prop_map(|(path, seq, len)| Frame::Data {
            path,
            seq,
            len
        }),
        (path(), edgy(), any::<i64>(), edgy()).prop_map(|(path, round, deficit, tx_bytes)| {
            Frame::Marker {
                path,
                round,
                deficit,
                tx_bytes,
            }
        }),
        prop::collection::vec((path(), edgy()), 0..5).prop_map(Frame::Feedback),
        (
            any::<bool>(),
            path(),
            edgy32(),
            edgy(),
            edgy32(),
            any::<bool>()
        )
            .prop_map(
                |(ack, path, id, timestamp, rate_kbps, unheard)| Frame::Probe {
                    ack,
                    path,
                    id,
                    timestamp,
                    rate_kbps,
                    unheard: unheard && !ack,
                }
            ),
        (path(), edgy(), edgy32()).prop_map(|(path, first, count)| Frame::Nack {
            path,
            first,
            count
        }),
        (path(), edgy(), edgy32()).prop_map(|(path, first, count)| Frame::Abandon {
            path,
            first,
            count
        }),
        (path(), edgy(), edgy()).prop_map(|(path, first, next_seq)| Frame::Unheard {
            path,
            first,
            next_seq
        }),
        prop::collection::vec((path(), edgy(), edgy()), 0..12).prop_map(Frame::SigAck),
        (path(), edgy(), 0u16..1500).prop_map(|(path, id, len)| Frame::Padding {
            path,
            id: id | 1 << 63,
            len
        }),
        (any::<u16>(), prop::collection::vec(any::<u8>(), 1..80))
            .prop_map(|(conn, segment)| Frame::Ptcp { conn, segment }),
        (
            0u8..4,
            0u8..17,
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 40..=72)
        )
            .prop_map(|(cid, generation, valid, bytes)| Frame::ContextInstall {
                cid,
                generation,
                valid,
                bytes
            }),
        (0u8..4, 0u8..17).prop_map(|(cid, generation)| Frame::ContextAck { cid, generation }),
        (
            path(),
            prop::option::of(edgy()),
            0u8..16,
            0u8..4,
            prop::collection::vec(any::<u8>(), 0..1400)
        )
            .prop_map(|(path, seq, generation, cid, rest)| Frame::Compressed {
                path,
                seq,
                generation,
                cid,
                rest
            }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, frame()).prop_map(|(wire, frame)| Step::Forge { wire, frame }),
        1 => (0u8..3, 0u8..3, prop::option::of(edgy()), 1200u16..1400, 4000u16..8000).prop_map(
            |(wire, path, seq, len, times)| Step::Flood {
                wire,
                path,
                seq,
                len,
                times
            }
        ),
        2 => (1u8..20).prop_map(Step::Honest),
        2 => (0u32..400_000_000).prop_map(Step::Advance),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![
            Just(SchedulerKind::Srr),
            Just(SchedulerKind::Pet),
            Just(SchedulerKind::Edpf),
            Just(SchedulerKind::Rr),
        ],
        prop_oneof![
            Just(ResequenceMode::Sequence),
            Just(ResequenceMode::Logical),
            Just(ResequenceMode::None),
        ],
        any::<[bool; 7]>(),
    )
        .prop_map(|(scheduler, resequence, flags)| Shape::new(scheduler, resequence, flags))
}

/// The inner bytes of `frame`. What the codec will not emit (a path past `MAX_PATHS`, an
/// empty payload) goes as nothing; `Frame::Bytes` covers inner bytes that parse as nothing.
fn inner(frame: &Frame) -> Vec<u8> {
    let repr = |r: Repr<'_>| r.emit_to_vec().unwrap_or_default();
    match frame {
        Frame::Bytes(b) => b.clone(),
        Frame::Data { path, seq, len } => repr(Repr::Data {
            path: PathId(*path),
            seq: *seq,
            payload: &vec![0x45; usize::from(*len)],
        }),
        Frame::Marker {
            path,
            round,
            deficit,
            tx_bytes,
        } => repr(Repr::Marker(Marker {
            path: PathId(*path),
            number: PacketNumber {
                round: *round,
                deficit: *deficit,
            },
            tx_bytes: *tx_bytes,
        })),
        Frame::Feedback(c) => {
            let credits: Vec<Credit> = c
                .iter()
                .map(|&(p, l)| Credit {
                    path: PathId(p),
                    limit_bytes: l,
                })
                .collect();
            repr(Repr::Feedback(Credits::from_slice(&credits)))
        }
        Frame::Probe {
            ack,
            path,
            id,
            timestamp,
            rate_kbps,
            unheard,
        } => {
            let p = Probe {
                path: PathId(*path),
                id: *id,
                timestamp: *timestamp,
                rate_kbps: *rate_kbps,
                unheard: *unheard,
            };
            repr(if *ack {
                Repr::ProbeAck(p)
            } else {
                Repr::Probe(p)
            })
        }
        Frame::Nack { path, first, count } => repr(Repr::Nack(Nack {
            path: PathId(*path),
            first: *first,
            count: *count,
        })),
        Frame::Abandon { path, first, count } => repr(Repr::Abandon(Abandon {
            path: PathId(*path),
            first: *first,
            count: *count,
        })),
        Frame::Unheard {
            path,
            first,
            next_seq,
        } => repr(Repr::Unheard(Unheard {
            path: PathId(*path),
            first: *first,
            next_seq: *next_seq,
        })),
        Frame::SigAck(entries) => {
            let entries: Vec<SigAckEntry> = entries
                .iter()
                .map(|&(p, seq, at)| SigAckEntry {
                    path: PathId(p),
                    seq,
                    arrival: Instant::from_nanos(at),
                })
                .collect();
            repr(Repr::SigAck(SigAcks::from_slice(&entries)))
        }
        Frame::Padding { path, id, len } => repr(Repr::Padding {
            path: PathId(*path),
            id: *id,
            len: u32::from(*len),
        }),
        Frame::Ptcp { conn, segment } => repr(Repr::Ptcp {
            conn: *conn,
            segment,
        }),
        Frame::ContextInstall {
            cid,
            generation,
            valid,
            bytes,
        } => {
            let mut t = bytes.clone();
            if *valid {
                // IPv4 and TCP without options, every changing field zero.
                t.truncate(40);
                t[..12].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0]);
                t[24..40].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0]);
            }
            repr(Repr::ContextInstall {
                cid: *cid,
                generation: *generation,
                template: &t,
            })
        }
        Frame::ContextAck { cid, generation } => repr(Repr::ContextAck {
            cid: *cid,
            generation: *generation,
        }),
        Frame::Compressed {
            path,
            seq,
            generation,
            cid,
            rest,
        } => {
            let mut payload = vec![0x10 | generation, *cid];
            payload.extend_from_slice(rest);
            repr(Repr::Data {
                path: PathId(*path),
                seq: *seq,
                payload: &payload,
            })
        }
    }
}

/// Carry out one step; for a forged frame, whether the liar's session sealed it.
fn run(pair: &mut Pair, step: &Step) -> bool {
    match step {
        Step::Forge { wire, frame } => pair.forge(PathId(*wire), &inner(frame)),
        Step::Flood {
            wire,
            path,
            seq,
            len,
            times,
        } => {
            for k in 0..u64::from(*times) {
                let frame = Frame::Data {
                    path: *path,
                    seq: seq.map(|s| s.wrapping_add(k)),
                    len: *len,
                };
                pair.forge(PathId(*wire), &inner(&frame));
            }
            true
        }
        Step::Honest(n) => {
            pair.honest(u32::from(*n));
            true
        }
        Step::Advance(ns) => {
            pair.step(Duration::from_nanos(u64::from(*ns)));
            true
        }
    }
}

/// After the steps: idle, a little honest traffic, idle again, and a status from each end.
fn settle(pair: &mut Pair) {
    pair.step(Duration::from_secs(2));
    pair.honest(2);
    pair.step(Duration::from_secs(1));
    let _ = (pair.client.status(), pair.server.status());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_lying_peer_crashes_nothing_and_bloats_nothing(
        shape in shape(),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let Some(mut pair) = Pair::established(&shape) else {
            return Err(TestCaseError::fail(format!("no handshake: {shape:?}")));
        };
        for st in &steps {
            if let Step::Forge { wire, .. } = st {
                // Only a wire path the bond does not have is refused.
                prop_assert_eq!(run(&mut pair, st), usize::from(*wire) < PATHS);
            } else {
                run(&mut pair, st);
            }
            let held = pair.held_bytes();
            prop_assert!(held <= HELD_BOUND, "{} bytes held: {:?}", held, shape);
        }
        // Whatever it was told, each end still runs: timers, polls, status.
        settle(&mut pair);
    }
}

/// Bond parameters a lying client may propose, within what a server accepts
/// (`BondParams::validate`): any rates, packet sizes, hold and backup timers, credit buffers,
/// queues up to the 64 MiB limit, marker intervals and path policies.
fn wild_params(shape: &Shape) -> impl Strategy<Value = braid_session::BondParams> {
    let base = shape.params();
    (
        // Up to 10 Tbit/s, the most a path may claim.
        prop::collection::vec(
            prop_oneof![Just(1u64), Just(10_000_000_000_000), 1u64..100_000_000_000],
            PATHS,
        ),
        576u32..9000,
        any::<u64>(),
        prop_oneof![Just(0u32), 0u32..5, Just(u32::MAX)],
        edgy32(),
        prop_oneof![
            Just(0u64),
            1u64..=MAX_CREDIT_BUFFER_BYTES,
            Just(MAX_CREDIT_BUFFER_BYTES)
        ],
        prop_oneof![Just(0u32), 1u32..200_000, Just(MAX_QUEUE_LIMIT_BYTES)],
        0u8..=16,
        prop::collection::vec((1u64.., 1u64..8, 0u8..3, any::<bool>()), 0..3),
        0u64..7,
    )
        .prop_map(
            move |(
                rates,
                max_packet,
                seed,
                markers,
                hold,
                credit,
                queue,
                backup,
                policies,
                backups,
            )| {
                let mut p = base.clone();
                p.rates_bps = rates;
                p.max_packet = max_packet;
                p.seed = seed;
                if p.resequence == braid_proto::resequence::ResequenceMode::Logical {
                    p.marker_interval_rounds = markers;
                }
                p.hold_ms = hold;
                p.credit_buffer_bytes = credit;
                p.queue_limit_bytes = queue;
                p.backup_rtt_multiple = backup;
                // Policies need sequence numbers.
                let sequence = p.resequence == braid_proto::resequence::ResequenceMode::Sequence;
                p.policies = policies
                    .into_iter()
                    .filter(|_| sequence)
                    .map(|(dscp, paths, striping, duplicate)| PathPolicy {
                        dscp,
                        paths,
                        striping: [
                            PolicyStriping::Packet,
                            PolicyStriping::Flow,
                            PolicyStriping::Fastest,
                        ][usize::from(striping)],
                        // A copy is told apart by its sequence number: per-packet only.
                        duplicate: duplicate && striping == 0,
                    })
                    .collect();
                // Any backup paths but all three (with sequence numbers only).
                p.backup_paths = if sequence { backups } else { 0 };
                p
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A client's bond parameters set the server's schedulers, timers and limits: whatever a
    /// client proposes that the server accepts, honest traffic, forged frames and floods both
    /// ways crash nothing and stay within the bounds those parameters set.
    #[test]
    fn a_lying_clients_bond_parameters_crash_nothing(
        (shape, params) in shape().prop_flat_map(|s| (Just(s.clone()), wild_params(&s))),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        prop_assume!(params.validate().is_ok());
        let bound = held_bound(&params);
        let Some(mut pair) = Pair::established_with(&shape, params.clone()) else {
            return Err(TestCaseError::fail(format!("no handshake: {params:?}")));
        };
        for st in &steps {
            run(&mut pair, st);
            let held = pair.held_bytes();
            prop_assert!(held <= bound, "{} bytes held: {:?}", held, params);
        }
        settle(&mut pair);
    }
}

/// Empty data packets and markers cost a receiver no bytes, but each takes an entry: a lying
/// client's flood of them is bounded by the resequencer's charge per entry
/// (`Resequencer::held_charge`), not only by its bytes, in either mode that holds packets.
/// Without the charge, 2^24 empty packets fit a sequence receiver's window (about 0.8 GB).
#[test]
fn a_flood_of_empty_packets_and_markers_is_bounded_by_entries() {
    for resequence in [ResequenceMode::Sequence, ResequenceMode::Logical] {
        let flags = [false, false, false, false, true, false, false];
        let shape = Shape::new(SchedulerKind::Rr, resequence, flags);
        let mut pair = Pair::established(&shape).expect("handshake");
        // Every path in the server's rotation.
        pair.honest(20);
        pair.step(Duration::from_secs(1));
        // Far ahead of what the server expects, past a gap no other path has passed, so the
        // sequence receiver holds all of it; logical reception waits on another path.
        for k in 0..150_000u64 {
            let frame = if resequence == ResequenceMode::Logical && k % 2 == 1 {
                Frame::Marker {
                    path: 1,
                    round: 1 + k,
                    deficit: 0,
                    tx_bytes: 0,
                }
            } else {
                Frame::Data {
                    path: 1,
                    seq: Some((1 << 20) + k),
                    len: 0,
                }
            };
            pair.forge(PathId(1), &inner(&frame));
        }
        let held = pair.held_bytes();
        assert!(held <= HELD_BOUND, "{resequence:?}: {held} held");
        settle(&mut pair);
    }
}

/// A bond whose client is lied to (the server forges), carrying traffic for 300 ms, so its
/// retransmit ring holds copies a forged "path dark" notice would have reinjected.
fn reinjecting_pair() -> Pair {
    // retransmit, equalize, adaptive, qos, liar_is_client, compress, backup
    let shape = Shape::new(
        SchedulerKind::Srr,
        ResequenceMode::Sequence,
        [true, true, false, false, false, false, false],
    );
    let mut pair = Pair::established(&shape).expect("established");
    for _ in 0..300 {
        pair.honest(3);
    }
    pair
}

fn unheard(path: u8, first: u64) -> Vec<u8> {
    Repr::Unheard(Unheard {
        path: PathId(path),
        first,
        next_seq: 0,
    })
    .emit_to_vec()
    .unwrap()
}

/// Forged notices that every path is dark: the copies have no path left to go on. They wait
/// (and are given up after a second), and the session does not ask to be polled again at the
/// same instant over and over (a daemon would spin, the simulator hang).
#[test]
fn notices_that_every_path_is_dark_do_not_spin() {
    let mut pair = reinjecting_pair();
    // Counters past the last probe the liar answered (one is due every 100 ms; the client
    // sends about a datagram a millisecond on each path), or the notice is stale.
    for p in 0..PATHS as u8 {
        let sent = pair.client.status().paths[usize::from(p)].tx_packets;
        assert!(pair.forge(PathId(p), &unheard(p, sent - 20)));
    }
    assert!(pair.client.reinjection_bytes() > 0);
    let start = pair.now;
    let victim = &mut pair.client;
    let (mut now, mut spins) = (start, 0u32);
    let mut buf = vec![0; 1 << 17];
    while now < start + Duration::from_millis(1500) && spins < 10_000 {
        let t = victim.poll_timeout().expect("established");
        if t > now {
            now = t;
        } else {
            spins += 1;
        }
        victim.handle_timeout(now);
        while victim.poll_deliver(now).is_some() {}
        for p in 0..PATHS as u8 {
            while victim.poll_transmit(now, PathId(p), &mut buf).is_some() {}
        }
    }
    assert!(spins < 100, "{spins} calls at one instant");
    assert_eq!(victim.reinjection_bytes(), 0, "given up after a second");
}

/// A liar that says a path is dark again each time it comes back (a new counter each time):
/// the copies waiting are bounded ([`braid_session::retransmit::MAX_REINJECT`]), and the
/// victim holds no more than [`HELD_BOUND`].
#[test]
fn notices_again_and_again_hold_a_bounded_queue() {
    let mut pair = reinjecting_pair();
    let mut k = 0;
    for _ in 0..12 {
        for p in 0..2u8 {
            k += 1;
            pair.forge(PathId(p), &unheard(p, k % 3));
        }
        for _ in 0..400 {
            pair.honest(3);
        }
        let held = pair.held_bytes();
        assert!(held <= HELD_BOUND, "{held} held");
    }
    let copies = pair.client.reinjection_bytes();
    let bound = braid_session::retransmit::MAX_REINJECT as u64 * 1500;
    assert!(copies <= bound, "{copies} bytes of copies");
}

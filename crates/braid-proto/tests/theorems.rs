//! Property tests for the stripe paper's theorems:
//! - Lemma 3.4 (SRR fairness): after K rounds, `|bytes_i - K q_i| <= Max`.
//! - Theorem 4.1 (logical reception): with no loss, the receiver outputs exactly the sender's
//!   input sequence, whatever the skew between channels.
//! - Theorem 5.1 (marker recovery): once loss stops and a marker has crossed every channel,
//!   delivery is FIFO again.

use braid_proto::resequence::{ResequenceMode, Resequencer, ResequencerConfig};
use braid_proto::scheduler::{CausalScheduler, QuantumRule, SchedulerConfig, SchedulerKind, Srr};
use braid_proto::striper::{MarkerConfig, MarkerPosition, Outgoing, Striper, StriperConfig};
use braid_proto::{Instant, PathId};
use proptest::prelude::*;
use std::collections::VecDeque;

const NOW: Instant = Instant::ZERO;

fn kind_strategy() -> impl Strategy<Value = SchedulerKind> {
    prop_oneof![
        Just(SchedulerKind::Srr),
        Just(SchedulerKind::Grr),
        Just(SchedulerKind::Rr),
        Just(SchedulerKind::Rfq),
    ]
}

fn position_strategy() -> impl Strategy<Value = MarkerPosition> {
    prop_oneof![
        Just(MarkerPosition::Start),
        Just(MarkerPosition::Middle),
        Just(MarkerPosition::End),
    ]
}

/// A sender/receiver config pair over `rates` with quanta from the rates.
fn configs(
    kind: SchedulerKind,
    rates: &[u64],
    max_packet: u32,
    markers: MarkerConfig,
    mode: ResequenceMode,
    seed: u64,
) -> (StriperConfig, ResequencerConfig) {
    let mut sched = SchedulerConfig::new(kind, rates.to_vec());
    sched.max_packet = max_packet;
    sched.seed = seed;
    let mut tx = StriperConfig::new(sched.clone());
    tx.markers = markers;
    tx.sequence_numbers = mode == ResequenceMode::Sequence;
    tx.queue_limit_bytes = u64::MAX;
    let mut rx = ResequencerConfig::new(mode, sched);
    rx.hold = None;
    rx.buffer_limit_bytes = u64::MAX / 4;
    (tx, rx)
}

/// Stripe `sizes` (ids 0..n) and return each path's message sequence; `lost(i)` decides whether
/// the i-th message put on a channel (in sending order) is lost. Markers are queued on every
/// path after the last packet.
fn stripe(
    tx: &StriperConfig,
    sizes: &[u32],
    lost: impl FnMut(usize, &Outgoing<u64>) -> bool,
) -> Vec<VecDeque<Outgoing<u64>>> {
    stripe_tagged(tx, sizes, usize::MAX, lost)
        .into_iter()
        .map(|ch| ch.into_iter().map(|(m, _)| m).collect())
        .collect()
}

/// Like [`stripe`], tagging each message with whether it was sent once packet `clean_from`
/// had been striped (after the loss stopped).
fn stripe_tagged(
    tx: &StriperConfig,
    sizes: &[u32],
    clean_from: usize,
    mut lost: impl FnMut(usize, &Outgoing<u64>) -> bool,
) -> Vec<VecDeque<(Outgoing<u64>, bool)>> {
    let mut s: Striper<u64> = Striper::new(tx).unwrap();
    let n = s.paths();
    let mut channels = vec![VecDeque::new(); n];
    let mut count = 0;
    let mut drain =
        |s: &mut Striper<u64>, channels: &mut Vec<VecDeque<(Outgoing<u64>, bool)>>, clean: bool| {
            for (p, ch) in channels.iter_mut().enumerate() {
                while let Some(t) = s.poll_transmit(NOW, PathId(p as u8)) {
                    if !lost(count, &t.message) {
                        ch.push_back((t.message, clean));
                    }
                    count += 1;
                }
            }
        };
    for (id, &len) in sizes.iter().enumerate() {
        s.send(NOW, len, id as u64).unwrap();
        drain(&mut s, &mut channels, id >= clean_from);
    }
    s.queue_markers();
    drain(&mut s, &mut channels, true);
    channels
}

/// Deliver the channels' messages to a receiver in an arrival order chosen by `order` (each
/// entry picks a channel; exhausted or out-of-range picks fall through to the next non-empty
/// channel), polling after every arrival. Returns the delivered ids.
fn receive(
    rx: &ResequencerConfig,
    channels: Vec<VecDeque<Outgoing<u64>>>,
    order: &[u8],
) -> Vec<u64> {
    let tagged = channels
        .into_iter()
        .map(|ch| ch.into_iter().map(|m| (m, false)).collect())
        .collect();
    receive_tagged(rx, tagged, order).0
}

/// Like [`receive`]; also returns how many packets had been delivered at the time `t` when a
/// tagged (post-loss) marker had been received and processed on every channel, in the sense
/// of Appendix B, Lemma B.4 (`None` if that never happened or the receiver is not logical).
fn receive_tagged(
    rx: &ResequencerConfig,
    mut channels: Vec<VecDeque<(Outgoing<u64>, bool)>>,
    order: &[u8],
) -> (Vec<u64>, Option<usize>) {
    let mut r: Resequencer<u64> = Resequencer::new(rx).unwrap();
    let n = channels.len();
    let mut out = Vec::new();
    // Per channel: markers that arrived before the first post-loss one (None: not yet arrived).
    let mut before_clean: Vec<Option<u64>> = vec![None; n];
    let mut arrived = vec![0u64; n];
    let mut t = None;
    let mut picks = order.iter().copied().chain(std::iter::repeat(0));
    while channels.iter().any(|c| !c.is_empty()) {
        let want = picks.next().unwrap() as usize % n;
        let p = (0..n)
            .map(|k| (want + k) % n)
            .find(|&p| !channels[p].is_empty())
            .unwrap();
        let path = PathId(p as u8);
        match channels[p].pop_front().unwrap() {
            (Outgoing::Data { seq, len, payload }, _) => {
                r.handle_data(NOW, path, seq, len, payload)
            }
            (Outgoing::Marker(m), clean) => {
                if clean && before_clean[p].is_none() {
                    before_clean[p] = Some(arrived[p]);
                }
                arrived[p] += 1;
                r.handle_marker(NOW, path, m);
            }
            (Outgoing::Padding { .. }, _) => {}
        }
        while let Some(d) = r.poll_deliver(NOW) {
            out.push(d.payload);
        }
        if let (None, Resequencer::Logical(l)) = (t, &r) {
            let processed = (0..n).all(|p| {
                let path = PathId(p as u8);
                before_clean[p]
                    .is_some_and(|k| l.markers_taken(path) > k && l.marker_processed(path))
            });
            if processed {
                t = Some(out.len());
            }
        }
    }
    (out, t)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Lemma 3.4: at the end of every round K of every channel, `|Send_i(K) - K q_i| <= Max`.
    #[test]
    fn lemma_3_4_srr_fairness(
        max in 64u32..=9000,
        factors in prop::collection::vec(1u32..=8, 1..=8),
        sizes in prop::collection::vec(any::<u32>(), 1..2000),
    ) {
        let quanta: Vec<u32> = factors.iter().map(|&f| f * max).collect();
        let mut s = Srr::new(&quanta);
        let mut bytes = vec![0u64; quanta.len()];
        for raw in sizes {
            let len = raw % max + 1;
            let p = s.select().index();
            bytes[p] += u64::from(len);
            if s.update(len) {
                let k = s.number(PathId(p as u8)).unwrap().round - 1;
                let ideal = k * u64::from(quanta[p]);
                let dev = bytes[p].abs_diff(ideal);
                prop_assert!(dev <= u64::from(max), "path {p} after {k} rounds: {} vs {ideal}", bytes[p]);
            }
        }
    }

    /// Theorem 4.1: no loss, any skew: the logical receiver outputs the input sequence.
    /// Markers (any interval and position) must not disturb it either.
    #[test]
    fn theorem_4_1_fifo_under_any_skew(
        kind in kind_strategy(),
        rates in prop::collection::vec(1u64..=100, 1..=6),
        sizes in prop::collection::vec(1u32..=1500, 0..400),
        interval in 0u64..=4,
        position in position_strategy(),
        order in prop::collection::vec(any::<u8>(), 0..2000),
        seed in any::<u64>(),
    ) {
        let markers = MarkerConfig { interval_rounds: interval, position };
        for mode in [ResequenceMode::Logical, ResequenceMode::Sequence] {
            let (tx, rx) = configs(kind, &rates, 1500, markers, mode, seed);
            let channels = stripe(&tx, &sizes, |_, _| false);
            let out = receive(&rx, channels, &order);
            let expected: Vec<u64> = (0..sizes.len() as u64).collect();
            prop_assert_eq!(out, expected, "mode {:?}", mode);
        }
    }

    /// Theorem 5.1: loss (of data and markers) on the first part of the run, none afterwards.
    /// From the time `t` when a marker sent after the loss stopped has arrived on every
    /// channel, deliveries are in FIFO order; and every packet sent after the loss is delivered
    /// exactly once.
    #[test]
    fn theorem_5_1_marker_recovery(
        kind in prop_oneof![Just(SchedulerKind::Srr), Just(SchedulerKind::Grr), Just(SchedulerKind::Rr)],
        rates in prop::collection::vec(1u64..=10, 2..=4),
        lossy in 1usize..300,
        loss_pct in 1u32..=90,
        clean in 200usize..500,
        interval in 1u64..=3,
        position in position_strategy(),
        order in prop::collection::vec(any::<u8>(), 0..3000),
        sizes_seed in any::<u64>(),
    ) {
        let markers = MarkerConfig { interval_rounds: interval, position };
        let (tx, rx) = configs(kind, &rates, 1500, markers, ResequenceMode::Logical, 0);
        // Deterministic sizes and loss pattern from the seed (SplitMix64).
        let mut x = sizes_seed;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let total = lossy + clean;
        let sizes: Vec<u32> = (0..total).map(|_| (next() % 1500) as u32 + 1).collect();
        // Lose messages sent while packets < lossy were striped (data and markers alike).
        let channels = stripe_tagged(&tx, &sizes, lossy, |_, _| false);
        let channels: Vec<VecDeque<(Outgoing<u64>, bool)>> = channels
            .into_iter()
            .map(|ch| ch.into_iter().filter(|(_, clean)| *clean || next() % 100 >= u64::from(loss_pct)).collect())
            .collect();
        let (out, t) = receive_tagged(&rx, channels, &order);
        // t: a marker sent after the loss stopped has been processed on every channel.
        let t = t.expect("the final markers are never lost");
        let after = &out[t..];
        prop_assert!(after.windows(2).all(|w| w[0] < w[1]), "not FIFO after t: {:?}", after);
        // No loss after the loss stopped: every packet striped since is delivered, once.
        let mut clean_ids: Vec<u64> = out.iter().copied().filter(|&id| id as usize >= lossy).collect();
        let n_clean = clean_ids.len();
        clean_ids.dedup();
        prop_assert_eq!(n_clean, clean_ids.len(), "duplicates");
        prop_assert_eq!(clean_ids.len(), clean);
    }
}

#[test]
fn srr_receiver_runs_the_same_algorithm() {
    // The receiver's scheduler is built from the same config as the sender's.
    let mut c = SchedulerConfig::new(SchedulerKind::Srr, vec![3, 5]);
    c.quantum = QuantumRule::Explicit(vec![1500, 2500]);
    let mut a = c.build().unwrap();
    let mut b = c.build().unwrap();
    for len in [100u32, 1500, 700, 1499, 1] {
        assert_eq!(a.select(), b.select());
        a.update(len);
        b.update(len);
    }
}

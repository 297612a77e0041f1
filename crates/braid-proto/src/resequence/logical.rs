//! Logical reception with marker resynchronisation (stripe paper sections 4 and 5, Appendix A).

use super::{Delivery, ResequencerConfig, ResequencerStats};
use crate::path::{Marker, PathId};
use crate::scheduler::{CausalScheduler, ConfigError, Scheduler};
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

/// A marker this many rounds or fewer away from the receiver's round on its path is honoured as
/// Appendix A says (skip the path until the rounds agree, or catch up). Further out, skipping
/// would stall the path for that many rounds, so the receiver instead resets the path: it adopts
/// the marker's round and deficit at once (counted in `marker_resets`), accepting some
/// misordering over a stall.
pub const MAX_MARKER_ROUND_JUMP: u64 = 1 << 10;

/// Rounds above this are nonsense (no sender gets there); such markers are dropped.
pub const MAX_ROUND: u64 = 1 << 62;

/// Upper bound on scheduler steps in one `poll_deliver` call (every step delivers, consumes a
/// marker or skips a path towards a bounded target, so this is never reached in practice).
const MAX_STEPS: usize = 1 << 22;

#[derive(Clone, Debug)]
enum Rx<P> {
    Data { len: u32, payload: P },
    Marker(Marker),
}

#[derive(Clone, Debug)]
struct RxPath<P> {
    queue: VecDeque<Rx<P>>,
    buffered: u64,
    /// `R_save` of Appendix A: the round of the last marker processed on this path.
    saved_round: u64,
    /// Data still owed from rounds the receiver has already left (in scheduler units); these
    /// packets are delivered out of turn. Only arises after a hold or forced skip.
    late: i64,
    /// Markers removed from this path's queue.
    markers_taken: u64,
}

/// The logical receiver: the receiver half of the stripe protocol.
///
/// It buffers arrivals per path (physical reception) and removes them in the order the sender's
/// causal scheduler produced them (logical reception, section 4): the same scheduler picks the
/// path, and the receiver blocks on that path until its next packet is there. With no loss the
/// output is exactly the sender's input (Theorem 4.1), whatever the skew between paths.
///
/// After loss, markers restore FIFO (Theorem 5.1). A marker `(r, c)` at the head of the current
/// path's queue sets the path's deficit to `c` and its saved round to `r`; a path whose saved
/// round is ahead of its own round is skipped (`Skipline`) until the round catches up, which keeps
/// condition C1 (never deliver a later round before an earlier one).
///
/// Beyond the paper, for liveness:
/// - A path whose saved round is ahead is skipped even when its queue is empty (its next packet
///   is known to belong to a later round, so waiting for it is pointless).
/// - With `hold` set, the receiver stops waiting on an empty path after `hold` if other paths
///   hold data, and skips it; likewise when the buffer limit is reached. If that skip was
///   premature (the packet was late, not lost), a later marker shows the receiver ahead of the
///   path; it then delivers the path's packets of the rounds it already left out of turn, to
///   catch up, instead of staying permanently out of step.
///
/// # Polling
/// See [`super::Resequencer`]. `now` must never go backwards.
#[derive(Clone, Debug)]
pub struct LogicalReceiver<P> {
    sched: Scheduler,
    paths: Vec<RxPath<P>>,
    total_buffered: u64,
    /// What every queue holds costs, data and markers ([`super::charge`]), against the limit.
    held: u64,
    /// Data packets held (empty ones too: the wire allows them).
    held_data: u64,
    limit: u64,
    hold: Option<Duration>,
    blocked_since: Option<Instant>,
    late_paths: usize,
    stats: ResequencerStats,
}

impl<P> LogicalReceiver<P> {
    /// A logical receiver simulating `config.scheduler`.
    pub fn new(config: &ResequencerConfig) -> Result<Self, ConfigError> {
        let sched = config.scheduler.build()?;
        if let Scheduler::Edpf(_) = sched {
            return Err(ConfigError::NotCausal("edpf"));
        }
        let paths = (0..sched.paths())
            .map(|_| RxPath {
                queue: VecDeque::new(),
                buffered: 0,
                saved_round: 1,
                late: 0,
                markers_taken: 0,
            })
            .collect();
        Ok(LogicalReceiver {
            sched,
            paths,
            total_buffered: 0,
            held: 0,
            held_data: 0,
            limit: config.buffer_limit_bytes,
            hold: config.hold,
            blocked_since: None,
            late_paths: 0,
            stats: ResequencerStats::default(),
        })
    }

    /// The simulated scheduler (for inspection and tests).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// `Receive_i`: buffer a data packet that arrived on `path`.
    pub fn handle_data(
        &mut self,
        _now: Instant,
        path: PathId,
        _seq: Option<u64>,
        len: u32,
        payload: P,
    ) {
        let Some(rx) = self.paths.get_mut(path.index()) else {
            self.stats.invalid_dropped += 1;
            return;
        };
        let charge = super::charge::<Rx<P>>(len);
        if self.held + charge > self.limit.saturating_mul(2) {
            self.stats.overflow_dropped += 1;
            return;
        }
        rx.queue.push_back(Rx::Data { len, payload });
        rx.buffered += u64::from(len);
        self.total_buffered += u64::from(len);
        self.held += charge;
        self.held_data += 1;
    }

    /// `Receive_i` for a marker: buffer it in order with the data of its path.
    pub fn handle_marker(&mut self, _now: Instant, path: PathId, marker: Marker) {
        if marker.path != path || path.index() >= self.paths.len() {
            self.stats.invalid_dropped += 1;
            return;
        }
        let charge = super::charge::<Rx<P>>(0);
        if self.held + charge > self.limit.saturating_mul(2) {
            self.stats.overflow_dropped += 1;
            return;
        }
        self.held += charge;
        self.paths[path.index()].queue.push_back(Rx::Marker(marker));
    }

    /// `true` if the receiver is early on path `i`: its saved round is ahead of the path's.
    #[inline]
    fn early(&self, i: usize) -> bool {
        match self.sched.number(PathId(i as u8)) {
            Some(n) => self.paths[i].saved_round > n.round,
            None => false,
        }
    }

    /// `ProcessMarker` of Appendix A, for the marker at the head of the current path.
    fn process_marker(&mut self, path: PathId, m: Marker) {
        let i = path.index();
        let Some(cur) = self.sched.number(path) else {
            // No rounds (RFQ): nothing to adopt.
            self.stats.markers += 1;
            return;
        };
        let r = m.number.round;
        if r == 0 || r > MAX_ROUND {
            self.stats.invalid_dropped += 1;
            return;
        }
        if r.abs_diff(cur.round) > MAX_MARKER_ROUND_JUMP {
            // Far out of step (a peer restart, or a very long desynchronisation): reset the path.
            self.stats.markers += 1;
            self.stats.marker_resets += 1;
            self.sched.set_round(path, r);
            self.sched.set_deficit(path, m.number.deficit);
            self.paths[i].saved_round = r;
            self.set_late(i, 0);
            return;
        }
        if r >= cur.round {
            self.stats.markers += 1;
            self.sched.set_deficit(path, m.number.deficit);
            self.paths[i].saved_round = r;
            // In step (or early) again: nothing is owed any more.
            self.set_late(i, 0);
            if r > cur.round {
                // The receiver arrived early at this path: skip it (AdvanceReceiverPointer).
                self.sched.skip();
                self.stats.marker_skips += 1;
            }
        } else {
            // The receiver is ahead of the path (it skipped it on a hold or forced skip while the
            // packets were late, not lost). Packets of rounds r .. cur.round-1 are owed.
            let gap = cur.round - r;
            let Some(q) = self.sched.quantum(path) else {
                return;
            };
            self.stats.markers += 1;
            let owed = m.number.deficit.max(0) + (gap as i64 - 1) * q;
            self.set_late(i, owed);
            self.paths[i].saved_round = cur.round;
        }
    }

    /// Set path `i`'s owed amount, keeping `late_paths` (paths with something owed) exact.
    fn set_late(&mut self, i: usize, owed: i64) {
        let was = self.paths[i].late > 0;
        self.paths[i].late = owed;
        match (was, owed > 0) {
            (false, true) => self.late_paths += 1,
            (true, false) => self.late_paths -= 1,
            _ => {}
        }
    }

    fn take_data(&mut self, i: usize) -> Option<Delivery<P>> {
        let rx = &mut self.paths[i];
        match rx.queue.pop_front()? {
            Rx::Data { len, payload } => {
                rx.buffered -= u64::from(len);
                self.total_buffered -= u64::from(len);
                self.held -= super::charge::<Rx<P>>(len);
                self.held_data -= 1;
                self.stats.delivered += 1;
                self.stats.delivered_bytes += u64::from(len);
                Some(Delivery {
                    path: PathId(i as u8),
                    seq: None,
                    len,
                    payload,
                })
            }
            Rx::Marker(_) => unreachable!("take_data is called with data at the head"),
        }
    }

    /// Deliver owed packets of paths the receiver got ahead of.
    fn poll_late(&mut self) -> Option<Delivery<P>> {
        for i in 0..self.paths.len() {
            if self.paths[i].late > 0 {
                if let Some(Rx::Data { len, .. }) = self.paths[i].queue.front() {
                    let cost = self.sched.cost(*len);
                    let rx = &mut self.paths[i];
                    rx.late -= cost;
                    if rx.late <= 0 {
                        self.late_paths -= 1;
                    }
                    self.stats.late_deliveries += 1;
                    return self.take_data(i);
                }
            }
        }
        None
    }

    /// `Receive` / `ProcessMarker` / `Skipline` of Appendix A until a packet can be delivered
    /// or the receiver must wait.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Delivery<P>> {
        if self.late_paths > 0 {
            if let Some(d) = self.poll_late() {
                return Some(d);
            }
        }
        for _ in 0..MAX_STEPS {
            let path = self.sched.select();
            let i = path.index();
            match self.paths[i].queue.front() {
                Some(Rx::Marker(m)) => {
                    let m = *m;
                    self.paths[i].queue.pop_front();
                    self.held -= super::charge::<Rx<P>>(0);
                    self.paths[i].markers_taken += 1;
                    self.process_marker(path, m);
                    if self.paths[i].late > 0 {
                        if let Some(d) = self.poll_late() {
                            return Some(d);
                        }
                    }
                }
                Some(Rx::Data { len, .. }) => {
                    if self.early(i) {
                        self.sched.skip();
                        self.stats.marker_skips += 1;
                        self.blocked_since = None;
                        continue;
                    }
                    let len = *len;
                    self.sched.update(len);
                    self.blocked_since = None;
                    return self.take_data(i);
                }
                None => {
                    if self.early(i) {
                        self.sched.skip();
                        self.stats.marker_skips += 1;
                        self.blocked_since = None;
                        continue;
                    }
                    if self.held_data == 0 {
                        self.blocked_since = None;
                        return None;
                    }
                    // Blocked on an empty path while other paths hold data.
                    let since = *self.blocked_since.get_or_insert(now);
                    if self.held >= self.limit {
                        self.stats.forced_skips += 1;
                    } else if self.hold.is_some_and(|h| now >= since + h) {
                        self.stats.hold_skips += 1;
                    } else {
                        return None;
                    }
                    self.sched.skip();
                    self.blocked_since = Some(now);
                }
            }
        }
        None
    }

    /// When the hold timer of a blocked receiver expires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.blocked_since, self.hold) {
            (Some(since), Some(h)) if self.held_data > 0 => Some(since + h),
            _ => None,
        }
    }

    /// Payload bytes buffered for `path`.
    pub fn buffered_bytes(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.buffered)
    }

    /// Payload bytes buffered in all.
    pub fn total_buffered_bytes(&self) -> u64 {
        self.total_buffered
    }

    /// What the queues hold costs, markers included ([`super::charge`]).
    pub fn held_charge(&self) -> u64 {
        self.held
    }

    /// Counters.
    pub fn stats(&self) -> &ResequencerStats {
        &self.stats
    }

    /// Take `path` out of the rotation (it went dark) or put it back, as the sender does. The
    /// receiver's scheduler then skips it as the sender's does; anything already queued on it is
    /// delivered out of turn rather than held.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        let i = path.index();
        if i >= self.paths.len() {
            return;
        }
        self.sched.set_active(path, active);
        if !active {
            let owed: i64 = self.paths[i]
                .queue
                .iter()
                .map(|m| match m {
                    Rx::Data { len, .. } => self.sched.cost(*len),
                    Rx::Marker(_) => 0,
                })
                .sum();
            self.set_late(i, owed);
        }
    }

    /// Markers removed from `path`'s queue so far.
    pub fn markers_taken(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.markers_taken)
    }

    /// Whether the last marker taken on `path` has been *processed* in the sense of Appendix B
    /// (Lemma B.4): removed from the queue and the path skipped until `R_save <= R_r`.
    pub fn marker_processed(&self, path: PathId) -> bool {
        path.index() < self.paths.len() && !self.early(path.index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PacketNumber;
    use crate::resequence::ResequenceMode;
    use crate::scheduler::{QuantumRule, SchedulerConfig, SchedulerKind};
    use crate::striper::{MarkerConfig, MarkerPosition, Outgoing, Striper, StriperConfig};

    fn sched(kind: SchedulerKind) -> SchedulerConfig {
        let mut s = SchedulerConfig::new(kind, vec![1, 1]);
        s.quantum = QuantumRule::Explicit(vec![500, 500]);
        s.max_packet = 500;
        s
    }

    fn receiver(kind: SchedulerKind) -> LogicalReceiver<u32> {
        let mut c = ResequencerConfig::new(ResequenceMode::Logical, sched(kind));
        c.hold = None;
        LogicalReceiver::new(&c).unwrap()
    }

    fn marker(path: u8, round: u64, deficit: i64) -> Marker {
        Marker {
            path: PathId(path),
            number: PacketNumber { round, deficit },
            tx_bytes: 0,
        }
    }

    fn deliver_all(r: &mut LogicalReceiver<u32>) -> Vec<u32> {
        std::iter::from_fn(|| r.poll_deliver(Instant::ZERO).map(|d| d.payload)).collect()
    }

    #[test]
    fn blocks_on_the_slow_path() {
        // Sender order: 0 on path 0, then 1 on path 1 (SRR with q = 500, 500-byte packets).
        let mut r = receiver(SchedulerKind::Srr);
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 1);
        assert_eq!(r.poll_deliver(Instant::ZERO), None);
        r.handle_data(Instant::ZERO, PathId(0), None, 500, 0);
        assert_eq!(deliver_all(&mut r), vec![0, 1]);
    }

    /// The synchronisation example of the stripe paper, Figures 8-13: two equal channels,
    /// equal packets (SRR reduces to RR), packet 7 lost on channel 1, a marker before round 7
    /// restores order.
    #[test]
    fn figures_8_to_13_marker_recovery() {
        let mut c = StriperConfig::new(sched(SchedulerKind::Srr));
        c.markers = MarkerConfig {
            interval_rounds: 0,
            position: MarkerPosition::Start,
        };
        let mut tx: Striper<u32> = Striper::new(&c).unwrap();
        let mut rx = receiver(SchedulerKind::Srr);
        let mut out = Vec::new();
        for p in 1..=16u32 {
            if p == 13 {
                // Marker before round 7 on both channels.
                tx.queue_markers();
            }
            tx.send(Instant::ZERO, 500, p).unwrap();
            for path in [PathId(0), PathId(1)] {
                while let Some(t) = tx.poll_transmit(Instant::ZERO, path) {
                    match t.message {
                        Outgoing::Data { payload: 7, .. } => {} // lost
                        Outgoing::Data { len, payload, .. } => {
                            rx.handle_data(Instant::ZERO, path, None, len, payload)
                        }
                        Outgoing::Marker(m) => rx.handle_marker(Instant::ZERO, path, m),
                        Outgoing::Padding { .. } => {} // PET's, not SRR's
                    }
                }
            }
            out.extend(deliver_all(&mut rx));
        }
        // Out of order after the loss (9 is taken for 7), in order again from round 7 (13, 14...).
        assert_eq!(
            out,
            vec![1, 2, 3, 4, 5, 6, 9, 8, 11, 10, 12, 13, 14, 15, 16]
        );
        assert_eq!(rx.stats().marker_skips, 1);
    }

    #[test]
    fn early_path_is_skipped_even_when_empty() {
        let mut r = receiver(SchedulerKind::Srr);
        // Marker on path 0: next packet there is in round 3.
        r.handle_marker(Instant::ZERO, PathId(0), marker(0, 3, 500));
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 1);
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 2);
        assert_eq!(deliver_all(&mut r), vec![1, 2]);
    }

    #[test]
    fn hold_skips_a_dead_path() {
        let mut c = ResequencerConfig::new(ResequenceMode::Logical, sched(SchedulerKind::Srr));
        c.hold = Some(Duration::from_millis(10));
        let mut r: LogicalReceiver<u32> = LogicalReceiver::new(&c).unwrap();
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 1);
        assert_eq!(r.poll_deliver(Instant::ZERO), None);
        let t = r.poll_timeout().unwrap();
        assert_eq!(t, Instant::ZERO + Duration::from_millis(10));
        assert_eq!(r.poll_deliver(t).map(|d| d.payload), Some(1));
        assert_eq!(r.stats().hold_skips, 1);
    }

    #[test]
    fn a_marker_far_ahead_resets_the_path_instead_of_stalling_it() {
        let mut r = receiver(SchedulerKind::Srr);
        r.handle_marker(Instant::ZERO, PathId(0), marker(0, 1_000_000, 500));
        r.handle_data(Instant::ZERO, PathId(0), None, 500, 0);
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 1);
        assert_eq!(deliver_all(&mut r), vec![0, 1]);
        assert_eq!(r.stats().marker_resets, 1);
        assert_eq!(r.stats().marker_skips, 0);
    }

    #[test]
    fn a_dead_path_is_skipped_without_waiting() {
        let mut r = receiver(SchedulerKind::Srr);
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 1);
        assert!(deliver_all(&mut r).is_empty());
        r.set_path_active(PathId(0), false);
        r.handle_data(Instant::ZERO, PathId(1), None, 500, 2);
        assert_eq!(deliver_all(&mut r), vec![1, 2]);
    }

    #[test]
    fn forged_markers_are_dropped() {
        let mut r = receiver(SchedulerKind::Srr);
        let m = Marker {
            path: PathId(0),
            number: PacketNumber {
                round: u64::MAX,
                deficit: i64::MIN,
            },
            tx_bytes: 0,
        };
        r.handle_marker(Instant::ZERO, PathId(1), m); // wrong path
        r.handle_marker(Instant::ZERO, PathId(9), m); // no such path
        r.handle_marker(Instant::ZERO, PathId(0), m); // absurd round jump
        r.handle_data(Instant::ZERO, PathId(0), None, 500, 0);
        assert_eq!(deliver_all(&mut r), vec![0]);
        assert_eq!(r.stats().invalid_dropped, 3);
    }
}

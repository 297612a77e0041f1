//! Resequencing mode `sequence`: guaranteed FIFO with sequence numbers (stripe paper section 4,
//! "logical reception can help simplify the resequencing implementation"; loss detection as the
//! BAG paper's BMP), except for what the driver hands in as not to be held
//! ([`super::Resequencer::handle_data_unheld`]: TCP's pure ACKs and opening SYNs), which goes
//! as it comes, ahead of anything waiting, while fewer than [`MAX_EARLY`] are ahead.
//!
//! BMP (BAG paper section V-B) is this receiver with: comparison-based loss detection (a gap is
//! lost once every path has delivered a later packet, always on), a backup timer derived from
//! the paths' RTTs ([`BackupTimer`], instead of the paper's fixed 0.5 s), release pacing
//! ([`Pacing`]) and the byte limit of the buffer.

use super::{BackupTimer, DelayEqualizer, Delivery, Pacing, ResequencerConfig, ResequencerStats};
use crate::path::{Marker, PathId};
use crate::scheduler::{CausalScheduler, ConfigError, Scheduler};
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

/// Sequence numbers more than this far ahead of the next expected one are dropped as invalid:
/// no sender can legitimately be that far ahead, and accepting one would make every genuine
/// packet after it look stale.
pub const SEQ_WINDOW: u64 = 1 << 24;

#[derive(Clone, Debug)]
struct SeqRx<P> {
    seq: u64,
    len: u32,
    /// When delay equalisation lets it go.
    ready: Instant,
    payload: P,
}

#[derive(Clone, Debug)]
struct RxPath<P> {
    /// Arrivals on this path, kept sorted by sequence number.
    queue: VecDeque<SeqRx<P>>,
    buffered: u64,
    /// Highest sequence number that arrived on this path.
    highest: Option<u64>,
    /// RTT of the path, for the backup timer.
    rtt: Option<Duration>,
    /// In the rotation; an inactive path is not waited for.
    active: bool,
    /// Put back into the rotation when `next` was this, and nothing has arrived on it since
    /// (cleared by its first data): the gaps from here on may be its own, however old its
    /// `highest` ([`Stall`]).
    rejoined: Option<u64>,
    /// Named in a [`Stall`] and nothing has arrived on it since: it let a gap wait a whole
    /// hold in vain, so the next gaps are not waited for on its account (they count as
    /// certain once the other paths are past them), until its next data. A path that died
    /// costs one hold, not one per packet it swallowed; one that was only late has what it
    /// brings delivered late.
    suspect: bool,
}

impl<P> RxPath<P> {
    /// Data came on it (in time, early or late): it delivers, so it is no longer a path that
    /// rejoined and brought nothing, nor a suspect.
    fn brought_data(&mut self) {
        self.rejoined = None;
        self.suspect = false;
    }
}

/// FIFO delivery by sequence number over per-path queues.
///
/// Paths are FIFO, so the packet the receiver waits for (`next`), if it has arrived, is at the
/// head of one path's queue. Logical reception predicts which: the receiver runs the sender's
/// scheduler and looks at the predicted path first (the fast path); the sequence number only
/// confirms. If the prediction misses (after a loss the simulation is out of step until a
/// marker), the heads of the other paths are checked.
///
/// `next` is declared lost when every path has delivered something later (no FIFO path can
/// still carry it), when the hold timer has run since the gap was first seen, or when the
/// buffer limit is reached. Late arrivals for sequence numbers already passed are dropped.
/// The hold timer is extended by the delay skew of the paths in use, since a missing packet
/// may be on the slowest one.
///
/// With delay equalisation ([`DelayEqualizer`]) a packet is not delivered before its path's
/// hold has passed, so every packet sees the slowest path's delay; order makes everything
/// behind it wait too.
///
/// # Polling
/// See [`super::Resequencer`]. `now` must never go backwards.
#[derive(Clone, Debug)]
pub struct SequenceReceiver<P> {
    sched: Scheduler,
    paths: Vec<RxPath<P>>,
    next: u64,
    total_buffered: u64,
    /// What the queues and `express` hold costs ([`super::charge`]), against the limit.
    held: u64,
    limit: u64,
    hold: Option<Duration>,
    gap_since: Option<Instant>,
    /// Gaps below this sequence number have been certain losses (every path in the rotation
    /// past them) since `certain_since`; they wait out the retransmit grace from then, once.
    certain_below: u64,
    certain_since: Instant,
    /// With retransmission on: how long a certain loss is waited for anyway, for the resend.
    retransmit_grace: Option<Duration>,
    equalizer: DelayEqualizer,
    /// When `poll_deliver` last said to come back: the packet `next`, already here, may go
    /// (delay equalisation), or the open gap's hold timer expires.
    wake: Option<Instant>,
    backup: Option<BackupTimer>,
    pacing: Option<Pacing>,
    /// Pacing: the token bucket is full at this instant (it fills at the release rate).
    paced_until: Instant,
    /// Sequence numbers the sender gave up on ([`Self::abandon`]): `(first, end)` ranges, in
    /// arrival order, at most [`MAX_ABANDONED`].
    abandoned: VecDeque<(u64, u64)>,
    /// Packets sent without a sequence number (a per-flow policy's: the flow keeps to one
    /// FIFO path, so it needs no resequencing), delivered as they arrive, ahead of the rest.
    express: VecDeque<Delivery<P>>,
    express_bytes: u64,
    /// Sequence numbers delivered ahead of their turn (packets delay equalisation must not
    /// hold, passed on as they came: [`super::Resequencer::handle_data_unheld`]); `next`
    /// steps over them.
    early: std::collections::BTreeSet<u64>,
    /// Sequence numbers declared lost that may still come: a resend that missed its grace, or
    /// a copy reinjected after its path went dark (`braid_session::retransmit`). One that
    /// comes is delivered at once, out of order: for TCP above a late segment is a reordering
    /// it can absorb, where a dropped one is a loss it must repair. At most
    /// [`MAX_GIVEN_UP`], the latest; not those the sender abandoned.
    given_up: std::collections::BTreeSet<u64>,
    /// Per path: how long what arrived on other paths waited behind this path's packets.
    holds: Vec<PathHolds>,
    /// Gaps whose hold timer ran out, and the paths that had not passed them
    /// ([`Self::take_stall`]); at most one per path.
    stalls: Vec<Stall>,
    stats: ResequencerStats,
}

/// A gap the receiver waited a whole hold for in vain, or gave up on because its buffer was
/// full ([`SequenceReceiver::take_stall`]): `path`, in the rotation, had not passed it while
/// another path had, and had delivered up to just before it (its highest arrival at most
/// [`STALL_NEAR`] below the gap): the missing packets are most likely its own. If nothing
/// comes on it for a while (not even the peer's probes, which the driver knows of), the path
/// has most likely died, and the driver can take it out long before its liveness timeout
/// would. A path that carried nothing lately is not named: a gap that another path's lost run
/// left is not its doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// A path in the rotation whose highest arrival was below the gap.
    pub path: PathId,
    /// Sequence numbers missing from the gap up to the lowest highest arrival of the paths
    /// that passed it (above that they may still be in flight), on whatever path: one for a
    /// lost packet, hundreds for a path that went dark under load.
    pub missing: u64,
}

/// A path is named in a [`Stall`] only if its highest arrival is at most this far below the
/// gap: it carried traffic right up to it (a path of one packet in 64 or less is never named).
pub const STALL_NEAR: u64 = 64;

/// How long a path's packets made the rest wait (`SequenceReceiver::path_holds`): when the
/// packet `next` goes from path `i` while packets of other paths were due (their release
/// times, after delay equalisation) before `next` itself was, they waited for path `i`: from
/// the earliest of their release times to `next`'s. Only the time `next` was missing counts,
/// not release pacing or a late poll. A path whose packets arrive later than the others'
/// shows here; a gap that is never filled (a loss) does not. Counted per packet delivered,
/// so one late burst counts once per packet of it that others waited behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathHolds {
    /// Holds of at least [`HOLD_COUNTED`].
    pub count: u64,
    /// The longest hold.
    pub max: Duration,
}

/// The most sequence numbers delivered ahead of their turn at once; past it, an unheld
/// packet waits its turn like any other.
pub const MAX_EARLY: usize = 4096;

/// Sequence numbers given up on that are remembered, at most (the latest), so that one that
/// arrives after all is delivered late instead of dropped.
pub const MAX_GIVEN_UP: usize = 4096;

/// Gaps a suspect path has not passed (every other path has) are given up this long after
/// they became certain, at least (with retransmission, its grace if longer): one wait for
/// the batch, not a hold for each gap, and long enough for a path that was only late to
/// deliver its next packet and clear itself.
pub const SUSPECT_GRACE: Duration = Duration::from_millis(20);

/// Holds this long or longer are counted in [`PathHolds::count`].
pub const HOLD_COUNTED: Duration = Duration::from_millis(20);

/// The paced release may always run this far ahead of its rate (see [`Pacing`]).
pub const MIN_RELEASE_BURST: Duration = Duration::from_millis(2);

/// Abandoned ranges remembered at most; the oldest go first.
pub const MAX_ABANDONED: usize = 256;

impl<P> SequenceReceiver<P> {
    /// A sequence receiver; `config.scheduler` drives the fast-path prediction.
    pub fn new(config: &ResequencerConfig) -> Result<Self, ConfigError> {
        let sched = config.scheduler.build()?;
        let paths = (0..sched.paths())
            .map(|_| RxPath {
                queue: VecDeque::new(),
                buffered: 0,
                highest: None,
                rtt: None,
                active: true,
                rejoined: None,
                suspect: false,
            })
            .collect();
        let equalizer = DelayEqualizer::new(sched.paths(), config.equalize_delay);
        let paths_n = sched.paths();
        Ok(SequenceReceiver {
            sched,
            paths,
            next: 0,
            total_buffered: 0,
            held: 0,
            limit: config.buffer_limit_bytes,
            hold: config.hold,
            gap_since: None,
            certain_below: 0,
            certain_since: Instant::ZERO,
            retransmit_grace: None,
            equalizer,
            wake: None,
            backup: config.backup,
            pacing: config.pacing.filter(|p| p.rate_bps > 0),
            paced_until: Instant::ZERO,
            abandoned: VecDeque::new(),
            express: VecDeque::new(),
            express_bytes: 0,
            early: std::collections::BTreeSet::new(),
            given_up: std::collections::BTreeSet::new(),
            holds: vec![PathHolds::default(); paths_n],
            stalls: Vec::new(),
            stats: ResequencerStats::default(),
        })
    }

    /// How long packets of other paths waited behind `path`'s ([`PathHolds`]).
    pub fn path_holds(&self, path: PathId) -> PathHolds {
        self.holds.get(path.index()).copied().unwrap_or_default()
    }

    /// `next` is about to go from path `i` (due at `ready`): what waits at the other paths'
    /// heads (later packets, or a copy of `next` itself) and was due before `next` waited for
    /// it.
    fn note_hold(&mut self, now: Instant, i: usize, ready: Instant) {
        let next = self.next;
        let due = self
            .paths
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .filter_map(|(_, rx)| rx.queue.front().filter(|h| h.seq > next).map(|h| h.ready))
            .min();
        let ready = ready.min(now);
        if let Some(due) = due.filter(|&d| d < ready) {
            let hold = ready - due;
            let h = &mut self.holds[i];
            h.max = h.max.max(hold);
            h.count += u64::from(hold >= HOLD_COUNTED);
        }
    }

    /// The sender will not send `first..first + count` again: they were lost (a run of one
    /// path's datagrams that its NACK named, too long to be random loss). Once `next` reaches
    /// one of them and it is not here, it is lost at once instead of after the hold timer or
    /// every other path's catching up, so the transport above sees the loss a round trip of
    /// the fastest path after it happened.
    pub fn abandon(&mut self, first: u64, count: u32) {
        let end = first.saturating_add(u64::from(count));
        if end <= self.next || count == 0 {
            return;
        }
        if self.abandoned.len() >= MAX_ABANDONED {
            self.abandoned.pop_front();
        }
        self.abandoned.push_back((first, end));
    }

    /// Whether `next` is in an abandoned range; forgets the ranges `next` has passed.
    fn next_abandoned(&mut self) -> bool {
        let next = self.next;
        self.abandoned.retain(|&(_, end)| end > next);
        self.abandoned
            .iter()
            .any(|&(first, end)| first <= next && next < end)
    }

    /// The next sequence number to deliver.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// A data packet arrived. A packet without a sequence number is delivered at once, ahead
    /// of everything waiting (the sender's per-flow policy keeps its flow on one path, whose
    /// FIFO order is the flow's order); it counts against the same byte limit as the reorder
    /// buffer, and is dropped when that is full.
    pub fn handle_data(
        &mut self,
        now: Instant,
        path: PathId,
        seq: Option<u64>,
        len: u32,
        payload: P,
    ) {
        self.arrive(now, path, seq, len, payload, true);
    }

    /// A data packet; `equalize = false` for one delay equalisation must not hold (see
    /// [`Resequencer::handle_data_unheld`](super::Resequencer::handle_data_unheld)).
    pub(crate) fn arrive(
        &mut self,
        now: Instant,
        path: PathId,
        seq: Option<u64>,
        len: u32,
        payload: P,
        equalize: bool,
    ) {
        if path.index() >= self.paths.len() {
            self.stats.invalid_dropped += 1;
            return;
        }
        let Some(seq) = seq else {
            // One budget with the reorder buffer: twice the limit in all, as below.
            let charge = super::charge::<Delivery<P>>(len);
            if self.held + charge > self.limit.saturating_mul(2) {
                self.stats.overflow_dropped += 1;
                return;
            }
            self.held += charge;
            self.express_bytes += u64::from(len);
            self.express.push_back(Delivery {
                path,
                seq: None,
                len,
                payload,
            });
            return;
        };
        if seq < self.next {
            // Late, but the path delivers.
            self.paths[path.index()].brought_data();
            let charge = super::charge::<Delivery<P>>(len);
            if self.held + charge <= self.limit.saturating_mul(2) && self.given_up.remove(&seq) {
                // Given up on, and here after all: late, not lost.
                self.held += charge;
                self.express_bytes += u64::from(len);
                self.stats.late_deliveries += 1;
                self.stats.lost = self.stats.lost.saturating_sub(1);
                self.express.push_back(Delivery {
                    path,
                    seq: Some(seq),
                    len,
                    payload,
                });
            } else {
                self.stats.stale_dropped += 1;
            }
            return;
        }
        if seq - self.next >= SEQ_WINDOW || seq == u64::MAX {
            self.stats.invalid_dropped += 1;
            return;
        }
        // Charged as the larger of its two entries: a queue's or `express`'s.
        let charge = super::charge::<SeqRx<P>>(len).max(super::charge::<Delivery<P>>(len));
        if self.held + charge > self.limit.saturating_mul(2) {
            self.stats.overflow_dropped += 1;
            return;
        }
        if self.early.contains(&seq) {
            self.stats.stale_dropped += 1;
            return;
        }
        if !equalize && seq > self.next && self.early.len() < MAX_EARLY {
            // Nobody times it at this end (a pure TCP ACK): it goes now, ahead of what waits
            // for its turn, instead of behind a packet that delay equalisation holds (an
            // IPv6 router solicitation held 240 ms held every ACK of an upload behind it).
            // Order matters within a flow's data, which this is not.
            let rx = &mut self.paths[path.index()];
            rx.highest = Some(rx.highest.map_or(seq, |h| h.max(seq)));
            rx.brought_data();
            self.early.insert(seq);
            self.held += super::charge::<Delivery<P>>(len);
            self.express_bytes += u64::from(len);
            self.stats.delivered_early += 1;
            self.express.push_back(Delivery {
                path,
                seq: Some(seq),
                len,
                payload,
            });
            return;
        }
        let mut ready = if equalize {
            self.equalizer.ready_at(now, path)
        } else {
            now
        };
        // Never hold a packet past anything later that is already here and due: a resent or
        // late packet is behind schedule, not ahead of it.
        for rx in &self.paths {
            if let Some(head) = rx.queue.front().filter(|h| h.seq > seq) {
                ready = ready.min(head.ready.max(now));
            }
        }
        let rx = &mut self.paths[path.index()];
        let item = SeqRx {
            seq,
            len,
            ready,
            payload,
        };
        match rx.queue.back() {
            Some(last) if last.seq >= seq => {
                // The path reordered (or duplicated): keep the queue sorted.
                let at = rx.queue.partition_point(|x| x.seq < seq);
                if rx.queue.get(at).is_some_and(|x| x.seq == seq) {
                    self.stats.stale_dropped += 1;
                    return;
                }
                rx.queue.insert(at, item);
            }
            _ => rx.queue.push_back(item),
        }
        rx.highest = Some(rx.highest.map_or(seq, |h| h.max(seq)));
        rx.brought_data();
        rx.buffered += u64::from(len);
        self.total_buffered += u64::from(len);
        self.held += super::charge::<SeqRx<P>>(len);
    }

    /// Take `path` out of the rotation or put it back: a path out of the rotation is not waited
    /// for when deciding that a gap is a loss.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        if let Some(rx) = self.paths.get_mut(path.index()) {
            if active && !rx.active {
                rx.rejoined = Some(self.next);
            } else if !active {
                rx.rejoined = None;
            }
            rx.suspect = false;
            rx.active = active;
            self.sched.set_active(path, active);
            self.equalizer.set_path_active(path, active);
        }
    }

    /// With retransmission inside the tunnel (`braid_session::retransmit`): how long to wait
    /// for a resend once every path is past a gap, before declaring the packet lost. `None`
    /// (the default) declares it lost at once.
    pub fn set_retransmit_grace(&mut self, grace: Option<Duration>) {
        self.retransmit_grace = grace;
    }

    /// The base (uncongested) one-way delay of `path`, or `None` if unknown: sets the hold of
    /// delay equalisation and the skew added to the gap timer.
    pub fn set_path_delay(&mut self, path: PathId, delay: Option<Duration>) {
        self.equalizer.set_path_delay(path, delay);
    }

    /// The RTT of `path`, for the backup timer ([`BackupTimer`]); `None` if unknown.
    pub fn set_path_rtt(&mut self, path: PathId, rtt: Option<Duration>) {
        if let Some(rx) = self.paths.get_mut(path.index()) {
            rx.rtt = rtt;
        }
    }

    /// The release rate of the pacing; ignored without pacing, zero ignored.
    pub fn set_release_rate(&mut self, rate_bps: u64) {
        if let (Some(p), true) = (&mut self.pacing, rate_bps > 0) {
            p.rate_bps = rate_bps;
        }
    }

    /// With pacing: when a packet may leave. A generic cell rate algorithm: `paced_until`
    /// is the theoretical release time of the next byte; a packet conforms once `now` is at
    /// most the burst ahead of it.
    fn paced_at(&self, now: Instant) -> Instant {
        let Some(p) = self.pacing else {
            return now;
        };
        // At least MIN_RELEASE_BURST of release time: a driver whose timers fire a millisecond
        // late (the daemon's event loop) could otherwise never reach the rate on a fast bond.
        let burst =
            crate::time::transmission_time(p.burst_bytes, p.rate_bps).max(MIN_RELEASE_BURST);
        self.paced_until.saturating_sub(burst).max(now)
    }

    fn pace(&mut self, now: Instant, len: u32) {
        if let Some(p) = self.pacing {
            let need = crate::time::transmission_time(u64::from(len), p.rate_bps);
            self.paced_until = self.paced_until.max(now) + need;
        }
    }

    /// A marker: used to resynchronise the fast-path prediction when the receiver is at its path.
    pub fn handle_marker(&mut self, _now: Instant, path: PathId, marker: Marker) {
        if marker.path != path || path.index() >= self.paths.len() {
            self.stats.invalid_dropped += 1;
            return;
        }
        self.stats.markers += 1;
        self.sched.set_deficit(path, marker.number.deficit);
    }

    fn pop(&mut self, i: usize) -> Delivery<P> {
        let rx = &mut self.paths[i];
        let item = rx
            .queue
            .pop_front()
            .expect("pop is called on a non-empty queue");
        rx.buffered -= u64::from(item.len);
        self.total_buffered -= u64::from(item.len);
        self.held -= super::charge::<SeqRx<P>>(item.len);
        self.next = item.seq + 1;
        self.gap_since = None;
        self.drop_below_next();
        self.stats.delivered += 1;
        self.stats.delivered_bytes += u64::from(item.len);
        Delivery {
            path: PathId(i as u8),
            seq: Some(item.seq),
            len: item.len,
            payload: item.payload,
        }
    }

    /// Drop what waits at any path's head below `next`: the other copy of a packet sent twice
    /// (on two paths, both here before it was due), already delivered.
    fn drop_below_next(&mut self) {
        // Step over what went ahead of its turn.
        while self.early.first().is_some_and(|&s| s <= self.next) {
            if self.early.pop_first() == Some(self.next) {
                self.next += 1;
            }
        }
        let next = self.next;
        for rx in &mut self.paths {
            while let Some(head) = rx.queue.front().filter(|h| h.seq < next) {
                self.held -= super::charge::<SeqRx<P>>(head.len);
                let len = u64::from(head.len);
                rx.queue.pop_front();
                rx.buffered -= len;
                self.total_buffered -= len;
                self.stats.stale_dropped += 1;
            }
        }
    }

    /// Give up on everything below `to`; remembered as given up ([`Self::given_up`]) if it
    /// may still come (`late_welcome`).
    fn jump(&mut self, to: u64, late_welcome: bool) {
        if late_welcome {
            let from = self.next.max(to.saturating_sub(MAX_GIVEN_UP as u64));
            for seq in from..to {
                if !self.early.contains(&seq) {
                    self.given_up.insert(seq);
                }
            }
            while self.given_up.len() > MAX_GIVEN_UP {
                self.given_up.pop_first();
            }
        }
        let early = self.early.range(self.next..to).count() as u64;
        self.stats.lost += to.saturating_sub(self.next).saturating_sub(early);
        self.next = self.next.max(to);
        self.gap_since = None;
        self.drop_below_next();
    }

    /// The next packet in sequence order, if it is there or its loss is certain.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Delivery<P>> {
        if let Some(d) = self.express.pop_front() {
            self.express_bytes -= u64::from(d.len);
            self.held -= super::charge::<Delivery<P>>(d.len);
            self.stats.delivered += 1;
            self.stats.delivered_bytes += u64::from(d.len);
            return Some(d);
        }
        self.wake = None;
        loop {
            // Fast path: the path logical reception predicts.
            let p = self.sched.select().index();
            if let Some(head) = self.paths[p].queue.front().filter(|x| x.seq == self.next) {
                let ready = head.ready.max(self.paced_at(now));
                if ready > now {
                    self.wake = Some(ready);
                    return None;
                }
                let (len, due) = (head.len, head.ready);
                self.sched.update(len);
                self.pace(now, len);
                self.note_hold(now, p, due);
                return Some(self.pop(p));
            }
            // Slow path: look at every head (FIFO paths put `next` at a head if it arrived).
            if let Some(i) = (0..self.paths.len()).find(|&i| {
                self.paths[i]
                    .queue
                    .front()
                    .is_some_and(|x| x.seq == self.next)
            }) {
                let (due, len) = self.paths[i]
                    .queue
                    .front()
                    .map_or((now, 0), |x| (x.ready, x.len));
                let ready = due.max(self.paced_at(now));
                if ready > now {
                    self.wake = Some(ready);
                    return None;
                }
                self.pace(now, len);
                self.note_hold(now, i, due);
                return Some(self.pop(i));
            }
            // Nothing waits, and nothing went ahead of `next` either: no gap.
            // (Queues, not bytes: a lying peer's empty packets wait too.)
            if self.paths.iter().all(|rx| rx.queue.is_empty()) && self.early.is_empty() {
                self.gap_since = None;
                return None;
            }
            // `next` is missing. Lost for sure if every path is already past it.
            let mut resume = u64::MAX;
            let mut all_past = true;
            let mut suspects_behind = false;
            for rx in &self.paths {
                match (rx.queue.front(), rx.highest) {
                    (Some(head), _) => resume = resume.min(head.seq),
                    (None, Some(h)) if h > self.next => resume = resume.min(h.saturating_add(1)),
                    // A path out of the rotation carries nothing new.
                    (None, _) if !rx.active => {}
                    // A suspect is not waited for a hold either (below).
                    (None, _) if rx.suspect => suspects_behind = true,
                    _ => all_past = false,
                }
            }
            // What went ahead of its turn counts as a head: `next` is missing in front of it
            // as much as in front of a queued packet.
            let min_head = self
                .paths
                .iter()
                .filter_map(|rx| rx.queue.front().map(|x| x.seq))
                .chain(self.early.first().copied())
                .min()
                .expect("something is buffered or went early");
            if self.next_abandoned() {
                // The sender said it is gone: one packet at a time, the next may be here.
                self.stats.abandoned += 1;
                self.jump(self.next + 1, false);
                continue;
            }
            if all_past {
                // A resend may be on its way: wait for it a little before giving up; and a
                // suspect's next packet, if it was only late.
                let grace = match (self.retransmit_grace, suspects_behind) {
                    (Some(g), true) => Some(g.max(SUSPECT_GRACE)),
                    (None, true) => Some(SUSPECT_GRACE),
                    (g, false) => g,
                };
                if let Some(grace) = grace {
                    if self.next >= self.certain_below {
                        // Everything missing below every path's highest arrival is certain
                        // now: a FIFO path delivers nothing older later (a suspect's is not
                        // waited for: the batch is what the others have passed).
                        self.certain_below = self
                            .paths
                            .iter()
                            .filter(|rx| rx.active && !rx.suspect)
                            .map(|rx| rx.highest.map_or(0, |h| h.saturating_add(1)))
                            .min()
                            .unwrap_or(self.next + 1)
                            .max(self.next + 1);
                        self.certain_since = now;
                    }
                    if now < self.certain_since + grace {
                        self.wake = Some(self.certain_since + grace);
                        return None;
                    }
                }
                if suspects_behind {
                    // Still nothing from it: named again, with what is missing now (the
                    // driver may have passed over its first naming: too few missing then).
                    self.note_stall();
                }
                self.jump(resume.min(min_head), true);
                continue;
            }
            let since = *self.gap_since.get_or_insert(now);
            if self.held >= self.limit {
                self.stats.forced_skips += 1;
                // A fast bond fills its buffer before the hold runs out.
                self.note_stall();
            } else if let Some(h) = self.gap_hold() {
                if now < since + h {
                    self.wake = Some(since + h);
                    return None;
                }
                self.stats.hold_skips += 1;
                self.note_stall();
            } else {
                return None;
            }
            self.jump(min_head, true);
        }
    }

    /// The hold timer of the gap at `next` ran out (or the buffer is full): each path in the
    /// rotation that has not passed `next` but delivered up to just before it is a [`Stall`]
    /// suspect.
    fn note_stall(&mut self) {
        let next = self.next;
        let passed =
            |rx: &RxPath<P>| rx.queue.front().is_some() || rx.highest.is_some_and(|h| h > next);
        // Missing below what every path that passed the gap has passed: numbers above the
        // slowest of them may still be in flight on it, not lost.
        let bound = self
            .paths
            .iter()
            .filter(|rx| passed(rx))
            .filter_map(|rx| rx.highest)
            .min();
        let Some(bound) = bound.filter(|&h| h > next) else {
            return;
        };
        let queued = self
            .paths
            .iter()
            .map(|rx| rx.queue.partition_point(|x| x.seq <= bound))
            .sum::<usize>();
        let here = queued + self.early.range(next..=bound).count();
        let missing = (bound - next + 1).saturating_sub(here as u64);
        let mut named = Vec::new();
        for (i, rx) in self.paths.iter().enumerate() {
            // Or it came back into the rotation at or below the gap and brought nothing since
            // (a path that dies again as it comes back: its highest is from before).
            let near = rx
                .highest
                .is_some_and(|h| h.saturating_add(STALL_NEAR) >= next)
                || rx.rejoined.is_some_and(|r| r <= next)
                || rx.suspect;
            let passed = passed(rx);
            if !rx.active || passed || !near {
                continue;
            }
            named.push(i);
        }
        for i in named {
            self.paths[i].suspect = true;
            let stall = Stall {
                path: PathId(i as u8),
                missing,
            };
            // Not taken yet: the most missing it has been named for.
            match self.stalls.iter_mut().find(|s| s.path == stall.path) {
                Some(s) => s.missing = s.missing.max(stall.missing),
                None => self.stalls.push(stall),
            }
        }
    }

    /// A stall seen and not taken yet ([`Stall`]), oldest first.
    pub fn take_stall(&mut self) -> Option<Stall> {
        (!self.stalls.is_empty()).then(|| self.stalls.remove(0))
    }

    /// The gap hold timer: with a [`BackupTimer`] and every path in the rotation's RTT known,
    /// that multiple of the largest RTT; otherwise the configured hold plus the delay skew of
    /// the paths in use ([`equalize::UNKNOWN_SKEW`](super::equalize::UNKNOWN_SKEW) until they
    /// are measured).
    fn gap_hold(&self) -> Option<Duration> {
        if let Some(b) = self.backup {
            let rtts: Option<Vec<Duration>> = self
                .paths
                .iter()
                .filter(|rx| rx.active)
                .map(|rx| rx.rtt)
                .collect();
            if let Some(max) = rtts.and_then(|r| r.into_iter().max()) {
                return Some(max.saturating_mul(b.rtt_multiple).max(b.min));
            }
        }
        self.hold.map(|h| {
            h + self
                .equalizer
                .skew()
                .unwrap_or(super::equalize::UNKNOWN_SKEW)
        })
    }

    /// When the open gap's hold timer expires, or the packet due next may be delivered (as of
    /// the last [`poll_deliver`](Self::poll_deliver)).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.wake
    }

    /// Payload bytes buffered for `path`.
    pub fn buffered_bytes(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.buffered)
    }

    /// Payload bytes buffered in all.
    pub fn total_buffered_bytes(&self) -> u64 {
        self.total_buffered
    }

    /// What the queues and the packets going ahead hold costs ([`super::charge`]).
    pub fn held_charge(&self) -> u64 {
        self.held
    }

    /// Counters.
    pub fn stats(&self) -> &ResequencerStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resequence::ResequenceMode;
    use crate::resequence::{BackupTimer, Pacing};
    use crate::scheduler::{SchedulerConfig, SchedulerKind};

    fn receiver(hold: Option<Duration>) -> SequenceReceiver<u64> {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]),
        );
        c.hold = hold;
        c.equalize_delay = true;
        SequenceReceiver::new(&c).unwrap()
    }

    impl SequenceReceiver<u64> {
        fn handle_data_unheld_for_test(
            &mut self,
            now: Instant,
            path: PathId,
            seq: Option<u64>,
            len: u32,
            payload: u64,
        ) {
            self.arrive(now, path, seq, len, payload, false);
        }
    }

    /// [`receiver`] with both paths' delays measured as zero (no equalisation hold).
    fn receiver_measured(hold: Option<Duration>) -> SequenceReceiver<u64> {
        let mut r = receiver(hold);
        r.set_path_delay(PathId(0), Some(Duration::ZERO));
        r.set_path_delay(PathId(1), Some(Duration::ZERO));
        r
    }

    fn deliver_all(r: &mut SequenceReceiver<u64>, now: Instant) -> Vec<u64> {
        std::iter::from_fn(|| r.poll_deliver(now).map(|d| d.payload)).collect()
    }

    #[test]
    fn reorders_by_sequence() {
        let mut r = receiver(None);
        for s in [1u64, 3] {
            r.handle_data(Instant::ZERO, PathId(1), Some(s), 100, s);
        }
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        for s in [0u64, 2] {
            r.handle_data(Instant::ZERO, PathId(0), Some(s), 100, s);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1, 2, 3]);
    }

    #[test]
    fn unheld_packets_pass_one_that_equalisation_holds() {
        let mut r = receiver(None);
        r.set_path_delay(PathId(0), Some(Duration::ZERO));
        r.set_path_delay(PathId(1), Some(Duration::from_millis(240)));
        // 0 (say an IPv6 router solicitation) is held 240 ms on the fast path; 1 and 2 (pure
        // ACKs) behind it go at once, not after it.
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 60, 0);
        r.handle_data_unheld_for_test(Instant::ZERO, PathId(0), Some(1), 60, 1);
        r.handle_data_unheld_for_test(Instant::ZERO, PathId(0), Some(2), 60, 2);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![1, 2]);
        assert_eq!(r.stats().delivered_early, 2);
        // A copy of one of them is a duplicate.
        r.handle_data_unheld_for_test(Instant::ZERO, PathId(1), Some(2), 60, 2);
        assert_eq!(r.stats().stale_dropped, 1);
        // 0 goes when its hold is over, and `next` steps over 1 and 2: 3 is next, in turn.
        let held = Instant::from_nanos(240_000_000);
        assert_eq!(deliver_all(&mut r, held), vec![0]);
        assert_eq!(r.next_seq(), 3);
        r.handle_data(held, PathId(1), Some(3), 60, 3);
        assert_eq!(deliver_all(&mut r, held), vec![3]);
        assert_eq!(r.stats().lost, 0);
        // A gap the unheld ones went past is lost when every path is past it, and they are
        // not counted lost with it.
        r.handle_data_unheld_for_test(held, PathId(0), Some(5), 60, 5);
        r.handle_data_unheld_for_test(held, PathId(1), Some(6), 60, 6);
        assert_eq!(deliver_all(&mut r, held), vec![5, 6]);
        r.handle_data(held, PathId(0), Some(7), 60, 7);
        r.handle_data(held, PathId(1), Some(8), 60, 8);
        let later = Instant::from_nanos(480_000_000);
        assert_eq!(deliver_all(&mut r, later), vec![7, 8]);
        assert_eq!(r.stats().lost, 1);
    }

    #[test]
    fn a_gap_followed_only_by_packets_that_went_early_is_still_closed() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        // 0 is lost; 1 and 2 (pure ACKs) go at once. The gap timer runs from then, and
        // closes the gap: a held 3 afterwards is not kept waiting for 0.
        r.handle_data_unheld_for_test(Instant::ZERO, PathId(0), Some(1), 60, 1);
        r.handle_data_unheld_for_test(Instant::ZERO, PathId(0), Some(2), 60, 2);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![1, 2]);
        let t = r.poll_timeout().expect("the gap timer runs");
        assert_eq!(t, Instant::from_nanos(5_000_000));
        assert!(deliver_all(&mut r, t).is_empty());
        assert_eq!(r.next_seq(), 3);
        assert_eq!(r.stats().lost, 1);
        r.handle_data(t, PathId(1), Some(3), 60, 3);
        assert_eq!(deliver_all(&mut r, t), vec![3]);
    }

    #[test]
    fn with_three_paths_only_the_late_one_is_blamed() {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1, 1]),
        );
        c.equalize_delay = true;
        let mut r: SequenceReceiver<u64> = SequenceReceiver::new(&c).unwrap();
        for p in 0..3 {
            r.set_path_delay(PathId(p), Some(Duration::ZERO));
        }
        // 1 on path 0 and 2 on path 1 are here at 0 ms; 0 comes on path 2 at 30 ms.
        r.handle_data(Instant::ZERO, PathId(0), Some(1), 100, 1);
        r.handle_data(Instant::ZERO, PathId(1), Some(2), 100, 2);
        let late = Instant::from_nanos(30_000_000);
        r.handle_data(late, PathId(2), Some(0), 100, 0);
        // Delivered 10 ms after that (a late poll): the wait counted is the 30 ms that 0 was
        // missing, and only path 2 made anyone wait.
        let polled = Instant::from_nanos(40_000_000);
        assert_eq!(deliver_all(&mut r, polled), vec![0, 1, 2]);
        let h = r.path_holds(PathId(2));
        assert_eq!((h.count, h.max), (1, Duration::from_millis(30)));
        assert_eq!(r.path_holds(PathId(0)), PathHolds::default());
        assert_eq!(r.path_holds(PathId(1)), PathHolds::default());
    }

    #[test]
    fn a_path_whose_packet_comes_late_is_blamed_for_the_wait() {
        let mut r = receiver_measured(None);
        // 1 and 2 are here on path 0 at 0 ms, due at once; 0 comes on path 1 at 30 ms.
        r.handle_data(Instant::ZERO, PathId(0), Some(1), 100, 1);
        r.handle_data(Instant::ZERO, PathId(0), Some(2), 100, 2);
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        let late = Instant::from_nanos(30_000_000);
        r.handle_data(late, PathId(1), Some(0), 100, 0);
        assert_eq!(deliver_all(&mut r, late), vec![0, 1, 2]);
        let h = r.path_holds(PathId(1));
        assert_eq!((h.count, h.max), (1, Duration::from_millis(30)));
        // Path 0's packets made nothing wait; in order and on time, nobody is blamed.
        assert_eq!(r.path_holds(PathId(0)), PathHolds::default());
        for s in 3..6u64 {
            r.handle_data(late, PathId((s % 2) as u8), Some(s), 100, s);
        }
        assert_eq!(deliver_all(&mut r, late), vec![3, 4, 5]);
        assert_eq!(r.path_holds(PathId(1)).count, 1);
        assert_eq!(r.path_holds(PathId(0)), PathHolds::default());
    }

    #[test]
    fn loss_declared_when_every_path_is_past_it() {
        let mut r = receiver(None);
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        // 0 could still come on path 0.
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        r.handle_data(Instant::ZERO, PathId(0), Some(2), 100, 2);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![1, 2]);
        assert_eq!(r.stats().lost, 1);
        // 0 comes after all (a resend, late): delivered at once, out of order, no longer
        // lost; a second copy of it, or of 1, is dropped.
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 100, 0);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0]);
        assert_eq!((r.stats().lost, r.stats().late_deliveries), (0, 1));
        r.handle_data(Instant::ZERO, PathId(1), Some(0), 100, 0);
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        assert_eq!(r.stats().stale_dropped, 2);
    }

    /// What the sender abandoned is not waited for late, and only the latest
    /// [`MAX_GIVEN_UP`] given up on are remembered.
    #[test]
    fn only_the_latest_given_up_and_not_the_abandoned_come_late() {
        let mut r = receiver(None);
        r.abandon(0, 1);
        let far = MAX_GIVEN_UP as u64 + 10;
        r.handle_data(Instant::ZERO, PathId(0), Some(far), 100, far);
        r.handle_data(Instant::ZERO, PathId(1), Some(far + 1), 100, far + 1);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![far, far + 1]);
        assert_eq!(r.stats().lost, far);
        for s in [0, 5, 9, 10, far - 1] {
            r.handle_data(Instant::ZERO, PathId(0), Some(s), 100, s);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![10, far - 1]);
        assert_eq!(r.stats().stale_dropped, 3);
        assert_eq!(r.stats().lost, far - 2);
    }

    #[test]
    fn hold_timer_closes_a_gap() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        r.handle_data(Instant::ZERO, PathId(1), Some(3), 100, 3);
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        let t = r.poll_timeout().unwrap();
        assert_eq!(t, Instant::from_nanos(5_000_000));
        assert_eq!(deliver_all(&mut r, t), vec![3]);
        assert_eq!(r.stats().lost, 3);
    }

    #[test]
    fn a_gap_waited_for_in_vain_names_the_path_that_had_not_passed_it() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        // 0 and 2 came on path 0; path 1 (odd numbers) went dark after 0's turn: 1, 3 and 5
        // are missing, 2, 4 and 6 are here.
        r.handle_data(Instant::ZERO, PathId(1), Some(0), 100, 0);
        for seq in [2, 4, 6] {
            r.handle_data(Instant::ZERO, PathId(0), Some(seq), 100, seq);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0]);
        assert_eq!(r.take_stall(), None, "no stall before the timer runs out");
        let t = r.poll_timeout().unwrap();
        // Named, path 1 is a suspect: 3 and 5 are not waited for a hold each on its account,
        // only SUSPECT_GRACE for both.
        assert_eq!(deliver_all(&mut r, t), vec![2]);
        let t = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t), vec![4, 6]);
        assert_eq!(
            r.take_stall(),
            Some(Stall {
                path: PathId(1),
                missing: 3,
            })
        );
        assert_eq!(r.take_stall(), None);
        assert_eq!(r.stats().lost, 3);
        // 5 comes after all: late, not lost; and path 1 is waited for again (8 and 10 here,
        // 7 not yet: a hold).
        r.handle_data(t, PathId(1), Some(5), 100, 5);
        for seq in [8, 10] {
            r.handle_data(t, PathId(0), Some(seq), 100, seq);
        }
        assert_eq!(deliver_all(&mut r, t), vec![5]);
        assert_eq!(r.stats().lost, 2);
        let t2 = r.poll_timeout().unwrap();
        assert!(t2 > t, "path 1 waited for: a hold for 7");
        // Out of the rotation, path 1 is not waited for, and no longer a suspect.
        r.set_path_active(PathId(1), false);
        assert_eq!(deliver_all(&mut r, t), vec![8, 10]);
        assert_eq!(r.take_stall(), None);
    }

    #[test]
    fn a_path_that_carried_nothing_lately_is_not_named_for_a_gap() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        // Path 1 brought 0 long ago; path 0 carries everything since, and lost 100..=104.
        r.handle_data(Instant::ZERO, PathId(1), Some(0), 100, 0);
        for seq in (1..100).chain(105..110) {
            r.handle_data(Instant::ZERO, PathId(0), Some(seq), 100, seq);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO).len(), 100);
        let t = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t), (105..110).collect::<Vec<_>>());
        assert_eq!(r.stats().lost, 5);
        // Path 1 had not passed the gap, but it is not its doing.
        assert_eq!(r.take_stall(), None);
    }

    /// A path put back into the rotation that brings nothing while later packets come on the
    /// others (it died again as it came back): named, though its highest arrival is old; once
    /// it has brought data, the usual nearness applies again.
    #[test]
    fn a_path_that_rejoined_and_brought_nothing_is_named_for_a_gap() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        r.handle_data(Instant::ZERO, PathId(1), Some(0), 100, 0);
        r.set_path_active(PathId(1), false);
        for seq in 1..100 {
            r.handle_data(Instant::ZERO, PathId(0), Some(seq), 100, seq);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO).len(), 100);
        // Back at 100; 100, 102 and 104 vanish on it, 101, 103, 105 come on path 0.
        r.set_path_active(PathId(1), true);
        for seq in [101, 103, 105] {
            r.handle_data(Instant::ZERO, PathId(0), Some(seq), 100, seq);
        }
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        let t = r.poll_timeout().unwrap();
        // Named (and a suspect: 104 is not waited for another hold, only SUSPECT_GRACE).
        assert_eq!(deliver_all(&mut r, t), vec![101]);
        let t = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t), vec![103, 105]);
        assert_eq!(
            r.take_stall(),
            Some(Stall {
                path: PathId(1),
                missing: 3,
            })
        );
        // It brings 102 after all: late. Out and back again, it brings 106: data since it
        // rejoined, so it is near a gap only by its highest now.
        r.handle_data(t, PathId(1), Some(102), 100, 102);
        assert_eq!(deliver_all(&mut r, t), vec![102]);
        r.set_path_active(PathId(1), false);
        r.set_path_active(PathId(1), true);
        r.handle_data(t, PathId(1), Some(106), 100, 106);
        for seq in 107..300 {
            r.handle_data(t, PathId(0), Some(seq), 100, seq);
        }
        let all = deliver_all(&mut r, t);
        assert_eq!(all, (106..300).collect::<Vec<_>>());
        // Path 0 loses 300..305: path 1, back and with data since (106), is not near.
        for seq in 305..310 {
            r.handle_data(t, PathId(0), Some(seq), 100, seq);
        }
        assert!(deliver_all(&mut r, t).is_empty());
        let t2 = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t2).len(), 5);
        assert_eq!(r.take_stall(), None);
    }

    #[test]
    fn an_unmeasured_path_in_use_stretches_the_gap_timer() {
        let mut r = receiver(Some(Duration::from_millis(5)));
        r.set_path_delay(PathId(0), Some(Duration::from_millis(10)));
        // Path 1 carries data but its delay is not known yet: its skew could be anything.
        r.handle_data(Instant::ZERO, PathId(1), Some(3), 100, 3);
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        let expected = Duration::from_millis(5) + super::super::equalize::UNKNOWN_SKEW;
        assert_eq!(
            r.poll_timeout(),
            Some(Instant::ZERO.saturating_add(expected))
        );
    }

    fn ms(v: u64) -> Instant {
        Instant::from_nanos(v * 1_000_000)
    }

    #[test]
    fn equalisation_holds_fast_path_arrivals_for_the_skew() {
        let mut r = receiver(Some(Duration::from_millis(5)));
        r.set_path_delay(PathId(0), Some(Duration::from_millis(10)));
        r.set_path_delay(PathId(1), Some(Duration::from_millis(60)));
        // The slow path's packet goes at once; the fast path's waits out the 50 ms skew.
        r.handle_data(ms(0), PathId(1), Some(0), 1000, 0);
        r.handle_data(ms(1), PathId(0), Some(1), 1000, 1);
        assert_eq!(deliver_all(&mut r, ms(1)), vec![0]);
        assert_eq!(r.poll_timeout(), Some(ms(51)));
        assert!(deliver_all(&mut r, ms(50)).is_empty());
        assert_eq!(deliver_all(&mut r, ms(51)), vec![1]);
        assert_eq!(r.poll_timeout(), None);
        // A gap waits for the configured hold plus the skew (5 + 50 ms) before it is a loss.
        r.handle_data(ms(100), PathId(1), Some(3), 1000, 3);
        assert!(deliver_all(&mut r, ms(100)).is_empty());
        assert_eq!(r.poll_timeout(), Some(ms(155)));
        assert!(deliver_all(&mut r, ms(154)).is_empty());
        assert_eq!(deliver_all(&mut r, ms(155)), vec![3]);
        assert_eq!(r.stats().lost, 1);
    }

    #[test]
    fn a_packet_sent_on_two_paths_is_delivered_once() {
        let mut r = receiver(None);
        // 0 and 1 went on both paths; both copies are here before either is delivered.
        for path in [PathId(0), PathId(1)] {
            r.handle_data(ms(0), path, Some(0), 100, 0);
            r.handle_data(ms(0), path, Some(1), 100, 1);
        }
        r.handle_data(ms(0), PathId(1), Some(2), 100, 2);
        assert_eq!(deliver_all(&mut r, ms(1)), vec![0, 1, 2]);
        assert_eq!(r.total_buffered_bytes(), 0);
        assert_eq!(r.stats().stale_dropped, 2);
    }

    #[test]
    fn an_abandoned_packet_is_lost_at_once() {
        let mut r = receiver(Some(Duration::from_millis(100)));
        r.set_retransmit_grace(Some(Duration::from_millis(20)));
        // 1 and 2 were lost on path 0, 3 arrives on path 0; path 1 has not caught up.
        r.handle_data(ms(0), PathId(0), Some(0), 100, 0);
        r.handle_data(ms(1), PathId(0), Some(3), 100, 3);
        assert_eq!(deliver_all(&mut r, ms(1)), vec![0]);
        assert!(
            r.poll_timeout().is_some(),
            "the gap waits for its hold timer"
        );
        // The sender's answer to the NACK: 1 and 2 will not come.
        r.abandon(1, 2);
        assert_eq!(deliver_all(&mut r, ms(2)), vec![3]);
        assert_eq!((r.stats().lost, r.stats().abandoned), (2, 2));
        // Ranges behind `next` are ignored; one ahead waits for `next` to reach it.
        r.abandon(0, 1);
        r.abandon(5, 1);
        r.handle_data(ms(3), PathId(1), Some(4), 100, 4);
        r.handle_data(ms(3), PathId(1), Some(6), 100, 6);
        assert_eq!(deliver_all(&mut r, ms(3)), vec![4, 6]);
        assert_eq!(r.stats().lost, 3);
    }

    #[test]
    fn a_certain_loss_waits_once_for_a_resend() {
        let mut r = receiver(None);
        r.set_retransmit_grace(Some(Duration::from_millis(20)));
        // 0 and 2 are missing; both paths are past them.
        r.handle_data(ms(0), PathId(0), Some(1), 1000, 1);
        r.handle_data(ms(0), PathId(1), Some(3), 1000, 3);
        r.handle_data(ms(0), PathId(0), Some(4), 1000, 4);
        assert!(deliver_all(&mut r, ms(0)).is_empty());
        assert_eq!(r.poll_timeout(), Some(ms(20)));
        // The resend of 0 arrives within the grace, on the other path.
        r.handle_data(ms(10), PathId(1), Some(0), 1000, 0);
        assert_eq!(deliver_all(&mut r, ms(10)), vec![0, 1]);
        // 2 was certain at the same moment: it waits only what is left of the same grace.
        assert_eq!(r.poll_timeout(), Some(ms(20)));
        assert_eq!(deliver_all(&mut r, ms(20)), vec![3, 4]);
        assert_eq!(r.stats().lost, 1);
    }

    #[test]
    fn a_late_packet_is_not_held_behind_what_follows_it() {
        let mut r = receiver(None);
        r.set_path_delay(PathId(0), Some(Duration::from_millis(10)));
        r.set_path_delay(PathId(1), Some(Duration::from_millis(60)));
        // 1 came on the slow path and is due at once; 0, resent on the fast path, would be
        // held 50 ms, but nothing after it is held, so neither is it.
        r.handle_data(ms(0), PathId(1), Some(1), 1000, 1);
        r.handle_data(ms(5), PathId(0), Some(0), 1000, 0);
        assert_eq!(deliver_all(&mut r, ms(5)), vec![0, 1]);
    }

    #[test]
    fn without_equalisation_arrivals_go_at_once() {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]),
        );
        c.equalize_delay = false;
        let mut r = SequenceReceiver::new(&c).unwrap();
        r.set_path_delay(PathId(0), Some(Duration::from_millis(10)));
        r.set_path_delay(PathId(1), Some(Duration::from_millis(60)));
        r.handle_data(ms(0), PathId(1), Some(0), 100, 0);
        r.handle_data(ms(1), PathId(0), Some(1), 100, 1);
        assert_eq!(deliver_all(&mut r, ms(1)), vec![0, 1]);
    }

    #[test]
    fn the_backup_timer_follows_the_rtts() {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]),
        );
        c.hold = Some(Duration::from_millis(500));
        c.backup = Some(BackupTimer::default());
        let mut r = SequenceReceiver::new(&c).unwrap();
        // Until every path's RTT is known, the fixed hold.
        r.set_path_rtt(PathId(0), Some(Duration::from_millis(30)));
        r.handle_data(ms(0), PathId(0), Some(1), 100, 1);
        assert!(deliver_all(&mut r, ms(0)).is_empty());
        assert_eq!(r.poll_timeout(), Some(ms(500)));
        // Then twice the largest RTT.
        r.set_path_rtt(PathId(1), Some(Duration::from_millis(80)));
        assert!(deliver_all(&mut r, ms(1)).is_empty());
        assert_eq!(r.poll_timeout(), Some(ms(160)));
        assert_eq!(deliver_all(&mut r, ms(160)), vec![1]);
        // Never below the minimum.
        r.set_path_rtt(PathId(1), Some(Duration::from_millis(1)));
        r.handle_data(ms(200), PathId(0), Some(3), 100, 3);
        assert!(deliver_all(&mut r, ms(200)).is_empty());
        assert_eq!(r.poll_timeout(), Some(ms(260)));
    }

    #[test]
    fn release_is_paced_after_a_hole_fills() {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]),
        );
        // 1000 bytes per ms, two packets back to back.
        c.pacing = Some(Pacing {
            rate_bps: 8_000_000,
            burst_bytes: 2000,
        });
        let mut r = SequenceReceiver::new(&c).unwrap();
        for s in 1..6 {
            r.handle_data(ms(0), PathId(1), Some(s), 1000, s);
        }
        r.handle_data(ms(0), PathId(0), Some(0), 1000, 0);
        assert_eq!(deliver_all(&mut r, ms(0)), vec![0, 1, 2]);
        assert_eq!(r.poll_timeout(), Some(ms(1)));
        assert_eq!(deliver_all(&mut r, ms(1)), vec![3]);
        assert_eq!(deliver_all(&mut r, ms(3)), vec![4, 5]);
    }

    #[test]
    fn a_dead_path_is_not_waited_for() {
        let mut r = receiver(None);
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        assert!(deliver_all(&mut r, Instant::ZERO).is_empty());
        r.set_path_active(PathId(0), false);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![1]);
        assert_eq!(r.stats().lost, 1);
    }

    #[test]
    fn absurd_sequence_numbers_are_invalid() {
        let mut r = receiver(None);
        r.handle_data(Instant::ZERO, PathId(0), Some(u64::MAX), 1, 1);
        r.handle_data(Instant::ZERO, PathId(0), Some(SEQ_WINDOW), 1, 2);
        r.handle_data(Instant::ZERO, PathId(1), Some(0), 1, 3);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![3]);
        assert_eq!(r.stats().invalid_dropped, 2);
    }

    #[test]
    fn reordering_within_a_path_and_duplicates() {
        let mut r = receiver(None);
        r.handle_data(Instant::ZERO, PathId(0), Some(2), 1, 2);
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 1, 0);
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 1, 0);
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 1, 1);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1, 2]);
        assert_eq!(r.stats().stale_dropped, 1);
    }

    #[test]
    fn packets_without_a_number_skip_the_queue_but_not_the_limit() {
        let mut c = ResequencerConfig::new(
            ResequenceMode::Sequence,
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]),
        );
        c.buffer_limit_bytes = 100_000;
        let mut r = SequenceReceiver::new(&c).unwrap();
        // Seq 0 is missing: 1 waits, the unnumbered packets do not.
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        r.handle_data(Instant::ZERO, PathId(1), None, 100, 8);
        r.handle_data(Instant::ZERO, PathId(0), None, 100, 9);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![8, 9]);
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 100, 0);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1]);
        for k in 0..1000 {
            r.handle_data(Instant::ZERO, PathId(0), None, 1000, k);
        }
        assert!(
            r.stats().overflow_dropped > 0,
            "bounded by the buffer limit"
        );
        assert_eq!(r.stats().invalid_dropped, 0);
    }

    /// A live path whose packets come 1 ms after the hold (its queue grew): named, but its
    /// next packets fill their gaps within [`SUSPECT_GRACE`]; only the one that missed its
    /// hold comes late.
    #[test]
    fn a_path_only_late_is_not_given_up_wholesale() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 100, 0);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1]);
        // 2.. : path 0 evens at 0 ms, path 1 odds at 6 ms.
        for s in (2..10_002u64).step_by(2) {
            r.handle_data(Instant::ZERO, PathId(0), Some(s), 100, s);
        }
        let _ = deliver_all(&mut r, Instant::ZERO);
        let t = r.poll_timeout().unwrap();
        let _ = deliver_all(&mut r, t);
        let t6 = Instant::from_nanos(6_000_000);
        for s in (3..10_002u64).step_by(2) {
            r.handle_data(t6, PathId(1), Some(s), 100, s);
        }
        let _ = deliver_all(&mut r, t6);
        let _ = deliver_all(&mut r, Instant::from_nanos(20_000_000));
        assert_eq!(r.stats().late_deliveries, 1, "only 3 missed its hold");
        assert_eq!(r.stats().lost, 0);
    }

    /// Every path in the rotation a suspect or out of it once does not turn the retransmit
    /// grace off for good.
    #[test]
    fn the_grace_survives_a_moment_with_no_path_to_wait_for() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        r.set_retransmit_grace(Some(Duration::from_millis(20)));
        r.handle_data(Instant::ZERO, PathId(0), Some(0), 100, 0);
        r.handle_data(Instant::ZERO, PathId(1), Some(1), 100, 1);
        for s in [3, 4] {
            r.handle_data(Instant::ZERO, PathId(0), Some(s), 100, s);
        }
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1]);
        let t = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t), vec![3, 4]);
        assert!(r.take_stall().is_some()); // path 1 suspect
        r.handle_data(t, PathId(0), Some(6), 100, 6);
        r.set_path_active(PathId(0), false);
        assert!(deliver_all(&mut r, t).is_empty());
        let t2 = r.poll_timeout().unwrap();
        assert_eq!(deliver_all(&mut r, t2), vec![6]);
        // Both back and well; much later, 7 is lost in flight.
        r.set_path_active(PathId(0), true);
        let later = Instant::from_nanos(1_000_000_000);
        r.handle_data(later, PathId(0), Some(8), 100, 8);
        r.handle_data(later, PathId(1), Some(9), 100, 9);
        assert!(deliver_all(&mut r, later).is_empty(), "7 gets its grace");
    }

    /// A dying path's first stall comes while traffic is light (one missing: the session
    /// passes over it); once heavier traffic has passed more of its gaps, it is named again.
    #[test]
    fn a_suspect_is_named_again_as_more_of_its_gaps_pass() {
        let mut r = receiver_measured(Some(Duration::from_millis(5)));
        for s in 0..3u64 {
            r.handle_data(Instant::ZERO, PathId((s % 2) as u8), Some(s), 100, s);
        }
        r.handle_data(Instant::ZERO, PathId(0), Some(4), 100, 4);
        assert_eq!(deliver_all(&mut r, Instant::ZERO), vec![0, 1, 2]);
        let t = r.poll_timeout().unwrap();
        let _ = deliver_all(&mut r, t);
        assert_eq!(
            r.take_stall(),
            Some(Stall {
                path: PathId(1),
                missing: 1
            })
        );
        for s in (6..60u64).step_by(2) {
            r.handle_data(t, PathId(0), Some(s), 100, s);
        }
        let _ = deliver_all(&mut r, t);
        if let Some(t2) = r.poll_timeout() {
            let _ = deliver_all(&mut r, t2);
        }
        assert!(
            r.take_stall().is_some_and(|s| s.missing >= 4),
            "no second stall"
        );
    }
}

//! Which peers a turn of the daemon's loop looks at, so that a turn costs what its busy peers
//! cost, not what all a proxy's clients would.
//!
//! A server's loop used to run every client's timers, deliveries and transmissions at every
//! turn, and a turn comes with every batch of datagrams: with 4,000 clients listed (none of
//! them connected) one client's bulk TCP fell from 2.5 Gbit/s to 0.13 (docs/benchmarks.md, "A
//! proxy with many clients"). Now a turn looks at:
//! - the peers **busy** with data in the last [`BUSY`]: a datagram that carried data from one,
//!   a packet routed to one that its session took, an accelerated TCP connection of one
//!   pumped. They are looked at every turn, as every peer was before, so nothing that runs on
//!   being polled waits for a timer it did not announce;
//! - the peers whose **next timer** (their sessions' and pTCP tables' `poll_timeout`, as last
//!   computed) is due;
//! - the peers something else changed this turn: any datagram from one (a probe, an answer, a
//!   handshake, a replay), a packet for one its session refused (one not connected), a
//!   command, a rate cap. A connected client that carries nothing only probes, and so is
//!   looked at only in the turns its probes come or its timers are due.
//!
//! At the end of the turn the deadlines of every peer looked at are computed again
//! ([`Turns::settle`]). A peer not looked at did not change, so its deadline still holds; the
//! loop checks that every 100 ms ([`Turns::check`]) and corrects any that does not (a debug build
//! panics: a change that did not mark its peer).

use braid_proto::time::{Duration, Instant};
use std::collections::BTreeSet;

/// How long a peer stays busy after its last datagram, routed packet or pumped connection.
pub(crate) const BUSY: Duration = Duration::from_secs(1);

/// The peers a turn looks at, and every peer's next timer. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// Each peer's next timer as last computed, and its key in `wake`.
    deadline: Vec<Option<Instant>>,
    wake: BTreeSet<(Instant, usize)>,
    /// Until when each peer is busy.
    busy_until: Vec<Instant>,
    /// The peers this turn looks at, in the order they came, and whether each is in.
    active: Vec<usize>,
    in_active: Vec<bool>,
    /// Whether each peer's session was established at its last [`Turns::settle`], and how many.
    established: Vec<bool>,
    established_count: usize,
}

impl Turns {
    /// `n` peers, each looked at in the first turn.
    pub(crate) fn new(n: usize) -> Turns {
        Turns {
            deadline: vec![None; n],
            wake: BTreeSet::new(),
            busy_until: vec![Instant::ZERO; n],
            active: (0..n).collect(),
            in_active: vec![true; n],
            established: vec![false; n],
            established_count: 0,
        }
    }

    /// Peer `k` is busy from `now`: looked at this turn and every turn for [`BUSY`].
    pub(crate) fn busy(&mut self, k: usize, now: Instant) {
        if let Some(b) = self.busy_until.get_mut(k) {
            *b = now + BUSY;
            self.touch(k);
        }
    }

    /// Peer `k` changed: looked at this turn, and its deadline computed again.
    pub(crate) fn touch(&mut self, k: usize) {
        if let Some(a) = self.in_active.get_mut(k) {
            if !*a {
                *a = true;
                self.active.push(k);
            }
        }
    }

    /// Every peer changed (a command for every session).
    pub(crate) fn touch_all(&mut self) {
        for k in 0..self.in_active.len() {
            self.touch(k);
        }
    }

    /// The earliest of the peers' timers.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.wake.first().map(|&(t, _)| t)
    }

    /// The peers whose timers are due at `now` join this turn.
    pub(crate) fn take_due(&mut self, now: Instant) {
        while let Some(&(t, k)) = self.wake.first() {
            if t > now {
                break;
            }
            self.touch(k);
            // Settled again at the end of the turn; until then it stays out of `wake`.
            self.wake.pop_first();
            self.deadline[k] = None;
        }
    }

    /// The peers this turn looks at so far; a peer that joins later in the turn is looked at
    /// by what comes after.
    pub(crate) fn active(&self) -> &[usize] {
        &self.active
    }

    /// The `i`th peer this turn looks at, if it has that many (for loops that mark peers as
    /// they go).
    pub(crate) fn active_at(&self, i: usize) -> Option<usize> {
        self.active.get(i).copied()
    }

    /// Whether any peer's session is established: as of the peers' last settling, or now for
    /// those this turn looks at (`established(k)`).
    pub(crate) fn any_established(&self, established: impl Fn(usize) -> bool) -> bool {
        self.established_count > 0 || self.active.iter().any(|&k| established(k))
    }

    /// The end of a turn: every peer it looked at gets its deadline (`deadline(k)`: its next
    /// timer) and its established state (`established(k)`) again; those no longer busy at
    /// `now` leave the turns.
    pub(crate) fn settle(
        &mut self,
        now: Instant,
        deadline: impl Fn(usize) -> Option<Instant>,
        established: impl Fn(usize) -> bool,
    ) {
        for i in 0..self.active.len() {
            let k = self.active[i];
            self.set_deadline(k, deadline(k));
            self.set_established(k, established(k));
        }
        let (busy_until, in_active) = (&self.busy_until, &mut self.in_active);
        self.active.retain(|&k| {
            let keep = busy_until[k] > now;
            in_active[k] = keep;
            keep
        });
    }

    /// Every peer's deadline and established state against what `deadline` and `established`
    /// say now, corrected where they differ; returns how many did (a debug build panics: a
    /// peer changed without being marked, and its timers could have waited).
    pub(crate) fn check(
        &mut self,
        deadline: impl Fn(usize) -> Option<Instant>,
        established: impl Fn(usize) -> bool,
    ) -> usize {
        let mut wrong = 0;
        for k in 0..self.deadline.len() {
            if self.in_active[k] {
                continue;
            }
            let (d, e) = (deadline(k), established(k));
            if d != self.deadline[k] || e != self.established[k] {
                wrong += 1;
                self.set_deadline(k, d);
                self.set_established(k, e);
            }
        }
        debug_assert_eq!(wrong, 0, "a peer changed without being marked for the turn");
        wrong
    }

    fn set_deadline(&mut self, k: usize, d: Option<Instant>) {
        if let Some(old) = std::mem::replace(&mut self.deadline[k], d) {
            self.wake.remove(&(old, k));
        }
        if let Some(d) = d {
            self.wake.insert((d, k));
        }
    }

    fn set_established(&mut self, k: usize, e: bool) {
        if std::mem::replace(&mut self.established[k], e) != e {
            if e {
                self.established_count += 1;
            } else {
                self.established_count -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_turn_looks_at_the_busy_the_due_and_the_touched_and_no_others() {
        let mut t = Turns::new(4);
        // The first turn looks at everyone; peer 2 has a timer at 50 ms, the others none.
        assert_eq!(t.active(), &[0, 1, 2, 3]);
        t.settle(at(0), |k| (k == 2).then(|| at(50)), |_| false);
        assert!(t.active().is_empty());
        assert_eq!(t.next_deadline(), Some(at(50)));

        // A datagram from peer 1 at 10 ms: busy for a second.
        t.busy(1, at(10));
        t.take_due(at(10));
        assert_eq!(t.active(), &[1]);
        t.settle(at(10), |k| (k == 2).then(|| at(50)), |_| false);
        assert_eq!(t.active(), &[1]);

        // At 50 ms peer 2's timer is due; a command touches peer 3.
        t.take_due(at(50));
        t.touch(3);
        t.touch(3);
        assert_eq!(t.active(), &[1, 2, 3]);
        t.settle(at(50), |k| (k == 2).then(|| at(150)), |_| false);
        assert_eq!(t.active(), &[1]);
        assert_eq!(t.next_deadline(), Some(at(150)));

        // Past its second, peer 1 leaves the turns.
        t.take_due(at(1011));
        t.settle(at(1011), |k| (k == 2).then(|| at(1100)), |_| false);
        assert!(t.active().is_empty());
    }

    #[test]
    fn established_peers_are_counted_as_they_settle() {
        let mut t = Turns::new(3);
        t.settle(at(0), |_| None, |_| false);
        assert!(!t.any_established(|_| false));
        // Peer 1's handshake completes in this turn: seen at once among the turn's peers.
        t.busy(1, at(5));
        assert!(t.any_established(|k| k == 1));
        t.settle(at(5), |_| None, |k| k == 1);
        // Then from the count, when the turn looks at no one.
        t.settle(at(2000), |_| None, |k| k == 1);
        assert!(t.active().is_empty());
        assert!(t.any_established(|_| false));
        // Its keys expire (a timer of its own, so it is looked at when that happens).
        t.touch(1);
        t.settle(at(2001), |_| None, |_| false);
        assert!(!t.any_established(|_| false));
    }

    #[test]
    fn check_finds_a_peer_that_changed_unmarked_and_corrects_it() {
        let mut t = Turns::new(2);
        t.settle(at(0), |_| Some(at(100)), |_| false);
        assert_eq!(t.check(|_| Some(at(100)), |_| false), 0);
        let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.check(|k| Some(at(if k == 0 { 20 } else { 100 })), |_| false)
        }));
        if cfg!(debug_assertions) {
            assert!(wrong.is_err());
        } else {
            assert_eq!(wrong.ok(), Some(1));
        }
        assert_eq!(t.next_deadline(), Some(at(20)));
    }
}

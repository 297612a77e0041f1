//! Delay equalisation: hold what arrives on a fast path until a packet sent at the same moment
//! on the slowest path in use would have arrived (braid's own, beyond the papers).
//!
//! The stripe paper restores FIFO order (section 4) and bounds the buffering that delay skew
//! costs (section 6.3.3), but the delay a packet sees still depends on the path it took: with
//! paths of 10 ms and 60 ms, a packet striped to the fast path while nothing precedes it on the
//! slow one is delivered 50 ms earlier than its neighbours. A transport on top then sees an RTT
//! that swings with its own load: short when its window is small (everything happens to fit the
//! fast path), long when it is large. Delay-based congestion control (BBR's minimum RTT, CUBIC's
//! HyStart) reads that swing as a smaller pipe than there is and never fills the slow path.
//!
//! Equalising makes the one-way delay the same whichever path a packet takes: each arrival on
//! path `i` becomes deliverable `D_max - D_i` after it arrived, where `D_i` is the path's base
//! (uncongested) one-way delay and `D_max` the largest among the paths in the rotation.
//!
//! It has to hold for everything a transport times, at every load. One RTT sample at the fast
//! path's delay (a flow's first window, a lull, or just its handshake: Linux seeds BBR's
//! minimum RTT from the SYN exchange) and BBR keeps that minimum for ten seconds, capping its
//! window far below the bond's pipe: measured in the lab, 1 Mbit/s instead of 13 on the
//! three-path scenario when TCP's handshake went unheld. What nobody times may pass: the
//! session hands pure TCP acknowledgements over with
//! [`handle_data_unheld`](super::Resequencer::handle_data_unheld), so the ACKs of a bulk
//! transfer ride the fastest path at its own delay (holding them too doubled the RTT and
//! slowed every ramp-up). They are delivered as they come, ahead of what waits for its turn
//! (`SequenceReceiver::arrive`): in order behind a held packet of another flow (an IPv6
//! router solicitation, a DNS answer) they would wait out its hold, and an upload's sender
//! would stall for lack of ACKs. `equalize_delay = false` turns equalisation off for a bond that
//! carries latency-sensitive traffic rather than bulk. Queueing delay is not equalised: a
//! queued packet is late already, and order is kept by the resequencer anyway.
//!
//! The same skew bounds how long a gap can be legitimate: a missing packet may be on the
//! slowest path, up to `D_max - D_min` behind what revealed the gap, so the receiver's hold
//! timer is extended by [`DelayEqualizer::skew`].

use crate::path::PathId;
use crate::time::{Duration, Instant};

/// The skew assumed while a path in use has no delay measured.
pub const UNKNOWN_SKEW: Duration = Duration::from_millis(1000);

#[derive(Clone, Copy, Debug, Default)]
struct EqPath {
    /// Base one-way delay, if measured.
    delay: Option<Duration>,
    active: bool,
}

/// Per-path base delays and the hold each path's arrivals get.
#[derive(Clone, Debug)]
pub struct DelayEqualizer {
    enabled: bool,
    /// Whether any delay was ever given. A receiver with equalisation off that nobody
    /// measures for (the simulator's in-memory pair) keeps the plain gap timer.
    measured: bool,
    paths: Vec<EqPath>,
}

impl DelayEqualizer {
    /// An equaliser for `paths` paths; `enabled = false` makes every hold zero but still
    /// tracks the skew for the gap timer.
    pub fn new(paths: usize, enabled: bool) -> Self {
        DelayEqualizer {
            enabled,
            measured: false,
            paths: vec![
                EqPath {
                    active: true,
                    ..EqPath::default()
                };
                paths
            ],
        }
    }

    /// Whether arrivals are held.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The base one-way delay of `path` (from the session's probes), or `None` if unknown.
    pub fn set_path_delay(&mut self, path: PathId, delay: Option<Duration>) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.delay = delay;
            self.measured |= delay.is_some();
        }
    }

    /// Take `path` out of consideration (it went dark) or put it back.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.active = active;
        }
    }

    /// `D_max - D_min` over the paths in the rotation (zero with fewer than two); `None` while
    /// one has no delay measured yet, so its skew could be anything (with equalisation off,
    /// only once some path has been measured).
    pub fn skew(&self) -> Option<Duration> {
        if !self.enabled && !self.measured {
            return Some(Duration::ZERO);
        }
        let mut lo: Option<Duration> = None;
        let mut hi = Duration::ZERO;
        for p in self.paths.iter().filter(|p| p.active) {
            let d = p.delay?;
            lo = Some(lo.map_or(d, |l| l.min(d)));
            hi = hi.max(d);
        }
        Some(lo.map_or(Duration::ZERO, |l| hi.saturating_sub(l)))
    }

    /// A data packet arrived on `path` at `now`: when it may be delivered.
    pub fn ready_at(&self, now: Instant, path: PathId) -> Instant {
        if !self.enabled {
            return now;
        }
        let Some(own) = self.paths.get(path.index()).and_then(|p| p.delay) else {
            return now;
        };
        let max = self
            .paths
            .iter()
            .filter(|p| p.active)
            .filter_map(|p| p.delay)
            .max()
            .unwrap_or(own);
        now + max.saturating_sub(own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn at(v: u64) -> Instant {
        Instant::from_nanos(v * 1_000_000)
    }

    #[test]
    fn fast_path_arrivals_wait_for_the_slowest_path() {
        let mut e = DelayEqualizer::new(3, true);
        e.set_path_delay(PathId(0), Some(ms(10)));
        e.set_path_delay(PathId(1), Some(ms(60)));
        // Path 2 is not measured yet: it does not count for the hold, but the skew is unknown.
        assert_eq!(e.ready_at(at(100), PathId(0)), at(150));
        assert_eq!(e.ready_at(at(100), PathId(1)), at(100));
        assert_eq!(e.skew(), None);
        e.set_path_delay(PathId(2), Some(ms(30)));
        assert_eq!(e.skew(), Some(ms(50)));
        assert_eq!(e.ready_at(at(100), PathId(2)), at(130));
        // A path out of the rotation does not count.
        e.set_path_active(PathId(1), false);
        assert_eq!(e.ready_at(at(100), PathId(0)), at(120));
        assert_eq!(e.skew(), Some(ms(20)));
        // Out-of-range paths are ignored.
        assert_eq!(e.ready_at(at(3), PathId(9)), at(3));
    }

    #[test]
    fn disabled_never_holds_and_keeps_the_plain_gap_timer_until_measured() {
        let mut off = DelayEqualizer::new(2, false);
        assert_eq!(off.skew(), Some(Duration::ZERO));
        off.set_path_delay(PathId(0), Some(ms(10)));
        assert_eq!(off.skew(), None);
        off.set_path_delay(PathId(1), Some(ms(60)));
        assert_eq!(off.ready_at(at(1), PathId(0)), at(1));
        assert_eq!(off.skew(), Some(ms(50)));
        // Enabled and nothing measured: unknown.
        assert_eq!(DelayEqualizer::new(2, true).skew(), None);
    }
}

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
//! (uncongested) one-way delay and `D_max` the largest among the paths that carried data within
//! [`IN_USE_WINDOW`]. A path that carries nothing (the reverse direction of a bulk transfer,
//! whose small acknowledgements all ride the fastest path) does not count, so a bond whose
//! traffic uses one path pays no extra delay. Queueing delay is not equalised: a queued packet
//! is late already, and order is kept by the resequencer anyway.
//!
//! The same skew bounds how long a gap can be legitimate: a missing packet may be on the
//! slowest path, up to `D_max - D_min` behind what revealed the gap, so the receiver's hold
//! timer is extended by [`DelayEqualizer::skew`].

use crate::path::PathId;
use crate::time::{Duration, Instant};

/// A path counts as in use if a data packet arrived on it this recently.
pub const IN_USE_WINDOW: Duration = Duration::from_millis(1000);

#[derive(Clone, Copy, Debug, Default)]
struct EqPath {
    /// Base one-way delay, if measured.
    delay: Option<Duration>,
    /// Last data arrival.
    last_data: Option<Instant>,
    active: bool,
}

/// Per-path base delays and the hold each path's arrivals get.
#[derive(Clone, Debug)]
pub struct DelayEqualizer {
    enabled: bool,
    paths: Vec<EqPath>,
}

impl DelayEqualizer {
    /// An equaliser for `paths` paths; `enabled = false` makes every hold zero but still
    /// tracks the skew for the gap timer.
    pub fn new(paths: usize, enabled: bool) -> Self {
        DelayEqualizer {
            enabled,
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
        }
    }

    /// Take `path` out of consideration (it went dark) or put it back.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.active = active;
        }
    }

    fn in_use(p: &EqPath, now: Instant) -> bool {
        p.active
            && p.last_data
                .is_some_and(|t| now.saturating_duration_since(t) <= IN_USE_WINDOW)
    }

    /// `D_max - D_min` over the paths in use with a known delay (zero with fewer than two).
    pub fn skew(&self, now: Instant) -> Duration {
        let mut lo: Option<Duration> = None;
        let mut hi = Duration::ZERO;
        for p in self.paths.iter().filter(|p| Self::in_use(p, now)) {
            if let Some(d) = p.delay {
                lo = Some(lo.map_or(d, |l| l.min(d)));
                hi = hi.max(d);
            }
        }
        lo.map_or(Duration::ZERO, |l| hi.saturating_sub(l))
    }

    /// A data packet arrived on `path` at `now`: when it may be delivered.
    pub fn on_data(&mut self, now: Instant, path: PathId) -> Instant {
        let Some(p) = self.paths.get_mut(path.index()) else {
            return now;
        };
        p.last_data = Some(now);
        if !self.enabled {
            return now;
        }
        let Some(own) = self.paths[path.index()].delay else {
            return now;
        };
        let max = self
            .paths
            .iter()
            .filter(|p| Self::in_use(p, now))
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
    fn fast_path_arrivals_wait_for_the_slowest_path_in_use() {
        let mut e = DelayEqualizer::new(2, true);
        e.set_path_delay(PathId(0), Some(ms(10)));
        e.set_path_delay(PathId(1), Some(ms(60)));
        // Only path 0 has carried data: nothing to wait for.
        assert_eq!(e.on_data(at(100), PathId(0)), at(100));
        assert_eq!(e.skew(at(100)), Duration::ZERO);
        // Path 1 carries data too: path 0's arrivals wait 50 ms, path 1's none.
        assert_eq!(e.on_data(at(101), PathId(1)), at(101));
        assert_eq!(e.on_data(at(102), PathId(0)), at(152));
        assert_eq!(e.skew(at(102)), ms(50));
        // Path 1 idle for longer than the window: no more waiting.
        assert_eq!(e.on_data(at(1200), PathId(0)), at(1200));
    }

    #[test]
    fn dark_or_unmeasured_paths_do_not_count_and_disabled_never_holds() {
        let mut e = DelayEqualizer::new(3, true);
        e.set_path_delay(PathId(0), Some(ms(10)));
        e.set_path_delay(PathId(1), Some(ms(60)));
        e.on_data(at(0), PathId(1));
        e.on_data(at(0), PathId(2));
        e.set_path_active(PathId(1), false);
        assert_eq!(e.on_data(at(1), PathId(0)), at(1));
        // Unknown own delay: deliver on arrival.
        assert_eq!(e.on_data(at(2), PathId(2)), at(2));
        // Out-of-range paths are ignored.
        assert_eq!(e.on_data(at(3), PathId(9)), at(3));

        let mut off = DelayEqualizer::new(2, false);
        off.set_path_delay(PathId(0), Some(ms(10)));
        off.set_path_delay(PathId(1), Some(ms(60)));
        off.on_data(at(0), PathId(1));
        assert_eq!(off.on_data(at(1), PathId(0)), at(1));
        assert_eq!(off.skew(at(1)), ms(50));
    }
}

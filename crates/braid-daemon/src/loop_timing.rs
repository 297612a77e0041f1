//! How promptly the daemon's event loop runs: how late it woke up after its poll's timeout,
//! and how long one turn of the loop took.
//!
//! Braid's timing is the loop's: the shaper releases packets, PET stamps its pairs' send
//! times and the receiver releases what it held, each when the loop gets to it. A host too
//! busy to run the daemon on time (a small router's CPU, other work on the same cores) shows
//! up here before it shows up as a mystery in the throughput. In the lab, the egress of
//! every path went quiet at once for a fraction of a second under extra load
//! (docs/benchmarks.md, "Kernel receive timestamps"); these counters say whether the loop was
//! late then.

use braid_proto::time::{Duration, Instant};
use serde::Serialize;

/// A wake-up or a turn longer than this is counted.
pub const SLOW: Duration = Duration::from_millis(10);

/// The loop's timing since the daemon started, in `braid status` as `event_loop`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LoopTiming {
    /// Wake-ups more than 10 ms after the poll's timeout.
    pub late_wakeups: u64,
    /// The latest wake-up, ms after the poll's timeout.
    pub late_ms_max: f64,
    /// Turns (from waking up to the next poll) longer than 10 ms.
    pub slow_turns: u64,
    /// The longest turn, ms.
    pub turn_ms_max: f64,
}

impl LoopTiming {
    /// The loop asked to be woken by `deadline` at the latest, and woke at `woke`.
    pub fn woke(&mut self, deadline: Instant, woke: Instant) {
        let late = woke.saturating_duration_since(deadline);
        if late > SLOW {
            self.late_wakeups += 1;
        }
        self.late_ms_max = self.late_ms_max.max(ms(late));
    }

    /// A turn ran from `start` to `end`.
    pub fn turned(&mut self, start: Instant, end: Instant) {
        let took = end.saturating_duration_since(start);
        if took > SLOW {
            self.slow_turns += 1;
        }
        self.turn_ms_max = self.turn_ms_max.max(ms(took));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_wakeups_and_slow_turns_are_counted_past_10_ms() {
        let at = |m: u64| Instant::ZERO + Duration::from_millis(m);
        let mut t = LoopTiming::default();
        // Woken before the deadline (a packet came in), or a little after: not late.
        t.woke(at(100), at(40));
        t.woke(at(100), at(105));
        assert_eq!((t.late_wakeups, t.late_ms_max), (0, 5.0));
        // Kept off the CPU for 150 ms.
        t.woke(at(200), at(350));
        assert_eq!((t.late_wakeups, t.late_ms_max), (1, 150.0));
        t.turned(at(350), at(352));
        t.turned(at(400), at(425));
        assert_eq!((t.slow_turns, t.turn_ms_max), (1, 25.0));
    }
}

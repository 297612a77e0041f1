//! The packet-pair bandwidth estimate of one path (BAG paper section V-A, after Keshav's
//! packet-pair technique, its reference [25]).
//!
//! Two packets sent back to back on a path leave its bottleneck spaced by the time the second
//! took to cross it: `L_2 / B`. The receiver reports both arrival times (SIG-ACKs), so a sample
//! of the bottleneck rate is `L_2 / (t_2 - t_1)`. The estimate weighs the newest sample 0.8 and
//! the history 0.2 ("it is important to react rapidly to current conditions", footnote 3).

use crate::scheduler::MAX_RATE_BPS;
use crate::time::Duration;

/// The weight of a new sample, in percent (the paper's 0.8).
pub const NEW_SAMPLE_WEIGHT_PCT: u64 = 80;

/// A sample this many times below or above the estimate is an outlier: it is held back and
/// taken only if the next sample is off the same way. Beyond the paper: on a real host one
/// late read at the receiver (a descheduled process, a GRO batch) turns a pair's dispersion
/// into hundreds of milliseconds, and at a weight of 0.8 a single such sample would crash the
/// estimate. A real change of rate shows in two samples in a row and is taken one pair late.
pub const OUTLIER_FACTOR: u64 = 4;

/// The smallest dispersion taken as a sample. Closer arrivals are the receiver's batching, not
/// a path: with kernel receive timestamps (the daemon's), the packets one interrupt or one
/// poll of a network card brings in are stamped microseconds apart, whatever the rate of the
/// link they came over. 10 us is 1,500 bytes at 1.2 Gbit/s; a path faster than that is
/// estimated from pairs whose spacing an interrupt split, or not at all.
pub const MIN_DISPERSION: Duration = Duration::from_micros(10);

/// One path's packet-pair estimator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketPair {
    estimate_bps: Option<u64>,
    /// The largest estimate so far.
    peak_bps: Option<u64>,
    /// An outlier held back: `true` if it was below the estimate.
    suspect_low: Option<bool>,
    samples: u64,
    rejected: u64,
}

impl PacketPair {
    /// An estimator with no estimate yet.
    pub fn new() -> Self {
        PacketPair::default()
    }

    /// The current estimate in bit/s, if any sample has been taken.
    pub fn estimate_bps(&self) -> Option<u64> {
        self.estimate_bps
    }

    /// The largest estimate so far (the path's least transmission time per byte): a safe
    /// rate for subtracting a packet's transmission time from a delay sample.
    pub fn peak_bps(&self) -> Option<u64> {
        self.peak_bps
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Samples refused (a dispersion below [`MIN_DISPERSION`], a rate above [`MAX_RATE_BPS`],
    /// or an outlier held back: see [`OUTLIER_FACTOR`]).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// The rate a pair shows: the second packet's `wire_bytes` crossed the bottleneck in
    /// `dispersion`. `None` for a dispersion below [`MIN_DISPERSION`] or an absurd rate.
    pub fn sample_rate(wire_bytes: u64, dispersion: Duration) -> Option<u64> {
        if dispersion < MIN_DISPERSION {
            return None;
        }
        let ns = dispersion.as_nanos();
        let bps = u128::from(wire_bytes) * 8 * 1_000_000_000 / ns;
        u64::try_from(bps)
            .ok()
            .filter(|&b| b > 0 && b <= MAX_RATE_BPS)
    }

    /// Take a pair's sample; returns the new estimate, or `None` if the sample was refused.
    /// `estimate = 0.8 sample + 0.2 estimate` (the first sample is taken as it is).
    pub fn sample(&mut self, wire_bytes: u64, dispersion: Duration) -> Option<u64> {
        let Some(rate) = Self::sample_rate(wire_bytes, dispersion) else {
            self.rejected += 1;
            return None;
        };
        if let Some(old) = self.estimate_bps {
            let low = rate.saturating_mul(OUTLIER_FACTOR) < old;
            let high = rate > old.saturating_mul(OUTLIER_FACTOR);
            // The first sample this far off is held back; the second in a row means the
            // path changed, and is taken.
            if (low || high) && self.suspect_low != Some(low) {
                self.suspect_low = Some(low);
                self.rejected += 1;
                return None;
            }
        }
        self.suspect_low = None;
        Some(self.take(rate))
    }

    /// Take a pair whose second arrived no further behind the first than it was sent: it
    /// shows only that the path is at least as fast as the sender's spacing, so it may raise
    /// the estimate but never lower it. Returns the new estimate, or `None` if it was not
    /// above the estimate or was held back.
    ///
    /// More than [`OUTLIER_FACTOR`] times above the estimate it is an outlier, held back and
    /// taken when the next pair of either kind is that far above too, as in
    /// [`sample`](Self::sample) (a sender speeding up, as TCP out of slow start). Within that,
    /// it raises the estimate and leaves a held-back outlier alone. A path EDPF under-uses
    /// carries a stream of such pairs at the sender's pace; taken as samples, each one undid
    /// the outlier a measuring pair (a padding pair) had left, so the next measuring pair, a
    /// second later, was held back again, and a path whose estimate had fallen far too low
    /// never got it back (benchmarks.md, "A soak").
    pub fn raise(&mut self, wire_bytes: u64, dispersion: Duration) -> Option<u64> {
        let rate = Self::sample_rate(wire_bytes, dispersion)?;
        if let Some(old) = self.estimate_bps {
            if rate <= old {
                return None;
            }
            if rate > old.saturating_mul(OUTLIER_FACTOR) {
                if self.suspect_low != Some(false) {
                    self.suspect_low = Some(false);
                    self.rejected += 1;
                    return None;
                }
                // The second far above in a row: taken, as a change.
                self.suspect_low = None;
            }
        }
        Some(self.take(rate))
    }

    /// Mix `rate` into the estimate (the first is taken as it is).
    fn take(&mut self, rate: u64) -> u64 {
        self.samples += 1;
        let new = match self.estimate_bps {
            None => rate,
            Some(old) => {
                let mixed = u128::from(rate) * u128::from(NEW_SAMPLE_WEIGHT_PCT)
                    + u128::from(old) * u128::from(100 - NEW_SAMPLE_WEIGHT_PCT);
                u64::try_from(mixed / 100).unwrap_or(MAX_RATE_BPS).max(1)
            }
        };
        self.estimate_bps = Some(new);
        self.peak_bps = Some(self.peak_bps.map_or(new, |p| p.max(new)));
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_smoothing() {
        let mut p = PacketPair::new();
        // 1500 bytes in 60 ms: 200 kbit/s.
        assert_eq!(p.sample(1500, Duration::from_millis(60)), Some(200_000));
        // Then 100 kbit/s: 0.8 x 100k + 0.2 x 200k = 120k.
        assert_eq!(p.sample(1500, Duration::from_millis(120)), Some(120_000));
        assert_eq!(p.sample(1500, Duration::from_millis(120)), Some(104_000));
        assert_eq!(p.sample(1500, Duration::ZERO), None);
        assert_eq!(p.rejected(), 1);
        assert_eq!(p.samples(), 3);
        assert_eq!(p.sample(u64::MAX, Duration::from_micros(10)), None);
    }

    #[test]
    fn arrivals_microseconds_apart_are_the_receivers_batching_not_a_path() {
        let mut p = PacketPair::new();
        p.sample(1500, Duration::from_micros(1200));
        // Two pairs stamped 3 us apart (one interrupt brought them in): refused, not taken
        // as a 4 Gbit/s path the second time.
        assert_eq!(p.sample(1500, Duration::from_micros(3)), None);
        assert_eq!(p.sample(1500, Duration::from_micros(3)), None);
        assert_eq!(p.estimate_bps(), Some(10_000_000));
        assert_eq!(p.rejected(), 2);
        // 1,500 bytes at 1 Gbit/s (12 us) is still a sample.
        assert_eq!(
            PacketPair::sample_rate(1500, Duration::from_micros(12)),
            Some(1_000_000_000)
        );
    }

    #[test]
    fn one_outlier_is_held_back_and_two_are_a_change() {
        let mut p = PacketPair::new();
        // 1500 bytes in 1.2 ms: 10 Mbit/s.
        assert_eq!(
            p.sample(1500, Duration::from_micros(1200)),
            Some(10_000_000)
        );
        // One pair read 200 ms late: held back, the estimate stands.
        assert_eq!(p.sample(1500, Duration::from_millis(200)), None);
        assert_eq!(p.estimate_bps(), Some(10_000_000));
        assert_eq!(
            p.sample(1500, Duration::from_micros(1200)),
            Some(10_000_000)
        );
        // A path that really fell to 1/10: the second such sample is taken.
        assert_eq!(p.sample(1500, Duration::from_millis(12)), None);
        assert_eq!(p.sample(1500, Duration::from_millis(12)), Some(2_800_000));
        // A halving is no outlier.
        let mut q = PacketPair::new();
        q.sample(1500, Duration::from_micros(1200));
        assert_eq!(q.sample(1500, Duration::from_micros(2400)), Some(6_000_000));
        assert_eq!(q.peak_bps(), Some(10_000_000));
    }

    #[test]
    fn pairs_at_the_senders_pace_only_raise_and_leave_a_held_outlier_alone() {
        let mut p = PacketPair::new();
        // A 20 Mbit/s path whose estimate fell to 400 kbit/s (30 ms for 1500 bytes).
        assert_eq!(p.sample(1500, Duration::from_millis(30)), Some(400_000));
        // Below the estimate: nothing. Within four times above it: raised.
        assert_eq!(p.raise(1500, Duration::from_millis(60)), None);
        assert_eq!(p.raise(1500, Duration::from_millis(20)), Some(560_000));
        // A padding pair measures the path at 20 Mbit/s: an outlier, held back.
        assert_eq!(p.sample(1500, Duration::from_micros(600)), None);
        // The stream of pairs at the sender's pace in between does not undo it...
        assert_eq!(p.raise(1500, Duration::from_millis(15)), Some(752_000));
        assert_eq!(p.raise(1500, Duration::from_millis(12)), Some(950_400));
        // ... so the next measuring pair confirms it.
        assert_eq!(p.sample(1500, Duration::from_micros(600)), Some(16_190_080));
        // Taken as samples, those pairs would have undone it.
        let mut q = PacketPair::new();
        q.sample(1500, Duration::from_millis(30));
        assert_eq!(q.sample(1500, Duration::from_micros(600)), None);
        q.sample(1500, Duration::from_millis(15));
        assert_eq!(q.sample(1500, Duration::from_micros(600)), None);
        // A sender that sped up (TCP out of slow start): far above, twice in a row, taken.
        let mut r = PacketPair::new();
        r.sample(1500, Duration::from_millis(30));
        assert_eq!(r.raise(1500, Duration::from_micros(600)), None);
        assert_eq!(r.raise(1500, Duration::from_micros(600)), Some(16_080_000));
    }
}

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

/// One path's packet-pair estimator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketPair {
    estimate_bps: Option<u64>,
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

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Samples refused (a zero dispersion, or a rate above [`MAX_RATE_BPS`]).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// The rate a pair shows: the second packet's `wire_bytes` crossed the bottleneck in
    /// `dispersion`. `None` for a zero dispersion or an absurd rate.
    pub fn sample_rate(wire_bytes: u64, dispersion: Duration) -> Option<u64> {
        let ns = dispersion.as_nanos();
        if ns == 0 {
            return None;
        }
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
        Some(new)
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
        assert_eq!(p.sample(u64::MAX, Duration::from_nanos(1)), None);
    }
}

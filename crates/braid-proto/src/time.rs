//! Virtual and real time for the sans-IO cores.
//!
//! Cores never read a clock: every call that depends on time takes `now: Instant`. An [`Instant`]
//! is an integer number of nanoseconds since an arbitrary epoch chosen by the driver (the
//! simulator starts at zero; the daemon maps its monotonic clock onto it). Durations are
//! [`core::time::Duration`], also integer nanoseconds. Time never goes backwards: a driver must
//! pass non-decreasing `now` values to a core.

use core::fmt;
use core::ops::{Add, Sub};
pub use core::time::Duration;

/// A point in time, in nanoseconds since the driver's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// The largest representable instant; used as "never".
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(d).map(Instant)
    }

    /// `self + d`, clamped to [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::MAX)
    }

    /// `self - d`, clamped to [`Instant::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Seconds since the epoch, for reporting.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating addition: an instant past the representable range is [`Instant::MAX`].
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating difference.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

/// The time it takes to serialise `bytes` at `rate_bps` bits per second.
///
/// # Panics
/// If `rate_bps` is zero.
pub fn transmission_time(bytes: u64, rate_bps: u64) -> Duration {
    assert!(rate_bps > 0, "transmission_time: zero rate");
    let ns = (bytes as u128 * 8 * 1_000_000_000).div_ceil(rate_bps as u128);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(10);
        assert_eq!(t + Duration::from_nanos(5), Instant::from_nanos(15));
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t - Instant::from_nanos(20), Duration::ZERO);
        assert_eq!(Instant::from_nanos(20) - t, Duration::from_nanos(10));
        assert_eq!(
            t.saturating_sub(Duration::from_nanos(4)),
            Instant::from_nanos(6)
        );
        assert_eq!(t.saturating_sub(Duration::from_secs(1)), Instant::ZERO);
        assert_eq!(Instant::MAX.saturating_sub(Duration::MAX), Instant::ZERO);
    }

    #[test]
    fn serialisation_time() {
        // 1500 bytes at 12 Mbit/s is exactly 1 ms.
        assert_eq!(
            transmission_time(1500, 12_000_000),
            Duration::from_millis(1)
        );
        // Rounds up.
        assert_eq!(transmission_time(1, 3), Duration::from_nanos(2_666_666_667));
    }
}

//! NewReno (RFC 5681 section 3.1, RFC 6582), in bytes, as quinn's `NewReno`.

use braid_proto::time::Instant;

use super::{CongestionConfig, CongestionControl};
use crate::rtt::RttEstimator;

/// Slow start to `ssthresh`, then one segment per window of acknowledged bytes; halve on loss,
/// one segment on timeout.
#[derive(Clone, Debug)]
pub struct NewReno {
    config: CongestionConfig,
    window: u64,
    ssthresh: u64,
    /// Start of the current recovery period: events and acks for packets sent before it neither
    /// reduce nor grow the window again.
    recovery_start: Option<Instant>,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    bytes_acked: u64,
}

impl NewReno {
    /// A controller at the initial window with an infinite `ssthresh`.
    pub fn new(config: CongestionConfig) -> Self {
        NewReno {
            config,
            window: config.initial_window(),
            ssthresh: u64::MAX,
            recovery_start: None,
            bytes_acked: 0,
        }
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }
}

impl CongestionControl for NewReno {
    fn on_ack(&mut self, _now: Instant, sent: Instant, bytes: u64, _rtt: &RttEstimator) {
        if self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            self.window = self.window.saturating_add(bytes);
        } else {
            self.bytes_acked += bytes;
            if self.bytes_acked >= self.window {
                self.bytes_acked -= self.window;
                self.window = self.window.saturating_add(self.config.mss);
            }
        }
        self.window = self.window.min(self.config.max_window);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant) {
        if self.in_recovery(sent) {
            return;
        }
        self.recovery_start = Some(now);
        self.window = (self.window / 2).max(self.config.min_window());
        self.ssthresh = self.window;
        self.bytes_acked = 0;
    }

    fn on_timeout(&mut self, now: Instant, bytes_in_flight: u64) {
        self.recovery_start = Some(now);
        self.ssthresh = (bytes_in_flight / 2).max(self.config.min_window());
        self.window = self.config.loss_window();
        self.bytes_acked = 0;
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtt::RttConfig;
    use braid_proto::time::Duration;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn slow_start_halving_and_avoidance() {
        let cfg = CongestionConfig::default();
        let rtt = RttEstimator::new(RttConfig::default());
        let mut c = NewReno::new(cfg);
        assert_eq!(c.window(), 12_000);
        c.on_ack(t(10), t(0), 1200, &rtt);
        assert_eq!(c.window(), 13_200);
        c.on_congestion_event(t(20), t(5));
        assert_eq!(c.window(), 6_600);
        assert_eq!(c.ssthresh(), 6_600);
        // A second loss from the same window does not reduce again.
        c.on_congestion_event(t(21), t(6));
        assert_eq!(c.window(), 6_600);
        // Nor do acks of packets from before recovery grow it.
        c.on_ack(t(22), t(7), 1200, &rtt);
        assert_eq!(c.window(), 6_600);
        // Congestion avoidance: one mss per window of acked bytes.
        for _ in 0..5 {
            c.on_ack(t(30), t(25), 1200, &rtt);
        }
        assert_eq!(c.window(), 6_600);
        c.on_ack(t(30), t(25), 1200, &rtt);
        assert_eq!(c.window(), 7_800);
        c.on_timeout(t(40) + Duration::from_millis(1), 7_800);
        assert_eq!(c.window(), 1200);
        assert_eq!(c.ssthresh(), 3_900);
    }
}

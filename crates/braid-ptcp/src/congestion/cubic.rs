//! CUBIC (RFC 9438), in bytes.
//!
//! After a congestion event at window `W_max` the window follows
//! `W_cubic(t) = C (t - K)^3 + W_max` with `K = cbrt(W_max (1 - beta) / C)` (section 4.2),
//! never below the Reno-friendly estimate `W_est` (section 4.3). Fast convergence (4.7) and the
//! timeout rule (4.8) as in the RFC. Slow start below `ssthresh` as NewReno.

use braid_proto::time::Instant;

use super::{CongestionConfig, CongestionControl};
use crate::rtt::RttEstimator;

/// `C`, in segments per second cubed.
const C: f64 = 0.4;
/// `beta_cubic`, the multiplicative decrease.
const BETA: f64 = 0.7;

/// The CUBIC controller.
#[derive(Clone, Debug)]
pub struct Cubic {
    config: CongestionConfig,
    /// Window in bytes (fractional in congestion avoidance).
    window: f64,
    ssthresh: u64,
    recovery_start: Option<Instant>,
    /// `W_max`, in segments.
    w_max: f64,
    /// `K`, in seconds.
    k: f64,
    /// `W_est`, in segments.
    w_est: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
}

impl Cubic {
    /// A controller at the initial window.
    pub fn new(config: CongestionConfig) -> Self {
        Cubic {
            config,
            window: config.initial_window() as f64,
            ssthresh: u64::MAX,
            recovery_start: None,
            w_max: 0.0,
            k: 0.0,
            w_est: 0.0,
            epoch_start: None,
        }
    }

    fn mss(&self) -> f64 {
        self.config.mss as f64
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// `W_cubic(t)` in segments, `t` in seconds since the epoch began.
    fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.w_max
    }

    /// Sections 4.6 (multiplicative decrease) and 4.7 (fast convergence).
    fn reduce(&mut self, now: Instant) {
        self.recovery_start = Some(now);
        self.epoch_start = None;
        let cwnd = self.window / self.mss();
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.k = (self.w_max * (1.0 - BETA) / C).cbrt();
        let reduced = (self.window * BETA).max(self.config.min_window() as f64);
        self.ssthresh = reduced as u64;
        self.window = reduced;
        self.w_est = reduced / self.mss();
    }
}

impl CongestionControl for Cubic {
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator) {
        if self.in_recovery(sent) {
            return;
        }
        let max = self.config.max_window as f64;
        if (self.window as u64) < self.ssthresh {
            self.window = (self.window + bytes as f64).min(max);
            return;
        }
        let mss = self.mss();
        // A first epoch after slow start (no loss yet) starts the curve at the window.
        let epoch = *self.epoch_start.get_or_insert(now);
        if self.w_max <= 0.0 {
            self.w_max = self.window / mss;
            self.k = 0.0;
            self.w_est = self.w_max;
        }
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let srtt = rtt.srtt().as_secs_f64();
        let cwnd = self.window / mss;
        let acked = bytes as f64 / mss;
        // Section 4.3: W_est grows by alpha_cubic segments per window of acknowledged data.
        let alpha = 3.0 * (1.0 - BETA) / (1.0 + BETA);
        self.w_est += alpha * acked / cwnd;
        // Section 4.2: aim at W_cubic one RTT ahead, between cwnd and 1.5 cwnd.
        let target = self.w_cubic(t + srtt).clamp(cwnd, 1.5 * cwnd);
        let next = if self.w_est > self.w_cubic(t) {
            self.w_est.max(cwnd)
        } else {
            cwnd + (target - cwnd) * acked / cwnd
        };
        self.window = (next * mss).min(max);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant) {
        if self.in_recovery(sent) {
            return;
        }
        self.reduce(now);
    }

    fn on_timeout(&mut self, now: Instant, bytes_in_flight: u64) {
        self.reduce(now);
        self.ssthresh = ((bytes_in_flight as f64 * BETA) as u64).max(self.config.min_window());
        self.window = self.config.loss_window() as f64;
    }

    fn window(&self) -> u64 {
        self.window as u64
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::congestion::CongestionAlgorithm;
    use crate::rtt::RttConfig;
    use braid_proto::time::Duration;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn reduces_by_beta_and_regrows_to_w_max() {
        let cfg = CongestionConfig {
            algorithm: CongestionAlgorithm::Cubic,
            ..CongestionConfig::default()
        };
        let mut rtt = RttEstimator::new(RttConfig::default());
        rtt.on_sample(Duration::from_millis(100));
        let mut c = Cubic::new(cfg);
        // Slow start to 100 segments.
        for _ in 0..90 {
            c.on_ack(t(1), t(0), 1200, &rtt);
        }
        assert_eq!(c.window(), 120_000);
        c.on_congestion_event(t(10), t(5));
        assert_eq!(c.window(), 84_000);
        // K = cbrt(100 * 0.3 / 0.4) = 4.217 s: the window is back near W_max at K and convex beyond it
        // after, acknowledging a window's worth every RTT.
        let mut now = 10;
        let mut at_k = 0;
        while now < 10 + 10_000 {
            now += 100;
            let w = c.window() / 1200;
            for _ in 0..w {
                c.on_ack(t(now), t(now - 50), 1200, &rtt);
            }
            if now == 10 + 4300 {
                at_k = c.window();
            }
        }
        assert!((110_000..=130_000).contains(&at_k), "{at_k}");
        assert!(c.window() > 150_000, "{}", c.window());
        // Fast convergence: a loss below W_max lowers W_max further.
        let mut c2 = c.clone();
        c2.w_max = 1000.0;
        c2.on_congestion_event(t(20_000), t(19_000));
        assert!(c2.w_max < 1000.0);
        c.on_timeout(t(30_000), 60_000);
        assert_eq!(c.window(), 1200);
        assert_eq!(c.ssthresh(), 42_000);
    }
}

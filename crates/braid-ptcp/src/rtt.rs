//! Round-trip time estimation and the retransmission timeout of RFC 6298, one per micro-flow.
//!
//! TCP-v keeps TCP's reliability (pTCP paper, section 3.2 "Reliability"), so its timer is TCP's:
//! `SRTT`, `RTTVAR`, `RTO = SRTT + max(G, 4 RTTVAR)` (RFC 6298 section 2), clamped to
//! [`RttConfig::rto_min`, `RttConfig::rto_max`], doubled on every expiry (section 5.5) and
//! reset by the next acknowledgement of new data. Samples come only from virtual packets that
//! were sent once (Karn's algorithm, section 3).
//!
//! With Linux's 200 ms `rto_min` rather than RFC 6298's 1 s, the variance term needs Linux's
//! floor too ([`RttConfig::variance_min`]): Linux never lets its RTTVAR fall below
//! `tcp_rto_min` (`tcp_rtt_estimator`), so its RTO is at least `SRTT + 200 ms`. Without it a
//! flow with steady RTT samples gets an RTO barely above its SRTT and fires on a queue that
//! grows by a few milliseconds.

use braid_proto::time::Duration;

/// Bounds of the retransmission timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttConfig {
    /// RTO before the first sample (RFC 6298 (2.1): 1 s).
    pub rto_initial: Duration,
    /// Lower bound of the RTO (RFC 6298 (2.4) says 1 s; Linux uses 200 ms, as here).
    pub rto_min: Duration,
    /// Upper bound of the RTO, also of the backed-off one (RFC 6298 (2.5): at least 60 s).
    pub rto_max: Duration,
    /// Clock granularity `G`.
    pub granularity: Duration,
    /// The least the variance term `4 RTTVAR` counts for (Linux keeps `RTTVAR` at least
    /// `tcp_rto_min`, 200 ms, so its RTO is at least `SRTT + 200 ms`). Zero is RFC 6298's
    /// formula alone, which is safe only with its 1 s `rto_min`: the `ptcp-weights`
    /// experiment's one-flow connections, whose samples barely vary, timed out every 0.3 s
    /// without it (190 timeouts in 60 s against about ten real losses).
    pub variance_min: Duration,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            granularity: Duration::from_millis(1),
            variance_min: Duration::from_millis(200),
        }
    }
}

/// The RFC 6298 estimator with its backoff.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    config: RttConfig,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    min: Duration,
    backoff: u32,
}

/// Largest backoff exponent; `rto_max` caps the timer long before.
const MAX_BACKOFF: u32 = 16;

impl RttEstimator {
    /// An estimator with no sample yet.
    pub fn new(config: RttConfig) -> Self {
        RttEstimator {
            config,
            srtt: None,
            rttvar: Duration::ZERO,
            latest: Duration::ZERO,
            min: Duration::MAX,
            backoff: 0,
        }
    }

    /// Takes one RTT measurement `r` (RFC 6298 (2.2) and (2.3)).
    pub fn on_sample(&mut self, r: Duration) {
        self.latest = r;
        self.min = self.min.min(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
    }

    /// The smoothed RTT, or the initial RTO's worth before any sample.
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.config.rto_initial)
    }

    /// Whether a sample has been taken.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// The latest sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The smallest sample so far (`Duration::MAX` before any).
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The RTO without backoff.
    pub fn rto_base(&self) -> Duration {
        let rto = match self.srtt {
            None => self.config.rto_initial,
            Some(srtt) => {
                srtt + self
                    .config
                    .granularity
                    .max(self.rttvar * 4)
                    .max(self.config.variance_min)
            }
        };
        rto.clamp(self.config.rto_min, self.config.rto_max)
    }

    /// The RTO with the current backoff applied (RFC 6298 (5.5)), at most `rto_max`.
    pub fn rto(&self) -> Duration {
        self.rto_base()
            .saturating_mul(1 << self.backoff.min(MAX_BACKOFF))
            .min(self.config.rto_max)
    }

    /// The timer expired: double the RTO.
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// How many times in a row the timer expired.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// New data was acknowledged: forget the backoff.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rfc6298_first_and_second_sample() {
        let mut r = RttEstimator::new(RttConfig::default());
        assert_eq!(r.rto(), ms(1000));
        r.on_sample(ms(100));
        // SRTT = 100, RTTVAR = 50, RTO = 100 + 4*50 = 300.
        assert_eq!(r.srtt(), ms(100));
        assert_eq!(r.rto(), ms(300));
        r.on_sample(ms(200));
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5; RTO = 362.5.
        assert_eq!(r.srtt(), Duration::from_micros(112_500));
        assert_eq!(r.rto(), Duration::from_micros(362_500));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut r = RttEstimator::new(RttConfig::default());
        r.on_sample(ms(100));
        r.back_off();
        assert_eq!(r.rto(), ms(600));
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(), Duration::from_secs(60));
        r.reset_backoff();
        assert_eq!(r.rto(), ms(300));
    }

    #[test]
    fn clamped_below() {
        let mut r = RttEstimator::new(RttConfig {
            variance_min: Duration::ZERO,
            ..RttConfig::default()
        });
        r.on_sample(ms(1));
        assert_eq!(r.rto(), ms(200));
    }

    #[test]
    fn steady_samples_keep_the_variance_floor() {
        // 100 samples of 300 ms: RTTVAR decays to almost nothing; the RTO stays SRTT + 200 ms
        // (Linux), not SRTT + a few ms (RFC 6298's formula with a 200 ms rto_min).
        let mut r = RttEstimator::new(RttConfig::default());
        for _ in 0..100 {
            r.on_sample(ms(300));
        }
        assert_eq!(r.srtt(), ms(300));
        assert_eq!(r.rto(), ms(500));
        let mut rfc = RttEstimator::new(RttConfig {
            variance_min: Duration::ZERO,
            ..RttConfig::default()
        });
        for _ in 0..100 {
            rfc.on_sample(ms(300));
        }
        assert!(rfc.rto() < ms(302), "{:?}", rfc.rto());
    }
}

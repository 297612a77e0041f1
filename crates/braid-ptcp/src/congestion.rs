//! Per-path congestion control of a micro-flow, behind one small trait.
//!
//! Congestion control is "the sole responsibility of TCP-v" and pTCP "does not require a
//! specific congestion control protocol" (pTCP paper, section 3.2 "Congestion Control"): each
//! micro-flow owns one controller, and the paths of one connection may run different ones. The
//! trait is modelled on quinn's `congestion::Controller`: the flow reports acknowledged bytes
//! and congestion events with the send time of the packet concerned, the controller answers with
//! a window in bytes. A controller ignores a congestion event for a packet sent before the
//! current recovery period began (one reduction per window of data, RFC 6582/RFC 6675) and does
//! not grow the window on acknowledgements from before it.
//!
//!
//! A rate-based controller also gets one [`RateSample`] per acknowledgement
//! ([`CongestionControl::on_rate_sample`], from [`crate::delivery_rate`]) and answers with a
//! pacing rate ([`CongestionControl::pacing_rate`]); the loss-based ones ignore the former and
//! return `None` for the latter, so the flow does not pace them.
//!
//! One file per algorithm: [`NewReno`] (RFC 5681/6582), [`Cubic`] (RFC 9438) and [`Bbr`]
//! (draft-cardwell-iccrg-bbr-congestion-control-00, BBR v1); [`Congestion`] is the enum over
//! them for static dispatch, chosen by [`CongestionAlgorithm`] (by name from a configuration
//! with `str::parse`).

mod bbr;
mod cubic;
mod new_reno;

pub use bbr::{Bbr, BbrState};
pub use cubic::Cubic;
pub use new_reno::NewReno;

use braid_proto::time::Instant;

pub use crate::delivery_rate::RateSample;
use crate::rtt::RttEstimator;

/// What a micro-flow tells its controller and what it asks of it.
pub trait CongestionControl {
    /// `bytes` of a virtual packet sent at `sent` were acknowledged (cumulatively or by SACK).
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator);
    /// Loss detected by SACK (three later packets acknowledged, the "3 dup-ACK equivalent") of
    /// a packet sent at `sent`: fast retransmit and recovery.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant);
    /// The retransmission timer expired with `bytes_in_flight` outstanding (RFC 5681 (4)).
    fn on_timeout(&mut self, now: Instant, bytes_in_flight: u64);
    /// The congestion window, in bytes.
    fn window(&self) -> u64;
    /// The slow-start threshold, in bytes.
    fn ssthresh(&self) -> u64;
    /// One acknowledgement's delivery-rate sample, after its losses were detected (and
    /// [`CongestionControl::on_congestion_event`] called for them). Loss-based controllers
    /// ignore it.
    fn on_rate_sample(&mut self, _now: Instant, _sample: &RateSample) {}
    /// The rate at which the flow must pace its packets, in payload bytes per second, or
    /// `None` to send as the window allows.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }
    /// The controller holds the flow below what the path could take (BBR's ProbeRTT): the
    /// flow marks its delivery-rate samples application-limited, so that they do not lower
    /// the bandwidth estimate.
    fn holds_back(&self) -> bool {
        false
    }
}

/// Parameters shared by the controllers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// The algorithm.
    pub algorithm: CongestionAlgorithm,
    /// Maximum segment size: the largest virtual packet, in payload bytes.
    pub mss: u64,
    /// Initial window in segments (RFC 6928: 10).
    pub initial_window_segments: u64,
    /// Upper bound of the window in bytes (a bounded window bounds the flow's scoreboard).
    pub max_window: u64,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        CongestionConfig {
            algorithm: CongestionAlgorithm::NewReno,
            mss: 1200,
            initial_window_segments: 10,
            max_window: 16 << 20,
        }
    }
}

impl CongestionConfig {
    /// The smallest window after a loss: two segments (RFC 5681 (4)).
    pub fn min_window(&self) -> u64 {
        2 * self.mss
    }
    /// The window after a timeout: one segment (RFC 5681 "loss window").
    pub fn loss_window(&self) -> u64 {
        self.mss
    }
    /// The initial window.
    pub fn initial_window(&self) -> u64 {
        (self.initial_window_segments * self.mss).min(self.max_window)
    }
}

/// The built-in algorithms, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CongestionAlgorithm {
    /// [`NewReno`].
    #[default]
    NewReno,
    /// [`Cubic`].
    Cubic,
    /// [`Bbr`].
    Bbr,
}

/// An unknown algorithm name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion control {0:?} (known: newreno, cubic, bbr)")]
pub struct UnknownAlgorithm(pub String);

impl core::str::FromStr for CongestionAlgorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "newreno" | "new-reno" | "reno" => Ok(CongestionAlgorithm::NewReno),
            "cubic" => Ok(CongestionAlgorithm::Cubic),
            "bbr" => Ok(CongestionAlgorithm::Bbr),
            _ => Err(UnknownAlgorithm(s.to_owned())),
        }
    }
}

/// The enum over the built-in controllers.
#[derive(Clone, Debug)]
pub enum Congestion {
    /// NewReno.
    NewReno(NewReno),
    /// CUBIC.
    Cubic(Cubic),
    /// BBR.
    Bbr(Bbr),
}

impl Congestion {
    /// A controller of `config.algorithm`.
    pub fn new(config: CongestionConfig) -> Self {
        Self::with_seed(config, 0)
    }

    /// A controller of `config.algorithm`; `seed` draws BBR's ProbeBW starting phase (a flow
    /// passes its id, so that the flows of a connection do not probe in step and a run is
    /// reproducible).
    pub fn with_seed(config: CongestionConfig, seed: u64) -> Self {
        match config.algorithm {
            CongestionAlgorithm::NewReno => Congestion::NewReno(NewReno::new(config)),
            CongestionAlgorithm::Cubic => Congestion::Cubic(Cubic::new(config)),
            CongestionAlgorithm::Bbr => Congestion::Bbr(Bbr::new(config, seed)),
        }
    }

    fn inner(&mut self) -> &mut dyn CongestionControl {
        match self {
            Congestion::NewReno(c) => c,
            Congestion::Cubic(c) => c,
            Congestion::Bbr(c) => c,
        }
    }

    fn inner_ref(&self) -> &dyn CongestionControl {
        match self {
            Congestion::NewReno(c) => c,
            Congestion::Cubic(c) => c,
            Congestion::Bbr(c) => c,
        }
    }
}

impl CongestionControl for Congestion {
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator) {
        self.inner().on_ack(now, sent, bytes, rtt)
    }
    fn on_congestion_event(&mut self, now: Instant, sent: Instant) {
        self.inner().on_congestion_event(now, sent)
    }
    fn on_timeout(&mut self, now: Instant, bytes_in_flight: u64) {
        self.inner().on_timeout(now, bytes_in_flight)
    }
    fn window(&self) -> u64 {
        self.inner_ref().window()
    }
    fn ssthresh(&self) -> u64 {
        self.inner_ref().ssthresh()
    }
    fn on_rate_sample(&mut self, now: Instant, sample: &RateSample) {
        self.inner().on_rate_sample(now, sample)
    }
    fn pacing_rate(&self) -> Option<u64> {
        self.inner_ref().pacing_rate()
    }
    fn holds_back(&self) -> bool {
        self.inner_ref().holds_back()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_name() {
        assert_eq!("NewReno".parse(), Ok(CongestionAlgorithm::NewReno));
        assert_eq!("cubic".parse(), Ok(CongestionAlgorithm::Cubic));
        assert_eq!("BBR".parse(), Ok(CongestionAlgorithm::Bbr));
        assert!("vegas".parse::<CongestionAlgorithm>().is_err());
    }
}

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
//! One file per algorithm: [`NewReno`] (RFC 5681/6582) and [`Cubic`] (RFC 9438); [`Congestion`]
//! is the enum over them for static dispatch, chosen by [`CongestionAlgorithm`] (by name from a
//! configuration with `str::parse`).

mod cubic;
mod new_reno;

pub use cubic::Cubic;
pub use new_reno::NewReno;

use braid_proto::time::Instant;

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
}

/// An unknown algorithm name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion control {0:?} (known: newreno, cubic)")]
pub struct UnknownAlgorithm(pub String);

impl core::str::FromStr for CongestionAlgorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "newreno" | "new-reno" | "reno" => Ok(CongestionAlgorithm::NewReno),
            "cubic" => Ok(CongestionAlgorithm::Cubic),
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
}

impl Congestion {
    /// A controller of `config.algorithm`.
    pub fn new(config: CongestionConfig) -> Self {
        match config.algorithm {
            CongestionAlgorithm::NewReno => Congestion::NewReno(NewReno::new(config)),
            CongestionAlgorithm::Cubic => Congestion::Cubic(Cubic::new(config)),
        }
    }

    fn inner(&mut self) -> &mut dyn CongestionControl {
        match self {
            Congestion::NewReno(c) => c,
            Congestion::Cubic(c) => c,
        }
    }

    fn inner_ref(&self) -> &dyn CongestionControl {
        match self {
            Congestion::NewReno(c) => c,
            Congestion::Cubic(c) => c,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_name() {
        assert_eq!("NewReno".parse(), Ok(CongestionAlgorithm::NewReno));
        assert_eq!("cubic".parse(), Ok(CongestionAlgorithm::Cubic));
        assert!("bbr".parse::<CongestionAlgorithm>().is_err());
    }
}

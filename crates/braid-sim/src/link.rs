//! Simulated channels: rate, propagation delay, FIFO-preserving skew, loss and outages.
//!
//! A link models one of the paper's channels (section 2): FIFO, lossy, with a delay that may vary
//! from packet to packet. The transmit queue in front of it is the striper's per-path queue; the
//! link pulls the next message when it has finished serialising the previous one.

use braid_proto::time::{transmission_time, Duration, Instant};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// How a link loses packets.
#[derive(Clone, Debug, PartialEq)]
pub enum LossModel {
    /// No loss.
    None,
    /// Each packet lost independently with this probability.
    Bernoulli(f64),
    /// Gilbert-Elliott bursty loss: a two-state Markov chain, stepped once per packet.
    GilbertElliott {
        /// Probability of moving from the good to the bad state.
        p_good_to_bad: f64,
        /// Probability of moving from the bad to the good state.
        p_bad_to_good: f64,
        /// Loss probability in the good state.
        loss_good: f64,
        /// Loss probability in the bad state.
        loss_bad: f64,
    },
}

impl LossModel {
    /// Decide whether the next packet is lost. `bad_state` is the Gilbert-Elliott chain's state
    /// (stepped once per packet; unused by the other models).
    pub fn draw(&self, bad_state: &mut bool, rng: &mut impl Rng) -> bool {
        match *self {
            LossModel::None => false,
            LossModel::Bernoulli(p) => rng.random::<f64>() < p,
            LossModel::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } => {
                let flip = rng.random::<f64>();
                if *bad_state {
                    if flip < p_bad_to_good {
                        *bad_state = false;
                    }
                } else if flip < p_good_to_bad {
                    *bad_state = true;
                }
                let p = if *bad_state { loss_bad } else { loss_good };
                rng.random::<f64>() < p
            }
        }
    }

    /// Long-run loss rate of the model.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } => {
                let denom = p_good_to_bad + p_bad_to_good;
                if denom == 0.0 {
                    loss_good
                } else {
                    let pi_bad = p_good_to_bad / denom;
                    (1.0 - pi_bad) * loss_good + pi_bad * loss_bad
                }
            }
        }
    }
}

/// A time window `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start.
    pub start: Instant,
    /// End (exclusive).
    pub end: Instant,
}

impl Window {
    /// Whether `t` is inside.
    pub fn contains(&self, t: Instant) -> bool {
        self.start <= t && t < self.end
    }
}

/// One direction of a path.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Serialisation rate in bit/s.
    pub rate_bps: u64,
    /// Propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per packet; arrivals keep FIFO order (a
    /// packet never overtakes the one before it), so this is variable skew, not reordering.
    pub jitter: Duration,
    /// Loss model.
    pub loss: LossModel,
    /// When set, `loss` applies only inside these windows (no loss elsewhere).
    pub loss_windows: Option<Vec<Window>>,
    /// Outages: every packet sent inside one is lost.
    pub outages: Vec<Window>,
}

impl LinkConfig {
    /// A lossless link with no jitter.
    pub fn new(rate_bps: u64, delay: Duration) -> Self {
        LinkConfig {
            rate_bps,
            delay,
            jitter: Duration::ZERO,
            loss: LossModel::None,
            loss_windows: None,
            outages: Vec::new(),
        }
    }

    /// The largest one-way delay a packet of `bytes` sees once it starts serialising.
    pub fn max_one_way(&self, bytes: u64) -> Duration {
        transmission_time(bytes, self.rate_bps) + self.delay + self.jitter
    }
}

/// Link state during a run.
#[derive(Clone, Debug)]
pub struct Link {
    /// The configuration.
    pub config: LinkConfig,
    /// Serialising until this time.
    pub busy_until: Instant,
    last_arrival: Instant,
    bad_state: bool,
    /// Packets lost by the loss model or an outage.
    pub lost: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
}

/// What happened to a packet put on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When the link is free again.
    pub free_at: Instant,
    /// When the packet arrives, or `None` if it was lost.
    pub arrival: Option<Instant>,
}

impl Link {
    /// A link in its initial state.
    pub fn new(config: LinkConfig) -> Self {
        Link {
            config,
            busy_until: Instant::ZERO,
            last_arrival: Instant::ZERO,
            bad_state: false,
            lost: 0,
            sent: 0,
            sent_bytes: 0,
        }
    }

    /// Whether the link can start serialising at `now`.
    pub fn is_free(&self, now: Instant) -> bool {
        self.busy_until <= now
    }

    fn lost(&mut self, now: Instant, rng: &mut Xoshiro256PlusPlus) -> bool {
        if self.config.outages.iter().any(|w| w.contains(now)) {
            return true;
        }
        if let Some(ws) = &self.config.loss_windows {
            if !ws.iter().any(|w| w.contains(now)) {
                return false;
            }
        }
        self.config.loss.draw(&mut self.bad_state, rng)
    }

    /// Put `bytes` on the link at `now` (which must be when it is free).
    pub fn send(&mut self, now: Instant, bytes: u64, rng: &mut Xoshiro256PlusPlus) -> Sent {
        let free_at = now + transmission_time(bytes, self.config.rate_bps);
        self.busy_until = free_at;
        self.sent += 1;
        self.sent_bytes += bytes;
        let jitter = if self.config.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(rng.random_range(0..=self.config.jitter.as_nanos() as u64))
        };
        if self.lost(now, rng) {
            self.lost += 1;
            return Sent {
                free_at,
                arrival: None,
            };
        }
        let arrival = (free_at + self.config.delay + jitter).max(self.last_arrival);
        self.last_arrival = arrival;
        Sent {
            free_at,
            arrival: Some(arrival),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn jitter_keeps_fifo() {
        let mut cfg = LinkConfig::new(10_000_000, Duration::from_millis(5));
        cfg.jitter = Duration::from_millis(20);
        let mut link = Link::new(cfg);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut now = Instant::ZERO;
        let mut last = Instant::ZERO;
        for _ in 0..1000 {
            let s = link.send(now, 1000, &mut rng);
            let a = s.arrival.unwrap();
            assert!(a >= last);
            assert!(a >= s.free_at + Duration::from_millis(5));
            last = a;
            now = s.free_at;
        }
    }

    #[test]
    fn loss_rates_match_models() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
        for model in [
            LossModel::Bernoulli(0.3),
            LossModel::GilbertElliott {
                p_good_to_bad: 0.05,
                p_bad_to_good: 0.2,
                loss_good: 0.01,
                loss_bad: 0.8,
            },
        ] {
            let mut cfg = LinkConfig::new(1_000_000_000, Duration::ZERO);
            cfg.loss = model.clone();
            let mut link = Link::new(cfg);
            let mut now = Instant::ZERO;
            for _ in 0..200_000 {
                now = link.send(now, 100, &mut rng).free_at;
            }
            let rate = link.lost as f64 / link.sent as f64;
            assert!((rate - model.mean_loss()).abs() < 0.01, "{model:?}: {rate}");
        }
    }

    #[test]
    fn outages_and_windows() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let mut cfg = LinkConfig::new(8_000_000, Duration::ZERO);
        cfg.loss = LossModel::Bernoulli(1.0);
        cfg.loss_windows = Some(vec![Window {
            start: Instant::from_nanos(1_000_000),
            end: Instant::from_nanos(2_000_000),
        }]);
        let mut link = Link::new(cfg);
        assert!(link.send(Instant::ZERO, 1, &mut rng).arrival.is_some());
        assert!(link
            .send(Instant::from_nanos(1_500_000), 1, &mut rng)
            .arrival
            .is_none());
        link.config.outages.push(Window {
            start: Instant::from_nanos(3_000_000),
            end: Instant::from_nanos(4_000_000),
        });
        assert!(link
            .send(Instant::from_nanos(3_000_000), 1, &mut rng)
            .arrival
            .is_none());
        assert!(link
            .send(Instant::from_nanos(4_000_000), 1, &mut rng)
            .arrival
            .is_some());
    }
}

//! One direction of an emulated path: the link model of braid's lab emulator
//! (`braid_lab::emulator`, which runs it in real time between two veths), shared with the
//! simulator (which runs it in virtual time, e.g. `experiments::tcp_check`), so a simulated
//! path and a lab path are the same model.
//!
//! A direction is a drop-tail queue in front of a serialiser of `rate_bps`, then a propagation
//! delay line with FIFO-keeping jitter. Loss (Bernoulli or Gilbert-Elliott, the simulator's
//! [`LossModel`]) is decided when a frame starts serialising, so a lost frame still used the
//! link's time, as on a real wire (and as in [`crate::link`]). A schedule changes the rate or
//! takes the link down for a while; times in it count from [`LinkModel::restart_schedule`].
//!
//! Because arrival times only grow and the queue is FIFO, everything about a frame (when it
//! starts serialising, whether it is lost, when it comes out) is known the moment it arrives:
//! [`LinkModel::on_frame`] returns the verdict at once and the driver holds the frame until
//! then. The driver must pass non-decreasing `now` values.

use crate::link::LossModel;
use braid_proto::time::{transmission_time, Duration, Instant};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::VecDeque;

/// One change of a link's state, at a time counted from the start of the schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleEntry {
    /// When, from [`LinkModel::restart_schedule`].
    pub at: Duration,
    /// What happens.
    pub change: Change,
}

/// A change of link state.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The rate becomes this many bit/s from now on.
    Rate {
        /// New rate, bit/s (> 0).
        rate_bps: u64,
    },
    /// The link is down (every frame lost) for this long, then back at its current rate.
    Down {
        /// How long.
        duration: Duration,
    },
}

/// One direction of an emulated path.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectionConfig {
    /// Serialisation rate in bit/s, counting every byte of the Ethernet frame (header included,
    /// no preamble or FCS), as tbf does.
    pub rate_bps: u64,
    /// Drop-tail limit: bytes waiting or being serialised.
    pub queue_bytes: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per frame; a frame never overtakes the
    /// one before it.
    pub jitter: Duration,
    /// Loss model.
    pub loss: LossModel,
    /// Rate changes and outages, sorted by `at`.
    pub schedule: Vec<ScheduleEntry>,
    /// 0: a serialiser, every frame taking its time at `rate_bps`. Otherwise a token bucket of
    /// this many bytes, as Linux's `tbf` (and ISP policers, cellular schedulers): a frame
    /// leaves at once while the bucket holds its bytes (full at the start, refilled at
    /// `rate_bps`), so a burst leaves back to back and only the long-run rate is `rate_bps`.
    pub burst_bytes: u64,
}

impl DirectionConfig {
    /// A lossless direction with no jitter and no schedule.
    pub fn new(rate_bps: u64, delay: Duration, queue_bytes: u64) -> DirectionConfig {
        DirectionConfig {
            rate_bps,
            queue_bytes,
            delay,
            jitter: Duration::ZERO,
            loss: LossModel::None,
            schedule: Vec::new(),
            burst_bytes: 0,
        }
    }

    /// The longest a frame can spend in this direction at the base rate: a full queue, the
    /// delay and the jitter.
    pub fn max_transit(&self) -> Duration {
        transmission_time(self.queue_bytes.max(1), self.rate_bps.max(1)) + self.delay + self.jitter
    }
}

/// What becomes of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the other side at this instant.
    Deliver {
        /// When.
        at: Instant,
    },
    /// The queue was full (drop-tail).
    QueueFull,
    /// The loss model dropped it.
    Lost,
    /// The link was down when the frame arrived or when it would have started serialising.
    Down,
}

/// The state of one direction. See the module docs for the model and the calling order.
#[derive(Clone, Debug)]
pub struct LinkModel {
    config: DirectionConfig,
    rng: Xoshiro256PlusPlus,
    /// Serialising until then.
    busy_until: Instant,
    /// Delivery time of the last frame (FIFO under jitter).
    last_delivery: Instant,
    /// `(serialisation end, bytes)` of frames not yet fully serialised.
    backlog: VecDeque<(Instant, u64)>,
    backlog_bytes: u64,
    /// Gilbert-Elliott state.
    bad_state: bool,
    /// Token bucket (`burst_bytes` > 0): bytes in it as of `tokens_at`.
    tokens: f64,
    tokens_at: Instant,
    /// Start of the schedule; `None` until [`LinkModel::restart_schedule`].
    epoch: Option<Instant>,
    last_now: Instant,
}

impl LinkModel {
    /// A direction in its initial state. `seed` fixes its jitter and loss draws.
    ///
    /// # Panics
    /// If `config.rate_bps` or a scheduled rate is zero (the scenario parser refuses both).
    pub fn new(mut config: DirectionConfig, seed: u64) -> LinkModel {
        assert!(config.rate_bps > 0, "LinkModel: zero rate");
        for e in &config.schedule {
            if let Change::Rate { rate_bps } = e.change {
                assert!(rate_bps > 0, "LinkModel: zero rate in the schedule");
            }
        }
        config.schedule.sort_by_key(|e| e.at);
        LinkModel {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            busy_until: Instant::ZERO,
            last_delivery: Instant::ZERO,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            bad_state: false,
            tokens: config.burst_bytes as f64,
            tokens_at: Instant::ZERO,
            epoch: None,
            last_now: Instant::ZERO,
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DirectionConfig {
        &self.config
    }

    /// Start (or restart) the schedule at `now`: its times count from here. Before the first
    /// call the link runs at its base rate and never goes down.
    pub fn restart_schedule(&mut self, now: Instant) {
        self.epoch = Some(now);
    }

    /// Rate in bit/s at `t`, or `None` if the link is down then.
    pub fn rate_at(&self, t: Instant) -> Option<u64> {
        let Some(epoch) = self.epoch else {
            return Some(self.config.rate_bps);
        };
        if t < epoch {
            return Some(self.config.rate_bps);
        }
        let rel = t - epoch;
        let mut rate = self.config.rate_bps;
        let mut down = false;
        for e in &self.config.schedule {
            if e.at > rel {
                break;
            }
            match e.change {
                Change::Rate { rate_bps } => rate = rate_bps,
                Change::Down { duration } => {
                    if rel < e.at + duration {
                        down = true;
                    }
                }
            }
        }
        (!down).then_some(rate)
    }

    /// Bytes queued or being serialised at the last call.
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }

    /// A frame of `len` bytes arrives at `now`.
    pub fn on_frame(&mut self, now: Instant, len: u64) -> Verdict {
        debug_assert!(now >= self.last_now, "time went backwards");
        let now = now.max(self.last_now);
        self.last_now = now;
        while let Some(&(end, bytes)) = self.backlog.front() {
            if end > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= bytes;
        }
        if self.rate_at(now).is_none() {
            return Verdict::Down;
        }
        if self.backlog_bytes > 0 && self.backlog_bytes + len > self.config.queue_bytes {
            return Verdict::QueueFull;
        }
        let start = now.max(self.busy_until);
        let Some(rate) = self.rate_at(start) else {
            return Verdict::Down;
        };
        let end = if self.config.burst_bytes == 0 {
            start + transmission_time(len, rate)
        } else {
            // Refill since the last departure, up to the bucket; wait for what is missing.
            let bucket = self.config.burst_bytes as f64;
            let refill = (start - self.tokens_at).as_secs_f64() * rate as f64 / 8.0;
            let tokens = (self.tokens + refill).min(bucket);
            let missing = len as f64 - tokens;
            let end = if missing > 0.0 {
                start + Duration::from_secs_f64(missing * 8.0 / rate as f64)
            } else {
                start
            };
            self.tokens = (tokens - len as f64).max(0.0);
            self.tokens_at = end;
            end
        };
        self.busy_until = end;
        self.backlog.push_back((end, len));
        self.backlog_bytes += len;
        if self.lost() {
            return Verdict::Lost;
        }
        let jitter = if self.config.jitter.is_zero() {
            Duration::ZERO
        } else {
            let max = u64::try_from(self.config.jitter.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(self.rng.random_range(0..=max))
        };
        let at = (end + self.config.delay + jitter).max(self.last_delivery);
        self.last_delivery = at;
        Verdict::Deliver { at }
    }

    fn lost(&mut self) -> bool {
        self.config.loss.draw(&mut self.bad_state, &mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn at_ms(x: u64) -> Instant {
        Instant::from_nanos(x * 1_000_000)
    }

    fn deliver(v: Verdict) -> Instant {
        match v {
            Verdict::Deliver { at } => at,
            other => panic!("expected a delivery, got {other:?}"),
        }
    }

    #[test]
    fn serialises_at_the_rate_and_adds_the_delay() {
        // 1250 bytes at 10 Mbit/s is exactly 1 ms; 5 ms of delay.
        let mut m = LinkModel::new(DirectionConfig::new(10_000_000, ms(5), 100_000), 1);
        // A burst of four frames at t = 0 leaves 1 ms apart.
        let got: Vec<Instant> = (0..4)
            .map(|_| deliver(m.on_frame(Instant::ZERO, 1250)))
            .collect();
        assert_eq!(got, vec![at_ms(6), at_ms(7), at_ms(8), at_ms(9)]);
        assert_eq!(m.backlog_bytes(), 5000);
        // An idle link starts at once.
        assert_eq!(deliver(m.on_frame(at_ms(100), 1250)), at_ms(106));
        assert_eq!(m.backlog_bytes(), 1250);
    }

    #[test]
    fn a_token_bucket_lets_a_burst_through_at_once_and_then_the_rate() {
        // 1 Mbit/s, a 16 KiB bucket: ten 1500-byte frames sent at once leave together, the
        // eleventh waits for the 116 bytes of tokens the bucket lacks (0.928 ms), and after
        // that one frame leaves every 12 ms.
        let mut c = DirectionConfig::new(1_000_000, ms(10), 1 << 20);
        c.burst_bytes = 16 * 1024;
        let mut m = LinkModel::new(c, 1);
        let out: Vec<Instant> = (0..14)
            .map(|_| deliver(m.on_frame(at_ms(0), 1500)))
            .collect();
        for t in &out[..10] {
            assert_eq!(*t, at_ms(10));
        }
        assert_eq!((out[10] - at_ms(10)).as_micros(), 928);
        assert_eq!((out[11] - out[10]).as_micros(), 12_000);
        assert_eq!((out[13] - out[12]).as_micros(), 12_000);
        // Idle for a second: the bucket is full again.
        let later: Vec<Instant> = (0..3)
            .map(|_| deliver(m.on_frame(at_ms(2000), 1500)))
            .collect();
        assert!(later.iter().all(|t| *t == at_ms(2010)), "{later:?}");
    }

    #[test]
    fn drop_tail_counts_the_frame_being_serialised() {
        let mut m = LinkModel::new(DirectionConfig::new(10_000_000, ms(0), 3000), 1);
        assert!(matches!(
            m.on_frame(Instant::ZERO, 1250),
            Verdict::Deliver { .. }
        ));
        assert!(matches!(
            m.on_frame(Instant::ZERO, 1250),
            Verdict::Deliver { .. }
        ));
        assert_eq!(m.on_frame(Instant::ZERO, 1250), Verdict::QueueFull);
        // One frame has left after 1 ms: room again.
        assert!(matches!(
            m.on_frame(at_ms(1), 1250),
            Verdict::Deliver { .. }
        ));
        // A frame larger than the whole queue still passes an empty link.
        let mut m = LinkModel::new(DirectionConfig::new(10_000_000, ms(0), 100), 1);
        assert!(matches!(
            m.on_frame(Instant::ZERO, 1500),
            Verdict::Deliver { .. }
        ));
        assert_eq!(m.on_frame(Instant::ZERO, 10), Verdict::QueueFull);
    }

    #[test]
    fn jitter_keeps_fifo_within_bounds() {
        let mut cfg = DirectionConfig::new(100_000_000, ms(10), 1 << 30);
        cfg.jitter = ms(20);
        let mut m = LinkModel::new(cfg, 7);
        let mut last = Instant::ZERO;
        let mut spread = Duration::ZERO;
        for i in 0..10_000u64 {
            let now = Instant::from_nanos(i * 50_000);
            let at = deliver(m.on_frame(now, 100));
            assert!(at >= last, "reordered");
            assert!(at >= now + ms(10));
            spread = spread.max(at - now);
            last = at;
        }
        // Jitter was applied: some frame took well over the bare delay.
        assert!(spread > ms(25), "{spread:?}");
    }

    #[test]
    fn loss_models_hit_their_mean() {
        for (model, seed) in [
            (LossModel::Bernoulli(0.05), 3),
            (
                LossModel::GilbertElliott {
                    p_good_to_bad: 0.01,
                    p_bad_to_good: 0.3,
                    loss_good: 0.0,
                    loss_bad: 0.5,
                },
                4,
            ),
        ] {
            let mut cfg = DirectionConfig::new(1_000_000_000, ms(0), 1 << 30);
            cfg.loss = model.clone();
            let mut m = LinkModel::new(cfg, seed);
            let n = 200_000u64;
            let lost = (0..n)
                .filter(|i| m.on_frame(Instant::from_nanos(i * 10_000), 100) == Verdict::Lost)
                .count();
            let rate = lost as f64 / n as f64;
            assert!(
                (rate - model.mean_loss()).abs() < 0.005,
                "{model:?}: {rate}"
            );
        }
    }

    #[test]
    fn a_lost_frame_still_uses_the_link() {
        let mut cfg = DirectionConfig::new(10_000_000, ms(0), 1 << 20);
        cfg.loss = LossModel::Bernoulli(1.0);
        let mut m = LinkModel::new(cfg, 1);
        assert_eq!(m.on_frame(Instant::ZERO, 1250), Verdict::Lost);
        m.config.loss = LossModel::None;
        assert_eq!(deliver(m.on_frame(Instant::ZERO, 1250)), at_ms(2));
    }

    #[test]
    fn schedule_changes_rate_and_takes_the_link_down() {
        let mut cfg = DirectionConfig::new(10_000_000, ms(0), 1 << 20);
        cfg.schedule = vec![
            ScheduleEntry {
                at: ms(100),
                change: Change::Down { duration: ms(50) },
            },
            ScheduleEntry {
                at: ms(20),
                change: Change::Rate {
                    rate_bps: 1_000_000,
                },
            },
        ];
        let mut m = LinkModel::new(cfg, 1);
        // Before the schedule starts nothing happens at its times.
        assert_eq!(m.rate_at(at_ms(120)), Some(10_000_000));
        m.restart_schedule(at_ms(1000));
        assert_eq!(m.rate_at(at_ms(1010)), Some(10_000_000));
        assert_eq!(m.rate_at(at_ms(1020)), Some(1_000_000));
        assert_eq!(m.rate_at(at_ms(1100)), None);
        assert_eq!(m.rate_at(at_ms(1149)), None);
        assert_eq!(m.rate_at(at_ms(1150)), Some(1_000_000));
        // 1250 bytes at 1 Mbit/s: 10 ms.
        assert_eq!(deliver(m.on_frame(at_ms(1030), 1250)), at_ms(1040));
        assert_eq!(m.on_frame(at_ms(1120), 1250), Verdict::Down);
        // A frame queued before the outage whose turn comes inside it is lost too.
        let mut m2 = LinkModel::new(m.config().clone(), 1);
        m2.restart_schedule(at_ms(1000));
        for k in 0..3 {
            assert_eq!(
                deliver(m2.on_frame(at_ms(1070), 1250)),
                at_ms(1080 + 10 * k)
            );
        }
        // The fourth would start at 1100 ms, inside the outage.
        assert_eq!(m2.on_frame(at_ms(1070), 1250), Verdict::Down);
        // Restarting the schedule replays it.
        m.restart_schedule(at_ms(5000));
        assert_eq!(m.rate_at(at_ms(5100)), None);
    }
}

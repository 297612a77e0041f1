//! JoBS (Joint Buffer Management and Scheduling), the queue of the QoSbox.
//!
//! One buffer per class. Service is accounted over the current *busy period* (QoSbox paper
//! section 2.3): per class `i` the arrivals `A_i`, the admitted arrivals `R_in_i`, the
//! transmissions `Xmit_i` and the theoretical output `R_out_i += r_i * dt` (equation (1)), all in
//! bytes. On every arrival [`Jobs::enqueue`] runs the sequence of Figure 4 (detailed in
//! section 2.4):
//!
//! 1. a new busy period if the queue was empty (lines 2-3: every counter reset);
//! 2. `insert_tail` and `accounting` (lines 6-7);
//! 3. drops while the buffer overflows, from the class `select_dropped_class` names (lines
//!    10-12);
//! 4. `reset_rates` if the set of backlogged classes changed since the last arrival (lines 8-9):
//!    idle classes get rate 0, backlogged ones share the capacity `C` equally (the members of
//!    a delay chain share their part in the proportions `adjust_rates` had reached);
//! 5. every `sample_every` arrivals (section 3.3, "every T arrivals"), and at once after a
//!    `reset_rates`: `compute_min_rates` (line 13), then, while the minimum rates exceed `C`,
//!    either drops chosen by `select_dropped_class` (lines 14-17, [`Feasibility::Drop`]) or
//!    `greedy_alloc` (section 3.2, [`Feasibility::Greedy`], the default), and `adjust_rates`
//!    for proportional delay differentiation (line 18).
//!
//! [`Jobs::dequeue`] is the scheduler of section 2.3 and 3.2: the backlogged class furthest
//! behind its service rate (largest `R_out_i - Xmit_i`, ties to the lower index) sends the
//! packet at the head of its buffer.
//!
//! Bounds can conflict; the relaxation order (section 2.1, [`Relaxation`]) says which gives way.
//! Rates are `f64` bytes per second: the paper notes (section 3.2) that fixed point is only
//! needed inside a kernel without an FPU; `braid` runs in user space. Time is integer
//! nanoseconds ([`Instant`]).

use crate::{ClassId, MAX_CLASSES};
use braid_proto::time::{Duration, Instant};
use std::collections::VecDeque;

/// The default `adjust_gain`: the fraction of a chain's mean rate that a 100% relative error in
/// weighted delay moves in one `adjust_rates` call.
pub const DEFAULT_ADJUST_GAIN: f64 = 0.25;

/// The service one class is promised (QoSbox paper Table 1, ALTQ's `adc`, `arc`, `alc`, `rdc`,
/// `rlc`). Every constraint is optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassConfig {
    /// `d_i`: absolute bound on the queueing delay (ALTQ `adc`).
    pub adc: Option<Duration>,
    /// `f_i`: minimum throughput while backlogged, bit/s (ALTQ `arc`).
    pub arc_bps: Option<u64>,
    /// `L_i`: bound on the busy period's loss rate, a fraction in `(0, 1]` (ALTQ `alc`).
    pub alc: Option<f64>,
    /// `k_i`: the next class's delay should be `k_i` times this class's (ALTQ `rdc`). Any
    /// positive value; the last class has none.
    pub rdc: Option<f64>,
    /// `k'_i`: the next class's loss rate should be `k'_i` times this class's (ALTQ `rlc`).
    pub rlc: Option<f64>,
    /// With [`BufferMode::Separate`]: this class's buffer in packets (default: the queue's
    /// `limit_packets`).
    pub limit_packets: Option<u32>,
}

/// How the buffer is bounded (section 2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BufferMode {
    /// At most `limit_packets` packets in all classes together (ALTQ's default).
    #[default]
    Shared,
    /// At most `limit_packets` (or the class's own limit) packets in each class (ALTQ
    /// `separate`).
    Separate,
}

/// Which bound gives way when loss and delay bounds cannot both hold (section 2.1, 2.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Relaxation {
    /// Loss bounds win: no drop for a delay bound may break a loss bound (the `can_drop()` test
    /// of Figure 4, line 14). The paper's choice.
    #[default]
    LossFirst,
    /// Delay bounds win: drops for delay bounds go on even if a loss bound breaks.
    DelayFirst,
}

/// What to do while the minimum rates exceed the capacity (Figure 4 lines 14-17, section 3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Feasibility {
    /// `greedy_alloc`: move rate from classes with a surplus (lowest priority first) to classes
    /// short of their minimum (highest priority first), then drop from the tail of each class
    /// still short until its delay bound is reachable at the rate it has. ALTQ's choice.
    #[default]
    Greedy,
    /// Figure 4 lines 14-17: drop one packet at a time from the class `select_dropped_class`
    /// names among those whose minimum rate comes from a delay bound, recompute the minimum
    /// rates, and repeat; then share the rates out greedily.
    Drop,
}

/// Settings of a [`Jobs`] queue. Class `i` of the vector is [`ClassId`]`(i)`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobsConfig {
    /// `C`: the link rate in bit/s. It can change at run time ([`Jobs::set_capacity`]).
    pub capacity_bps: u64,
    /// The classes, in order; proportional ratios relate class `i` to class `i + 1`.
    pub classes: Vec<ClassConfig>,
    /// Shared or separate buffers.
    pub buffer: BufferMode,
    /// The buffer in packets: the total with a shared buffer, the per-class default with
    /// separate ones (ALTQ `qlimit`, 200 by default).
    pub limit_packets: u32,
    /// Which bound gives way.
    pub relaxation: Relaxation,
    /// Drops or greedy reallocation while the minimum rates exceed `C`.
    pub feasibility: Feasibility,
    /// `T`: run lines 13-18 of Figure 4 on every `T`-th arrival of a busy period (section 3.3),
    /// and on an arrival that changed the set of backlogged classes; 1 runs them on every
    /// arrival.
    pub sample_every: u32,
    /// Gain of `adjust_rates` per arrival: a class whose weighted delay is twice the chain's
    /// mean gains this fraction of the chain's mean rate in one call. With `sample_every = T`
    /// each call uses `1 - (1 - adjust_gain)^T`, which corrects an error as much as `T` calls
    /// at `adjust_gain` would. See [`DEFAULT_ADJUST_GAIN`].
    pub adjust_gain: f64,
}

impl JobsConfig {
    /// Defaults as in ALTQ: a shared buffer of 200 packets, loss bounds before delay bounds,
    /// greedy reallocation, rates adjusted on every arrival.
    pub fn new(capacity_bps: u64, classes: Vec<ClassConfig>) -> Self {
        JobsConfig {
            capacity_bps,
            classes,
            buffer: BufferMode::Shared,
            limit_packets: 200,
            relaxation: Relaxation::LossFirst,
            feasibility: Feasibility::Greedy,
            sample_every: 1,
            adjust_gain: DEFAULT_ADJUST_GAIN,
        }
    }

    /// The QoSbox paper's Table 1 on a link of `capacity_bps`: class 1 with an 8 ms delay bound
    /// and a 1% loss bound; class 2 with a 35 Mbit/s minimum rate and delay and loss ratio 2 to
    /// class 3; class 3 with ratio 2 to class 4; class 4 best effort. Shared 200-packet buffer.
    pub fn table1(capacity_bps: u64) -> Self {
        let ratio2 = |arc_bps| ClassConfig {
            arc_bps,
            rdc: Some(2.0),
            rlc: Some(2.0),
            ..ClassConfig::default()
        };
        JobsConfig::new(
            capacity_bps,
            vec![
                ClassConfig {
                    adc: Some(Duration::from_millis(8)),
                    alc: Some(0.01),
                    ..ClassConfig::default()
                },
                ratio2(Some(35_000_000)),
                ratio2(None),
                ClassConfig::default(),
            ],
        )
    }

    /// Check every setting; [`Jobs::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let n = self.classes.len();
        if n == 0 || n > MAX_CLASSES {
            return Err(ConfigError::ClassCount(n));
        }
        if self.limit_packets == 0 {
            return Err(ConfigError::ZeroLimit(None));
        }
        if self.sample_every == 0 {
            return Err(ConfigError::ZeroSampling);
        }
        if !(self.adjust_gain.is_finite() && self.adjust_gain > 0.0 && self.adjust_gain <= 1.0) {
            return Err(ConfigError::Gain(self.adjust_gain));
        }
        let positive = |x: Option<f64>| x.is_none_or(|v| v.is_finite() && v > 0.0);
        for (i, c) in self.classes.iter().enumerate() {
            let class = ClassId(i as u8);
            if c.adc == Some(Duration::ZERO) {
                return Err(ConfigError::Bound { class, what: "adc" });
            }
            if c.arc_bps == Some(0) {
                return Err(ConfigError::Bound { class, what: "arc" });
            }
            if !c.alc.is_none_or(|l| l.is_finite() && l > 0.0 && l <= 1.0) {
                return Err(ConfigError::Bound { class, what: "alc" });
            }
            if !positive(c.rdc) {
                return Err(ConfigError::Bound { class, what: "rdc" });
            }
            if !positive(c.rlc) {
                return Err(ConfigError::Bound { class, what: "rlc" });
            }
            if i + 1 == n && (c.rdc.is_some() || c.rlc.is_some()) {
                return Err(ConfigError::RatioOnLast(class));
            }
            if c.limit_packets == Some(0) {
                return Err(ConfigError::ZeroLimit(Some(class)));
            }
        }
        Ok(())
    }
}

/// Why a [`JobsConfig`] cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// No classes, or more than [`MAX_CLASSES`].
    #[error("{0} classes: JoBS needs between 1 and 64")]
    ClassCount(usize),
    /// A buffer of zero packets.
    #[error("a buffer limit of 0 packets{}: give at least 1", .0.map(|c| format!(" for {c}")).unwrap_or_default())]
    ZeroLimit(Option<ClassId>),
    /// `sample_every` is 0.
    #[error("sample_every is 0: use 1 to adjust rates on every arrival")]
    ZeroSampling,
    /// `adjust_gain` outside `(0, 1]`.
    #[error("adjust_gain {0} is outside (0, 1]")]
    Gain(f64),
    /// A bound that is zero, negative or not a number (`alc` above 1).
    #[error("{class}: {what} must be positive (alc at most 1)")]
    Bound {
        /// The class.
        class: ClassId,
        /// The parameter: `adc`, `arc`, `alc`, `rdc` or `rlc`.
        what: &'static str,
    },
    /// A ratio on the last class, which has no next class to relate to.
    #[error(
        "{0} is the last class: rdc and rlc relate a class to the next one, so it can have neither"
    )]
    RatioOnLast(ClassId),
}

/// Why [`Jobs::enqueue`] refused a packet; the payload is handed back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError<P> {
    /// The class index is not configured.
    #[error("unknown class")]
    UnknownClass(P),
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The buffer overflowed (Figure 4 lines 10-12).
    Overflow,
    /// The minimum rates exceeded the capacity, i.e. a delay bound was out of reach (Figure 4
    /// lines 14-17 or `greedy_alloc`).
    DelayBound,
}

/// A packet JoBS dropped; take them with [`Jobs::poll_dropped`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped<P> {
    /// Its class.
    pub class: ClassId,
    /// Its length in bytes.
    pub len: u32,
    /// The payload, handed back.
    pub payload: P,
    /// Why.
    pub reason: DropReason,
    /// The drop took the class's busy-period loss rate above its loss bound. With
    /// [`Relaxation::LossFirst`] that happens only on overflow when no backlogged class could
    /// lose a packet within its bound.
    pub loss_bound_broken: bool,
}

/// A packet leaving the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dequeued<P> {
    /// Its class.
    pub class: ClassId,
    /// Its length in bytes.
    pub len: u32,
    /// The payload.
    pub payload: P,
    /// Its queueing delay: `now` at dequeue minus `now` at enqueue.
    pub delay: Duration,
}

/// Counters of one class since the queue was created (they never reset).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Packets offered to the class.
    pub arrivals: u64,
    /// Bytes offered.
    pub arrival_bytes: u64,
    /// Packets sent.
    pub xmit: u64,
    /// Bytes sent.
    pub xmit_bytes: u64,
    /// Packets dropped on buffer overflow.
    pub drops_overflow: u64,
    /// Packets dropped to reach a delay bound.
    pub drops_delay: u64,
    /// Bytes dropped, for either reason.
    pub drop_bytes: u64,
    /// Drops that took the busy period's loss rate above the loss bound.
    pub loss_bound_violations: u64,
    /// Packets sent later than the delay bound.
    pub delay_bound_violations: u64,
    /// Rate allocations (the sampled steps of Figure 4, lines 13-18) that left the class,
    /// backlogged, with a service rate below its rate bound `f_i`: the bound gave way to
    /// higher classes' minimum rates or to a capacity below it.
    pub rate_bound_violations: u64,
    /// Sum of the queueing delays of the sent packets, ns. 128 bits: 64 would fill in about
    /// eight days at 100,000 packets a second delayed 250 ms each.
    pub delay_ns_sum: u128,
    /// The largest queueing delay of a sent packet.
    pub delay_max: Duration,
}

impl ClassStats {
    /// Packets dropped for any reason.
    pub fn drops(&self) -> u64 {
        self.drops_overflow + self.drops_delay
    }

    /// Mean queueing delay of the sent packets.
    pub fn delay_mean(&self) -> Duration {
        let mean = self
            .delay_ns_sum
            .checked_div(u128::from(self.xmit))
            .unwrap_or(0);
        Duration::from_nanos(u64::try_from(mean).unwrap_or(u64::MAX))
    }

    /// Dropped bytes over offered bytes since creation.
    pub fn loss_rate(&self) -> f64 {
        if self.arrival_bytes == 0 {
            0.0
        } else {
            self.drop_bytes as f64 / self.arrival_bytes as f64
        }
    }
}

/// One class's state in the current busy period (see [`Jobs::class_status`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassStatus {
    /// Packets queued.
    pub backlog: u32,
    /// Bytes queued (`B_i`).
    pub backlog_bytes: u64,
    /// `A_i`: bytes offered in the busy period.
    pub arrival_bytes: u64,
    /// `R_in_i`: bytes admitted in the busy period.
    pub admitted_bytes: u64,
    /// `Xmit_i`: bytes sent in the busy period.
    pub xmit_bytes: u64,
    /// `p_i = (A_i - R_in_i) / A_i`.
    pub loss_rate: f64,
    /// `r_i`, bit/s.
    pub service_rate_bps: f64,
    /// The minimum rate of the last `compute_min_rates`, bit/s.
    pub min_rate_bps: f64,
    /// `D_i`: age of the oldest queued packet.
    pub head_delay: Duration,
    /// Queueing delay of the last packet sent.
    pub last_delay: Duration,
}

/// Counters of the whole queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobsStats {
    /// Busy periods started.
    pub busy_periods: u64,
    /// `reset_rates` calls (the backlogged set changed).
    pub rate_resets: u64,
    /// Arrivals on which the sampled steps (lines 13-18) ran.
    pub adjustments: u64,
    /// Dropped packets discarded because the driver did not take them with `poll_dropped`.
    pub dropped_unpolled: u64,
}

#[derive(Clone, Debug)]
struct Packet<P> {
    arrival: Instant,
    len: u32,
    payload: P,
}

/// A chain of classes linked by proportional ratios, with each member's weight.
#[derive(Clone, Debug)]
struct Chain {
    /// `(class index, weight w_i = 1 / m_i)`, `m_i` the product of the ratios above it.
    members: Vec<(usize, f64)>,
}

#[derive(Clone, Debug)]
struct Class<P> {
    adc_ns: Option<u64>,
    /// `f_i` in bytes per second (0 without a rate bound).
    arc: f64,
    alc: Option<f64>,
    limit: u32,
    /// Weight in its `rlc` chain, if it is in one.
    loss_weight: Option<f64>,
    queue: VecDeque<Packet<P>>,
    backlog_bytes: u64,
    /// `A_i`, `R_in_i`, `Xmit_i` (bytes) and `R_out_i`.
    a: u64,
    r_in: u64,
    xmit: u64,
    r_out: f64,
    /// `r_i` and the minimum rate, bytes per second.
    rate: f64,
    min_rate: f64,
    /// In a delay chain: the class's rate over the mean rate of the chain's backlogged
    /// members, as of the last `reset_rates` that saw two or more of them (0: not known in
    /// this busy period). It survives the class going idle.
    chain_weight: f64,
    last_delay: Duration,
    stats: ClassStats,
}

/// A delay-chain member's weight for `reset_rates`: average (1) until one is known.
fn chain_weight<P>(c: &Class<P>) -> f64 {
    if c.chain_weight > 0.0 {
        c.chain_weight
    } else {
        1.0
    }
}

impl<P> Class<P> {
    fn loss(&self) -> f64 {
        if self.a == 0 {
            0.0
        } else {
            (self.a - self.r_in) as f64 / self.a as f64
        }
    }

    /// The loss rate after dropping the packet at the tail.
    fn loss_after_tail_drop(&self) -> f64 {
        let len = self.queue.back().map_or(0, |p| u64::from(p.len));
        if self.a == 0 {
            0.0
        } else {
            (self.a - self.r_in + len) as f64 / self.a as f64
        }
    }

    /// How far a tail drop would take the class above its loss bound (<= 0: within it).
    fn excess_after_tail_drop(&self) -> f64 {
        self.alc
            .map_or(f64::NEG_INFINITY, |l| self.loss_after_tail_drop() - l)
    }

    fn head_age(&self, now: Instant) -> Duration {
        self.queue
            .front()
            .map_or(Duration::ZERO, |p| now.saturating_duration_since(p.arrival))
    }
}

/// The JoBS queue, generic over the payload `P` (the daemon's packet buffers, the simulator's
/// packet records).
///
/// # Polling
/// For each arriving packet call [`enqueue`](Self::enqueue), then
/// [`poll_dropped`](Self::poll_dropped) until `None` to take back what was dropped (the
/// arriving packet may be among them). Whenever the link can take a packet, call [`dequeue`](Self::dequeue) (or
/// [`peek`](Self::peek) first to see what it would return). Report link-rate changes with
/// [`set_capacity`](Self::set_capacity). There are no timers: JoBS acts only on arrivals and
/// departures. `now` must never go backwards; if it does, elapsed times count as zero.
///
/// Work conservation: `dequeue` returns a packet whenever one is queued.
#[derive(Clone, Debug)]
pub struct Jobs<P> {
    classes: Vec<Class<P>>,
    delay_chains: Vec<Chain>,
    /// The members of all delay chains, one bit per class.
    delay_chained: u64,
    loss_chains: Vec<Chain>,
    /// `C`, bytes per second.
    capacity: f64,
    buffer: BufferMode,
    limit_packets: u32,
    relaxation: Relaxation,
    feasibility: Feasibility,
    sample_every: u32,
    /// The gain of one `adjust_rates` call: `adjust_gain` compounded over `sample_every`.
    gain: f64,
    total_packets: u64,
    /// Backlogged classes at the backlog test (lines 8-9) of the last arrival, one bit per
    /// class.
    last_backlogged: u64,
    /// When the `R_out` counters were last brought up to date.
    last_update: Instant,
    /// Arrivals in the current busy period.
    busy_arrivals: u64,
    dropped: VecDeque<Dropped<P>>,
    dropped_cap: usize,
    stats: JobsStats,
}

/// The gain of one `adjust_rates` call every `sample_every` arrivals that corrects a delay
/// error as much as `sample_every` calls at `gain` would: they leave `(1 - gain)^T` of it.
fn sampled_gain(gain: f64, sample_every: u32) -> f64 {
    let t = i32::try_from(sample_every).unwrap_or(i32::MAX);
    1.0 - (1.0 - gain).powi(t)
}

/// Chains of consecutive classes linked by a ratio (`rdc` or `rlc`), read with `ratio`.
fn chains(classes: &[ClassConfig], ratio: impl Fn(&ClassConfig) -> Option<f64>) -> Vec<Chain> {
    let mut out: Vec<Chain> = Vec::new();
    let mut current: Option<Chain> = None;
    for (i, c) in classes.iter().enumerate() {
        let linked_from_above = i > 0 && ratio(&classes[i - 1]).is_some();
        if linked_from_above {
            if let Some(chain) = current.as_mut() {
                let &(_, w_above) = chain.members.last().expect("chains are never empty");
                let k = ratio(&classes[i - 1]).unwrap_or(1.0);
                chain.members.push((i, w_above / k));
            }
        } else if let Some(chain) = current.take() {
            out.push(chain);
        }
        if current.is_none() && ratio(c).is_some() {
            current = Some(Chain {
                members: vec![(i, 1.0)],
            });
        }
    }
    out.extend(current);
    out
}

impl<P> Jobs<P> {
    /// A queue with the given settings.
    pub fn new(config: &JobsConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let loss_chains = chains(&config.classes, |c| c.rlc);
        let mut classes: Vec<Class<P>> = config
            .classes
            .iter()
            .map(|c| Class {
                adc_ns: c
                    .adc
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                arc: c.arc_bps.map_or(0.0, |b| b as f64 / 8.0),
                alc: c.alc,
                limit: c.limit_packets.unwrap_or(config.limit_packets),
                loss_weight: None,
                queue: VecDeque::new(),
                backlog_bytes: 0,
                a: 0,
                r_in: 0,
                xmit: 0,
                r_out: 0.0,
                rate: 0.0,
                min_rate: 0.0,
                chain_weight: 0.0,
                last_delay: Duration::ZERO,
                stats: ClassStats::default(),
            })
            .collect();
        for chain in &loss_chains {
            for &(i, w) in &chain.members {
                classes[i].loss_weight = Some(w);
            }
        }
        let buffered: u64 = match config.buffer {
            BufferMode::Shared => u64::from(config.limit_packets),
            BufferMode::Separate => classes.iter().map(|c| u64::from(c.limit)).sum(),
        };
        let delay_chains = chains(&config.classes, |c| c.rdc);
        let delay_chained = delay_chains
            .iter()
            .flat_map(|ch| &ch.members)
            .fold(0, |m, &(i, _)| m | 1 << i);
        Ok(Jobs {
            classes,
            delay_chains,
            delay_chained,
            loss_chains,
            capacity: config.capacity_bps as f64 / 8.0,
            buffer: config.buffer,
            limit_packets: config.limit_packets,
            relaxation: config.relaxation,
            feasibility: config.feasibility,
            sample_every: config.sample_every,
            gain: sampled_gain(config.adjust_gain, config.sample_every),
            total_packets: 0,
            last_backlogged: 0,
            last_update: Instant::ZERO,
            busy_arrivals: 0,
            dropped: VecDeque::new(),
            dropped_cap: usize::try_from(buffered.saturating_add(1)).unwrap_or(usize::MAX),
            stats: JobsStats::default(),
        })
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// Packets queued in all classes.
    pub fn len(&self) -> u64 {
        self.total_packets
    }

    /// Whether no packet is queued (the link is idle once the last one has been sent).
    pub fn is_empty(&self) -> bool {
        self.total_packets == 0
    }

    /// Bytes queued in all classes.
    pub fn backlog_bytes(&self) -> u64 {
        self.classes.iter().map(|c| c.backlog_bytes).sum()
    }

    /// `C`, bit/s.
    pub fn capacity_bps(&self) -> u64 {
        (self.capacity * 8.0) as u64
    }

    /// Counters of one class since creation.
    ///
    /// # Panics
    /// If `class` is not configured.
    pub fn class_stats(&self, class: ClassId) -> &ClassStats {
        &self.classes[class.index()].stats
    }

    /// Counters of the queue.
    pub fn stats(&self) -> &JobsStats {
        &self.stats
    }

    /// One class's state in the current busy period, as of `now`.
    ///
    /// # Panics
    /// If `class` is not configured.
    pub fn class_status(&self, class: ClassId, now: Instant) -> ClassStatus {
        let c = &self.classes[class.index()];
        ClassStatus {
            backlog: c.queue.len() as u32,
            backlog_bytes: c.backlog_bytes,
            arrival_bytes: c.a,
            admitted_bytes: c.r_in,
            xmit_bytes: c.xmit,
            loss_rate: c.loss(),
            service_rate_bps: c.rate * 8.0,
            min_rate_bps: c.min_rate * 8.0,
            head_delay: c.head_age(now),
            last_delay: c.last_delay,
        }
    }

    /// A shared buffer's limit from now on, in packets (a shaper that sizes its buffer as a
    /// queueing time at a rate that moves). Below the backlog, nothing queued is dropped: each
    /// arrival is answered by one drop, as on overflow, until departures bring the backlog
    /// under the new limit. Ignored with separate buffers, and for 0.
    pub fn set_shared_limit(&mut self, packets: u32) {
        if self.buffer == BufferMode::Shared && packets > 0 {
            self.limit_packets = packets;
            let cap = usize::try_from(u64::from(packets) + 1).unwrap_or(usize::MAX);
            self.dropped_cap = self.dropped_cap.max(cap);
        }
    }

    /// The shared buffer's limit in packets (with separate buffers, the per-class default).
    pub fn limit_packets(&self) -> u32 {
        self.limit_packets
    }

    /// The link rate changed (the bond's configured or estimated rate). Current service rates
    /// are scaled to the new capacity; minimum rates are recomputed on the next arrival.
    pub fn set_capacity(&mut self, now: Instant, capacity_bps: u64) {
        self.advance(now);
        let new = capacity_bps as f64 / 8.0;
        let sum: f64 = self.classes.iter().map(|c| c.rate).sum();
        if sum > 0.0 {
            for c in &mut self.classes {
                c.rate *= new / sum;
            }
        } else {
            self.capacity = new;
            self.reset_rates(self.backlogged());
        }
        self.capacity = new;
    }

    /// Offer a packet of `len` bytes to `class` at `now`: Figure 4 of the QoSbox paper. Drops,
    /// of this packet or of queued ones, wait in [`poll_dropped`](Self::poll_dropped).
    pub fn enqueue(
        &mut self,
        now: Instant,
        class: ClassId,
        len: u32,
        payload: P,
    ) -> Result<(), EnqueueError<P>> {
        let i = class.index();
        if i >= self.classes.len() {
            return Err(EnqueueError::UnknownClass(payload));
        }
        self.advance(now);
        if self.total_packets == 0 {
            self.new_busy_period();
        }
        self.busy_arrivals += 1;
        // insert_tail (line 6). A class that was idle rejoins level with the class furthest
        // behind: neither credit earned while idle nor the others' accumulated lag carries over.
        if self.classes[i].queue.is_empty() {
            let lag = self
                .classes
                .iter()
                .enumerate()
                .filter(|(j, c)| *j != i && !c.queue.is_empty())
                .map(|(_, c)| c.r_out - c.xmit as f64)
                .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))))
                .unwrap_or(0.0);
            let c = &mut self.classes[i];
            c.r_out = c.xmit as f64 + lag;
        }
        let c = &mut self.classes[i];
        c.queue.push_back(Packet {
            arrival: now,
            len,
            payload,
        });
        c.backlog_bytes += u64::from(len);
        self.total_packets += 1;
        // accounting (line 7).
        c.a += u64::from(len);
        c.r_in += u64::from(len);
        c.stats.arrivals += 1;
        c.stats.arrival_bytes += u64::from(len);
        // Buffer overflow (lines 10-12). Done before the backlog test of lines 8-9, which then
        // also sees classes that the drops emptied; select_dropped_class does not use rates.
        // One drop per arrival: with a fixed limit the arrival is the one packet over it, and
        // after `set_shared_limit` shrank the buffer the backlog drains down to the new limit
        // instead of losing the whole excess at once.
        if self.overflows(i) {
            let candidates = match self.buffer {
                BufferMode::Shared => self.backlogged(),
                BufferMode::Separate => 1 << i,
            };
            if let Some((victim, broken)) = self.select_dropped_class(candidates, true) {
                self.drop_tail(victim, DropReason::Overflow, broken);
            }
        }
        // not_backlogged_anymore() or now_backlogged() -> reset_rates() (lines 8-9). The set
        // is remembered as it is here, before the drops of lines 13-17: a class those drops
        // empty is "not backlogged anymore" at the next arrival, and gives its rate back then.
        let backlogged = self.backlogged();
        let reset = backlogged != self.last_backlogged;
        if reset {
            self.reset_rates(backlogged);
        }
        self.last_backlogged = backlogged;
        // Lines 13-18, every T arrivals (section 3.3), and at once after a reset: until they
        // run, the reset's shares ignore every minimum rate (delay and rate bounds).
        if reset
            || self
                .busy_arrivals
                .is_multiple_of(u64::from(self.sample_every))
        {
            self.stats.adjustments += 1;
            match self.feasibility {
                Feasibility::Greedy => {
                    self.compute_min_rates(now);
                    if !self.redistribute() {
                        self.drop_for_delay_bounds(now);
                    }
                }
                Feasibility::Drop => {
                    self.drop_while_infeasible(now);
                    self.redistribute();
                }
            }
            self.adjust_rates(now);
            for c in &mut self.classes {
                if c.arc > 0.0 && !c.queue.is_empty() && c.rate < c.arc * (1.0 - 1e-9) {
                    c.stats.rate_bound_violations += 1;
                }
            }
        }
        Ok(())
    }

    /// The next packet JoBS dropped, if any. Call until `None` after every `enqueue`: at most a
    /// buffer's worth waits here, and older ones are discarded (and counted in
    /// [`JobsStats::dropped_unpolled`]).
    pub fn poll_dropped(&mut self) -> Option<Dropped<P>> {
        self.dropped.pop_front()
    }

    /// The class [`dequeue`](Self::dequeue) would serve at `now`, and the length of its head
    /// packet; `None` if nothing is queued.
    pub fn peek(&self, now: Instant) -> Option<(ClassId, u32)> {
        let i = self.select(now)?;
        let len = self.classes[i].queue.front().map_or(0, |p| p.len);
        Some((ClassId(i as u8), len))
    }

    /// The packet [`dequeue`](Self::dequeue) would send at `now`, and its length.
    pub fn peek_payload(&self, now: Instant) -> Option<(&P, u32)> {
        let i = self.select(now)?;
        self.classes[i].queue.front().map(|p| (&p.payload, p.len))
    }

    /// Send the head packet of the backlogged class with the largest `R_out_i - Xmit_i` (ties
    /// to the lower index): the scheduler of section 2.3. `None` only when nothing is queued.
    pub fn dequeue(&mut self, now: Instant) -> Option<Dequeued<P>> {
        let i = self.select(now)?;
        self.advance(now);
        let c = &mut self.classes[i];
        let p = c.queue.pop_front()?;
        self.total_packets -= 1;
        c.backlog_bytes -= u64::from(p.len);
        c.xmit += u64::from(p.len);
        let delay = now.saturating_duration_since(p.arrival);
        c.last_delay = delay;
        c.stats.xmit += 1;
        c.stats.xmit_bytes += u64::from(p.len);
        let delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        c.stats.delay_ns_sum = c.stats.delay_ns_sum.saturating_add(u128::from(delay_ns));
        c.stats.delay_max = c.stats.delay_max.max(delay);
        if c.adc_ns.is_some_and(|d| delay_ns > d) {
            c.stats.delay_bound_violations += 1;
        }
        Some(Dequeued {
            class: ClassId(i as u8),
            len: p.len,
            payload: p.payload,
            delay,
        })
    }

    /// The backlogged classes, one bit each.
    fn backlogged(&self) -> u64 {
        self.classes
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.queue.is_empty())
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    fn overflows(&self, i: usize) -> bool {
        match self.buffer {
            BufferMode::Shared => self.total_packets > u64::from(self.limit_packets),
            BufferMode::Separate => self.classes[i].queue.len() > self.classes[i].limit as usize,
        }
    }

    /// The class with the largest `R_out_i + r_i dt - Xmit_i` at `now`, without changing state.
    fn select(&self, now: Instant) -> Option<usize> {
        let dt = now
            .saturating_duration_since(self.last_update)
            .as_secs_f64();
        let mut best: Option<(usize, f64)> = None;
        for (i, c) in self.classes.iter().enumerate() {
            if c.queue.is_empty() {
                continue;
            }
            let lag = c.r_out + c.rate * dt - c.xmit as f64;
            if best.is_none_or(|(_, b)| lag > b) {
                best = Some((i, lag));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Equation (1): `R_out_i += r_i dt` for every class.
    fn advance(&mut self, now: Instant) {
        if now <= self.last_update {
            return;
        }
        let dt = (now - self.last_update).as_secs_f64();
        for c in &mut self.classes {
            c.r_out += c.rate * dt;
        }
        self.last_update = now;
    }

    /// `reset_all_variables()` (Figure 4 lines 2-3): a new busy period.
    fn new_busy_period(&mut self) {
        self.stats.busy_periods += 1;
        self.busy_arrivals = 0;
        self.last_backlogged = 0;
        for c in &mut self.classes {
            c.a = 0;
            c.r_in = 0;
            c.xmit = 0;
            c.r_out = 0.0;
            c.rate = 0.0;
            c.min_rate = 0.0;
            c.chain_weight = 0.0;
        }
    }

    /// `reset_rates()` (Figure 4 lines 8-9): idle classes get 0, backlogged ones share `C`
    /// equally (`C / n` each), except that inside a delay chain the members' part (`C / n` per
    /// backlogged member) is shared in proportion to their chain weights: the rates
    /// `adjust_rates` gave them relative to each other when last seen backlogged together. A
    /// member with no weight yet counts as average. Without this, every reset would throw
    /// away the proportional rates, and with `sample_every > 1` `adjust_rates` runs too seldom
    /// to build them again before the next reset (section 3.3 expects `T` of 10-100 to work).
    fn reset_rates(&mut self, backlogged: u64) {
        self.stats.rate_resets += 1;
        let n = backlogged.count_ones();
        let share = if n == 0 {
            0.0
        } else {
            self.capacity / f64::from(n)
        };
        let before = self.last_backlogged;
        let in_set = |set: u64, i: usize| set & (1 << i) != 0;
        for chain in &self.delay_chains {
            // The chain weights, from the rates of the members backlogged until now.
            let (k, sum) = chain
                .members
                .iter()
                .filter(|&&(i, _)| in_set(before, i))
                .fold((0u32, 0.0), |(k, s), &(i, _)| {
                    (k + 1, s + self.classes[i].rate)
                });
            let per_mean = if k >= 2 && sum > 0.0 {
                f64::from(k) / sum
            } else {
                0.0
            };
            let (mut k, mut sum) = (0u32, 0.0);
            for &(i, _) in &chain.members {
                let c = &mut self.classes[i];
                if per_mean > 0.0 && in_set(before, i) {
                    c.chain_weight = c.rate * per_mean;
                }
                if in_set(backlogged, i) {
                    k += 1;
                    sum += chain_weight(c);
                }
            }
            // The members' part of C, shared by weight.
            let scale = if k >= 2 {
                share * f64::from(k) / sum
            } else {
                0.0
            };
            for &(i, _) in &chain.members {
                let c = &mut self.classes[i];
                c.rate = match (in_set(backlogged, i), k >= 2) {
                    (false, _) => 0.0,
                    (true, true) => chain_weight(c) * scale,
                    (true, false) => share,
                };
            }
        }
        for (i, c) in self.classes.iter_mut().enumerate() {
            if !in_set(self.delay_chained, i) {
                c.rate = if in_set(backlogged, i) { share } else { 0.0 };
            }
        }
    }

    /// `compute_min_rates()` (section 2.4): for a backlogged class the larger of its rate bound
    /// `f_i` and `B_i / (d_i - D_i)`, or `C` once its delay bound is violated; 0 when idle.
    fn compute_min_rates(&mut self, now: Instant) {
        let capacity = self.capacity;
        for c in &mut self.classes {
            c.min_rate = if c.queue.is_empty() {
                0.0
            } else {
                match c.adc_ns {
                    None => c.arc,
                    Some(d) => {
                        let age = u64::try_from(c.head_age(now).as_nanos()).unwrap_or(u64::MAX);
                        if age >= d {
                            capacity
                        } else {
                            let slack = (d - age) as f64 / 1e9;
                            c.arc.max(c.backlog_bytes as f64 / slack)
                        }
                    }
                }
            };
        }
    }

    /// Step 1 of `greedy_alloc`: move rate from classes above their minimum (the highest index
    /// first) to classes below it (the lowest index first); the total stays the same. Returns
    /// whether every class reached its minimum.
    fn redistribute(&mut self) -> bool {
        let n = self.classes.len();
        let surplus = |c: &Class<P>| c.rate - c.min_rate;
        let mut lo = n;
        let mut hi = 0;
        loop {
            while hi < n && surplus(&self.classes[hi]) >= 0.0 {
                hi += 1;
            }
            while lo > 0 && surplus(&self.classes[lo - 1]) <= 0.0 {
                lo -= 1;
            }
            if hi == n || lo == 0 {
                return hi == n;
            }
            let need = -surplus(&self.classes[hi]);
            let spare = surplus(&self.classes[lo - 1]);
            let moved = need.min(spare);
            self.classes[hi].rate += moved;
            self.classes[lo - 1].rate -= moved;
            if moved >= need {
                // Rounding must not leave a sliver of deficit that loops forever.
                self.classes[hi].rate = self.classes[hi].rate.max(self.classes[hi].min_rate);
            }
            if moved >= spare {
                self.classes[lo - 1].rate = self.classes[lo - 1].min_rate;
            }
        }
    }

    /// Step 2 of `greedy_alloc`: a class still short of the rate its delay bound needs drops
    /// from its tail until `B_i <= r_i (d_i - D_i)`, unless (with [`Relaxation::LossFirst`]) the
    /// drop would break its loss bound.
    fn drop_for_delay_bounds(&mut self, now: Instant) {
        for i in 0..self.classes.len() {
            let c = &self.classes[i];
            let Some(d) = c.adc_ns else { continue };
            if c.queue.is_empty() || c.rate >= c.min_rate {
                continue;
            }
            let age = u64::try_from(c.head_age(now).as_nanos()).unwrap_or(u64::MAX);
            let slack = d.saturating_sub(age) as f64 / 1e9;
            let target = c.rate * slack;
            loop {
                let c = &self.classes[i];
                if c.queue.is_empty() || c.backlog_bytes as f64 <= target {
                    break;
                }
                let broken = c.excess_after_tail_drop() > 0.0;
                if broken && self.relaxation == Relaxation::LossFirst {
                    break;
                }
                self.drop_tail(i, DropReason::DelayBound, broken);
            }
        }
    }

    /// Figure 4 lines 14-17: while the minimum rates exceed `C` and `can_drop()`, drop one
    /// packet from the class `select_dropped_class` names and recompute the minimum rates.
    /// Candidates are the classes whose minimum comes from a delay bound not yet violated:
    /// dropping from any other class leaves the sum unchanged.
    fn drop_while_infeasible(&mut self, now: Instant) {
        loop {
            self.compute_min_rates(now);
            let sum: f64 = self.classes.iter().map(|c| c.min_rate).sum();
            if sum <= self.capacity {
                return;
            }
            let candidates = self
                .classes
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    let age = u64::try_from(c.head_age(now).as_nanos()).unwrap_or(u64::MAX);
                    !c.queue.is_empty() && c.adc_ns.is_some_and(|d| age < d) && c.min_rate > c.arc
                })
                .fold(0u64, |m, (i, _)| m | 1 << i);
            match self.select_dropped_class(candidates, false) {
                Some((victim, broken)) => self.drop_tail(victim, DropReason::DelayBound, broken),
                None => return,
            }
        }
    }

    /// `select_dropped_class()` (section 2.4, 3.2) among the classes in `candidates`. Classes
    /// whose loss bound a tail drop would break are left out; among the rest, first a class
    /// with no loss guarantee at all (the one with most bytes queued), then the class of an
    /// `rlc` chain whose weighted loss `w'_i p_i` is furthest below the chain's mean `p*`, then
    /// a class with only a loss bound, the one with the lowest `p_i / L_i`. Ties go to the
    /// higher index. If every candidate would break its bound: on overflow (`must`) or with
    /// [`Relaxation::DelayFirst`], the class whose bound is least exceeded; otherwise none
    /// (`can_drop()` is false). Returns the class and whether its bound breaks.
    fn select_dropped_class(&self, candidates: u64, must: bool) -> Option<(usize, bool)> {
        // (tier, score): lower is dropped first.
        let mut best: Option<(usize, (u8, f64))> = None;
        let mut least_violated: Option<(usize, f64)> = None;
        for (i, c) in self.classes.iter().enumerate() {
            if candidates & (1 << i) == 0 || c.queue.is_empty() {
                continue;
            }
            let excess = c.excess_after_tail_drop();
            if excess > 0.0 {
                if least_violated.is_none_or(|(_, e)| excess <= e) {
                    least_violated = Some((i, excess));
                }
                continue;
            }
            let key = match (c.loss_weight, c.alc) {
                (None, None) => (0, -(c.backlog_bytes as f64)),
                (Some(w), _) => (1, w * c.loss() - self.mean_weighted_loss(i)),
                (None, Some(l)) => (2, c.loss() / l),
            };
            if best.is_none_or(|(_, b)| key.0 < b.0 || (key.0 == b.0 && key.1 <= b.1)) {
                best = Some((i, key));
            }
        }
        if let Some((i, _)) = best {
            return Some((i, false));
        }
        if must || self.relaxation == Relaxation::DelayFirst {
            return least_violated.map(|(i, _)| (i, true));
        }
        None
    }

    /// `p*`: the mean weighted loss `w'_j p_j` over the classes of the loss chain holding class
    /// `i` that had arrivals in this busy period.
    fn mean_weighted_loss(&self, i: usize) -> f64 {
        let Some(chain) = self
            .loss_chains
            .iter()
            .find(|ch| ch.members.iter().any(|&(j, _)| j == i))
        else {
            return 0.0;
        };
        let (sum, n) = chain
            .members
            .iter()
            .filter(|&&(j, _)| self.classes[j].a > 0)
            .fold((0.0, 0u32), |(s, n), &(j, w)| {
                (s + w * self.classes[j].loss(), n + 1)
            });
        if n == 0 {
            0.0
        } else {
            sum / f64::from(n)
        }
    }

    fn drop_tail(&mut self, i: usize, reason: DropReason, broken: bool) {
        let c = &mut self.classes[i];
        let Some(p) = c.queue.pop_back() else { return };
        self.total_packets -= 1;
        c.backlog_bytes -= u64::from(p.len);
        c.r_in -= u64::from(p.len);
        match reason {
            DropReason::Overflow => c.stats.drops_overflow += 1,
            DropReason::DelayBound => c.stats.drops_delay += 1,
        }
        c.stats.drop_bytes += u64::from(p.len);
        if broken {
            c.stats.loss_bound_violations += 1;
        }
        if self.dropped.len() >= self.dropped_cap {
            self.dropped.pop_front();
            self.stats.dropped_unpolled += 1;
        }
        self.dropped.push_back(Dropped {
            class: ClassId(i as u8),
            len: p.len,
            payload: p.payload,
            reason,
            loss_bound_broken: broken,
        });
    }

    /// `adjust_rates()` (section 2.4, line 18): proportional delay differentiation. In each
    /// `rdc` chain, with `D_i` the age of class `i`'s oldest packet and `w_i = 1 / m_i`, the
    /// error is `e_i = mean_j(w_j D_j) - w_i D_i` over the backlogged members and the
    /// adjustment `delta r_i = -K e_i`: a class whose weighted delay is above the mean gains
    /// rate. `K` is common to the chain, `gain * mean rate / mean weighted delay`; a class that
    /// would fall under its minimum rate gives only down to it, and what the others gain is
    /// scaled to match, so the chain's total rate is unchanged.
    fn adjust_rates(&mut self, now: Instant) {
        for chain in &self.delay_chains {
            let mut x = [0.0f64; MAX_CLASSES];
            let mut members = [0usize; MAX_CLASSES];
            let mut n = 0;
            let mut sum_x = 0.0;
            let mut sum_rate = 0.0;
            for &(i, w) in &chain.members {
                let c = &self.classes[i];
                if c.queue.is_empty() {
                    continue;
                }
                members[n] = i;
                x[n] = w * c.head_age(now).as_secs_f64();
                sum_x += x[n];
                sum_rate += c.rate;
                n += 1;
            }
            if n < 2 || sum_x <= 0.0 || sum_rate <= 0.0 {
                continue;
            }
            let mean = sum_x / n as f64;
            let k = self.gain * (sum_rate / n as f64) / mean;
            // Donors (e_i > 0) first: what they can give, within their minimum rates.
            let mut given = 0.0;
            let mut wanted = 0.0;
            for m in 0..n {
                let e = mean - x[m];
                let c = &mut self.classes[members[m]];
                if e > 0.0 {
                    let give = (k * e).min((c.rate - c.min_rate).max(0.0));
                    c.rate -= give;
                    given += give;
                } else {
                    wanted += -k * e;
                }
            }
            if wanted <= 0.0 {
                continue;
            }
            let scale = given / wanted;
            for m in 0..n {
                let e = mean - x[m];
                if e < 0.0 {
                    self.classes[members[m]].rate += -k * e * scale;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_nanos(v * 1_000_000)
    }

    fn drain<P>(q: &mut Jobs<P>) -> Vec<Dropped<P>> {
        std::iter::from_fn(|| q.poll_dropped()).collect()
    }

    #[test]
    fn table1_chains_and_weights() {
        let cfg = JobsConfig::table1(100_000_000);
        cfg.validate().unwrap();
        let q: Jobs<()> = Jobs::new(&cfg).unwrap();
        // Classes 2-4 (indices 1-3) form one chain: m = 1, 2, 4, so w = 1, 1/2, 1/4 and the
        // weighted delays are equal exactly when D3 = 2 D2 and D4 = 2 D3.
        assert_eq!(q.delay_chains.len(), 1);
        assert_eq!(
            q.delay_chains[0].members,
            vec![(1, 1.0), (2, 0.5), (3, 0.25)]
        );
        assert_eq!(
            q.loss_chains[0].members,
            vec![(1, 1.0), (2, 0.5), (3, 0.25)]
        );
        assert_eq!(q.classes[0].loss_weight, None);
    }

    #[test]
    fn ratios_below_one_and_broken_chains() {
        let mut classes = vec![ClassConfig::default(); 5];
        classes[0].rdc = Some(0.5);
        classes[2].rdc = Some(3.0);
        classes[3].rdc = Some(2.0);
        let chains = chains(&classes, |c| c.rdc);
        assert_eq!(chains.len(), 2);
        assert_eq!(chains[0].members, vec![(0, 1.0), (1, 2.0)]);
        assert_eq!(
            chains[1].members,
            vec![(2, 1.0), (3, 1.0 / 3.0), (4, 1.0 / 6.0)]
        );
    }

    #[test]
    fn validation_names_the_problem() {
        let mut cfg = JobsConfig::table1(100_000_000);
        cfg.classes[3].rdc = Some(2.0);
        assert_eq!(cfg.validate(), Err(ConfigError::RatioOnLast(ClassId(3))));
        let mut cfg = JobsConfig::table1(100_000_000);
        cfg.classes[0].alc = Some(1.5);
        assert!(cfg.validate().unwrap_err().to_string().contains("alc"));
        assert!(JobsConfig::new(1, vec![]).validate().is_err());
        let mut cfg = JobsConfig::table1(1);
        cfg.sample_every = 0;
        assert_eq!(cfg.validate(), Err(ConfigError::ZeroSampling));
    }

    #[test]
    fn first_arrival_starts_a_busy_period_and_is_sent_at_once() {
        let mut q = Jobs::new(&JobsConfig::table1(100_000_000)).unwrap();
        q.enqueue(ms(1), ClassId(3), 1000, 7u32).unwrap();
        assert_eq!(q.stats().busy_periods, 1);
        let d = q.dequeue(ms(1)).unwrap();
        assert_eq!(
            (d.class, d.payload, d.delay),
            (ClassId(3), 7, Duration::ZERO)
        );
        assert!(q.is_empty() && q.dequeue(ms(2)).is_none());
        q.enqueue(ms(3), ClassId(0), 1000, 8).unwrap();
        assert_eq!(q.stats().busy_periods, 2);
        assert_eq!(q.class_status(ClassId(3), ms(3)).arrival_bytes, 0);
    }

    #[test]
    fn reset_rates_shares_capacity_among_backlogged_classes() {
        let mut q = Jobs::new(&JobsConfig::table1(100_000_000)).unwrap();
        q.enqueue(ms(0), ClassId(2), 1000, ()).unwrap();
        q.enqueue(ms(0), ClassId(3), 1000, ()).unwrap();
        // Two backlogged classes of a chain with equal (zero) delays: 50 Mbit/s each.
        let r2 = q.class_status(ClassId(2), ms(0)).service_rate_bps;
        let r3 = q.class_status(ClassId(3), ms(0)).service_rate_bps;
        assert!(
            (r2 - 50e6).abs() < 1.0 && (r3 - 50e6).abs() < 1.0,
            "{r2} {r3}"
        );
        assert_eq!(q.class_status(ClassId(0), ms(0)).service_rate_bps, 0.0);
    }

    #[test]
    fn reset_keeps_a_chains_proportions() {
        // Classes 1 and 2 a delay chain (ratio 2), class 3 on its own, on 90 Mbit/s.
        let chained = ClassConfig {
            rdc: Some(2.0),
            ..ClassConfig::default()
        };
        let cfg = JobsConfig::new(
            90_000_000,
            vec![chained, ClassConfig::default(), ClassConfig::default()],
        );
        let mut q: Jobs<()> = Jobs::new(&cfg).unwrap();
        let mbit = |q: &Jobs<()>| -> Vec<f64> {
            q.classes
                .iter()
                .map(|c| (c.rate * 8.0).round() / 1e6)
                .collect()
        };
        // adjust_rates had given the chain 60 and 30 Mbit/s.
        q.classes[0].rate = 60e6 / 8.0;
        q.classes[1].rate = 30e6 / 8.0;
        q.last_backlogged = 0b011;
        let reset = |q: &mut Jobs<()>, set| {
            q.reset_rates(set);
            q.last_backlogged = set;
            mbit(q)
        };
        // Class 3 comes: it gets C / 3, and the chain shares the rest 2 : 1.
        assert_eq!(reset(&mut q, 0b111), [40.0, 20.0, 30.0]);
        // Class 2 leaves: class 1 is alone in its chain, an equal share.
        assert_eq!(reset(&mut q, 0b101), [45.0, 0.0, 45.0]);
        // Class 2 comes back: 2 : 1 again, not the equal shares of a plain reset.
        assert_eq!(reset(&mut q, 0b111), [40.0, 20.0, 30.0]);
        // A new busy period forgets the proportions.
        q.new_busy_period();
        assert_eq!(reset(&mut q, 0b011), [45.0, 45.0, 0.0]);
    }

    #[test]
    fn minimum_rates_hold_at_once_after_a_reset_when_sampling() {
        let mut cfg = JobsConfig::table1(100_000_000);
        cfg.sample_every = 100;
        let mut q = Jobs::new(&cfg).unwrap();
        for c in [3, 2, 0, 1] {
            q.enqueue(ms(0), ClassId(c), 1000, ()).unwrap();
        }
        // Four classes share 25 Mbit/s each after the reset; class 2 (index 1) has its
        // 35 Mbit/s at once, not 100 arrivals later.
        let r = q.class_status(ClassId(1), ms(0)).service_rate_bps;
        assert!(r >= 35e6 - 1.0, "{r}");
        assert_eq!(q.stats().adjustments, 4);
        // With no change in the set, only every 100th arrival is sampled.
        for _ in 0..95 {
            q.enqueue(ms(0), ClassId(3), 1000, ()).unwrap();
        }
        assert_eq!(q.stats().adjustments, 4);
        q.enqueue(ms(0), ClassId(3), 1000, ()).unwrap();
        assert_eq!(q.stats().adjustments, 5);
    }

    #[test]
    fn sampled_gain_compounds_the_gain_per_arrival() {
        assert_eq!(sampled_gain(0.25, 1), 0.25);
        assert!((sampled_gain(0.25, 10) - (1.0 - 0.75f64.powi(10))).abs() < 1e-12);
        assert_eq!(sampled_gain(1.0, 7), 1.0);
        assert!(sampled_gain(0.01, u32::MAX) <= 1.0);
    }

    #[test]
    fn rate_bound_is_kept_by_greedy_reallocation() {
        let mut q = Jobs::new(&JobsConfig::table1(100_000_000)).unwrap();
        for c in 0..4u8 {
            q.enqueue(ms(0), ClassId(c), 1000, ()).unwrap();
        }
        // Class 2 (index 1) needs 35 Mbit/s: it takes it from the lowest class with spare.
        let r = q.class_status(ClassId(1), ms(0)).service_rate_bps;
        assert!(r >= 35e6 - 1.0, "class 2 has {r}");
        let total: f64 = (0..4u8)
            .map(|c| q.class_status(ClassId(c), ms(0)).service_rate_bps)
            .sum();
        assert!((total - 100e6).abs() < 10.0, "{total}");
        assert_eq!(q.class_stats(ClassId(1)).rate_bound_violations, 0);
    }

    #[test]
    fn rate_bounds_beyond_capacity_are_counted() {
        // 60 + 60 Mbit/s of rate bounds and a best-effort class on 100 Mbit/s: greedy_alloc
        // serves the higher class first and the lower one gives way.
        let bound = ClassConfig {
            arc_bps: Some(60_000_000),
            ..ClassConfig::default()
        };
        let classes = vec![bound.clone(), bound, ClassConfig::default()];
        let mut q = Jobs::new(&JobsConfig::new(100_000_000, classes)).unwrap();
        for c in [2, 0, 1, 1] {
            q.enqueue(ms(0), ClassId(c), 1000, ()).unwrap();
        }
        let rate = |c| q.class_status(ClassId(c), ms(0)).service_rate_bps / 1e6;
        let rates = (rate(0), rate(1), rate(2));
        assert!(
            (rates.0 - 60.0).abs() < 1e-6 && (rates.1 - 40.0).abs() < 1e-6 && rates.2 < 1e-6,
            "{rates:?}"
        );
        let violations = |c| q.class_stats(ClassId(c)).rate_bound_violations;
        assert_eq!((violations(0), violations(1), violations(2)), (0, 2, 0));
    }

    #[test]
    fn dequeue_serves_the_class_furthest_behind() {
        let mut q = Jobs::new(&JobsConfig::new(
            8_000_000,
            vec![ClassConfig::default(), ClassConfig::default()],
        ))
        .unwrap();
        for k in 0..4 {
            q.enqueue(ms(0), ClassId(0), 1000, (0, k)).unwrap();
            q.enqueue(ms(0), ClassId(1), 1000, (1, k)).unwrap();
        }
        // Equal rates: the classes alternate, ties to the lower index.
        let order: Vec<u8> = (0..8).map(|k| q.dequeue(ms(k)).unwrap().class.0).collect();
        assert_eq!(order, vec![0, 1, 0, 1, 0, 1, 0, 1]);
    }

    /// Offer `arrivals` packets of 1000 bytes, classes drawn from `pattern` in turn, one every
    /// 100 us, onto a link that sends one every `tx_us`; returns the drops per class.
    fn overload(q: &mut Jobs<()>, pattern: &[u8], arrivals: u64, tx_us: u64) -> Vec<Dropped<()>> {
        let mut drops = Vec::new();
        let mut next_tx = 0;
        for k in 0..arrivals {
            let t = k * 100_000;
            while next_tx <= t {
                q.dequeue(Instant::from_nanos(next_tx));
                next_tx += tx_us * 1000;
            }
            let class = ClassId(pattern[(k % pattern.len() as u64) as usize]);
            q.enqueue(Instant::from_nanos(t), class, 1000, ()).unwrap();
            drops.extend(drain(q));
        }
        drops
    }

    #[test]
    fn overflow_drops_follow_proportional_loss() {
        // Classes 2-4 of Table 1 offer the same load, 25% more than the link carries.
        let mut cfg = JobsConfig::table1(64_000_000);
        cfg.limit_packets = 20;
        let mut q = Jobs::new(&cfg).unwrap();
        let mut drops = [0u32; 4];
        for d in overload(&mut q, &[1, 2, 3], 30_000, 125) {
            assert_eq!(d.reason, DropReason::Overflow);
            drops[d.class.index()] += 1;
        }
        // Loss ratio 2 between neighbours.
        let r32 = f64::from(drops[2]) / f64::from(drops[1]);
        let r43 = f64::from(drops[3]) / f64::from(drops[2]);
        assert!((1.9..2.1).contains(&r32), "{drops:?}");
        assert!((1.9..2.1).contains(&r43), "{drops:?}");
        assert_eq!(drops[0], 0);
    }

    #[test]
    fn loss_bound_protects_class1_on_overflow() {
        // Class 1 is a quarter of a load twice the link rate, into a 10-packet buffer.
        let mut cfg = JobsConfig::table1(40_000_000);
        cfg.limit_packets = 10;
        let mut q = Jobs::new(&cfg).unwrap();
        let drops = overload(&mut q, &[0, 3, 3, 3], 10_000, 200);
        assert!(drops.len() > 4000);
        assert!(drops.iter().all(|d| !d.loss_bound_broken));
        let s = q.class_status(ClassId(0), Instant::from_nanos(1_000_000_000));
        assert!(s.loss_rate <= 0.01, "{}", s.loss_rate);
    }

    #[test]
    fn delay_bound_drops_respect_loss_first() {
        // One class with a 1 ms delay bound on an 8 Mbit/s link (1000 bytes/ms): 10 packets at
        // once need 10 ms. With a 10% loss bound only 1 of them may go.
        let class = ClassConfig {
            adc: Some(Duration::from_millis(1)),
            alc: Some(0.1),
            ..ClassConfig::default()
        };
        let mut q = Jobs::new(&JobsConfig::new(8_000_000, vec![class.clone()])).unwrap();
        for _ in 0..10 {
            q.enqueue(ms(0), ClassId(0), 1000, ()).unwrap();
        }
        let drops = drain(&mut q);
        assert_eq!(drops.len(), 1);
        assert!(drops.iter().all(|d| d.reason == DropReason::DelayBound));
        assert!(drops.iter().all(|d| !d.loss_bound_broken));
        // Delay first: the delay bound wins and the loss bound breaks.
        let mut cfg = JobsConfig::new(8_000_000, vec![class]);
        cfg.relaxation = Relaxation::DelayFirst;
        let mut q = Jobs::new(&cfg).unwrap();
        for _ in 0..10 {
            q.enqueue(ms(0), ClassId(0), 1000, ()).unwrap();
        }
        let drops = drain(&mut q);
        assert_eq!(q.len(), 1, "only what 1 ms at 8 Mbit/s carries stays");
        assert!(drops.iter().any(|d| d.loss_bound_broken));
    }

    #[test]
    fn drop_feasibility_mode_also_meets_the_delay_bound() {
        let class = ClassConfig {
            adc: Some(Duration::from_millis(2)),
            ..ClassConfig::default()
        };
        let mut cfg = JobsConfig::new(8_000_000, vec![class, ClassConfig::default()]);
        cfg.feasibility = Feasibility::Drop;
        let mut q = Jobs::new(&cfg).unwrap();
        for _ in 0..10 {
            q.enqueue(ms(0), ClassId(0), 1000, ()).unwrap();
            q.enqueue(ms(0), ClassId(1), 1000, ()).unwrap();
        }
        let drops = drain(&mut q);
        assert!(drops.iter().all(|d| d.class == ClassId(0)));
        assert_eq!(q.class_status(ClassId(0), ms(0)).backlog, 2);
    }

    #[test]
    fn proportional_delays_under_load() {
        // Rates adjusted on every arrival, and on every 10th and 100th (section 3.3).
        for t in [1, 10, 100] {
            proportional_delays_under_load_sampled(t);
        }
    }

    fn proportional_delays_under_load_sampled(sample_every: u32) {
        // Three classes with ratio 2, equal greedy arrivals, link at 80 Mbit/s; arrivals at
        // 110% of it. Mean delays should settle near 1 : 2 : 4.
        let mut cfg = JobsConfig::new(
            80_000_000,
            vec![
                ClassConfig {
                    rdc: Some(2.0),
                    ..ClassConfig::default()
                },
                ClassConfig {
                    rdc: Some(2.0),
                    ..ClassConfig::default()
                },
                ClassConfig::default(),
            ],
        );
        cfg.limit_packets = 300;
        cfg.sample_every = sample_every;
        let mut q = Jobs::new(&cfg).unwrap();
        let tx = 100_000u64; // 1000 bytes at 80 Mbit/s, ns
        let mut t = 0u64;
        let mut next_tx = 0u64;
        let mut k = 0u64;
        let mut sum = [0f64; 3];
        let mut cnt = [0f64; 3];
        while t < 2_000_000_000 {
            q.enqueue(Instant::from_nanos(t), ClassId((k % 3) as u8), 1000, ())
                .unwrap();
            drain(&mut q);
            k += 1;
            t += tx * 10 / 11;
            while next_tx <= t {
                if let Some(d) = q.dequeue(Instant::from_nanos(next_tx)) {
                    if next_tx > 500_000_000 {
                        sum[d.class.index()] += d.delay.as_secs_f64();
                        cnt[d.class.index()] += 1.0;
                    }
                }
                next_tx += tx;
            }
        }
        let mean: Vec<f64> = (0..3).map(|i| sum[i] / cnt[i]).collect();
        let (r1, r2) = (mean[1] / mean[0], mean[2] / mean[1]);
        assert!((1.6..2.5).contains(&r1), "T = {sample_every}: {mean:?}");
        assert!((1.6..2.5).contains(&r2), "T = {sample_every}: {mean:?}");
    }

    #[test]
    fn a_class_emptied_by_delay_drops_gives_its_rate_back() {
        // Two classes with a 1 ms delay bound and a best-effort one on 80 Mbit/s.
        let bounded = ClassConfig {
            adc: Some(Duration::from_millis(1)),
            ..ClassConfig::default()
        };
        let cfg = JobsConfig::new(
            80_000_000,
            vec![bounded.clone(), bounded, ClassConfig::default()],
        );
        let mut q = Jobs::new(&cfg).unwrap();
        for c in 0..3 {
            q.enqueue(ms(0), ClassId(c), 1000, c).unwrap();
        }
        assert!(drain(&mut q).is_empty());
        // At 2 ms both bounded heads are late: each needs all of C, class 2 gives them its
        // share, and they still drop everything they hold.
        q.enqueue(ms(2), ClassId(2), 1000, 2).unwrap();
        let drops: Vec<(ClassId, DropReason)> =
            drain(&mut q).iter().map(|d| (d.class, d.reason)).collect();
        assert_eq!(
            drops,
            [
                (ClassId(0), DropReason::DelayBound),
                (ClassId(1), DropReason::DelayBound)
            ]
        );
        // The next arrival sees that classes 0 and 1 are not backlogged anymore: class 2 gets
        // the whole link, not the nothing it was left with.
        q.enqueue(ms(2), ClassId(2), 1000, 2).unwrap();
        let rate = |c| q.class_status(ClassId(c), ms(2)).service_rate_bps;
        assert_eq!((rate(0), rate(1), rate(2)), (0.0, 0.0, 80e6));
    }

    #[test]
    fn separate_buffers_drop_only_from_the_arriving_class() {
        // Table 1 with separate buffers of 3 packets, class 4's of 1.
        let mut cfg = JobsConfig::table1(100_000_000);
        cfg.buffer = BufferMode::Separate;
        cfg.limit_packets = 3;
        cfg.classes[3].limit_packets = Some(1);
        let mut q = Jobs::new(&cfg).unwrap();
        for _ in 0..3 {
            q.enqueue(ms(0), ClassId(2), 100, ()).unwrap();
        }
        q.enqueue(ms(0), ClassId(3), 100, ()).unwrap();
        assert!(drain(&mut q).is_empty());
        // Class 4 is full: its next packet is dropped, though class 3 has more queued.
        q.enqueue(ms(0), ClassId(3), 100, ()).unwrap();
        let d = drain(&mut q);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].class, d[0].reason),
            (ClassId(3), DropReason::Overflow)
        );
        // Class 1 may hold 3 packets while the others are full; its fourth must go, even
        // though that breaks its 1% loss bound: no other class's buffer overflowed.
        for _ in 0..3 {
            q.enqueue(ms(0), ClassId(0), 100, ()).unwrap();
        }
        assert!(drain(&mut q).is_empty());
        q.enqueue(ms(0), ClassId(0), 100, ()).unwrap();
        let d = drain(&mut q);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].class, d[0].loss_bound_broken), (ClassId(0), true));
        let backlog = |c| q.class_status(ClassId(c), ms(0)).backlog;
        assert_eq!(
            (backlog(0), backlog(1), backlog(2), backlog(3)),
            (3, 0, 3, 1)
        );
        // The same arrivals into one shared buffer of 7 packets: class 1's fourth packet
        // pushes one out of class 3 or 4 (the loss chain), never out of class 1.
        let mut cfg = JobsConfig::table1(100_000_000);
        cfg.limit_packets = 7;
        let mut q = Jobs::new(&cfg).unwrap();
        for c in [2, 2, 2, 3, 0, 0, 0, 0] {
            q.enqueue(ms(0), ClassId(c), 100, ()).unwrap();
        }
        let d = drain(&mut q);
        assert_eq!(d.len(), 1);
        assert!(d[0].class.0 >= 2 && !d[0].loss_bound_broken, "{d:?}");
        assert_eq!(q.class_status(ClassId(0), ms(0)).backlog, 4);
    }

    #[test]
    fn capacity_change_scales_rates() {
        let mut q = Jobs::new(&JobsConfig::table1(100_000_000)).unwrap();
        q.enqueue(ms(0), ClassId(2), 1000, ()).unwrap();
        q.enqueue(ms(0), ClassId(3), 1000, ()).unwrap();
        q.set_capacity(ms(1), 50_000_000);
        let total: f64 = (0..4u8)
            .map(|c| q.class_status(ClassId(c), ms(1)).service_rate_bps)
            .sum();
        assert!((total - 50e6).abs() < 1.0, "{total}");
        assert_eq!(q.capacity_bps(), 50_000_000);
    }

    #[test]
    fn unknown_class_hands_the_packet_back() {
        let mut q = Jobs::new(&JobsConfig::table1(1)).unwrap();
        assert_eq!(
            q.enqueue(ms(0), ClassId(9), 10, "p"),
            Err(EnqueueError::UnknownClass("p"))
        );
    }
}

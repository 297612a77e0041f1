//! Causal fair-queuing schedulers used for striping (stripe paper sections 3.1-3.7).
//!
//! A causal scheduler is the pair of functions of section 3.1: `f(s)` selects the next channel
//! from the current state alone, and `g(s, p)` updates the state after packet `p` went to that
//! channel. The sender uses them to stripe (section 3.2); the receiver runs the very same
//! functions to know which channel the next packet arrives on (logical reception, section 4).
//! Because the choice never depends on the packet about to be sent, the receiver can make it
//! before the packet is there.
//!
//! The built-ins are [`Srr`] (Surplus Round Robin), [`Rfq`] (Randomized Fair Queuing), [`Grr`]
//! (generalised round robin in packet units) and [`Rr`] (plain round robin); [`Scheduler`] is
//! the enum that dispatches over them statically.

mod edpf;
mod grr;
mod rfq;
mod rr;
mod srr;

pub use edpf::Edpf;
pub use grr::Grr;
pub use rfq::Rfq;
pub use rr::Rr;
pub use srr::Srr;

use crate::path::{PacketNumber, PathId, MAX_PATHS};
use crate::time::Duration;
use core::fmt;
use core::str::FromStr;

/// The largest path rate a config may give (10 Tbit/s); it bounds all quantum and weight
/// arithmetic.
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;

/// The causal scheduler trait: the paper's `f(s)` and `g(s, p)`, plus the round structure that
/// markers (section 5) need.
///
/// # Call order
/// `select` may be called any number of times; it never changes the state. After a packet of
/// `len` bytes went to (or, at the receiver, was logically received from) the selected path,
/// call `update(len)` exactly once.
pub trait CausalScheduler {
    /// Number of paths.
    fn paths(&self) -> usize;

    /// `f(s)`: the path the next packet goes to.
    fn select(&self) -> PathId;

    /// `g(s, p)`: account a packet of `len` bytes on the selected path. Returns `true` when this
    /// packet ended the selected path's round (the pointer moved on).
    fn update(&mut self, len: u32) -> bool;

    /// The implicit number `(R, DC)` of the next packet on `path`, or `None` for schedulers
    /// without a round structure (RFQ), which therefore cannot be resynchronised by markers.
    fn number(&self, path: PathId) -> Option<PacketNumber>;

    /// `AdvanceReceiverPointer` of Appendix A without a packet (`Skipline`): leave the selected
    /// path for this round, incrementing its round number but not its deficit counter.
    fn skip(&mut self);

    /// `ProcessMarker` of Appendix A: adopt the deficit counter a marker carried for `path`.
    /// Round numbers are compared by the caller (the receiver keeps `R_save`). Ignored by
    /// schedulers without rounds.
    fn set_deficit(&mut self, path: PathId, deficit: i64);

    /// Set `path`'s round number outright (a reset of that path after a marker far out of
    /// step). Ignored by schedulers without rounds.
    fn set_round(&mut self, path: PathId, round: u64);

    /// Quantum of `path` in the scheduler's units, if it has one.
    fn quantum(&self, path: PathId) -> Option<i64>;

    /// Take `path` out of the rotation (`false`, e.g. it went dark) or put it back (`true`).
    /// Both ends must apply the same changes for logical reception to stay in step; markers
    /// realign a path's round when it returns.
    fn set_active(&mut self, path: PathId, active: bool);

    /// Whether `path` is in the rotation (false for a path that does not exist).
    fn is_active(&self, path: PathId) -> bool;

    /// The cost of a packet of `len` bytes in the scheduler's units (bytes for SRR, one packet
    /// for GRR and RR).
    fn cost(&self, len: u32) -> i64;
}

/// Which built-in scheduler to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// Surplus Round Robin (section 3.5-3.6).
    Srr,
    /// Randomized Fair Queuing (section 3.7).
    Rfq,
    /// Generalised round robin: packet counts in the closest integer ratio of the rates
    /// (section 6.2).
    Grr,
    /// Plain round robin.
    Rr,
    /// Earliest Delivery Path First (BAG paper section III-B). Not causal: needs resequencing
    /// by sequence number (or none), never `logical`.
    Edpf,
    /// PET (BAG paper section V-A): EDPF on packet-pair estimates of the paths' rates, reported
    /// by the receiver's SIG-ACKs ([`crate::pet::Pet`]), so no rate need be configured. The
    /// built scheduler is an [`Edpf`]; the [`crate::striper::Striper`] runs the `Pet` in front
    /// of it. Not causal: mode `sequence` only.
    Pet,
}

impl SchedulerKind {
    /// All built-ins, in the order experiments report them.
    pub const ALL: [SchedulerKind; 4] = [
        SchedulerKind::Srr,
        SchedulerKind::Grr,
        SchedulerKind::Rr,
        SchedulerKind::Rfq,
    ];

    /// The name used in configs and result files.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::Srr => "srr",
            SchedulerKind::Rfq => "rfq",
            SchedulerKind::Grr => "grr",
            SchedulerKind::Rr => "rr",
            SchedulerKind::Edpf => "edpf",
            SchedulerKind::Pet => "pet",
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SchedulerKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "srr" => Ok(SchedulerKind::Srr),
            "rfq" => Ok(SchedulerKind::Rfq),
            "grr" => Ok(SchedulerKind::Grr),
            "rr" => Ok(SchedulerKind::Rr),
            "edpf" => Ok(SchedulerKind::Edpf),
            "pet" => Ok(SchedulerKind::Pet),
            // The BAG paper's name for weighted round robin in packet units.
            "wrr" => Ok(SchedulerKind::Grr),
            other => Err(ConfigError::UnknownScheduler(other.to_owned())),
        }
    }
}

/// How SRR quanta are derived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantumRule {
    /// Proportional to the configured rates, the slowest path getting exactly `max_packet`
    /// (the smallest quantum that satisfies `q_i >= Max`).
    FromRate,
    /// Section 7.2: `quantum = bandwidth (bytes/s) x fragment delay`. Every quantum must still
    /// be at least `max_packet`.
    FragmentDelay(Duration),
    /// Quanta given explicitly, in bytes.
    Explicit(Vec<u32>),
}

/// Everything needed to build a scheduler; both ends must use equal configs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The algorithm.
    pub kind: SchedulerKind,
    /// Configured rate of each path in bit/s, in path order.
    pub rates_bps: Vec<u64>,
    /// How SRR quanta are derived from the rates.
    pub quantum: QuantumRule,
    /// The largest packet (payload bytes) the bond will carry.
    pub max_packet: u32,
    /// Seed of RFQ's shared pseudorandom sequence.
    pub seed: u64,
    /// Bytes each packet costs on a path beyond its payload (EDPF's `L` includes them).
    pub overhead_bytes: u32,
}

impl SchedulerConfig {
    /// A config with quanta derived from rates and a 1500-byte largest packet.
    pub fn new(kind: SchedulerKind, rates_bps: Vec<u64>) -> Self {
        SchedulerConfig {
            kind,
            rates_bps,
            quantum: QuantumRule::FromRate,
            max_packet: 1500,
            seed: 0,
            overhead_bytes: 0,
        }
    }

    /// SRR quanta in bytes for this config.
    pub fn quanta(&self) -> Result<Vec<u32>, ConfigError> {
        self.check_paths()?;
        let max = self.max_packet;
        let quanta: Vec<u32> = match &self.quantum {
            QuantumRule::FromRate => {
                let min = *self.rates_bps.iter().min().expect("checked non-empty");
                self.rates_bps
                    .iter()
                    .map(|&r| {
                        let q = (u128::from(max) * u128::from(r)).div_ceil(u128::from(min));
                        u32::try_from(q).unwrap_or(u32::MAX)
                    })
                    .collect()
            }
            QuantumRule::FragmentDelay(d) => self
                .rates_bps
                .iter()
                .map(|&r| {
                    let q = u128::from(r) * d.as_nanos() / 8 / 1_000_000_000;
                    u32::try_from(q).unwrap_or(u32::MAX)
                })
                .collect(),
            QuantumRule::Explicit(q) => {
                if q.len() != self.rates_bps.len() {
                    return Err(ConfigError::QuantumCount {
                        quanta: q.len(),
                        paths: self.rates_bps.len(),
                    });
                }
                q.clone()
            }
        };
        for (i, &q) in quanta.iter().enumerate() {
            if q < max {
                return Err(ConfigError::QuantumTooSmall {
                    path: i,
                    quantum: q,
                    max_packet: max,
                });
            }
        }
        Ok(quanta)
    }

    fn check_paths(&self) -> Result<(), ConfigError> {
        if self.rates_bps.is_empty() || self.rates_bps.len() > MAX_PATHS {
            return Err(ConfigError::PathCount(self.rates_bps.len()));
        }
        if let Some(i) = self.rates_bps.iter().position(|&r| r == 0) {
            return Err(ConfigError::ZeroRate(i));
        }
        if let Some(i) = self.rates_bps.iter().position(|&r| r > MAX_RATE_BPS) {
            return Err(ConfigError::RateTooHigh(i));
        }
        if self.max_packet == 0 {
            return Err(ConfigError::ZeroMaxPacket);
        }
        Ok(())
    }

    /// Build the scheduler.
    pub fn build(&self) -> Result<Scheduler, ConfigError> {
        self.check_paths()?;
        Ok(match self.kind {
            SchedulerKind::Srr => Scheduler::Srr(Srr::new(&self.quanta()?)),
            SchedulerKind::Rfq => Scheduler::Rfq(Rfq::new(&self.rates_bps, self.seed)),
            SchedulerKind::Grr => Scheduler::Grr(Grr::from_rates(&self.rates_bps)),
            SchedulerKind::Rr => Scheduler::Rr(Rr::new(self.rates_bps.len())),
            SchedulerKind::Edpf | SchedulerKind::Pet => {
                Scheduler::Edpf(Edpf::new(&self.rates_bps, self.overhead_bytes))
            }
        })
    }
}

/// A scheduler config that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Unknown scheduler name.
    #[error("unknown scheduler `{0}`: use one of srr, rfq, grr (or wrr), rr, edpf, pet")]
    UnknownScheduler(String),
    /// No paths, or more than [`MAX_PATHS`].
    #[error("{0} paths configured: a bond needs between 1 and 64 paths")]
    PathCount(usize),
    /// A path with a zero rate.
    #[error("path {0} has a rate of 0 bit/s: give every path its rate")]
    ZeroRate(usize),
    /// A scheduler that is not causal with logical reception, which must simulate it.
    #[error("scheduler `{0}` is not causal (it looks at the packet and the clock), so the receiver cannot simulate it: use resequence = \"sequence\" (or \"none\") with it")]
    NotCausal(&'static str),
    /// A path rate above [`MAX_RATE_BPS`].
    #[error("path {0} has a rate above 10 Tbit/s: give its real rate")]
    RateTooHigh(usize),
    /// `max_packet` of zero.
    #[error("max_packet is 0: set it to the largest payload the bond carries (e.g. 1500)")]
    ZeroMaxPacket,
    /// A quantum below the largest packet (violates `q_i >= Max`, section 5).
    #[error(
        "quantum of path {path} is {quantum} bytes, below the largest packet ({max_packet}): \
         SRR needs every quantum >= the largest packet; raise the rate, the fragment delay or \
         the quantum"
    )]
    QuantumTooSmall {
        /// Path index.
        path: usize,
        /// Its quantum.
        quantum: u32,
        /// The largest packet.
        max_packet: u32,
    },
    /// Explicit quanta do not match the path count.
    #[error("{quanta} quanta given for {paths} paths: give one quantum per path")]
    QuantumCount {
        /// Quanta given.
        quanta: usize,
        /// Paths configured.
        paths: usize,
    },
    /// Settings that make no valid bond (a path policy, the largest packet, ...).
    #[error("{0}")]
    Invalid(&'static str),
}

/// Static dispatch over the built-in schedulers.
#[derive(Clone, Debug)]
pub enum Scheduler {
    /// Surplus Round Robin.
    Srr(Srr),
    /// Randomized Fair Queuing.
    Rfq(Rfq),
    /// Generalised round robin.
    Grr(Grr),
    /// Round robin.
    Rr(Rr),
    /// Earliest Delivery Path First.
    Edpf(Edpf),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Scheduler::Srr($s) => $e,
            Scheduler::Rfq($s) => $e,
            Scheduler::Grr($s) => $e,
            Scheduler::Rr($s) => $e,
            Scheduler::Edpf($s) => $e,
        }
    };
}

impl Scheduler {
    /// Which algorithm this is.
    pub fn kind(&self) -> SchedulerKind {
        match self {
            Scheduler::Srr(_) => SchedulerKind::Srr,
            Scheduler::Rfq(_) => SchedulerKind::Rfq,
            Scheduler::Grr(_) => SchedulerKind::Grr,
            Scheduler::Rr(_) => SchedulerKind::Rr,
            Scheduler::Edpf(_) => SchedulerKind::Edpf,
        }
    }
}

impl CausalScheduler for Scheduler {
    #[inline]
    fn paths(&self) -> usize {
        dispatch!(self, s => s.paths())
    }
    #[inline]
    fn select(&self) -> PathId {
        dispatch!(self, s => s.select())
    }
    #[inline]
    fn update(&mut self, len: u32) -> bool {
        dispatch!(self, s => s.update(len))
    }
    #[inline]
    fn number(&self, path: PathId) -> Option<PacketNumber> {
        dispatch!(self, s => s.number(path))
    }
    #[inline]
    fn skip(&mut self) {
        dispatch!(self, s => s.skip())
    }
    #[inline]
    fn set_deficit(&mut self, path: PathId, deficit: i64) {
        dispatch!(self, s => s.set_deficit(path, deficit))
    }
    fn set_round(&mut self, path: PathId, round: u64) {
        dispatch!(self, s => s.set_round(path, round))
    }
    #[inline]
    fn quantum(&self, path: PathId) -> Option<i64> {
        dispatch!(self, s => s.quantum(path))
    }
    #[inline]
    fn cost(&self, len: u32) -> i64 {
        dispatch!(self, s => s.cost(len))
    }
    fn set_active(&mut self, path: PathId, active: bool) {
        dispatch!(self, s => s.set_active(path, active))
    }
    fn is_active(&self, path: PathId) -> bool {
        dispatch!(self, s => s.is_active(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_from_rate_give_slowest_the_max_packet() {
        let c = SchedulerConfig::new(SchedulerKind::Srr, vec![10_000_000, 25_000_000]);
        assert_eq!(c.quanta().unwrap(), vec![1500, 3750]);
    }

    #[test]
    fn quanta_from_fragment_delay() {
        // Section 7.2: quantum = bandwidth (bytes) x fragment delay.
        let mut c = SchedulerConfig::new(SchedulerKind::Srr, vec![8_000_000, 16_000_000]);
        c.quantum = QuantumRule::FragmentDelay(Duration::from_millis(2));
        assert_eq!(c.quanta().unwrap(), vec![2000, 4000]);
        c.quantum = QuantumRule::FragmentDelay(Duration::from_micros(30));
        assert!(matches!(
            c.quanta(),
            Err(ConfigError::QuantumTooSmall { path: 0, .. })
        ));
    }

    #[test]
    fn bad_configs_are_rejected() {
        assert!(matches!(
            SchedulerConfig::new(SchedulerKind::Srr, vec![]).build(),
            Err(ConfigError::PathCount(0))
        ));
        assert!(matches!(
            SchedulerConfig::new(SchedulerKind::Rr, vec![1, 0]).build(),
            Err(ConfigError::ZeroRate(1))
        ));
        assert!(matches!(
            SchedulerConfig::new(SchedulerKind::Rfq, vec![1, u64::MAX]).build(),
            Err(ConfigError::RateTooHigh(1))
        ));
        assert!("fastest".parse::<SchedulerKind>().is_err());
        // The BAG paper's WRR is GRR.
        assert_eq!("wrr".parse::<SchedulerKind>(), Ok(SchedulerKind::Grr));
        for k in SchedulerKind::ALL
            .into_iter()
            .chain([SchedulerKind::Edpf, SchedulerKind::Pet])
        {
            assert_eq!(k.name().parse::<SchedulerKind>().unwrap(), k);
        }
    }
}

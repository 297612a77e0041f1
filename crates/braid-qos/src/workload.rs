//! The QoSbox paper's overhead experiment (section 4.4): its four constraint sets, and a
//! heavily loaded link to time `enqueue` and `dequeue` on. Used by the criterion benchmarks
//! (`benches/jobs.rs`) and by `braid bench jobs`; the timing is theirs, not this module's.
//!
//! Sets, on a 100 Mbit/s link with a shared 200-packet buffer:
//! 1. Table 1: class 1 a delay bound of 8 ms and a loss bound of 1%; class 2 a 35 Mbit/s
//!    minimum rate; delay and loss ratio 2 between neighbours from class 2 to the last class.
//! 2. Set 1 without the absolute bounds: proportional differentiation only.
//! 3. Set 1 without the proportional differentiation: absolute bounds only (Table 4 of the
//!    paper shows `greedy_alloc` but no `adjust_rates` for set 3).
//! 4. No differentiation at all.
//!
//! With `Q` classes, the chain runs from class 2 to class `Q`; with 2 classes there is no
//! proportional differentiation (as in the paper's Table 5).

use crate::jobs::{ClassConfig, ConfigError, Jobs, JobsConfig};
use crate::ClassId;
use braid_proto::time::{Duration, Instant};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Link rate of the workload, bit/s.
pub const CAPACITY_BPS: u64 = 100_000_000;

/// Arrivals per [`Workload::enqueue_batch`] for every [`DEQUEUE_BATCH`] departures: the link is
/// offered 17/16 of what it carries, so the buffer stays full and about one arrival in 17 is
/// dropped.
pub const ENQUEUE_BATCH: usize = 17;

/// Departures per [`Workload::dequeue_batch`].
pub const DEQUEUE_BATCH: usize = 16;

/// The configuration of constraint set `set` (1-4) with `classes` classes, or `None` if `set`
/// is not 1-4 or `classes` is 0.
pub fn constraint_set(classes: usize, set: u8) -> Option<JobsConfig> {
    if !(1..=4).contains(&set) || classes == 0 {
        return None;
    }
    let absolute = matches!(set, 1 | 3);
    let proportional = matches!(set, 1 | 2);
    let configs = (0..classes)
        .map(|i| {
            let mut c = ClassConfig::default();
            if absolute && i == 0 {
                c.adc = Some(Duration::from_millis(8));
                c.alc = Some(0.01);
            }
            if absolute && i == 1 {
                c.arc_bps = Some(35_000_000);
            }
            if proportional && i >= 1 && i + 1 < classes {
                c.rdc = Some(2.0);
                c.rlc = Some(2.0);
            }
            c
        })
        .collect();
    Some(JobsConfig::new(CAPACITY_BPS, configs))
}

/// A JoBS queue on a loaded link, driven in batches of arrivals and departures in virtual time.
/// Packet sizes are uniform in 64..=1500 bytes and classes uniform, from a seeded PRNG.
pub struct Workload {
    jobs: Jobs<u32>,
    arrivals: Vec<(ClassId, u32)>,
    next: usize,
    now: Instant,
    gap: Duration,
}

impl Workload {
    /// Set `set` with `classes` classes; the buffer is filled before it is returned.
    ///
    /// # Panics
    /// If `set` is not 1-4 or `classes` is not 1-64.
    pub fn new(classes: usize, set: u8, seed: u64) -> Result<Self, ConfigError> {
        let config = constraint_set(classes, set).expect("set 1-4, at least one class");
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let arrivals: Vec<(ClassId, u32)> = (0..4096)
            .map(|_| {
                let class = ClassId((rng.next_u32() % classes as u32) as u8);
                (class, 64 + rng.next_u32() % 1437)
            })
            .collect();
        let mean_bytes = arrivals.iter().map(|a| u64::from(a.1)).sum::<u64>() as f64 / 4096.0;
        let gap_s =
            mean_bytes * 8.0 / CAPACITY_BPS as f64 * DEQUEUE_BATCH as f64 / ENQUEUE_BATCH as f64;
        let mut w = Workload {
            jobs: Jobs::new(&config)?,
            arrivals,
            next: 0,
            now: Instant::ZERO,
            gap: Duration::from_secs_f64(gap_s),
        };
        for _ in 0..20 {
            w.enqueue_batch();
        }
        for _ in 0..1000 {
            w.enqueue_batch();
            w.dequeue_batch();
        }
        Ok(w)
    }

    /// [`ENQUEUE_BATCH`] arrivals, each followed by taking back what it caused to be dropped.
    /// Returns the number of drops.
    pub fn enqueue_batch(&mut self) -> usize {
        let mut drops = 0;
        for _ in 0..ENQUEUE_BATCH {
            let (class, len) = self.arrivals[self.next];
            self.next = (self.next + 1) % self.arrivals.len();
            self.now = self.now + self.gap;
            // Every class exists, so the queue never hands the packet back.
            let _ = self.jobs.enqueue(self.now, class, len, len);
            while self.jobs.poll_dropped().is_some() {
                drops += 1;
            }
        }
        drops
    }

    /// [`DEQUEUE_BATCH`] departures; returns the bytes sent.
    pub fn dequeue_batch(&mut self) -> u64 {
        let mut bytes = 0;
        for _ in 0..DEQUEUE_BATCH {
            if let Some(d) = self.jobs.dequeue(self.now) {
                bytes += u64::from(d.payload);
            }
        }
        bytes
    }

    /// The queue, to read its counters.
    pub fn jobs(&self) -> &Jobs<u32> {
        &self.jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_steady_state() {
        assert!(constraint_set(4, 0).is_none() && constraint_set(0, 1).is_none());
        let s1 = constraint_set(4, 1).unwrap();
        assert_eq!(s1, JobsConfig::table1(CAPACITY_BPS));
        let s2 = constraint_set(4, 2).unwrap();
        assert!(s2
            .classes
            .iter()
            .all(|c| c.adc.is_none() && c.arc_bps.is_none()));
        let s3 = constraint_set(4, 3).unwrap();
        assert!(s3.classes.iter().all(|c| c.rdc.is_none()));
        assert!(constraint_set(2, 1)
            .unwrap()
            .classes
            .iter()
            .all(|c| c.rdc.is_none()));
        for set in 1..=4 {
            let mut w = Workload::new(4, set, 1).unwrap();
            assert!(w.jobs().len() >= 150, "set {set}: {}", w.jobs().len());
            let drops = w.enqueue_batch();
            assert!(drops >= 1);
            assert!(w.dequeue_batch() > 0);
        }
    }
}

//! Randomized Fair Queuing (stripe paper section 3.7).

use super::CausalScheduler;
use crate::path::{PacketNumber, PathId};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Randomized Fair Queuing: path `i` is drawn with probability `B_i / sum B_j` from a
/// pseudorandom sequence both ends seed identically (section 3.7).
///
/// The choice for the next packet is drawn when the previous one is accounted, so `select` is a
/// pure function of the state (the scheduler is causal). RFQ has no rounds: markers cannot
/// resynchronise it, so after a loss with logical reception it stays out of step until the bond
/// is reset; use SRR where loss is expected.
#[derive(Clone, Debug)]
pub struct Rfq {
    /// Configured weights.
    weights: Vec<u64>,
    /// Which paths are in the rotation.
    active: Vec<bool>,
    /// Cumulative weights of active paths; path `i` is chosen for a draw in
    /// `[cum[i-1], cum[i])`.
    cumulative: Vec<u64>,
    rng: Xoshiro256PlusPlus,
    current: u8,
}

impl Rfq {
    /// RFQ with path weights `weights` (usually rates) and a shared seed.
    ///
    /// # Panics
    /// If `weights` is empty, or their sum is zero or overflows.
    pub fn new(weights: &[u64], seed: u64) -> Self {
        assert!(!weights.is_empty(), "Rfq needs at least one path");
        let mut total = 0u64;
        let cumulative = weights
            .iter()
            .map(|&w| {
                total = total.checked_add(w).expect("Rfq weights overflow");
                total
            })
            .collect();
        assert!(total > 0, "Rfq weights sum to zero");
        let mut rfq = Rfq {
            weights: weights.to_vec(),
            active: vec![true; weights.len()],
            cumulative,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            current: 0,
        };
        rfq.draw();
        rfq
    }

    fn draw(&mut self) {
        let total = *self.cumulative.last().expect("non-empty");
        if total == 0 {
            // Every path inactive: keep the current choice.
            return;
        }
        // Lemire's multiply-shift: a uniform value in [0, total) without a division.
        let x = ((u128::from(self.rng.next_u64()) * u128::from(total)) >> 64) as u64;
        let i = self.cumulative.partition_point(|&c| c <= x);
        self.current = i as u8;
    }
}

impl CausalScheduler for Rfq {
    #[inline]
    fn paths(&self) -> usize {
        self.cumulative.len()
    }
    #[inline]
    fn select(&self) -> PathId {
        PathId(self.current)
    }
    #[inline]
    fn update(&mut self, _len: u32) -> bool {
        self.draw();
        true
    }
    fn number(&self, _path: PathId) -> Option<PacketNumber> {
        None
    }
    fn skip(&mut self) {
        self.draw();
    }
    fn set_deficit(&mut self, _path: PathId, _deficit: i64) {}
    fn is_active(&self, path: PathId) -> bool {
        self.active.get(path.index()).copied().unwrap_or(false)
    }
    fn set_active(&mut self, path: PathId, active: bool) {
        let Some(a) = self.active.get_mut(path.index()) else {
            return;
        };
        *a = active;
        let mut total = 0u64;
        for (i, c) in self.cumulative.iter_mut().enumerate() {
            if self.active[i] {
                total += self.weights[i];
            }
            *c = total;
        }
        if !self.active[self.current as usize] {
            self.draw();
        }
    }
    fn set_round(&mut self, _path: PathId, _round: u64) {}
    fn quantum(&self, _path: PathId) -> Option<i64> {
        None
    }
    #[inline]
    fn cost(&self, _len: u32) -> i64 {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rfq::new(&[1, 2, 3], 7);
        let mut b = Rfq::new(&[1, 2, 3], 7);
        for _ in 0..1000 {
            assert_eq!(a.select(), b.select());
            a.update(100);
            b.update(1400);
        }
    }

    #[test]
    fn inactive_paths_are_never_drawn() {
        let mut r = Rfq::new(&[1, 1, 1], 3);
        r.set_active(PathId(1), false);
        for _ in 0..1000 {
            assert_ne!(r.select(), PathId(1));
            r.update(1);
        }
    }

    #[test]
    fn frequencies_follow_weights() {
        let mut r = Rfq::new(&[10, 30], 1);
        let mut counts = [0u32; 2];
        for _ in 0..100_000 {
            counts[r.select().index()] += 1;
            r.update(1);
        }
        let share = f64::from(counts[1]) / 100_000.0;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
    }
}

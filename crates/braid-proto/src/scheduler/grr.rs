//! Generalised round robin (stripe paper section 6.2).

use super::{CausalScheduler, Srr};
use crate::path::{PacketNumber, PathId};

/// Generalised round robin: each round, path `i` gets `w_i` packets, the `w_i` being the closest
/// integer ratio of the path rates (section 6.2: "allocates packets to interfaces based on the
/// closest integer ratio of their bandwidths").
///
/// It is SRR counted in packets instead of bytes (quantum `w_i`, every packet costs 1), so it has
/// rounds and takes markers like SRR; it balances packet counts, not bytes, which is its weakness
/// with variable packet sizes (the section 6.2 worst case).
#[derive(Clone, Debug)]
pub struct Grr {
    inner: Srr,
}

impl Grr {
    /// GRR with explicit per-path packet weights.
    ///
    /// # Panics
    /// If `weights` is empty or a weight is zero.
    pub fn new(weights: &[u32]) -> Self {
        Grr {
            inner: Srr::new(weights),
        }
    }

    /// GRR with weights `round(rate_i / min rate)`, at least 1.
    ///
    /// # Panics
    /// If `rates_bps` is empty or a rate is zero.
    pub fn from_rates(rates_bps: &[u64]) -> Self {
        Grr::new(&Self::weights(rates_bps))
    }

    /// The closest integer ratio of `rates_bps`, normalised to the slowest path.
    pub fn weights(rates_bps: &[u64]) -> Vec<u32> {
        let min = rates_bps.iter().copied().min().unwrap_or(1).max(1);
        rates_bps
            .iter()
            .map(|&r| {
                // round(r / min), without overflow for any r.
                let w = r / min + u64::from(r % min >= min.div_ceil(2));
                u32::try_from(w.max(1)).unwrap_or(u32::MAX)
            })
            .collect()
    }
}

impl CausalScheduler for Grr {
    #[inline]
    fn paths(&self) -> usize {
        self.inner.paths()
    }
    #[inline]
    fn select(&self) -> PathId {
        self.inner.select()
    }
    #[inline]
    fn update(&mut self, _len: u32) -> bool {
        self.inner.charge(1)
    }
    fn number(&self, path: PathId) -> Option<PacketNumber> {
        self.inner.number(path)
    }
    fn skip(&mut self) {
        self.inner.skip()
    }
    fn set_deficit(&mut self, path: PathId, deficit: i64) {
        self.inner.set_deficit(path, deficit)
    }
    fn set_round(&mut self, path: PathId, round: u64) {
        self.inner.set_round(path, round)
    }
    fn quantum(&self, path: PathId) -> Option<i64> {
        self.inner.quantum(path)
    }
    fn set_active(&mut self, path: PathId, active: bool) {
        self.inner.set_active(path, active)
    }
    fn is_active(&self, path: PathId) -> bool {
        self.inner.is_active(path)
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
    fn closest_integer_ratio() {
        assert_eq!(Grr::weights(&[10, 23]), vec![1, 2]);
        assert_eq!(Grr::weights(&[10, 26]), vec![1, 3]);
        assert_eq!(Grr::weights(&[10, 4]), vec![3, 1]);
        assert_eq!(Grr::weights(&[7, 7]), vec![1, 1]);
        assert_eq!(Grr::weights(&[1, u64::MAX]), vec![1, u32::MAX]);
    }

    #[test]
    fn packet_counts_follow_weights_whatever_the_sizes() {
        let mut g = Grr::new(&[1, 3]);
        let paths: Vec<u8> = [1500, 40, 40, 1500, 40, 1500, 1500, 40]
            .iter()
            .map(|&l| {
                let p = g.select();
                g.update(l);
                p.0
            })
            .collect();
        assert_eq!(paths, vec![0, 1, 1, 1, 0, 1, 1, 1]);
    }
}

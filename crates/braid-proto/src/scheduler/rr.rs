//! Plain round robin (stripe paper section 2.1 and Table I).

use super::{CausalScheduler, Grr};
use crate::path::{PacketNumber, PathId};

/// Round robin: one packet per path in turn, whatever the sizes and rates. It is GRR with all
/// weights 1, so it has rounds and takes markers. Over unequal links its throughput is limited
/// to `N` times the slowest link (Table I).
#[derive(Clone, Debug)]
pub struct Rr {
    inner: Grr,
}

impl Rr {
    /// Round robin over `paths` paths.
    ///
    /// # Panics
    /// If `paths` is zero.
    pub fn new(paths: usize) -> Self {
        Rr {
            inner: Grr::new(&vec![1; paths]),
        }
    }
}

impl CausalScheduler for Rr {
    #[inline]
    fn paths(&self) -> usize {
        self.inner.paths()
    }
    #[inline]
    fn select(&self) -> PathId {
        self.inner.select()
    }
    #[inline]
    fn update(&mut self, len: u32) -> bool {
        self.inner.update(len)
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
    fn cost(&self, len: u32) -> i64 {
        self.inner.cost(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternates() {
        let mut r = Rr::new(3);
        let seq: Vec<u8> = (0..7)
            .map(|i| {
                let p = r.select();
                r.update(100 * i + 1);
                p.0
            })
            .collect();
        assert_eq!(seq, vec![0, 1, 2, 0, 1, 2, 0]);
    }
}

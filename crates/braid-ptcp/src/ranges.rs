//! A set of half-open `u64` ranges, merged on insertion.
//!
//! Used for the virtual packets a micro-flow received above its cumulative acknowledgement (the
//! source of SACK blocks), for the stream bytes the receive buffer holds, and for the data the SM
//! unbound and must stripe again.

use core::ops::Range;
use std::collections::BTreeMap;

/// Disjoint, non-adjacent, non-empty ranges, keyed by start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Total number of values covered.
    pub fn covered(&self) -> u64 {
        self.map.iter().map(|(s, e)| e - s).sum()
    }

    /// Whether `x` is in the set.
    pub fn contains(&self, x: u64) -> bool {
        self.map
            .range(..=x)
            .next_back()
            .is_some_and(|(_, &e)| x < e)
    }

    /// The parts of `r` not in the set, in order.
    pub fn missing(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = r.start;
        let first = self
            .map
            .range(..=r.start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(r.start);
        for (&s, &e) in self.map.range(first..r.end) {
            if e <= at {
                continue;
            }
            if s > at {
                out.push(at..s.min(r.end));
            }
            at = at.max(e);
            if at >= r.end {
                break;
            }
        }
        if at < r.end {
            out.push(at..r.end);
        }
        out
    }

    /// Adds `r`, merging with neighbours.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        let (mut s, mut e) = (r.start, r.end);
        if let Some((&ps, &pe)) = self.map.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        let overlapping: Vec<u64> = self.map.range(s..=e).map(|(&k, _)| k).collect();
        for k in overlapping {
            if let Some(ke) = self.map.remove(&k) {
                e = e.max(ke);
            }
        }
        self.map.insert(s, e);
    }

    /// Removes every value below `x`.
    pub fn remove_below(&mut self, x: u64) {
        while let Some((&s, &e)) = self.map.iter().next() {
            if s >= x {
                break;
            }
            self.map.remove(&s);
            if e > x {
                self.map.insert(x, e);
                break;
            }
        }
    }

    /// The first range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.iter().next().map(|(&s, &e)| s..e)
    }

    /// Removes and returns at most `max_len` values from the front of the first range.
    pub fn pop_front(&mut self, max_len: u64) -> Option<Range<u64>> {
        let (&s, &e) = self.map.iter().next()?;
        self.map.remove(&s);
        let end = e.min(s.saturating_add(max_len.max(1)));
        if end < e {
            self.map.insert(end, e);
        }
        Some(s..end)
    }

    /// The ranges in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// The range containing `x`, if any.
    pub fn range_containing(&self, x: u64) -> Option<Range<u64>> {
        self.map
            .range(..=x)
            .next_back()
            .filter(|(_, &e)| x < e)
            .map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn merge_and_missing() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        s.insert(30..40);
        s.insert(20..25);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![10..25, 30..40]);
        assert_eq!(s.missing(0..50), vec![0..10, 25..30, 40..50]);
        assert_eq!(s.missing(12..35), vec![25..30]);
        s.insert(5..45);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![5..45]);
        s.remove_below(10);
        assert_eq!(s.first(), Some(10..45));
        assert_eq!(s.pop_front(5), Some(10..15));
        assert_eq!(s.first(), Some(15..45));
    }

    proptest! {
        #[test]
        fn behaves_like_a_set(ops in prop::collection::vec((0u64..200, 0u64..20, any::<bool>()), 0..60)) {
            let mut s = RangeSet::new();
            let mut model = BTreeSet::new();
            for (a, l, cut) in ops {
                if cut {
                    s.remove_below(a);
                    model.retain(|&x| x >= a);
                } else {
                    let miss = s.missing(a..a + l);
                    let want: Vec<u64> = (a..a + l).filter(|x| !model.contains(x)).collect();
                    let got: Vec<u64> = miss.into_iter().flatten().collect();
                    prop_assert_eq!(got, want);
                    s.insert(a..a + l);
                    model.extend(a..a + l);
                }
                let flat: BTreeSet<u64> = s.iter().flatten().collect();
                prop_assert_eq!(&flat, &model);
                prop_assert_eq!(s.covered(), model.len() as u64);
                for w in s.iter().collect::<Vec<_>>().windows(2) {
                    prop_assert!(w[0].end < w[1].start);
                }
            }
        }
    }
}

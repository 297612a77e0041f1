//! Anti-replay sliding window (RFC 6479 style, as WireGuard): one per path and key set.

/// Counters this far behind the highest seen are rejected as too old.
pub const WINDOW: u64 = 2048;
const WORDS: usize = (WINDOW / 64) as usize;

/// Accepts each counter at most once, and none older than [`WINDOW`] behind the newest.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// One past the highest counter accepted (0: none yet).
    next: u64,
    bitmap: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            next: 0,
            bitmap: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    /// One past the highest counter accepted (0: none yet).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether `counter` would be accepted (call before the expensive decryption).
    pub fn check(&self, counter: u64) -> bool {
        if counter >= self.next {
            return true;
        }
        if self.next - counter > WINDOW {
            return false;
        }
        let bit = counter % WINDOW;
        self.bitmap[(bit / 64) as usize] & (1 << (bit % 64)) == 0
    }

    /// Record `counter` as seen (after it authenticated). Returns `false` if it was a replay.
    pub fn update(&mut self, counter: u64) -> bool {
        if !self.check(counter) {
            return false;
        }
        if counter >= self.next {
            // Clear the bits of the counters skipped over.
            let advance = counter + 1 - self.next;
            if advance >= WINDOW {
                self.bitmap = [0; WORDS];
            } else {
                for c in self.next..=counter {
                    let bit = c % WINDOW;
                    self.bitmap[(bit / 64) as usize] &= !(1 << (bit % 64));
                }
            }
            self.next = counter + 1;
        }
        let bit = counter % WINDOW;
        self.bitmap[(bit / 64) as usize] |= 1 << (bit % 64);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_once_rejects_old() {
        let mut w = ReplayWindow::default();
        assert!(w.update(0));
        assert!(!w.update(0));
        assert!(w.update(5));
        assert!(w.update(3));
        assert!(!w.update(3));
        assert!(w.update(5000));
        assert!(!w.check(5000 - WINDOW - 1));
        assert!(w.check(5000 - WINDOW + 1));
        assert!(!w.update(5));
    }

    proptest! {
        #[test]
        fn matches_a_set_model(counters in proptest::collection::vec(0u64..5000, 0..500)) {
            let mut w = ReplayWindow::default();
            let mut seen = std::collections::HashSet::new();
            let mut max: Option<u64> = None;
            for c in counters {
                let too_old = max.is_some_and(|m| m >= WINDOW && c <= m - WINDOW);
                let expect = !seen.contains(&c) && !too_old;
                prop_assert_eq!(w.update(c), expect, "counter {}", c);
                if expect {
                    seen.insert(c);
                    max = Some(max.map_or(c, |m| m.max(c)));
                }
            }
        }
    }
}

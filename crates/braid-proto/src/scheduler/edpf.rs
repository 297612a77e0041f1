//! Earliest Delivery Path First (BAG paper, section III-B, Equation 1).
//!
//! The paper's network between the proxy and the mobile host (its Fig. 3): path `l` is a wired
//! stretch of one-way delay `D_l` up to a base station, whose queue feeds a wireless bottleneck
//! of bandwidth `B_l`; `A_l` is when that bottleneck is next free. EDPF tracks every base
//! station's queue through `A_l` and sends each packet where it is delivered first. With exact
//! `D_l` and `B_l` and packets of one size it causes no reordering at all (section III-B); PET
//! ([`crate::pet::Pet`]) runs the same rule on estimates.

use super::CausalScheduler;
use crate::path::{PacketNumber, PathId};
use crate::time::{transmission_time, Duration, Instant};

#[derive(Clone, Debug)]
struct EdpfPath {
    /// `D_l`: one-way delay of the path (measured by the driver, e.g. half the probe RTT).
    delay: Duration,
    /// `B_l`: bottleneck rate, bit/s.
    rate_bps: u64,
    /// `A_l`: when the path's bottleneck is next free (the sender's estimate).
    free_at: Instant,
    active: bool,
}

/// Earliest Delivery Path First: packet `i` of length `L_i` arriving at `a_i` goes to the path
/// with the smallest predicted delivery time `d_l = max(a_i + D_l, A_l) + L_i / B_l`, and then
/// `A_l = d_l` (BAG paper, section III-B).
///
/// Unlike SRR it looks at the packet and the clock, so it is not causal (stripe paper section
/// 3.1): the receiver cannot simulate it, and it pairs with resequencing by sequence number.
/// In exchange it accounts for the paths' delays: a packet never goes to a slow, long path when
/// a short one would deliver it sooner, which is what keeps TCP's ACK clock steady over
/// dissimilar links.
#[derive(Clone, Debug)]
pub struct Edpf {
    paths: Vec<EdpfPath>,
    overhead_bytes: u32,
    last: PathId,
}

impl Edpf {
    /// EDPF over paths of the given rates; every packet costs `overhead_bytes` more on the
    /// wire than its payload.
    ///
    /// # Panics
    /// If `rates_bps` is empty or a rate is zero.
    pub fn new(rates_bps: &[u64], overhead_bytes: u32) -> Self {
        assert!(!rates_bps.is_empty(), "Edpf needs at least one path");
        Edpf {
            paths: rates_bps
                .iter()
                .map(|&r| {
                    assert!(r > 0, "Edpf rate must be positive");
                    EdpfPath {
                        delay: Duration::ZERO,
                        rate_bps: r,
                        free_at: Instant::ZERO,
                        active: true,
                    }
                })
                .collect(),
            overhead_bytes,
            last: PathId(0),
        }
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// Set `D_l` for `path` (one-way delay up to the bottleneck).
    pub fn set_delay(&mut self, path: PathId, delay: Duration) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.delay = delay;
        }
    }

    /// `D_l` of `path` (zero for a path that does not exist).
    pub fn delay(&self, path: PathId) -> Duration {
        self.paths
            .get(path.index())
            .map_or(Duration::ZERO, |p| p.delay)
    }

    /// Set `B_l` for `path` in bit/s (a measured or estimated bottleneck rate). A rate of zero
    /// is ignored.
    pub fn set_rate(&mut self, path: PathId, rate_bps: u64) {
        if let (Some(p), true) = (self.paths.get_mut(path.index()), rate_bps > 0) {
            p.rate_bps = rate_bps;
        }
    }

    /// `B_l` of `path` in bit/s (zero for a path that does not exist).
    pub fn rate(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.rate_bps)
    }

    /// `A_l`: when `path`'s bottleneck is next free, as far as EDPF knows.
    pub fn free_at(&self, path: PathId) -> Instant {
        self.paths
            .get(path.index())
            .map_or(Instant::ZERO, |p| p.free_at)
    }

    /// Overwrite `A_l` (a driver that learnt from feedback when the bottleneck really frees).
    pub fn set_free_at(&mut self, path: PathId, at: Instant) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.free_at = at;
        }
    }

    /// Bytes each packet costs beyond its payload.
    pub fn overhead_bytes(&self) -> u32 {
        self.overhead_bytes
    }

    /// Take `path` out of the choice or put it back.
    pub fn set_active(&mut self, path: PathId, active: bool) {
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.active = active;
        }
    }

    /// Equation 1: `d_l = max(a_i + D_l, A_l) + L_i / B_l`, the predicted delivery of a packet
    /// of `len` payload bytes (plus the overhead) that reaches the scheduler at `now` and goes
    /// on `path`. `Instant::MAX` for a path that does not exist.
    pub fn delivery(&self, path: PathId, now: Instant, len: u32) -> Instant {
        let Some(p) = self.paths.get(path.index()) else {
            return Instant::MAX;
        };
        let start = (now + p.delay).max(p.free_at);
        let wire = u64::from(len).saturating_add(u64::from(self.overhead_bytes));
        start + transmission_time(wire, p.rate_bps)
    }

    /// Account a packet of `len` bytes sent on `path` at `now` without choosing it (a packet
    /// some other rule placed there, such as the second of PET's pairs): `A_l = d_l`.
    pub fn account(&mut self, path: PathId, now: Instant, len: u32) {
        let d = self.delivery(path, now, len);
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.free_at = d;
            self.last = path;
        }
    }

    /// The path EDPF would choose now, without committing to it.
    pub fn peek(&self, now: Instant, len: u32) -> PathId {
        let best = (0..self.paths.len())
            .filter(|&i| self.paths[i].active)
            .min_by_key(|&i| self.delivery(PathId(i as u8), now, len));
        PathId(best.unwrap_or(self.last.index()) as u8)
    }

    /// Choose the path `p` with the smallest `d_l` for a packet of `len` bytes arriving at
    /// `now` (ties to the lower index), and set `A_p = d_p` (section III-B).
    pub fn choose(&mut self, now: Instant, len: u32) -> PathId {
        let path = self.peek(now, len);
        self.account(path, now, len);
        path
    }
}

/// EDPF is not causal: the striper asks [`Edpf::choose`] with the packet and the clock. This
/// implementation lets it sit in the [`super::Scheduler`] enum: `select` returns the last choice
/// (a resequencing receiver uses it only as a hint), there are no rounds and no markers.
impl CausalScheduler for Edpf {
    fn paths(&self) -> usize {
        self.paths.len()
    }
    fn select(&self) -> PathId {
        self.last
    }
    fn update(&mut self, _len: u32) -> bool {
        false
    }
    fn number(&self, _path: PathId) -> Option<PacketNumber> {
        None
    }
    fn skip(&mut self) {}
    fn set_deficit(&mut self, _path: PathId, _deficit: i64) {}
    fn set_round(&mut self, _path: PathId, _round: u64) {}
    fn quantum(&self, _path: PathId) -> Option<i64> {
        None
    }
    fn cost(&self, _len: u32) -> i64 {
        1
    }
    fn set_active(&mut self, path: PathId, active: bool) {
        Edpf::set_active(self, path, active)
    }
    fn is_active(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|p| p.active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    /// REFERENCE.md: d_l = max(a + D_l, A_l) + L / B_l, smallest wins, then A_l = d_l.
    #[test]
    fn the_bag_formula() {
        // Path 0: 8 Mbit/s, 10 ms; path 1: 8 Mbit/s, 50 ms. 1000-byte packets take 1 ms.
        let mut e = Edpf::new(&[8_000_000, 8_000_000], 0);
        e.set_delay(PathId(0), ms(10));
        e.set_delay(PathId(1), ms(50));
        let t0 = Instant::ZERO;
        // Path 0 delivers at 11 ms, 12 ms, ..., 51 ms (a tie with path 1's 51 ms goes to the
        // lower index), then path 1 at 51 ms is earlier than path 0's 52 ms.
        let mut chosen = Vec::new();
        for _ in 0..45 {
            chosen.push(e.choose(t0, 1000).0);
        }
        assert!(chosen[..41].iter().all(|&p| p == 0), "{chosen:?}");
        assert_eq!(chosen[41], 1, "{chosen:?}");
    }

    #[test]
    fn equal_paths_share_by_rate_and_small_packets_take_the_short_path() {
        let mut e = Edpf::new(&[20_000_000, 5_000_000], 0);
        e.set_delay(PathId(0), ms(10));
        e.set_delay(PathId(1), ms(10));
        let mut bytes = [0u64; 2];
        let mut now = Instant::ZERO;
        for _ in 0..10_000 {
            let p = e.choose(now, 1400);
            bytes[p.index()] += 1400;
            now = now + Duration::from_micros(450); // ~25 Mbit/s offered
        }
        let share = bytes[0] as f64 / (bytes[0] + bytes[1]) as f64;
        assert!((share - 0.8).abs() < 0.05, "{share}");
        // With a long second path, a lone small packet (an ACK) goes to the short one.
        let mut e = Edpf::new(&[20_000_000, 5_000_000], 0);
        e.set_delay(PathId(0), ms(10));
        e.set_delay(PathId(1), ms(60));
        assert_eq!(e.choose(Instant::ZERO, 60), PathId(0));
    }

    /// Equation 1 by hand, on Table I's three paths (50, 100, 200 kbit/s, 50 ms each) with
    /// 1500-byte packets: 240, 120 and 60 ms on the air.
    #[test]
    fn equation_1_on_table_i_paths() {
        let mut e = Edpf::new(&[50_000, 100_000, 200_000], 0);
        for i in 0..3 {
            e.set_delay(PathId(i), ms(50));
        }
        let t0 = Instant::ZERO;
        assert_eq!(e.delivery(PathId(0), t0, 1500), Instant::ZERO + ms(290));
        assert_eq!(e.delivery(PathId(2), t0, 1500), Instant::ZERO + ms(110));
        // Seven packets at once, in delivery order: 200k at 110 ms; 100k at 170 ms (a tie
        // with 200k's second, to the lower index); 200k at 170 and 230; then a three-way tie
        // at 290 ms taken 50k, 100k, 200k.
        let got: Vec<u8> = (0..7).map(|_| e.choose(t0, 1500).0).collect();
        assert_eq!(got, vec![2, 1, 2, 2, 0, 1, 2]);
        assert_eq!(e.free_at(PathId(0)), Instant::ZERO + ms(290));
        assert_eq!(e.free_at(PathId(2)), Instant::ZERO + ms(290));
        // A packet arriving later starts at a + D when the bottleneck has gone idle.
        let later = Instant::ZERO + ms(1000);
        assert_eq!(e.delivery(PathId(1), later, 1500), later + ms(170));
    }

    #[test]
    fn inactive_paths_are_never_chosen() {
        let mut e = Edpf::new(&[1_000_000, 100_000_000], 0);
        e.set_active(PathId(1), false);
        for _ in 0..100 {
            assert_eq!(e.choose(Instant::ZERO, 1500), PathId(0));
        }
    }
}

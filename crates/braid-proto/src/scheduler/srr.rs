//! Surplus Round Robin (stripe paper sections 3.5-3.6 and Appendix A).

use super::CausalScheduler;
use crate::path::{PacketNumber, PathId};

/// Per-path SRR state: the deficit counter `DC_i`, quantum `q_i` and round number `R_i`.
#[derive(Clone, Copy, Debug)]
struct Line {
    deficit: i64,
    quantum: i64,
    round: u64,
    active: bool,
}

/// Surplus Round Robin, the striping algorithm of section 3.6 with the state of Appendix A.
///
/// State: the pointer `sp` (initially path 0), and per path a deficit counter `DC_i`
/// (initially the quantum `q_i`) and a round number `R_i` (initially 1). `Send(p)`: the packet
/// goes to `sp`; `DC_sp -= size(p)`; if `DC_sp <= 0` then `DC_sp += q_sp`, `R_sp += 1` and `sp`
/// moves to the next path. Every quantum must be at least the largest packet (checked by
/// [`super::SchedulerConfig`]); with that, Lemma 3.4 bounds `|bytes_i - K q_i|` by the largest
/// packet after any `K` rounds.
///
/// The receiver runs the same struct (Appendix A's receiver variables `rp`, `DC_i^r`, `R_i^r`
/// are exactly these fields) to logically receive in the sender's order.
#[derive(Clone, Debug)]
pub struct Srr {
    lines: Vec<Line>,
    sp: usize,
}

impl Srr {
    /// SRR over `quanta.len()` paths with the given quanta in bytes.
    ///
    /// # Panics
    /// If `quanta` is empty or a quantum is zero.
    pub fn new(quanta: &[u32]) -> Self {
        assert!(!quanta.is_empty(), "Srr needs at least one path");
        let lines = quanta
            .iter()
            .map(|&q| {
                assert!(q > 0, "Srr quantum must be positive");
                Line {
                    deficit: i64::from(q),
                    quantum: i64::from(q),
                    round: 1,
                    active: true,
                }
            })
            .collect();
        Srr { lines, sp: 0 }
    }

    /// The deficit counter `DC_i` of every path.
    pub fn deficits(&self) -> Vec<i64> {
        self.lines.iter().map(|l| l.deficit).collect()
    }

    /// The round number `R_i` of every path.
    pub fn rounds(&self) -> Vec<u64> {
        self.lines.iter().map(|l| l.round).collect()
    }

    /// `AdvanceSenderPointer` / `AdvanceReceiverPointer`.
    #[inline]
    fn advance(&mut self) {
        let line = &mut self.lines[self.sp];
        line.round = line.round.wrapping_add(1);
        self.step();
        self.skip_inactive();
    }

    #[inline]
    fn step(&mut self) {
        self.sp += 1;
        if self.sp == self.lines.len() {
            self.sp = 0;
        }
    }

    /// Pass over inactive paths as the receiver's `Skipline` would: each pass counts as a round
    /// of that path, so its round number keeps pace and a marker realigns it when it returns.
    #[inline]
    fn skip_inactive(&mut self) {
        if self.lines[self.sp].active {
            return;
        }
        for _ in 0..self.lines.len() {
            if self.lines[self.sp].active {
                return;
            }
            let line = &mut self.lines[self.sp];
            line.round = line.round.wrapping_add(1);
            self.step();
        }
    }

    /// Take `path` out of the rotation (`false`) or put it back (`true`). With every path
    /// inactive, `select` keeps returning the current one.
    pub fn set_active(&mut self, path: PathId, active: bool) {
        if let Some(l) = self.lines.get_mut(path.index()) {
            l.active = active;
        }
        self.skip_inactive();
    }

    /// Adaptive SRR (beyond the paper): a new quantum for `path`, taking effect from its next
    /// round; the deficit it has now is kept, at most the new quantum. Only for a sender whose
    /// receiver does not replay the schedule (mode `sequence`). A zero quantum is ignored.
    pub fn set_quantum(&mut self, path: PathId, quantum: u32) {
        if let (Some(l), true) = (self.lines.get_mut(path.index()), quantum > 0) {
            l.quantum = i64::from(quantum);
            l.deficit = l.deficit.min(l.quantum);
        }
    }

    /// `g(s, p)` with a cost in the deficit counter's units.
    #[inline]
    pub(crate) fn charge(&mut self, cost: i64) -> bool {
        let line = &mut self.lines[self.sp];
        line.deficit -= cost;
        if line.deficit <= 0 {
            line.deficit += line.quantum;
            self.advance();
            true
        } else {
            false
        }
    }
}

impl CausalScheduler for Srr {
    #[inline]
    fn paths(&self) -> usize {
        self.lines.len()
    }

    #[inline]
    fn select(&self) -> PathId {
        PathId(self.sp as u8)
    }

    #[inline]
    fn update(&mut self, len: u32) -> bool {
        self.charge(i64::from(len))
    }

    fn number(&self, path: PathId) -> Option<PacketNumber> {
        self.lines.get(path.index()).map(|l| PacketNumber {
            round: l.round,
            deficit: l.deficit,
        })
    }

    fn skip(&mut self) {
        self.advance();
    }

    fn set_deficit(&mut self, path: PathId, deficit: i64) {
        if let Some(l) = self.lines.get_mut(path.index()) {
            // A deficit outside (-q, q] cannot come from a correct sender; clamp so a bad marker
            // cannot stall a path for many rounds.
            l.deficit = deficit.clamp(1 - l.quantum, l.quantum);
        }
    }

    fn set_round(&mut self, path: PathId, round: u64) {
        if let Some(l) = self.lines.get_mut(path.index()) {
            l.round = round;
        }
    }

    fn quantum(&self, path: PathId) -> Option<i64> {
        self.lines.get(path.index()).map(|l| l.quantum)
    }

    #[inline]
    fn cost(&self, len: u32) -> i64 {
        i64::from(len)
    }

    fn set_active(&mut self, path: PathId, active: bool) {
        Srr::set_active(self, path, active)
    }

    fn is_active(&self, path: PathId) -> bool {
        self.lines.get(path.index()).is_some_and(|l| l.active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stripe paper Figures 5/6 (REFERENCE.md vector 1): quantum 500 on two channels;
    /// a=550, d=200, e=400, b=150, c=300, f=400 go to channels 1, 2, 2, 1, 1, 2.
    #[test]
    fn figure_6_trace() {
        let mut s = Srr::new(&[500, 500]);
        let packets = [550, 200, 400, 150, 300, 400];
        let mut trace = Vec::new();
        for len in packets {
            let path = s.select();
            let before = s.deficits()[path.index()];
            s.update(len);
            trace.push((path.0 + 1, before - i64::from(len)));
        }
        // Channel and DC right after each packet (before a fresh quantum is added).
        assert_eq!(
            trace,
            vec![(1, -50), (2, 300), (2, -100), (1, 300), (1, 0), (2, 0)]
        );
        // ch1 ended round 1 at -50 (+500 -> 450) and round 2 at 0 (+500 -> 500).
        assert_eq!(s.deficits(), vec![500, 500]);
        assert_eq!(s.rounds(), vec![3, 3]);
        assert_eq!(s.select(), PathId(0));
    }

    /// REFERENCE.md vector 2: packets 200, 400, 300, 100, 600, 200 go to channels
    /// 1, 1, 2, 2, 2, 1 and the final DC is [200, 0].
    #[test]
    fn vector_2() {
        let mut s = Srr::new(&[500, 500]);
        let chans: Vec<u8> = [200, 400, 300, 100, 600, 200]
            .iter()
            .map(|&len| {
                let p = s.select();
                s.update(len);
                p.0 + 1
            })
            .collect();
        assert_eq!(chans, vec![1, 1, 2, 2, 2, 1]);
        assert_eq!(s.deficits(), vec![200, 0]);
    }

    #[test]
    fn receiver_running_the_same_rule_restores_order() {
        // Vector 2 again: the receiver simulates the sender on per-channel queues.
        let packets = [200u32, 400, 300, 100, 600, 200];
        let mut tx = Srr::new(&[500, 500]);
        let mut queues = [Vec::new(), Vec::new()];
        for (i, &len) in packets.iter().enumerate() {
            queues[tx.select().index()].push((i, len));
            tx.update(len);
        }
        // Deliver channel 2 entirely first (skew): the receiver still outputs in order.
        let mut rx = Srr::new(&[500, 500]);
        let mut heads = [0usize, 0usize];
        let mut out = Vec::new();
        while out.len() < packets.len() {
            let p = rx.select().index();
            let (i, len) = queues[p][heads[p]];
            heads[p] += 1;
            rx.update(len);
            out.push(i);
        }
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn inactive_paths_leave_the_rotation_but_keep_counting_rounds() {
        let mut s = Srr::new(&[500, 500, 500]);
        s.set_active(PathId(1), false);
        let paths: Vec<u8> = (0..4)
            .map(|_| {
                let p = s.select();
                s.update(500);
                p.0
            })
            .collect();
        assert_eq!(paths, vec![0, 2, 0, 2]);
        assert_eq!(s.rounds(), vec![3, 3, 3]);
        s.set_active(PathId(1), true);
        assert_eq!(s.select(), PathId(0));
        s.update(500);
        assert_eq!(s.select(), PathId(1));
        // The current path going inactive moves the pointer on at once.
        s.set_active(PathId(1), false);
        assert_eq!(s.select(), PathId(2));
    }

    #[test]
    fn skip_advances_round_not_deficit() {
        let mut s = Srr::new(&[500, 700]);
        s.update(100);
        s.skip();
        assert_eq!(s.select(), PathId(1));
        assert_eq!(
            s.number(PathId(0)),
            Some(PacketNumber {
                round: 2,
                deficit: 400
            })
        );
    }
}

//! Retransmission inside the tunnel (braid's own, beyond the papers): what a lossy path
//! swallowed is resent on the fastest path before the transport above notices.
//!
//! A tunnel that only restores order turns one path's random loss into the whole flow's loss:
//! with 1% loss on one of three paths a single CUBIC flow through the bond held about 15
//! packets in flight (1.45 Mbit/s, where the best single path alone gave 9.5). The pTCP paper
//! answers with per-path reliability in a new transport; a tunnel can do a cheaper version for
//! any transport, because its receiver already holds packets back:
//!
//! - Every datagram on a path carries a transport counter that counts up by one (the AEAD
//!   nonce, `braid_wire::outer`), so a gap in one path's counters is a loss on that path,
//!   seen as soon as the next datagram of the path arrives ([`GapDetector`]).
//! - The receiver answers every gap with a NACK (`braid_wire::Repr::Nack`) on its fastest
//!   path. A short gap ([`MAX_REPAIRABLE_GAP`]) is random loss and is resent (below). A longer
//!   run is congestion (a drop-tail queue overflowing), which the transport must see to back
//!   off: the sender answers with `braid_wire::Repr::Abandon`, the data sequence numbers the
//!   run carried, and the receiver declares them lost as soon as it reaches them instead of
//!   waiting for every path to pass them and a grace for a resend that will not come.
//! - The sender keeps the plaintext of the last data packets of each path by counter
//!   ([`RetransmitRing`]: up to [`RING_PACKETS`] per path and about [`RING_BYTES`] in all) and resends what the NACK names, once, on the fastest path other than
//!   the lossy one, with its original sequence number.
//! - The sequence receiver waits a grace period of about one fastest-path RTT before it
//!   declares a gap lost, and a resent packet is never held longer than what follows it; delay
//!   equalisation keeps the packets behind a gap in the buffer anyway, so the resend usually
//!   lands before they are due and the transport never sees the loss.
//!
//! Only `resequence = "sequence"` bonds retransmit: the resent packet needs its sequence
//! number to find its place. Markers, feedback and probes are never resent.

use std::collections::VecDeque;

/// Data packets kept per path for resending, at most.
pub const RING_PACKETS: usize = 4096;

/// Bytes the copies of all paths together may take (about; a packet counted at 1500 bytes):
/// a bond of many paths keeps fewer packets per path, never fewer than 256.
pub const RING_BYTES: usize = 16 << 20;

/// Gaps of at most this many datagrams are repaired; longer runs are left to the transport.
/// Random loss (a radio link's) mostly takes one datagram at a time; a drop-tail queue that
/// overflows takes a run, and resending that would hide congestion from TCP, which would then
/// never back off (measured: CUBIC through the three-path lab kept the queues full and the
/// tunnel resent 6,200 packets in 20 s when every gap was repaired).
pub const MAX_REPAIRABLE_GAP: u32 = 2;

/// Counters one NACK may name at most; a longer gap is an outage, not a loss to repair.
pub const MAX_NACK_COUNT: u32 = 256;

/// The sender's copies of its recent data packets, by path and transport counter.
#[derive(Debug, Default)]
pub struct RetransmitRing {
    paths: Vec<VecDeque<(u64, Vec<u8>)>>,
    spare: Vec<Vec<u8>>,
    per_path: usize,
}

impl RetransmitRing {
    /// An empty ring for `paths` paths.
    pub fn new(paths: usize) -> Self {
        RetransmitRing {
            paths: (0..paths).map(|_| VecDeque::new()).collect(),
            spare: Vec::new(),
            per_path: (RING_BYTES / 1500 / paths.max(1)).clamp(256, RING_PACKETS),
        }
    }

    /// Keep a copy of `plain`, sent on `path` with transport counter `counter` (counters of a
    /// path must be recorded in increasing order).
    pub fn record(&mut self, path: usize, counter: u64, plain: &[u8]) {
        let Some(q) = self.paths.get_mut(path) else {
            return;
        };
        let mut buf = if q.len() >= self.per_path {
            q.pop_front().map(|(_, b)| b).unwrap_or_default()
        } else {
            self.spare.pop().unwrap_or_default()
        };
        buf.clear();
        buf.extend_from_slice(plain);
        q.push_back((counter, buf));
    }

    /// The packet sent on `path` with `counter`, taken out of the ring (resent at most once).
    pub fn take(&mut self, path: usize, counter: u64) -> Option<Vec<u8>> {
        let q = self.paths.get_mut(path)?;
        let at = q.binary_search_by_key(&counter, |(c, _)| *c).ok()?;
        q.remove(at).map(|(_, b)| b)
    }

    /// Give a buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < 64 {
            self.spare.push(buf);
        }
    }

    /// Forget everything (new keys: the counters start again).
    pub fn clear(&mut self) {
        for q in &mut self.paths {
            for (_, b) in q.drain(..) {
                if self.spare.len() < 64 {
                    self.spare.push(b);
                }
            }
        }
    }
}

/// The receiver's view of each path's transport counters: gaps are losses on that path.
#[derive(Debug, Default)]
pub struct GapDetector {
    highest: Vec<Option<u64>>,
}

impl GapDetector {
    /// A detector for `paths` paths.
    pub fn new(paths: usize) -> Self {
        GapDetector {
            highest: vec![None; paths],
        }
    }

    /// An authenticated datagram with `counter` arrived on `path`: the missing counters it
    /// reveals (first, count), if any; at most [`MAX_NACK_COUNT`] of them, the latest.
    pub fn on_counter(&mut self, path: usize, counter: u64) -> Option<(u64, u32)> {
        let h = self.highest.get_mut(path)?;
        let gap = match *h {
            Some(high) if counter > high + 1 => {
                let missing = counter - high - 1;
                let count = missing.min(u64::from(MAX_NACK_COUNT));
                Some((counter - count, count as u32))
            }
            _ => None,
        };
        if h.is_none_or(|high| counter > high) {
            *h = Some(counter);
        }
        gap
    }

    /// Forget every path's counters (new keys).
    pub fn reset(&mut self) {
        self.highest.fill(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_in_a_paths_counters_are_reported_once() {
        let mut g = GapDetector::new(2);
        assert_eq!(g.on_counter(0, 0), None);
        assert_eq!(g.on_counter(0, 1), None);
        assert_eq!(g.on_counter(0, 4), Some((2, 2)));
        // A late arrival fills the gap without a new report; path 1 is separate.
        assert_eq!(g.on_counter(0, 3), None);
        assert_eq!(g.on_counter(1, 7), None);
        assert_eq!(g.on_counter(1, 8), None);
        // A huge gap names only the latest MAX_NACK_COUNT counters.
        assert_eq!(
            g.on_counter(0, 10_000),
            Some((10_000 - u64::from(MAX_NACK_COUNT), MAX_NACK_COUNT))
        );
        assert_eq!(g.on_counter(9, 1), None);
        g.reset();
        assert_eq!(g.on_counter(0, 50), None);
    }

    #[test]
    fn the_ring_finds_each_packet_once_and_forgets_the_oldest() {
        let mut r = RetransmitRing::new(2);
        for c in 0..(RING_PACKETS as u64 + 10) {
            r.record(1, c * 2, &c.to_be_bytes());
        }
        assert_eq!(r.take(1, 0), None, "the oldest were dropped");
        let got = r.take(1, 40).unwrap();
        assert_eq!(got, 20u64.to_be_bytes());
        assert_eq!(r.take(1, 40), None, "resent at most once");
        assert_eq!(r.take(1, 41), None);
        assert_eq!(r.take(0, 40), None);
        assert_eq!(r.take(7, 40), None);
        r.recycle(got);
        r.clear();
        assert_eq!(r.take(1, 100), None);
    }
}

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

use braid_proto::time::{transmission_time, Duration, Instant};
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

    /// Every packet sent on `path` with a counter of at least `first`, oldest first, taken out
    /// of the ring: what a path found dark swallowed (the peer's next expected counter there
    /// is `first`), for reinjection on the others.
    pub fn take_from(&mut self, path: usize, first: u64) -> Vec<Vec<u8>> {
        let Some(q) = self.paths.get_mut(path) else {
            return Vec::new();
        };
        let at = q.partition_point(|(c, _)| *c < first);
        q.drain(at..).map(|(_, b)| b).collect()
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

/// Reinjected packets are sent until this long after the notice that the path went dark; later
/// the transport above has resent them itself (its retransmission timer has fired) and the
/// peer's resequencer has moved on.
pub const REINJECT_FOR: Duration = Duration::from_secs(1);

/// Copies waiting to be reinjected, at most (as many as the ring keeps of one path): a peer
/// that says path after path is dark cannot make the queue grow past it.
pub const MAX_REINJECT: usize = RING_PACKETS;

/// Reinjection may run this far ahead of its pace (about ten full-size packets), so a driver
/// whose timers fire a millisecond late still keeps the rate.
pub const REINJECT_BURST_BYTES: u64 = 16 * 1024;

/// What a path found dark swallowed, resent on the paths left (braid's own, as MPTCP
/// reinjects what a failed subflow held, RFC 8684 section 3.3.6 "reinjection"). The peer's
/// notice that it hears nothing on the path (`braid_wire::Repr::Unheard`) carries its next
/// expected transport counter there, so the sender knows exactly what never arrived: the
/// copies the [`RetransmitRing`] holds from that counter on. Without this a path that dies
/// under load takes a window of data with it that only the transport's retransmission
/// timer brings back, and with a single line in use (a backup taking over) nothing arrives
/// out of order to trigger a fast retransmit.
///
/// The copies go out paced at the surviving path's rate: a window of a fast line sent at once
/// onto a slower backup would overflow its queue and be lost again. They carry their
/// original sequence numbers, so the peer's resequencer puts them in their place.
#[derive(Debug, Default)]
pub struct Reinjection {
    queue: VecDeque<Vec<u8>>,
    /// The path that went dark, never a target.
    dark: usize,
    rate_bps: u64,
    /// Pacing (a generic cell rate algorithm): the theoretical send time of the next byte.
    paced_until: Instant,
    /// The copies left are dropped from then on.
    until: Instant,
    /// This end found a path dark itself and took it out of its sending half: the peer's
    /// notice of what it missed there is awaited until then, and the data for the path the
    /// copies will take waits with it.
    awaiting: Option<(usize, Instant)>,
}

impl Reinjection {
    /// Resend `packets` (plaintexts, oldest first) that dark path `dark` swallowed, at
    /// `rate_bps` from `now`; added behind any reinjection still under way (and given up with
    /// it), up to [`MAX_REINJECT`] in all. Returns what did not fit, to recycle.
    pub fn start(
        &mut self,
        now: Instant,
        dark: usize,
        mut packets: Vec<Vec<u8>>,
        rate_bps: u64,
    ) -> Vec<Vec<u8>> {
        self.notice_came(dark);
        if packets.is_empty() {
            return packets;
        }
        if self.queue.is_empty() {
            self.paced_until = now;
            self.until = now + REINJECT_FOR;
        }
        let room = MAX_REINJECT.saturating_sub(self.queue.len());
        let over = packets.split_off(room.min(packets.len()));
        self.queue.extend(packets);
        self.dark = dark;
        self.rate_bps = rate_bps.max(1);
        over
    }

    /// The peer's notice for `dark` came: no longer awaited.
    pub fn notice_came(&mut self, dark: usize) {
        if self.awaiting.is_some_and(|(d, _)| d == dark) {
            self.awaiting = None;
        }
    }

    /// Bytes of the copies waiting.
    pub fn bytes(&self) -> u64 {
        self.queue.iter().map(|p| p.len() as u64).sum()
    }

    /// This end found path `dark` dark and took it out of its sending half: the peer is about
    /// to say what it missed there. Until it has, or until `until`, what would go on the path
    /// the copies will take waits (sent ahead of the copies, it would open a gap at the peer
    /// that they must fill within the peer's retransmit grace). Ignored while copies wait.
    pub fn await_notice(&mut self, dark: usize, until: Instant) {
        if self.queue.is_empty() {
            self.awaiting = Some((dark, until));
        }
    }

    /// Whether the data for the path the copies take must wait at `now`: copies wait, or the
    /// peer's notice is awaited.
    pub fn is_holding(&self, now: Instant) -> bool {
        !self.queue.is_empty() || self.awaiting.is_some_and(|(_, t)| now < t)
    }

    /// Copies waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The path that went dark, not to be reinjected on (while copies wait or a notice is
    /// awaited).
    pub fn dark(&self) -> Option<usize> {
        if !self.queue.is_empty() {
            return Some(self.dark);
        }
        self.awaiting.map(|(d, _)| d)
    }

    /// When the next copy may go, or the wait for the peer's notice ends (`None`: neither).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.queue.is_empty() {
            return self.awaiting.map(|(_, t)| t);
        }
        let burst = transmission_time(REINJECT_BURST_BYTES, self.rate_bps);
        Some(self.paced_until.saturating_sub(burst))
    }

    /// Whether a copy may go at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.poll_timeout().is_some_and(|t| now >= t)
    }

    /// The next copy, if one is due at `now`; its length counts against the pace.
    pub fn pop(&mut self, now: Instant) -> Option<Vec<u8>> {
        if !self.is_due(now) {
            return None;
        }
        let plain = self.queue.pop_front()?;
        let need = transmission_time(plain.len() as u64, self.rate_bps);
        self.paced_until = self.paced_until.max(now) + need;
        Some(plain)
    }

    /// The copies left once their time is up (to recycle), none before; the wait for a notice
    /// ends at its time too.
    pub fn expire(&mut self, now: Instant) -> Vec<Vec<u8>> {
        if self.awaiting.is_some_and(|(_, t)| now >= t) {
            self.awaiting = None;
        }
        if now < self.until || self.queue.is_empty() {
            return Vec::new();
        }
        self.queue.drain(..).collect()
    }

    /// Forget everything (new keys), returning the copies.
    pub fn clear(&mut self) -> Vec<Vec<u8>> {
        self.awaiting = None;
        self.queue.drain(..).collect()
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
    fn reinjection_is_paced_at_the_rate_and_gives_up_after_a_second() {
        let mut r = Reinjection::default();
        let t0 = Instant::from_nanos(1_000_000_000);
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.pop(t0), None);
        // 40 packets of 1,000 bytes at 8 Mbit/s: 1 ms each, 16 KiB of burst.
        let over = r.start(t0, 1, (0..40u8).map(|i| vec![i; 1000]).collect(), 8_000_000);
        assert!(over.is_empty());
        assert_eq!((r.dark(), r.bytes()), (Some(1), 40_000));
        let mut sent = 0;
        while r.pop(t0).is_some() {
            sent += 1;
        }
        assert_eq!(sent, 17, "the burst, then the pace");
        let next = r.poll_timeout().unwrap();
        assert!(
            next > t0 && next <= t0 + Duration::from_millis(1),
            "{next:?}"
        );
        // 10 ms later, 10 more.
        let later = t0 + Duration::from_millis(10);
        let mut more = 0;
        while r.pop(later).is_some() {
            more += 1;
        }
        assert_eq!(more, 10);
        assert_eq!((r.len(), r.bytes()), (13, 13_000));
        // A second path's copies join the queue; they do not put off its end.
        assert!(r
            .start(later, 0, vec![vec![7; 1000]; 2], 8_000_000)
            .is_empty());
        assert_eq!(r.len(), 15);
        assert!(r.expire(t0 + Duration::from_millis(999)).is_empty());
        assert_eq!(r.expire(t0 + REINJECT_FOR).len(), 15);
        assert!(r.is_empty());
        assert_eq!(r.bytes(), 0);
        assert_eq!(r.dark(), None);
        assert_eq!(r.poll_timeout(), None);
        // After a pause the pace starts afresh, not from its old debt.
        let t1 = t0 + Duration::from_secs(5);
        assert!(r.start(t1, 0, vec![vec![0; 1000]; 2], 8_000_000).is_empty());
        assert_eq!(r.pop(t1).map(|p| p.len()), Some(1000));
        assert_eq!(r.clear().len(), 1);
        // Bounded: what does not fit comes back.
        let over = r.start(t1, 0, vec![vec![0; 10]; MAX_REINJECT + 5], 8_000_000);
        assert_eq!((r.len(), over.len()), (MAX_REINJECT, 5));
        assert!(r.start(t1, 1, vec![vec![0; 10]; 3], 8_000_000).len() == 3);
        r.clear();
        // Awaiting the peer's notice holds until it comes, or until its time.
        r.await_notice(1, t1 + Duration::from_millis(50));
        assert!(r.is_holding(t1) && r.dark() == Some(1));
        assert_eq!(r.poll_timeout(), Some(t1 + Duration::from_millis(50)));
        assert!(!r.is_holding(t1 + Duration::from_millis(50)));
        r.notice_came(0);
        assert!(r.is_holding(t1));
        assert!(r.start(t1, 1, Vec::new(), 8_000_000).is_empty());
        assert!(
            !r.is_holding(t1) && r.dark().is_none(),
            "a notice with nothing to resend"
        );
        assert_eq!(r.poll_timeout(), None);
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
        let from: Vec<Vec<u8>> = r.take_from(1, 8_000);
        let expect: Vec<Vec<u8>> = (4_000..RING_PACKETS as u64 + 10)
            .map(|c| c.to_be_bytes().to_vec())
            .collect();
        assert_eq!(from, expect, "from counter 8,000 on, oldest first");
        assert!(r.take_from(1, 8_000).is_empty(), "taken once");
        assert_eq!(r.take(1, 7_998).unwrap(), 3_999u64.to_be_bytes());
        assert!(r.take_from(5, 0).is_empty());
        r.clear();
        assert_eq!(r.take(1, 100), None);
    }
}

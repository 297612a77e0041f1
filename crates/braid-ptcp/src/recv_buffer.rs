//! The SM's one receive buffer (pTCP paper, section 2 and section 3.2 "Flow Control").
//!
//! Data arriving on any micro-flow is queued here by its stream offset (section 3.1: "any
//! packet from the lower layer is queued onto the recv buffer based on its sequence number").
//! The buffer accepts bytes below its right edge only, the edge the SM advertises: at most
//! `capacity` bytes past the next byte to read, fewer while a memory limit
//! ([`RecvBuffer::set_limit`]) or the window's tuning ([`RecvBuffer::autotuned`]) holds it
//! back; it never moves left of what was advertised. Bytes outside it and bytes already held
//! are dropped and counted.
//!
//! What the buffer costs is more than the bytes it holds: each run of bytes is an entry
//! ([`CHUNK_ENTRY_BYTES`]). Bytes join the run before them, and the run after them joins
//! theirs, up to [`CHUNK_MAX`] bytes a run, so a stream of tiny segments costs one entry per
//! 2 KiB once its holes are filled, and full segments stay runs of their own (joining them
//! costs copies as runs grow: with runs of 16 KiB, accelerated TCP at 1.5 Gbit/s ran 14%
//! slower). A segment wholly out of order is admitted
//! ([`RecvBuffer::admits`]) only while the buffer's charge (bytes plus entries) stays within
//! its window and a quarter, so a peer that sends every other byte cannot make a window of `W`
//! bytes cost dozens of times `W`. The SM asks before its micro-flow takes the segment: one
//! not admitted is dropped as if the path had lost it, and the peer's flow sends it again
//! (a byte the flow had acknowledged would never come again).
//!
//! # Tuning the window
//! A window offered is memory promised, whether the peer uses it or not. An autotuned buffer
//! ([`RecvBuffer::autotuned`]) starts with a small window and is widened by its SM
//! ([`RecvBuffer::widen_to`]) as the peer's sending shows it needs more (Linux's receive-buffer
//! autotuning, which the SM runs: `StripedConnection`), up to its capacity. An idle or slow
//! sender never gets past the first window.

use std::collections::BTreeMap;

use crate::ranges::RangeSet;

/// What one held run of bytes costs beyond its bytes: its map entry and allocation, and its
/// range in the set of what is held (about 100 bytes with a one-byte run; on the high side).
pub const CHUNK_ENTRY_BYTES: u64 = 128;

/// Runs of bytes join up to this length: tiny segments join, full ones (1,200-1,420 bytes) do
/// not.
const CHUNK_MAX: usize = 2 << 10;

/// The first window of an autotuned buffer ([`RecvBuffer::autotuned`]): 256 KiB.
pub const AUTOTUNE_INITIAL_WINDOW: u64 = 256 << 10;

/// Out-of-order reassembly by stream offset, bounded by `capacity` bytes.
#[derive(Clone, Debug)]
pub struct RecvBuffer {
    read_offset: u64,
    capacity: u64,
    /// At most this many bytes past `read_offset` are offered when the edge next moves
    /// ([`RecvBuffer::set_limit`]).
    limit: u64,
    /// The right edge; never moves left of what was advertised.
    edge: u64,
    /// The window the sender has shown it needs ([`RecvBuffer::autotuned`]); `u64::MAX` when
    /// not tuned.
    tuned: u64,
    /// Bytes held (`have.covered()`, kept as a count).
    held: u64,
    chunks: BTreeMap<u64, Vec<u8>>,
    have: RangeSet,
    fin: Option<u64>,
    /// Bytes that arrived outside the window.
    pub dropped_outside_bytes: u64,
    /// Bytes that arrived a second time.
    pub duplicate_bytes: u64,
    /// Bytes of segments not admitted ([`RecvBuffer::admits`]): wholly out of order when
    /// holding them would have taken the buffer's charge past its allowance; the sender sends
    /// them again.
    pub dropped_over_charge_bytes: u64,
}

impl RecvBuffer {
    /// An empty buffer of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        RecvBuffer {
            read_offset: 0,
            capacity,
            limit: u64::MAX,
            edge: capacity,
            tuned: u64::MAX,
            held: 0,
            chunks: BTreeMap::new(),
            have: RangeSet::new(),
            fin: None,
            dropped_outside_bytes: 0,
            duplicate_bytes: 0,
            dropped_over_charge_bytes: 0,
        }
    }

    /// An empty buffer of `capacity` bytes whose stream starts at `offset` (tests of the wrap
    /// of the segment format's truncated offsets).
    #[cfg(test)]
    pub(crate) fn starting_at(offset: u64, capacity: u64) -> Self {
        RecvBuffer {
            read_offset: offset,
            edge: offset.saturating_add(capacity),
            ..Self::new(capacity)
        }
    }

    /// An empty buffer of `capacity` bytes whose window starts at [`AUTOTUNE_INITIAL_WINDOW`]
    /// and grows as its SM widens it (the module docs, "Tuning the window").
    pub fn autotuned(capacity: u64) -> Self {
        let first = capacity.min(AUTOTUNE_INITIAL_WINDOW);
        RecvBuffer {
            tuned: first,
            edge: first,
            ..Self::new(capacity)
        }
    }

    /// An autotuned buffer's window grows to `bytes` (never past the capacity, never smaller);
    /// nothing for a buffer not tuned.
    pub fn widen_to(&mut self, bytes: u64) {
        if self.tuned != u64::MAX && bytes > self.tuned {
            self.tuned = bytes.min(self.capacity);
            self.advance_edge();
        }
    }

    /// Offer at most `limit` bytes past the next byte to read from now on (a share of a
    /// memory budget): the edge grows only up to there. It moves left to there too, but never
    /// left of `advertised` (what the peer was told; the edge never moves left of that) nor of
    /// a byte held.
    pub fn set_limit(&mut self, limit: u64, advertised: u64) {
        self.limit = limit;
        let held = self.have.iter().next_back().map_or(0, |r| r.end);
        self.edge = advertised.max(held).min(self.edge);
        self.advance_edge();
    }

    /// How far past the next byte to read the edge moves: the capacity, the limit or the
    /// tuned window, whichever is least.
    pub fn offered(&self) -> u64 {
        self.capacity.min(self.limit).min(self.tuned)
    }

    fn advance_edge(&mut self) {
        let offer = self.read_offset.saturating_add(self.offered());
        self.edge = self.edge.max(offer);
    }

    /// What holding the buffer's bytes costs: the bytes and each run's entry
    /// ([`CHUNK_ENTRY_BYTES`]).
    pub fn held_charge(&self) -> u64 {
        self.held + self.chunks.len() as u64 * CHUNK_ENTRY_BYTES
    }

    /// Whether a segment of `len` bytes at `offset` may be taken: one that starts at or before
    /// the next byte expected always, one wholly out of order only while the charge stays
    /// within the allowance (the module docs). The SM asks before its micro-flow sees the
    /// segment, and counts one refused ([`RecvBuffer::refused`]).
    pub fn admits(&self, offset: u64, len: u64) -> bool {
        offset <= self.contiguous_end()
            || self.held_charge() + len + CHUNK_ENTRY_BYTES <= self.allowance()
    }

    /// Counts `len` bytes of a segment not admitted ([`RecvBuffer::admits`]).
    pub fn refused(&mut self, len: u64) {
        self.dropped_over_charge_bytes += len;
    }

    /// The charge out-of-order bytes may take the buffer to: its window and a quarter (and at
    /// least 16 entries' worth, for tiny windows).
    fn allowance(&self) -> u64 {
        let window = self.edge - self.read_offset;
        window.saturating_add((window / 4).max(16 * CHUNK_ENTRY_BYTES))
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The next byte the application will read.
    pub fn read_offset(&self) -> u64 {
        self.read_offset
    }

    /// One past the last byte the buffer may hold: the advertised right edge.
    pub fn right_edge(&self) -> u64 {
        self.edge
    }

    /// The next byte not yet received in order: the cumulative acknowledgement.
    pub fn contiguous_end(&self) -> u64 {
        self.have
            .range_containing(self.read_offset)
            .map_or(self.read_offset, |r| r.end)
    }

    /// Bytes held (received, not yet read); never more than the capacity.
    pub fn buffered_bytes(&self) -> u64 {
        self.held
    }

    /// Bytes readable now.
    pub fn readable_bytes(&self) -> u64 {
        self.contiguous_end() - self.read_offset
    }

    /// Queues `data` found at stream `offset`; returns how many new bytes were kept (every byte
    /// below the right edge not held already: ask [`RecvBuffer::admits`] first).
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> u64 {
        let end = offset.saturating_add(data.len() as u64);
        let lo = offset.max(self.read_offset);
        let hi = end.min(self.right_edge());
        let inside = hi.saturating_sub(lo);
        self.dropped_outside_bytes += data.len() as u64 - inside;
        if lo >= hi {
            return 0;
        }
        let mut kept = 0;
        for r in self.have.missing(lo..hi) {
            // In range of `data` by construction: offset <= lo <= r.start < r.end <= hi <= end.
            let (Ok(a), Ok(b)) = (
                usize::try_from(r.start - offset),
                usize::try_from(r.end - offset),
            ) else {
                continue;
            };
            let Some(bytes) = data.get(a..b) else {
                continue;
            };
            self.keep(r.start, bytes);
            kept += r.end - r.start;
            self.have.insert(r);
        }
        self.held += kept;
        self.duplicate_bytes += inside - kept;
        kept
    }

    /// Holds `bytes` found at `at` (not held yet): in the run before them if it ends there,
    /// and the run after them joins theirs, each while a run stays within [`CHUNK_MAX`]; more
    /// than half a run's worth stays a run of its own.
    fn keep(&mut self, at: u64, bytes: &[u8]) {
        // A full segment (over half a run) stays a run of its own, with no lookups of its
        // neighbours: the per-segment cost of the buffer before runs joined.
        if bytes.len() > CHUNK_MAX / 2 {
            self.chunks.insert(at, bytes.to_vec());
            return;
        }
        let end = at + bytes.len() as u64;
        // The run the bytes now end, and its length.
        let (start, own_len) = match self.chunks.range_mut(..at).next_back() {
            Some((&k, run))
                if k + run.len() as u64 == at && run.len() + bytes.len() <= CHUNK_MAX =>
            {
                run.extend_from_slice(bytes);
                (k, run.len())
            }
            _ => {
                self.chunks.insert(at, bytes.to_vec());
                (at, bytes.len())
            }
        };
        let next_len = self.chunks.get(&end).map(Vec::len);
        if next_len.is_some_and(|n| own_len + n <= CHUNK_MAX) {
            if let Some(next) = self.chunks.remove(&end) {
                if let Some(run) = self.chunks.get_mut(&start) {
                    run.extend_from_slice(&next);
                }
            }
        }
    }

    /// Copies readable bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(mut chunk) = self.chunks.remove(&self.read_offset) else {
                break;
            };
            let take = chunk.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&chunk[..take]);
            n += take;
            self.read_offset += take as u64;
            if take < chunk.len() {
                chunk.drain(..take);
                self.chunks.insert(self.read_offset, chunk);
            }
        }
        self.have.remove_below(self.read_offset);
        self.held -= n as u64;
        self.advance_edge();
        n
    }

    /// The peer said the stream is `final_len` bytes long. A different second value, or one
    /// below what was already received, is ignored (a misbehaving peer) and returns `false`.
    pub fn set_fin(&mut self, final_len: u64) -> bool {
        match self.fin {
            Some(f) => f == final_len,
            None if final_len < self.contiguous_end() => false,
            None => {
                self.fin = Some(final_len);
                true
            }
        }
    }

    /// The final length, once known.
    pub fn fin(&self) -> Option<u64> {
        self.fin
    }

    /// Every byte up to the final length was read.
    pub fn is_finished(&self) -> bool {
        self.fin == Some(self.read_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_within_bound() {
        let mut b = RecvBuffer::new(10);
        assert_eq!(b.insert(4, b"efgh"), 4);
        assert_eq!(b.contiguous_end(), 0);
        assert_eq!(b.insert(0, b"abcdef"), 4);
        assert_eq!(b.duplicate_bytes, 2);
        assert_eq!(b.contiguous_end(), 8);
        // Past the right edge (10) is cut off.
        assert_eq!(b.insert(8, b"ijklmn"), 2);
        assert_eq!(b.dropped_outside_bytes, 4);
        assert_eq!(b.buffered_bytes(), 10);
        let mut out = [0u8; 3];
        assert_eq!(b.read(&mut out), 3);
        assert_eq!(&out, b"abc");
        assert_eq!(b.right_edge(), 13);
        let mut out = [0u8; 20];
        assert_eq!(b.read(&mut out), 7);
        assert_eq!(&out[..7], b"defghij");
        assert!(b.set_fin(10));
        assert!(b.is_finished());
        assert!(!b.set_fin(11));
    }

    #[test]
    fn bytes_in_order_join_one_run_and_tiny_segments_cost_little() {
        let mut b = RecvBuffer::new(1 << 20);
        for i in 0..40_000u64 {
            assert_eq!(b.insert(i, &[i as u8]), 1);
        }
        // 40,000 one-byte segments: 20 runs of at most 2 KiB, not 40,000 entries.
        assert_eq!(b.chunks.len(), 20);
        assert_eq!(b.held_charge(), 40_000 + 20 * CHUNK_ENTRY_BYTES);
        let mut out = vec![0u8; 50_000];
        assert_eq!(b.read(&mut out), 40_000);
        assert!(out[..40_000].iter().enumerate().all(|(i, &x)| x == i as u8));
    }

    /// As the SM offers a segment: refused unless admitted.
    fn offer(b: &mut RecvBuffer, at: u64, data: &[u8]) -> u64 {
        if b.admits(at, data.len() as u64) {
            b.insert(at, data)
        } else {
            b.refused(data.len() as u64);
            0
        }
    }

    #[test]
    fn a_peer_sending_every_other_byte_is_held_to_the_window_and_a_quarter() {
        let window = 64u64 << 10;
        let mut b = RecvBuffer::new(window);
        for at in (1..window).step_by(2) {
            offer(&mut b, at, &[1]);
        }
        // Each byte would be its own run: the charge stops at the allowance.
        assert!(b.held_charge() <= window + window / 4);
        assert!(b.held_charge() > window);
        assert!(b.dropped_over_charge_bytes > window / 3);
        assert_eq!(b.duplicate_bytes, 0);
        assert_eq!(b.buffered_bytes(), b.have.covered());
        // The hole at the head is always admitted; the bytes after it follow in order.
        assert_eq!(offer(&mut b, 0, &[0]), 1);
        assert!(b.contiguous_end() > 1);
        // The sender sends again what was refused: everything arrives.
        for at in 2..window {
            offer(&mut b, at, &[1]);
        }
        assert_eq!(b.contiguous_end(), window);
        // Filling the holes joined the runs: 32 of 2 KiB, not 32,768.
        assert_eq!(b.chunks.len(), 32);
        assert_eq!(b.buffered_bytes(), b.have.covered());
    }

    #[test]
    fn an_honest_senders_window_held_out_of_order_is_kept_whole() {
        let window = 4u64 << 20;
        let mss = 512u64;
        let mut b = RecvBuffer::new(window);
        // Every segment but the first arrives: all of them out of order.
        let mut at = mss;
        while at < window {
            let len = mss.min(window - at);
            assert_eq!(offer(&mut b, at, &vec![7; len as usize]), len, "at {at}");
            at += len;
        }
        assert_eq!(b.dropped_over_charge_bytes, 0);
        assert_eq!(offer(&mut b, 0, &vec![7; mss as usize]), mss);
        assert_eq!(b.readable_bytes(), window);
        assert_eq!(b.buffered_bytes(), window);
    }

    #[test]
    fn an_autotuned_window_starts_small_and_widens_to_the_capacity_at_most() {
        let mut b = RecvBuffer::autotuned(4 << 20);
        assert_eq!(b.right_edge(), AUTOTUNE_INITIAL_WINDOW);
        b.widen_to(1 << 20);
        assert_eq!((b.offered(), b.right_edge()), (1 << 20, 1 << 20));
        // Never narrower, never past the capacity.
        b.widen_to(1 << 10);
        assert_eq!(b.offered(), 1 << 20);
        b.widen_to(1 << 30);
        assert_eq!(b.offered(), 4 << 20);
        // A buffer not tuned offers its capacity and ignores it.
        let mut b = RecvBuffer::new(4 << 20);
        b.widen_to(1 << 30);
        assert_eq!(b.offered(), 4 << 20);
    }

    #[test]
    fn a_limit_holds_the_edge_back_and_the_edge_never_moves_left() {
        let mut b = RecvBuffer::new(100);
        assert_eq!(b.right_edge(), 100);
        // Nothing advertised yet: the edge moves back to the limit.
        b.set_limit(10, 0);
        assert_eq!(b.right_edge(), 10);
        b.set_limit(u64::MAX, 0);
        assert_eq!(b.right_edge(), 100);
        // What was advertised stays offered.
        b.set_limit(10, 100);
        assert_eq!(b.right_edge(), 100);
        assert_eq!(b.insert(0, &[1; 60]), 60);
        let mut out = [0u8; 60];
        assert_eq!(b.read(&mut out), 60);
        // Read to 60: the edge offers 10 past it, less than before, so it stays.
        assert_eq!(b.right_edge(), 100);
        assert_eq!(b.insert(60, &[1; 40]), 40);
        let mut out = [0u8; 40];
        assert_eq!(b.read(&mut out), 40);
        assert_eq!(b.right_edge(), 110);
        b.set_limit(u64::MAX, 110);
        assert_eq!(b.right_edge(), 200);
        // Nor left of a byte held (a peer that sent past what it was told).
        assert_eq!(b.insert(150, &[1; 10]), 10);
        b.set_limit(0, 110);
        assert_eq!(b.right_edge(), 160);
    }
}

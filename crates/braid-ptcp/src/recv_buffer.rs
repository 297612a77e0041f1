//! The SM's one receive buffer (pTCP paper, section 2 and section 3.2 "Flow Control").
//!
//! Data arriving on any micro-flow is queued here by its stream offset (section 3.1: "any
//! packet from the lower layer is queued onto the recv buffer based on its sequence number").
//! The buffer accepts bytes in `[read_offset, read_offset + capacity)` only, so it never holds
//! more than `capacity` bytes whatever a peer sends; the right edge of that window is what the
//! SM advertises, and it never moves left. Bytes outside it and bytes already held are dropped
//! and counted.

use std::collections::BTreeMap;

use crate::ranges::RangeSet;

/// Out-of-order reassembly by stream offset, bounded by `capacity` bytes.
#[derive(Clone, Debug)]
pub struct RecvBuffer {
    read_offset: u64,
    capacity: u64,
    chunks: BTreeMap<u64, Vec<u8>>,
    have: RangeSet,
    fin: Option<u64>,
    /// Bytes that arrived outside the window.
    pub dropped_outside_bytes: u64,
    /// Bytes that arrived a second time.
    pub duplicate_bytes: u64,
}

impl RecvBuffer {
    /// An empty buffer of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        RecvBuffer {
            read_offset: 0,
            capacity,
            chunks: BTreeMap::new(),
            have: RangeSet::new(),
            fin: None,
            dropped_outside_bytes: 0,
            duplicate_bytes: 0,
        }
    }

    /// An empty buffer of `capacity` bytes whose stream starts at `offset` (tests of the wrap
    /// of the segment format's truncated offsets).
    #[cfg(test)]
    pub(crate) fn starting_at(offset: u64, capacity: u64) -> Self {
        RecvBuffer {
            read_offset: offset,
            ..Self::new(capacity)
        }
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
        self.read_offset.saturating_add(self.capacity)
    }

    /// The next byte not yet received in order: the cumulative acknowledgement.
    pub fn contiguous_end(&self) -> u64 {
        self.have
            .range_containing(self.read_offset)
            .map_or(self.read_offset, |r| r.end)
    }

    /// Bytes held (received, not yet read); never more than the capacity.
    pub fn buffered_bytes(&self) -> u64 {
        self.have.covered()
    }

    /// Bytes readable now.
    pub fn readable_bytes(&self) -> u64 {
        self.contiguous_end() - self.read_offset
    }

    /// Queues `data` found at stream `offset`; returns how many new bytes were kept.
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
            self.chunks.insert(r.start, bytes.to_vec());
            kept += r.end - r.start;
            self.have.insert(r);
        }
        self.duplicate_bytes += inside - kept;
        kept
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
}

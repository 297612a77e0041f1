//! The SIG-ACK (kind 7): the receiver's report of when data packets arrived, for PET's
//! packet-pair estimates (BAG paper section V-A; `braid_proto::pet`).
//!
//! ```text
//!  offset size  SIG-ACK (kind 7)
//!    0     1    version = 1
//!    1     1    kind = 7
//!    2     1    count (1 to 64)
//!    3     1    flags = 0
//!    4    ..    count entries of 20 bytes:
//!                 0  1  path (< 64)
//!                 1  3  reserved = 0
//!                 4  8  seq u64: the data packet's sequence number, or a padding
//!                         packet's id (kind 12; its top bit set)
//!                12  8  arrival u64: receiver clock, nanoseconds
//!  length       4 + 20 * count exactly
//! ```

use core::fmt;

use braid_proto::pet::{SigAckEntry, MAX_SIGACK_ENTRIES};
use braid_proto::{Instant, PathId, MAX_PATHS};

use crate::Error;

/// Length of the SIG-ACK header.
pub const SIGACK_HEADER_LEN: usize = 4;
/// Length of one SIG-ACK entry.
pub const SIGACK_ENTRY_LEN: usize = 20;
/// Length of the largest SIG-ACK.
pub const MAX_SIGACK_LEN: usize = SIGACK_HEADER_LEN + SIGACK_ENTRY_LEN * MAX_SIGACK_ENTRIES;

/// The entries of a SIG-ACK: still in wire form (from [`crate::Repr::parse`]) or borrowed from
/// a slice (to emit). Equal when they yield the same entries.
#[derive(Clone, Copy)]
pub struct SigAcks<'a> {
    inner: Inner<'a>,
}

#[derive(Clone, Copy)]
enum Inner<'a> {
    /// Validated entries, a multiple of [`SIGACK_ENTRY_LEN`] bytes.
    Wire(&'a [u8]),
    Slice(&'a [SigAckEntry]),
}

impl<'a> SigAcks<'a> {
    /// Borrows entries to emit; [`crate::Repr::emit`] refuses none, more than
    /// [`MAX_SIGACK_ENTRIES`], or a path out of range.
    pub const fn from_slice(entries: &'a [SigAckEntry]) -> SigAcks<'a> {
        SigAcks {
            inner: Inner::Slice(entries),
        }
    }

    pub(crate) fn from_wire(entries: &'a [u8]) -> SigAcks<'a> {
        SigAcks {
            inner: Inner::Wire(entries),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self.inner {
            Inner::Wire(w) => w.len() / SIGACK_ENTRY_LEN,
            Inner::Slice(s) => s.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry at `index`.
    pub fn get(&self, index: usize) -> Option<SigAckEntry> {
        match self.inner {
            Inner::Wire(w) => w.chunks_exact(SIGACK_ENTRY_LEN).nth(index).and_then(decode),
            Inner::Slice(s) => s.get(index).copied(),
        }
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = SigAckEntry> + 'a {
        let this = *self;
        (0..this.len()).filter_map(move |i| this.get(i))
    }

    /// Reject what a version-1 SIG-ACK may not hold.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.is_empty() || self.len() > MAX_SIGACK_ENTRIES {
            return Err(Error::BadLength);
        }
        if let Some(e) = self.iter().find(|e| e.path.index() >= MAX_PATHS) {
            return Err(Error::BadPath(e.path.0));
        }
        Ok(())
    }

    /// Write the entries at the start of `out` (callers checked the length).
    pub(crate) fn write(&self, out: &mut [u8]) -> Result<(), Error> {
        let room = out
            .get_mut(..self.len() * SIGACK_ENTRY_LEN)
            .ok_or(Error::BufferTooSmall)?;
        for (e, chunk) in self.iter().zip(room.chunks_exact_mut(SIGACK_ENTRY_LEN)) {
            let mut bytes = [0u8; SIGACK_ENTRY_LEN];
            bytes[0] = e.path.0;
            bytes[4..12].copy_from_slice(&e.seq.to_be_bytes());
            bytes[12..].copy_from_slice(&e.arrival.as_nanos().to_be_bytes());
            chunk.copy_from_slice(&bytes);
        }
        Ok(())
    }
}

/// Validate wire entries: reserved bytes zero, paths in range.
pub(crate) fn validate(entries: &[u8]) -> Result<(), Error> {
    if entries.is_empty() || !entries.len().is_multiple_of(SIGACK_ENTRY_LEN) {
        return Err(Error::BadLength);
    }
    for chunk in entries.chunks_exact(SIGACK_ENTRY_LEN) {
        if chunk.get(1..4) != Some(&[0, 0, 0][..]) {
            return Err(Error::Reserved);
        }
        let path = chunk.first().copied().unwrap_or(u8::MAX);
        if usize::from(path) >= MAX_PATHS {
            return Err(Error::BadPath(path));
        }
    }
    Ok(())
}

fn decode(chunk: &[u8]) -> Option<SigAckEntry> {
    let [path, _, _, _, rest @ ..] = *chunk.first_chunk::<SIGACK_ENTRY_LEN>()?;
    let seq = u64::from_be_bytes(*rest.first_chunk::<8>()?);
    let arrival = u64::from_be_bytes(*rest.last_chunk::<8>()?);
    Some(SigAckEntry {
        path: PathId(path),
        seq,
        arrival: Instant::from_nanos(arrival),
    })
}

impl PartialEq for SigAcks<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for SigAcks<'_> {}

impl fmt::Debug for SigAcks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Repr, VERSION};
    use proptest::prelude::*;

    #[test]
    fn pinned_bytes() {
        let entries = [SigAckEntry {
            path: PathId(2),
            seq: 0x0102,
            arrival: Instant::from_nanos(0x0A0B),
        }];
        let repr = Repr::SigAck(SigAcks::from_slice(&entries));
        let bytes = repr.emit_to_vec().unwrap();
        let mut expected = vec![VERSION, 7, 1, 0, 2, 0, 0, 0];
        expected.extend_from_slice(&0x0102u64.to_be_bytes());
        expected.extend_from_slice(&0x0A0Bu64.to_be_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(Repr::parse_bytes(&bytes).unwrap(), repr);
    }

    #[test]
    fn malformed_sig_acks_are_refused() {
        let ok = Repr::SigAck(SigAcks::from_slice(&[SigAckEntry::default()]))
            .emit_to_vec()
            .unwrap();
        // Empty, truncated, too long, reserved bits, bad path, flags.
        assert_eq!(
            Repr::parse_bytes(&[VERSION, 7, 0, 0]),
            Err(Error::BadLength)
        );
        assert_eq!(
            Repr::parse_bytes(&ok[..ok.len() - 1]),
            Err(Error::Truncated)
        );
        let mut long = ok.clone();
        long.push(0);
        assert_eq!(Repr::parse_bytes(&long), Err(Error::BadLength));
        let mut reserved = ok.clone();
        reserved[5] = 1;
        assert_eq!(Repr::parse_bytes(&reserved), Err(Error::Reserved));
        let mut path = ok.clone();
        path[4] = 64;
        assert_eq!(Repr::parse_bytes(&path), Err(Error::BadPath(64)));
        let mut flags = ok;
        flags[3] = 1;
        assert_eq!(Repr::parse_bytes(&flags), Err(Error::Reserved));
        assert_eq!(
            Repr::SigAck(SigAcks::from_slice(&[])).emit_to_vec(),
            Err(Error::BadLength)
        );
        let too_many = vec![SigAckEntry::default(); MAX_SIGACK_ENTRIES + 1];
        assert_eq!(
            Repr::SigAck(SigAcks::from_slice(&too_many)).emit_to_vec(),
            Err(Error::BadLength)
        );
    }

    fn entry() -> impl Strategy<Value = SigAckEntry> {
        (0u8..64, any::<u64>(), any::<u64>()).prop_map(|(p, seq, a)| SigAckEntry {
            path: PathId(p),
            seq,
            arrival: Instant::from_nanos(a),
        })
    }

    proptest! {
        /// emit then parse gives the entries back, and the bytes re-emit identically.
        #[test]
        fn round_trip(entries in proptest::collection::vec(entry(), 1..=MAX_SIGACK_ENTRIES)) {
            let repr = Repr::SigAck(SigAcks::from_slice(&entries));
            let bytes = repr.emit_to_vec().unwrap();
            prop_assert_eq!(bytes.len(), repr.buffer_len());
            let parsed = Repr::parse_bytes(&bytes).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(&parsed.emit_to_vec().unwrap(), &bytes);
            if let Repr::SigAck(got) = parsed {
                prop_assert_eq!(got.iter().collect::<Vec<_>>(), entries);
            }
        }

        /// Any bytes after a SIG-ACK header parse or fail cleanly, never panic.
        #[test]
        fn any_bytes_are_survived(count in any::<u8>(), flags in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut bytes = vec![VERSION, 7, count, flags];
            bytes.extend(rest);
            if let Ok(Repr::SigAck(e)) = Repr::parse_bytes(&bytes) {
                prop_assert_eq!(e.len(), usize::from(count));
                prop_assert!(e.iter().all(|x| x.path.index() < MAX_PATHS));
            }
        }
    }
}

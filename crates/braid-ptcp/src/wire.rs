//! The pTCP segment format, version 1.
//!
//! The paper leaves the header format to its companion report (pTCP paper, end of section 3.2:
//! "we do not present ... packet header formats"); its one requirement is that a segment carry
//! both the micro-flow's own state (TCP-v's sequence and acknowledgement of *virtual* packets)
//! and the SM's (the stream offset of the data and the window advertisement of the one receive
//! buffer, section 3.2 "Flow Control"). One segment is one datagram on one path.
//!
//! smoltcp style: [`SegmentView`] is a zero-copy view with checked accessors,
//! [`Segment`] the parsed, validated meaning with [`Segment::parse`], [`Segment::buffer_len`]
//! and [`Segment::emit`]. Decoders never panic; the encoding is canonical (a segment that parses
//! re-emits to the same bytes).
//!
//! # Layout
//!
//! All integers big-endian.
//!
//! ```text
//!  offset size  field
//!    0     1    version = 1
//!    1     1    flags: SYN 0x01, SYN_ACK 0x02, ACK 0x04, FIN 0x08, FIN_ACK 0x10,
//!                      PROBE 0x20, VPKT 0x40; bit 7 reserved (0)
//!    2     1    flow id (< 128, `MAX_FLOWS`)
//!    3     1    SACK block count n (<= 4)
//!    4     8    vseq: this virtual packet's number in the flow's sequence space (VPKT)
//!   12     8    vack: the next virtual packet the sender of this segment expects (ACK)
//!   20     8    data_ack: the next stream byte the SM expects (ACK)
//!   28     4    window: bytes past data_ack the SM's receive buffer accepts (ACK)
//!   32     8    offset: stream offset of the payload; with FIN, the stream's final length
//!   40  16 n    SACK blocks: start u64, end u64 (virtual packets [start, end), start < end)
//! 40+16n ..     payload: every remaining byte, may be empty
//! ```
//!
//! Fields whose flag is clear are carried anyway (zero when unused): a fixed header keeps the
//! parser trivial and the round trip exact. A flag bit this version does not define must be
//! zero; the version byte comes first so that a later version (the tunnel's Noise session
//! around it, for one) can change everything after it.

use crate::{FlowId, VirtualSeq, MAX_FLOWS};

/// The segment format version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Length of one SACK block.
pub const SACK_BLOCK_LEN: usize = 16;
/// The most SACK blocks one segment carries (RFC 2018 fits 3-4 in TCP's option space).
pub const MAX_SACK_BLOCKS: usize = 4;

mod field {
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const FLOW: usize = 2;
    pub const SACK_COUNT: usize = 3;
    pub const VSEQ: usize = 4;
    pub const VACK: usize = 12;
    pub const DATA_ACK: usize = 20;
    pub const WINDOW: usize = 28;
    pub const OFFSET: usize = 32;
}

/// The flag bits of a segment (byte 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Open request of a micro-flow (section 3.2 "Connection Management").
    pub const SYN: Flags = Flags(0x01);
    /// Answer to a SYN.
    pub const SYN_ACK: Flags = Flags(0x02);
    /// `vack`, `data_ack`, `window` and the SACK blocks are meaningful.
    pub const ACK: Flags = Flags(0x04);
    /// The sender closed this micro-flow; `offset` is the final stream length.
    pub const FIN: Flags = Flags(0x08);
    /// The FIN of this micro-flow was received.
    pub const FIN_ACK: Flags = Flags(0x10);
    /// Asks for an immediate acknowledgement (window probe).
    pub const PROBE: Flags = Flags(0x20);
    /// The segment is a virtual packet: `vseq` is meaningful and must be acknowledged.
    pub const VPKT: Flags = Flags(0x40);
    const DEFINED: u8 = 0x7f;

    /// No flag.
    pub const fn empty() -> Flags {
        Flags(0)
    }
    /// The raw byte.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// The flags of a raw byte, or `None` if an undefined bit is set.
    pub const fn from_bits(bits: u8) -> Option<Flags> {
        if bits & !Self::DEFINED == 0 {
            Some(Flags(bits))
        } else {
            None
        }
    }
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// `self` with the flags of `other` added.
    #[must_use]
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// One SACK block: the virtual packets `[start, end)` were received.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SackBlock {
    /// First received virtual packet.
    pub start: VirtualSeq,
    /// One past the last.
    pub end: VirtualSeq,
}

/// A malformed segment or an emit into too small a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shorter than its header announces.
    #[error("segment truncated")]
    Truncated,
    /// The version byte is not [`VERSION`].
    #[error("unknown pTCP segment version {0} (this build speaks version {v})", v = VERSION)]
    UnknownVersion(u8),
    /// An undefined flag bit is set.
    #[error("reserved flag bits are non-zero")]
    Reserved,
    /// The flow id is not below [`MAX_FLOWS`].
    #[error("flow id {0} out of range")]
    BadFlow(u8),
    /// More than [`MAX_SACK_BLOCKS`] SACK blocks, an empty block, or a payload whose end
    /// overflows the stream offset.
    #[error("malformed SACK blocks or payload range")]
    Malformed,
    /// The buffer to emit into is shorter than [`Segment::buffer_len`].
    #[error("buffer too small for the segment")]
    BufferTooSmall,
}

/// A zero-copy view over the bytes of a segment.
#[derive(Debug, Clone, Copy)]
pub struct SegmentView<T: AsRef<[u8]>> {
    buffer: T,
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_be_bytes(s.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(s.try_into().ok()?))
}

impl<T: AsRef<[u8]>> SegmentView<T> {
    /// Wraps `buffer` without looking at it; accessors return `None` past its end.
    pub fn new_unchecked(buffer: T) -> Self {
        SegmentView { buffer }
    }

    /// Wraps `buffer` after checking the version, the flags, the flow id, the SACK blocks and
    /// the lengths, so that every accessor below returns `Some`.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let view = SegmentView { buffer };
        let b = view.buffer.as_ref();
        let version = *b.get(field::VERSION).ok_or(Error::Truncated)?;
        if version != VERSION {
            return Err(Error::UnknownVersion(version));
        }
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        view.flags().ok_or(Error::Reserved)?;
        let flow = view.flow_raw().ok_or(Error::Truncated)?;
        if usize::from(flow) >= MAX_FLOWS {
            return Err(Error::BadFlow(flow));
        }
        let n = usize::from(view.sack_count().ok_or(Error::Truncated)?);
        if n > MAX_SACK_BLOCKS {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + n * SACK_BLOCK_LEN {
            return Err(Error::Truncated);
        }
        for i in 0..n {
            let blk = view.sack_block(i).ok_or(Error::Truncated)?;
            if blk.start >= blk.end {
                return Err(Error::Malformed);
            }
        }
        let offset = view.offset().ok_or(Error::Truncated)?;
        let len = view.payload().ok_or(Error::Truncated)?.len() as u64;
        offset.checked_add(len).ok_or(Error::Malformed)?;
        Ok(view)
    }

    /// The flags, `None` if truncated or an undefined bit is set.
    pub fn flags(&self) -> Option<Flags> {
        Flags::from_bits(*self.buffer.as_ref().get(field::FLAGS)?)
    }
    fn flow_raw(&self) -> Option<u8> {
        self.buffer.as_ref().get(field::FLOW).copied()
    }
    /// The micro-flow the segment belongs to.
    pub fn flow(&self) -> Option<FlowId> {
        self.flow_raw().map(FlowId)
    }
    /// Number of SACK blocks.
    pub fn sack_count(&self) -> Option<u8> {
        self.buffer.as_ref().get(field::SACK_COUNT).copied()
    }
    /// The virtual packet number.
    pub fn vseq(&self) -> Option<VirtualSeq> {
        read_u64(self.buffer.as_ref(), field::VSEQ).map(VirtualSeq)
    }
    /// The cumulative virtual acknowledgement.
    pub fn vack(&self) -> Option<VirtualSeq> {
        read_u64(self.buffer.as_ref(), field::VACK).map(VirtualSeq)
    }
    /// The SM's cumulative stream acknowledgement.
    pub fn data_ack(&self) -> Option<u64> {
        read_u64(self.buffer.as_ref(), field::DATA_ACK)
    }
    /// The SM's window advertisement.
    pub fn window(&self) -> Option<u32> {
        read_u32(self.buffer.as_ref(), field::WINDOW)
    }
    /// The stream offset (final length with FIN).
    pub fn offset(&self) -> Option<u64> {
        read_u64(self.buffer.as_ref(), field::OFFSET)
    }
    /// SACK block `i` (no check against the count).
    pub fn sack_block(&self, i: usize) -> Option<SackBlock> {
        let at = HEADER_LEN.checked_add(i.checked_mul(SACK_BLOCK_LEN)?)?;
        let b = self.buffer.as_ref();
        Some(SackBlock {
            start: VirtualSeq(read_u64(b, at)?),
            end: VirtualSeq(read_u64(b, at + 8)?),
        })
    }
    /// The payload: every byte after the SACK blocks.
    pub fn payload(&self) -> Option<&[u8]> {
        let n = usize::from(self.sack_count()?);
        self.buffer.as_ref().get(HEADER_LEN + n * SACK_BLOCK_LEN..)
    }
}

/// The parsed meaning of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Flag bits.
    pub flags: Flags,
    /// The micro-flow.
    pub flow: FlowId,
    /// Virtual packet number (meaningful with [`Flags::VPKT`]).
    pub vseq: VirtualSeq,
    /// Cumulative virtual acknowledgement (with [`Flags::ACK`]).
    pub vack: VirtualSeq,
    /// SM cumulative acknowledgement (with [`Flags::ACK`]).
    pub data_ack: u64,
    /// SM window (with [`Flags::ACK`]).
    pub window: u32,
    /// Stream offset of the payload, or the final length with [`Flags::FIN`].
    pub offset: u64,
    /// SACK blocks in use: `sacks[..sack_len]`.
    pub sacks: [SackBlock; MAX_SACK_BLOCKS],
    /// How many of `sacks` are in use.
    pub sack_len: u8,
    /// The data.
    pub payload: &'a [u8],
}

const EMPTY_SACK: SackBlock = SackBlock {
    start: VirtualSeq(0),
    end: VirtualSeq(0),
};

impl<'a> Segment<'a> {
    /// A segment with every field zero and no payload.
    pub fn new(flow: FlowId, flags: Flags) -> Segment<'static> {
        Segment {
            flags,
            flow,
            vseq: VirtualSeq(0),
            vack: VirtualSeq(0),
            data_ack: 0,
            window: 0,
            offset: 0,
            sacks: [EMPTY_SACK; MAX_SACK_BLOCKS],
            sack_len: 0,
            payload: &[],
        }
    }

    /// The SACK blocks in use.
    pub fn sack_blocks(&self) -> &[SackBlock] {
        &self.sacks[..usize::from(self.sack_len).min(MAX_SACK_BLOCKS)]
    }

    /// Parses a checked view.
    pub fn parse(view: &SegmentView<&'a [u8]>) -> Result<Self, Error> {
        Self::parse_bytes(view.buffer)
    }

    /// Checks and parses `bytes`.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Self, Error> {
        let view = SegmentView::new_checked(bytes)?;
        let t = Error::Truncated;
        let n = view.sack_count().ok_or(t)?;
        let mut sacks = [EMPTY_SACK; MAX_SACK_BLOCKS];
        for (i, s) in sacks.iter_mut().enumerate().take(usize::from(n)) {
            *s = view.sack_block(i).ok_or(t)?;
        }
        let payload: &'a [u8] = bytes
            .get(HEADER_LEN + usize::from(n) * SACK_BLOCK_LEN..)
            .ok_or(t)?;
        Ok(Segment {
            flags: view.flags().ok_or(Error::Reserved)?,
            flow: view.flow().ok_or(t)?,
            vseq: view.vseq().ok_or(t)?,
            vack: view.vack().ok_or(t)?,
            data_ack: view.data_ack().ok_or(t)?,
            window: view.window().ok_or(t)?,
            offset: view.offset().ok_or(t)?,
            sacks,
            sack_len: n,
            payload,
        })
    }

    /// Bytes [`Segment::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + usize::from(self.sack_len) * SACK_BLOCK_LEN + self.payload.len()
    }

    /// Writes the segment into the front of `buf`; returns its length.
    ///
    /// # Panics
    /// If the segment is not valid (more than [`MAX_SACK_BLOCKS`], a flow id out of range, an
    /// empty SACK block): the connection builds only valid ones.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        assert!(
            usize::from(self.sack_len) <= MAX_SACK_BLOCKS,
            "too many SACK blocks"
        );
        assert!(usize::from(self.flow.0) < MAX_FLOWS, "flow id out of range");
        let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = self.flags.bits();
        out[field::FLOW] = self.flow.0;
        out[field::SACK_COUNT] = self.sack_len;
        out[field::VSEQ..field::VSEQ + 8].copy_from_slice(&self.vseq.0.to_be_bytes());
        out[field::VACK..field::VACK + 8].copy_from_slice(&self.vack.0.to_be_bytes());
        out[field::DATA_ACK..field::DATA_ACK + 8].copy_from_slice(&self.data_ack.to_be_bytes());
        out[field::WINDOW..field::WINDOW + 4].copy_from_slice(&self.window.to_be_bytes());
        out[field::OFFSET..field::OFFSET + 8].copy_from_slice(&self.offset.to_be_bytes());
        let mut at = HEADER_LEN;
        for s in self.sack_blocks() {
            assert!(s.start < s.end, "empty SACK block");
            out[at..at + 8].copy_from_slice(&s.start.0.to_be_bytes());
            out[at + 8..at + 16].copy_from_slice(&s.end.0.to_be_bytes());
            at += SACK_BLOCK_LEN;
        }
        out[at..].copy_from_slice(self.payload);
        Ok(len)
    }

    /// [`Segment::emit`] into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.buffer_len()];
        let n = self.emit(&mut v).unwrap_or(0);
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Segment<'static> {
        let mut s = Segment::new(FlowId(3), Flags::VPKT.with(Flags::ACK));
        s.vseq = VirtualSeq(9);
        s.vack = VirtualSeq(4);
        s.data_ack = 1000;
        s.window = 65536;
        s.offset = 2400;
        s.sacks[0] = SackBlock {
            start: VirtualSeq(6),
            end: VirtualSeq(8),
        };
        s.sack_len = 1;
        s.payload = b"hello";
        s
    }

    #[test]
    fn layout_vector() {
        let bytes = sample().to_vec();
        assert_eq!(bytes.len(), HEADER_LEN + SACK_BLOCK_LEN + 5);
        assert_eq!(&bytes[..4], &[VERSION, 0x44, 3, 1]);
        assert_eq!(&bytes[4..12], &9u64.to_be_bytes());
        assert_eq!(&bytes[28..32], &65536u32.to_be_bytes());
        assert_eq!(&bytes[40..48], &6u64.to_be_bytes());
        assert_eq!(&bytes[56..], b"hello");
        assert_eq!(Segment::parse_bytes(&bytes), Ok(sample()));
    }

    #[test]
    fn rejects() {
        let good = sample().to_vec();
        assert_eq!(Segment::parse_bytes(&[]), Err(Error::Truncated));
        assert_eq!(Segment::parse_bytes(&[2]), Err(Error::UnknownVersion(2)));
        assert_eq!(Segment::parse_bytes(&good[..39]), Err(Error::Truncated));
        assert_eq!(Segment::parse_bytes(&good[..50]), Err(Error::Truncated));
        let mut b = good.clone();
        b[1] = 0x80;
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Reserved));
        let mut b = good.clone();
        b[2] = 128;
        assert_eq!(Segment::parse_bytes(&b), Err(Error::BadFlow(128)));
        b[2] = 127;
        assert!(
            Segment::parse_bytes(&b).is_ok(),
            "the largest flow id parses"
        );
        let mut b = good.clone();
        b[3] = 5;
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Malformed));
        let mut b = good.clone();
        b[48..56].copy_from_slice(&6u64.to_be_bytes());
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Malformed));
        let mut b = good;
        b[32..40].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Malformed));
        let mut small = [0u8; 10];
        assert_eq!(sample().emit(&mut small), Err(Error::BufferTooSmall));
    }

    /// Flags, flow, four u64 fields (and a spare), window, SACK (start, length) pairs, payload.
    type Fields = (u8, u8, [u64; 5], u32, Vec<(u64, u64)>, Vec<u8>);

    fn arb_segment() -> impl Strategy<Value = Fields> {
        (
            0u8..0x80,
            0u8..MAX_FLOWS as u8,
            any::<[u64; 5]>(),
            any::<u32>(),
            prop::collection::vec((any::<u64>(), 1u64..1000), 0..=MAX_SACK_BLOCKS),
            prop::collection::vec(any::<u8>(), 0..64),
        )
    }

    proptest! {
        #[test]
        fn round_trip((flags, flow, f, window, sacks, payload) in arb_segment()) {
            let mut s = Segment::new(FlowId(flow), Flags::from_bits(flags).unwrap());
            s.vseq = VirtualSeq(f[0]);
            s.vack = VirtualSeq(f[1]);
            s.data_ack = f[2];
            s.window = window;
            s.offset = f[3] % (u64::MAX - 100);
            for (i, (start, len)) in sacks.iter().enumerate() {
                let start = start % (u64::MAX - 1000);
                s.sacks[i] = SackBlock { start: VirtualSeq(start), end: VirtualSeq(start + len) };
            }
            s.sack_len = sacks.len() as u8;
            s.payload = &payload;
            let bytes = s.to_vec();
            let back = Segment::parse_bytes(&bytes).unwrap();
            prop_assert_eq!(back, s);
            prop_assert_eq!(back.to_vec(), bytes);
        }

        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(s) = Segment::parse_bytes(&bytes) {
                prop_assert_eq!(s.to_vec(), bytes);
            }
        }

        #[test]
        fn never_panics_near_valid(mut bytes in prop::collection::vec(any::<u8>(), 40..120), n in 0u8..6) {
            bytes[0] = VERSION;
            bytes[1] &= 0x7f;
            bytes[2] &= 0x3f;
            bytes[3] = n;
            if let Ok(s) = Segment::parse_bytes(&bytes) {
                prop_assert_eq!(s.to_vec(), bytes);
            }
        }
    }
}

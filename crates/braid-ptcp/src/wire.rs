//! The pTCP segment format, version 2.
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
//! All integers big-endian. A fixed prefix, then only the fields whose flag is set, in this
//! order:
//!
//! ```text
//!  size  field                                                      present
//!   1    version = 2                                                always
//!   1    flags: SYN 0x01, SYN_ACK 0x02, ACK 0x04, FIN 0x08,          always
//!               FIN_ACK 0x10, PROBE 0x20, VPKT 0x40, RST 0x80
//!   1    flow id (< 128, `MAX_FLOWS`)                               always
//!   1    SACK block count n (<= 4; 0 without ACK)                   always
//!   4    vseq: this virtual packet's number, low 32 bits            VPKT
//!   4    offset: stream offset of the payload, low 32 bits;         VPKT or FIN
//!        with FIN, the stream's final length
//!   4    vack: the next virtual packet expected, low 32 bits        ACK
//!   4    data_ack: the next stream byte the SM expects, low 32 bits ACK
//!   4    window: bytes past data_ack the receive buffer accepts     ACK
//!  8 n   SACK blocks: start, end (virtual packets [start, end),     ACK
//!        low 32 bits each, start != end)
//!   ..   payload: every remaining byte, may be empty
//! ```
//!
//! A reset (RST) is the prefix alone: RST and no other flag, flow 0, no SACK blocks, no
//! payload (4 bytes). It tells the peer that this end holds no such connection (a daemon that
//! restarted, a connection it forgot); the peer aborts. It rides the session like every
//! segment, authenticated, so nobody else can forge one.
//!
//! A bulk data segment (VPKT, nothing new to acknowledge) is [`DATA_HEADER_LEN`] = 12 bytes of
//! header; version 1 carried every field always, 40 bytes. A pure ACK is 16 bytes plus 8 per
//! SACK block.
//!
//! # Truncated numbers
//!
//! Virtual sequence numbers (vseq, vack, SACK edges) and stream positions (offset, data_ack)
//! are `u64` in the state machines and travel as their low 32 bits ([`truncate`]). The receiver
//! of a segment recovers the full value as the one nearest to what it expects ([`expand`], the
//! packet-number decoding of RFC 9000 appendix A.3 with a 32-bit field), which is exact
//! whenever the true value lies within 2^31 of the expectation:
//!
//! - vseq against the flow's next expected virtual packet: a receiver accepts at most
//!   `MAX_VIRTUAL_WINDOW` = 2^16 packets past it;
//! - vack and SACK edges against the flow's oldest unacknowledged packet: a sender has at most
//!   2^16 virtual packets outstanding;
//! - offset against the receive buffer's cumulative acknowledgement, and data_ack against the
//!   sender's: data is only ever sent inside the advertised window, and the window is at most
//!   [`MAX_WINDOW`] = 2^30 bytes (both ends clamp it), as TCP's window scaling caps its window
//!   at 2^30 so that its 32-bit sequence space stays unambiguous (RFC 7323 section 2.3).
//!
//! What the expectation cannot cover is a segment that lingers in the network while its
//! sequence space moves on by 2^31 (2 GiB of stream, or 2^31 virtual packets of one flow): the
//! same maximum-segment-lifetime assumption TCP's 32-bit sequence numbers make (RFC 9293
//! section 3.4.1). A 64-bit offset would cost 4 more bytes on every data segment to cover it.
//!
//! A flag bit this version does not define must be zero, as must the fields of an absent flag
//! (they are not on the wire); the version byte comes first so that a later version can change
//! everything after it.

use crate::{FlowId, VirtualSeq, MAX_FLOWS};

/// The segment format version this crate reads and writes.
pub const VERSION: u8 = 2;
/// Length of the fixed prefix: version, flags, flow id, SACK block count.
pub const PREFIX_LEN: usize = 4;
/// Length of a truncated number (vseq, offset, vack, data_ack) and of the window.
pub const NUMBER_LEN: usize = 4;
/// Length of the acknowledgement fields (vack, data_ack, window), present with [`Flags::ACK`].
pub const ACK_LEN: usize = 3 * NUMBER_LEN;
/// Header of a data segment without acknowledgement fields: prefix, vseq and offset.
pub const DATA_HEADER_LEN: usize = PREFIX_LEN + 2 * NUMBER_LEN;
/// Length of one SACK block.
pub const SACK_BLOCK_LEN: usize = 2 * NUMBER_LEN;
/// The most SACK blocks one segment carries (RFC 2018 fits 3-4 in TCP's option space).
pub const MAX_SACK_BLOCKS: usize = 4;
/// The largest receive window, in bytes, that a connection advertises or believes: a quarter
/// of the 32-bit space offset and data_ack travel in, as TCP's (see the module docs).
pub const MAX_WINDOW: u64 = 1 << 30;

/// The low 32 bits of a sequence number or stream position, as they travel.
pub const fn truncate(full: u64) -> u32 {
    full as u32
}

/// The full value whose low 32 bits are `truncated` and that lies nearest to `expected`
/// (RFC 9000 appendix A.3 with a 32-bit field): exact when the true value is within 2^31 of
/// `expected`. Never below 0 nor above `u64::MAX`.
pub const fn expand(truncated: u32, expected: u64) -> u64 {
    const WIN: u64 = 1 << 32;
    const HWIN: u64 = WIN / 2;
    let candidate = (expected & !(WIN - 1)) | truncated as u64;
    if expected >= HWIN && candidate <= expected - HWIN && candidate <= u64::MAX - WIN {
        candidate + WIN
    } else if expected <= u64::MAX - HWIN && candidate > expected + HWIN && candidate >= WIN {
        candidate - WIN
    } else {
        candidate
    }
}

/// The flag bits of a segment (byte 1); they also say which fields are on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Open request of a micro-flow (section 3.2 "Connection Management").
    pub const SYN: Flags = Flags(0x01);
    /// Answer to a SYN.
    pub const SYN_ACK: Flags = Flags(0x02);
    /// `vack`, `data_ack`, `window` and the SACK blocks are on the wire.
    pub const ACK: Flags = Flags(0x04);
    /// The sender closed this micro-flow; `offset` is on the wire and is the final stream
    /// length.
    pub const FIN: Flags = Flags(0x08);
    /// The FIN of this micro-flow was received.
    pub const FIN_ACK: Flags = Flags(0x10);
    /// Asks for an immediate acknowledgement (window probe).
    pub const PROBE: Flags = Flags(0x20);
    /// The segment is a virtual packet: `vseq` and `offset` are on the wire, and it must be
    /// acknowledged.
    pub const VPKT: Flags = Flags(0x40);
    /// This end holds no such connection: abort it. Alone, on a bare prefix.
    pub const RST: Flags = Flags(0x80);

    /// No flag.
    pub const fn empty() -> Flags {
        Flags(0)
    }
    /// The raw byte.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// The flags of a raw byte. Every bit is a flag since RST took bit 7, so this is always
    /// `Some`; it stays an `Option` for a later version that leaves bits undefined.
    pub const fn from_bits(bits: u8) -> Option<Flags> {
        Some(Flags(bits))
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

/// One SACK block: the virtual packets `[start, end)` were received. As parsed, both edges are
/// the truncated wire values (see the module docs), so `start > end` is possible until the
/// flow expands them.
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
    /// More than [`MAX_SACK_BLOCKS`] SACK blocks, SACK blocks without [`Flags::ACK`], or an
    /// empty block.
    #[error("malformed SACK blocks")]
    Malformed,
    /// The buffer to emit into is shorter than [`Segment::buffer_len`].
    #[error("buffer too small for the segment")]
    BufferTooSmall,
}

/// Where the fields of a segment with `flags` and `sacks` SACK blocks start: (vseq, offset,
/// acknowledgement fields, SACK blocks, payload); `None` for a field that is not on the wire.
struct Layout {
    vseq: Option<usize>,
    offset: Option<usize>,
    ack: Option<usize>,
    sacks: usize,
    payload: usize,
}

impl Layout {
    const fn of(flags: Flags, sacks: usize) -> Layout {
        let mut at = PREFIX_LEN;
        let vseq = if flags.contains(Flags::VPKT) {
            at += NUMBER_LEN;
            Some(at - NUMBER_LEN)
        } else {
            None
        };
        let offset = if flags.contains(Flags::VPKT) || flags.contains(Flags::FIN) {
            at += NUMBER_LEN;
            Some(at - NUMBER_LEN)
        } else {
            None
        };
        let ack = if flags.contains(Flags::ACK) {
            at += ACK_LEN;
            Some(at - ACK_LEN)
        } else {
            None
        };
        Layout {
            vseq,
            offset,
            ack,
            sacks: at,
            payload: at + sacks * SACK_BLOCK_LEN,
        }
    }
}

/// Bytes of header (everything before the payload) of a segment with `flags` and `sacks` SACK
/// blocks.
pub const fn header_len(flags: Flags, sacks: usize) -> usize {
    Layout::of(flags, sacks).payload
}

/// A zero-copy view over the bytes of a segment.
#[derive(Debug, Clone, Copy)]
pub struct SegmentView<T: AsRef<[u8]>> {
    buffer: T,
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(NUMBER_LEN)?)?;
    Some(u32::from_be_bytes(s.try_into().ok()?))
}

fn write_u32(out: &mut [u8], at: Option<usize>, v: u32) {
    if let Some(s) = at.and_then(|at| out.get_mut(at..at + NUMBER_LEN)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> SegmentView<T> {
    /// Wraps `buffer` without looking at it; accessors return `None` past its end.
    pub fn new_unchecked(buffer: T) -> Self {
        SegmentView { buffer }
    }

    /// Wraps `buffer` after checking the version, the flags, the flow id, the SACK blocks and
    /// the lengths, so that every accessor below returns `Some` for the fields the flags put on
    /// the wire.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let view = SegmentView { buffer };
        let b = view.buffer.as_ref();
        let version = *b.first().ok_or(Error::Truncated)?;
        if version != VERSION {
            return Err(Error::UnknownVersion(version));
        }
        if b.len() < PREFIX_LEN {
            return Err(Error::Truncated);
        }
        let flags = view.flags().ok_or(Error::Reserved)?;
        let flow = view.flow_raw().ok_or(Error::Truncated)?;
        if usize::from(flow) >= MAX_FLOWS {
            return Err(Error::BadFlow(flow));
        }
        let n = usize::from(view.sack_count().ok_or(Error::Truncated)?);
        if n > MAX_SACK_BLOCKS || (n > 0 && !flags.contains(Flags::ACK)) {
            return Err(Error::Malformed);
        }
        if b.len() < header_len(flags, n) {
            return Err(Error::Truncated);
        }
        // A reset is canonical: the flag alone, flow 0, nothing after the prefix.
        if flags.contains(Flags::RST)
            && (flags != Flags::RST || flow != 0 || n != 0 || b.len() != PREFIX_LEN)
        {
            return Err(Error::Malformed);
        }
        for i in 0..n {
            let blk = view.sack_block(i).ok_or(Error::Truncated)?;
            if blk.start == blk.end {
                return Err(Error::Malformed);
            }
        }
        Ok(view)
    }

    fn layout(&self) -> Option<Layout> {
        Some(Layout::of(self.flags()?, usize::from(self.sack_count()?)))
    }
    fn number(&self, at: Option<usize>) -> Option<u32> {
        read_u32(self.buffer.as_ref(), at?)
    }
    /// The flags, `None` if truncated or an undefined bit is set.
    pub fn flags(&self) -> Option<Flags> {
        Flags::from_bits(*self.buffer.as_ref().get(1)?)
    }
    fn flow_raw(&self) -> Option<u8> {
        self.buffer.as_ref().get(2).copied()
    }
    /// The micro-flow the segment belongs to.
    pub fn flow(&self) -> Option<FlowId> {
        self.flow_raw().map(FlowId)
    }
    /// Number of SACK blocks.
    pub fn sack_count(&self) -> Option<u8> {
        self.buffer.as_ref().get(3).copied()
    }
    /// The virtual packet number, truncated (with [`Flags::VPKT`]).
    pub fn vseq(&self) -> Option<u32> {
        self.number(self.layout()?.vseq)
    }
    /// The stream offset (final length with FIN), truncated (with [`Flags::VPKT`] or
    /// [`Flags::FIN`]).
    pub fn offset(&self) -> Option<u32> {
        self.number(self.layout()?.offset)
    }
    /// The cumulative virtual acknowledgement, truncated (with [`Flags::ACK`]).
    pub fn vack(&self) -> Option<u32> {
        self.number(self.layout()?.ack)
    }
    /// The SM's cumulative stream acknowledgement, truncated (with [`Flags::ACK`]).
    pub fn data_ack(&self) -> Option<u32> {
        self.number(self.layout()?.ack.map(|a| a + NUMBER_LEN))
    }
    /// The SM's window advertisement (with [`Flags::ACK`]).
    pub fn window(&self) -> Option<u32> {
        self.number(self.layout()?.ack.map(|a| a + 2 * NUMBER_LEN))
    }
    /// SACK block `i`, truncated edges (no check against the count).
    pub fn sack_block(&self, i: usize) -> Option<SackBlock> {
        let at = self
            .layout()?
            .sacks
            .checked_add(i.checked_mul(SACK_BLOCK_LEN)?)?;
        let b = self.buffer.as_ref();
        Some(SackBlock {
            start: VirtualSeq(read_u32(b, at)?.into()),
            end: VirtualSeq(read_u32(b, at + NUMBER_LEN)?.into()),
        })
    }
    /// The payload: every byte after the header.
    pub fn payload(&self) -> Option<&[u8]> {
        self.buffer.as_ref().get(self.layout()?.payload..)
    }
}

/// The meaning of a segment.
///
/// Built by the SM with full 64-bit numbers; [`Segment::emit`] writes their low 32 bits. As
/// parsed, vseq, offset, vack, data_ack and the SACK edges are the truncated wire values
/// (below 2^32): the SM and the flow [`expand`] them against their state before use. Fields
/// whose flag is clear are not on the wire: emit ignores them, parse leaves them zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Flag bits.
    pub flags: Flags,
    /// The micro-flow.
    pub flow: FlowId,
    /// Virtual packet number (with [`Flags::VPKT`]).
    pub vseq: VirtualSeq,
    /// Cumulative virtual acknowledgement (with [`Flags::ACK`]).
    pub vack: VirtualSeq,
    /// SM cumulative acknowledgement (with [`Flags::ACK`]).
    pub data_ack: u64,
    /// SM window (with [`Flags::ACK`]).
    pub window: u32,
    /// Stream offset of the payload, or the final length with [`Flags::FIN`] (with
    /// [`Flags::VPKT`] or [`Flags::FIN`]).
    pub offset: u64,
    /// SACK blocks in use: `sacks[..sack_len]` (with [`Flags::ACK`]).
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
    /// The reset segment's bytes: "this end holds no such connection".
    pub const RESET: [u8; PREFIX_LEN] = [VERSION, Flags::RST.bits(), 0, 0];

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

    /// Checks and parses `bytes`; the numbers are the truncated wire values (see [`Segment`]).
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Self, Error> {
        let view = SegmentView::new_checked(bytes)?;
        let t = Error::Truncated;
        let flags = view.flags().ok_or(Error::Reserved)?;
        let n = view.sack_count().ok_or(t)?;
        let mut seg = Segment::new(view.flow().ok_or(t)?, flags);
        for (i, s) in seg.sacks.iter_mut().enumerate().take(usize::from(n)) {
            *s = view.sack_block(i).ok_or(t)?;
        }
        seg.sack_len = n;
        if flags.contains(Flags::VPKT) {
            seg.vseq = VirtualSeq(view.vseq().ok_or(t)?.into());
        }
        if flags.contains(Flags::VPKT) || flags.contains(Flags::FIN) {
            seg.offset = view.offset().ok_or(t)?.into();
        }
        if flags.contains(Flags::ACK) {
            seg.vack = VirtualSeq(view.vack().ok_or(t)?.into());
            seg.data_ack = view.data_ack().ok_or(t)?.into();
            seg.window = view.window().ok_or(t)?;
        }
        seg.payload = bytes.get(header_len(flags, usize::from(n))..).ok_or(t)?;
        Ok(seg)
    }

    /// The SACK blocks that go on the wire: none without [`Flags::ACK`].
    fn wire_sacks(&self) -> &[SackBlock] {
        if self.flags.contains(Flags::ACK) {
            self.sack_blocks()
        } else {
            &[]
        }
    }

    /// Bytes of header [`Segment::emit`] writes in front of the payload.
    pub fn header_len(&self) -> usize {
        header_len(self.flags, self.wire_sacks().len())
    }

    /// Bytes [`Segment::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Writes the segment into the front of `buf`; returns its length. Numbers go out as their
    /// low 32 bits; fields whose flag is clear are left out.
    ///
    /// # Panics
    /// If the segment is not valid (more than [`MAX_SACK_BLOCKS`], a flow id out of range, a
    /// SACK block whose edges are equal in their low 32 bits): the connection builds only
    /// valid ones.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        assert!(
            usize::from(self.sack_len) <= MAX_SACK_BLOCKS,
            "too many SACK blocks"
        );
        let n = self.wire_sacks().len();
        assert!(usize::from(self.flow.0) < MAX_FLOWS, "flow id out of range");
        let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        let at = Layout::of(self.flags, n);
        out[..PREFIX_LEN].copy_from_slice(&[VERSION, self.flags.bits(), self.flow.0, n as u8]);
        write_u32(out, at.vseq, truncate(self.vseq.0));
        write_u32(out, at.offset, truncate(self.offset));
        write_u32(out, at.ack, truncate(self.vack.0));
        write_u32(out, at.ack.map(|a| a + NUMBER_LEN), truncate(self.data_ack));
        write_u32(out, at.ack.map(|a| a + 2 * NUMBER_LEN), self.window);
        for (i, s) in self.wire_sacks().iter().enumerate() {
            let (start, end) = (truncate(s.start.0), truncate(s.end.0));
            assert!(start != end, "empty SACK block");
            let b = at.sacks + i * SACK_BLOCK_LEN;
            write_u32(out, Some(b), start);
            write_u32(out, Some(b + NUMBER_LEN), end);
        }
        out[at.payload..].copy_from_slice(self.payload);
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

    fn block(start: u64, end: u64) -> SackBlock {
        SackBlock {
            start: VirtualSeq(start),
            end: VirtualSeq(end),
        }
    }

    /// A data segment that also acknowledges, with one SACK block.
    fn sample() -> Segment<'static> {
        let mut s = Segment::new(FlowId(3), Flags::VPKT.with(Flags::ACK));
        s.vseq = VirtualSeq(9);
        s.vack = VirtualSeq(4);
        s.data_ack = 1000;
        s.window = 65536;
        s.offset = 2400;
        s.sacks[0] = block(6, 8);
        s.sack_len = 1;
        s.payload = b"hello";
        s
    }

    #[test]
    fn a_reset_is_the_bare_prefix_and_nothing_else() {
        let r = Segment::parse_bytes(&Segment::RESET).unwrap();
        assert_eq!(r.flags, Flags::RST);
        assert_eq!(Segment::new(FlowId(0), Flags::RST).to_vec(), Segment::RESET);
        for bad in [
            &[VERSION, 0x80, 1, 0][..],
            &[VERSION, 0x80 | 0x04, 0, 0][..],
            &[VERSION, 0x80, 0, 0, 7][..],
            &[VERSION, 0x80, 0, 1][..],
        ] {
            assert!(Segment::parse_bytes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bulk_data_segment_is_twelve_bytes_of_header() {
        let mut s = Segment::new(FlowId(3), Flags::VPKT);
        s.vseq = VirtualSeq(9);
        s.offset = 2400;
        s.payload = b"hello";
        let bytes = s.to_vec();
        assert_eq!(DATA_HEADER_LEN, 12);
        assert_eq!(s.header_len(), DATA_HEADER_LEN);
        assert_eq!(
            bytes,
            [
                &[VERSION, 0x40, 3, 0, 0, 0, 0, 9, 0, 0, 0x09, 0x60][..],
                b"hello"
            ]
            .concat()
        );
        assert_eq!(Segment::parse_bytes(&bytes), Ok(s));
    }

    #[test]
    fn layout_vector() {
        let bytes = sample().to_vec();
        assert_eq!(bytes.len(), DATA_HEADER_LEN + ACK_LEN + SACK_BLOCK_LEN + 5);
        assert_eq!(&bytes[..4], &[VERSION, 0x44, 3, 1]);
        assert_eq!(&bytes[4..8], &9u32.to_be_bytes());
        assert_eq!(&bytes[8..12], &2400u32.to_be_bytes());
        assert_eq!(&bytes[12..16], &4u32.to_be_bytes());
        assert_eq!(&bytes[16..20], &1000u32.to_be_bytes());
        assert_eq!(&bytes[20..24], &65536u32.to_be_bytes());
        assert_eq!(&bytes[24..32], &[0, 0, 0, 6, 0, 0, 0, 8]);
        assert_eq!(&bytes[32..], b"hello");
        assert_eq!(Segment::parse_bytes(&bytes), Ok(sample()));
    }

    #[test]
    fn only_flagged_fields_travel() {
        // A pure ACK: prefix and the acknowledgement fields.
        let mut ack = Segment::new(FlowId(1), Flags::ACK);
        ack.vack = VirtualSeq(7);
        ack.data_ack = 70;
        ack.window = 5;
        assert_eq!(
            ack.to_vec(),
            [2, 0x04, 1, 0, 0, 0, 0, 7, 0, 0, 0, 70, 0, 0, 0, 5]
        );
        // A SYN: the prefix alone; fields of absent flags are not written and parse as zero.
        let mut syn = Segment::new(FlowId(1), Flags::SYN);
        syn.vseq = VirtualSeq(99);
        syn.offset = 99;
        assert_eq!(syn.to_vec(), [2, 0x01, 1, 0]);
        assert_eq!(
            Segment::parse_bytes(&syn.to_vec()),
            Ok(Segment::new(FlowId(1), Flags::SYN))
        );
        // A FIN carries the final length, but no vseq.
        let mut fin = Segment::new(FlowId(2), Flags::FIN);
        fin.offset = 0x1_0000_0005;
        assert_eq!(fin.to_vec(), [2, 0x08, 2, 0, 0, 0, 0, 5]);
        for (flags, len) in [
            (Flags::SYN, 4),
            (Flags::VPKT, 12),
            (Flags::FIN, 8),
            (Flags::ACK, 16),
            (Flags::VPKT.with(Flags::ACK), 24),
            (Flags::VPKT.with(Flags::FIN).with(Flags::ACK), 24),
        ] {
            assert_eq!(header_len(flags, 0), len, "{flags:?}");
        }
        assert_eq!(header_len(Flags::ACK, 4), 16 + 32);
    }

    #[test]
    fn numbers_travel_as_their_low_32_bits() {
        let mut s = sample();
        s.vseq = VirtualSeq((5 << 32) + 9);
        s.offset = (1 << 40) + 2400;
        s.vack = VirtualSeq((5 << 32) + 4);
        s.data_ack = (1 << 40) + 1000;
        // A block across a 2^32 boundary: its wire edges are out of order.
        s.sacks[0] = block((1 << 32) - 1, (1 << 32) + 1);
        let bytes = s.to_vec();
        let mut same = sample();
        same.sacks[0] = block(u64::from(u32::MAX), 1);
        assert_eq!(bytes, same.to_vec());
        let back = Segment::parse_bytes(&bytes).unwrap();
        assert_eq!(back.sacks[0], block(u64::from(u32::MAX), 1));
        assert_eq!(expand(truncate(back.offset), 1 << 40), (1 << 40) + 2400);
    }

    #[test]
    fn rejects() {
        let good = sample().to_vec();
        assert_eq!(Segment::parse_bytes(&[]), Err(Error::Truncated));
        assert_eq!(Segment::parse_bytes(&[1]), Err(Error::UnknownVersion(1)));
        assert_eq!(Segment::parse_bytes(&[2, 0, 0]), Err(Error::Truncated));
        for cut in [4, 11, 23, 31] {
            assert_eq!(
                Segment::parse_bytes(&good[..cut]),
                Err(Error::Truncated),
                "{cut}"
            );
        }
        let mut b = good.clone();
        // RST is a flag of its own: with any other it is malformed.
        b[1] = 0x80 | 0x44;
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Malformed));
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
        // SACK blocks without ACK.
        assert_eq!(
            Segment::parse_bytes(&[2, 0x40, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]),
            Err(Error::Malformed)
        );
        // An empty block.
        let mut b = good;
        b[28..32].copy_from_slice(&6u32.to_be_bytes());
        assert_eq!(Segment::parse_bytes(&b), Err(Error::Malformed));
        let mut small = [0u8; 10];
        assert_eq!(sample().emit(&mut small), Err(Error::BufferTooSmall));
    }

    #[test]
    fn expand_near_the_expectation() {
        assert_eq!(expand(0, 0), 0);
        assert_eq!(expand(5, 3), 5);
        // Just behind the expectation, across a 2^32 boundary.
        assert_eq!(expand(u32::MAX, 1 << 32), (1 << 32) - 1);
        assert_eq!(expand(u32::MAX - 9, (1 << 32) + 5), (1 << 32) - 10);
        // Just ahead, across the boundary.
        assert_eq!(expand(3, (1 << 32) - 2), (1 << 32) + 3);
        assert_eq!(expand(0, u64::from(u32::MAX)), 1 << 32);
        // RFC 9000 appendix A.3's example, scaled: nearest within half the space.
        assert_eq!(expand(0x8000_0001, 1 << 32), 0x8000_0001);
        assert_eq!(expand(0x7fff_ffff, 1 << 32), (1 << 32) + 0x7fff_ffff);
        // The largest distances both ways (2^31 behind is the tie, taken ahead).
        let e = 7 << 32;
        assert_eq!(expand(truncate(e + (1 << 31)), e), e + (1 << 31));
        assert_eq!(expand(truncate(e - (1 << 31) + 1), e), e - (1 << 31) + 1);
        assert_eq!(expand(truncate(e - (1 << 31)), e), e + (1 << 31));
        // Never below zero nor past u64::MAX.
        assert_eq!(expand(u32::MAX, 0), u64::from(u32::MAX));
        assert_eq!(expand(u32::MAX, 10), u64::from(u32::MAX));
        assert_eq!(expand(0, u64::MAX), u64::MAX - u64::from(u32::MAX));
        assert_eq!(expand(u32::MAX, u64::MAX), u64::MAX);
        assert_eq!(expand(0, u64::MAX - 5), u64::MAX - u64::from(u32::MAX));
    }

    /// Flags, flow, four numbers, window, SACK (start, length) pairs, payload.
    type Fields = (u8, u8, [u64; 4], u32, Vec<(u64, u64)>, Vec<u8>);

    fn arb_segment() -> impl Strategy<Value = Fields> {
        (
            0u8..0x80,
            0u8..MAX_FLOWS as u8,
            any::<[u64; 4]>(),
            any::<u32>(),
            prop::collection::vec((any::<u64>(), 1u64..1000), 0..=MAX_SACK_BLOCKS),
            prop::collection::vec(any::<u8>(), 0..64),
        )
    }

    /// The segment the fields describe, numbers masked by `mask`; blocks only with ACK.
    fn build<'a>(fields: &'a Fields, mask: u64) -> Segment<'a> {
        let (flags, flow, f, window, sacks, payload) = fields;
        let flags = Flags::from_bits(*flags).unwrap();
        let mut s = Segment::new(FlowId(*flow), flags);
        if flags.contains(Flags::VPKT) {
            s.vseq = VirtualSeq(f[0] & mask);
        }
        if flags.contains(Flags::VPKT) || flags.contains(Flags::FIN) {
            s.offset = f[1] & mask;
        }
        if flags.contains(Flags::ACK) {
            s.vack = VirtualSeq(f[2] & mask);
            s.data_ack = f[3] & mask;
            s.window = *window;
            for (i, (start, len)) in sacks.iter().enumerate() {
                let start = start & mask;
                s.sacks[i] = block(start, (start + len) & mask);
            }
            s.sack_len = sacks.len() as u8;
        }
        s.payload = payload;
        s
    }

    proptest! {
        #[test]
        fn round_trip(fields in arb_segment()) {
            // Numbers below 2^32 come back as they went.
            let s = build(&fields, u64::from(u32::MAX));
            let bytes = s.to_vec();
            prop_assert_eq!(bytes.len(), s.buffer_len());
            let back = Segment::parse_bytes(&bytes).unwrap();
            prop_assert_eq!(back, s);
            prop_assert_eq!(back.to_vec(), bytes);
        }

        #[test]
        fn round_trip_of_full_numbers_by_expansion(
            fields in arb_segment(),
            skew in prop::array::uniform4(-(1i64 << 31) + 1..(1i64 << 31)),
        ) {
            // Full 64-bit numbers come back once expanded against any expectation within
            // 2^31 of them (the wrap of u64 aside).
            let s = build(&fields, u64::MAX >> 1);
            let bytes = s.to_vec();
            let back = Segment::parse_bytes(&bytes).unwrap();
            let near = |v: u64, k: usize| v.saturating_add_signed(skew[k]);
            if s.flags.contains(Flags::VPKT) {
                prop_assert_eq!(expand(truncate(back.vseq.0), near(s.vseq.0, 0)), s.vseq.0);
            }
            prop_assert_eq!(expand(truncate(back.offset), near(s.offset, 1)), s.offset);
            prop_assert_eq!(expand(truncate(back.vack.0), near(s.vack.0, 2)), s.vack.0);
            prop_assert_eq!(expand(truncate(back.data_ack), near(s.data_ack, 3)), s.data_ack);
            prop_assert_eq!(back.payload, s.payload);
        }

        #[test]
        fn expand_inverts_truncate_within_half_the_space(
            v in any::<u64>(),
            d in -(1i64 << 31) + 1..=(1i64 << 31) - 1,
        ) {
            if let Some(e) = v.checked_add_signed(d) {
                prop_assert_eq!(expand(truncate(v), e), v);
            }
        }

        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let view = SegmentView::new_checked(&bytes[..]);
            if let Ok(s) = Segment::parse_bytes(&bytes) {
                prop_assert!(view.is_ok());
                prop_assert_eq!(s.buffer_len(), bytes.len());
                prop_assert_eq!(s.to_vec(), bytes);
            }
        }

        #[test]
        fn never_panics_near_valid(mut bytes in prop::collection::vec(any::<u8>(), 4..120), n in 0u8..6) {
            bytes[0] = VERSION;
            bytes[1] &= 0x7f;
            bytes[2] &= 0x7f;
            bytes[3] = n;
            if let Ok(s) = Segment::parse_bytes(&bytes) {
                prop_assert_eq!(s.to_vec(), bytes);
            }
        }
    }
}

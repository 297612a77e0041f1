//! The wire format of braid, version 1.
//!
//! Everything braid sends on a path is one of three packet kinds: striped **data**, a **marker**
//! carrying the sender's per-path state so the receiver can resynchronise after loss (stripe
//! paper section 5, Appendix A `SendMarker`), and credit **feedback** from the receiver (section
//! 6.3.1). The whole format lives in this one module, smoltcp style:
//!
//! - [`Packet`] is a zero-copy view over a byte buffer with checked accessors (and setters when
//!   the buffer is mutable). [`Packet::new_checked`] validates the version, the kind and the
//!   length for that kind.
//! - [`Repr`] is the parsed, validated meaning of a packet: [`Repr::parse`] reads one out of a
//!   [`Packet`], [`Repr::buffer_len`] says how many bytes it needs, [`Repr::emit`] writes it back.
//!
//! ```
//! use braid_proto::PathId;
//! use braid_wire::{Repr, VERSION};
//!
//! let repr = Repr::Data { path: PathId(3), seq: Some(7), payload: b"hi" };
//! let mut buf = [0u8; 1500];
//! let len = repr.emit_into(&mut buf)?;
//! assert_eq!(&buf[..4], &[VERSION, 1, 3, 0x01]);
//! assert_eq!(Repr::parse_bytes(&buf[..len])?, repr);
//! # Ok::<(), braid_wire::Error>(())
//! ```
//!
//! Decoders never panic: a truncated, oversized or otherwise malformed packet (a misbehaving peer)
//! comes back as an [`Error`] for the caller to drop and count. Every accessor reads through
//! `get`, never through indexing. The encoding is canonical: a packet that parses re-emits to
//! exactly the same bytes.
//!
//! # Layout
//!
//! All integers are big-endian. Byte 0 is always the version ([`VERSION`]), byte 1 the [`Kind`].
//!
//! ```text
//!  offset size  Data (kind 1)             Marker (kind 2)     Feedback (kind 3)
//!  ------ ----  ------------------------  ------------------  --------------------------
//!    0     1    version = 1               version = 1         version = 1
//!    1     1    kind = 1                  kind = 2            kind = 3
//!    2     1    path (< 64)               path (< 64)         count (<= 64)
//!    3     1    flags: bit 0 = HAS_SEQ,   flags = 0           flags = 0
//!               other bits 0
//!    4     8    seq u64, iff HAS_SEQ      round u64           count entries, 12 bytes
//!  4|12   ..    payload: every remaining  .                   each (below)
//!               byte, may be empty        .
//!   12     8                              deficit i64
//!   20     8                              tx_bytes u64
//!  ------ ----  ------------------------  ------------------  --------------------------
//!  length       4 [+ 8] + payload         28 exactly          4 + 12 * count exactly
//!
//!  Feedback entry:
//!  offset size
//!    0     1    path (< 64)
//!    1     3    reserved = 0
//!    4     8    limit_bytes u64
//! ```
//!
//! NACK (kind 6) is 16 bytes exactly: version, kind, path (< 64), flags = 0, then a u32 (the
//! count of missing transport counters) at offset 4 and a u64 (the first missing counter) at
//! offset 8. Probe (kind 4) and probe acknowledgement (kind 5) are 20 bytes exactly: the same
//! 16 (the probe id at offset 4, the prober's timestamp at offset 8), then a u32 at offset 16:
//! the rate, in kbit/s, at which the packet's sender believes it can send on this path (PET's or
//! adaptive SRR's estimate, else the configured rate; 0: no opinion). A receiver paces its
//! release by its peer's rates (`[bond] release_pacing_pct`), and they are the peer's to know.
//! A probe's flags may hold [`PROBE_UNHEARD`]: its sender has heard nothing from the receiver on
//! this path for its `dead_after` plus the path's base RTT (the path works one way at most);
//! every other bit is zero, and an acknowledgement has none.
//!
//! SIG-ACK (kind 7, PET's arrival report) is laid out in [`sigack`]: `4 + 20 x count` bytes.
//!
//! Abandon (kind 8) has the NACK's layout.
//!
//! Unheard (kind 13) is 24 bytes: the NACK's layout with a count of zero (the transport
//! counter at offset 8 is the first of the named path's that its receiver has not heard),
//! then a u64 at offset 16: the next data sequence number its resequencer waits for
//! ([`Repr::Unheard`]).
//!
//! pTCP (kind 9) carries one segment of a pTCP connection (`braid-ptcp`'s wire format, opaque
//! here) on the path of the micro-flow it belongs to, outside the striper and the resequencer:
//! version, kind, the connection id (u16) at offset 2, and the segment: every byte from offset
//! 4, at least one. Its path is the one the session's transport header names, so unlike the
//! other kinds it carries no path byte (and no flags): 4 bytes of header on every pTCP data
//! packet.
//!
//! Context install (kind 10) and context acknowledgement (kind 11) carry the header
//! compression's contexts (`braid_session::compress`): version, kind, the context id at offset
//! 2 and its generation (below 16) at offset 3; an install then has the context's template,
//! every remaining byte ([`MIN_TEMPLATE_LEN`] to [`MAX_TEMPLATE_LEN`] of them, read by the
//! session), and an acknowledgement is those 4 bytes exactly.
//!
//! Padding (kind 12) is a probe of PET's ([`Repr::Padding`]): version, kind, path (< 64), flags
//! = 0, an id u64 at offset 4 whose top bit is always set (`braid_proto::pet::PADDING_ID_BIT`),
//! then any number of zero bytes. It is exactly as long as a data packet with a sequence number
//! and a payload of that many bytes, so that a pair of them measures what a data pair would.
//! The receiver reports its arrival in a SIG-ACK under its id and otherwise drops it.
//!
//! Flag bits and reserved bytes that this version does not define must be zero; a parser
//! rejects anything else with [`Error::Reserved`] so that a later version can give them a meaning
//! without being misread.
//!
//! # Versioning
//!
//! The version byte has been there from day one so that a later version can change everything
//! after it: authentication and encryption of the packet (a later issue) will most likely wrap or
//! replace the bytes from offset 1 on. A version-1 parser reads only byte 0 of a packet with any
//! other version and rejects it with [`Error::UnknownVersion`], whatever its length.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod outer;
pub mod sigack;

pub use sigack::{SigAcks, MAX_SIGACK_LEN, SIGACK_ENTRY_LEN, SIGACK_HEADER_LEN};

use core::cmp::Ordering;
use core::fmt;
use core::iter::FusedIterator;
use core::slice;

use braid_proto::pet::PADDING_ID_BIT;
use braid_proto::{Credit, Marker, PacketNumber, PathId, MAX_PATHS};

/// The wire format version this crate reads and writes.
pub const VERSION: u8 = 1;

/// Length of the data header: version, kind, path and flags.
pub const DATA_HEADER_LEN: usize = 4;

/// Length of the optional sequence number of a data packet.
pub const SEQ_LEN: usize = 8;

/// Length of a marker packet (it has no variable part).
pub const MARKER_LEN: usize = 28;

/// Length of the feedback header: version, kind, count and flags.
pub const FEEDBACK_HEADER_LEN: usize = 4;

/// Length of one credit entry of a feedback packet.
pub const FEEDBACK_ENTRY_LEN: usize = 12;

/// Length of the largest feedback packet: one entry for each of [`MAX_PATHS`] paths.
pub const MAX_FEEDBACK_LEN: usize = FEEDBACK_HEADER_LEN + FEEDBACK_ENTRY_LEN * MAX_PATHS;

/// Length of a probe or probe acknowledgement.
pub const PROBE_LEN: usize = 20;

/// Length of a NACK or an abandon.
pub const NACK_LEN: usize = 16;

/// Length of an unheard notice.
pub const UNHEARD_LEN: usize = 24;

/// Length of a pTCP packet's header (version, kind, 16-bit connection id) in front of its
/// segment. The path is the one the session's authenticated transport header names (it is
/// part of the AEAD nonce), so it does not travel twice.
pub const PTCP_HEADER_LEN: usize = 4;

/// Length of a context acknowledgement, and of a context install's header.
pub const CONTEXT_HEADER_LEN: usize = 4;

/// The shortest template a context install carries (IPv4 and TCP headers without options).
pub const MIN_TEMPLATE_LEN: usize = 40;

/// The longest template a context install carries (IPv6 and TCP headers with timestamps).
pub const MAX_TEMPLATE_LEN: usize = 72;

/// Context generations are below this.
pub const CONTEXT_GENERATIONS: u8 = 16;

/// Length of a padding packet's header (version, kind, path, flags and the id): a data
/// packet's with a sequence number.
pub const PADDING_HEADER_LEN: usize = DATA_HEADER_LEN + SEQ_LEN;
/// Data flag: a sequence number of [`SEQ_LEN`] bytes follows the data header.
pub const FLAG_HAS_SEQ: u8 = 0x01;

/// Bytes a data packet adds in front of its payload, with or without a sequence number.
pub const fn data_overhead(with_seq: bool) -> usize {
    if with_seq {
        DATA_HEADER_LEN + SEQ_LEN
    } else {
        DATA_HEADER_LEN
    }
}

/// Byte offsets of the fields.
mod field {
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    /// Data and marker.
    pub const PATH: usize = 2;
    /// Feedback.
    pub const COUNT: usize = 2;
    pub const FLAGS: usize = 3;
    /// Data, only with `FLAG_HAS_SEQ`.
    pub const SEQ: usize = 4;
    pub const ROUND: usize = 4;
    pub const DEFICIT: usize = 12;
    pub const TX_BYTES: usize = 20;
    /// Feedback entries start here.
    pub const ENTRIES: usize = 4;
    /// Probe and probe acknowledgement.
    pub const PROBE_ID: usize = 4;
    pub const PROBE_TIMESTAMP: usize = 8;
    pub const PROBE_RATE: usize = 16;
    /// Unheard.
    pub const UNHEARD_NEXT_SEQ: usize = 16;
    /// pTCP.
    pub const CONN: usize = 2;
    pub const SEGMENT: usize = 4;
    /// Offsets inside one feedback entry.
    pub const ENTRY_PATH: usize = 0;
    pub const ENTRY_RESERVED: usize = 1;
    pub const ENTRY_LIMIT_BYTES: usize = 4;
}

/// Why a packet could not be parsed, checked or emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The packet ends before a field its header announces.
    #[error("packet truncated: it ends before a field its header announces")]
    Truncated,
    /// The version byte is not [`VERSION`].
    #[error("unknown wire version {0} (this build speaks version {v})", v = VERSION)]
    UnknownVersion(u8),
    /// The kind byte is not a known [`Kind`].
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
    /// A path id is not below [`MAX_PATHS`].
    #[error("path id {0} out of range (at most {m} paths)", m = MAX_PATHS)]
    BadPath(u8),
    /// The packet is longer than its kind allows, or a feedback count exceeds [`MAX_PATHS`].
    #[error("packet length does not match its kind")]
    BadLength,
    /// The buffer to emit into is shorter than [`Repr::buffer_len`].
    #[error("buffer too small for the packet")]
    BufferTooSmall,
    /// A flag bit or reserved byte that this version does not define is non-zero.
    #[error("reserved flag bits or bytes are non-zero")]
    Reserved,
}

/// The kind of a packet, byte 1 on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Striped user data.
    Data = 1,
    /// A marker: the sender's implicit packet number for one path.
    Marker = 2,
    /// Credit grants from the receiver.
    Feedback = 3,
    /// A liveness probe on a path (RTT and loss measurement).
    Probe = 4,
    /// The answer to a probe, echoing its id and timestamp.
    ProbeAck = 5,
    /// A negative acknowledgement: transport counters of a path that never arrived.
    Nack = 6,
    /// PET's arrival report ([`sigack`]).
    SigAck = 7,
    /// The sender gave up on data sequence numbers a path lost in a run: resequence past them.
    Abandon = 8,
    /// A segment of a pTCP connection, on its micro-flow's path.
    Ptcp = 9,
    /// A header compression context: its id, generation and template.
    ContextInstall = 10,
    /// The receiver holds a header compression context.
    ContextAck = 11,
    /// PET's padding probe: an id and zero bytes.
    Padding = 12,
    /// A path that went silent while the others delivered: stop sending on it.
    Unheard = 13,
}

impl From<Kind> for u8 {
    fn from(kind: Kind) -> u8 {
        kind as u8
    }
}

impl TryFrom<u8> for Kind {
    type Error = Error;

    fn try_from(byte: u8) -> Result<Kind, Error> {
        match byte {
            1 => Ok(Kind::Data),
            2 => Ok(Kind::Marker),
            3 => Ok(Kind::Feedback),
            4 => Ok(Kind::Probe),
            5 => Ok(Kind::ProbeAck),
            6 => Ok(Kind::Nack),
            7 => Ok(Kind::SigAck),
            8 => Ok(Kind::Abandon),
            9 => Ok(Kind::Ptcp),
            10 => Ok(Kind::ContextInstall),
            11 => Ok(Kind::ContextAck),
            12 => Ok(Kind::Padding),
            13 => Ok(Kind::Unheard),
            other => Err(Error::UnknownKind(other)),
        }
    }
}

/// Reads `N` bytes at `at`, or [`Error::Truncated`] if the buffer ends first.
fn read<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], Error> {
    buf.get(at..)
        .and_then(<[u8]>::first_chunk::<N>)
        .copied()
        .ok_or(Error::Truncated)
}

/// Writes `bytes` at `at`, or [`Error::BufferTooSmall`] if the buffer ends first.
fn write<const N: usize>(buf: &mut [u8], at: usize, bytes: [u8; N]) -> Result<(), Error> {
    let dst = buf
        .get_mut(at..)
        .and_then(<[u8]>::first_chunk_mut::<N>)
        .ok_or(Error::BufferTooSmall)?;
    *dst = bytes;
    Ok(())
}

/// Offset of feedback entry `index`, or [`Error::Truncated`] if it cannot fit in memory.
fn entry_offset(index: usize) -> Result<usize, Error> {
    index
        .checked_mul(FEEDBACK_ENTRY_LEN)
        .and_then(|at| at.checked_add(field::ENTRIES))
        .ok_or(Error::Truncated)
}

/// Checks that a path id names one of the [`MAX_PATHS`] paths.
fn check_path(path: PathId) -> Result<(), Error> {
    if path.index() < MAX_PATHS {
        Ok(())
    } else {
        Err(Error::BadPath(path.0))
    }
}

/// A zero-copy view of a braid packet in a byte buffer.
///
/// Every accessor is checked: one that would read past the end of the buffer returns
/// [`Error::Truncated`] (setters: [`Error::BufferTooSmall`]), so even a view made with
/// [`Packet::new_unchecked`] never panics. Accessors read raw fields and do not check that the
/// field belongs to the packet's kind, that a path id is in range or that reserved bits are zero;
/// [`Repr::parse`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the version, the kind, and that the length is exactly what the kind and its
    /// header (flags, count) call for.
    ///
    /// Returns [`Error::Truncated`] if the buffer is too short, [`Error::BadLength`] if a
    /// fixed-size packet is too long or a feedback count exceeds [`MAX_PATHS`],
    /// [`Error::UnknownVersion`] or [`Error::UnknownKind`]. The version is checked first, from
    /// byte 0 alone, since a later version may lay out everything after it differently.
    pub fn check_len(&self) -> Result<(), Error> {
        let version = self.version()?;
        if version != VERSION {
            return Err(Error::UnknownVersion(version));
        }
        let len = self.buffer.as_ref().len();
        let expected = match self.kind()? {
            Kind::Data => {
                // The payload is every remaining byte, so only a lower bound.
                return if len < data_overhead(self.has_seq()?) {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                };
            }
            Kind::Padding => {
                // The padding is every remaining byte, maybe none.
                return if len < PADDING_HEADER_LEN {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                };
            }
            Kind::Ptcp => {
                // The segment is every remaining byte, at least one.
                return if len <= PTCP_HEADER_LEN {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                };
            }
            Kind::ContextInstall => {
                // The template is every remaining byte, within bounds.
                return if len < CONTEXT_HEADER_LEN + MIN_TEMPLATE_LEN {
                    Err(Error::Truncated)
                } else if len > CONTEXT_HEADER_LEN + MAX_TEMPLATE_LEN {
                    Err(Error::BadLength)
                } else {
                    Ok(())
                };
            }
            Kind::ContextAck => CONTEXT_HEADER_LEN,
            Kind::Marker => MARKER_LEN,
            Kind::Probe | Kind::ProbeAck => PROBE_LEN,
            Kind::Nack | Kind::Abandon => NACK_LEN,
            Kind::Unheard => UNHEARD_LEN,
            Kind::Feedback => {
                let count = usize::from(self.count()?);
                if count > MAX_PATHS {
                    return Err(Error::BadLength);
                }
                FEEDBACK_HEADER_LEN + FEEDBACK_ENTRY_LEN * count
            }
            Kind::SigAck => {
                let count = usize::from(self.count()?);
                if count == 0 || count > braid_proto::pet::MAX_SIGACK_ENTRIES {
                    return Err(Error::BadLength);
                }
                SIGACK_HEADER_LEN + SIGACK_ENTRY_LEN * count
            }
        };
        match len.cmp(&expected) {
            Ordering::Less => Err(Error::Truncated),
            Ordering::Equal => Ok(()),
            Ordering::Greater => Err(Error::BadLength),
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The version byte.
    pub fn version(&self) -> Result<u8, Error> {
        read::<1>(self.buffer.as_ref(), field::VERSION).map(|[b]| b)
    }

    /// The kind byte, decoded.
    pub fn kind(&self) -> Result<Kind, Error> {
        read::<1>(self.buffer.as_ref(), field::KIND).and_then(|[b]| Kind::try_from(b))
    }

    /// The path of a data or marker packet (not range-checked).
    pub fn path(&self) -> Result<PathId, Error> {
        read::<1>(self.buffer.as_ref(), field::PATH).map(|[b]| PathId(b))
    }

    /// The number of credit entries of a feedback packet.
    pub fn count(&self) -> Result<u8, Error> {
        read::<1>(self.buffer.as_ref(), field::COUNT).map(|[b]| b)
    }

    /// The flags byte.
    pub fn flags(&self) -> Result<u8, Error> {
        read::<1>(self.buffer.as_ref(), field::FLAGS).map(|[b]| b)
    }

    /// Whether a data packet's flags announce a sequence number ([`FLAG_HAS_SEQ`]).
    pub fn has_seq(&self) -> Result<bool, Error> {
        Ok(self.flags()? & FLAG_HAS_SEQ != 0)
    }

    /// The sequence number of a data packet, if its flags announce one.
    pub fn seq(&self) -> Result<Option<u64>, Error> {
        if self.has_seq()? {
            read(self.buffer.as_ref(), field::SEQ).map(|b| Some(u64::from_be_bytes(b)))
        } else {
            Ok(None)
        }
    }

    /// The payload of a data packet: every byte after the header and the sequence number, if any.
    pub fn payload(&self) -> Result<&[u8], Error> {
        let start = data_overhead(self.has_seq()?);
        self.buffer.as_ref().get(start..).ok_or(Error::Truncated)
    }

    /// The round number `R` of a marker packet.
    pub fn round(&self) -> Result<u64, Error> {
        read(self.buffer.as_ref(), field::ROUND).map(u64::from_be_bytes)
    }

    /// The deficit counter `DC` of a marker packet.
    pub fn deficit(&self) -> Result<i64, Error> {
        read(self.buffer.as_ref(), field::DEFICIT).map(i64::from_be_bytes)
    }

    /// The cumulative data bytes sent on the path before a marker packet.
    pub fn tx_bytes(&self) -> Result<u64, Error> {
        read(self.buffer.as_ref(), field::TX_BYTES).map(u64::from_be_bytes)
    }

    /// pTCP: the connection id.
    pub fn conn(&self) -> Result<u16, Error> {
        read(self.buffer.as_ref(), field::CONN).map(u16::from_be_bytes)
    }

    /// pTCP: the segment, every byte from offset 4.
    pub fn segment(&self) -> Result<&[u8], Error> {
        self.buffer
            .as_ref()
            .get(field::SEGMENT..)
            .ok_or(Error::Truncated)
    }

    /// Probe and probe acknowledgement: the probe's id.
    pub fn probe_id(&self) -> Result<u32, Error> {
        read(self.buffer.as_ref(), field::PROBE_ID).map(u32::from_be_bytes)
    }

    /// Probe and probe acknowledgement: the sender's timestamp, echoed by the acknowledgement.
    pub fn probe_timestamp(&self) -> Result<u64, Error> {
        read(self.buffer.as_ref(), field::PROBE_TIMESTAMP).map(u64::from_be_bytes)
    }

    /// Probe and probe acknowledgement: the rate its sender believes it can send at on the
    /// path, kbit/s (0: no opinion).
    pub fn probe_rate_kbps(&self) -> Result<u32, Error> {
        read(self.buffer.as_ref(), field::PROBE_RATE).map(u32::from_be_bytes)
    }

    /// Unheard: the next data sequence number the notice's sender waits for.
    pub fn unheard_next_seq(&self) -> Result<u64, Error> {
        read(self.buffer.as_ref(), field::UNHEARD_NEXT_SEQ).map(u64::from_be_bytes)
    }

    /// The path of feedback entry `index` (not range-checked, nor checked against `count`).
    pub fn credit_path(&self, index: usize) -> Result<PathId, Error> {
        let at = entry_offset(index)?
            .checked_add(field::ENTRY_PATH)
            .ok_or(Error::Truncated)?;
        read::<1>(self.buffer.as_ref(), at).map(|[b]| PathId(b))
    }

    /// The reserved bytes of feedback entry `index` (zero in a valid packet).
    pub fn credit_reserved(&self, index: usize) -> Result<[u8; 3], Error> {
        let at = entry_offset(index)?
            .checked_add(field::ENTRY_RESERVED)
            .ok_or(Error::Truncated)?;
        read(self.buffer.as_ref(), at)
    }

    /// The cumulative byte limit of feedback entry `index`.
    pub fn credit_limit_bytes(&self, index: usize) -> Result<u64, Error> {
        let at = entry_offset(index)?
            .checked_add(field::ENTRY_LIMIT_BYTES)
            .ok_or(Error::Truncated)?;
        read(self.buffer.as_ref(), at).map(u64::from_be_bytes)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version byte.
    pub fn set_version(&mut self, version: u8) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::VERSION, [version])
    }

    /// Sets the kind byte.
    pub fn set_kind(&mut self, kind: Kind) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::KIND, [u8::from(kind)])
    }

    /// Sets the path of a data or marker packet (not range-checked).
    pub fn set_path(&mut self, path: PathId) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::PATH, [path.0])
    }

    /// Sets the number of credit entries of a feedback packet.
    pub fn set_count(&mut self, count: u8) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::COUNT, [count])
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, flags: u8) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::FLAGS, [flags])
    }

    /// Writes the sequence number field of a data packet. This does not touch the flags: set
    /// [`FLAG_HAS_SEQ`] with [`Packet::set_flags`] for it to count.
    pub fn set_seq(&mut self, seq: u64) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::SEQ, seq.to_be_bytes())
    }

    /// The payload of a data packet, mutably: every byte after the header and the sequence
    /// number, if the flags announce one.
    pub fn payload_mut(&mut self) -> Result<&mut [u8], Error> {
        let has_seq = self.has_seq().map_err(|_| Error::BufferTooSmall)?;
        let start = data_overhead(has_seq);
        self.buffer
            .as_mut()
            .get_mut(start..)
            .ok_or(Error::BufferTooSmall)
    }

    /// The bytes from `start` on (a SIG-ACK's entries), if the buffer is that long.
    fn payload_mut_from(&mut self, start: usize) -> Option<&mut [u8]> {
        self.buffer.as_mut().get_mut(start..)
    }

    /// Sets the round number `R` of a marker packet.
    pub fn set_round(&mut self, round: u64) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::ROUND, round.to_be_bytes())
    }

    /// Sets the deficit counter `DC` of a marker packet.
    pub fn set_deficit(&mut self, deficit: i64) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::DEFICIT, deficit.to_be_bytes())
    }

    /// Sets a pTCP packet's connection id.
    pub fn set_conn(&mut self, conn: u16) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::CONN, conn.to_be_bytes())
    }

    /// Sets a probe's id.
    pub fn set_probe_id(&mut self, id: u32) -> Result<(), Error> {
        write(self.buffer.as_mut(), field::PROBE_ID, id.to_be_bytes())
    }

    /// Sets a probe's timestamp.
    pub fn set_probe_timestamp(&mut self, timestamp: u64) -> Result<(), Error> {
        write(
            self.buffer.as_mut(),
            field::PROBE_TIMESTAMP,
            timestamp.to_be_bytes(),
        )
    }

    /// Sets an unheard notice's next data sequence number.
    pub fn set_unheard_next_seq(&mut self, next_seq: u64) -> Result<(), Error> {
        write(
            self.buffer.as_mut(),
            field::UNHEARD_NEXT_SEQ,
            next_seq.to_be_bytes(),
        )
    }

    /// Sets a probe's rate, kbit/s.
    pub fn set_probe_rate_kbps(&mut self, rate_kbps: u32) -> Result<(), Error> {
        write(
            self.buffer.as_mut(),
            field::PROBE_RATE,
            rate_kbps.to_be_bytes(),
        )
    }

    /// Sets the cumulative data bytes sent before a marker packet.
    pub fn set_tx_bytes(&mut self, tx_bytes: u64) -> Result<(), Error> {
        write(
            self.buffer.as_mut(),
            field::TX_BYTES,
            tx_bytes.to_be_bytes(),
        )
    }

    /// Writes feedback entry `index`: its path (not range-checked), zero reserved bytes and its
    /// limit. This does not touch the count.
    pub fn set_credit(&mut self, index: usize, credit: Credit) -> Result<(), Error> {
        let at = entry_offset(index).map_err(|_| Error::BufferTooSmall)?;
        let [l0, l1, l2, l3, l4, l5, l6, l7] = credit.limit_bytes.to_be_bytes();
        let entry = [credit.path.0, 0, 0, 0, l0, l1, l2, l3, l4, l5, l6, l7];
        write::<FEEDBACK_ENTRY_LEN>(self.buffer.as_mut(), at, entry)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The credit grants of a feedback packet: either still in wire form (from [`Repr::parse`]) or
/// borrowed from a slice of [`Credit`]s (to emit).
///
/// Two `Credits` are equal when they yield the same credits in the same order, whichever form
/// they are in.
#[derive(Clone, Copy)]
pub struct Credits<'a> {
    inner: CreditsInner<'a>,
}

#[derive(Clone, Copy)]
enum CreditsInner<'a> {
    /// Validated entries, a multiple of [`FEEDBACK_ENTRY_LEN`] bytes long.
    Wire(&'a [u8]),
    Slice(&'a [Credit]),
}

impl<'a> Credits<'a> {
    /// Borrows credits to emit. [`Repr::emit`] rejects more than [`MAX_PATHS`] of them and paths
    /// out of range.
    pub const fn from_slice(credits: &'a [Credit]) -> Credits<'a> {
        Credits {
            inner: CreditsInner::Slice(credits),
        }
    }

    /// Entries already validated by [`Repr::parse`].
    fn from_wire(entries: &'a [u8]) -> Credits<'a> {
        Credits {
            inner: CreditsInner::Wire(entries),
        }
    }

    /// The number of credits.
    pub fn len(&self) -> usize {
        match self.inner {
            CreditsInner::Wire(entries) => entries.len() / FEEDBACK_ENTRY_LEN,
            CreditsInner::Slice(credits) => credits.len(),
        }
    }

    /// Whether there are no credits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The credit at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<Credit> {
        match self.inner {
            CreditsInner::Wire(entries) => entries
                .chunks_exact(FEEDBACK_ENTRY_LEN)
                .nth(index)
                .and_then(decode_entry),
            CreditsInner::Slice(credits) => credits.get(index).copied(),
        }
    }

    /// The credits in order.
    pub fn iter(&self) -> CreditsIter<'a> {
        let inner = match self.inner {
            CreditsInner::Wire(entries) => {
                IterInner::Wire(entries.chunks_exact(FEEDBACK_ENTRY_LEN))
            }
            CreditsInner::Slice(credits) => IterInner::Slice(credits.iter()),
        };
        CreditsIter { inner }
    }
}

/// Decodes one feedback entry. `None` only if `entry` is shorter than an entry, which the
/// callers rule out.
fn decode_entry(entry: &[u8]) -> Option<Credit> {
    let [path, _, _, _, limit @ ..] = *entry.first_chunk::<FEEDBACK_ENTRY_LEN>()?;
    Some(Credit {
        path: PathId(path),
        limit_bytes: u64::from_be_bytes(limit),
    })
}

impl Default for Credits<'_> {
    fn default() -> Self {
        Credits::from_slice(&[])
    }
}

impl<'a> From<&'a [Credit]> for Credits<'a> {
    fn from(credits: &'a [Credit]) -> Self {
        Credits::from_slice(credits)
    }
}

impl PartialEq for Credits<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Credits<'_> {}

impl fmt::Debug for Credits<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for Credits<'a> {
    type Item = Credit;
    type IntoIter = CreditsIter<'a>;

    fn into_iter(self) -> CreditsIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &Credits<'a> {
    type Item = Credit;
    type IntoIter = CreditsIter<'a>;

    fn into_iter(self) -> CreditsIter<'a> {
        self.iter()
    }
}

/// Iterator over [`Credits`], from [`Credits::iter`].
#[derive(Clone, Debug)]
pub struct CreditsIter<'a> {
    inner: IterInner<'a>,
}

#[derive(Clone, Debug)]
enum IterInner<'a> {
    Wire(slice::ChunksExact<'a, u8>),
    Slice(slice::Iter<'a, Credit>),
}

impl Iterator for CreditsIter<'_> {
    type Item = Credit;

    fn next(&mut self) -> Option<Credit> {
        match &mut self.inner {
            IterInner::Wire(chunks) => chunks.next().and_then(decode_entry),
            IterInner::Slice(credits) => credits.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            IterInner::Wire(chunks) => chunks.size_hint(),
            IterInner::Slice(credits) => credits.size_hint(),
        }
    }
}

impl ExactSizeIterator for CreditsIter<'_> {}

impl FusedIterator for CreditsIter<'_> {}

/// The meaning of a braid packet, parsed and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr<'a> {
    /// Striped user data.
    Data {
        /// The path the packet travels on.
        path: PathId,
        /// An explicit sequence number, for resequencing schemes that carry one.
        seq: Option<u64>,
        /// The user data.
        payload: &'a [u8],
    },
    /// A marker (stripe paper section 5): the implicit packet number of the next data packet on
    /// `path`, and the bytes sent on it so far (section 6.3.1).
    Marker(Marker),
    /// Credit grants (section 6.3.1), at most one per path in practice but not checked.
    Feedback(Credits<'a>),
    /// A liveness probe on `path`.
    Probe(Probe),
    /// The answer to a probe, sent back on the path the probe came in on.
    ProbeAck(Probe),
    /// Transport counters of a path that never arrived (a gap in the path's counters), so the
    /// sender can resend the data they carried on another path. Same layout as a probe: the
    /// count where a probe has its id, the first counter where it has its timestamp.
    Nack(Nack),
    /// PET's SIG-ACK: when data packets arrived, receiver clock (BAG paper section V-A).
    SigAck(SigAcks<'a>),
    /// The answer to a NACK of a long run (congestion, not repaired): the data sequence
    /// numbers the run carried, so the receiver stops waiting for them and the transport sees
    /// its loss at once. Same layout as a NACK: the count where a probe has its id, the first
    /// sequence number where it has its timestamp.
    Abandon(Abandon),
    /// The receiver has heard nothing on `path` for longer than the path's probes allow,
    /// while the other paths delivered what was sent after (`braid_session::session`'s
    /// liveness): what the sender puts on it is lost. Sent on another path. Same layout as a
    /// NACK, with a count of zero.
    Unheard(Unheard),
    /// A segment of pTCP connection `conn`, outside the striper and the resequencer. It
    /// travels on its micro-flow's path, which the session's transport header names.
    Ptcp {
        /// Which pTCP connection of the session.
        conn: u16,
        /// The pTCP segment (never empty).
        segment: &'a [u8],
    },
    /// Header compression: the sender's context `cid` in `generation` has this template.
    ContextInstall {
        /// The context id.
        cid: u8,
        /// The context's generation, below [`CONTEXT_GENERATIONS`].
        generation: u8,
        /// The template: [`MIN_TEMPLATE_LEN`] to [`MAX_TEMPLATE_LEN`] bytes.
        template: &'a [u8],
    },
    /// Header compression: the receiver holds context `cid` in `generation`.
    ContextAck {
        /// The context id.
        cid: u8,
        /// The context's generation, below [`CONTEXT_GENERATIONS`].
        generation: u8,
    },
    /// PET's padding probe (`braid_proto::pet::Padding`): `len` zero bytes on `path`, whose
    /// arrival the receiver reports under `id` and which it otherwise drops.
    Padding {
        /// The path the packet travels on.
        path: PathId,
        /// Its id; the top bit (`braid_proto::pet::PADDING_ID_BIT`) is always set.
        id: u64,
        /// Bytes of padding after the header.
        len: u32,
    },
}

/// Data sequence numbers `first..first + count`, lost on `path`, that the sender will not
/// resend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Abandon {
    /// The path that lost them.
    pub path: PathId,
    /// The first abandoned sequence number.
    pub first: u64,
    /// How many from `first`.
    pub count: u32,
}

/// A path its receiver hears nothing on ([`Repr::Unheard`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unheard {
    /// The silent path.
    pub path: PathId,
    /// The first of the path's transport counters the receiver has not heard (one past the
    /// highest it has; zero if none).
    pub first: u64,
    /// The next data sequence number the receiver's resequencer waits for: it has delivered
    /// or given up on everything below (zero if it has none: resequencing other than
    /// `sequence`). The sender reinjects what it sent on the path from `first` on, but not
    /// below this.
    pub next_seq: u64,
}

/// A negative acknowledgement: `count` transport counters from `first` on `path` are missing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nack {
    /// The path whose datagrams went missing.
    pub path: PathId,
    /// The first missing transport counter.
    pub first: u64,
    /// How many counters from `first` are missing.
    pub count: u32,
}

/// A probe or its acknowledgement: the id and the prober's timestamp, echoed unchanged, and
/// the rate its sender believes it can send at on the path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Probe {
    /// The path probed.
    pub path: PathId,
    /// Probe id, counting up per path.
    pub id: u32,
    /// The prober's clock when it sent the probe (nanoseconds; opaque to the answerer).
    pub timestamp: u64,
    /// The rate, kbit/s, at which this packet's sender believes it can send on `path` (its
    /// own, not echoed: an acknowledgement carries the answerer's); 0: no opinion.
    pub rate_kbps: u32,
    /// A probe ([`PROBE_UNHEARD`]; always `false` in an acknowledgement): its sender has heard
    /// nothing from the receiver on `path` for a while, so what the receiver sends there is
    /// lost (the path works one way at most).
    pub unheard: bool,
}

/// The flag of a probe whose sender hears nothing from its receiver on the path.
pub const PROBE_UNHEARD: u8 = 0x01;

impl<'a> Repr<'a> {
    /// Parses and validates a packet.
    ///
    /// Beyond [`Packet::check_len`], rejects path ids not below [`MAX_PATHS`]
    /// ([`Error::BadPath`]) and non-zero undefined flag bits or reserved bytes
    /// ([`Error::Reserved`]). Never panics.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        let bytes: &'a [u8] = <T as AsRef<[u8]>>::as_ref(packet.buffer);
        match packet.kind()? {
            Kind::Data => {
                let flags = packet.flags()?;
                if flags & !FLAG_HAS_SEQ != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                let seq = packet.seq()?;
                let payload = bytes
                    .get(data_overhead(seq.is_some())..)
                    .ok_or(Error::Truncated)?;
                Ok(Repr::Data { path, seq, payload })
            }
            Kind::Marker => {
                if packet.flags()? != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                Ok(Repr::Marker(Marker {
                    path,
                    number: PacketNumber {
                        round: packet.round()?,
                        deficit: packet.deficit()?,
                    },
                    tx_bytes: packet.tx_bytes()?,
                }))
            }
            Kind::Feedback => {
                if packet.flags()? != 0 {
                    return Err(Error::Reserved);
                }
                for index in 0..usize::from(packet.count()?) {
                    if packet.credit_reserved(index)? != [0; 3] {
                        return Err(Error::Reserved);
                    }
                    check_path(packet.credit_path(index)?)?;
                }
                // check_len made the entries exactly `count` entries long.
                let entries = bytes.get(field::ENTRIES..).ok_or(Error::Truncated)?;
                Ok(Repr::Feedback(Credits::from_wire(entries)))
            }
            kind @ (Kind::Probe | Kind::ProbeAck) => {
                let flags = packet.flags()?;
                let allowed = if kind == Kind::Probe {
                    PROBE_UNHEARD
                } else {
                    0
                };
                if flags & !allowed != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                let probe = Probe {
                    path,
                    id: packet.probe_id()?,
                    timestamp: packet.probe_timestamp()?,
                    rate_kbps: packet.probe_rate_kbps()?,
                    unheard: flags & PROBE_UNHEARD != 0,
                };
                Ok(if kind == Kind::Probe {
                    Repr::Probe(probe)
                } else {
                    Repr::ProbeAck(probe)
                })
            }
            Kind::SigAck => {
                if packet.flags()? != 0 {
                    return Err(Error::Reserved);
                }
                let entries = bytes.get(SIGACK_HEADER_LEN..).ok_or(Error::Truncated)?;
                sigack::validate(entries)?;
                Ok(Repr::SigAck(SigAcks::from_wire(entries)))
            }
            kind @ (Kind::ContextInstall | Kind::ContextAck) => {
                let [cid, generation] = read::<2>(bytes, 2)?;
                if generation >= CONTEXT_GENERATIONS {
                    return Err(Error::Reserved);
                }
                Ok(if kind == Kind::ContextAck {
                    Repr::ContextAck { cid, generation }
                } else {
                    let template = bytes.get(CONTEXT_HEADER_LEN..).ok_or(Error::Truncated)?;
                    Repr::ContextInstall {
                        cid,
                        generation,
                        template,
                    }
                })
            }
            Kind::Padding => {
                if packet.flags()? != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                let id = u64::from_be_bytes(read::<8>(bytes, field::SEQ)?);
                let padding = bytes.get(PADDING_HEADER_LEN..).ok_or(Error::Truncated)?;
                if id & PADDING_ID_BIT == 0 || padding.iter().any(|&b| b != 0) {
                    return Err(Error::Reserved);
                }
                let len = u32::try_from(padding.len()).map_err(|_| Error::BadLength)?;
                Ok(Repr::Padding { path, id, len })
            }
            Kind::Ptcp => {
                let segment = bytes.get(field::SEGMENT..).ok_or(Error::Truncated)?;
                Ok(Repr::Ptcp {
                    conn: packet.conn()?,
                    segment,
                })
            }
            kind @ (Kind::Nack | Kind::Abandon) => {
                if packet.flags()? != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                let (count, first) = (packet.probe_id()?, packet.probe_timestamp()?);
                Ok(if kind == Kind::Nack {
                    Repr::Nack(Nack { path, first, count })
                } else {
                    Repr::Abandon(Abandon { path, first, count })
                })
            }
            Kind::Unheard => {
                if packet.flags()? != 0 || packet.probe_id()? != 0 {
                    return Err(Error::Reserved);
                }
                let path = packet.path()?;
                check_path(path)?;
                let first = packet.probe_timestamp()?;
                let next_seq = packet.unheard_next_seq()?;
                Ok(Repr::Unheard(Unheard {
                    path,
                    first,
                    next_seq,
                }))
            }
        }
    }

    /// Parses and validates a packet straight from bytes; see [`Repr::parse`].
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
        Repr::parse(&Packet::new_unchecked(bytes))
    }

    /// The packet's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Repr::Data { .. } => Kind::Data,
            Repr::Marker(_) => Kind::Marker,
            Repr::Feedback(_) => Kind::Feedback,
            Repr::Probe(_) => Kind::Probe,
            Repr::ProbeAck(_) => Kind::ProbeAck,
            Repr::Nack(_) => Kind::Nack,
            Repr::Abandon(_) => Kind::Abandon,
            Repr::Unheard(_) => Kind::Unheard,
            Repr::SigAck(_) => Kind::SigAck,
            Repr::Ptcp { .. } => Kind::Ptcp,
            Repr::ContextInstall { .. } => Kind::ContextInstall,
            Repr::ContextAck { .. } => Kind::ContextAck,
            Repr::Padding { .. } => Kind::Padding,
        }
    }

    /// The length of the emitted packet.
    pub fn buffer_len(&self) -> usize {
        match self {
            Repr::Data { seq, payload, .. } => data_overhead(seq.is_some()) + payload.len(),
            Repr::Marker(_) => MARKER_LEN,
            Repr::Feedback(credits) => FEEDBACK_HEADER_LEN + FEEDBACK_ENTRY_LEN * credits.len(),
            Repr::Probe(_) | Repr::ProbeAck(_) => PROBE_LEN,
            Repr::Nack(_) | Repr::Abandon(_) => NACK_LEN,
            Repr::Unheard(_) => UNHEARD_LEN,
            Repr::SigAck(entries) => SIGACK_HEADER_LEN + SIGACK_ENTRY_LEN * entries.len(),
            Repr::Ptcp { segment, .. } => PTCP_HEADER_LEN + segment.len(),
            Repr::ContextInstall { template, .. } => CONTEXT_HEADER_LEN + template.len(),
            Repr::ContextAck { .. } => CONTEXT_HEADER_LEN,
            Repr::Padding { len, .. } => PADDING_HEADER_LEN + *len as usize,
        }
    }

    /// Checks that the representation can be put on the wire: path ids below [`MAX_PATHS`]
    /// ([`Error::BadPath`]), at most [`MAX_PATHS`] credits, a pTCP segment of at least one
    /// byte and a context template of [`MIN_TEMPLATE_LEN`] to [`MAX_TEMPLATE_LEN`]
    /// ([`Error::BadLength`]), context generations below [`CONTEXT_GENERATIONS`] and a
    /// padding id with its top bit set ([`Error::Reserved`]).
    pub fn check(&self) -> Result<(), Error> {
        match self {
            Repr::ContextInstall {
                generation,
                template,
                ..
            } => {
                if *generation >= CONTEXT_GENERATIONS {
                    return Err(Error::Reserved);
                }
                if !(MIN_TEMPLATE_LEN..=MAX_TEMPLATE_LEN).contains(&template.len()) {
                    return Err(Error::BadLength);
                }
                Ok(())
            }
            Repr::ContextAck { generation, .. } => {
                if *generation >= CONTEXT_GENERATIONS {
                    return Err(Error::Reserved);
                }
                Ok(())
            }
            Repr::Ptcp { segment, .. } => {
                if segment.is_empty() {
                    return Err(Error::BadLength);
                }
                Ok(())
            }
            Repr::Data { path, .. } => check_path(*path),
            Repr::Padding { path, id, .. } => {
                check_path(*path)?;
                if id & PADDING_ID_BIT == 0 {
                    return Err(Error::Reserved);
                }
                Ok(())
            }
            Repr::Marker(marker) => check_path(marker.path),
            Repr::Probe(probe) => check_path(probe.path),
            // Only a probe may say its sender hears nothing.
            Repr::ProbeAck(probe) if probe.unheard => Err(Error::Reserved),
            Repr::ProbeAck(probe) => check_path(probe.path),
            Repr::Nack(nack) => check_path(nack.path),
            Repr::Abandon(a) => check_path(a.path),
            Repr::Unheard(u) => check_path(u.path),
            Repr::SigAck(entries) => entries.check(),
            Repr::Feedback(credits) => {
                if credits.len() > MAX_PATHS {
                    return Err(Error::BadLength);
                }
                credits
                    .iter()
                    .try_for_each(|credit| check_path(credit.path))
            }
        }
    }

    /// Writes the packet into the first [`Repr::buffer_len`] bytes of `packet`'s buffer.
    ///
    /// Bytes past [`Repr::buffer_len`] are left alone; since a data payload runs to the end of
    /// the packet, send only the first [`Repr::buffer_len`] bytes. Fails with
    /// [`Error::BufferTooSmall`] if the buffer is too short, or as [`Repr::check`]; on failure,
    /// nothing has been written.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        self.check()?;
        if packet.as_bytes().len() < self.buffer_len() {
            return Err(Error::BufferTooSmall);
        }
        packet.set_version(VERSION)?;
        packet.set_kind(self.kind())?;
        match *self {
            Repr::Data { path, seq, payload } => {
                packet.set_path(path)?;
                match seq {
                    Some(seq) => {
                        packet.set_flags(FLAG_HAS_SEQ)?;
                        packet.set_seq(seq)?;
                    }
                    None => packet.set_flags(0)?,
                }
                packet
                    .payload_mut()?
                    .get_mut(..payload.len())
                    .ok_or(Error::BufferTooSmall)?
                    .copy_from_slice(payload);
            }
            Repr::Marker(marker) => {
                packet.set_path(marker.path)?;
                packet.set_flags(0)?;
                packet.set_round(marker.number.round)?;
                packet.set_deficit(marker.number.deficit)?;
                packet.set_tx_bytes(marker.tx_bytes)?;
            }
            Repr::Probe(probe) | Repr::ProbeAck(probe) => {
                packet.set_path(probe.path)?;
                packet.set_flags(if probe.unheard { PROBE_UNHEARD } else { 0 })?;
                packet.set_probe_id(probe.id)?;
                packet.set_probe_timestamp(probe.timestamp)?;
                packet.set_probe_rate_kbps(probe.rate_kbps)?;
            }
            Repr::Nack(Nack { path, first, count })
            | Repr::Abandon(Abandon { path, first, count }) => {
                packet.set_path(path)?;
                packet.set_flags(0)?;
                packet.set_probe_id(count)?;
                packet.set_probe_timestamp(first)?;
            }
            Repr::Unheard(Unheard {
                path,
                first,
                next_seq,
            }) => {
                packet.set_path(path)?;
                packet.set_flags(0)?;
                packet.set_probe_id(0)?;
                packet.set_probe_timestamp(first)?;
                packet.set_unheard_next_seq(next_seq)?;
            }
            Repr::ContextInstall {
                cid,
                generation,
                template,
            } => {
                let out = packet
                    .payload_mut_from(2)
                    .and_then(|b| b.get_mut(..2 + template.len()))
                    .ok_or(Error::BufferTooSmall)?;
                out[0] = cid;
                out[1] = generation;
                out[2..].copy_from_slice(template);
            }
            Repr::ContextAck { cid, generation } => {
                packet
                    .payload_mut_from(2)
                    .and_then(|b| b.get_mut(..2))
                    .ok_or(Error::BufferTooSmall)?
                    .copy_from_slice(&[cid, generation]);
            }
            Repr::Padding { path, id, len } => {
                packet.set_path(path)?;
                packet.set_flags(0)?;
                write(packet.buffer.as_mut(), field::SEQ, id.to_be_bytes())?;
                packet
                    .payload_mut_from(PADDING_HEADER_LEN)
                    .and_then(|b| b.get_mut(..len as usize))
                    .ok_or(Error::BufferTooSmall)?
                    .fill(0);
            }
            Repr::Ptcp { conn, segment } => {
                packet.set_conn(conn)?;
                packet
                    .payload_mut_from(field::SEGMENT)
                    .and_then(|b| b.get_mut(..segment.len()))
                    .ok_or(Error::BufferTooSmall)?
                    .copy_from_slice(segment);
            }
            Repr::SigAck(entries) => {
                packet.set_count(u8::try_from(entries.len()).map_err(|_| Error::BadLength)?)?;
                packet.set_flags(0)?;
                let out = packet
                    .payload_mut_from(SIGACK_HEADER_LEN)
                    .ok_or(Error::BufferTooSmall)?;
                entries.write(out)?;
            }
            Repr::Feedback(credits) => {
                packet.set_count(u8::try_from(credits.len()).map_err(|_| Error::BadLength)?)?;
                packet.set_flags(0)?;
                for (index, credit) in credits.iter().enumerate() {
                    packet.set_credit(index, credit)?;
                }
            }
        }
        Ok(())
    }

    /// Writes the packet at the start of `buf` and returns its length; see [`Repr::emit`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.emit(&mut Packet::new_unchecked(buf))?;
        Ok(self.buffer_len())
    }

    /// Writes the packet into a new vector of exactly [`Repr::buffer_len`] bytes; fails only as
    /// [`Repr::check`].
    pub fn emit_to_vec(&self) -> Result<Vec<u8>, Error> {
        self.check()?;
        let mut buf = vec![0; self.buffer_len()];
        self.emit_into(&mut buf)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn parse(bytes: &[u8]) -> Result<Repr<'_>, Error> {
        Repr::parse_bytes(bytes)
    }

    /// Parses, checks the expected repr, and checks that it emits back to the same bytes.
    fn pinned(bytes: &[u8], expected: Repr<'_>) {
        assert_eq!(parse(bytes), Ok(expected));
        assert_eq!(expected.buffer_len(), bytes.len());
        assert_eq!(expected.emit_to_vec().as_deref(), Ok(bytes));
        assert!(Packet::new_checked(bytes).is_ok());
    }

    #[test]
    fn data_overhead_values() {
        assert_eq!(data_overhead(false), 4);
        assert_eq!(data_overhead(true), 12);
        assert_eq!(MAX_FEEDBACK_LEN, 772);
    }

    #[test]
    fn padding_is_an_id_and_zeros_as_long_as_a_data_packet() {
        let mut bytes = vec![0x01, 0x0c, 0x02, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0x05];
        bytes.extend([0; 5]);
        let repr = Repr::Padding {
            path: PathId(2),
            id: PADDING_ID_BIT | 5,
            len: 5,
        };
        pinned(&bytes, repr);
        let data = Repr::Data {
            path: PathId(2),
            seq: Some(5),
            payload: &[7; 5],
        };
        assert_eq!(data.buffer_len(), repr.buffer_len());
        assert_eq!(
            Repr::Padding {
                path: PathId(2),
                id: 0,
                len: 5
            }
            .emit_to_vec(),
            Err(Error::Reserved)
        );
        pinned(
            &bytes[..12],
            Repr::Padding {
                path: PathId(2),
                id: PADDING_ID_BIT | 5,
                len: 0,
            },
        );
        // Padding that is not zeros, an id without its top bit, or flags: refused.
        let mut bad = bytes.clone();
        bad[14] = 1;
        assert_eq!(parse(&bad), Err(Error::Reserved));
        let mut bad = bytes.clone();
        bad[4] = 0;
        assert_eq!(parse(&bad), Err(Error::Reserved));
        let mut bad = bytes.clone();
        bad[3] = 1;
        assert_eq!(parse(&bad), Err(Error::Reserved));
        assert_eq!(parse(&bytes[..11]), Err(Error::Truncated));
    }

    #[test]
    fn data_without_seq() {
        let bytes = [0x01, 0x01, 0x03, 0x00, 0xde, 0xad, 0xbe, 0xef];
        let repr = Repr::Data {
            path: PathId(3),
            seq: None,
            payload: &[0xde, 0xad, 0xbe, 0xef],
        };
        pinned(&bytes, repr);
    }

    #[test]
    fn data_with_seq() {
        let bytes = [
            0x01, 0x01, 0x3f, 0x01, // header, path 63, HAS_SEQ
            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // seq
            b'h', b'i',
        ];
        let repr = Repr::Data {
            path: PathId(63),
            seq: Some(0x0102_0304_0506_0708),
            payload: b"hi",
        };
        pinned(&bytes, repr);
    }

    #[test]
    fn data_empty_payload() {
        pinned(
            &[0x01, 0x01, 0x00, 0x00],
            Repr::Data {
                path: PathId(0),
                seq: None,
                payload: &[],
            },
        );
        pinned(
            &[0x01, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0],
            Repr::Data {
                path: PathId(0),
                seq: Some(0),
                payload: &[],
            },
        );
    }

    #[test]
    fn marker() {
        let bytes = [
            0x01, 0x02, 0x07, 0x00, // header, path 7
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // round 256
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, // deficit -2
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, // tx_bytes 2^32
        ];
        let repr = Repr::Marker(Marker {
            path: PathId(7),
            number: PacketNumber {
                round: 256,
                deficit: -2,
            },
            tx_bytes: 1 << 32,
        });
        pinned(&bytes, repr);
    }

    #[test]
    fn feedback() {
        let bytes = [
            0x01, 0x03, 0x02, 0x00, // header, 2 entries
            0x04, 0x00, 0x00, 0x00, // path 4
            0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, // 65536 bytes
            0x3f, 0x00, 0x00, 0x00, // path 63
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // u64::MAX
        ];
        let credits = [
            Credit {
                path: PathId(4),
                limit_bytes: 65536,
            },
            Credit {
                path: PathId(63),
                limit_bytes: u64::MAX,
            },
        ];
        pinned(&bytes, Repr::Feedback(Credits::from_slice(&credits)));

        let Ok(Repr::Feedback(parsed)) = parse(&bytes) else {
            panic!("not feedback");
        };
        assert_eq!(parsed.len(), 2);
        assert!(!parsed.is_empty());
        assert_eq!(parsed.get(1), Some(credits[1]));
        assert_eq!(parsed.get(2), None);
        assert_eq!(parsed.iter().len(), 2);
        assert_eq!(parsed.iter().collect::<Vec<_>>(), credits);
        assert_eq!(format!("{parsed:?}"), format!("{credits:?}"));
    }

    #[test]
    fn feedback_empty() {
        pinned(
            &[0x01, 0x03, 0x00, 0x00],
            Repr::Feedback(Credits::default()),
        );
    }

    #[test]
    fn feedback_max_paths() {
        let credits: Vec<Credit> = (0..MAX_PATHS as u8)
            .map(|path| Credit {
                path: PathId(path),
                limit_bytes: u64::from(path) * 1000,
            })
            .collect();
        let repr = Repr::Feedback(Credits::from_slice(&credits));
        let bytes = repr.emit_to_vec().unwrap();
        assert_eq!(bytes.len(), MAX_FEEDBACK_LEN);
        assert_eq!(parse(&bytes), Ok(repr));
    }

    #[test]
    fn credits_equality_ignores_form() {
        let credits = [Credit {
            path: PathId(1),
            limit_bytes: 2,
        }];
        let wire = [1, 3, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let Ok(Repr::Feedback(parsed)) = parse(&wire) else {
            panic!("not feedback");
        };
        assert_eq!(parsed, Credits::from(&credits[..]));
        assert_ne!(parsed, Credits::default());
        let other = [Credit {
            path: PathId(1),
            limit_bytes: 3,
        }];
        assert_ne!(parsed, Credits::from_slice(&other));
    }

    #[test]
    fn truncated() {
        for bytes in [
            &[][..],
            &[0x01],
            &[0x01, 0x01],
            &[0x01, 0x01, 0x00],
            // HAS_SEQ but only 7 bytes of sequence number.
            &[0x01, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0],
            &[0x01, 0x02, 0x00],
            &[0x01, 0x03],
            // One entry announced, 11 bytes present.
            &[0x01, 0x03, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(parse(bytes), Err(Error::Truncated), "{bytes:?}");
        }
        let marker = [0x01, 0x02, 0x00, 0x00].iter().chain(&[0; 23]);
        let marker: Vec<u8> = marker.copied().collect();
        assert_eq!(marker.len(), MARKER_LEN - 1);
        assert_eq!(parse(&marker), Err(Error::Truncated));
    }

    #[test]
    fn unknown_version() {
        assert_eq!(parse(&[0x00]), Err(Error::UnknownVersion(0)));
        assert_eq!(parse(&[0x02]), Err(Error::UnknownVersion(2)));
        assert_eq!(
            parse(&[0xff, 0x01, 0x00, 0x00]),
            Err(Error::UnknownVersion(255))
        );
        assert_eq!(
            Packet::new_checked(&[0x02, 0x01, 0x00, 0x00][..]),
            Err(Error::UnknownVersion(2))
        );
    }

    #[test]
    fn unknown_kind() {
        for kind in [0, 14, 0x80, 0xff] {
            assert_eq!(
                parse(&[0x01, kind, 0x00, 0x00]),
                Err(Error::UnknownKind(kind))
            );
        }
        assert_eq!(parse(&[0x01, 0x00]), Err(Error::UnknownKind(0)));
        assert_eq!(Kind::try_from(14), Err(Error::UnknownKind(14)));
        for kind in [
            Kind::Padding,
            Kind::ContextInstall,
            Kind::ContextAck,
            Kind::Ptcp,
            Kind::Abandon,
            Kind::Unheard,
            Kind::Data,
            Kind::Marker,
            Kind::Feedback,
            Kind::Probe,
            Kind::ProbeAck,
            Kind::Nack,
            Kind::SigAck,
        ] {
            assert_eq!(Kind::try_from(u8::from(kind)), Ok(kind));
        }
    }

    #[test]
    fn bad_path() {
        assert_eq!(
            parse(&[0x01, 0x01, 64, 0x00, 0xaa]),
            Err(Error::BadPath(64))
        );
        assert_eq!(parse(&[0x01, 0x01, 0xff, 0x00]), Err(Error::BadPath(255)));
        let mut marker = [0; MARKER_LEN];
        marker[..4].copy_from_slice(&[0x01, 0x02, 64, 0x00]);
        assert_eq!(parse(&marker), Err(Error::BadPath(64)));
        let feedback = [0x01, 0x03, 0x01, 0x00, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(parse(&feedback), Err(Error::BadPath(64)));
    }

    #[test]
    fn bad_length() {
        let mut marker = vec![0; MARKER_LEN + 1];
        marker[..4].copy_from_slice(&[0x01, 0x02, 0x00, 0x00]);
        assert_eq!(parse(&marker), Err(Error::BadLength));
        // One entry announced, 13 bytes present.
        let feedback = [
            0x01, 0x03, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(parse(&feedback), Err(Error::BadLength));
        // No entries announced, one present.
        let feedback = [0x01, 0x03, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(parse(&feedback), Err(Error::BadLength));
        // 65 entries, consistent length: too many paths.
        let mut feedback = vec![0; FEEDBACK_HEADER_LEN + FEEDBACK_ENTRY_LEN * 65];
        feedback[..4].copy_from_slice(&[0x01, 0x03, 65, 0x00]);
        assert_eq!(parse(&feedback), Err(Error::BadLength));
        assert_eq!(parse(&[0x01, 0x03, 0xff, 0x00]), Err(Error::BadLength));
    }

    #[test]
    fn reserved() {
        for flags in [0x02, 0x03, 0x80, 0xff] {
            assert_eq!(
                parse(&[0x01, 0x01, 0x00, flags, 0, 0, 0, 0, 0, 0, 0, 0]),
                Err(Error::Reserved),
                "data flags {flags:#x}"
            );
        }
        let mut marker = [0; MARKER_LEN];
        marker[..4].copy_from_slice(&[0x01, 0x02, 0x00, 0x01]);
        assert_eq!(parse(&marker), Err(Error::Reserved));
        assert_eq!(parse(&[0x01, 0x03, 0x00, 0x01]), Err(Error::Reserved));
        for at in 5..8 {
            let mut feedback = [0x01, 0x03, 0x01, 0x00, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            feedback[at] = 0x01;
            assert_eq!(parse(&feedback), Err(Error::Reserved), "byte {at}");
        }
    }

    #[test]
    fn buffer_too_small() {
        let repr = Repr::Data {
            path: PathId(1),
            seq: Some(9),
            payload: b"abc",
        };
        let mut buf = [0xaa; 14];
        assert_eq!(repr.emit_into(&mut buf), Err(Error::BufferTooSmall));
        assert_eq!(buf, [0xaa; 14], "nothing written on failure");
        let marker = Repr::Marker(Marker::default());
        assert_eq!(
            marker.emit_into(&mut [0; MARKER_LEN - 1]),
            Err(Error::BufferTooSmall)
        );
        let mut empty = Packet::new_unchecked([0u8; 0]);
        assert_eq!(empty.set_version(VERSION), Err(Error::BufferTooSmall));
        assert_eq!(empty.payload_mut(), Err(Error::BufferTooSmall));
        let mut short = Packet::new_unchecked([0u8; 8]);
        assert_eq!(short.set_seq(1), Err(Error::BufferTooSmall));
        assert_eq!(
            short.set_credit(usize::MAX, Credit::default()),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn emit_rejects_invalid_repr() {
        let data = Repr::Data {
            path: PathId(64),
            seq: None,
            payload: &[],
        };
        assert_eq!(data.emit_to_vec(), Err(Error::BadPath(64)));
        let marker = Repr::Marker(Marker {
            path: PathId(200),
            ..Marker::default()
        });
        assert_eq!(marker.emit_to_vec(), Err(Error::BadPath(200)));
        let bad_credit = [Credit {
            path: PathId(64),
            limit_bytes: 0,
        }];
        let feedback = Repr::Feedback(Credits::from_slice(&bad_credit));
        assert_eq!(feedback.emit_to_vec(), Err(Error::BadPath(64)));
        let too_many = vec![Credit::default(); MAX_PATHS + 1];
        let feedback = Repr::Feedback(Credits::from_slice(&too_many));
        assert_eq!(feedback.emit_to_vec(), Err(Error::BadLength));
        assert_eq!(feedback.check(), Err(Error::BadLength));
    }

    #[test]
    fn emit_into_longer_buffer_leaves_tail() {
        let repr = Repr::Data {
            path: PathId(2),
            seq: None,
            payload: b"xy",
        };
        let mut buf = [0xaa; 10];
        assert_eq!(repr.emit_into(&mut buf), Ok(6));
        assert_eq!(buf, [1, 1, 2, 0, b'x', b'y', 0xaa, 0xaa, 0xaa, 0xaa]);
    }

    #[test]
    fn packet_setters_build_pinned_bytes() {
        let mut packet = Packet::new_unchecked([0u8; MARKER_LEN]);
        packet.set_version(VERSION).unwrap();
        packet.set_kind(Kind::Marker).unwrap();
        packet.set_path(PathId(7)).unwrap();
        packet.set_flags(0).unwrap();
        packet.set_round(256).unwrap();
        packet.set_deficit(-2).unwrap();
        packet.set_tx_bytes(1 << 32).unwrap();
        let packet = Packet::new_checked(packet.into_inner()).unwrap();
        assert_eq!(packet.path(), Ok(PathId(7)));
        assert_eq!(packet.round(), Ok(256));
        assert_eq!(packet.deficit(), Ok(-2));
        assert_eq!(packet.tx_bytes(), Ok(1 << 32));
        assert_eq!(
            &packet.as_bytes()[..12],
            &[1, 2, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0]
        );

        let mut packet = Packet::new_unchecked([0u8; 16]);
        packet.set_version(VERSION).unwrap();
        packet.set_kind(Kind::Feedback).unwrap();
        packet.set_count(1).unwrap();
        let credit = Credit {
            path: PathId(1),
            limit_bytes: 2,
        };
        packet.set_credit(0, credit).unwrap();
        assert_eq!(packet.credit_path(0), Ok(PathId(1)));
        assert_eq!(packet.credit_reserved(0), Ok([0; 3]));
        assert_eq!(packet.credit_limit_bytes(0), Ok(2));
        assert_eq!(packet.credit_limit_bytes(1), Err(Error::Truncated));
        assert_eq!(packet.credit_path(usize::MAX), Err(Error::Truncated));
        assert_eq!(
            packet.as_ref(),
            &[1, 3, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
        );

        let mut packet = Packet::new_unchecked([0u8; 14]);
        packet.set_version(VERSION).unwrap();
        packet.set_kind(Kind::Data).unwrap();
        packet.set_path(PathId(5)).unwrap();
        packet.set_flags(FLAG_HAS_SEQ).unwrap();
        packet.set_seq(0x0102).unwrap();
        packet.payload_mut().unwrap().copy_from_slice(b"ok");
        let bytes = packet.into_inner();
        assert_eq!(bytes, [1, 1, 5, 1, 0, 0, 0, 0, 0, 0, 1, 2, b'o', b'k']);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.seq(), Ok(Some(0x0102)));
        assert_eq!(packet.payload(), Ok(&b"ok"[..]));
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            Error::UnknownVersion(2).to_string(),
            "unknown wire version 2 (this build speaks version 1)"
        );
        assert_eq!(
            Error::BadPath(64).to_string(),
            "path id 64 out of range (at most 64 paths)"
        );
    }

    /// A [`Repr`] with owned storage, for property tests.
    #[derive(Clone, Debug)]
    enum Owned {
        Data {
            path: PathId,
            seq: Option<u64>,
            payload: Vec<u8>,
        },
        Marker(Marker),
        Feedback(Vec<Credit>),
        Probe(Probe),
        ProbeAck(Probe),
        Nack(Nack),
        Abandon(Abandon),
        Unheard(Unheard),
        Ptcp {
            conn: u16,
            segment: Vec<u8>,
        },
        ContextInstall {
            cid: u8,
            generation: u8,
            template: Vec<u8>,
        },
        ContextAck {
            cid: u8,
            generation: u8,
        },
        Padding {
            path: PathId,
            id: u64,
            len: u32,
        },
    }

    impl Owned {
        fn repr(&self) -> Repr<'_> {
            match self {
                Owned::Data { path, seq, payload } => Repr::Data {
                    path: *path,
                    seq: *seq,
                    payload,
                },
                Owned::Marker(marker) => Repr::Marker(*marker),
                Owned::Feedback(credits) => Repr::Feedback(Credits::from_slice(credits)),
                Owned::Probe(p) => Repr::Probe(*p),
                Owned::ProbeAck(p) => Repr::ProbeAck(*p),
                Owned::Nack(n) => Repr::Nack(*n),
                Owned::Abandon(a) => Repr::Abandon(*a),
                Owned::Unheard(u) => Repr::Unheard(*u),
                Owned::Ptcp { conn, segment } => Repr::Ptcp {
                    conn: *conn,
                    segment,
                },
                Owned::ContextInstall {
                    cid,
                    generation,
                    template,
                } => Repr::ContextInstall {
                    cid: *cid,
                    generation: *generation,
                    template,
                },
                Owned::ContextAck { cid, generation } => Repr::ContextAck {
                    cid: *cid,
                    generation: *generation,
                },
                Owned::Padding { path, id, len } => Repr::Padding {
                    path: *path,
                    id: *id,
                    len: *len,
                },
            }
        }
    }

    fn arb_path() -> impl Strategy<Value = PathId> {
        (0..MAX_PATHS as u8).prop_map(PathId)
    }

    fn arb_owned() -> impl Strategy<Value = Owned> {
        let credit =
            (arb_path(), any::<u64>()).prop_map(|(path, limit_bytes)| Credit { path, limit_bytes });
        prop_oneof![
            (
                arb_path(),
                proptest::option::of(any::<u64>()),
                vec(any::<u8>(), 0..1500)
            )
                .prop_map(|(path, seq, payload)| Owned::Data { path, seq, payload }),
            (arb_path(), any::<u64>(), any::<i64>(), any::<u64>()).prop_map(
                |(path, round, deficit, tx_bytes)| Owned::Marker(Marker {
                    path,
                    number: PacketNumber { round, deficit },
                    tx_bytes,
                })
            ),
            vec(credit, 0..=MAX_PATHS).prop_map(Owned::Feedback),
            (
                arb_path(),
                any::<u32>(),
                any::<u64>(),
                any::<u32>(),
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(path, id, timestamp, rate_kbps, ack, unheard)| {
                    let p = Probe {
                        path,
                        id,
                        timestamp,
                        rate_kbps,
                        unheard: unheard && !ack,
                    };
                    if ack {
                        Owned::ProbeAck(p)
                    } else {
                        Owned::Probe(p)
                    }
                }),
            (arb_path(), any::<u64>(), any::<u32>())
                .prop_map(|(path, first, count)| Owned::Nack(Nack { path, first, count })),
            (arb_path(), any::<u64>(), any::<u32>()).prop_map(|(path, first, count)| {
                Owned::Abandon(Abandon { path, first, count })
            }),
            (arb_path(), any::<u64>(), any::<u64>()).prop_map(|(path, first, next_seq)| {
                Owned::Unheard(Unheard {
                    path,
                    first,
                    next_seq,
                })
            }),
            (any::<u16>(), vec(any::<u8>(), 1..1500))
                .prop_map(|(conn, segment)| Owned::Ptcp { conn, segment }),
            (
                any::<u8>(),
                0..CONTEXT_GENERATIONS,
                vec(any::<u8>(), MIN_TEMPLATE_LEN..=MAX_TEMPLATE_LEN)
            )
                .prop_map(|(cid, generation, template)| Owned::ContextInstall {
                    cid,
                    generation,
                    template
                }),
            (any::<u8>(), 0..CONTEXT_GENERATIONS)
                .prop_map(|(cid, generation)| Owned::ContextAck { cid, generation }),
            (arb_path(), any::<u64>(), 0u32..1500).prop_map(|(path, id, len)| Owned::Padding {
                path,
                id: id | PADDING_ID_BIT,
                len
            }),
        ]
    }

    /// Arbitrary bytes up to 2048 long, half of them starting with version 1 and a known kind.
    fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            vec(any::<u8>(), 0..=2048),
            (1u8..=11, vec(any::<u8>(), 0..=2046)).prop_map(|(kind, rest)| {
                let mut bytes = vec![VERSION, kind];
                bytes.extend(rest);
                bytes
            }),
        ]
    }

    /// Parses `bytes` and, on success, checks the canonical encoding. Also reads every field
    /// through an unchecked view, which must not panic either.
    fn check_arbitrary(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(repr) = parse(bytes) {
            prop_assert_eq!(repr.buffer_len(), bytes.len());
            prop_assert_eq!(repr.emit_to_vec(), Ok(bytes.to_vec()));
            prop_assert!(Packet::new_checked(bytes).is_ok());
        }
        let packet = Packet::new_unchecked(bytes);
        let _ = (
            packet.version(),
            packet.kind(),
            packet.path(),
            packet.count(),
        );
        let _ = (
            packet.flags(),
            packet.seq(),
            packet.payload(),
            packet.round(),
        );
        let _ = (packet.deficit(), packet.tx_bytes(), packet.check_len());
        let _ = (packet.probe_id(), packet.probe_timestamp());
        let _ = (packet.conn(), packet.segment());
        for index in [0, 1, 63, 64, 1 << 40, usize::MAX] {
            let _ = packet.credit_path(index);
            let _ = packet.credit_reserved(index);
            let _ = packet.credit_limit_bytes(index);
        }
        Ok(())
    }

    #[test]
    fn context_vectors() {
        let template = [0x45u8; 40];
        let install = Repr::ContextInstall {
            cid: 7,
            generation: 15,
            template: &template,
        };
        let bytes = install.emit_to_vec().unwrap();
        assert_eq!(bytes[..4], [VERSION, 10, 7, 15]);
        assert_eq!(bytes.len(), 44);
        assert_eq!(parse(&bytes), Ok(install));
        let ack = Repr::ContextAck {
            cid: 255,
            generation: 3,
        };
        assert_eq!(ack.emit_to_vec().unwrap(), [VERSION, 11, 255, 3]);
        assert_eq!(parse(&[VERSION, 11, 255, 3]), Ok(ack));
        // Generations are below 16; templates 40 to 72 bytes; an acknowledgement 4 bytes.
        assert_eq!(parse(&[VERSION, 11, 0, 16]), Err(Error::Reserved));
        assert_eq!(parse(&[VERSION, 11, 0, 0, 0]), Err(Error::BadLength));
        assert_eq!(parse(&[VERSION, 11, 0]), Err(Error::Truncated));
        assert_eq!(parse(&bytes[..43]), Err(Error::Truncated));
        let mut long = bytes.clone();
        long.extend([0; 33]);
        assert_eq!(parse(&long), Err(Error::BadLength));
        let too_short = Repr::ContextInstall {
            cid: 0,
            generation: 0,
            template: &template[..39],
        };
        assert_eq!(too_short.emit_to_vec(), Err(Error::BadLength));
        let bad_generation = Repr::ContextAck {
            cid: 0,
            generation: 16,
        };
        assert_eq!(bad_generation.emit_to_vec(), Err(Error::Reserved));
    }

    #[test]
    fn probe_vectors() {
        let probe = Probe {
            path: PathId(2),
            id: 0x0102_0304,
            timestamp: 0x1122_3344_5566_7788,
            rate_kbps: 10_000,
            unheard: false,
        };
        let bytes = Repr::Probe(probe).emit_to_vec().unwrap();
        assert_eq!(
            bytes,
            [
                1, 4, 2, 0, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0x27,
                0x10
            ]
        );
        assert_eq!(parse(&bytes), Ok(Repr::Probe(probe)));
        let mut ack = bytes.clone();
        ack[1] = 5;
        assert_eq!(parse(&ack), Ok(Repr::ProbeAck(probe)));
        assert_eq!(parse(&ack[..19]), Err(Error::Truncated));
        assert_eq!(parse(&ack[..16]), Err(Error::Truncated));
        let mut flagged = ack.clone();
        flagged[3] = 1;
        assert_eq!(parse(&flagged), Err(Error::Reserved));
        // A probe may say its sender hears nothing on the path; no other bit, no ack.
        let unheard = Probe {
            unheard: true,
            ..probe
        };
        let mut bytes_unheard = bytes.clone();
        bytes_unheard[3] = PROBE_UNHEARD;
        assert_eq!(Repr::Probe(unheard).emit_to_vec().unwrap(), bytes_unheard);
        assert_eq!(parse(&bytes_unheard), Ok(Repr::Probe(unheard)));
        bytes_unheard[3] = 0x02;
        assert_eq!(parse(&bytes_unheard), Err(Error::Reserved));
        assert_eq!(Repr::ProbeAck(unheard).emit_to_vec(), Err(Error::Reserved));
    }

    #[test]
    fn unheard_vectors() {
        let unheard = Unheard {
            path: PathId(3),
            first: 0x1122_3344_5566_7788,
            next_seq: 0x0102_0304_0506_0708,
        };
        let bytes = Repr::Unheard(unheard).emit_to_vec().unwrap();
        assert_eq!(
            bytes,
            [
                1, 13, 3, 0, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 1, 2, 3,
                4, 5, 6, 7, 8
            ]
        );
        assert_eq!(parse(&bytes), Ok(Repr::Unheard(unheard)));
        assert_eq!(parse(&bytes[..23]), Err(Error::Truncated));
        // No flags, and no count: those bytes are a NACK's, zero here.
        for at in [3, 7] {
            let mut reserved = bytes.clone();
            reserved[at] = 1;
            assert_eq!(parse(&reserved), Err(Error::Reserved));
        }
        let mut bad_path = bytes.clone();
        bad_path[2] = 64;
        assert!(parse(&bad_path).is_err());
    }

    #[test]
    fn ptcp_vectors() {
        let bytes = [1, 9, 0xbe, 0xef, 0x01, 0x02];
        pinned(
            &bytes,
            Repr::Ptcp {
                conn: 0xbeef,
                segment: &[1, 2],
            },
        );
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.conn(), Ok(0xbeef));
        assert_eq!(packet.segment(), Ok(&[1u8, 2][..]));
        // No segment, or not even the connection id: truncated.
        assert_eq!(parse(&bytes[..4]), Err(Error::Truncated));
        assert_eq!(parse(&bytes[..3]), Err(Error::Truncated));
        let empty = Repr::Ptcp {
            conn: 1,
            segment: &[],
        };
        assert_eq!(empty.emit_to_vec(), Err(Error::BadLength));
        let mut short = [0u8; 5];
        let repr = Repr::Ptcp {
            conn: 1,
            segment: &[1, 2],
        };
        assert_eq!(repr.emit_into(&mut short), Err(Error::BufferTooSmall));
        assert_eq!(short, [0; 5], "nothing written on failure");
    }

    proptest! {
        #[test]
        fn round_trip(owned in arb_owned()) {
            let repr = owned.repr();
            let bytes = repr.emit_to_vec().unwrap();
            prop_assert_eq!(bytes.len(), repr.buffer_len());
            prop_assert_eq!(parse(&bytes), Ok(repr));
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes).unwrap()), Ok(repr));
        }

        #[test]
        fn parse_arbitrary_bytes(bytes in arb_bytes()) {
            check_arbitrary(&bytes)?;
        }

        #[test]
        fn parse_mutated_packets(
            owned in arb_owned(),
            edits in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in proptest::option::of(any::<prop::sample::Index>()),
            extra in vec(any::<u8>(), 0..16),
        ) {
            let mut bytes = owned.repr().emit_to_vec().unwrap();
            for (at, byte) in edits {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            match cut {
                Some(cut) => bytes.truncate(cut.index(bytes.len() + 1)),
                None => bytes.extend(extra),
            }
            check_arbitrary(&bytes)?;
        }
    }
}

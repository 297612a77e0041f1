//! Path identifiers and the implicit packet number of the stripe paper.

use core::fmt;

/// The most paths one bond may stripe over. Path ids are carried in one byte on the wire.
pub const MAX_PATHS: usize = 64;

/// Index of a path (the paper's channel), `0..N` in the order both ends number them.
///
/// Both ends must number paths identically: condition C2 of section 5 (the receiver visits
/// channels in the same order as the sender).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u8);

impl PathId {
    /// The path's index as a `usize`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path{}", self.0)
    }
}

/// The implicit number `(R, D)` of the next packet on a path (stripe paper section 5 and
/// Appendix B): the round it is sent in and the deficit counter just before it is sent.
///
/// A [`Marker`] carries this for its path so the receiver can adopt it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PacketNumber {
    /// Round number `R_i` (starts at 1).
    pub round: u64,
    /// Deficit counter `DC_i`, in the scheduler's units (bytes for SRR, packets for GRR/RR).
    pub deficit: i64,
}

/// A marker (stripe paper section 5, Appendix A `SendMarker`): the sender's state for one path,
/// sent in band on that path so the receiver can resynchronise after loss.
///
/// `tx_bytes` is the credit extension of section 6.3.1: the cumulative data bytes the sender had
/// transmitted on the path before this marker, so the receiver can account for lost bytes when
/// granting credit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Marker {
    /// The path the marker describes (and travels on).
    pub path: PathId,
    /// The implicit number of the next data packet on `path`.
    pub number: PacketNumber,
    /// Cumulative data payload bytes sent on `path` before this marker.
    pub tx_bytes: u64,
}

/// A credit grant (section 6.3.1): the sender may transmit data on `path` while its cumulative
/// data bytes on that path stay at or below `limit_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Credit {
    /// The path the grant is for.
    pub path: PathId,
    /// Cumulative byte limit.
    pub limit_bytes: u64,
}

//! pTCP, the striped reliable transport of braid, as sans-IO state machines.
//!
//! After "A Transport Layer Approach for Achieving Aggregate Bandwidths on Multi-homed Mobile
//! Hosts" (Hsieh, Sivakumar; pTCP), called *the pTCP paper* in the docs. pTCP splits a striped
//! connection in two (section 2 "Decoupling of Functionalities", Figure 1):
//!
//! - [`MicroFlow`] is the paper's **TCP-v**, one per path: congestion control
//!   ([`congestion`]), TCP's reliability over *virtual* packets (a SACK scoreboard, fast
//!   retransmit, the RFC 6298 timer in [`rtt`]). It never sees a byte of data: its sequence space
//!   is its own and numbers virtual packets.
//! - [`StripedConnection`] is the paper's **SM** (striped connection manager): the send and
//!   receive buffers, flow control with one receive buffer, delayed binding of data to virtual
//!   packets, re-striping, redundant striping, FREEZE/resume, connection management.
//! - [`wire`] is the segment format.
//!
//! Nothing here reads a clock, opens a socket or draws a random number: time comes in as
//! `now: Instant` and datagrams go in and out through `handle_datagram`/`poll_transmit`. See
//! `docs/ptcp.md` for the design and what is not done yet.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod congestion;
pub mod connection;
pub mod delivery_rate;
pub mod micro_flow;
pub mod ranges;
pub mod recv_buffer;
pub mod rtt;
pub mod wire;

pub use congestion::{CongestionAlgorithm, CongestionConfig};
pub use connection::{
    Config, Event, State, Stats, StripedConnection, DEFAULT_KEEPALIVE, DEFAULT_USER_TIMEOUT,
};

pub use micro_flow::MicroFlow;

use core::fmt;

/// The most micro-flows one connection has: 128, so that the pTCP paper's largest weight (100
/// flows on one path, section 4.2 and Figure 6) fits with room for other paths. The flow id is
/// one byte on the wire; ids from 128 up are rejected (bit 7 stays free for a later version).
pub const MAX_FLOWS: usize = 128;

/// A micro-flow of a connection; flows of one connection are numbered `0..n` by the side that
/// opens it, and both ends use the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u8);

impl FlowId {
    /// The index as a `usize`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow{}", self.0)
    }
}

/// A virtual packet's number in its micro-flow's sequence space (TCP-v counts packets, not
/// bytes: the data bound to a virtual packet is the SM's business).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualSeq(pub u64);

impl VirtualSeq {
    /// The next number.
    #[must_use]
    pub const fn next(self) -> VirtualSeq {
        VirtualSeq(self.0.saturating_add(1))
    }
}

//! The braid session, sans-IO: everything one end of a bond does between its TUN device and its
//! UDP sockets, as a state machine.
//!
//! - [`compress`]: TCP/IP header compression inside the tunnel (per-flow contexts, no deltas).
//! - [`cookie`]: handshake flood protection (WireGuard's cookie MACs, cookie replies under load,
//!   a rate limit per source).
//! - [`keys`]: static X25519 keys as base64.
//! - [`noise`]: the Noise IK handshake's parameters, with injected randomness.
//! - [`params`]: the bond parameters the initiator chooses and sends in the handshake.
//! - [`pmtu`]: packets larger than the bond carries (ICMP "packet too big", IPv4 fragments).
//! - [`policy`]: per-class path policies (which paths a class uses; per-packet or per-flow).
//! - [`replay`]: the per-path anti-replay window.
//! - [`endpoint`]: the bond endpoint (striper, resequencer, credits) without crypto.
//! - [`session`]: the session: handshake, rekey, per-path encryption, liveness probes, and the
//!   endpoint inside.
//! - `hostile` (feature `fuzzing`): a bond whose peer is authenticated but lies, for the
//!   hostile-peer tests and the fuzz target.

#![warn(missing_docs)]

pub mod compress;
pub mod cookie;
pub mod endpoint;
#[cfg(feature = "fuzzing")]
pub mod hostile;
pub mod keys;
pub mod noise;
pub mod params;
pub mod pmtu;
pub mod policy;
pub mod qos;
pub mod replay;
pub mod retransmit;
pub mod session;
pub mod tcp_retransmit;
#[cfg(test)]
mod test_packets;

pub use keys::{PrivateKey, PublicKey};
pub use params::BondParams;
pub use session::{
    initiator_key, DropReason, PathStatus, PetStatus, PtcpCounters, PtcpSegment, Role, Session,
    SessionConfig, SessionStatus, PTCP_RX_QUEUE,
};

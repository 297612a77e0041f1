//! Sans-IO protocol cores of braid.
//!
//! Every type here is a plain state machine: it takes `now` and input, and is polled for output
//! and timeouts. Nothing here opens a socket, reads a clock, starts a thread or asks the OS for
//! randomness, so the daemon and the simulator drive the very same code.
//!
//! The striping half follows "An Architecture for Packet-Striping Protocols" (Hari, Varghese,
//! Parulkar; ACM TOCS 17(4), 1999), called "the stripe paper" in the docs:
//! - [`scheduler`]: causal fair-queuing schedulers (`f(s)`, `g(s, p)`): SRR, RFQ, GRR, RR.
//! - [`striper`]: the sender: striping, per-path transmit queues, markers, credits.
//! - [`resequence`]: the receiver: logical reception with markers, sequence numbers, or none.
//! - [`credit`]: the receiver's credit grants (section 6.3.1).
//!
//! From the BAG paper ("Bandwidth Aggregation for TCP applications"): [`scheduler::Edpf`]
//! (section III-B) and [`pet`], EDPF on packet-pair estimates with its SIG-ACK receiver
//! (section V-A).

#![warn(missing_docs)]

pub mod credit;
pub mod path;
pub mod pet;
pub mod resequence;
pub mod scheduler;
pub mod striper;
pub mod time;

pub use path::{Credit, Marker, PacketNumber, PathId, MAX_PATHS};
pub use time::{Duration, Instant};

//! Per-class service guarantees for braid: JoBS, the algorithm of the QoSbox.
//!
//! The specification is "The QoSbox: Quantitative Service Differentiation in BSD Routers"
//! (Christin, Liebeherr), called *the QoSbox paper* in the docs; section and figure numbers are
//! its own. A packet goes through three pieces (the paper's Figure 2):
//!
//! - [`classifier`]: raw IP bytes to a [`ClassId`], by DSCP (IPv4) or Traffic Class (IPv6) and
//!   optional 5-tuple filters (section 2.1, lines (6)-(9) of Figure 1).
//! - [`jobs`]: the [`Jobs`] queue, a sans-IO state machine: per-class buffers, busy-period
//!   accounting, the rate allocation and dropping of Figure 4 and the dequeue rule of
//!   section 2.3.
//! - [`config`]: the `[qos]` table of `braid.toml` in readable units, checked, turned into a
//!   [`JobsConfig`] and a [`Classifier`]; [`altq`] imports the QoSbox/ALTQ configuration text
//!   of Figure 1.
//!
//! [`workload`] holds the paper's four constraint sets (section 4.4) and the loaded-link
//! workload that the overhead benchmarks time.
//!
//! Like the cores of `braid-proto`, nothing here reads a clock, opens a socket, starts a thread
//! or asks the OS for randomness: `now` is passed in as a [`braid_proto::Instant`].

#![warn(missing_docs)]

pub mod altq;
pub mod classifier;
pub mod config;
pub mod jobs;
pub mod workload;

pub use classifier::{Classifier, Filter};
pub use config::{ClassTable, QosConfig};

pub use jobs::{
    BufferMode, ClassConfig, ClassStats, ClassStatus, ConfigError, Dequeued, DropReason, Dropped,
    EnqueueError, Feasibility, Jobs, JobsConfig, JobsStats, Relaxation,
};

use core::fmt;

/// The most classes a [`Jobs`] queue has (ALTQ allows 16; braid's backlog set is a 64-bit
/// mask).
pub const MAX_CLASSES: usize = 64;

/// A traffic class: its index in the configuration, from 0. The paper numbers classes from 1;
/// `ClassId(0)` is the paper's class 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId(pub u8);

impl ClassId {
    /// The index into per-class arrays.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for ClassId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "class {}", self.0)
    }
}

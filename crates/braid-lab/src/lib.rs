//! braid's real-kernel lab.
//!
//! [`Testbed`] builds a client and a server network namespace joined by one path per link;
//! each path goes through braid's own userspace link emulator ([`emulator`], because this
//! kernel has no netem) in a namespace of its own, or is a plain veth pair (direct mode).
//! [`traffic`] is a built-in bulk TCP/MPTCP sender and receiver, and [`runner`] runs a
//! [`Scenario`]'s variants over a testbed and collects a [`LabReport`]. Everything needs root;
//! see `docs/lab.md`.

#![warn(missing_docs)]

pub mod emulator;
pub mod error;
pub mod netns;
pub mod probe;
pub mod runner;
pub mod scenario;
pub mod sys;
pub mod testbed;
pub mod traffic;

pub use error::LabError;
pub use netns::{is_root, Netns};
pub use runner::{
    run, LabReport, Observer, PathSample, PtcpLauncher, PtcpOutcome, PtcpTransfer, RunOptions,
    StatusSample, StatusSampler, Tunnel, TunnelLauncher, VariantReport,
};
pub use scenario::{Mode, Scenario, ScenarioError, Variant};
pub use testbed::{Links, PathInfo, Testbed};

//! braid's deterministic discrete-event simulator.
//!
//! It drives the protocol cores of `braid-proto` (the same code the daemon runs) over simulated
//! links in virtual time, and regenerates the stripe paper's experiments
//! ([`experiments`]). A run is fixed by its scenario and its seed.

#![warn(missing_docs)]

pub mod emulated;
pub mod engine;
pub mod experiments;
pub mod link;
pub mod pair;
pub mod report;
pub mod source;
pub mod tcp;

pub use engine::{run, RunResult, Scenario, SimError};

//! The emulator's link model, sans I/O: what happens to a frame that arrives at one direction
//! of a path. It lives in the simulator ([`braid_sim::emulated`]) so that the simulator runs
//! the very model the emulator runs (`braid sim tcp-check`); see there for the model.

pub use braid_sim::emulated::{Change, DirectionConfig, LinkModel, ScheduleEntry, Verdict};

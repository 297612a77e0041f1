//! The lab's errors.

use std::io;

/// What went wrong building a testbed, running traffic or reading a scenario.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Not root (or without `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`).
    #[error("the lab needs root for network namespaces (run it as root, e.g. with sudo)")]
    NotRoot,
    /// An `ip` command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The scenario file is invalid.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    /// The braid variant needs a tunnel launcher and none is installed.
    #[error("the braid variant needs the daemon (braid up), not built yet")]
    BraidNotBuilt,
    /// The ptcp variant needs a pTCP launcher and none is installed.
    #[error("the ptcp variant needs the braid command's pTCP launcher (braid lab run)")]
    PtcpNotInstalled,
    /// A traffic run failed.
    #[error("traffic: {0}")]
    Traffic(String),
    /// The emulator failed.
    #[error("emulator: {0}")]
    Emulator(String),
    /// Interrupted by a signal.
    #[error("interrupted")]
    Interrupted,
}

impl LabError {
    /// Wrap an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> LabError {
        LabError::Io {
            what: what.into(),
            source,
        }
    }
}

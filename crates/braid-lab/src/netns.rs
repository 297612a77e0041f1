//! Network namespaces: create, enter from a thread, run `ip` in them, delete.

use crate::error::LabError;
use crate::sys;
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::thread::JoinHandle;

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

/// Run `ip ARGS` and return its stdout; on failure the error holds the command and stderr.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LabError::io("running `ip` (is iproute2 installed?)", e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// A named network namespace (`ip netns add NAME`). Dropping the handle does not delete the
/// namespace: [`crate::Testbed`] owns deletion, so that cleanup happens in one place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Create namespace `name` with its loopback up.
    pub fn create(name: &str) -> Result<Netns, LabError> {
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle for an existing namespace.
    pub fn existing(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The handle file `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }

    fn open(&self) -> Result<File, LabError> {
        File::open(self.path())
            .map_err(|e| LabError::io(format!("opening namespace {}", self.name), e))
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String, LabError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec NAME program`),
    /// for starting another process there, e.g. `braid up`.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name.as_str(), program]);
        c
    }

    /// Run `f` on a new thread that has entered the namespace, and return its result. Sockets
    /// created inside `f` belong to the namespace and can be used from any thread afterwards.
    pub fn run<T, F>(&self, f: F) -> Result<T, LabError>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        let file = self.open()?;
        std::thread::scope(|s| {
            s.spawn(move || {
                sys::setns_net(&file).map_err(|e| LabError::io("setns", e))?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Spawn a named thread that enters the namespace and then runs `f`.
    pub fn spawn<T, F>(
        &self,
        thread_name: &str,
        f: F,
    ) -> Result<JoinHandle<Result<T, LabError>>, LabError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, LabError> + Send + 'static,
    {
        let file = self.open()?;
        std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || {
                sys::setns_net(&file).map_err(|e| LabError::io("setns", e))?;
                drop(file);
                f()
            })
            .map_err(|e| LabError::io("spawning a thread", e))
    }

    /// Write a sysctl of the namespace (`key` as in `net.ipv4.conf.all.rp_filter`).
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_string();
        self.run(move || std::fs::write(&path, value.as_bytes()))?
            .map_err(|e| LabError::io(format!("writing {key} in {}", self.name), e))
    }

    /// Read a sysctl of the namespace.
    pub fn sysctl(&self, key: &str) -> Result<String, LabError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run(move || std::fs::read_to_string(&path))?
            .map(|s| s.trim().to_string())
            .map_err(|e| LabError::io(format!("reading {key} in {}", self.name), e))
    }

    /// Received and sent bytes of interface `dev` (from `/proc/thread-self/net/dev`).
    pub fn dev_bytes(&self, dev: &str) -> Result<(u64, u64), LabError> {
        let text = self
            .run(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?
            .map_err(|e| LabError::io("reading /proc/thread-self/net/dev", e))?;
        parse_dev_bytes(&text, dev).ok_or_else(|| {
            LabError::io(
                format!("interface {dev} in {}", self.name),
                std::io::ErrorKind::NotFound.into(),
            )
        })
    }

    /// Delete namespace `name` (`ip netns del`); a namespace that is already gone is fine.
    pub fn delete(name: &str) -> Result<(), LabError> {
        if !PathBuf::from(NETNS_DIR).join(name).exists() {
            return Ok(());
        }
        ip(&["netns", "del", name]).map(drop)
    }

    /// Send SIGTERM to every process running in namespace `name` but this one (the daemons a
    /// lab started there): deleting a namespace does not stop them, and they would run on
    /// with nothing to talk to. Returns how many were signalled.
    pub fn stop_processes(name: &str) -> usize {
        let Ok(out) = ip(&["netns", "pids", name]) else {
            return 0;
        };
        let own = std::process::id();
        out.split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .filter(|&p| p != own && p > 1)
            .filter_map(|p| libc::pid_t::try_from(p).ok())
            .filter(|&p| sys::terminate(p).is_ok())
            .count()
    }
}

/// `(rx_bytes, tx_bytes)` of `dev` in the text of `/proc/net/dev`.
fn parse_dev_bytes(text: &str, dev: &str) -> Option<(u64, u64)> {
    text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        Some((*f.first()?, *f.get(8)?))
    })
}

/// Whether the process can create namespaces (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_counters_parse() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0\n    p0: 12345      10    0    0    0     0          0         0    67890      20    0    0    0     0       0          0\n";
        assert_eq!(parse_dev_bytes(text, "p0"), Some((12345, 67890)));
        assert_eq!(parse_dev_bytes(text, "p1"), None);
    }
}

//! A client's floor for its handshake timestamps, kept across restarts.
//!
//! The server refuses an initiation whose timestamp is not above the last one it accepted from
//! that client (the replay check, Noise IK as WireGuard uses it). A client whose wall clock
//! is behind after a restart (a router without a real-time clock that boots at its image's
//! date until NTP runs; a clock NTP set back) would be refused until its clock caught up, and
//! NTP itself may need the tunnel. So the client keeps, in a small file, a timestamp above
//! every one it has sent, and starts its next session from the larger of that and its clock.
//!
//! While the daemon runs, the file holds a reservation: the session's starting clock plus its
//! running time plus [`RESERVE`], renewed every [`REFRESH_EVERY`] (the first time in the
//! daemon's first turn, before any handshake leaves), so it is always ahead of every
//! timestamp sent, even if the daemon is killed between two writes. Each crash may thus move
//! the next start's clock up to [`RESERVE`] ahead of the real time, which the server does not
//! mind (it only compares); a clean stop leaves the exact floor instead
//! ([`ClockFloor::finish`]), and a start that fails before its first turn writes nothing.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How far ahead of the session's clock the file's reservation is kept, in nanoseconds.
pub const RESERVE: u64 = 2 * 60 * 1_000_000_000;

/// How often the reservation is renewed, in nanoseconds of running time.
pub const REFRESH_EVERY: u64 = 60 * 1_000_000_000;

/// After a failed write, the next try, in nanoseconds of running time.
const RETRY_AFTER: u64 = 1_000_000_000;

/// A floor more than this far ahead of the clock (ns) is taken as damaged, not as a clock
/// that went back: ten years.
const FLOOR_AHEAD_MAX: u64 = 10 * 365 * 86_400 * 1_000_000_000;

/// The floor file's name for a client of public key `key` (its first 8 bytes in hex): the
/// server's replay check is per key, and a renamed interface keeps its floor.
pub fn file_name(key: &braid_session::PublicKey) -> String {
    let hex: String = key.0[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("client-{hex}.clock")
}

/// The floor file of one client daemon.
#[derive(Debug)]
pub struct ClockFloor {
    path: PathBuf,
    /// The session's wall clock at its start (ns since the Unix epoch).
    base: u64,
    /// Running time (ns) at which to renew the reservation next.
    next_refresh: u64,
    /// The last value this process wrote (`None`: none yet).
    written: std::cell::Cell<Option<u64>>,
}

/// What [`ClockFloor::start`] found.
#[derive(Debug)]
pub struct Started {
    /// The floor file, to renew while the daemon runs.
    pub floor: ClockFloor,
    /// The wall clock to start the session from: the larger of the clock and the floor.
    pub wall_ns: u64,
    /// Something to say: the clock was behind the floor, or the file could not be used.
    pub note: Option<String>,
}

impl ClockFloor {
    /// A client's floor in `cfg.state_dir` and the wall clock its session starts from (the
    /// larger of the clock and the floor; what [`ClockFloor::start`] found is said on
    /// stderr). A server keeps none and starts from the clock.
    pub fn for_config(cfg: &crate::config::Config) -> (Option<ClockFloor>, u64) {
        let wall = crate::wall_ns();
        if cfg.role != braid_session::Role::Initiator {
            return (None, wall);
        }
        let file = cfg.state_dir.join(file_name(&cfg.private_key.public_key()));
        let started = ClockFloor::start(file, wall);
        if let Some(note) = &started.note {
            eprintln!("braid: {note}");
        }
        (Some(started.floor), started.wall_ns)
    }

    /// Read the floor in `path` and pick the session's starting clock from it and `wall_ns`
    /// (the system's clock). Nothing is written until the first [`ClockFloor::refresh`], in
    /// the daemon's first turn. A file that cannot be read is said (in `note`) and the clock
    /// used as it is.
    pub fn start(path: PathBuf, wall_ns: u64) -> Started {
        let (floor, mut note) = match read(&path) {
            Ok(Some(f)) if f > wall_ns.saturating_add(FLOOR_AHEAD_MAX) => (
                None,
                Some(format!(
                    "the handshake clock floor {} is years ahead of the clock: taken as damaged, starting from the system clock",
                    path.display()
                )),
            ),
            Ok(f) => (f, None),
            Err(e) => (
                None,
                Some(format!(
                    "cannot read the handshake clock floor {} ({e}): starting from the system clock",
                    path.display()
                )),
            ),
        };
        let base = floor.map_or(wall_ns, |f| f.max(wall_ns));
        // Within the reservation the floor is ahead after any restart (it is kept `RESERVE`
        // ahead while the daemon runs): nothing to say. Beyond it, the clock went back.
        if base > wall_ns.saturating_add(RESERVE) {
            note = Some(format!(
                "the system clock is {:.1} s behind the handshake clock floor in {}: handshakes carry the floor's time, so the server still takes them",
                (base - wall_ns) as f64 / 1e9,
                path.display()
            ));
        }
        Started {
            floor: ClockFloor {
                path,
                base,
                next_refresh: 0,
                written: std::cell::Cell::new(None),
            },
            wall_ns: base,
            note,
        }
    }

    /// Renew the reservation if due, `running_ns` into the session; a failure to write, to
    /// say (the next renewal tries again).
    pub fn refresh(&mut self, running_ns: u64) -> Option<String> {
        if running_ns < self.next_refresh {
            return None;
        }
        let reserved = self.base.saturating_add(running_ns).saturating_add(RESERVE);
        let written = self.write(reserved, false, Duration::ZERO);
        let again = if written.is_ok() {
            REFRESH_EVERY
        } else {
            RETRY_AFTER
        };
        self.next_refresh = running_ns.saturating_add(again);
        // Another process of the key holds the lock a moment: tried again, nothing to say.
        let written = written.or_else(|e| {
            if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            }
        });
        written.err().map(|e| {
            format!(
                "cannot write the handshake clock floor {} ({e}): if this client restarts with its clock behind, the server refuses it until the clock catches up (set state_dir to a writable directory)",
                self.path.display()
            )
        })
    }

    /// The daemon stops cleanly `running_ns` into the session: leave the floor just above the
    /// last timestamp it can have sent, in place of its own reservation (a failure, to say).
    /// If another process of the same key (`braid up`, `braid send`, `braid forward`) has
    /// written a higher value since, that one stays.
    pub fn finish(&self, running_ns: u64) -> Option<String> {
        let last = self.base.saturating_add(running_ns).saturating_add(1);
        self.write(last, true, Duration::from_secs(1))
            .err()
            .map(|e| {
                format!(
                    "cannot write the handshake clock floor {} ({e})",
                    self.path.display()
                )
            })
    }

    /// Write `value` unless that would lower the floor below what another process wrote:
    /// under a lock on the file's directory entry (`<file>.lock`, `flock`), the file keeps
    /// the larger of `value` and what is in it, except that (`lower_own`) this process may
    /// take back its own last reservation. A value years ahead of `value` is damage and is
    /// replaced.
    ///
    /// A lock another process holds is waited for up to `patience`, then given up on
    /// (`WouldBlock`): a renewal from the event loop does not wait (it is tried again a second
    /// later), a clean stop waits up to a second.
    fn write(&self, value: u64, lower_own: bool, patience: Duration) -> io::Result<()> {
        let _lock = lock(&self.path, patience)?;
        let current = read(&self.path).ok().flatten().filter(|&c| {
            c <= value.saturating_add(FLOOR_AHEAD_MAX)
                && !(lower_own && Some(c) == self.written.get())
        });
        let value = current.map_or(value, |c| c.max(value));
        if current != Some(value) {
            write(&self.path, value)?;
            // Only what this process wrote is its own to take back: a higher value that was
            // already there is another's.
            self.written.set(Some(value));
        }
        Ok(())
    }
}

/// Renew `floor` (a client's) if due, `now` into the session; a failure is said through
/// `warnings`, at most once a minute.
pub(crate) fn renew(
    floor: Option<&mut ClockFloor>,
    now: braid_proto::time::Instant,
    warnings: &mut crate::Warnings,
) {
    if let Some(note) = floor.and_then(|f| f.refresh(now.as_nanos())) {
        warnings.say(now, "clock_floor", || note);
    }
}

/// A clean stop `running_ns` into the session: leave `floor` (a client's) exact, and say a
/// failure ([`ClockFloor::finish`]).
pub(crate) fn finish(floor: Option<&ClockFloor>, running_ns: u64) {
    if let Some(note) = floor.and_then(|f| f.finish(running_ns)) {
        eprintln!("braid: {note}");
    }
}

/// An exclusive `flock` on `<path>.lock`, held until the file is dropped: the processes of
/// one client key (`braid up`, `braid send`, `braid forward`) read and write its floor one at
/// a time. Never blocks: tried every 10 ms for `patience`, then `WouldBlock` (a holder that is
/// stopped must not freeze a tunnel). The directory is made (owner only) if it is not there.
fn lock(path: &Path, patience: Duration) -> io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    make_dir(path)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("clock.lock"))?;
    let give_up = std::time::Instant::now() + patience;
    loop {
        // SAFETY: flock on a descriptor this function owns; it has no other precondition.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock || std::time::Instant::now() >= give_up {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Make `path`'s directory (owner only) if it is not there.
fn make_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    Ok(())
}

/// The floor in `path`: `None` if there is no file yet.
fn read(path: &Path) -> io::Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "not a number of nanoseconds; remove the file",
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Write `value` to `path` whole or not at all: a temporary file beside it, synced, renamed
/// over it. The directory is made (owner only) if it is not there.
fn write(path: &Path, value: u64) -> io::Result<()> {
    use std::io::Write;
    make_dir(path)?;
    // Per process: two daemons of the same interface name (in two network namespaces) do not
    // write into one another's temporary file.
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{value}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("braid-floor-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_first_start_takes_the_clock_and_reserves_ahead() {
        let d = dir("first");
        let file = d.join("braid0.clock");
        let mut s = ClockFloor::start(file.clone(), 1_000);
        assert_eq!(s.wall_ns, 1_000);
        assert!(s.note.is_none(), "{:?}", s.note);
        assert_eq!(
            read(&file).unwrap(),
            None,
            "nothing written before the first turn"
        );
        assert!(s.floor.refresh(0).is_none());
        assert_eq!(read(&file).unwrap(), Some(1_000 + RESERVE));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_clock_behind_the_floor_starts_from_the_floor() {
        let d = dir("behind");
        let file = d.join("braid0.clock");
        // A session that ran 20 minutes from t = 5e12, renewing its reservation.
        let mut f = ClockFloor::start(file.clone(), 5_000_000_000_000).floor;
        assert!(f.refresh(0).is_none());
        let running = 20 * 60 * 1_000_000_000;
        assert!(f.refresh(running).is_none());
        let reserved = read(&file).unwrap().unwrap();
        assert_eq!(reserved, 5_000_000_000_000 + running + RESERVE);
        // Every timestamp it can have sent is below the reservation, until the next renewal.
        assert!(5_000_000_000_000 + running + REFRESH_EVERY < reserved);
        // Restarted with the clock an hour behind: the session starts above every timestamp
        // sent before, and says why.
        let s = ClockFloor::start(file.clone(), 5_000_000_000_000 - 3_600_000_000_000);
        assert_eq!(s.wall_ns, reserved);
        assert!(s.note.unwrap().contains("behind"));
        // Restarted at once, the clock right: the floor is ahead by its reservation, which
        // is no news (said at every restart, it read as a clock problem).
        let s = ClockFloor::start(file.clone(), 5_000_000_000_000 + running + 1_000_000_000);
        assert_eq!(s.wall_ns, reserved);
        assert!(s.note.is_none(), "{:?}", s.note);
        // A start that never ran a turn wrote nothing. With the clock ahead of the floor, the
        // clock.
        assert_eq!(read(&file).unwrap(), Some(reserved));
        let s = ClockFloor::start(file.clone(), reserved + 7);
        assert_eq!(s.wall_ns, reserved + 7);
        // A floor years ahead is damage, not a clock gone back.
        std::fs::write(&file, format!("{}\n", u64::MAX - 5)).unwrap();
        let s = ClockFloor::start(file.clone(), reserved);
        assert_eq!(s.wall_ns, reserved);
        assert!(s.note.unwrap().contains("damaged"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_clean_stop_leaves_the_exact_floor() {
        let d = dir("stop");
        let file = d.join("braid0.clock");
        let mut f = ClockFloor::start(file.clone(), 1_000).floor;
        assert!(f.refresh(0).is_none());
        assert!(f.finish(500).is_none());
        assert_eq!(read(&file).unwrap(), Some(1_501));
        // The next start, at a clock behind it, starts above what was sent.
        assert_eq!(ClockFloor::start(file.clone(), 900).wall_ns, 1_501);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Two processes of one key (`braid up` and `braid send`) share the file: neither
    /// lowers it below what the other has written, so neither can restart below timestamps
    /// the other sent.
    #[test]
    fn two_processes_never_lower_each_others_floor() {
        let d = dir("two");
        let file = d.join("client.clock");
        let mut a = ClockFloor::start(file.clone(), 1_000).floor;
        assert!(a.refresh(0).is_none());
        // B starts from A's reservation, and reserves further ahead.
        let b = ClockFloor::start(file.clone(), 1_000);
        assert_eq!(b.wall_ns, 1_000 + RESERVE);
        let mut b = b.floor;
        assert!(b.refresh(10).is_none());
        let b_reserved = 1_000 + RESERVE + 10 + RESERVE;
        assert_eq!(read(&file).unwrap(), Some(b_reserved));
        // A renewal of A's is below it, and does not lower it (nor make it A's own).
        assert!(a.refresh(REFRESH_EVERY).is_none());
        assert_eq!(read(&file).unwrap(), Some(b_reserved));
        // A stops: its exact floor is far below B's reservation, which stays.
        assert!(a.finish(REFRESH_EVERY + 20).is_none());
        assert_eq!(read(&file).unwrap(), Some(b_reserved));
        // B stops: it takes back its own reservation, to just above what it sent.
        assert!(b.finish(30).is_none());
        assert_eq!(read(&file).unwrap(), Some(1_000 + RESERVE + 31));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A lock held by another process (stopped, say) never blocks a renewal: it is tried
    /// again a second later, without a word.
    #[test]
    fn a_held_lock_delays_a_renewal_and_blocks_nothing() {
        let d = dir("locked");
        let file = d.join("client.clock");
        let mut f = ClockFloor::start(file.clone(), 1_000).floor;
        let held = lock(&file, Duration::ZERO).unwrap();
        assert!(f.refresh(0).is_none(), "nothing said");
        assert_eq!(
            read(&file).unwrap(),
            None,
            "not written under another's lock"
        );
        assert!(f.refresh(RETRY_AFTER - 1).is_none());
        drop(held);
        assert!(f.refresh(RETRY_AFTER).is_none());
        assert_eq!(read(&file).unwrap(), Some(1_000 + RETRY_AFTER + RESERVE));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn renewals_wait_their_turn() {
        let d = dir("turn");
        let file = d.join("braid0.clock");
        let mut f = ClockFloor::start(file.clone(), 0).floor;
        assert!(f.refresh(0).is_none());
        assert!(f.refresh(REFRESH_EVERY - 1).is_none());
        assert_eq!(read(&file).unwrap(), Some(RESERVE), "not renewed early");
        assert!(f.refresh(REFRESH_EVERY).is_none());
        assert_eq!(read(&file).unwrap(), Some(REFRESH_EVERY + RESERVE));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_bad_or_unwritable_file_is_said_and_the_clock_used() {
        let d = dir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let file = d.join("braid0.clock");
        std::fs::write(&file, "yesterday\n").unwrap();
        let mut s = ClockFloor::start(file.clone(), 42);
        assert_eq!(s.wall_ns, 42);
        assert!(s.note.unwrap().contains("cannot read"));
        // It is replaced by a good reservation.
        assert!(s.floor.refresh(0).is_none());
        assert_eq!(read(&file).unwrap(), Some(42 + RESERVE));
        // A directory where the file should be: cannot write, said, tried again a second
        // later, and no temporary file left behind.
        let blocked = d.join("blocked");
        std::fs::create_dir_all(blocked.join("x").join("y")).unwrap();
        let mut s = ClockFloor::start(blocked.join("x"), 42);
        assert_eq!(s.wall_ns, 42);
        assert!(s.floor.refresh(0).unwrap().contains("cannot write"));
        assert!(
            s.floor.refresh(RETRY_AFTER - 1).is_none(),
            "not before the retry"
        );
        assert!(s.floor.refresh(RETRY_AFTER).is_some());
        let left: Vec<_> = std::fs::read_dir(&blocked)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            left.iter().all(|n| n == "x" || n == "x.clock.lock"),
            "only x and its lock: {left:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

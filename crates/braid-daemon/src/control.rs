//! The control socket: `braid status` reads the daemon's status; `braid path up|down NAME`
//! takes a client's path out of use or gives it back at run time.
//!
//! The protocol is one line of text per connection, answered with JSON: `status`, or
//! `path up NAME` / `path down NAME`.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a reader waits for the loop to publish a fresh snapshot before it takes the last.
const FRESH_WAIT: Duration = Duration::from_millis(500);

/// What the event loop publishes for the control socket's and the metrics endpoint's threads:
/// the status JSON and the metrics text, made when a reader asks ([`Board::fresh`]) rather than
/// on a timer. A proxy's status covers every client; made ten times a second for 4,000 of them
/// it took an eighth of a core while nothing else happened (docs/benchmarks.md, "A proxy
/// with many clients").
pub(crate) struct Board {
    latest: Mutex<Published>,
    published: Condvar,
    /// A reader waits for a snapshot not made yet (`asked > answered`).
    wanted: AtomicBool,
    /// Wakes the loop, which publishes within its turn.
    waker: Arc<mio::Waker>,
}

/// The last snapshot the loop published, and the readers' requests.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// The status as JSON (`braid status --json`).
    pub status: String,
    /// The metrics text, if there is a metrics endpoint.
    pub metrics: String,
    /// Requests so far: each reader's ticket.
    asked: u64,
    /// The newest ticket a published snapshot was begun after.
    answered: u64,
}

impl Board {
    /// A board with an empty status (`{}`) whose readers wake the loop with `waker`.
    pub(crate) fn new(waker: Arc<mio::Waker>) -> Arc<Board> {
        Arc::new(Board {
            latest: Mutex::new(Published {
                status: "{}".to_owned(),
                ..Published::default()
            }),
            published: Condvar::new(),
            wanted: AtomicBool::new(false),
            waker,
        })
    }

    /// Loop side: whether a reader waits for a snapshot.
    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    /// Loop side: the newest request not answered yet, if any. Make a snapshot now and
    /// [`Board::publish`] it with this: it answers that request and every one before it; a
    /// reader that asks while it is made waits for the next.
    pub(crate) fn take_wanted(&self) -> Option<u64> {
        if !self.is_wanted() {
            return None;
        }
        let p = self.latest.lock().ok()?;
        self.wanted.store(false, Ordering::Release);
        (p.asked > p.answered).then_some(p.asked)
    }

    /// Loop side: a new snapshot, begun after request `answers` (from [`Board::take_wanted`];
    /// 0 for one nobody asked for); wakes the readers it answers.
    pub(crate) fn publish(&self, status: String, metrics: Option<String>, answers: u64) {
        if let Ok(mut p) = self.latest.lock() {
            p.status = status;
            if let Some(m) = metrics {
                p.metrics = m;
            }
            p.answered = p.answered.max(answers);
        }
        self.published.notify_all();
    }

    /// Reader side: asks the loop for a snapshot begun after this call and waits up to
    /// [`FRESH_WAIT`] for it (a loop that is stopping never answers: then the last one).
    pub(crate) fn fresh<T>(&self, pick: impl Fn(&Published) -> T) -> T {
        let Ok(mut p) = self.latest.lock() else {
            return pick(&Published::default());
        };
        p.asked += 1;
        let ticket = p.asked;
        self.wanted.store(true, Ordering::Release);
        let _ = self.waker.wake();
        match self
            .published
            .wait_timeout_while(p, FRESH_WAIT, |p| p.answered < ticket)
        {
            Ok((p, _)) => pick(&p),
            Err(e) => pick(&e.into_inner().0),
        }
    }
}

/// A request the event loop carries out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Enable (`true`) or disable path `index`.
    Path {
        /// The path's number (its position in the config).
        index: usize,
        /// Whether it may carry traffic.
        enabled: bool,
    },
}

/// Binds the control socket at `path` (replacing a stale socket of an earlier run, making its
/// directory if missing), owner-only (mode 0600) from the moment it exists: bound under a
/// umask that leaves the group and others nothing, whatever the daemon's umask.
pub fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::remove_file(path);
    // SAFETY: umask only swaps the process's file-creation mask; it is put back at once. The
    // daemon binds this before it starts any thread that creates files.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    bound
}

/// [`bind_private`], unless something answers on `path` already (a running daemon of another
/// config with the same socket): then `AddrInUse`, and that socket is left alone.
pub fn bind_private_if_free(path: &Path) -> std::io::Result<UnixListener> {
    if UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another braid answers on it: stop that one, or give this config its own [control] socket",
        ));
    }
    bind_private(path)
}

/// Say in the log that `braid path` took path `name` out of use or gave it back.
pub(crate) fn say_path_command(name: &str, enabled: bool) {
    eprintln!(
        "braid: path `{name}` {} by `braid path`",
        if enabled { "enabled" } else { "disabled" }
    );
}

/// The other sockets in `socket`'s directory (daemons of other interfaces in `/run/braid`),
/// as "; sockets there: ...", or nothing.
fn others_beside(socket: &Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    let Some(dir) = socket.parent() else {
        return String::new();
    };
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()) && e.path() != socket)
        .map(|e| e.path().display().to_string())
        .collect();
    found.sort();
    if found.is_empty() {
        String::new()
    } else {
        format!("; sockets there: {}", found.join(", "))
    }
}

/// Send `request` to the daemon behind `socket`; its answer, as JSON text.
pub fn request(socket: &Path, request: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            "the control socket is its owner's only (mode 0600): run this as the user that runs `braid up`, usually root"
        } else {
            "is `braid up` running? pass its control socket with --socket"
        };
        format!(
            "cannot reach the daemon at {}: {e} ({hint}){}",
            socket.display(),
            others_beside(socket)
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    s.write_all(format!("{request}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Ask the daemon behind `socket` for its status, as JSON text.
pub fn query_status(socket: &Path) -> Result<String, String> {
    request(socket, "status")
}

/// The answer to one request line: the status (`status()`: a fresh snapshot), or a command
/// queued for the loop.
fn answer(
    line: &str,
    status: &dyn Fn() -> String,
    commands: &SyncSender<Command>,
    paths: &[String],
    wake: &dyn Fn(),
) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let json = |k: &str, v: &str| serde_json::json!({ k: v }).to_string();
    match words.as_slice() {
        ["status"] => status(),
        ["path", verb @ ("up" | "down"), name] => {
            let Some(index) = paths.iter().position(|p| p == name) else {
                let why = if paths.is_empty() {
                    "this is a server: its paths are its clients' (path0, path1... in `braid status`), and a client takes its own down with `braid path down NAME` there".to_owned()
                } else {
                    format!(
                        "no path is named `{name}` here (the paths are: {})",
                        paths.join(", ")
                    )
                };
                return json("error", &why);
            };
            let enabled = *verb == "up";
            match commands.try_send(Command::Path { index, enabled }) {
                Ok(()) => {
                    wake();
                    json(
                        "ok",
                        &format!(
                            "path {name} {}",
                            if enabled {
                                "enabled: it rejoins when its probes are answered"
                            } else {
                                "disabled"
                            }
                        ),
                    )
                }
                Err(TrySendError::Full(_)) => json(
                    "error",
                    "the daemon is busy with earlier requests: try again",
                ),
                Err(TrySendError::Disconnected(_)) => json("error", "the daemon is stopping"),
            }
        }
        _ => json(
            "error",
            "unknown request: send `status`, `path up NAME` or `path down NAME`",
        ),
    }
}

/// Serve requests on `listener` from a thread: `status` from a fresh snapshot the event loop
/// publishes on `board` ([`Board::fresh`]), path commands into `commands` (the loop applies
/// them within its next turn, woken by `board`'s waker). `paths` are the names of this end's
/// paths. A slow or stuck client only ever holds this thread.
pub(crate) fn serve(
    listener: std::os::unix::net::UnixListener,
    board: Arc<Board>,
    commands: SyncSender<Command>,
    paths: Vec<String>,
) {
    std::thread::Builder::new()
        .name("braid-control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                s.set_read_timeout(Some(Duration::from_secs(1))).ok();
                s.set_write_timeout(Some(Duration::from_secs(1))).ok();
                // One line, up to 256 bytes, until the newline or the client's end of writing.
                let mut req = Vec::new();
                let mut chunk = [0u8; 256];
                while req.len() < 256 && !req.contains(&b'\n') {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req);
                let line = line.lines().next().unwrap_or("");
                let wake = || {
                    let _ = board.waker.wake();
                };
                let status = || board.fresh(|p| p.status.clone());
                let body = answer(line.trim(), &status, &commands, &paths, &wake);
                let _ = s.write_all(body.as_bytes());
            }
        })
        .ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asked for a socket that is not there, the error lists the sockets that are beside it
    /// (another interface's daemon in /run/braid).
    #[test]
    fn a_missing_socket_names_the_ones_beside_it() {
        let dir = std::env::temp_dir().join(format!("braid-socks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let other = dir.join("wan0.sock");
        let _l = std::os::unix::net::UnixListener::bind(&other).unwrap();
        let e = request(&dir.join("braid0.sock"), "status").unwrap_err();
        assert!(
            e.contains(&format!("sockets there: {}", other.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reader gets a snapshot begun after it asked: one that asks while the loop makes a
    /// snapshot for an earlier reader waits for the next.
    #[test]
    fn a_reader_gets_a_status_made_after_it_asked() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let board = Board::new(waker);
        assert_eq!(board.take_wanted(), None);
        let wait_for_a_reader = |board: &Board| {
            while !board.is_wanted() {
                std::thread::yield_now();
            }
        };
        let first = {
            let b = board.clone();
            std::thread::spawn(move || b.fresh(|p| p.status.clone()))
        };
        wait_for_a_reader(&board);
        // The loop begins a snapshot for the first reader...
        let asked = board.take_wanted().expect("a request");
        // ...and a second reader asks while it is made.
        let second = {
            let b = board.clone();
            std::thread::spawn(move || b.fresh(|p| p.status.clone()))
        };
        wait_for_a_reader(&board);
        board.publish("made for the first".into(), None, asked);
        assert_eq!(first.join().unwrap(), "made for the first");
        let asked = board.take_wanted().expect("the second request");
        board.publish("made for the second".into(), None, asked);
        assert_eq!(second.join().unwrap(), "made for the second");
        assert_eq!(board.take_wanted(), None);
    }

    #[test]
    fn requests_are_answered_and_path_commands_queued() {
        let snap = || "{\"x\":1}".to_owned();
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let paths = vec!["dsl".to_owned(), "lte".to_owned()];
        let woken = std::cell::Cell::new(0);
        let wake = || woken.set(woken.get() + 1);
        assert_eq!(answer("status", &snap, &tx, &paths, &wake), "{\"x\":1}");
        assert!(answer("path down lte", &snap, &tx, &paths, &wake).contains("\"ok\""));
        // The loop is woken to apply it at once.
        assert_eq!(woken.get(), 1);
        assert_eq!(
            rx.try_recv(),
            Ok(Command::Path {
                index: 1,
                enabled: false
            })
        );
        let e = answer("path down wifi", &snap, &tx, &paths, &wake);
        assert!(
            e.contains("no path is named `wifi`") && e.contains("dsl, lte"),
            "{e}"
        );
        assert!(answer("reboot", &snap, &tx, &paths, &wake).contains("unknown request"));
        assert_eq!(woken.get(), 1);
        assert!(rx.try_recv().is_err());
    }

    /// The socket is owner-only, and a stale one from an earlier run is replaced.
    #[test]
    fn the_control_socket_is_owner_only() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("braid-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.sock");
        std::fs::write(&path, "stale").unwrap();
        let _listener = bind_private(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(UnixStream::connect(&path).is_ok());
        // A socket something answers on is not taken (a `braid forward` beside a `braid up`
        // that uses the same one); a stale one is.
        let e = bind_private_if_free(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        assert!(UnixStream::connect(&path).is_ok(), "left alone");
        drop(_listener);
        assert!(bind_private_if_free(&path).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

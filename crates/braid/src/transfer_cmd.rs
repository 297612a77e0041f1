//! `braid send FILE` and `braid recv`: one file over pTCP (the pTCP paper) inside braid's
//! secure session, one micro-flow per configured path, with the keys and paths of the
//! daemon's config files (`braid-daemon`'s `ptcp_node`). No TUN device is needed.
//!
//! The stream the sender writes:
//!
//! ```text
//!   8 bytes  magic "braidTX1"
//!   8 bytes  file length, u64 big-endian
//!   2 bytes  name length, u16 big-endian (at most 255), then the file's name (UTF-8)
//!   ...      the file's bytes
//!  32 bytes  SHA-256 of the file's bytes
//! ```
//!
//! The receiver answers with one byte (0: length and SHA-256 verified; 1: the digest does not
//! match; 2: the receiver could not write the file) and closes; the sender exits with an error
//! unless it read 0.

use anyhow::{bail, Context, Result};
use braid_daemon::config::Config;
use braid_daemon::ptcp_node::{NodeOptions, PtcpNode};
use braid_ptcp::{CongestionAlgorithm, State, StripedConnection};
use braid_session::Role;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Magic at the start of a transfer's stream.
pub const MAGIC: &[u8; 8] = b"braidTX1";
/// The receiver's answers.
const VERDICT_OK: u8 = 0;
const VERDICT_DIGEST: u8 = 1;
const VERDICT_WRITE: u8 = 2;
/// How long the session's handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A transfer that moves no byte for this long has failed.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the graceful close once the transfer is done.
const CLOSE_LINGER: Duration = Duration::from_secs(3);
/// One turn of the node waits at most this long.
const TURN: Duration = Duration::from_millis(20);

/// `braid send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// The file to send.
    pub file: PathBuf,
    /// The client's configuration (the one `braid up` uses): keys and paths.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Send every path to this server address instead of each path's `remote`.
    #[arg(long, value_name = "HOST:PORT")]
    pub to: Option<String>,
    /// Congestion control of every micro-flow: bbr (default), cubic or reno.
    #[arg(long, value_name = "NAME", default_value = "bbr")]
    pub congestion_control: String,
    /// No progress bar (the final summary is still printed).
    #[arg(long)]
    pub quiet: bool,
}

/// `braid recv`.
#[derive(Args, Debug)]
pub struct RecvArgs {
    /// The server's configuration (the one `braid up` uses): keys and the listen address.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Where to write: a directory (the sender's file name inside it) or a file name. Default:
    /// the sender's file name in the current directory. Checked before waiting for a sender;
    /// an existing file is refused unless --force.
    #[arg(long, value_name = "DIR|FILE")]
    pub out: Option<PathBuf>,
    /// Overwrite the file if it exists (without it, an existing file is refused and left
    /// alone).
    #[arg(long)]
    pub force: bool,
    /// Congestion control of every micro-flow: bbr (default), cubic or reno.
    #[arg(long, value_name = "NAME", default_value = "bbr")]
    pub congestion_control: String,
    /// No progress bar (the final summary is still printed).
    #[arg(long)]
    pub quiet: bool,
}

/// Congestion control by name, with the fix in the error.
pub fn congestion(name: &str) -> Result<CongestionAlgorithm> {
    name.parse().map_err(|_| {
        anyhow::anyhow!(
            "--congestion-control {name:?}: pTCP's micro-flows have cubic, reno (newreno) \
             and bbr; give one of those"
        )
    })
}

fn load(path: &Path, want: Role, cmd: &str) -> Result<Config> {
    let cfg = Config::load(path)?;
    if cfg.role != want {
        let (role, what) = match want {
            Role::Initiator => ("client", "the client's config, with its [[path]]s"),
            Role::Responder => ("server", "the server's config, with its listen address"),
        };
        bail!(
            "{}: braid {cmd} needs role = \"{role}\": give {what} (the one `braid up` uses)",
            path.display()
        );
    }
    Ok(cfg)
}

fn bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Per-path rates for the progress line: what the session sent (`tx`) or received on each
/// path, Mbit/s on the wire, smoothed over the probe interval.
fn path_rates(node: &PtcpNode, tx: bool) -> String {
    let st = node.status();
    let total: f64 = st
        .paths
        .iter()
        .map(|p| if tx { p.tx_bps } else { p.rx_bps })
        .sum();
    let per: Vec<String> = st
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "{} {:.1}",
                node.path_name(i),
                (if tx { p.tx_bps } else { p.rx_bps }) / 1e6
            )
        })
        .collect();
    format!("{:.1} Mbit/s ({})", total / 1e6, per.join(", "))
}

/// Share of the bytes each path carried (`tx`: sent; else received), as "name 61%".
fn shares(node: &PtcpNode, tx: bool) -> String {
    let st = node.status();
    let bytes: Vec<u64> = st
        .paths
        .iter()
        .map(|p| if tx { p.tx_bytes } else { p.rx_bytes })
        .collect();
    let total: u64 = bytes.iter().sum::<u64>().max(1);
    bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            format!(
                "{} {:.0}%",
                node.path_name(i),
                b as f64 * 100.0 / total as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Retransmission figures of a connection: virtual packets resent by the flows, and the SM's
/// re-striped and redundant bytes.
fn retransmissions(c: &StripedConnection) -> String {
    let resent: u64 = c.flow_stats().iter().map(|(_, _, f)| f.retransmits).sum();
    let timeouts: u64 = c.flow_stats().iter().map(|(_, _, f)| f.timeouts).sum();
    let s = c.stats();
    format!(
        "{resent} packets resent ({timeouts} timeouts), {} bytes re-striped, {} bytes copied \
         to another path",
        s.restriped_bytes, s.redundant_bytes
    )
}

/// SIGINT and SIGTERM no longer kill the process once the node is up
/// ([`crate::stop_signal`]): [`turn`] turns them into an error, so the transfer's connection
/// is reset at the other end (a receiver killed mid-file would leave its sender waiting out
/// [`STALL_TIMEOUT`], and the other way round).
fn watch_interrupts() -> Result<()> {
    crate::stop_signal().map(drop)
}

/// Whether SIGINT or SIGTERM came ([`watch_interrupts`]).
fn interrupted() -> bool {
    crate::stop_requested()
}

/// One turn of the node, unless SIGINT or SIGTERM came.
fn turn(node: &mut PtcpNode, wait: Duration) -> Result<()> {
    if interrupted() {
        bail!("interrupted (SIGINT or SIGTERM)");
    }
    node.turn(wait).context("the event loop failed")?;
    Ok(())
}

/// The transfer failed or was interrupted after `node` came up: every connection is reset, so
/// the other end stops at once with the reason instead of waiting out its stall timeout.
fn reset_on_error<T>(node: &mut PtcpNode, result: Result<T>) -> Result<T> {
    if result.is_err() {
        node.reset_all();
    }
    result
}

/// Wait for the session's keys (client: the handshake; server: the client's).
fn wait_established(node: &mut PtcpNode, timeout: Option<Duration>, what: &str) -> Result<()> {
    let start = Instant::now();
    while !node.is_established() {
        if timeout.is_some_and(|t| start.elapsed() > t) {
            bail!("{what}");
        }
        turn(node, TURN)?;
    }
    Ok(())
}

fn resolve(to: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    to.to_socket_addrs()
        .with_context(|| format!("--to {to}: not a HOST:PORT this machine can resolve"))?
        .next()
        .with_context(|| format!("--to {to}: the name has no address"))
}

/// The file `braid send` sends, checked before the handshake: open for reading, a regular
/// file, with a UTF-8 name of at most 255 bytes. Its length and name come with it.
fn open_source(path: &Path) -> Result<(File, u64, String)> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {shown}"))?;
    if meta.is_dir() {
        bail!(
            "cannot send {shown}: it is a directory; braid send sends one file (pack a \
             directory first, e.g. tar -cf dir.tar DIR)"
        );
    }
    if !meta.is_file() {
        bail!("cannot send {shown}: not a regular file (a device, FIFO or socket); give a file");
    }
    let file = File::open(path).with_context(|| format!("cannot open {shown} for reading"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{shown}: the file's name is not UTF-8: rename it"))?;
    if name.len() > 255 {
        bail!("{shown}: the file's name is longer than 255 bytes: rename it");
    }
    Ok((file, meta.len(), name.to_owned()))
}

/// `braid send FILE -c client.toml`.
pub fn send(args: &SendArgs) -> Result<()> {
    let cfg = load(&args.config, Role::Initiator, "send")?;
    let (file, len, name) = open_source(&args.file)?;
    let name = name.as_str();
    crate::daemon_cmd::refuse_beside_daemon(&cfg, &args.config, "send")?;
    let options = NodeOptions {
        congestion: congestion(&args.congestion_control)?,
        remote_override: args.to.as_deref().map(resolve).transpose()?,
        ..NodeOptions::default()
    };
    let server = options.remote_override.map_or_else(
        || {
            cfg.paths
                .first()
                .map_or(String::new(), |p| p.remote.to_string())
        },
        |a| a.to_string(),
    );
    let mut node = PtcpNode::new(&cfg, options)?;
    watch_interrupts()?;
    let result = send_over(&mut node, args, file, len, name, &server);
    reset_on_error(&mut node, result)
}

/// [`send`] once its node is up: the handshake, the transfer and the receiver's verdict.
fn send_over(
    node: &mut PtcpNode,
    args: &SendArgs,
    mut file: File,
    len: u64,
    name: &str,
    server: &str,
) -> Result<()> {
    wait_established(
        node,
        Some(HANDSHAKE_TIMEOUT),
        &format!(
            "no answer from the server at {server} within {} s: is `braid recv -c server.toml` \
             running there, with this client's public key as its peer_public_key? (A running \
             `braid up` of the same config holds the port: stop it first.)",
            HANDSHAKE_TIMEOUT.as_secs()
        ),
    )?;
    // Give every path a first RTT sample, for the receive-buffer rule.
    let measured_by = Instant::now() + Duration::from_secs(1);
    while Instant::now() < measured_by && node.status().paths.iter().any(|p| p.rtt_ms.is_none()) {
        turn(node, TURN)?;
    }
    let id = node.connect().context("the session has no paths")?;

    let mut header = Vec::with_capacity(18 + name.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&(name.len() as u16).to_be_bytes());
    header.extend_from_slice(name.as_bytes());
    let mut pending = header;
    let mut pos = 0usize;
    let mut read_total = 0u64;
    let mut hasher = Sha256::new();
    let mut trailer_queued = false;
    let mut closed = false;
    let mut chunk = vec![0u8; 256 * 1024];
    let pb = bar(len, args.quiet);
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_acked = 0u64;
    let mut verdict = None;
    let mut next_draw = Instant::now();
    loop {
        let now = node.now();
        let conn = node.conn_mut(id).context("the connection vanished")?;
        // Fill the send buffer.
        loop {
            if pos == pending.len() {
                pending.clear();
                pos = 0;
                if read_total < len {
                    let want = chunk.len().min((len - read_total) as usize);
                    let n = file
                        .read(&mut chunk[..want])
                        .with_context(|| format!("reading {}", args.file.display()))?;
                    if n == 0 {
                        bail!("{} shrank while being sent", args.file.display());
                    }
                    hasher.update(&chunk[..n]);
                    read_total += n as u64;
                    pending.extend_from_slice(&chunk[..n]);
                } else if !trailer_queued {
                    trailer_queued = true;
                    pending.extend_from_slice(&hasher.clone().finalize());
                } else {
                    break;
                }
            }
            let n = conn.write(&pending[pos..]);
            if n == 0 {
                break;
            }
            pos += n;
        }
        if trailer_queued && pos == pending.len() && !closed {
            conn.close(now);
            closed = true;
        }
        let mut b = [0u8; 1];
        if verdict.is_none() && conn.read(&mut b) == 1 {
            verdict = Some(b[0]);
        }
        // Acknowledged payload bytes: what the peer holds, headers excluded.
        let written = read_total + 18 + name.len() as u64 + if trailer_queued { 32 } else { 0 };
        let acked = written
            .saturating_sub(pending.len() as u64 - pos as u64)
            .saturating_sub(conn.unacked_bytes());
        if acked > last_acked {
            last_acked = acked;
            last_progress = Instant::now();
        }
        let state = conn.state();
        if verdict.is_some() {
            break;
        }
        if state == State::Closed {
            let why = if conn.was_reset() {
                "reset the connection (it was stopped, or restarted and no longer held it)"
            } else {
                "closed the connection"
            };
            bail!(
                "the receiver {why} without confirming the file ({} of {len} bytes \
                 acknowledged)",
                acked.saturating_sub(18 + name.len() as u64).min(len)
            );
        }
        if last_progress.elapsed() > STALL_TIMEOUT {
            bail!(
                "the transfer stalled: nothing acknowledged for {} s ({} of {len} bytes sent); \
                 paths: {}",
                STALL_TIMEOUT.as_secs(),
                acked.saturating_sub(18 + name.len() as u64).min(len),
                path_states(node)
            );
        }
        if interrupted() {
            bail!(
                "interrupted after {} of {len} bytes acknowledged; the receiver's connection \
                 is reset",
                acked.saturating_sub(18 + name.len() as u64).min(len)
            );
        }
        if Instant::now() >= next_draw {
            next_draw = Instant::now() + Duration::from_millis(200);
            pb.set_position(acked.saturating_sub(18 + name.len() as u64).min(len));
            pb.set_message(path_rates(node, true));
        }
        turn(node, TURN)?;
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // Let the close finish (the FINs), briefly.
    let linger = Instant::now() + CLOSE_LINGER;
    while Instant::now() < linger && node.conn(id).is_some_and(|c| c.state() != State::Closed) {
        node.turn(TURN)?;
    }
    let conn = node.conn(id).context("the connection vanished")?;
    let acked = last_acked.saturating_sub(18 + name.len() as u64).min(len);
    let line = outcome(verdict, &args.file, len, acked, secs, || {
        format!(
            "paths (bytes on the wire): {}; {}",
            shares(node, true),
            retransmissions(conn)
        )
    })?;
    println!("{line}");
    Ok(())
}

/// The sender's last word on the receiver's `verdict`: the summary line of a verified
/// transfer (`len` bytes in `secs`, with the rate and `details`), or the error. A rate only for
/// a transfer that succeeded: a refused one moved a part of the file (`acked` bytes), or none.
fn outcome(
    verdict: Option<u8>,
    file: &Path,
    len: u64,
    acked: u64,
    secs: f64,
    details: impl FnOnce() -> String,
) -> Result<String> {
    let failed = format!("{acked} of {len} bytes acknowledged in {secs:.2} s");
    match verdict {
        Some(VERDICT_OK) => Ok(format!(
            "sent {}: {len} bytes in {secs:.2} s, {:.2} Mbit/s; {}; the receiver verified the \
             length and SHA-256",
            file.display(),
            len as f64 * 8.0 / secs.max(1e-9) / 1e6,
            details()
        )),
        Some(VERDICT_DIGEST) => bail!(
            "the receiver's SHA-256 of {} does not match: the file changed while being sent, or \
             the data was corrupted; send it again ({failed})",
            file.display()
        ),
        Some(VERDICT_WRITE) => bail!(
            "the receiver could not write the file, so it did not take it ({failed}): its \
             error says why (a file of that name exists and it has no --force, or its --out \
             is not writable); fix that there and send again"
        ),
        other => bail!("the receiver answered {other:?}, which this version does not know"),
    }
}

fn path_states(node: &PtcpNode) -> String {
    node.status()
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{} {}", node.path_name(i), p.state))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the receiver writes `name`.
fn out_path(out: Option<&Path>, name: &str) -> Result<PathBuf> {
    let base = Path::new(name)
        .file_name()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("the sender's file name {name:?} is not a plain file name"))?;
    Ok(match out {
        Some(o) if o.is_dir() => o.join(base),
        Some(o) => o.to_path_buf(),
        None => PathBuf::from(base),
    })
}

/// Checks `--out` (`out`) before anything is received, so that a transfer is not wasted on a
/// place it cannot be written: a directory this user may write in, or a file name in one. An
/// existing file is refused unless `force`.
fn check_out(out: Option<&Path>, force: bool) -> Result<()> {
    let Some(o) = out else {
        return writable_dir(Path::new("."))
            .context("cannot write in the current directory: give --out DIR");
    };
    let shown = o.display();
    match std::fs::metadata(o) {
        Ok(m) if m.is_dir() => writable_dir(o)
            .with_context(|| format!("--out {shown}: cannot write in this directory")),
        Ok(_) if !force => {
            bail!("--out {shown}: the file exists: give --force to overwrite it, or another --out")
        }
        Ok(_) => std::fs::OpenOptions::new()
            .write(true)
            .open(o)
            .map(drop)
            .with_context(|| format!("--out {shown}: cannot write to this file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if o.as_os_str().as_encoded_bytes().ends_with(b"/") {
                bail!(
                    "--out {shown}: no such directory: create it first (mkdir -p), or give another"
                );
            }
            let dir = o
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => writable_dir(dir)
                    .with_context(|| format!("--out {shown}: cannot write in {}", dir.display())),
                Ok(_) => bail!("--out {shown}: {} is not a directory", dir.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                    "--out {shown}: its directory {0} does not exist: create it first (mkdir -p \
                     {0}), or give another",
                    dir.display()
                ),
                Err(e) => bail!(
                    "--out {shown}: cannot reach its directory {}: {e}",
                    dir.display()
                ),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => bail!(
            "--out {shown}: a part of the path before the last is a file, not a directory: give \
             a directory, or a file name in one"
        ),
        Err(e) => bail!("--out {shown}: {e}"),
    }
}

/// Whether this process may make a file in `dir` (what the permission bits say is not the
/// whole answer for root, or on a read-only file system): makes one and removes it.
fn writable_dir(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".braid-recv-{}.probe", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Opens the file `braid recv` writes: a new one, or with `force` an existing one, truncated.
fn create_out(path: &Path, force: bool) -> Result<File> {
    let shown = path.display();
    let opened = if force {
        File::create(path)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
    };
    opened.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{shown} exists (the sender's file name): it is left as it is; give --force to \
                 overwrite it, or another --out"
            )
        } else {
            anyhow::anyhow!("cannot create {shown}: {e}: give a writable --out")
        }
    })
}

/// The header of a transfer, once complete: file length, name, and the header's length.
fn parse_header(buf: &[u8]) -> Result<Option<(u64, String, usize)>> {
    if buf.len() < 18 {
        return Ok(None);
    }
    if &buf[..8] != MAGIC {
        bail!(
            "the sender does not speak this transfer format (magic {:?})",
            &buf[..8]
        );
    }
    let len = u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes"));
    let name_len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
    if name_len > 255 {
        bail!("the sender's file name is {name_len} bytes long (at most 255)");
    }
    if buf.len() < 18 + name_len {
        return Ok(None);
    }
    let name = String::from_utf8(buf[18..18 + name_len].to_vec())
        .context("the sender's file name is not UTF-8")?;
    Ok(Some((len, name, 18 + name_len)))
}

/// `braid recv -c server.toml`.
pub fn recv(args: &RecvArgs) -> Result<()> {
    let cfg = load(&args.config, Role::Responder, "recv")?;
    cfg.check_listen_port(&args.config)?;
    check_out(args.out.as_deref(), args.force)?;
    crate::daemon_cmd::refuse_beside_daemon(&cfg, &args.config, "recv")?;
    let options = NodeOptions {
        congestion: congestion(&args.congestion_control)?,
        ..NodeOptions::default()
    };
    let listen = cfg.listen.map_or(String::new(), |l| l.to_string());
    let mut node = PtcpNode::new(&cfg, options)?;
    watch_interrupts()?;
    if !args.quiet {
        eprintln!("braid recv: waiting for a sender on {listen}");
    }
    let id = loop {
        if let Some(id) = node.accept() {
            break id;
        }
        turn(&mut node, Duration::from_millis(100))?;
    };
    let result = recv_over(&mut node, args, id);
    reset_on_error(&mut node, result)
}

/// [`recv`] once a sender's connection `id` is accepted: the file, and the verdict sent back.
fn recv_over(node: &mut PtcpNode, args: &RecvArgs, id: u16) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut file: Option<(BufWriter<File>, PathBuf, u64, String)> = None;
    let mut got = 0u64;
    let mut hasher = Sha256::new();
    let mut trailer = Vec::with_capacity(32);
    let mut pb = ProgressBar::hidden();
    let mut start = Instant::now();
    let mut last_progress = Instant::now();
    let mut next_draw = Instant::now();
    let verdict;
    let mut problem: Option<anyhow::Error> = None;
    'outer: loop {
        let conn = node.conn_mut(id).context("the connection vanished")?;
        loop {
            let n = conn.read(&mut buf);
            if n == 0 {
                break;
            }
            last_progress = Instant::now();
            let mut data = &buf[..n];
            if file.is_none() {
                head.extend_from_slice(data);
                let Some((len, name, used)) = parse_header(&head)? else {
                    continue;
                };
                let path = out_path(args.out.as_deref(), &name)?;
                let f = match create_out(&path, args.force) {
                    Ok(f) => f,
                    Err(e) => {
                        problem = Some(e);
                        verdict = VERDICT_WRITE;
                        break 'outer;
                    }
                };
                if !args.quiet {
                    eprintln!("receiving {name} ({len} bytes) into {}", path.display());
                }
                pb = bar(len, args.quiet);
                start = Instant::now();
                file = Some((BufWriter::new(f), path, len, name));
                // What followed the header is the file's first bytes.
                head.drain(..used);
                data = &head[..];
            }
            let (w, _, len, _) = file.as_mut().expect("checked");
            let take = data.len().min((*len - got) as usize);
            if let Err(e) = w.write_all(&data[..take]) {
                problem = Some(anyhow::anyhow!("writing: {e}"));
                verdict = VERDICT_WRITE;
                break 'outer;
            }
            hasher.update(&data[..take]);
            got += take as u64;
            data = &data[take..];
            trailer.extend_from_slice(data);
        }
        if let Some((_, _, len, _)) = &file {
            if got == *len && trailer.len() >= 32 {
                let digest = hasher.clone().finalize();
                verdict = if trailer[..32] == digest[..] {
                    VERDICT_OK
                } else {
                    VERDICT_DIGEST
                };
                break;
            }
        }
        if conn.was_reset() {
            bail!(
                "the sender reset the connection (it was stopped, or restarted and no longer \
                 held it) after {got} bytes of the file: the partial file is left as it is"
            );
        }
        if conn.is_finished() || conn.state() == State::Closed {
            bail!(
                "the sender ended the stream early ({got} bytes of the file received): the \
                 partial file is left as it is"
            );
        }
        if interrupted() {
            bail!(
                "interrupted after {got} bytes of the file: the partial file is left as it is; \
                 the sender's connection is reset"
            );
        }
        if file.is_some() && last_progress.elapsed() > STALL_TIMEOUT {
            bail!(
                "the transfer stalled: nothing received for {} s ({got} bytes); paths: {}",
                STALL_TIMEOUT.as_secs(),
                path_states(node)
            );
        }
        if Instant::now() >= next_draw {
            next_draw = Instant::now() + Duration::from_millis(200);
            pb.set_position(got);
            pb.set_message(path_rates(node, false));
        }
        turn(node, TURN)?;
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let mut path_written = None;
    if let Some((mut w, path, _, _)) = file.take() {
        if let Err(e) = w.flush() {
            problem.get_or_insert(anyhow::anyhow!("writing {}: {e}", path.display()));
        }
        path_written = Some(path);
    }
    let verdict = if problem.is_some() && verdict == VERDICT_OK {
        VERDICT_WRITE
    } else {
        verdict
    };
    let now = node.now();
    if let Some(c) = node.conn_mut(id) {
        c.write(&[verdict]);
        c.close(now);
    }
    let linger = Instant::now() + CLOSE_LINGER;
    while Instant::now() < linger && node.conn(id).is_some_and(|c| c.state() != State::Closed) {
        node.turn(TURN)?;
    }
    if let Some(e) = problem {
        return Err(e);
    }
    let shown = path_written.map_or(String::new(), |p| p.display().to_string());
    if verdict == VERDICT_DIGEST {
        bail!(
            "{shown}: the SHA-256 of the {got} bytes received does not match the sender's: the \
             file is corrupt; have it sent again"
        );
    }
    // The client's names come in its handshake; a client that named none has numbers only.
    let unnamed = (0..node.paths()).all(|i| node.path_name(i) == format!("path{i}"));
    println!(
        "received {shown}: {got} bytes in {secs:.2} s, {:.2} Mbit/s; paths (bytes on the \
         wire{}): {}; length and SHA-256 verified",
        got as f64 * 8.0 / secs.max(1e-9) / 1e6,
        if unnamed {
            ", numbered in the order of the sender's [[path]] tables, which it did not name"
        } else {
            ""
        },
        shares(node, false)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parses_in_pieces_and_rejects_strangers() {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&5u64.to_be_bytes());
        h.extend_from_slice(&3u16.to_be_bytes());
        h.extend_from_slice(b"a.b");
        for cut in 0..h.len() {
            assert_eq!(parse_header(&h[..cut]).unwrap(), None);
        }
        assert_eq!(
            parse_header(&h).unwrap(),
            Some((5, "a.b".to_owned(), h.len()))
        );
        h[0] = b'x';
        assert!(parse_header(&h).is_err());
    }

    /// A fresh directory under the system's temporary one, removed by the caller.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-transfer-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn send_checks_its_file_before_the_handshake() {
        let dir = scratch("source");
        let e = open_source(&dir).unwrap_err().to_string();
        assert!(e.contains("is a directory") && e.contains("tar"), "{e}");
        let e = open_source(&dir.join("missing")).unwrap_err().to_string();
        assert!(e.contains("cannot open"), "{e}");
        let e = open_source(Path::new("/dev/null")).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let file = dir.join("a.bin");
        std::fs::write(&file, b"hello").unwrap();
        let (_, len, name) = open_source(&file).unwrap();
        assert_eq!((len, name.as_str()), (5, "a.bin"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn recv_checks_out_at_start_and_overwrites_only_with_force() {
        let dir = scratch("out");
        let refused = |out: &Path| check_out(Some(out), false).unwrap_err().to_string();
        check_out(Some(&dir), false).unwrap();
        check_out(Some(&dir.join("new.bin")), false).unwrap();
        let e = refused(&dir.join("nodir/"));
        assert!(
            e.contains("no such directory") && e.contains("mkdir"),
            "{e}"
        );
        let e = refused(&dir.join("nodir/x.bin"));
        assert!(
            e.contains("does not exist") && e.contains("mkdir -p"),
            "{e}"
        );
        let old = dir.join("old.bin");
        std::fs::write(&old, b"keep me").unwrap();
        let e = refused(&old);
        assert!(e.contains("exists") && e.contains("--force"), "{e}");
        check_out(Some(&old), true).unwrap();
        let e = refused(&old.join("x"));
        assert!(e.contains("not a directory"), "{e}");
        // The sender's name, in a directory that already has it: refused and left alone,
        // unless --force.
        let e = create_out(&old, false).unwrap_err().to_string();
        assert!(
            e.contains("old.bin exists") && e.contains("--force") && e.contains("left as it is"),
            "{e}"
        );
        assert_eq!(std::fs::read(&old).unwrap(), b"keep me");
        drop(create_out(&old, true).unwrap());
        assert!(std::fs::read(&old).unwrap().is_empty());
        // Nothing left behind by the checks.
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["old.bin"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_a_verified_transfer_reports_a_rate() {
        let file = Path::new("big.iso");
        let ok = outcome(Some(VERDICT_OK), file, 1_000_000, 1_000_000, 1.0, || {
            "paths".into()
        })
        .unwrap();
        assert!(
            ok.contains("8.00 Mbit/s") && ok.contains("verified"),
            "{ok}"
        );
        for verdict in [VERDICT_WRITE, VERDICT_DIGEST] {
            let e = outcome(Some(verdict), file, 1_000_000, 28_000, 0.01, || {
                unreachable!("no summary for a failed transfer")
            })
            .unwrap_err()
            .to_string();
            assert!(!e.contains("Mbit/s"), "{e}");
            assert!(e.contains("28000 of 1000000 bytes acknowledged"), "{e}");
        }
        let e = outcome(Some(VERDICT_WRITE), file, 10, 0, 0.0, String::new)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--force"), "{e}");
    }

    #[test]
    fn out_path_keeps_only_the_file_name() {
        let p = out_path(None, "../../etc/passwd").unwrap();
        assert_eq!(p, PathBuf::from("passwd"));
        let dir = std::env::temp_dir();
        assert_eq!(out_path(Some(&dir), "x").unwrap(), dir.join("x"));
        assert!(out_path(None, "..").is_err());
    }
}

//! `braid up`, `braid genkey`, `braid pubkey`, `braid status`.

use anyhow::{bail, Context, Result};
use braid_daemon::config::Config;
use braid_session::PrivateKey;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// `braid up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// The configuration file (see docs/config.md and examples/).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Check the configuration and exit without starting.
    #[arg(long)]
    pub check: bool,
}

/// `braid status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The daemon's control socket (default: /run/braid/braid0.sock, or the one in --config).
    #[arg(short, long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Take the control socket from this configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the raw JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run one end of a bond in the foreground until SIGINT or SIGTERM.
pub fn up(args: &UpArgs) -> Result<()> {
    let cfg = Config::load(&args.config)?;
    cfg.check_listen_port(&args.config)?;
    for f in &cfg.exposed_secrets {
        eprintln!(
            "braid: warning: {} holds this end's private key and users other than its owner may read it: chmod 600 {0}",
            f.display()
        );
    }
    if args.check {
        let what = if cfg.role == braid_session::Role::Initiator {
            format!("client role, {} path(s)", cfg.paths.len())
        } else {
            format!("server role, {} client(s)", cfg.peers.len())
        };
        println!(
            "{}: ok ({what}, interface {} mtu {})",
            args.config.display(),
            cfg.ifname,
            cfg.mtu
                .map_or("from the handshake".to_owned(), |m| m.to_string())
        );
        if let Some(why) = braid_daemon::taken_by_other_device(&cfg.ifname) {
            bail!("{}: interface.name: {why}", args.config.display());
        }
        // What the paths' host names resolve to now (braid up resolves them again as it runs).
        for p in &cfg.paths {
            if let Some((host, port)) = &p.remote_host {
                println!(
                    "  path `{}`: {host}:{port} resolves to {}",
                    p.name, p.remote
                );
            }
            // A path that cannot open its socket now waits for its link (a modem not plugged
            // in yet): fine, but a typo would wait forever, so say so.
            if let Some(i) = p
                .interface
                .as_ref()
                .filter(|i| !Path::new("/sys/class/net").join(i).exists())
            {
                println!(
                    "  note: path `{}`: interface {i} does not exist now (the path will wait for it)",
                    p.name
                );
            }
            if let Some(l) = p.local {
                if let Err(e) = std::net::UdpSocket::bind((l, 0)) {
                    if e.kind() == std::io::ErrorKind::AddrNotAvailable {
                        println!(
                            "  note: path `{}`: local address {l} is not on this host now (the path will wait for it)",
                            p.name
                        );
                    }
                }
            }
        }
        return Ok(());
    }
    let stop = crate::stop_signal()?;
    braid_daemon::run(cfg, stop)?;
    eprintln!("braid: stopped");
    Ok(())
}

/// Print a new private key.
pub fn genkey() -> Result<()> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    print_key(&PrivateKey::from_random(bytes).to_base64())
}

/// Read a private key on stdin, print its public key.
pub fn pubkey() -> Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the private key from stdin")?;
    print_key(&public_key_of(&text)?)
}

/// The public key (base64) of the private key in `text`, as `braid pubkey` read it on stdin.
fn public_key_of(text: &str) -> Result<String> {
    if text.trim().is_empty() {
        bail!(
            "stdin is empty: give the private key on stdin, e.g. `braid pubkey < client.key` or \
             `braid genkey | tee client.key | braid pubkey`"
        );
    }
    let key = PrivateKey::from_base64(text).context("reading the private key on stdin")?;
    Ok(key.public_key().to_string())
}

/// Print a key on stdout, as the last thing the command does: a key that did not reach its
/// file (a full disk, a closed stdout) is an error, not a panic or a silent success.
fn print_key(key: &str) -> Result<()> {
    if stdout_was_closed() {
        bail!(
            "cannot write the key to stdout: it was closed when braid started (>&-): \
             redirect it to a file instead, e.g. `braid genkey > client.key`"
        );
    }
    write_line(&mut std::io::stdout().lock(), key).context("cannot write the key to stdout")
}

/// Whether descriptor 1 was closed when the program started. Rust's runtime then opens
/// /dev/null read-write in its place, so writes vanish without an error; no shell
/// redirection opens /dev/null read-write (`> /dev/null` opens it write-only), so that tells
/// the two apart.
fn stdout_was_closed() -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // SAFETY: fcntl(F_GETFL) only reads descriptor 1's status flags; it has no other effect.
    let flags = unsafe { libc::fcntl(1, libc::F_GETFL) };
    if flags == -1 {
        return true;
    }
    if flags & libc::O_ACCMODE != libc::O_RDWR {
        return false;
    }
    match (
        std::fs::metadata("/proc/self/fd/1"),
        std::fs::metadata("/dev/null"),
    ) {
        (Ok(out), Ok(null)) => out.file_type().is_char_device() && out.rdev() == null.rdev(),
        _ => false,
    }
}

/// `line` and a newline into `w`, flushed.
fn write_line(w: &mut impl Write, line: &str) -> std::io::Result<()> {
    writeln!(w, "{line}")?;
    w.flush()
}

/// Refuse to run `braid {cmd}` with the config at `config_path` while a daemon of the same
/// config runs (`braid up`, or `braid forward`, whose control socket answers): on a client it
/// would take over the daemon's session, and the server, which keeps the newest handshake's
/// timestamp, would refuse the daemon's handshakes for minutes; on a server both would answer
/// on the same `listen` port. A daemon that shares only the socket's path (none of its peers
/// is one of this config's) is no obstacle.
pub fn refuse_beside_daemon(cfg: &Config, config_path: &Path, cmd: &str) -> Result<()> {
    let socket = &cfg.control_socket;
    if std::os::unix::net::UnixStream::connect(socket).is_err() {
        return Ok(());
    }
    let status = braid_daemon::control::query_status(socket)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    if let Some(peers) = status.as_ref().and_then(|v| v["peers"].as_array()) {
        let theirs: Vec<&str> = peers
            .iter()
            .filter_map(|p| p["public_key"].as_str())
            .collect();
        let shared = cfg
            .peers
            .iter()
            .any(|p| theirs.contains(&p.public_key.to_base64().as_str()));
        if !theirs.is_empty() && !shared {
            return Ok(());
        }
    }
    bail!(
        "{}",
        beside_daemon_message(status.as_ref(), cfg, config_path, cmd)
    )
}

/// The message of [`refuse_beside_daemon`]: which daemon runs, what would go wrong, the fix.
fn beside_daemon_message(
    status: Option<&serde_json::Value>,
    cfg: &Config,
    config_path: &Path,
    cmd: &str,
) -> String {
    let who = match status {
        Some(v) if v["program"].is_string() => "a `braid forward`".to_owned(),
        Some(v) if v["interface"].is_string() => format!(
            "a `braid up` (interface {})",
            v["interface"].as_str().unwrap_or("?")
        ),
        _ => "a braid daemon".to_owned(),
    };
    let (harm, own) = if cfg.role == braid_session::Role::Initiator {
        (
            format!(
                "`braid {cmd}` would take over its session with the server, which would then \
                 refuse the running one's handshakes for minutes"
            ),
            "another key pair (`braid genkey`, with its public key in the server's config) \
             and another [control] socket",
        )
    } else {
        (
            format!("`braid {cmd}` and it would answer the same clients on the same listen port"),
            "another `listen` port (the client's `braid send --to` names it) and another \
             [control] socket",
        )
    };
    format!(
        "{}: {who} of this config is running (its control socket {} answers): {harm}. Stop \
         it first, or give `braid {cmd}` a copy of the config with {own}",
        config_path.display(),
        cfg.control_socket.display()
    )
}

/// `braid path`.
#[derive(Args, Debug)]
pub struct PathArgs {
    /// `down`: stop using the path (a care-of address dropped: nothing is sent on it, not even
    /// probes); `up`: use it again (it rejoins once its probes are answered).
    #[arg(value_parser = ["up", "down"])]
    pub action: String,
    /// The path's name (`name` in its [[path]] table), or path<i> for the i-th path (from 0,
    /// in the config's order) whatever its name.
    pub name: String,
    /// The daemon's control socket (default: /run/braid/braid0.sock, or the one in --config).
    #[arg(short, long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Take the control socket from this configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The control socket named by `--socket`, the config's, or the default.
fn control_socket(socket: &Option<PathBuf>, config: &Option<PathBuf>) -> Result<PathBuf> {
    let path = match (socket, config) {
        (Some(s), _) => s.clone(),
        // Only the socket is needed: no DNS for the paths' host names.
        (None, Some(c)) => Config::load_offline(c)?.control_socket,
        (None, None) => PathBuf::from("/run/braid/braid0.sock"),
    };
    is_socket_or_missing(&path)?;
    Ok(path)
}

/// An error unless `path` is a socket, or nothing (then connecting says no daemon runs).
fn is_socket_or_missing(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let t = meta.file_type();
    if t.is_socket() {
        return Ok(());
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a socket either"
    };
    bail!(
        "{} is not a socket ({what}): give the daemon's control socket with --socket (its \
         config's [control] socket, by default /run/braid/<interface name>.sock), or its \
         config with -c",
        path.display()
    )
}

/// What `braid path ACTION NAME` asks the daemon for, from its status (`v`): the path's name
/// as the daemon knows it (`path<i>` stands for the i-th path, whatever its name), or an
/// error that says where the path can be taken down.
fn path_target(v: &serde_json::Value, action: &str, name: &str) -> Result<String> {
    let empty = Vec::new();
    let peers = v["peers"].as_array().unwrap_or(&empty);
    let names_of = |peer: &serde_json::Value| -> Vec<String> {
        peer["paths"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|p| p["name"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    match v["role"].as_str() {
        Some("server") => {
            let shown: Vec<String> = peers
                .iter()
                .filter(|p| p["paths"].as_array().is_some_and(|a| !a.is_empty()))
                .map(|p| {
                    let names = names_of(p).join(", ");
                    if peers.len() == 1 {
                        names
                    } else {
                        format!("{names} of client {}", p["name"].as_str().unwrap_or("?"))
                    }
                })
                .collect();
            let shown = if shown.is_empty() {
                "none yet: no client has connected".to_owned()
            } else {
                shown.join("; ")
            };
            bail!(
                "this is a server: the paths its `braid status` shows ({shown}) are its \
                 clients', and a client takes its own paths out of use: run `braid path \
                 {action} {name}` on the client"
            )
        }
        Some("client") => {
            let names = peers.first().map(names_of).unwrap_or_default();
            if names.is_empty() || names.iter().any(|n| n == name) {
                return Ok(name.to_owned());
            }
            let index = name
                .strip_prefix("path")
                .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|i| i.parse::<usize>().ok());
            match index {
                Some(i) if i < names.len() => Ok(names[i].clone()),
                _ => bail!(
                    "no path is named `{name}` here: the paths are {} (or path0 to path{}, by \
                     their order in the config)",
                    names.join(", "),
                    names.len() - 1
                ),
            }
        }
        // Not a status this version knows: let the daemon judge the name.
        _ => Ok(name.to_owned()),
    }
}

/// Take a path out of use or give it back.
pub fn path(args: &PathArgs) -> Result<()> {
    let socket = control_socket(&args.socket, &args.config)?;
    let status = braid_daemon::control::query_status(&socket).map_err(anyhow::Error::msg)?;
    let name = match serde_json::from_str::<serde_json::Value>(&status) {
        Ok(v) => path_target(&v, &args.action, &args.name)?,
        Err(_) => args.name.clone(),
    };
    let text = braid_daemon::control::request(&socket, &format!("path {} {name}", args.action))
        .map_err(anyhow::Error::msg)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).context("the daemon's answer is not JSON")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("{e}");
    }
    println!("{}", v["ok"].as_str().unwrap_or("done"));
    Ok(())
}

/// Ask a running daemon for its status.
pub fn status(args: &StatusArgs) -> Result<()> {
    let socket = control_socket(&args.socket, &args.config)?;
    let text = braid_daemon::control::query_status(&socket).map_err(anyhow::Error::msg)?;
    if args.json {
        println!("{text}");
        return Ok(());
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).context("the daemon's answer is not JSON")?;
    if let Some(e) = v.get("error") {
        bail!("the daemon said: {e}");
    }
    if let Some(program) = v["program"].as_str() {
        // A pTCP node (`braid forward`): no TUN device, one peer.
        println!(
            "{program}  role {}  up {:.0} s",
            v["role"].as_str().unwrap_or("?"),
            v["uptime_s"].as_f64().unwrap_or(0.0)
        );
        let empty = Vec::new();
        for peer in v["peers"].as_array().unwrap_or(&empty) {
            print_peer(peer, false);
            println!(
                "pTCP connections {}  unknown-connection segments dropped {}  unacknowledged {}  windows offered {}",
                peer["ptcp_connections"],
                peer["ptcp_unknown_conn"],
                bytes(&peer["ptcp_unacked_bytes"]),
                bytes(&peer["ptcp_window_bytes"])
            );
        }
        return Ok(());
    }
    println!(
        "interface {}  mtu {} ({})  role {}  addresses {}  up {:.0} s",
        v["interface"].as_str().unwrap_or("?"),
        v["mtu"],
        v["mtu_source"].as_str().unwrap_or(""),
        v["role"].as_str().unwrap_or("?"),
        v["addresses"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(", "))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "none yet".into()),
        v["uptime_s"].as_f64().unwrap_or(0.0)
    );
    let empty = Vec::new();
    let peers = v["peers"].as_array().unwrap_or(&empty);
    for peer in peers {
        print_peer(peer, peers.len() > 1);
    }
    if let Some(line) = tcp_line(&v["tcp"]) {
        println!("{line}");
    }
    // JSON values index to null where a key is absent (a map would panic).
    if let Some(g) = Some(&v["handshake_guard"]).filter(|g| g.is_object()) {
        let n = |k: &str| g.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
        let under_load = g.get("under_load").and_then(|x| x.as_bool()) == Some(true);
        if under_load || n("bad_mac") + n("cookies_sent") + n("rate_limited") > 0 {
            println!(
                "handshakes: {}  passed {}  bad mac1 {}  cookies sent {}  rate-limited {}  times under load {}",
                if under_load {
                    "UNDER LOAD (cookies required)"
                } else {
                    "not under load"
                },
                n("passed"),
                n("bad_mac"),
                n("cookies_sent"),
                n("rate_limited"),
                n("load_events")
            );
        }
    }
    let big = &v["too_big"];
    if big["packets"].as_u64().unwrap_or(0) > 0 {
        println!(
            "packets larger than the bond carries: {}  answered (ICMP too big) {}  rate-limited {}  fragmented {}  fragments dropped {}  dropped {}",
            big["packets"],
            big["answered"],
            big["rate_limited"],
            big["fragmented"],
            big["fragments_dropped"],
            big["dropped"]
        );
    }
    let lp = &v["event_loop"];
    let (late, slow) = (
        lp["late_wakeups"].as_u64().unwrap_or(0),
        lp["slow_turns"].as_u64().unwrap_or(0),
    );
    if late + slow > 0 {
        println!(
            "event loop: {late} wake-ups over 10 ms late (latest {:.0} ms; the host kept braid waiting), {slow} turns over 10 ms (longest {:.0} ms)",
            lp["late_ms_max"].as_f64().unwrap_or(0.0),
            lp["turn_ms_max"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(n) = v["looped_packets"].as_u64().filter(|&n| n > 0) {
        println!(
            "routing loop: {n} of this end's path datagrams came back in through {} (dropped; the log says which path and the route to add)",
            v["interface"].as_str().unwrap_or("the TUN device")
        );
    }
    if v["unrouted_packets"].as_u64().unwrap_or(0) + v["unclaimed_datagrams"].as_u64().unwrap_or(0)
        > 0
    {
        println!(
            "no client for: {} TUN packets (unrouted), {} datagrams (unclaimed)",
            v["unrouted_packets"], v["unclaimed_datagrams"]
        );
    }
    let link_local = v["link_local_packets"].as_u64().unwrap_or(0)
        + v["peers"].as_array().map_or(0, |ps| {
            ps.iter()
                .map(|p| p["link_local_packets"].as_u64().unwrap_or(0))
                .sum()
        });
    if link_local > 0 {
        println!(
            "link-local packets not forwarded: {link_local} (the hosts' IPv6 router solicitations and MLD reports: normal)"
        );
    }
    Ok(())
}

/// `braid status`'s line on TCP acceleration, from the status's `tcp` (none without it). A
/// server's has no `listen_port`: indexing the JSON map for it panicked ("no entry found for
/// key"), so `braid status` of every accelerating server did until a soak found it.
fn tcp_line(t: &serde_json::Value) -> Option<String> {
    if !t.is_object() {
        return None;
    }
    if t["server_accepts"] == false {
        return Some(
            "TCP acceleration: off, the server does not take accelerated TCP (no [tcp] accelerate = true there, or no handshake yet); TCP rides the striped tunnel".into(),
        );
    }
    let port = t["listen_port"]
        .as_u64()
        .map_or(String::new(), |p| format!("redirected to port {p}, "));
    let capped = t["rate_capped"]
        .as_u64()
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| {
            format!("  in [qos], capped at the paths' rates {n}")
        });
    Some(format!(
        "TCP accelerated over pTCP: {port}connections {}  active {}  refused {}{capped}",
        t["connections"], t["active"], t["refused"]
    ))
}

/// One peer's part of `braid status`: its session line, paths, counters and classes.
fn print_peer(peer: &serde_json::Value, named: bool) {
    let s = &peer["session"];
    let who = if named {
        let addrs = peer["addresses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        format!(
            "client {} ({addrs})  ",
            peer["name"].as_str().unwrap_or("?")
        )
    } else {
        String::new()
    };
    let cookies = s["cookie_replies"]
        .as_u64()
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| {
            format!("  cookie replies {n} (the server was under handshake load)")
        });
    let restarts = s["peer_restarts"]
        .as_u64()
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| format!("  peer restarts {n}"));
    // Keys alone do not carry traffic: say when no path hears the peer, or none is in use.
    let states: Vec<&str> = s["paths"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["state"].as_str()).collect())
        .unwrap_or_default();
    let any_up = states
        .iter()
        .any(|st| matches!(*st, "up" | "one-way" | "standby" | "settling"));
    let all_disabled = !states.is_empty() && states.iter().all(|st| *st == "disabled");
    println!(
        "{who}{}  handshakes {}{restarts}{cookies}",
        match (s["established"].as_bool() == Some(true), any_up) {
            (true, true) if s["idle"] == true =>
                "established, idle (no data for 5 s: paths probed slowly)",
            (true, true) => "established",
            (true, false) if all_disabled => "established, but every path is out of use",
            (true, false) => "established, but no path hears the peer",
            (false, _) => "handshaking",
        },
        s["handshakes"],
    );
    let headers = [
        "path",
        "peer",
        "state",
        "tx Mbit/s",
        "rx Mbit/s",
        "rtt ms",
        "loss %",
        "credits",
        "reorder buf",
        "holds (max ms)",
        "queued",
        "downs",
        "PET Mbit/s",
    ];
    let empty = Vec::new();
    let infos = peer["paths"].as_array().unwrap_or(&empty);
    let paths = s["paths"].as_array().unwrap_or(&empty);
    // Columns that say nothing on this bond are left out: credits when off, the holds when
    // not resequencing by sequence numbers, PET's estimate without PET.
    let shown = |k: &str| paths.iter().any(|p| !p[k].is_null());
    let keep = [
        true,
        true,
        true,
        true,
        true,
        true,
        true,
        shown("credit_bytes"),
        true,
        shown("holds"),
        true,
        true,
        shown("pet_estimate_bps"),
    ];
    let mut rows: Vec<[String; 13]> = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let info = infos.get(i);
        rows.push([
            info.and_then(|x| x["name"].as_str())
                .unwrap_or("?")
                .to_owned(),
            match info.map(|x| (x["peer"].as_str(), x["remote_host"].as_str())) {
                Some((Some(a), Some(host))) => format!("{a} ({host})"),
                Some((Some(a), None)) => a.to_owned(),
                _ => "-".to_owned(),
            },
            match (p["state"].as_str(), p["backup"].as_bool()) {
                (Some("up"), Some(true)) => "up (backup)".to_owned(),
                (state, _) => state.unwrap_or("?").to_owned(),
            },
            format!("{:.2}", p["tx_bps"].as_f64().unwrap_or(0.0) / 1e6),
            format!("{:.2}", p["rx_bps"].as_f64().unwrap_or(0.0) / 1e6),
            p["rtt_ms"]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.1}")),
            format!("{:.1}", p["loss_pct"].as_f64().unwrap_or(0.0)),
            p["credit_bytes"]
                .as_u64()
                .map_or("off".into(), |c| c.to_string()),
            p["reorder_buffer_bytes"].to_string(),
            match (p["holds"].as_u64(), p["hold_max_ms"].as_f64()) {
                (Some(n), Some(m)) => format!("{n} ({m:.0})"),
                _ => "-".to_owned(),
            },
            p["queued_bytes"].to_string(),
            p["down_events"].to_string(),
            // PET's estimate (scheduler pet), with `!` when PET has the path blacked out, and
            // `<` when the pairs read more than the path delivered while busy (a token
            // bucket's burst).
            p["pet_estimate_bps"].as_f64().map_or("-".into(), |r| {
                let dark = if p["pet_active"] == false { "!" } else { "" };
                let capped = if p["pet_pair_bps"].as_f64().is_some_and(|pair| pair > r) {
                    "<"
                } else {
                    ""
                };
                format!("{:.2}{capped}{dark}", r / 1e6)
            }),
        ]);
    }
    let table = |keep: [bool; 13]| {
        let kept = |row: &[String; 13]| -> Vec<String> {
            row.iter()
                .zip(keep)
                .filter(|(_, k)| *k)
                .map(|(c, _)| c.clone())
                .collect()
        };
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(kept(&headers.map(str::to_owned)));
        for r in &rows {
            t.add_row(kept(r));
        }
        t
    };
    let t = table(keep);
    // Too wide for the terminal: the columns that matter most, rather than wrapped lines.
    let too_wide = t.width().is_some_and(|w| {
        t.lines()
            .next()
            .is_some_and(|l| l.chars().count() > usize::from(w))
    });
    if too_wide {
        let essential = [
            true, false, true, true, true, true, true, false, false, false, false, false, true,
        ];
        println!(
            "{}",
            table(std::array::from_fn(|i| keep[i] && essential[i]))
        );
        println!("(a narrow terminal: peer, credits, reorder buffer, holds, queued and downs left out; a wider one or --json shows them)");
    } else {
        println!("{t}");
    }
    println!(
        "delivered {} (ahead of their turn {})  lost {}  misordering repairs: marker skips {}, hold skips {}, forced skips {}, late {}  receiver dropped (stale, invalid or over its buffer) {}  not taken (no session yet, or the bond full) {}  NACKs sent {}  resent {}  reinjected {}  abandoned {}  duplicated {}",
        s["delivered_packets"], s["delivered_early"], s["lost_packets"], s["resync"][0], s["resync"][1], s["resync"][2], s["resync"][3], s["receiver_dropped"], s["send_dropped"],
        s["nacks_sent"], s["retransmitted_packets"], s["reinjected_packets"], s["abandoned_packets"], s["duplicated_packets"]
    );
    if let Some(r) = s["release_rate_bps"].as_f64() {
        println!("release paced at {:.2} Mbit/s", r / 1e6);
    }
    if let Some(r) = s["shaping_rate_bps"].as_f64() {
        println!("egress shaped at {:.2} Mbit/s", r / 1e6);
    }
    if let Some(c) = Some(&s["compression"]).filter(|c| c.is_object()) {
        println!(
            "TCP headers: sent compressed {} (saved {} bytes), whole {} (awaiting ack {}, no context {})  received compressed {}, undecodable {}",
            c["compressed"], c["bytes_saved"], c["whole"], c["awaiting_ack"], c["no_context"],
            c["decompressed"], c["undecodable"]
        );
    }
    if let Some(pet) = Some(&s["pet"]).filter(|p| p.is_object()) {
        println!(
            "PET: SIG-ACKs sent {} received {} dropped {}  pairs {} (start-up {}) samples {} probes {}  padding pairs {} ({} bytes)  blackouts {}",
            pet["sig_acks_sent"], pet["sig_acks_received"], pet["sig_acks_dropped"], pet["pairs"],
            pet["startup_pairs"], pet["samples"], pet["probes"], pet["padding_pairs"], pet["padding_bytes"], pet["blackouts"]
        );
    }
    if let Some(classes) = s["classes"].as_array().filter(|c| !c.is_empty()) {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header([
            "class",
            "arrivals",
            "sent",
            "drops",
            "loss %",
            "delay ms mean",
            "delay ms max",
            "rate Mbit/s",
            "backlog",
            "busy loss %",
            "delay bound missed",
            "loss bound broken",
            "rate bound missed",
        ]);
        let f =
            |v: &serde_json::Value, d: usize| v.as_f64().map_or("-".into(), |x| format!("{x:.d$}"));
        for c in classes {
            t.add_row([
                c["name"].as_str().unwrap_or("?").to_owned(),
                c["arrivals"].to_string(),
                c["sent"].to_string(),
                c["drops"].to_string(),
                f(&c["loss_pct"], 2),
                f(&c["delay_ms_mean"], 2),
                f(&c["delay_ms_max"], 2),
                f(&c["service_rate_mbit"], 2),
                c["backlog"].to_string(),
                f(&c["busy_loss_pct"], 2),
                c["delay_bound_violations"].to_string(),
                c["loss_bound_violations"].to_string(),
                c["rate_bound_violations"].to_string(),
            ]);
        }
        println!("per-class service (JoBS):\n{t}");
    }
    let dropped = s["dropped"].as_array().cloned().unwrap_or_default();
    if !dropped.is_empty() {
        let list: Vec<String> = dropped
            .iter()
            .map(|d| format!("{} {}", d[0].as_str().unwrap_or("?"), d[1]))
            .collect();
        println!("datagrams dropped: {}", list.join(", "));
    }
    for info in infos {
        if let Some(why) = info["problem"].as_str() {
            println!(
                "path {} out of use: {why}",
                info["name"].as_str().unwrap_or("?")
            );
        }
    }
    if peer["spoofed_packets"].as_u64().unwrap_or(0) > 0 {
        println!(
            "packets from a source address not this client's (dropped): {}",
            peer["spoofed_packets"]
        );
    }
    if let Some(p) = Some(&s["ptcp"]).filter(|p| p.is_object()) {
        println!(
            "pTCP: connections {}  segments sent {} received {} unsent {} dropped {}  for no connection {}  unacknowledged {}  windows offered {}",
            peer["ptcp_connections"], p["sent"], p["received"], p["unsent"], p["dropped"],
            peer["ptcp_unknown_conn"],
            bytes(&peer["ptcp_unacked_bytes"]),
            bytes(&peer["ptcp_window_bytes"])
        );
    }
}

/// A byte count for people: `812 B`, `64.0 KiB`, `3.5 MiB`, `1.2 GiB` (`?` when absent).
fn bytes(v: &serde_json::Value) -> String {
    let Some(n) = v.as_u64() else {
        return "?".into();
    };
    let units = [("GiB", 30), ("MiB", 20), ("KiB", 10)];
    units
        .iter()
        .find(|&&(_, shift)| n >= 1u64 << shift)
        .map_or(format!("{n} B"), |&(unit, shift)| {
            format!("{:.1} {unit}", n as f64 / (1u64 << shift) as f64)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_servers_tcp_line_has_no_port_and_does_not_panic() {
        let server = json!({ "connections": 5, "active": 1, "refused": 0,
            "server_accepts": true, "transparent": 5, "rate_capped": 0 });
        assert_eq!(
            tcp_line(&server).unwrap(),
            "TCP accelerated over pTCP: connections 5  active 1  refused 0"
        );
        let client = json!({ "listen_port": 7199, "connections": 2, "active": 0,
            "refused": 0, "server_accepts": true, "rate_capped": 1 });
        assert!(tcp_line(&client)
            .unwrap()
            .starts_with("TCP accelerated over pTCP: redirected to port 7199, connections 2"));
        assert!(tcp_line(&json!({ "server_accepts": false }))
            .unwrap()
            .contains("off"));
        assert_eq!(tcp_line(&serde_json::Value::Null), None);
    }

    #[test]
    fn byte_counts_read_in_their_unit() {
        assert_eq!(bytes(&json!(812)), "812 B");
        assert_eq!(bytes(&json!(65_536)), "64.0 KiB");
        assert_eq!(bytes(&json!(3_670_016)), "3.5 MiB");
        assert_eq!(bytes(&json!(1_288_490_189u64)), "1.2 GiB");
        assert_eq!(bytes(&json!(null)), "?");
    }

    /// A writer whose disk is full.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_key_that_cannot_be_written_is_an_error() {
        let e = write_line(&mut Full, "key").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let mut out = Vec::new();
        write_line(&mut out, "key").unwrap();
        assert_eq!(out, b"key\n");
    }

    #[test]
    fn pubkey_says_when_stdin_is_empty() {
        for empty in ["", "\n", "  \n"] {
            let e = public_key_of(empty).unwrap_err().to_string();
            assert!(e.contains("stdin is empty"), "{e}");
        }
        let e = format!("{:#}", public_key_of("short").unwrap_err());
        assert!(e.contains("44 characters"), "{e}");
        let key = PrivateKey::from_random([7; 32]);
        assert_eq!(
            public_key_of(&format!("{}\n", key.to_base64())).unwrap(),
            key.public_key().to_base64()
        );
    }

    fn client_status(names: &[&str]) -> serde_json::Value {
        let paths: Vec<_> = names.iter().map(|n| json!({ "name": n })).collect();
        json!({ "role": "client", "peers": [{ "name": "server", "paths": paths }] })
    }

    #[test]
    fn braid_path_takes_a_name_or_the_index_form_for_any_path() {
        let v = client_status(&["dsl", "lte"]);
        assert_eq!(path_target(&v, "down", "lte").unwrap(), "lte");
        assert_eq!(path_target(&v, "down", "path1").unwrap(), "lte");
        assert_eq!(path_target(&v, "down", "path0").unwrap(), "dsl");
        let e = path_target(&v, "down", "path2").unwrap_err().to_string();
        assert!(
            e.contains("dsl, lte") && e.contains("path0 to path1"),
            "{e}"
        );
        let e = path_target(&v, "down", "wifi").unwrap_err().to_string();
        assert!(e.contains("no path is named `wifi`"), "{e}");
        // A path named like another's index is that path.
        let v = client_status(&["path1", "lte"]);
        assert_eq!(path_target(&v, "down", "path1").unwrap(), "path1");
        assert_eq!(path_target(&v, "up", "path0").unwrap(), "path1");
        // A status this version does not know: the daemon judges the name.
        assert_eq!(path_target(&json!({}), "down", "x").unwrap(), "x");
    }

    #[test]
    fn braid_path_on_a_server_names_the_paths_its_status_shows() {
        let one = json!({ "role": "server", "peers": [
            { "name": "client", "paths": [{ "name": "dsl" }, { "name": "lte" }] }
        ] });
        let e = path_target(&one, "down", "lte").unwrap_err().to_string();
        assert!(
            e.contains("(dsl, lte)") && e.contains("run `braid path down lte` on the client"),
            "{e}"
        );
        assert!(!e.contains("path0"), "{e}");
        let two = json!({ "role": "server", "peers": [
            { "name": "home", "paths": [{ "name": "dsl" }] },
            { "name": "van", "paths": [{ "name": "path0" }, { "name": "path1" }] }
        ] });
        let e = path_target(&two, "up", "dsl").unwrap_err().to_string();
        assert!(
            e.contains("dsl of client home; path0, path1 of client van"),
            "{e}"
        );
        let none = json!({ "role": "server", "peers": [{ "name": "client", "paths": [] }] });
        let e = path_target(&none, "up", "dsl").unwrap_err().to_string();
        assert!(e.contains("no client has connected"), "{e}");
    }

    #[test]
    fn a_control_socket_that_is_no_socket_is_named() {
        let e = is_socket_or_missing(Path::new("/etc/passwd"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/passwd is not a socket (a regular file)") && e.contains("--socket"),
            "{e}"
        );
        let e = is_socket_or_missing(Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a directory"), "{e}");
        is_socket_or_missing(Path::new("/nonexistent/braid.sock")).unwrap();
    }

    /// A client config whose control socket is `socket`, talking to `server`.
    fn client_config(socket: &Path, server: &PrivateKey) -> Config {
        let text = format!(
            "role = \"client\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n\
             [interface]\naddress = [\"10.77.0.2/30\"]\n\
             [[path]]\nremote = \"192.0.2.1:7000\"\nrate_mbit = 10\n\
             [control]\nsocket = \"{}\"\n",
            PrivateKey::from_random([1; 32]).to_base64(),
            server.public_key().to_base64(),
            socket.display()
        );
        Config::parse(&text, Path::new("client.toml")).unwrap()
    }

    /// Answers `status` on `socket` with `status`, for `connections` connections.
    fn fake_daemon(
        socket: &Path,
        status: serde_json::Value,
        connections: usize,
    ) -> std::thread::JoinHandle<()> {
        let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(connections) {
                let Ok(mut s) = stream else { continue };
                let mut line = String::new();
                let _ = s.read_to_string(&mut line);
                if line.trim() == "status" {
                    let _ = s.write_all(status.to_string().as_bytes());
                }
            }
        })
    }

    #[test]
    fn send_and_forward_refuse_to_run_beside_a_daemon_of_their_config() {
        let dir = std::env::temp_dir().join(format!("braid-beside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("c.sock");
        let server = PrivateKey::from_random([2; 32]);
        let cfg = client_config(&socket, &server);
        // Nothing answers: free to run.
        refuse_beside_daemon(&cfg, Path::new("client.toml"), "send").unwrap();

        let up = json!({ "interface": "braid0", "role": "client",
            "peers": [{ "name": "server", "public_key": server.public_key().to_base64() }] });
        // One connection to see that it answers, one for its status.
        let daemon = fake_daemon(&socket, up, 2);
        let e = refuse_beside_daemon(&cfg, Path::new("client.toml"), "send")
            .unwrap_err()
            .to_string();
        daemon.join().unwrap();
        assert!(
            e.contains("client.toml: a `braid up` (interface braid0) of this config is running")
                && e.contains("take over its session")
                && e.contains("Stop it first")
                && e.contains("another key pair"),
            "{e}"
        );
        std::fs::remove_file(&socket).unwrap();

        // A daemon of another bond that only shares the socket's path is no obstacle.
        let other = json!({ "interface": "braid0", "role": "client",
            "peers": [{ "name": "server",
                        "public_key": PrivateKey::from_random([3; 32]).public_key().to_base64() }] });
        let daemon = fake_daemon(&socket, other, 2);
        refuse_beside_daemon(&cfg, Path::new("client.toml"), "forward").unwrap();
        daemon.join().unwrap();
        std::fs::remove_file(&socket).unwrap();

        // One whose status cannot be read is taken for this config's.
        let daemon = fake_daemon(&socket, json!("garbled"), 2);
        let e = refuse_beside_daemon(&cfg, Path::new("client.toml"), "forward")
            .unwrap_err()
            .to_string();
        daemon.join().unwrap();
        assert!(
            e.contains("a braid daemon of this config is running"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

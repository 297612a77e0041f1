//! `braid up`, `braid genkey`, `braid pubkey`, `braid status`.

use anyhow::{bail, Context, Result};
use braid_daemon::config::Config;
use braid_session::PrivateKey;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
        .context("cannot install the SIGINT/SIGTERM handler")?;
    braid_daemon::run(cfg, stop)?;
    eprintln!("braid: stopped");
    Ok(())
}

/// Print a new private key.
pub fn genkey() -> Result<()> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    println!("{}", PrivateKey::from_random(bytes).to_base64());
    Ok(())
}

/// Read a private key on stdin, print its public key.
pub fn pubkey() -> Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the private key from stdin")?;
    let key = PrivateKey::from_base64(&text).context("reading the private key on stdin")?;
    println!("{}", key.public_key());
    Ok(())
}

/// `braid path`.
#[derive(Args, Debug)]
pub struct PathArgs {
    /// `down`: stop using the path (a care-of address dropped: nothing is sent on it, not even
    /// probes); `up`: use it again (it rejoins once its probes are answered).
    #[arg(value_parser = ["up", "down"])]
    pub action: String,
    /// The path's name (`name` in its [[path]] table, or path<i>).
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
    Ok(match (socket, config) {
        (Some(s), _) => s.clone(),
        // Only the socket is needed: no DNS for the paths' host names.
        (None, Some(c)) => Config::load_offline(c)?.control_socket,
        (None, None) => PathBuf::from("/run/braid/braid0.sock"),
    })
}

/// Take a path out of use or give it back.
pub fn path(args: &PathArgs) -> Result<()> {
    let socket = control_socket(&args.socket, &args.config)?;
    let text =
        braid_daemon::control::request(&socket, &format!("path {} {}", args.action, args.name))
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
                "pTCP connections {}  unknown-connection segments dropped {}",
                peer["ptcp_connections"], peer["ptcp_unknown_conn"]
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
    if let Some(t) = v["tcp"].as_object() {
        if t["server_accepts"] == false {
            println!(
                "TCP acceleration: off, the server does not take accelerated TCP (no [tcp] accelerate = true there, or no handshake yet); TCP rides the striped tunnel"
            );
        } else {
            let port = t["listen_port"]
                .as_u64()
                .map_or(String::new(), |p| format!("redirected to port {p}, "));
            let capped = t["rate_capped"]
                .as_u64()
                .filter(|&n| n > 0)
                .map_or(String::new(), |n| {
                    format!("  in [qos], capped at the paths' rates {n}")
                });
            println!(
                "TCP accelerated over pTCP: {port}connections {}  active {}  refused {}{capped}",
                t["connections"], t["active"], t["refused"]
            );
        }
    }
    if let Some(g) = v["handshake_guard"].as_object() {
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
            (true, true) => "established",
            (true, false) if all_disabled => "established, but every path is out of use",
            (true, false) => "established, but no path hears the peer",
            (false, _) => "handshaking",
        },
        s["handshakes"],
    );
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
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
    ]);
    let empty = Vec::new();
    let infos = peer["paths"].as_array().unwrap_or(&empty);
    let paths = s["paths"].as_array().unwrap_or(&empty);
    for (i, p) in paths.iter().enumerate() {
        let info = infos.get(i);
        t.add_row([
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
    println!("{t}");
    println!(
        "delivered {} (ahead of their turn {})  lost {}  misordering repairs (marker/hold/forced skips, late) {}  receiver dropped {}  not taken (no session yet, or the bond full) {}  NACKs sent {}  resent {}  abandoned {}  duplicated {}",
        s["delivered_packets"], s["delivered_early"], s["lost_packets"], s["resync"], s["receiver_dropped"], s["send_dropped"],
        s["nacks_sent"], s["retransmitted_packets"], s["abandoned_packets"], s["duplicated_packets"]
    );
    if let Some(r) = s["release_rate_bps"].as_f64() {
        println!("release paced at {:.2} Mbit/s", r / 1e6);
    }
    if let Some(r) = s["shaping_rate_bps"].as_f64() {
        println!("egress shaped at {:.2} Mbit/s", r / 1e6);
    }
    if let Some(c) = s["compression"].as_object() {
        println!(
            "TCP headers: sent compressed {} (saved {} bytes), whole {} (awaiting ack {}, no context {})  received compressed {}, undecodable {}",
            c["compressed"], c["bytes_saved"], c["whole"], c["awaiting_ack"], c["no_context"],
            c["decompressed"], c["undecodable"]
        );
    }
    if let Some(pet) = s["pet"].as_object() {
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
    if let Some(p) = s["ptcp"].as_object() {
        println!(
            "pTCP: connections {}  segments sent {} received {} unsent {} dropped {}  for no connection {}",
            peer["ptcp_connections"], p["sent"], p["received"], p["unsent"], p["dropped"],
            peer["ptcp_unknown_conn"]
        );
    }
}

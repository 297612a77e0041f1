//! `braid forward`: TCP forwarding over pTCP inside braid's secure session (issue 6). On the
//! client, a local listening port; each TCP connection accepted there rides its own pTCP
//! connection (one micro-flow per path) to the server, which connects onward to the target it
//! was configured with and copies both ways. The client cannot choose the target: the server's
//! `--target` decides.
//!
//! Point an application at the client's `--listen` address as it would at the target itself
//! (e.g. `curl http://127.0.0.1:8080/` for `--target web.internal:80`).

use anyhow::{bail, Context, Result};
use braid_daemon::config::Config;
use braid_daemon::ptcp_node::{NodeOptions, PtcpNode, APP_TOKEN_BASE};
use braid_daemon::tcp_pair::Pair;
use braid_ptcp::State;
use braid_session::Role;
use clap::Args;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One node turn waits at most this long.
const TURN: Duration = Duration::from_millis(20);
/// Forwarded connections at most at once; more are refused (closed at once).
const MAX_PAIRS: usize = 200;

/// `braid forward`.
#[derive(Args, Debug)]
pub struct ForwardArgs {
    /// The configuration `braid up` uses: the client's (with --listen) or the server's (with
    /// --target).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Client: accept TCP connections on this address (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Server: connect every forwarded connection to this address.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: Option<String>,
    /// Congestion control of every micro-flow: bbr (default), cubic or reno.
    #[arg(long, value_name = "NAME", default_value = "bbr")]
    pub congestion_control: String,
    /// Say nothing about connections.
    #[arg(long)]
    pub quiet: bool,
}

fn addr(s: &str, flag: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .with_context(|| format!("{flag} {s}: not an ADDR:PORT this machine can resolve"))?
        .next()
        .with_context(|| format!("{flag} {s}: the name has no address"))
}

/// `braid forward -c FILE (--listen ADDR | --target HOST:PORT)`: runs until SIGINT/SIGTERM.
/// Register `tcp` with the node's poll under a fresh token and pair it with pTCP connection
/// `id`.
fn adopt(
    node: &PtcpNode,
    pairs: &mut BTreeMap<usize, Pair>,
    next_token: &mut usize,
    mut tcp: TcpStream,
    id: u16,
) -> std::io::Result<()> {
    let token = Token(*next_token);
    *next_token += 1;
    node.registry()
        .register(&mut tcp, token, Interest::READABLE | Interest::WRITABLE)?;
    pairs.insert(token.0, Pair::new(tcp, id));
    Ok(())
}

pub fn forward(args: &ForwardArgs) -> Result<()> {
    let cfg = Config::load(&args.config)?;
    let (listen, target) = match (cfg.role, &args.listen, &args.target) {
        (Role::Initiator, Some(l), None) => (Some(addr(l, "--listen")?), None),
        (Role::Responder, None, Some(t)) => (None, Some(addr(t, "--target")?)),
        (Role::Initiator, _, _) => bail!(
            "{}: a client config forwards a local port: give --listen ADDR:PORT (and no \
             --target: the server's --target decides where connections go)",
            args.config.display()
        ),
        (Role::Responder, _, _) => bail!(
            "{}: a server config forwards to a target: give --target HOST:PORT (and no \
             --listen: the client's --listen accepts the connections)",
            args.config.display()
        ),
    };
    cfg.check_listen_port(&args.config)?;
    crate::daemon_cmd::refuse_beside_daemon(&cfg, &args.config, "forward")?;
    let options = NodeOptions {
        congestion: crate::transfer_cmd::congestion(&args.congestion_control)?,
        ..NodeOptions::default()
    };
    let stop = crate::stop_signal()?;
    let mut node = PtcpNode::new(&cfg, options)?;
    // `braid status` and `braid path` work on a forwarder as on `braid up`.
    if let Err(e) = node.serve_control(&cfg.control_socket) {
        eprintln!(
            "braid forward: warning: no control socket at {} ({e}): `braid status` will not see this forwarder",
            cfg.control_socket.display()
        );
    }
    let listener_token = Token(APP_TOKEN_BASE);
    let listener = match listen {
        Some(a) => {
            let mut l = TcpListener::bind(a).with_context(|| {
                format!("cannot listen on {a}: is the port in use, or the address not here?")
            })?;
            node.registry()
                .register(&mut l, listener_token, Interest::READABLE)?;
            if !args.quiet {
                eprintln!("braid forward: connections to {a} ride pTCP to the server");
            }
            Some(l)
        }
        None => {
            if !args.quiet {
                eprintln!(
                    "braid forward: pTCP connections from the client go on to {}",
                    target.map_or(String::new(), |t| t.to_string())
                );
            }
            None
        }
    };
    let mut pairs: BTreeMap<usize, Pair> = BTreeMap::new();
    let mut next_token = APP_TOKEN_BASE + 1;
    while !stop.load(Ordering::Relaxed) {
        node.turn(TURN)?;
        let now = node.now();
        // Client: accept local connections once the session is up.
        if let (Some(l), true) = (&listener, node.is_established()) {
            loop {
                match l.accept() {
                    Ok((tcp, from)) => {
                        let Some(id) = (pairs.len() < MAX_PAIRS).then(|| node.connect()).flatten()
                        else {
                            continue;
                        };
                        adopt(&node, &mut pairs, &mut next_token, tcp, id)?;
                        if !args.quiet {
                            eprintln!("{from}: forwarding (pTCP connection {id})");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        eprintln!("accept: {e}");
                        break;
                    }
                }
            }
        }
        // Server: each new pTCP connection connects onward.
        if let Some(t) = target {
            while let Some(id) = node.accept() {
                match TcpStream::connect(t) {
                    Ok(tcp) => {
                        adopt(&node, &mut pairs, &mut next_token, tcp, id)?;
                        if !args.quiet {
                            eprintln!("pTCP connection {id}: forwarding to {t}");
                        }
                    }
                    Err(e) => {
                        eprintln!("pTCP connection {id}: cannot connect to {t}: {e}");
                        if let Some(c) = node.conn_mut(id) {
                            c.close(now);
                        }
                    }
                }
            }
        }
        let mut done = Vec::new();
        for (&token, p) in pairs.iter_mut() {
            let Some(c) = node.conn_mut(p.id()) else {
                done.push(token);
                continue;
            };
            if p.pump(c, now) {
                done.push(token);
            }
        }
        for token in done {
            if let Some(mut p) = pairs.remove(&token) {
                let _ = node.registry().deregister(p.tcp_mut());
                node.remove_after_transmit(p.id());
                if !args.quiet {
                    eprintln!("pTCP connection {}: done", p.id());
                }
            }
        }
        // Forget connections without a TCP side (the onward connect failed) once closed.
        for id in node.conn_ids() {
            let paired = pairs.values().any(|p| p.id() == id);
            if !paired && node.conn(id).is_some_and(|c| c.state() == State::Closed) {
                node.remove_after_transmit(id);
            }
        }
    }
    // Stopped: each connection still forwarded ends with a reset at both ends, not a FIN
    // that would read as the clean end of a truncated stream (`Pair::abort`); the listener
    // first, so that none lands meanwhile.
    drop(listener);
    for p in pairs.values() {
        p.abort();
    }
    drop(pairs);
    let reset = node.reset_all();
    if reset > 0 && !args.quiet {
        eprintln!("braid forward: stopping: {reset} connection(s) reset at both ends");
    }
    Ok(())
}

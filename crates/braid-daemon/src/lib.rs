//! `braid up`: the daemon at one end of a bond.
//!
//! It owns the I/O the sans-IO [`braid_session::Session`] never touches: the TUN device (the
//! stripe paper's strIPe virtual interface, section 6.1), one UDP socket per path (client) or a
//! listening socket (server), the control socket for `braid status`, an optional Prometheus
//! endpoint, and the clock. One thread runs a `mio` event loop; every event is handed to the
//! session, and whatever the session wants sent or delivered goes out before the loop sleeps
//! until the session's next timeout.

#![warn(missing_docs)]

pub mod config;
pub mod control;
mod metrics;
mod net;

use crate::config::Config;
use braid_proto::time::Instant;
use braid_proto::PathId;
use braid_session::{Role, Session, SessionConfig};
use mio::net::{UdpSocket, UnixListener};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Creating or configuring the TUN device failed.
    #[error("cannot create TUN device {name}: {source}{hint}")]
    Tun {
        /// Interface name.
        name: String,
        /// The OS error.
        source: io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// Configuring addresses or routes failed.
    #[error("cannot configure {what}: {detail}")]
    Ip {
        /// What was being configured.
        what: String,
        /// The `ip` command's complaint.
        detail: String,
    },
    /// A socket could not be opened or bound.
    #[error("cannot open the UDP socket for {what}: {source}{hint}")]
    Socket {
        /// Which path / listen address.
        what: String,
        /// The OS error.
        source: io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// The control socket could not be created.
    #[error("cannot create the control socket {path}: {source}")]
    Control {
        /// The socket path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// Any other I/O error of the event loop.
    #[error("event loop: {0}")]
    Io(#[from] io::Error),
}

const PRIVILEGE_HINT: &str =
    " (braid needs CAP_NET_ADMIN: run it as root, or `setcap cap_net_admin,cap_net_raw+ep $(which braid)`)";

const TUN: Token = Token(0);
const CONTROL: Token = Token(1);
const METRICS: Token = Token(2);
const UDP_BASE: usize = 16;

/// What `braid status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The TUN device.
    pub interface: String,
    /// Its MTU, and where it came from.
    pub mtu: u16,
    /// `configured` or `derived: smallest path MTU minus braid's overhead`.
    pub mtu_source: String,
    /// Path names and peer addresses, in path order.
    pub paths: Vec<PathInfo>,
    /// The session's own status.
    pub session: braid_session::SessionStatus,
    /// Packets read from the TUN device.
    pub tun_rx_packets: u64,
    /// Packets written to the TUN device.
    pub tun_tx_packets: u64,
    /// Datagrams the kernel would not take (sendto errors).
    pub udp_send_errors: u64,
    /// Seconds since start.
    pub uptime_s: f64,
}

/// A path's identity in `status`.
#[derive(Debug, Serialize)]
pub struct PathInfo {
    /// Name from the config (server: `path<i>`).
    pub name: String,
    /// Where this end sends the path's datagrams (server: learned from the client).
    pub peer: Option<SocketAddr>,
}

struct Daemon {
    cfg: Config,
    session: Session,
    tun: tun_rs::SyncDevice,
    mtu: u16,
    mtu_source: String,
    sockets: Vec<UdpSocket>,
    peers: Vec<Option<SocketAddr>>,
    names: Vec<String>,
    control: UnixListener,
    metrics: Option<mio::net::TcpListener>,
    clock: std::time::Instant,
    tun_rx: u64,
    tun_tx: u64,
    send_errors: u64,
    tun_readable: bool,
    buf: Vec<u8>,
    out: Vec<u8>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Run the daemon in the foreground until `stop` is set (e.g. by SIGINT/SIGTERM).
pub fn run(cfg: Config, stop: Arc<AtomicBool>) -> Result<(), DaemonError> {
    let mut d = Daemon::start(cfg)?;
    let result = d.event_loop(&stop);
    let _ = std::fs::remove_file(&d.cfg.control_socket);
    result
}

impl Daemon {
    fn start(cfg: Config) -> Result<Daemon, DaemonError> {
        let (mtu, mtu_source) = match (cfg.role, cfg.mtu) {
            (Role::Initiator, Some(m)) => (
                m,
                if cfg.bond.as_ref().is_some_and(|b| b.max_packet == u32::from(m)) {
                    "smallest path MTU minus braid's overhead, unless interface.mtu is set".to_owned()
                } else {
                    "configured".to_owned()
                },
            ),
            (Role::Responder, Some(m)) => (m, "configured".to_owned()),
            (_, None) => (
                1428,
                "default for a server (1500 minus braid's IPv4 overhead); set interface.mtu to match the client".to_owned(),
            ),
        };
        let tun = net::open_tun(&cfg, mtu)?;
        let (sockets, peers, names) = net::open_sockets(&cfg)?;
        if let Some(dir) = cfg.control_socket.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(&cfg.control_socket);
        let control =
            UnixListener::bind(&cfg.control_socket).map_err(|e| DaemonError::Control {
                path: cfg.control_socket.display().to_string(),
                source: e,
            })?;
        let metrics = match cfg.prometheus {
            Some(addr) => {
                let l = TcpListener::bind(addr).map_err(|e| DaemonError::Socket {
                    what: format!("the Prometheus endpoint {addr}"),
                    source: e,
                    hint: "",
                })?;
                l.set_nonblocking(true)?;
                Some(mio::net::TcpListener::from_std(l))
            }
            None => None,
        };
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| DaemonError::Io(io::Error::other(e.to_string())))?;
        let mut scfg = SessionConfig::new(
            cfg.role,
            cfg.private_key.clone(),
            cfg.peer_public_key,
            cfg.bond.clone(),
        );
        scfg.probe_interval = cfg.probe_interval;
        scfg.dead_after = cfg.dead_after;
        scfg.rekey_after = cfg.rekey_after;
        let clock = std::time::Instant::now();
        let session = Session::new(scfg, Instant::ZERO, seed, wall_ns());
        Ok(Daemon {
            cfg,
            session,
            tun,
            mtu,
            mtu_source,
            sockets,
            peers,
            names,
            control,
            metrics,
            clock,
            tun_rx: 0,
            tun_tx: 0,
            send_errors: 0,
            tun_readable: true,
            buf: vec![0u8; 65_536],
            out: vec![0u8; 65_536],
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    fn event_loop(&mut self, stop: &AtomicBool) -> Result<(), DaemonError> {
        let mut poll = Poll::new()?;
        let tun_fd = self.tun.as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&tun_fd), TUN, Interest::READABLE)?;
        poll.registry()
            .register(&mut self.control, CONTROL, Interest::READABLE)?;
        if let Some(m) = &mut self.metrics {
            poll.registry().register(m, METRICS, Interest::READABLE)?;
        }
        for (i, s) in self.sockets.iter_mut().enumerate() {
            poll.registry()
                .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
        }
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let now = self.now();
            let timeout = self
                .session
                .poll_timeout()
                .map(
                    |t| StdDuration::from_nanos(t.saturating_duration_since(now).as_nanos() as u64),
                )
                .unwrap_or(StdDuration::from_millis(100))
                .min(StdDuration::from_millis(100));
            let timeout = if self.tun_readable && self.session.is_established() {
                StdDuration::ZERO
            } else {
                timeout
            };
            match poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for ev in events.iter() {
                match ev.token() {
                    TUN => self.tun_readable = true,
                    CONTROL => self.serve_control(),
                    METRICS => self.serve_metrics(),
                    Token(t) if t >= UDP_BASE => self.read_udp(t - UDP_BASE),
                    _ => {}
                }
            }
            let now = self.now();
            self.session.handle_timeout(now);
            self.read_tun();
            self.flush();
        }
        Ok(())
    }

    /// Read from the TUN while the bond can take packets; stop (leaving them to the kernel's
    /// queue) when it cannot, so backpressure reaches the sender.
    fn read_tun(&mut self) {
        if !self.session.is_established() {
            // Drain, so the kernel queue does not hold stale packets; count them as dropped.
            while let Ok(n) = self.tun.recv(&mut self.buf) {
                self.tun_rx += 1;
                let now = self.now();
                let _ = self.session.send(now, &self.buf[..n]);
            }
            self.tun_readable = false;
            return;
        }
        for _ in 0..256 {
            if !self.session.can_send(usize::from(self.mtu)) {
                self.flush();
                if !self.session.can_send(usize::from(self.mtu)) {
                    return;
                }
            }
            match self.tun.recv(&mut self.buf) {
                Ok(n) => {
                    self.tun_rx += 1;
                    let now = self.now();
                    self.session.send(now, &self.buf[..n]);
                }
                Err(_) => {
                    self.tun_readable = false;
                    return;
                }
            }
        }
    }

    fn read_udp(&mut self, i: usize) {
        loop {
            let Some(sock) = self.sockets.get(i) else {
                return;
            };
            let (n, from) = match sock.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(_) => return,
            };
            let now = self.now();
            let arrived_on = (self.cfg.role == Role::Initiator).then_some(PathId(i as u8));
            if let Ok(path) = self
                .session
                .handle_datagram(now, arrived_on, &self.buf[..n])
            {
                if self.cfg.role == Role::Responder {
                    let p = path.index();
                    if self.peers.len() <= p {
                        self.peers.resize(p + 1, None);
                    }
                    // Authenticated: learn (or follow) the client's address for this path.
                    self.peers[p] = Some(from);
                }
            }
            self.deliver();
        }
    }

    fn deliver(&mut self) {
        let now = self.now();
        while let Some(p) = self.session.poll_deliver(now) {
            if self.tun.send(&p).is_ok() {
                self.tun_tx += 1;
            }
        }
    }

    fn flush(&mut self) {
        self.deliver();
        let now = self.now();
        for p in 0..self.session.paths() {
            let path = PathId(p as u8);
            while let Some(n) = self.session.poll_transmit(now, path, &mut self.out) {
                let (sock, peer) = match self.cfg.role {
                    Role::Initiator => (self.sockets.get(p), self.peers.get(p).copied().flatten()),
                    Role::Responder => (self.sockets.first(), self.peers.get(p).copied().flatten()),
                };
                match (sock, peer) {
                    (Some(s), Some(addr)) => {
                        if s.send_to(&self.out[..n], addr).is_err() {
                            self.send_errors += 1;
                        }
                    }
                    _ => self.send_errors += 1,
                }
            }
        }
    }

    fn status(&self) -> Status {
        let n = self.session.paths().max(self.names.len());
        Status {
            interface: self.cfg.ifname.clone(),
            mtu: self.mtu,
            mtu_source: self.mtu_source.clone(),
            paths: (0..n)
                .map(|i| PathInfo {
                    name: self
                        .names
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("path{i}")),
                    peer: self.peers.get(i).copied().flatten(),
                })
                .collect(),
            session: self.session.status(),
            tun_rx_packets: self.tun_rx,
            tun_tx_packets: self.tun_tx,
            udp_send_errors: self.send_errors,
            uptime_s: self.clock.elapsed().as_secs_f64(),
        }
    }

    fn serve_control(&mut self) {
        while let Ok((stream, _)) = self.control.accept() {
            // Requests are one short line; answer at once, never block the loop for long.
            let s0 = stream;
            let mut s = std::os::unix::net::UnixStream::from(s0);
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(StdDuration::from_millis(200)));
            let _ = s.set_write_timeout(Some(StdDuration::from_millis(200)));
            let mut req = [0u8; 64];
            let n = s.read(&mut req).unwrap_or(0);
            let req = String::from_utf8_lossy(&req[..n]);
            let body = if req.trim() == "status" {
                serde_json::to_string(&self.status()).unwrap_or_default()
            } else {
                "{\"error\":\"unknown request; send `status`\"}".to_owned()
            };
            let _ = s.write_all(body.as_bytes());
        }
    }

    fn serve_metrics(&mut self) {
        let Some(listener) = &self.metrics else {
            return;
        };
        while let Ok((stream, _)) = listener.accept() {
            let _ = stream.set_nodelay(true);
            let mut s: std::net::TcpStream = stream.into();
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(StdDuration::from_millis(200)));
            let _ = s.set_write_timeout(Some(StdDuration::from_millis(200)));
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            let body = metrics::render(&self.status());
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{}",
                body.len(),
                body
            );
        }
    }
}

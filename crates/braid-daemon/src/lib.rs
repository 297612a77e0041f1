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
pub mod ptcp_node;

use crate::config::Config;
use braid_proto::time::Instant;
use braid_proto::PathId;
use braid_session::{Role, Session, SessionConfig};
use mio::net::UdpSocket;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Creating or configuring the TUN device failed.
    #[error("cannot create TUN device {name}: {err}{hint}")]
    Tun {
        /// Interface name.
        name: String,
        /// The OS error.
        err: io::Error,
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
    #[error("cannot open the UDP socket for {what}: {err}{hint}")]
    Socket {
        /// Which path / listen address.
        what: String,
        /// The OS error.
        err: io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// The control socket could not be created.
    #[error("cannot create the control socket {path}: {err}")]
    Control {
        /// The socket path.
        path: String,
        /// The OS error.
        err: io::Error,
    },
    /// Any other I/O error of the event loop.
    #[error("event loop: {0}")]
    Io(#[from] io::Error),
}

const PRIVILEGE_HINT: &str = " (braid needs CAP_NET_ADMIN: run it as root, or give it CAP_NET_ADMIN as an ambient capability, e.g. AmbientCapabilities=CAP_NET_ADMIN in the systemd unit of contrib/; a file capability set with setcap is not enough, because braid runs `ip` to configure the device)";

/// Room for one datagram in the send buffer (the TUN MTU plus braid's overhead fits).
const DATAGRAM_ROOM: usize = 2048;
/// Datagrams per GSO send at most (the kernel's UDP_MAX_SEGMENTS).
const MAX_BATCH: usize = 64;
/// Bytes per GSO send at most: the segments together must fit one IP packet's length field.
const MAX_BATCH_BYTES: usize = 65_000;
/// Receive buffers per `recvmmsg`, each for one GRO-coalesced datagram of up to 64 KiB.
const RX_BUFFERS: usize = 4;
const RX_BUFFER_BYTES: usize = 65_536;
/// TUN reads (each up to [`net::TUN_BATCH`] packets) per wake-up at most.
const MAX_TUN_READS: usize = 64;

const TUN: Token = Token(0);
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
    /// Whether the TUN device runs with the kernel's offloads (TSO/USO super-packets read and
    /// GRO-coalesced writes), or moves one packet per system call.
    pub tun_offload: bool,
    /// Packets read from the TUN device (segments of super-packets counted one by one).
    pub tun_rx_packets: u64,
    /// Reads from the TUN device that failed (e.g. a super-packet that would not split).
    pub tun_rx_errors: u64,
    /// Packets written to the TUN device (before coalescing).
    pub tun_tx_packets: u64,
    /// Packets in TUN write batches the kernel refused.
    pub tun_tx_errors: u64,
    /// Datagrams the kernel would not take (sendto errors).
    pub udp_send_errors: u64,
    /// Seconds since start.
    pub uptime_s: f64,
    /// CPU time the daemon has used since start, in user space (all threads).
    pub cpu_user_s: f64,
    /// CPU time the daemon has used since start, in the kernel on its behalf.
    pub cpu_system_s: f64,
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
    tun: net::Tun,
    mtu: u16,
    mtu_source: String,
    sockets: Vec<UdpSocket>,
    /// quinn-udp's per-socket state: GSO support and segment limits.
    gso: Vec<quinn_udp::UdpSocketState>,
    peers: Vec<Option<SocketAddr>>,
    names: Vec<String>,
    /// The status JSON the control thread serves, refreshed by the loop.
    snapshot: Arc<Mutex<String>>,
    /// The metrics text the metrics thread serves, if there is a metrics endpoint.
    metrics_text: Option<Arc<Mutex<String>>>,
    next_publish: Instant,
    clock: std::time::Instant,
    tun_rx: u64,
    tun_rx_errors: u64,
    tun_tx: u64,
    tun_tx_errors: u64,
    send_errors: u64,
    tun_readable: bool,
    /// Receive buffer for (possibly GRO-coalesced) datagrams.
    rx: Vec<u8>,
    out: Vec<u8>,
}

pub(crate) fn wall_ns() -> u64 {
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
        let (mtu, mtu_source) = match (cfg.role, cfg.mtu, cfg.mtu_configured) {
            (_, Some(m), true) => (m, "configured (interface.mtu)".to_owned()),
            (Role::Initiator, Some(m), false) => (
                m,
                "derived: the smallest path MTU minus braid's overhead".to_owned(),
            ),
            _ => (1428, "1428 until the client's handshake sets it".to_owned()),
        };
        let tun = net::open_tun(&cfg, mtu)?;
        let (sockets, peers, names) = net::open_sockets(&cfg)?;
        let gso = sockets
            .iter()
            .map(|s| quinn_udp::UdpSocketState::new(quinn_udp::UdpSockRef::from(s)))
            .collect::<io::Result<Vec<_>>>()?;
        if let Some(dir) = cfg.control_socket.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(&cfg.control_socket);
        let control = std::os::unix::net::UnixListener::bind(&cfg.control_socket).map_err(|e| {
            DaemonError::Control {
                path: cfg.control_socket.display().to_string(),
                err: e,
            }
        })?;
        let metrics = match cfg.prometheus {
            Some(addr) => Some(TcpListener::bind(addr).map_err(|e| DaemonError::Socket {
                what: format!("the Prometheus endpoint {addr}"),
                err: e,
                hint: "",
            })?),
            None => None,
        };
        let snapshot = Arc::new(Mutex::new(String::from("{}")));
        control::serve(control, snapshot.clone());
        let metrics_text = metrics.map(|l| {
            let text = Arc::new(Mutex::new(String::new()));
            metrics::serve(l, text.clone());
            text
        });
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| DaemonError::Io(io::Error::other(e.to_string())))?;
        let mut scfg = SessionConfig::new(
            cfg.role,
            cfg.private_key.clone(),
            cfg.peer_public_key,
            cfg.bond.clone(),
        );
        scfg.probe_interval = cfg.probe_interval;
        scfg.qos = cfg.qos.clone();
        scfg.duplicate_dscp = cfg.duplicate_dscp;
        scfg.release_pacing_pct = cfg.release_pacing_pct;
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
            gso,
            peers,
            names,
            snapshot,
            metrics_text,
            next_publish: Instant::ZERO,
            clock,
            tun_rx: 0,
            tun_rx_errors: 0,
            tun_tx: 0,
            tun_tx_errors: 0,
            send_errors: 0,
            tun_readable: true,
            rx: vec![0u8; RX_BUFFERS * RX_BUFFER_BYTES],
            out: vec![0u8; (MAX_BATCH + 1) * DATAGRAM_ROOM],
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
            let timeout = if self.tun_readable
                && self.tun.pending().is_none()
                && self.session.is_established()
            {
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
                    Token(t) if t >= UDP_BASE => self.read_udp(t - UDP_BASE),
                    _ => {}
                }
            }
            let now = self.now();
            self.session.handle_timeout(now);
            self.adopt_mtu();
            self.read_tun();
            self.flush();
            if now >= self.next_publish {
                self.next_publish = now + braid_proto::time::Duration::from_millis(100);
                self.publish();
            }
        }
        Ok(())
    }

    /// A server learns the client's `max_packet` in the handshake: match the TUN MTU to it, so
    /// the kernel never hands the bond a packet it must refuse.
    fn adopt_mtu(&mut self) {
        if self.cfg.role != Role::Responder {
            return;
        }
        let Some(max) = self.session.params().map(|p| p.max_packet) else {
            return;
        };
        let Ok(max) = u16::try_from(max) else {
            return;
        };
        if max != self.mtu {
            let ok = std::process::Command::new("ip")
                .args([
                    "link",
                    "set",
                    "dev",
                    &self.cfg.ifname,
                    "mtu",
                    &max.to_string(),
                ])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                self.mtu = max;
                self.tun.set_mtu(max);
                self.mtu_source = "the client's, from the handshake".to_owned();
            }
        }
    }

    /// Refresh what the control and metrics threads serve.
    fn publish(&mut self) {
        let st = self.status();
        if let Ok(json) = serde_json::to_string(&st) {
            if let Ok(mut s) = self.snapshot.lock() {
                *s = json;
            }
        }
        if let Some(m) = &self.metrics_text {
            let text = metrics::render(&st);
            if let Ok(mut m) = m.lock() {
                *m = text;
            }
        }
    }

    /// Read from the TUN while the bond can take packets. A packet the bond cannot take yet
    /// stays pending in the read batch with the rest of its batch behind it, and reading stops
    /// until it goes, so backpressure reaches the sender through the kernel's TUN queue.
    fn read_tun(&mut self) {
        let now = self.now();
        if !self.session.is_established() {
            // Nowhere to send: drain so the kernel queue holds nothing stale (counted as dropped).
            for _ in 0..MAX_TUN_READS {
                while let Some(p) = self.tun.pending() {
                    let _ = self.session.send(now, p);
                    self.tun.advance();
                }
                match self.tun.read() {
                    Ok(n) => self.tun_rx += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => self.tun_rx_errors += 1,
                }
            }
            self.tun_readable = false;
            return;
        }
        for _ in 0..MAX_TUN_READS {
            while let Some(len) = self.tun.pending().map(<[u8]>::len) {
                // Larger than the bond carries: send drops it (and counts it).
                if !self.session.can_send(len) && len <= usize::from(self.mtu) {
                    self.flush();
                    if !self.session.can_send(len) {
                        return;
                    }
                }
                if let Some(p) = self.tun.pending() {
                    self.session.send(now, p);
                }
                self.tun.advance();
            }
            if !self.tun_readable {
                return;
            }
            match self.tun.read() {
                Ok(n) => self.tun_rx += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tun_readable = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A super-packet that would not split: dropped, counted, read on.
                Err(_) => self.tun_rx_errors += 1,
            }
        }
    }

    fn read_udp(&mut self, i: usize) {
        loop {
            let (Some(sock), Some(state)) = (self.sockets.get(i), self.gso.get(i)) else {
                return;
            };
            // One call fills up to RX_BUFFERS buffers, each with one datagram or several
            // coalesced by GRO, `stride` bytes apart.
            let mut meta = [quinn_udp::RecvMeta::default(); RX_BUFFERS];
            let got = {
                let mut chunks = self.rx.chunks_mut(RX_BUFFER_BYTES).map(io::IoSliceMut::new);
                let mut bufs: [io::IoSliceMut<'_>; RX_BUFFERS] =
                    std::array::from_fn(|_| chunks.next().expect("RX_BUFFERS chunks"));
                state.recv(quinn_udp::UdpSockRef::from(sock), &mut bufs, &mut meta)
            };
            let got = match got {
                Ok(n) if n > 0 => n.min(RX_BUFFERS),
                _ => return,
            };
            let arrived_on = (self.cfg.role == Role::Initiator).then_some(PathId(i as u8));
            // The datagrams of one receive arrived together: one clock reading for all.
            let now = self.now();
            for (k, m) in meta[..got].iter().enumerate() {
                let stride = if m.stride == 0 { m.len } else { m.stride };
                let base = k * RX_BUFFER_BYTES;
                let mut at = 0;
                while at < m.len.min(RX_BUFFER_BYTES) {
                    let end = (at + stride).min(m.len).min(RX_BUFFER_BYTES);
                    let datagram = &self.rx[base + at..base + end];
                    if let Ok(path) = self.session.handle_datagram(now, arrived_on, datagram) {
                        if self.cfg.role == Role::Responder {
                            let p = path.index();
                            if self.peers.len() <= p {
                                self.peers.resize(p + 1, None);
                            }
                            // Authenticated: learn (or follow) the client's address for this
                            // path.
                            self.peers[p] = Some(m.addr);
                        }
                    }
                    at = end;
                }
            }
            self.deliver();
        }
    }

    /// Queue what the session delivers for the TUN, writing whenever a batch is full.
    fn deliver(&mut self) {
        let now = self.now();
        while let Some(p) = self.session.poll_deliver(now) {
            if self.tun.queue_full() {
                self.write_tun();
            }
            if let Some(b) = self.tun.queue() {
                b.extend_from_slice(&p);
            }
            self.session.recycle(p);
        }
    }

    fn write_tun(&mut self) {
        let w = self.tun.write();
        self.tun_tx += w.packets;
        self.tun_tx_errors += w.failed;
    }

    fn flush(&mut self) {
        self.deliver();
        self.write_tun();
        let now = self.now();
        for p in 0..self.session.paths() {
            let path = PathId(p as u8);
            let (sock_index, peer) = match self.cfg.role {
                Role::Initiator => (p, self.peers.get(p).copied().flatten()),
                Role::Responder => (0, self.peers.get(p).copied().flatten()),
            };
            // Batch the path's datagrams for one GSO send: all segments the size of the first,
            // except a shorter last one (the kernel's rule for UDP_SEGMENT).
            let max_segments = self
                .gso
                .get(sock_index)
                .map_or(1, |g| g.max_gso_segments())
                .clamp(1, MAX_BATCH);
            let mut used = 0usize;
            let mut segment = 0usize;
            let mut count = 0usize;
            loop {
                let room = &mut self.out[used..used + DATAGRAM_ROOM];
                let Some(n) = self.session.poll_transmit(now, path, room) else {
                    break;
                };
                if count > 0 && n > segment {
                    // Larger than the batch's segments: send the batch, start anew with it.
                    self.send_batch(sock_index, peer, used, segment, count);
                    self.out.copy_within(used..used + n, 0);
                    used = 0;
                    count = 0;
                }
                if count == 0 {
                    segment = n;
                }
                used += n;
                count += 1;
                if n < segment || count >= max_segments || used + segment > MAX_BATCH_BYTES {
                    self.send_batch(sock_index, peer, used, segment, count);
                    used = 0;
                    count = 0;
                }
            }
            if count > 0 {
                self.send_batch(sock_index, peer, used, segment, count);
            }
        }
    }

    /// Send `out[..len]`, `count` datagrams of `segment` bytes (the last may be shorter).
    fn send_batch(
        &mut self,
        sock_index: usize,
        peer: Option<SocketAddr>,
        len: usize,
        segment: usize,
        count: usize,
    ) {
        let (Some(sock), Some(state), Some(addr)) =
            (self.sockets.get(sock_index), self.gso.get(sock_index), peer)
        else {
            self.send_errors += count as u64;
            return;
        };
        let transmit = quinn_udp::Transmit {
            destination: addr,
            ecn: None,
            contents: &self.out[..len],
            segment_size: (count > 1).then_some(segment),
            src_ip: None,
        };
        if state
            .try_send(quinn_udp::UdpSockRef::from(sock), &transmit)
            .is_err()
        {
            self.send_errors += count as u64;
        }
    }

    fn status(&self) -> Status {
        let cpu = net::cpu_time_s();
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
            tun_offload: self.tun.offload(),
            tun_rx_packets: self.tun_rx,
            tun_rx_errors: self.tun_rx_errors,
            tun_tx_packets: self.tun_tx,
            tun_tx_errors: self.tun_tx_errors,
            udp_send_errors: self.send_errors,
            uptime_s: self.clock.elapsed().as_secs_f64(),
            cpu_user_s: cpu.0,
            cpu_system_s: cpu.1,
        }
    }
}

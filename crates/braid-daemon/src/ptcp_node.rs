//! pTCP over the secure session: the I/O around [`braid_ptcp::StripedConnection`]s that ride a
//! [`braid_session::Session`] (the uses of issue 6: `braid send`/`braid recv`, the lab's
//! `ptcp` variant).
//!
//! A [`PtcpNode`] owns what the sans-IO cores never touch: the UDP sockets of the daemon's
//! config (client: one per `[[path]]`; server: the `listen` socket), the clock and a `mio`
//! poll. It runs the session (Noise IK handshake, per-path AEAD with replay windows, probes,
//! liveness, the server's learning of each path's address) and any number of pTCP connections,
//! told apart by a connection id. Each micro-flow's segments are sealed by the session for the
//! path the flow belongs to ([`Session::seal_ptcp`]) and go out on that path's socket: the
//! striper and the resequencer of the tunnel are bypassed, since a micro-flow *is* its path's
//! transport (pTCP paper section 2, "Decoupling of Functionalities"). No TUN device is needed.
//!
//! # Polling
//! The application calls [`PtcpNode::turn`] in a loop: it waits for a datagram or the next
//! timer, feeds the session and the connections, and sends what they have. Between turns the
//! application reads from and writes to its connections ([`PtcpNode::conn_mut`]); the next
//! turn sends what that made ready (or call [`PtcpNode::flush`] at once).

use crate::config::Config;
use crate::{net, random_seed, wall_ns, DaemonError};
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::wire::{Flags, Segment};
use braid_ptcp::{CongestionAlgorithm, StripedConnection};
use braid_session::{Role, Session, SessionStatus};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::Duration as StdDuration;

/// Connections a node holds at most; SYNs for more are dropped and counted.
pub const MAX_CONNECTIONS: usize = 256;

/// Ids of removed connections a server remembers, so that a late duplicate SYN of one does not
/// open it again.
const RETIRED_IDS: usize = 4096;

/// SACK blocks a data segment carries at most: none. ACK-only segments carry up to four, and a
/// data segment that leaves blocks out is followed by a pure ACK with them
/// (`braid_ptcp::Config::sack_blocks_with_data`). (Blocks that do ride with data take room from
/// the data, not from the MTU, so the MSS below holds either way.)
pub const SACK_BLOCKS_WITH_DATA: usize = 0;

/// Bytes a pTCP segment's payload gives up to headers on a path of a given MTU: outer IP and
/// UDP, the session's transport header, tag and inner pTCP header, and the 12-byte header of a
/// pTCP data segment (`braid_ptcp::wire::DATA_HEADER_LEN`; a data segment that acknowledges too
/// is bound less data): 80 bytes over IPv4, 100 over IPv6.
pub fn ptcp_overhead(ipv6: bool) -> usize {
    let ip = if ipv6 { 40 } else { 20 };
    ip + 8 + Session::PTCP_OVERHEAD + braid_ptcp::wire::DATA_HEADER_LEN
}

/// How a node runs its connections.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// Congestion control of every micro-flow (pTCP paper section 3.2: TCP-v's alone).
    pub congestion: CongestionAlgorithm,
    /// Receive buffer of each connection, bytes; `None`: from the paths (see
    /// [`PtcpNode::connection_config`]).
    pub receive_buffer_bytes: Option<u64>,
    /// Client: send every path's datagrams to this address instead of the path's `remote`.
    pub remote_override: Option<SocketAddr>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            congestion: CongestionAlgorithm::Bbr,
            receive_buffer_bytes: None,
            remote_override: None,
        }
    }
}

/// Counters of a node beyond the session's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Datagrams the kernel would not take (a full socket buffer): dropped, pTCP resends.
    pub send_errors: u64,
    /// Segments for a path whose peer address is not known yet (server), dropped.
    pub no_peer: u64,
    /// Segments for a connection this node does not have (and that were no SYN it could
    /// accept), dropped.
    pub unknown_conn: u64,
}

/// pTCP connections over one session. See the module docs.
pub struct PtcpNode {
    role: Role,
    session: Session,
    sockets: Vec<Option<UdpSocket>>,
    peers: Vec<Option<SocketAddr>>,
    names: Vec<String>,
    poll: Poll,
    events: Events,
    clock: std::time::Instant,
    options: NodeOptions,
    /// The MSS of every micro-flow, from the paths' MTUs.
    mss: u64,
    conns: BTreeMap<u32, StripedConnection>,
    accepted: VecDeque<u32>,
    /// Recently removed connection ids (at most [`RETIRED_IDS`]).
    retired: VecDeque<u32>,
    next_conn: u32,
    stats: NodeStats,
    rx: Vec<u8>,
    out: Vec<u8>,
}

const UDP_BASE: usize = 1;

/// The application's sockets registered with [`PtcpNode::registry`] use tokens from here on.
pub const APP_TOKEN_BASE: usize = 1 << 16;

impl PtcpNode {
    /// Opens the config's UDP sockets and starts the session (the client's first handshake
    /// goes out at the first [`PtcpNode::turn`]).
    pub fn new(cfg: &Config, options: NodeOptions) -> Result<PtcpNode, DaemonError> {
        let (mut sockets, mut peers, names) = net::open_sockets(cfg)?;
        if let Some(to) = options.remote_override {
            peers.fill(Some(to));
        }
        let poll = Poll::new()?;
        for (i, s) in sockets.iter_mut().enumerate() {
            if let Some(s) = s {
                poll.registry()
                    .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
            }
        }
        // One session: the client's server, or a server's one client.
        let [peer] = cfg.peers.as_slice() else {
            return Err(DaemonError::Io(io::Error::other(
                "this config has several [[client]] tables: braid recv and braid forward serve one client; use a config with peer_public_key",
            )));
        };
        let scfg = cfg.session_config(peer);
        let mut session = Session::new(scfg, Instant::ZERO, random_seed()?, wall_ns());
        // A path whose interface or address is not there stays out of use.
        for (i, s) in sockets.iter().enumerate() {
            if s.is_none() {
                session.set_path_enabled(Instant::ZERO, braid_proto::PathId(i as u8), false);
            }
        }
        let ipv6 =
            cfg.paths.iter().any(|p| p.remote.is_ipv6()) || cfg.listen.is_some_and(|l| l.is_ipv6());
        let mtu = cfg.paths.iter().map(|p| p.mtu).min().unwrap_or(1500);
        let mss = usize::from(mtu)
            .saturating_sub(ptcp_overhead(ipv6))
            .max(256) as u64;
        Ok(PtcpNode {
            role: cfg.role,
            session,
            sockets,
            peers,
            names,
            poll,
            events: Events::with_capacity(256),
            clock: std::time::Instant::now(),
            options,
            mss,
            conns: BTreeMap::new(),
            accepted: VecDeque::new(),
            retired: VecDeque::new(),
            next_conn: 1,
            stats: NodeStats::default(),
            rx: vec![0u8; 65_536],
            out: vec![0u8; 65_536],
        })
    }

    /// The node's clock (time since it started).
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    /// Whether the session has keys.
    pub fn is_established(&self) -> bool {
        self.session.is_established()
    }

    /// Number of paths (a server knows them once the client's handshake arrived).
    pub fn paths(&self) -> usize {
        self.session.paths()
    }

    /// Path names (client: from the config; server: `path<i>`).
    pub fn path_name(&self, i: usize) -> String {
        self.names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("path{i}"))
    }

    /// The session's status (per-path RTT, rates, bytes, drops, pTCP counters).
    pub fn status(&self) -> SessionStatus {
        self.session.status()
    }

    /// Counters of the node's own drops.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// The pTCP config of a new connection: every flow's congestion control and MSS, and the
    /// buffers. The receive buffer follows the paper's rule (section 2: the sum of the paths'
    /// rates times the largest RTT), fed the configured rates and four times the largest RTT
    /// the probes measured (at least 250 ms): a flow that fills a drop-tail queue of one
    /// bandwidth-delay product doubles its RTT, the rule needs the RTT under load (`docs/ptcp.md`,
    /// Figure 4), and twice that keeps the window open while a hole on the slowest path is
    /// repaired. With twice the probed RTT the BAG scenario (2 Mbit/s at 250 ms beside 8 at
    /// 10 ms) was window-limited: 8.27 Mbit/s and 17,585 packets resent, against 12.18 with
    /// 4 MiB (`docs/benchmarks.md`). At least 2 MiB, at most 64 MiB.
    pub fn connection_config(&self) -> braid_ptcp::Config {
        let mut c = braid_ptcp::Config::default();
        c.flow.congestion.algorithm = self.options.congestion;
        c.flow.congestion.mss = self.mss;
        c.sack_blocks_with_data = SACK_BLOCKS_WITH_DATA;
        let rates: Vec<u64> = self
            .session
            .params()
            .map(|p| p.rates_bps.clone())
            .unwrap_or_default();
        let rtt_max = self
            .session
            .status()
            .paths
            .iter()
            .filter_map(|p| p.rtt_ms)
            .fold(0.0f64, f64::max);
        let loaded = Duration::from_nanos((rtt_max * 4e6) as u64).max(Duration::from_millis(250));
        let paths: Vec<(u64, Duration)> = rates.iter().map(|&r| (r, loaded)).collect();
        let rule = braid_ptcp::Config::receive_buffer_for(&paths);
        c.receive_buffer_bytes = self
            .options
            .receive_buffer_bytes
            .unwrap_or(rule.clamp(2 << 20, 64 << 20));
        c.send_buffer_bytes = c.receive_buffer_bytes.max(4 << 20);
        c
    }

    /// Client: opens a pTCP connection with one micro-flow on each path of the session and
    /// returns its id. `None` before the session has its paths.
    pub fn connect(&mut self) -> Option<u32> {
        let n = self.session.paths();
        if n == 0 || self.role != Role::Initiator {
            return None;
        }
        let paths: Vec<PathId> = (0..n.min(braid_ptcp::MAX_FLOWS))
            .map(|i| PathId(i as u8))
            .collect();
        let id = self.next_conn;
        self.next_conn = self.next_conn.wrapping_add(1).max(1);
        let conn = StripedConnection::connect(self.connection_config(), self.now(), &paths);
        self.conns.insert(id, conn);
        Some(id)
    }

    /// Server: the next connection a client opened, if any.
    pub fn accept(&mut self) -> Option<u32> {
        self.accepted.pop_front()
    }

    /// A connection.
    pub fn conn(&self, id: u32) -> Option<&StripedConnection> {
        self.conns.get(&id)
    }

    /// A connection, to read, write or close.
    pub fn conn_mut(&mut self, id: u32) -> Option<&mut StripedConnection> {
        self.conns.get_mut(&id)
    }

    /// The ids of the connections the node holds.
    pub fn conn_ids(&self) -> Vec<u32> {
        self.conns.keys().copied().collect()
    }

    /// Forget a connection (closed, or given up on).
    pub fn remove(&mut self, id: u32) -> Option<StripedConnection> {
        let c = self.conns.remove(&id);
        if c.is_some() {
            if self.retired.len() >= RETIRED_IDS {
                self.retired.pop_front();
            }
            self.retired.push_back(id);
        }
        c
    }

    /// The node's `mio` registry, for the application's own sockets: register them with
    /// tokens from [`APP_TOKEN_BASE`] on, and [`PtcpNode::turn`] wakes for them too.
    pub fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// Waits up to `max_wait` for a datagram, a timer or an event of the application's
    /// sockets, handles the node's, sends what the session and the connections have, and
    /// returns the application's tokens that had events.
    pub fn turn(&mut self, max_wait: StdDuration) -> io::Result<Vec<Token>> {
        self.flush();
        let now = self.now();
        let next = self
            .conns
            .values()
            .filter_map(StripedConnection::poll_timeout)
            .chain(self.session.poll_timeout())
            .min();
        let wait = next.map_or(max_wait, |t| {
            StdDuration::from_nanos(t.saturating_duration_since(now).as_nanos() as u64)
                .min(max_wait)
        });
        match self.poll.poll(&mut self.events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let ready: Vec<usize> = self
            .events
            .iter()
            .filter(|e| e.token().0 < APP_TOKEN_BASE)
            .filter_map(|e| e.token().0.checked_sub(UDP_BASE))
            .collect();
        let app: Vec<Token> = self
            .events
            .iter()
            .map(|e| e.token())
            .filter(|t| t.0 >= APP_TOKEN_BASE)
            .collect();
        for i in ready {
            self.read_socket(i);
        }
        let now = self.now();
        self.session.handle_timeout(now);
        for c in self.conns.values_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        self.flush();
        Ok(app)
    }

    fn read_socket(&mut self, i: usize) {
        loop {
            let Some(Some(sock)) = self.sockets.get(i) else {
                return;
            };
            let (n, from) = match sock.recv_from(&mut self.rx) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let now = self.now();
            let arrived_on = (self.role == Role::Initiator).then_some(PathId(i as u8));
            let Ok(path) = self.session.handle_datagram(now, arrived_on, &self.rx[..n]) else {
                continue;
            };
            if self.role == Role::Responder {
                let p = path.index();
                if self.peers.len() <= p {
                    self.peers.resize(p + 1, None);
                }
                // Authenticated: learn (or follow) the client's address for this path.
                self.peers[p] = Some(from);
            }
            self.deliver(now);
        }
    }

    /// Hands the session's pTCP segments to their connections; a server opens a connection
    /// for a SYN naming a new id.
    fn deliver(&mut self, now: Instant) {
        while let Some(seg) = self.session.poll_ptcp() {
            if !self.conns.contains_key(&seg.conn) {
                let syn = Segment::parse_bytes(&seg.segment)
                    .is_ok_and(|s| s.flags.contains(Flags::SYN) && !s.flags.contains(Flags::ACK));
                let refused = self.role != Role::Responder
                    || !syn
                    || self.conns.len() >= MAX_CONNECTIONS
                    || self.retired.contains(&seg.conn);
                if refused {
                    self.stats.unknown_conn += 1;
                    continue;
                }
                let c = StripedConnection::accept(self.connection_config());
                self.conns.insert(seg.conn, c);
                self.accepted.push_back(seg.conn);
            }
            if let Some(c) = self.conns.get_mut(&seg.conn) {
                c.handle_datagram(now, seg.path, &seg.segment);
            }
        }
    }

    /// Sends everything the connections and the session have now.
    pub fn flush(&mut self) {
        let now = self.now();
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            while let Some((path, seg)) = self.conns.get_mut(&id).and_then(|c| c.poll_transmit(now))
            {
                let mut out = std::mem::take(&mut self.out);
                if let Some(n) = self.session.seal_ptcp(now, path, id, &seg, &mut out) {
                    self.send(path.index(), &out[..n]);
                }
                self.out = out;
            }
        }
        for p in 0..self.session.paths() {
            let mut out = std::mem::take(&mut self.out);
            while let Some(n) = self.session.poll_transmit(now, PathId(p as u8), &mut out) {
                self.send(p, &out[..n]);
            }
            self.out = out;
        }
    }

    fn send(&mut self, path: usize, datagram: &[u8]) {
        let (sock, peer) = match self.role {
            Role::Initiator => (
                self.sockets.get(path).and_then(Option::as_ref),
                self.peers.get(path).copied().flatten(),
            ),
            Role::Responder => (
                self.sockets.first().and_then(Option::as_ref),
                self.peers.get(path).copied().flatten(),
            ),
        };
        let (Some(sock), Some(peer)) = (sock, peer) else {
            self.stats.no_peer += 1;
            return;
        };
        if sock.send_to(datagram, peer).is_err() {
            self.stats.send_errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mss_on_a_1500_byte_path() {
        // 20 + 8 + 16 (session header) + 16 (tag) + 8 (kind 9) + 12 (pTCP data header).
        assert_eq!(1500 - ptcp_overhead(false), 1420);
        assert_eq!(1500 - ptcp_overhead(true), 1400);
        // A data segment of that MSS fills the MTU exactly.
        let seg = Segment {
            payload: &[0; 1420],
            ..Segment::new(braid_ptcp::FlowId(0), Flags::VPKT)
        };
        assert_eq!(20 + 8 + Session::PTCP_OVERHEAD + seg.buffer_len(), 1500);
    }
}

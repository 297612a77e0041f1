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

use crate::clock_floor::ClockFloor;
use crate::config::{Config, PathConfig};
use crate::gso;
use crate::ptcp_table::{mss_of, PtcpTable, TableOptions};
use crate::resolver::Resolver;
use crate::{net, random_id, random_seed, DaemonError, Warnings};
use braid_proto::time::Instant;
use braid_proto::PathId;
use braid_ptcp::{CongestionAlgorithm, StripedConnection};
use braid_session::cookie::{CookieGuard, Verdict};
use braid_session::{Role, Session, SessionStatus};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::net::SocketAddr;
use std::time::Duration as StdDuration;

pub use crate::ptcp_table::{ptcp_overhead, MAX_CONNECTIONS, SACK_BLOCKS_WITH_DATA};

/// How a node runs its connections.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// Congestion control of every micro-flow (pTCP paper section 3.2: TCP-v's alone).
    pub congestion: CongestionAlgorithm,
    /// Receive buffer of each connection, bytes; `None`: from the paths (see
    /// [`PtcpNode::connection_config`]).
    pub receive_buffer_bytes: Option<u64>,
    /// Client: send every path's datagrams to this address instead of the path's `remote`
    /// (whose host name, if it has one, is then not resolved again).
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
    /// Server: the handshake guard, as in `braid up` (`braid_session::cookie`).
    guard: Option<CookieGuard>,
    sockets: Vec<Option<UdpSocket>>,
    /// Each socket's GSO state: a path's datagrams go out in one `sendmsg` per batch.
    gso: Vec<Option<quinn_udp::UdpSocketState>>,
    /// Datagrams waiting for their path's GSO send.
    batches: gso::PathBatches,
    peers: Vec<Option<SocketAddr>>,
    names: Vec<String>,
    poll: Poll,
    events: Events,
    clock: std::time::Instant,
    table: PtcpTable,
    stats: NodeStats,
    rx: Vec<u8>,
    out: Vec<u8>,
    /// Client: the config's paths, for the resolver.
    path_configs: Vec<PathConfig>,
    /// Client: the paths' host names, resolved again while the node runs, as `braid up`
    /// does ([`crate::resolver`]).
    resolver: Option<Resolver>,
    /// Client: the handshake clock floor it shares with `braid up` of the same key
    /// ([`crate::clock_floor`]).
    clock_floor: Option<ClockFloor>,
    warnings: Warnings,
    /// `braid status` and `braid path` on the config's control socket, if served
    /// ([`PtcpNode::serve_control`]).
    control: Option<Control>,
    /// The peer's public key, for the status.
    public_key: String,
    /// When the node started.
    started: std::time::Instant,
}

/// The control socket of a node: the status the thread serves, refreshed every
/// [`STATUS_EVERY`], and the path commands it queues.
struct Control {
    socket: std::path::PathBuf,
    /// The socket file's device and inode once bound: removed at the end only if it is still
    /// this one (a `braid up` started since may have replaced it with its own).
    identity: Option<(u64, u64)>,
    /// Client: paths taken down with `braid path down`.
    admin_down: Vec<bool>,
    board: std::sync::Arc<crate::control::Board>,
    commands: std::sync::mpsc::Receiver<crate::control::Command>,
    published: Option<Instant>,
}

/// How often a node refreshes the status its control socket serves.
const STATUS_EVERY: braid_proto::time::Duration = braid_proto::time::Duration::from_millis(100);

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
        // A client starts its handshake clock at or above every timestamp it sent before.
        let (clock_floor, wall) = ClockFloor::for_config(cfg);
        let mut session = Session::new(scfg, Instant::ZERO, random_seed()?, wall);
        // A path whose interface or address is not there stays out of use.
        for (i, s) in sockets.iter().enumerate() {
            if s.is_none() {
                session.set_path_enabled(Instant::ZERO, braid_proto::PathId(i as u8), false);
            }
        }
        let table = PtcpTable::new(
            cfg.role,
            TableOptions {
                congestion: options.congestion,
                receive_buffer_bytes: options.receive_buffer_bytes,
                mss: mss_of(cfg),
                accept: true,
                // A larger buffer asked for on the command line raises it.
                memory_budget: crate::ptcp_table::memory_budget_of(cfg)
                    .max(options.receive_buffer_bytes.unwrap_or(0)),
            },
        )
        .with_first_id(random_id()?);
        let guard = crate::handshake_guard(cfg)?;
        let mut node = PtcpNode {
            role: cfg.role,
            session,
            guard,
            gso: {
                let states = gso::states(&sockets)?;
                // The node reads one datagram per call: no receive coalescing.
                for s in sockets.iter().flatten() {
                    gso::disable_gro(s)?;
                }
                states
            },
            batches: gso::PathBatches::default(),
            sockets,
            peers,
            names,
            poll,
            events: Events::with_capacity(256),
            clock: std::time::Instant::now(),
            table,
            stats: NodeStats::default(),
            rx: vec![0u8; 65_536],
            out: vec![0u8; 65_536],
            path_configs: cfg.paths.clone(),
            resolver: options
                .remote_override
                .is_none()
                .then(|| Resolver::start(cfg))
                .flatten(),
            clock_floor,
            warnings: Warnings::default(),
            control: None,
            public_key: peer.public_key.to_base64(),
            started: std::time::Instant::now(),
        };
        // The floor's first reservation, before any handshake can leave.
        node.client_chores(Instant::ZERO);
        Ok(node)
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

    /// Path names (client: from the config; server: the ones the client sent in its handshake,
    /// else `path<i>`).
    pub fn path_name(&self, i: usize) -> String {
        crate::path_name(self.role, &self.names, &self.session, i)
    }

    /// The session's status (per-path RTT, rates, bytes, drops, pTCP counters).
    pub fn status(&self) -> SessionStatus {
        self.session.status()
    }

    /// Counters of the node's own drops.
    pub fn stats(&self) -> NodeStats {
        NodeStats {
            unknown_conn: self.table.unknown_conn(),
            ..self.stats
        }
    }

    /// The pTCP config of a new connection ([`PtcpTable::connection_config`]).
    pub fn connection_config(&self) -> braid_ptcp::Config {
        self.table.connection_config(&self.session)
    }

    /// Client: opens a pTCP connection with one micro-flow on each path of the session and
    /// returns its id. `None` before the session has its paths.
    pub fn connect(&mut self) -> Option<u16> {
        let now = self.now();
        self.table.connect(&self.session, now)
    }

    /// Server: the next connection a client opened, if any.
    pub fn accept(&mut self) -> Option<u16> {
        self.table.accept()
    }

    /// A connection.
    pub fn conn(&self, id: u16) -> Option<&StripedConnection> {
        self.table.conn(id)
    }

    /// A connection, to read, write or close.
    pub fn conn_mut(&mut self, id: u16) -> Option<&mut StripedConnection> {
        self.table.conn_mut(id)
    }

    /// The ids of the connections the node holds.
    pub fn conn_ids(&self) -> Vec<u16> {
        self.table.conn_ids()
    }

    /// Forget a connection (closed, or given up on).
    pub fn remove(&mut self, id: u16) -> Option<StripedConnection> {
        self.table.remove(id)
    }

    /// Forget a connection once the next flush sent what it has left (the ACK of the peer's
    /// FIN that closed it): [`PtcpTable::remove_after_transmit`].
    pub fn remove_after_transmit(&mut self, id: u16) {
        self.table.remove_after_transmit(id)
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
            .table
            .poll_timeout()
            .into_iter()
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
        self.table.handle_timeout(now);
        self.client_chores(now);
        self.control_chores(now);
        self.flush();
        Ok(app)
    }

    /// Serve `braid status` and `braid path up|down` on `socket` (the config's control
    /// socket), as `braid up` does, from a thread; the node refreshes the status every
    /// 100 ms of its turns. Refused if another braid answers on that socket already (a
    /// `braid up` of another config with the same one), which is left alone.
    pub fn serve_control(&mut self, socket: &std::path::Path) -> io::Result<()> {
        let listener = crate::control::bind_private_if_free(socket)?;
        let (tx, commands) = std::sync::mpsc::sync_channel(crate::COMMAND_QUEUE);
        let names = if self.role == Role::Initiator {
            self.names.clone()
        } else {
            Vec::new()
        };
        // Token 0 is no socket's (they start at UDP_BASE): a path command wakes the node.
        let waker = std::sync::Arc::new(mio::Waker::new(self.poll.registry(), Token(0))?);
        let board = crate::control::Board::new(waker);
        crate::control::serve(listener, board.clone(), tx, names);
        self.control = Some(Control {
            socket: socket.to_path_buf(),
            identity: socket_identity(socket),
            admin_down: vec![false; self.names.len()],
            board,
            commands,
            published: None,
        });
        self.publish(self.now(), 0);
        Ok(())
    }

    /// What `braid status` shows of a node: the daemon's status without a TUN device
    /// (`program` names the command), one peer with its paths and session, and the pTCP
    /// connections.
    pub fn status_json(&self) -> serde_json::Value {
        let session = self.session.status();
        let paths: Vec<crate::PathInfo> = (0..session.paths.len())
            .map(|i| {
                crate::PathInfo::new(
                    self.path_name(i),
                    self.peers.get(i).copied().flatten(),
                    self.path_configs.get(i),
                    self.control
                        .as_ref()
                        .is_some_and(|c| c.admin_down.get(i) == Some(&true)),
                    self.sockets
                        .get(i)
                        .is_some_and(Option::is_none)
                        .then(|| "its interface or local address is not here".to_owned()),
                )
            })
            .collect();
        let committed = self.table.committed_bytes();
        let peer = crate::PeerStatus {
            name: if self.role == Role::Initiator {
                "server".into()
            } else {
                "client".into()
            },
            public_key: self.public_key.clone(),
            addresses: Vec::new(),
            routes: Vec::new(),
            paths,
            session,
            spoofed_packets: 0,
            link_local_packets: 0,
            ptcp_connections: self.table.conn_ids().len(),
            ptcp_unknown_conn: self.table.unknown_conn(),
            ptcp_unacked_bytes: committed.0,
            ptcp_window_bytes: committed.1,
        };
        let stats = self.stats();
        serde_json::json!({
            "program": "pTCP node (braid forward: no TUN device)",
            "role": self.role,
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "peers": [peer],
            "node": {
                "send_errors": stats.send_errors,
                "no_peer": stats.no_peer,
                "unknown_conn": stats.unknown_conn,
            },
        })
    }

    /// Control socket: apply the path commands queued, and refresh the status when due.
    fn control_chores(&mut self, now: Instant) {
        let Some(c) = &mut self.control else {
            return;
        };
        let commands: Vec<_> = c.commands.try_iter().collect();
        // A command shows in the status at once.
        let asked = c.board.take_wanted();
        let due = !commands.is_empty()
            || asked.is_some()
            || c.published
                .is_none_or(|t| now.saturating_duration_since(t) >= STATUS_EVERY);
        for crate::control::Command::Path { index, enabled } in commands {
            let usable = index < self.session.paths()
                && self.sockets.get(index).is_some_and(Option::is_some);
            if !usable {
                continue;
            }
            self.session
                .set_path_enabled(now, PathId(index as u8), enabled);
            if let Some(d) = self
                .control
                .as_mut()
                .and_then(|c| c.admin_down.get_mut(index))
            {
                *d = !enabled;
            }
            crate::control::say_path_command(&self.path_name(index), enabled);
        }
        if due {
            self.publish(now, asked.unwrap_or(0));
        }
    }

    /// Makes the status for the control socket: for the readers that asked up to request
    /// `answers` (0: nobody asked).
    fn publish(&mut self, now: Instant, answers: u64) {
        let json = self.status_json().to_string();
        if let Some(c) = &mut self.control {
            c.board.publish(json, None, answers);
            c.published = Some(now);
        }
    }

    /// Client: resolve the paths' host names again when due, and renew the clock floor.
    fn client_chores(&mut self, now: Instant) {
        if let Some(r) = &mut self.resolver {
            let session = &self.session;
            r.turn(
                now,
                &self.path_configs,
                &mut self.peers,
                |i| session.path_is_up(PathId(i as u8)),
                &mut self.warnings,
            );
        }
        crate::clock_floor::renew(self.clock_floor.as_mut(), now, &mut self.warnings);
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
            if let Some(g) = &mut self.guard {
                let known = || self.peers.contains(&Some(from));
                match g.check(now, from, known, &self.rx[..n]) {
                    Verdict::Pass => {}
                    Verdict::Drop(_) => continue,
                    Verdict::Reply(reply) => {
                        let _ = sock.send_to(&reply, from);
                        continue;
                    }
                }
            }
            let arrived_on = (self.role == Role::Initiator).then_some(PathId(i as u8));
            let Ok(path) = self.session.handle_datagram(now, arrived_on, &self.rx[..n]) else {
                continue;
            };
            if self.role == Role::Initiator && self.peers.get(i).copied().flatten() != Some(from) {
                // The server answers from an address the path does not send to: if the
                // path's remote is a host name, it may have moved.
                if let Some(r) = &mut self.resolver {
                    r.stray(i, now, from);
                }
            }
            if self.role == Role::Responder {
                let p = path.index();
                if self.peers.len() <= p {
                    self.peers.resize(p + 1, None);
                }
                // Authenticated: learn (or follow) the client's address for this path.
                self.peers[p] = Some(from);
            }
            self.table.deliver(&mut self.session, now);
        }
    }

    /// This end is going away: every connection is forgotten and the peer sent a reset for
    /// each ([`PtcpTable::reset_all`]), so its side ends at once. Returns how many there were.
    pub fn reset_all(&mut self) -> usize {
        let n = self.table.reset_all(&self.session);
        if n > 0 {
            self.flush();
        }
        n
    }

    /// Sends everything the connections and the session have now: each path's datagrams in
    /// GSO batches ([`crate::gso`]), as the daemon does.
    pub fn flush(&mut self) {
        let now = self.now();
        let route = gso::Route {
            sockets: &self.sockets,
            gso: &self.gso,
            role: self.role,
            peers: &self.peers,
        };
        let (batches, stats) = (&mut self.batches, &mut self.stats);
        let mut outcome = |n: usize, sent: gso::Sent| match sent {
            Ok(()) => {}
            Err(None) => stats.no_peer += n as u64,
            // pTCP resends what it loses.
            Err(Some(_)) => stats.send_errors += n as u64,
        };
        self.table
            .transmit(&mut self.session, now, &mut self.out, |path, d| {
                batches.push(&route, path, d, &mut outcome)
            });
        for p in 0..self.session.paths() {
            let mut out = std::mem::take(&mut self.out);
            while let Some(n) = self.session.poll_transmit(now, PathId(p as u8), &mut out) {
                batches.push(&route, p, &out[..n], &mut outcome);
            }
            self.out = out;
        }
        batches.flush(&route, &mut outcome);
    }
}

impl Drop for PtcpNode {
    /// The control socket goes; a client leaves the exact clock floor, not the reservation
    /// ahead of it, so that restarts do not move its handshake clock ahead each time.
    fn drop(&mut self) {
        if let Some(c) = &self.control {
            if c.identity.is_some() && socket_identity(&c.socket) == c.identity {
                let _ = std::fs::remove_file(&c.socket);
            }
        }
        crate::clock_floor::finish(self.clock_floor.as_ref(), self.now().as_nanos());
    }
}

/// The device and inode of the file at `path`, if there is one.
fn socket_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

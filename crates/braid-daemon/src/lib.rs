//! `braid up`: the daemon at one end of a bond.
//!
//! It owns the I/O the sans-IO [`braid_session::Session`] never touches: the TUN device (the
//! stripe paper's strIPe virtual interface, section 6.1), one UDP socket per path (client) or a
//! listening socket (server), the control socket for `braid status`, an optional Prometheus
//! endpoint, and the clock. One thread runs a `mio` event loop; every event is handed to the
//! session, and whatever the session wants sent or delivered goes out before the loop sleeps
//! until the session's next timeout.

#![warn(missing_docs)]

pub mod accel;
pub mod clock_floor;
pub mod config;
pub mod control;
mod gso;
#[cfg(feature = "fuzzing")]
pub mod hostile_ptcp;
pub mod loop_timing;
mod metrics;
mod net;
mod owners;
mod turns;
pub use net::taken_by_other_device;
pub mod ptcp_node;
pub mod ptcp_table;
mod resolver;
pub mod tcp_pair;

use crate::config::{Config, PeerConfig};
use crate::ptcp_table::{PtcpTable, TableOptions};
use crate::resolver::Resolver;
pub use crate::resolver::{RESOLVE_DOWN_FIRST, RESOLVE_UP_EVERY};
use crate::tcp_pair::Pair;
use braid_proto::time::Instant;
use braid_proto::PathId;
use braid_session::cookie::{CookieGuard, Refused, Verdict};
use braid_session::{Role, Session};
use mio::net::UdpSocket;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// The TUN device's name belongs to an interface that is no TUN device.
    #[error("cannot create TUN device {name}: {why}")]
    TunNameTaken {
        /// Interface name.
        name: String,
        /// What is in the way, and what to do ([`taken_by_other_device`]).
        why: String,
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

/// Room for one datagram in the send buffer at least; more for a bond whose largest packet
/// needs it ([`datagram_room`]).
const DATAGRAM_ROOM: usize = 2048;

/// Room for one datagram of a bond whose largest packet is `max_packet` bytes: the packet,
/// braid's headers inside the UDP payload (44 bytes with sequence numbers) and a margin, at
/// least [`DATAGRAM_ROOM`]. Paths with jumbo frames (an MTU of 9000) need about 9 KB.
fn datagram_room(max_packet: usize) -> usize {
    (max_packet + 128).next_multiple_of(64).max(DATAGRAM_ROOM)
}

/// The send buffer for datagrams of `room` bytes: a GSO batch (at most
/// [`MAX_BATCH_BYTES`], or [`MAX_BATCH`] datagrams) and the one that did not fit in it.
fn send_buffer_len(room: usize) -> usize {
    (MAX_BATCH * room).min(MAX_BATCH_BYTES + room) + room
}
use gso::{MAX_BATCH, MAX_BATCH_BYTES};
/// Receive buffers per `recvmmsg`, each for one GRO-coalesced datagram of up to 64 KiB.
const RX_BUFFERS: usize = 4;
const RX_BUFFER_BYTES: usize = 65_536;
/// TUN reads (each up to [`net::TUN_BATCH`] packets) per wake-up at most.
const MAX_TUN_READS: usize = 64;

/// Control requests waiting for the event loop at most; more are refused ("busy").
const COMMAND_QUEUE: usize = 64;

const TUN: Token = Token(0);
/// Client with `[tcp] accelerate`: the listeners redirected TCP lands on (IPv4, IPv6).
const TCP_LISTENER: usize = 1;
/// The control thread wakes the loop with this when it queued a command.
const WAKE: Token = Token(8);
const UDP_BASE: usize = 16;
/// Accelerated TCP connections' sockets use tokens from here on (above any path's).
const TCP_BASE: usize = 1 << 20;
/// Accelerated TCP connections at once at most; more are closed at once (and counted).
const MAX_TCP_PAIRS: usize = 1024;

/// A server's handshake guard, for `braid status`.
#[derive(Debug, Serialize)]
pub struct GuardStatus {
    /// Whether initiations now need a cookie.
    pub under_load: bool,
    /// What it has done since start.
    #[serde(flatten)]
    pub counters: braid_session::cookie::GuardCounters,
}

/// TUN packets larger than the bond's largest packet: a TUN MTU above the client's (a server's
/// `interface.mtu`, or a proxy's clients of different MTUs). See `braid_session::pmtu`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TooBigCounters {
    /// Such packets read.
    pub packets: u64,
    /// Answered with ICMP "fragmentation needed" or ICMPv6 "packet too big".
    pub answered: u64,
    /// Not answered: over [`TOO_BIG_ANSWERS_PER_S`] a second.
    pub rate_limited: u64,
    /// IPv4 without DF, sent in fragments.
    pub fragmented: u64,
    /// IPv4 without DF whose fragments the bond did not all take (its queue full, no keys).
    pub fragments_dropped: u64,
    /// Dropped without an answer: exempt (an ICMP error, a non-initial fragment, a source or
    /// destination that is not unicast), IPv4 options that would need fragmenting, malformed.
    pub dropped: u64,
}

/// ICMP "packet too big" answers a second at most, all peers together: a bound on the work
/// (RFC 4443 section 2.4 (f) asks a router to limit its ICMP errors' rate), set high because
/// path MTU discovery runs on these (Linux does not limit them at all), and each of a burst of
/// a sender's segments may need one before the first arrives.
pub const TOO_BIG_ANSWERS_PER_S: u64 = 1000;

/// What `braid status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The TUN device.
    pub interface: String,
    /// Its MTU, and where it came from.
    pub mtu: u16,
    /// Where it came from: `configured (interface.mtu)`, a client's `derived: ...`, or a
    /// server's default until the first handshake, then its client's (the largest of its
    /// clients').
    pub mtu_source: String,
    /// Client or server.
    pub role: Role,
    /// This end's tunnel addresses (a client's include what the server handed it).
    pub addresses: Vec<String>,
    /// Each peer: a client's server, or a server's clients, in config order.
    pub peers: Vec<PeerStatus>,
    /// Server with `[[client]]` tables: TUN packets to an address no client owns (dropped).
    pub unrouted_packets: u64,
    /// Server with `[[client]]` tables: link-scoped TUN packets (IPv6 link-local or
    /// link-local multicast, IPv4 169.254/16 or 224.0.0.0/24: the kernel's router
    /// solicitations and MLD reports), which no client is for (dropped, not `unrouted`).
    pub link_local_packets: u64,
    /// This end's own path datagrams that came back in through the TUN device (dropped): the
    /// route to a path's remote goes through the tunnel itself (a routing loop; the log says
    /// which path and what to do).
    pub looped_packets: u64,
    /// Server with `[[client]]` tables: datagrams no client's session claimed (unknown key or
    /// index, malformed; dropped unanswered).
    pub unclaimed_datagrams: u64,
    /// Server: what the handshake guard did (`braid_session::cookie`). `None` on a client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake_guard: Option<GuardStatus>,
    /// TUN packets larger than the bond carries (`braid_session::pmtu`), and what was done.
    pub too_big: TooBigCounters,
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
    /// Datagrams not sent because their path had no socket open (a client's path waiting for
    /// its interface) or, on a server, no address yet: the client had not used the path
    /// (probes on a path the client has not opened yet, at its start).
    pub udp_unaddressed: u64,
    /// `[tcp] accelerate`: TCP carried over pTCP. `None` when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpStatus>,
    /// Seconds since start.
    pub uptime_s: f64,
    /// CPU time the daemon has used since start, in user space (all threads).
    pub cpu_user_s: f64,
    /// CPU time the daemon has used since start, in the kernel on its behalf.
    pub cpu_system_s: f64,
    /// How late the event loop woke up, and how long its turns took, since start.
    pub event_loop: loop_timing::LoopTiming,
}

/// TCP acceleration in `status`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TcpStatus {
    /// Client: the port redirected TCP lands on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen_port: Option<u16>,
    /// Client: TCP connections accepted and carried over pTCP; server: pTCP connections
    /// connected onward.
    pub connections: u64,
    /// Accelerated connections open now.
    pub active: u64,
    /// Client: connections turned away (no original destination: not redirected; the session
    /// not up; too many). Server: headers that were malformed or named a destination the
    /// tunnel would not carry, and onward connects that failed at once.
    pub refused: u64,
    /// Client: the server said in its handshake that it takes accelerated TCP; until it does
    /// (or when it does not), nothing is redirected and TCP rides the striped tunnel.
    /// Server: always true.
    pub server_accepts: bool,
    /// Server: onward connects started from the client's own address (`[tcp] transparent`).
    pub transparent: u64,
    /// Connections that queue in a `[qos]` class and whose micro-flows are capped at their
    /// paths' rates, configured or PET's estimates (`PtcpTable::cap_rates`).
    pub rate_capped: u64,
}

/// One peer in `status`.
#[derive(Debug, Serialize)]
pub struct PeerStatus {
    /// `server`, `client`, or a `[[client]]`'s name.
    pub name: String,
    /// Its public key (base64).
    pub public_key: String,
    /// Server, `[[client]]`: the tunnel addresses handed to it and the prefixes behind it.
    pub addresses: Vec<String>,
    /// Server, `[[client]]`: prefixes routed to it.
    pub routes: Vec<String>,
    /// Path names and peer addresses, in path order.
    pub paths: Vec<PathInfo>,
    /// The session's own status.
    pub session: braid_session::SessionStatus,
    /// Server, `[[client]]`: packets from this client with a source address that is not its
    /// own (dropped: a client cannot pose as another).
    pub spoofed_packets: u64,
    /// Server, `[[client]]`: link-scoped packets from this client (its kernel's IPv6 router
    /// solicitations and MLD reports; see [`Status::link_local_packets`]), dropped: a link of
    /// several clients cannot carry them, and they are no spoofing.
    pub link_local_packets: u64,
    /// pTCP connections held for this peer (TCP acceleration).
    pub ptcp_connections: usize,
    /// pTCP segments for a connection not held (and no SYN this end accepts), dropped.
    pub ptcp_unknown_conn: u64,
    /// What this peer's pTCP connections commit: bytes sent and not yet acknowledged, and
    /// receive windows offered (`[tcp] memory_mib` bounds each).
    pub ptcp_unacked_bytes: u64,
    /// See [`PeerStatus::ptcp_unacked_bytes`].
    pub ptcp_window_bytes: u64,
}

/// A path's identity in `status`.
#[derive(Debug, Serialize)]
pub struct PathInfo {
    /// Name from the config (server: `path<i>`).
    pub name: String,
    /// Where this end sends the path's datagrams (server: learned from the client).
    pub peer: Option<SocketAddr>,
    /// Client: the host name and port `remote` was given as, if it was a name (`peer` is
    /// what it resolves to now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_host: Option<String>,
    /// Client: why the path is out of use, if the daemon knows (taken down by the user; its
    /// interface or address not there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl PathInfo {
    /// Path `name`'s line: where its datagrams go (`peer`), its config (a client's; a server
    /// has none) for the host name, and why it is out of use: taken down by the user
    /// (`admin_down`), else `problem`.
    pub(crate) fn new(
        name: String,
        peer: Option<SocketAddr>,
        cfg: Option<&config::PathConfig>,
        admin_down: bool,
        problem: Option<String>,
    ) -> PathInfo {
        PathInfo {
            name,
            peer,
            remote_host: cfg
                .and_then(|c| c.remote_host.as_ref())
                .map(|(h, port)| format!("{h}:{port}")),
            problem: if admin_down {
                Some("taken down with `braid path down`".into())
            } else {
                problem
            },
        }
    }
}

/// One peer's session and what the daemon keeps for it.
struct Peer {
    cfg: PeerConfig,
    session: Session,
    /// Where each path's datagrams go: the client's configured remotes, or what the server
    /// learned from authenticated packets.
    addrs: Vec<Option<SocketAddr>>,
    spoofed: u64,
    /// Link-scoped packets from this client, dropped ([`PeerStatus::link_local_packets`]).
    link_local: u64,
    /// Client: the handed addresses already put on the TUN.
    applied: Vec<(IpAddr, u8)>,
    /// Client: after a failure to put a handed address on the TUN, when to try again.
    retry_addresses_at: Instant,
    /// pTCP connections riding this peer's session (TCP acceleration).
    ptcp: PtcpTable,
    /// What the log last said of the session ([`Daemon::log_transitions`]).
    logged: Logged,
}

/// A peer's session as the log last described it.
#[derive(Debug, Default)]
struct Logged {
    established: bool,
    restarts: u64,
    /// [`Session::peer_instance_returns`] as last seen.
    returns: u64,
    /// Per path: up (its probes answered).
    up: Vec<bool>,
    /// Per path: a backup in standby.
    standby: Vec<bool>,
    /// Path lines said since `minute` began.
    lines: u32,
    minute: Instant,
}

/// The most lines a minute about one peer's paths going down or up.
const PATH_LINES_PER_MINUTE: u32 = 20;

/// One accelerated TCP connection: the peer whose session carries it, and the copying.
struct Accelerated {
    peer: usize,
    pair: Pair,
}

/// The daemon's TCP acceleration state (`[tcp] accelerate`).
#[derive(Default)]
struct Accel {
    /// Client: the listeners redirected TCP lands on: IPv4, and IPv6 where the host has it.
    listeners: Vec<mio::net::TcpListener>,
    /// By token.
    pairs: BTreeMap<usize, Accelerated>,
    /// The pairs' tokens by peer and pTCP connection id.
    tokens: BTreeMap<(usize, u16), usize>,
    /// Pairs to pump this turn: their socket had an event, their pTCP connection took a
    /// segment or ran a timer, or they are new. An idle pair costs nothing.
    ready: BTreeSet<usize>,
    /// Server: accepted pTCP connections whose header has not arrived in full, by peer and id.
    pending: BTreeMap<(usize, u16), Vec<u8>>,
    next_token: usize,
    /// Client: the nftables table installed.
    nft_table: Option<String>,
    /// Client: the ruleset installed (replaced when the tunnel's prefixes change).
    nft_rules: String,
    /// Client: the handed addresses the ruleset was made with (`None`: not made yet).
    nft_handed: Option<Vec<(IpAddr, u8)>>,
    /// Client: whether the server's last handshake response said it takes accelerated TCP
    /// (`None`: no session yet).
    server_accepts: Option<bool>,
    /// Server: the rules of `[tcp] transparent` are installed, and onward connections go out
    /// from the clients' addresses.
    transparent: bool,
    /// Server: the IPv6 rules are installed too (else IPv6 goes onward from the server's own
    /// address).
    transparent_v6: bool,
    /// With `[qos]`: accelerated connections queue in their class (their segments fit the
    /// send slots a path's datagrams are sealed into).
    classify: bool,
    stats: TcpStatus,
}

struct Daemon {
    cfg: Config,
    peers: Vec<Peer>,
    /// Server: which client each tunnel address belongs to ([`Daemon::owner`]).
    owners: owners::Owners,
    /// The peers each turn of the loop looks at, and their next timers (`turns`).
    turns: turns::Turns,
    /// The peers a receive batch had datagrams for ([`Daemon::deliver_claimed`]).
    claimed: Vec<usize>,
    /// Server: the low bits of a receiver index that name the client whose session drew it
    /// (`SessionConfig::index_tag`; [`Daemon::claim`]).
    index_tag_bits: u8,
    tun: net::Tun,
    mtu: u16,
    mtu_source: String,
    /// The UDP sockets: a server's one, or a client's one per path (`None` while the path's
    /// interface or local address is not there).
    sockets: Vec<Option<UdpSocket>>,
    /// quinn-udp's per-socket state: GSO support and segment limits.
    gso: Vec<Option<quinn_udp::UdpSocketState>>,
    names: Vec<String>,
    /// Client: the paths the user took out (`braid path down`).
    admin_down: Vec<bool>,
    /// Client: why a path has no socket, while it has none.
    problems: Vec<Option<String>>,
    /// Client: paths out of use because their datagrams came back in through the TUN device
    /// (a routing loop), until when, and why ([`Daemon::note_loop`]).
    looped_out: Vec<Option<(Instant, String)>>,
    /// The local port of each socket (0 where a path has none): what a looped datagram comes
    /// from ([`Daemon::looped_path`]).
    local_ports: Vec<u16>,
    /// Requests from the control socket.
    commands: std::sync::mpsc::Receiver<control::Command>,
    poll: Poll,
    /// When to try again to open the sockets of paths that have none.
    next_reopen: Instant,
    /// Server: an MTU `ip` refused, not tried again.
    mtu_failed: Option<u16>,
    /// Server: the client MTU the configured `interface.mtu` was last said to be above.
    mtu_warned: Option<u32>,
    /// Room for one datagram in `out` ([`datagram_room`]); a server's grows with its clients'
    /// largest packets.
    room: usize,
    /// Client with paths whose `remote` is a host name: resolves them again.
    resolver: Option<Resolver>,
    /// Client: the handshake clock floor, renewed while the daemon runs.
    clock_floor: Option<clock_floor::ClockFloor>,
    /// A handshake completed since the MTU and the datagram slots were last fitted to the
    /// peers' bond parameters.
    params_changed: bool,
    /// The status JSON and metrics text the control and metrics threads serve, made when
    /// they ask.
    board: Arc<control::Board>,
    /// Whether there is a metrics endpoint (its text is made with every status).
    has_metrics: bool,
    /// No status is made for a reader before this (at most ten a second).
    publish_floor: Instant,
    next_publish: Instant,
    /// How late the loop wakes up and how long its turns take (`status`'s `event_loop`).
    loop_timing: loop_timing::LoopTiming,
    clock: std::time::Instant,
    tun_rx: u64,
    tun_rx_errors: u64,
    tun_tx: u64,
    tun_tx_errors: u64,
    send_errors: u64,
    unaddressed: u64,
    looped: u64,
    unrouted: u64,
    /// Link-scoped TUN packets no client is for ([`Status::link_local_packets`]).
    link_local: u64,
    unclaimed: u64,
    too_big: TooBigCounters,
    /// The `too_big` answers' limit: [`TOO_BIG_ANSWERS_PER_S`], as much in a burst.
    too_big_answers: braid_session::cookie::Bucket,
    /// Warnings about what peers send (and a client's handshake that does not complete).
    warnings: Warnings,
    /// Client: the session's cookie replies when the last "no handshake" warning was said.
    warned_cookie_replies: u64,
    /// Client: since when no path of an established session has heard the server.
    dark_since: Option<Instant>,
    /// Client: the configured routes could not all be put back after the handed addresses
    /// changed; tried again at this time, the wait doubling up to a minute.
    routes_retry: Option<(Instant, braid_proto::time::Duration)>,
    /// Server: checks every initiation's MACs before any Diffie-Hellman work, and under load
    /// answers with cookies (`braid_session::cookie`).
    guard: Option<CookieGuard>,
    tun_readable: bool,
    /// Receive buffer for (possibly GRO-coalesced) datagrams.
    rx: Vec<u8>,
    out: Vec<u8>,
    /// Sealed pTCP segments, one at a time.
    ptcp_out: Vec<u8>,
    /// Per path: sealed pTCP datagrams waiting to go out in one GSO send.
    ptcp_batches: gso::PathBatches,
    accel: Accel,
}

/// The UDP socket a path's datagrams go out on: a client's own per path, a server's one.
pub(crate) fn sock_index(role: Role, path: usize) -> usize {
    match role {
        Role::Initiator => path,
        Role::Responder => 0,
    }
}

/// How often one kind of warning may be said.
const WARN_EVERY: braid_proto::time::Duration = braid_proto::time::Duration::from_secs(60);

/// Warnings about what peers send, each kind (and each path, for a kind about one) said at
/// most once a minute.
#[derive(Default)]
pub(crate) struct Warnings {
    last: std::collections::HashMap<(&'static str, usize), Instant>,
}

impl Warnings {
    /// Whether a warning of this kind may be said now.
    fn due(&self, now: Instant, kind: &'static str) -> bool {
        self.due_for(now, kind, 0)
    }

    fn due_for(&self, now: Instant, kind: &'static str, index: usize) -> bool {
        self.last
            .get(&(kind, index))
            .is_none_or(|&t| now.saturating_duration_since(t) >= WARN_EVERY)
    }

    /// Says `message` unless a warning of this kind was said less than a minute ago.
    pub(crate) fn say(
        &mut self,
        now: Instant,
        kind: &'static str,
        message: impl FnOnce() -> String,
    ) {
        self.say_for(now, kind, 0, message);
    }

    /// [`Warnings::say`] for one of several things of a kind (a path, by its index), each
    /// with its own minute.
    pub(crate) fn say_for(
        &mut self,
        now: Instant,
        kind: &'static str,
        index: usize,
        message: impl FnOnce() -> String,
    ) {
        if self.due_for(now, kind, index) {
            self.last.insert((kind, index), now);
            eprintln!("braid: {} (said at most once a minute)", message());
        }
    }
}

/// Warns about a handshake a session refused for a reason its sender can fix.
fn warn_drop(w: &mut Warnings, now: Instant, why: braid_session::DropReason, from: SocketAddr) {
    use braid_session::DropReason as R;
    let (kind, what) = match why {
        R::UnknownPeer => (
            "unknown_peer",
            "is from a key that is not `peer_public_key`: set it to that client's `braid pubkey`, or fix the client's `private_key`",
        ),
        R::StaleInitiation => (
            "stale_initiation",
            "is not newer than the last one accepted: a replay, the client's clock went back and it has no handshake clock floor (its state_dir; security.md), or two clients run with one key",
        ),
        R::BadParams => (
            "bad_params",
            "carries bond parameters this server refuses: a client of another braid release?",
        ),
        _ => return,
    };
    w.say(now, kind, || format!("a handshake from {from} {what}"));
}

/// A server's handshake guard (`braid_session::cookie`), seeded from the OS; none on a client.
pub(crate) fn handshake_guard(cfg: &Config) -> Result<Option<CookieGuard>, DaemonError> {
    Ok(match cfg.role {
        Role::Responder => Some(CookieGuard::new(
            &cfg.private_key.public_key(),
            Instant::ZERO,
            random_seed()?,
        )),
        Role::Initiator => None,
    })
}

/// 32 bytes from the OS for a session's randomness (ephemeral keys, indices).
pub(crate) fn random_seed() -> Result<[u8; 32], DaemonError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| DaemonError::Io(io::Error::other(e.to_string())))?;
    Ok(seed)
}

/// A random pTCP connection id to start a table from ([`PtcpTable::with_first_id`]).
pub(crate) fn random_id() -> Result<u16, DaemonError> {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).map_err(|e| DaemonError::Io(io::Error::other(e.to_string())))?;
    Ok(u16::from_le_bytes(b))
}

pub(crate) fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Run the daemon in the foreground until `stop` is set (e.g. by SIGINT/SIGTERM).
pub fn run(cfg: Config, stop: Arc<AtomicBool>) -> Result<(), DaemonError> {
    let mut d = Daemon::start(cfg)?;
    // Only now: the TUN device, the sockets and the control socket are all there.
    eprintln!(
        "braid: {} up on {} (control socket {})",
        d.cfg.ifname,
        if d.cfg.role == Role::Initiator {
            "client"
        } else {
            "server"
        },
        d.cfg.control_socket.display()
    );
    let result = d.event_loop(&stop);
    d.reset_accelerated();
    // A clean stop leaves the exact floor, not the reservation ahead of it, so that restarts
    // do not move the handshake clock ahead each time.
    clock_floor::finish(d.clock_floor.as_ref(), d.now().as_nanos());
    let _ = std::fs::remove_file(&d.cfg.control_socket);
    d.remove_tcp_rules();
    result
}

/// Server with `[tcp] transparent`: installs the nftables table and the `ip` rules that bring
/// what comes back to a transparent onward socket to it ([`accel::nft_transparent_ruleset`],
/// [`accel::ip_rule_commands`]). Leftovers of a daemon that was killed are replaced. IPv4 must
/// work; IPv6 may be off on the host: `Ok(false)` says its rules are not in, and IPv6 then goes
/// onward from the server's own address.
fn install_transparent_rules(table: &str) -> Result<bool, DaemonError> {
    let hint = |detail: String| {
        DaemonError::Ip {
        what: "[tcp] transparent".into(),
        detail: format!(
            "{detail}; it needs root (CAP_NET_ADMIN), nft (apt-get install nftables) and ip (iproute2). Or set [tcp] transparent = false: the server then connects onward from its own address"
        ),
    }
    };
    let _lock = TransparentLock::take();
    nft(&accel::nft_transparent_ruleset(table)).map_err(|e| {
        hint(format!(
            "cannot install the nftables table inet {table}: {e}"
        ))
    })?;
    // The rules are added, not deleted and added again: another transparent server in this
    // namespace may be using them. A rule of the previous version goes.
    for cmd in accel::legacy_rule_commands() {
        let _ = std::process::Command::new("ip").args(&cmd).output();
    }
    let mut v6 = true;
    for cmd in accel::ip_rule_commands(true) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let Err(e) = net::ip(&args, "[tcp] transparent".into()) else {
            continue;
        };
        let problem = match e {
            DaemonError::Ip { detail, .. } => detail,
            other => other.to_string(),
        };
        if accel::already_there(&problem) {
            continue;
        }
        if cmd[0] == "-6" {
            if v6 {
                eprintln!(
                    "braid: {problem}: IPv6 TCP is connected onward from the server's own address"
                );
            }
            v6 = false;
            continue;
        }
        let _ = delete_nft_table(table);
        release_transparent_ip_rules();
        return Err(hint(problem));
    }
    if !v6 {
        // Half an IPv6 setup (the rule without the route) would misroute replies.
        remove_transparent_ip_rules(|family| family == "-6");
    }
    Ok(v6)
}

/// Transparent servers of one network namespace share the `ip` rules: installing them, and
/// deciding on exit whether another server still needs them, happen under this lock (an
/// `flock` on a file named after the namespace), so a server that exits while another starts
/// cannot take the rules from under it. Without `/run` (or on any error) there is no lock.
struct TransparentLock {
    /// Held open (and locked) until dropped.
    _file: Option<std::fs::File>,
}

impl TransparentLock {
    fn take() -> TransparentLock {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::io::AsRawFd;
        let Ok(ns) = std::fs::metadata("/proc/self/ns/net") else {
            return TransparentLock { _file: None };
        };
        let path = format!("/run/braid-transparent-{}.lock", ns.ino());
        let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
        else {
            return TransparentLock { _file: None };
        };
        // SAFETY: flock on a descriptor this function owns; released on close.
        let locked = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0;
        TransparentLock {
            _file: locked.then_some(f),
        }
    }
}

/// Removes a file when dropped, unless disarmed: the control socket of a start that failed
/// after binding it.
struct RemoveOnError(Option<std::path::PathBuf>);

impl RemoveOnError {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Deletes the `ip` rules and routes of `[tcp] transparent` of the families (`-4`, `-6`)
/// `family` takes, whichever are there.
fn remove_transparent_ip_rules(family: impl Fn(&str) -> bool) {
    for cmd in accel::ip_rule_commands(false) {
        if family(&cmd[0]) {
            let _ = std::process::Command::new("ip").args(&cmd).output();
        }
    }
}

/// Removes the namespace's shared `[tcp] transparent` `ip` rules unless another server's
/// table here still needs them. The caller holds the [`TransparentLock`] and has deleted its
/// own table.
fn release_transparent_ip_rules() {
    if !another_transparent_server() {
        remove_transparent_ip_rules(|_| true);
    }
}

/// Whether another server's `[tcp] transparent` table is in this network namespace
/// ([`accel::another_transparent_table`]); `false` if nft cannot say.
fn another_transparent_server() -> bool {
    std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && accel::another_transparent_table(&String::from_utf8_lossy(&o.stdout))
        })
}

/// Runs `nft -f -` with `script` on its standard input.
fn nft(script: &str) -> io::Result<()> {
    use std::io::Write;
    let mut child = std::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

/// Deletes nftables table `inet <table>`.
fn delete_nft_table(table: &str) -> io::Result<()> {
    nft(&format!("delete table inet {table}\n"))
}

/// The local port of each socket, 0 where a path has none ([`Daemon::looped_path`]).
fn local_ports(sockets: &[Option<UdpSocket>]) -> Vec<u16> {
    sockets
        .iter()
        .map(|s| {
            s.as_ref()
                .and_then(|s| s.local_addr().ok())
                .map_or(0, |a| a.port())
        })
        .collect()
}

/// How the log names a peer: a client's one peer is "the server"; a server names its client
/// ("the client" for the one peer of `peer_public_key`).
fn peer_label(role: Role, cfg: &PeerConfig) -> String {
    match role {
        Role::Initiator => "the server".to_owned(),
        Role::Responder if cfg.catch_all => "the client".to_owned(),
        Role::Responder => format!("client `{}`", cfg.name),
    }
}

/// Path `i`'s name: a client's from its config (`names`), a server's from the client's
/// handshake (`BondParams::path_names`), else `path<i>`.
fn path_name(role: Role, names: &[String], session: &Session, i: usize) -> String {
    match role {
        Role::Initiator => names.get(i).cloned(),
        Role::Responder => session.params().and_then(|p| p.path_names.get(i)).cloned(),
    }
    .unwrap_or_else(|| format!("path{i}"))
}

/// The line that says a peer's path lines stop for the rest of the minute.
fn paths_keep_changing(who: &str) -> String {
    format!(
        "braid: paths of {who} keep changing: not logged for the rest of this minute (braid status shows them)"
    )
}

/// How long a client keeps a path out of use after its datagrams came back in through the TUN
/// device (a routing loop), before it tries the path again.
const LOOP_RETRY: braid_proto::time::Duration = braid_proto::time::Duration::from_secs(5);

/// A UDP packet's source port and destination (IPv4, or IPv6 with UDP as the first next
/// header); `None` for anything else.
fn udp_ends(packet: &[u8]) -> Option<(u16, SocketAddr)> {
    let (udp, dst) = match packet.first()? >> 4 {
        4 if *packet.get(9)? == 17 => {
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            // A fragment after the first carries no UDP header.
            let offset = u16::from_be_bytes(packet.get(6..8)?.try_into().ok()?) & 0x1fff;
            if ihl < 20 || offset != 0 {
                return None;
            }
            (packet.get(ihl..)?, packet_address(packet, false)?)
        }
        6 if *packet.get(6)? == 17 => (packet.get(40..)?, packet_address(packet, false)?),
        _ => return None,
    };
    let port = |at: usize| Some(u16::from_be_bytes(udp.get(at..at + 2)?.try_into().ok()?));
    Some((port(0)?, SocketAddr::new(dst, port(2)?)))
}

/// Whether an IP packet is link-scoped: from or to an IPv6 link-local address (or from `::`),
/// to IPv6 multicast of link scope or less, from IPv4's 169.254/16 or to 224.0.0.0/24. The
/// kernel sends such packets (router solicitations, MLD and IGMP reports) into any interface;
/// a server's tunnel of several clients is no link they could mean.
fn link_scoped(packet: &[u8]) -> bool {
    let (src, dst) = (packet_address(packet, true), packet_address(packet, false));
    let v6_local = |a: Option<IpAddr>| match a {
        Some(IpAddr::V6(a)) => (a.segments()[0] & 0xffc0) == 0xfe80,
        _ => false,
    };
    let unspecified = matches!(src, Some(IpAddr::V6(a)) if a.is_unspecified());
    let multicast = match dst {
        Some(IpAddr::V6(a)) => {
            a.segments()[0] & 0xff00 == 0xff00 && (a.segments()[0] & 0x000f) <= 2
        }
        Some(IpAddr::V4(a)) => a.octets()[..3] == [224, 0, 0],
        None => false,
    };
    let v4_local = matches!(src, Some(IpAddr::V4(a)) if a.is_link_local());
    v6_local(src) || v6_local(dst) || unspecified || multicast || v4_local
}

/// The destination (`source = false`) or source address of an IPv4 or IPv6 packet.
fn packet_address(packet: &[u8], source: bool) -> Option<IpAddr> {
    match packet.first()? >> 4 {
        4 => {
            let at = if source { 12 } else { 16 };
            let b: [u8; 4] = packet.get(at..at + 4)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        6 => {
            let at = if source { 8 } else { 24 };
            let b: [u8; 16] = packet.get(at..at + 16)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        _ => None,
    }
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
        // What another daemon may hold (its control socket, the Prometheus port, a server's
        // UDP port) is taken before anything changes the system: a second `braid up` of the
        // same config stops there, before its TUN device and routes would take the running
        // one's routes (and lose them as it exits). Owner-only from the moment it can be
        // connected to: the control socket takes commands that change the bond. One another
        // braid answers on is not taken over (a stale one, from a daemon that died, is
        // replaced); if a later step fails, it is removed again.
        let control = control::bind_private_if_free(&cfg.control_socket).map_err(|e| {
            DaemonError::Control {
                path: cfg.control_socket.display().to_string(),
                err: e,
            }
        })?;
        let control_file = RemoveOnError(Some(cfg.control_socket.clone()));
        let metrics = match cfg.prometheus {
            Some(addr) => Some(TcpListener::bind(addr).map_err(|e| DaemonError::Socket {
                what: format!("the Prometheus endpoint {addr}"),
                err: e,
                hint: "",
            })?),
            None => None,
        };
        let (mut sockets, addrs, names) = net::open_sockets(&cfg)?;
        let mut accel_listeners = Vec::new();
        if let (Role::Initiator, Some(t)) = (cfg.role, &cfg.tcp) {
            let v4 = SocketAddr::from(([0, 0, 0, 0], t.listen_port));
            let v6 = SocketAddr::from(([0u16; 8], t.listen_port));
            let l = net::tcp_listener(v4).map_err(|e| DaemonError::Socket {
                what: format!("[tcp] listen_port {}", t.listen_port),
                err: e,
                hint: " (is another program, or another braid, using the port? set [tcp] listen_port to a free one)",
            })?;
            accel_listeners.push(l);
            // Without IPv6 on the host, IPv6 TCP is not redirected (and rides the tunnel).
            if let Ok(l) = net::tcp_listener(v6) {
                accel_listeners.push(l);
            }
        }
        let tun = net::open_tun(&cfg, mtu)?;
        let server_opaque =
            cfg.role == Role::Responder && cfg.tcp.as_ref().is_some_and(|t| !t.transparent);
        if cfg.tcp.is_none() || server_opaque {
            // A daemon of this interface killed with [tcp] accelerate on leaves its nftables
            // table behind, and it would redirect TCP for the tunnel to a port nobody listens
            // on (or, a transparent server's, mark what nobody routes). Without acceleration,
            // or at a server without transparency, nothing of ours should be there: remove it.
            let table = accel::nft_table(&cfg.ifname);
            if delete_nft_table(&table).is_ok() {
                eprintln!(
                    "braid: removed the nftables table inet {table} a daemon with [tcp] accelerate left behind"
                );
                // A transparent server's leftovers include its ip rules, unless another
                // transparent server here still uses them.
                if cfg.role == Role::Responder {
                    let _lock = TransparentLock::take();
                    release_transparent_ip_rules();
                }
            }
        }
        let gso = gso::states(&sockets)?;
        let poll = Poll::new()?;
        let tun_fd = tun.as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&tun_fd), TUN, Interest::READABLE)?;
        for (i, s) in sockets.iter_mut().enumerate() {
            if let Some(s) = s {
                poll.registry()
                    .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
            }
        }
        let (command_tx, commands) = std::sync::mpsc::sync_channel(COMMAND_QUEUE);
        // A path command takes effect, and shows in the status, at once: not at the loop's
        // next timeout; a status request is answered within the loop's next turn.
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
        let board = control::Board::new(waker);
        control::serve(control, board.clone(), command_tx, names.clone());
        let has_metrics = metrics.is_some();
        if let Some(l) = metrics {
            metrics::serve(l, board.clone());
        }
        let guard = handshake_guard(&cfg)?;
        // A client starts its handshake clock at or above every timestamp it sent before.
        let (clock_floor, wall) = clock_floor::ClockFloor::for_config(&cfg);
        let mut peers = Vec::new();
        // A server's clients share one budget for their accelerated connections, beside each
        // session's own (`[tcp] total_memory_mib`).
        let shared_budget = cfg
            .tcp
            .as_ref()
            .filter(|_| cfg.role == Role::Responder)
            .map(|t| ptcp_table::SharedBudget::new(t.total_memory_budget));
        // Each client's session draws its receiver indices with its own tag in the low bits:
        // no two collide (`SessionConfig::index_tag`).
        let tag_bits = (usize::BITS - cfg.peers.len().saturating_sub(1).leading_zeros()) as u8;
        for (i, p) in cfg.peers.iter().enumerate() {
            let seed = random_seed()?;
            let mut scfg = cfg.session_config(p);
            scfg.index_tag = (i as u32, tag_bits);
            scfg.qos = cfg.qos.clone();
            scfg.duplicate_dscp = cfg.duplicate_dscp;
            scfg.release_pacing_pct = cfg.release_pacing_pct;
            scfg.shape_egress = cfg.shape_egress;
            scfg.handed_addresses = p.addresses.iter().map(|c| (c.addr, c.prefix)).collect();
            scfg.accepts_tcp = cfg.role == Role::Responder && cfg.tcp.is_some();
            let mut table = PtcpTable::new(
                cfg.role,
                TableOptions {
                    congestion: cfg
                        .tcp
                        .as_ref()
                        .map_or(braid_ptcp::CongestionAlgorithm::Bbr, |t| t.congestion),
                    receive_buffer_bytes: None,
                    mss: ptcp_table::mss_of(&cfg),
                    // A server takes a client's pTCP connections only to accelerate TCP.
                    accept: cfg.role == Role::Responder && cfg.tcp.is_some(),
                    memory_budget: ptcp_table::memory_budget_of(&cfg),
                },
            )
            .with_first_id(random_id()?);
            if let Some(shared) = &shared_budget {
                table = table.with_shared_budget(shared.clone());
            }
            peers.push(Peer {
                ptcp: table,
                cfg: p.clone(),
                session: Session::new(scfg, Instant::ZERO, seed, wall),
                addrs: addrs.clone(),
                spoofed: 0,
                link_local: 0,
                applied: Vec::new(),
                retry_addresses_at: Instant::ZERO,
                logged: Logged::default(),
            });
        }
        // A segment the shaper let go is sealed into one of the flush's datagram slots.
        let segment_room = ptcp_table::mss_of(&cfg) as usize
            + braid_ptcp::wire::DATA_HEADER_LEN
            + braid_session::Session::PTCP_OVERHEAD;
        // The flush's datagram slots take the bond's largest packet and a pTCP segment alike.
        let room = datagram_room(usize::from(mtu).max(segment_room));
        let mut accel = Accel {
            next_token: TCP_BASE,
            classify: cfg.qos.is_some(),
            ..Accel::default()
        };
        if let (Role::Initiator, Some(t)) = (cfg.role, &cfg.tcp) {
            accel.listeners = accel_listeners;
            for (i, l) in accel.listeners.iter_mut().enumerate() {
                poll.registry()
                    .register(l, Token(TCP_LISTENER + i), Interest::READABLE)?;
            }
            accel.stats.listen_port = Some(t.listen_port);
        }
        if cfg.tcp.is_some() && cfg.qos.is_some() {
            eprintln!(
                "braid: [tcp] accelerate with [qos]: accelerated TCP queues in the class its addresses and ports select ([[qos.class.filter]]; its DSCP does not reach braid through the redirect, so it counts as DSCP 0), each flow capped at its path's rate (PET's estimate on a PET bond) (docs/qos.md)"
            );
        }
        if let (Role::Responder, Some(true)) = (cfg.role, cfg.tcp.as_ref().map(|t| t.transparent)) {
            let table = accel::nft_table(&cfg.ifname);
            accel.transparent_v6 = install_transparent_rules(&table)?;
            eprintln!(
                "braid: accelerated TCP is connected onward from the clients' addresses (nftables table inet {table}, ip rule fwmark {} lookup {})",
                accel::reply_fwmark(),
                accel::REPLY_TABLE
            );
            accel.nft_table = Some(table);
            accel.transparent = true;
        }
        let clock = std::time::Instant::now();
        let problems: Vec<Option<String>> = sockets
            .iter()
            .zip(&cfg.paths)
            .map(|(s, p)| {
                s.is_none()
                    .then(|| format!("waiting for {}", net::waiting_for(p)))
            })
            .collect();
        if cfg.role == Role::Initiator {
            for (i, missing) in problems.iter().enumerate() {
                if missing.is_some() {
                    for p in &mut peers {
                        p.session
                            .set_path_enabled(Instant::ZERO, PathId(i as u8), false);
                    }
                }
            }
        }
        control_file.disarm();
        Ok(Daemon {
            owners: owners::Owners::new(&cfg.peers),
            turns: turns::Turns::new(cfg.peers.len()),
            claimed: Vec::new(),
            index_tag_bits: tag_bits,
            admin_down: vec![false; names.len()],
            looped_out: vec![None; names.len()],
            local_ports: local_ports(&sockets),
            problems,
            commands,
            poll,
            next_reopen: Instant::ZERO,
            mtu_failed: None,
            mtu_warned: None,
            resolver: Resolver::start(&cfg),
            clock_floor,
            params_changed: false,
            cfg,
            peers,
            tun,
            mtu,
            mtu_source,
            sockets,
            gso,
            names,
            board,
            has_metrics,
            publish_floor: Instant::ZERO,
            next_publish: Instant::ZERO,
            loop_timing: loop_timing::LoopTiming::default(),
            clock,
            tun_rx: 0,
            tun_rx_errors: 0,
            tun_tx: 0,
            tun_tx_errors: 0,
            send_errors: 0,
            unaddressed: 0,
            looped: 0,
            unrouted: 0,
            link_local: 0,
            too_big: TooBigCounters::default(),
            too_big_answers: braid_session::cookie::Bucket::full(
                Instant::ZERO,
                TOO_BIG_ANSWERS_PER_S,
                TOO_BIG_ANSWERS_PER_S,
            ),
            unclaimed: 0,
            warnings: Warnings::default(),
            warned_cookie_replies: 0,
            dark_since: None,
            routes_retry: None,
            guard,
            tun_readable: true,
            rx: vec![0u8; RX_BUFFERS * RX_BUFFER_BYTES],
            room,
            out: vec![0u8; send_buffer_len(room)],
            ptcp_out: vec![0u8; RX_BUFFER_BYTES],
            ptcp_batches: gso::PathBatches::default(),
            accel,
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    /// One peer that takes every packet (a client, or a server with `peer_public_key`).
    fn single(&self) -> bool {
        self.peers.len() == 1 && self.peers[0].cfg.catch_all
    }

    fn any_established(&self) -> bool {
        self.turns
            .any_established(|k| self.peers[k].session.is_established())
    }

    fn event_loop(&mut self, stop: &AtomicBool) -> Result<(), DaemonError> {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let now = self.now();
            let timeout = self
                .turns
                .next_deadline()
                .map(
                    |t| StdDuration::from_nanos(t.saturating_duration_since(now).as_nanos() as u64),
                )
                .unwrap_or(StdDuration::from_millis(100))
                .min(StdDuration::from_millis(100));
            let timeout =
                if self.tun_readable && self.tun.pending().is_none() && self.any_established() {
                    StdDuration::ZERO
                } else {
                    timeout
                };
            // A reader waits for a status: no longer than the floor on making the next one.
            let timeout = if self.board.is_wanted() {
                let floor = self.publish_floor.saturating_duration_since(now);
                timeout.min(StdDuration::from_nanos(floor.as_nanos() as u64))
            } else {
                timeout
            };
            // epoll's timeout is in whole milliseconds, rounded up.
            let deadline = now
                + braid_proto::time::Duration::from_millis(
                    timeout.as_nanos().div_ceil(1_000_000) as u64
                );
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            let woke = self.now();
            self.loop_timing.woke(deadline, woke);
            for ev in events.iter() {
                match ev.token() {
                    TUN => self.tun_readable = true,
                    // Accelerated TCP: the pair is pumped this turn.
                    Token(t) if t >= TCP_BASE => {
                        self.accel.ready.insert(t);
                    }
                    Token(t) if t >= UDP_BASE => self.read_udp(t - UDP_BASE),
                    _ => {}
                }
            }
            let now = self.now();
            self.run_commands(now);
            // A client's one peer (or a server's one client) is looked at every turn, as
            // before there were turns; a proxy's clients when busy, due or touched.
            if self.peers.len() == 1 {
                self.turns.busy(0, now);
            }
            self.turns.take_due(now);
            if now >= self.next_reopen {
                self.next_reopen = now + braid_proto::time::Duration::from_secs(1);
                self.reopen(now);
                self.retry_looped(now);
                self.warn_server_silent(now);
                for (k, p) in self.peers.iter_mut().enumerate() {
                    if !p.ptcp.is_empty() {
                        p.ptcp.refresh_rate_caps(&p.session);
                        self.turns.touch(k);
                    }
                }
            }
            for i in 0.. {
                let Some(k) = self.turns.active_at(i) else {
                    break;
                };
                let p = &mut self.peers[k];
                p.session.handle_timeout(now);
                p.ptcp.handle_timeout(now);
            }
            self.warn_no_handshake(now);
            // One look at every peer, only after a handshake (a proxy may have thousands).
            if std::mem::take(&mut self.params_changed) {
                if let Some((smallest, largest)) = self.peers_max_packets() {
                    self.adopt_mtu(smallest, largest);
                    self.fit_datagram_room(largest);
                }
            }
            self.resolve_remotes(now);
            clock_floor::renew(self.clock_floor.as_mut(), now, &mut self.warnings);
            self.adopt_addresses();
            self.install_tcp_rules();
            self.accelerate(now);
            self.read_tun();
            self.flush();
            // `braid status` or a metrics scrape asked: answered from this turn, but at most
            // ten times a second however often they ask (a status covers every client).
            if now >= self.publish_floor {
                if let Some(asked) = self.board.take_wanted() {
                    self.publish_floor = now + braid_proto::time::Duration::from_millis(100);
                    self.publish(asked);
                }
            }
            // Every 100 ms (a look at every peer: a proxy may have thousands, so not at every
            // turn): path changes are said, and the peers this turn did not look at are checked.
            let look_at_all = now >= self.next_publish;
            if look_at_all {
                self.next_publish = now + braid_proto::time::Duration::from_millis(100);
                self.log_transitions(now);
            }
            self.settle_turn(now, look_at_all);
            self.loop_timing.turned(woke, self.now());
        }
        Ok(())
    }

    /// A peer's next timer: its session's or its pTCP table's.
    fn peer_deadline(p: &Peer) -> Option<Instant> {
        match (p.session.poll_timeout(), p.ptcp.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The end of a turn: the peers it looked at get their next timers again ([`turns`]);
    /// with `check`, every other peer's are checked too ([`turns::Turns::check`]).
    fn settle_turn(&mut self, now: Instant, check: bool) {
        let peers = &self.peers;
        let deadline = |k: usize| Self::peer_deadline(&peers[k]);
        let established = |k: usize| peers[k].session.is_established();
        self.turns.settle(now, deadline, established);
        if check {
            let wrong = self.turns.check(deadline, established);
            if wrong > 0 {
                eprintln!(
                    "braid: {wrong} peers' timers were corrected (a defect: please report it)"
                );
            }
        }
    }

    /// Client: says, once a minute while no handshake has completed (from 5 s after the
    /// start), why that may be.
    fn warn_no_handshake(&mut self, now: Instant) {
        let since_start = now.saturating_duration_since(Instant::ZERO);
        if self.cfg.role != Role::Initiator
            || self.any_established()
            || since_start < braid_proto::time::Duration::from_secs(5)
            || !self.warnings.due(now, "no_handshake")
        {
            return;
        }
        // Cookie replies since the last warning: the server is there, but under a flood.
        let cookies = self.peers[0].session.status().cookie_replies;
        let new_cookies = cookies > std::mem::replace(&mut self.warned_cookie_replies, cookies);
        // Otherwise ask the kernel what becomes of a datagram to each path's server address
        // (at most four paths, 200 ms each, once a minute): "port unreachable" names the fault.
        let found = if new_cookies {
            Vec::new()
        } else {
            self.diagnose_paths()
        };
        let why = if new_cookies {
            "the server is under a handshake flood and answers with cookies; retrying with them"
                .to_owned()
        } else if !found.is_empty() {
            found.join("; ")
        } else {
            "no answer from the server: check that `braid up` runs there (braid v5: an older release does not answer this one), that the paths' `remote` address and port reach it (a firewall must let UDP through), and that the keys match: this config's `peer_public_key` must be the server's public key, and the server's `peer_public_key` (or a [[client]]'s `public_key`) this client's".to_owned()
        };
        let secs = since_start.as_secs();
        self.warnings.say(now, "no_handshake", || {
            format!("no handshake with the server after {secs} s: {why}")
        });
    }

    /// Client: what the kernel hears of a datagram to each path's server address
    /// ([`net::diagnose_path`]), for the paths in use (at most four, 200 ms each: it blocks).
    /// Before a handshake, when a path sends only a handshake a second, so the server host's
    /// allowance of ICMP errors (one a second, bursts of six) has room for the answer.
    fn diagnose_paths(&self) -> Vec<String> {
        self.cfg
            .paths
            .iter()
            .zip(&self.peers[0].addrs)
            .enumerate()
            .filter(|(i, _)| !self.held_out(*i))
            .filter_map(|(_, (p, a))| Some((p, (*a)?)))
            .take(4)
            .filter_map(|(p, a)| {
                let wait = std::time::Duration::from_millis(200);
                net::diagnose_path(p, a, wait).map(|d| format!("path `{}`: {d}", p.name))
            })
            .collect()
    }

    /// Client: says, once a minute while it lasts (from 5 s on), that an established session
    /// hears nothing on any path: the server stopped, or every path's way to it broke. The
    /// session keeps its keys and handshakes again every second; the paths' own lines said
    /// when they went down, this says what it means. Paths the user took down do not count.
    fn warn_server_silent(&mut self, now: Instant) {
        let Some(peer) = self
            .peers
            .first()
            .filter(|_| self.cfg.role == Role::Initiator)
        else {
            return;
        };
        let s = &peer.session;
        let n = s.paths();
        let held: Vec<usize> = (0..n).filter(|&i| self.held_out(i)).collect();
        let dark = s.is_established()
            && held.len() < n
            && (0..n).all(|i| {
                let p = PathId(i as u8);
                !s.path_is_up(p) && !s.path_is_one_way(p)
            });
        if !dark {
            self.dark_since = None;
            return;
        }
        let since = *self.dark_since.get_or_insert(now);
        let secs = now.saturating_duration_since(since).as_secs();
        if secs < 5 {
            return;
        }
        // No diagnosis here ([`Daemon::diagnose_paths`]): the paths' probes, ten a second,
        // use up the kernel's allowance of ICMP errors toward this host, so its datagram
        // would get no answer whatever the fault.
        self.warnings.say(now, "server_silent", || {
            format!(
                "nothing heard from the server on any path for {secs} s: check that `braid up` still runs there and that the paths still reach it (this end keeps trying, a handshake a second; traffic for the tunnel is dropped meanwhile)"
            )
        });
    }

    /// Say in the log, every 100 ms at most, what changed in the sessions: a handshake
    /// completed, a peer restarted, a path came up or went down by its probes. Paths the user
    /// took down (`braid path down`), whose socket was lost or that loop back into the tunnel
    /// have their own lines. At most [`PATH_LINES_PER_MINUTE`] path lines a minute for each
    /// peer, so a proxy's flapping mobile clients do not flood the log.
    fn log_transitions(&mut self, now: Instant) {
        let role = self.cfg.role;
        // A client's paths the daemon holds out have their own lines.
        let held: Vec<bool> = (0..self.sockets.len()).map(|i| self.held_out(i)).collect();
        for (k, p) in self.peers.iter_mut().enumerate() {
            let s = &p.session;
            // A client's one peer is "the server"; a server names its client.
            let who = || peer_label(role, &p.cfg);
            let n = s.paths();
            let newly = s.is_established() && !p.logged.established;
            if newly {
                let paths = if n == 1 { "path" } else { "paths" };
                eprintln!("braid: session with {} established ({n} {paths})", who());
            }
            p.logged.established = s.is_established();
            let restarted = s.peer_restarts() > p.logged.restarts;
            let returns = s.peer_instance_returns();
            let shared = returns > std::mem::replace(&mut p.logged.returns, returns);
            if shared {
                // Not restarts: two peers with one key take the session from each other.
                let addrs: Vec<String> = p
                    .addrs
                    .iter()
                    .flatten()
                    .map(|a| a.ip().to_string())
                    .collect();
                let label = who();
                let from = if addrs.is_empty() {
                    String::new()
                } else {
                    format!(" (the latest from {})", addrs.join(", "))
                };
                self.warnings.say_for(now, "shared_key", k, || match role {
                    Role::Responder => format!(
                        "{label}: two clients run with its key, each handshake taking the session from the other{from}: give each client its own key pair (`braid genkey`) and [[client]] table, or stop the second"
                    ),
                    Role::Initiator => format!(
                        "two servers run with the key this client knows as {label}'s, taking the session from each other: stop the second"
                    ),
                });
            } else if restarted {
                eprintln!("braid: {} restarted: the bond started afresh", who());
            }
            p.logged.restarts = s.peer_restarts();
            p.logged.up.resize(n, false);
            p.logged.standby.resize(n, false);
            // A client's paths keep their state across the server's restart, and those that
            // went down while it was away come back: said as any change. A server starts a
            // restarted client's bond with only the handshake's path.
            let afresh = restarted && role == Role::Responder;
            if !s.is_established() || newly || afresh {
                // As a bond starts, paths come up one by one as their first packets arrive:
                // from then on, say only what changes.
                for (i, up) in p.logged.up.iter_mut().enumerate() {
                    *up = s.path_is_up(PathId(i as u8));
                }
                for (i, standby) in p.logged.standby.iter_mut().enumerate() {
                    *standby = s.path_is_standby(PathId(i as u8));
                }
                continue;
            }
            if now.saturating_duration_since(p.logged.minute)
                >= braid_proto::time::Duration::from_secs(60)
            {
                p.logged.minute = now;
                p.logged.lines = 0;
            }
            for i in 0..n {
                let up = s.path_is_up(PathId(i as u8));
                let standby = s.path_is_standby(PathId(i as u8));
                if up == p.logged.up[i] && standby == p.logged.standby[i] {
                    continue;
                }
                // A backup going to standby or back into use while up; its going down or
                // up is said as any path's.
                let switched = up && p.logged.up[i] && standby != p.logged.standby[i];
                // A backup that is down going in or out of standby: nothing to say.
                let quiet = !up && !p.logged.up[i];
                p.logged.up[i] = up;
                p.logged.standby[i] = standby;
                if quiet {
                    continue;
                }
                if role == Role::Initiator && held.get(i) == Some(&true) {
                    continue;
                }
                p.logged.lines += 1;
                if p.logged.lines > PATH_LINES_PER_MINUTE {
                    if p.logged.lines == PATH_LINES_PER_MINUTE + 1 {
                        eprintln!("{}", paths_keep_changing(&who()));
                    }
                    continue;
                }
                let name = path_name(role, &self.names, s, i);
                let whose = match role {
                    Role::Initiator => String::new(),
                    Role::Responder => format!(" of {}", who()),
                };
                // In use: up and not a backup in standby.
                let up_now = (0..n)
                    .filter(|&k| {
                        let k = PathId(k as u8);
                        s.path_is_up(k) && !s.path_is_standby(k)
                    })
                    .count();
                let state = if switched && standby {
                    "standby: a backup path, it carries nothing while another path is up".to_owned()
                } else if switched {
                    "in use: a backup path, and no other path is up".to_owned()
                } else if up && standby {
                    "up, standby (a backup path)".to_owned()
                } else if up && s.path_is_settling(PathId(i as u8)) {
                    "up, settling: the backups carry the traffic until it has been up for a second"
                        .to_owned()
                } else if up {
                    "up".to_owned()
                } else if s.path_is_one_way(PathId(i as u8)) {
                    format!("down: {} hears nothing of this end's there", who())
                } else if s.path_found_dark(PathId(i as u8)) {
                    "down: the traffic on it stopped short and nothing came since (found from the data)"
                        .to_owned()
                } else {
                    "down: nothing heard on it".to_owned()
                };
                eprintln!("braid: path `{name}`{whose} {state} ({up_now} of {n} in use)");
            }
        }
    }

    /// Client: put back in use the paths a routing loop took out [`LOOP_RETRY`] ago; one whose
    /// datagrams still come back is out again with its first.
    fn retry_looped(&mut self, now: Instant) {
        for j in 0..self.looped_out.len() {
            if self.looped_out[j]
                .as_ref()
                .is_some_and(|(until, _)| now >= *until)
            {
                self.looped_out[j] = None;
                self.apply_path_state(now, j);
            }
        }
    }

    /// Carry out what the control socket asked.
    fn run_commands(&mut self, now: Instant) {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                control::Command::Path { index, enabled } => {
                    if let Some(d) = self.admin_down.get_mut(index) {
                        *d = !enabled;
                        control::say_path_command(&self.names[index], enabled);
                    }
                    self.apply_path_state(now, index);
                }
            }
        }
        // No status is made here: the next request gets one made after this.
    }

    /// Client: tell the session whether path `i` may carry traffic: not taken down by the
    /// user, and with a socket.
    fn apply_path_state(&mut self, now: Instant, i: usize) {
        let enabled = !self.held_out(i);
        for p in &mut self.peers {
            p.session.set_path_enabled(now, PathId(i as u8), enabled);
        }
        self.turns.touch_all();
    }

    /// Client: whether the daemon keeps path `i` out of use: the user took it down, it has no
    /// socket, or its datagrams loop back into the tunnel.
    fn held_out(&self, i: usize) -> bool {
        self.admin_down.get(i).copied().unwrap_or(false)
            || self.sockets.get(i).is_none_or(Option::is_none)
            || self.looped_out.get(i).is_some_and(Option::is_some)
    }

    /// Client: try to open the sockets of paths that have none (their interface or local
    /// address was not there): a modem plugged in, an interface re-created, an address back.
    fn reopen(&mut self, now: Instant) {
        if self.cfg.role != Role::Initiator {
            return;
        }
        // A path bound to an interface that lost its address (a modem's lease ran out, a
        // renewal took the old one off first) would send with another interface's: out of
        // use until it has one again. One listing of the host's addresses for all of them.
        let bound_only = |i: usize| {
            self.cfg
                .paths
                .get(i)
                .is_some_and(|p| p.interface.is_some() && p.local.is_none())
                && self.sockets[i].is_some()
        };
        let addresses = (0..self.sockets.len())
            .any(bound_only)
            .then(net::interface_addresses)
            .flatten();
        for i in 0..self.sockets.len() {
            let (Some(p), Some(all)) = (self.cfg.paths.get(i), &addresses) else {
                continue;
            };
            if let (Some(dev), None, true) = (&p.interface, p.local, self.sockets[i].is_some()) {
                if !net::has_address(all, dev, p.remote.is_ipv6()) {
                    let family = if p.remote.is_ipv6() { "IPv6" } else { "IPv4" };
                    let e = io::Error::new(
                        io::ErrorKind::AddrNotAvailable,
                        format!("interface {dev} has no {family} address"),
                    );
                    self.lose_socket(i, &e);
                }
            }
        }
        for i in 0..self.sockets.len() {
            if self.sockets[i].is_some() || self.admin_down[i] {
                continue;
            }
            let Some(p) = self.cfg.paths.get(i) else {
                continue;
            };
            let Ok(mut s) = net::open_path_socket(p) else {
                continue;
            };
            let Ok(state) = quinn_udp::UdpSocketState::new(quinn_udp::UdpSockRef::from(&s)) else {
                continue;
            };
            if self
                .poll
                .registry()
                .register(&mut s, Token(UDP_BASE + i), Interest::READABLE)
                .is_err()
            {
                continue;
            }
            eprintln!("braid: path `{}` has its socket", p.name);
            self.sockets[i] = Some(s);
            self.refresh_local_ports();
            self.gso[i] = Some(state);
            self.problems[i] = None;
            self.apply_path_state(now, i);
        }
    }

    /// Client: path `i`'s socket failed because its interface or address went away: close it,
    /// take the path out, and let [`Daemon::reopen`] try again.
    fn lose_socket(&mut self, i: usize, e: &io::Error) {
        if let Some(mut s) = self.sockets.get_mut(i).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut s);
            self.gso[i] = None;
            self.refresh_local_ports();
            let waiting = self
                .cfg
                .paths
                .get(i)
                .map_or_else(|| "its socket".to_owned(), net::waiting_for);
            self.problems[i] = Some(format!(
                "lost its socket ({e}); waiting for {waiting}, tried every second"
            ));
            eprintln!(
                "braid: path `{}` lost its socket ({e}): out of use until it can be opened again",
                self.names[i]
            );
            let now = self.now();
            self.apply_path_state(now, i);
        }
    }

    /// A server learns each client's `max_packet` in its handshake and makes the TUN MTU the
    /// largest of them: one client's small MTU does not shrink every other client's packets.
    /// A packet larger than its own client's bond carries is answered with ICMP "packet too
    /// big" or fragmented ([`Daemon::too_big`]), as a router on the path would.
    /// `smallest` and `largest` are the clients' largest packets ([`Daemon::peers_max_packets`]).
    fn adopt_mtu(&mut self, smallest: u32, largest: u32) {
        if self.cfg.role != Role::Responder {
            return;
        }
        if self.cfg.mtu_configured {
            self.warn_mtu_above_client(smallest);
            return;
        }
        let Ok(max) = u16::try_from(largest) else {
            return;
        };
        let source = if self.single() {
            "the client's, from the handshake"
        } else {
            "the largest of the clients', from their handshakes"
        };
        if max == self.mtu {
            // The default already matched (a client's paths of MTU 1500).
            if self.mtu_source != source {
                self.mtu_source = source.to_owned();
            }
            return;
        }
        if self.mtu_failed != Some(max) {
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
                self.mtu_source = source.to_owned();
            } else {
                // Tried once: not again every turn of the loop.
                eprintln!("braid: cannot set the MTU of {} to {max}", self.cfg.ifname);
                self.mtu_failed = Some(max);
            }
        }
    }

    /// Client: the resolver's turn ([`Resolver::turn`]): take what it found for the paths'
    /// host names, and ask again for those due.
    fn resolve_remotes(&mut self, now: Instant) {
        let (Some(r), Some(peer)) = (&mut self.resolver, self.peers.first_mut()) else {
            return;
        };
        let session = &peer.session;
        r.turn(
            now,
            &self.cfg.paths,
            &mut peer.addrs,
            |i| session.path_is_up(PathId(i as u8)),
            &mut self.warnings,
        );
    }

    /// The smallest and the largest of the peers' bonds' largest packets (their clients' TUN
    /// MTUs), from the handshakes; `None` before any.
    fn peers_max_packets(&self) -> Option<(u32, u32)> {
        self.peers
            .iter()
            .filter_map(|p| p.session.params().map(|b| b.max_packet))
            .fold(None, |range, m| {
                Some(range.map_or((m, m), |(lo, hi): (u32, u32)| (lo.min(m), hi.max(m))))
            })
    }

    /// Server: make the send buffer's datagram slots fit `largest`, the largest packet of any
    /// client's bond (jumbo-frame paths make packets of up to 65,535 bytes), which a server
    /// learns only from the handshakes. A slot too small would lose every packet larger than it.
    fn fit_datagram_room(&mut self, largest: u32) {
        let room = datagram_room(largest as usize);
        if room > self.room {
            self.room = room;
            self.out.resize(send_buffer_len(room), 0);
        }
    }

    /// Server with `interface.mtu` set: say once per value when it is above `smallest`, a
    /// client's largest packet (its packets above that are answered with ICMP "packet too big"
    /// or fragmented).
    fn warn_mtu_above_client(&mut self, smallest: u32) {
        let m = smallest;
        if u32::from(self.mtu) > m && self.mtu_warned != Some(m) {
            self.mtu_warned = Some(m);
            eprintln!(
                "braid: warning: interface.mtu = {} is above a client's largest packet, {m} (its TUN MTU): packets between the two are answered with ICMP \"packet too big\" or fragmented; set interface.mtu = {m}, or leave it out to follow the clients (docs/config.md, \"The TUN MTU\")",
                self.mtu
            );
        }
    }

    /// Client: put the tunnel addresses the server handed over (the proxy role's fixed
    /// address) on the TUN, once per new set.
    fn adopt_addresses(&mut self) {
        if self.cfg.role != Role::Initiator {
            return;
        }
        let ifname = self.cfg.ifname.clone();
        let now = self.now();
        let ip = |verb: &str, spec: &str| {
            std::process::Command::new("ip")
                .args(["addr", verb, spec, "dev", &ifname])
                .status()
                .is_ok_and(|s| s.success())
        };
        let mut changed = false;
        for p in &mut self.peers {
            let handed = p.session.handed_addresses().to_vec();
            if handed == p.applied || now < p.retry_addresses_at {
                continue;
            }
            // An address of its own in a family the server hands one of: the kernel may send
            // from it, and the server drops what does not come from what it handed.
            let own: Vec<String> = self
                .cfg
                .addresses
                .iter()
                .filter(|c| {
                    // Inside a handed prefix but not handed (another prefix may be one the
                    // server routes to this client).
                    handed.iter().any(|&(h, l)| {
                        config::Cidr { addr: h, prefix: l }.contains(c.addr) && h != c.addr
                    }) && !handed.iter().any(|(h, _)| *h == c.addr)
                })
                .map(ToString::to_string)
                .collect();
            if !own.is_empty() {
                let handed_text: Vec<String> =
                    handed.iter().map(|(a, l)| format!("{a}/{l}")).collect();
                self.warnings.say(now, "own_address", || {
                    format!(
                        "[interface] address {} is not what the server hands this client ({}): the server drops packets from it as spoofed; remove it from [interface] address and let the server hand the address",
                        own.join(", "),
                        handed_text.join(", ")
                    )
                });
            }
            // The new addresses first, then what the server no longer hands goes: the device
            // is never without an address of the family (the kernel would flush the routes
            // through it, and traffic for them would leave by the uplink meanwhile). What
            // failed is tried again in a second.
            let mut failed_v4 = false;
            let mut failed_v6 = false;
            for &(a, prefix) in &handed {
                if p.applied.contains(&(a, prefix)) {
                    continue;
                }
                let spec = format!("{a}/{prefix}");
                if ip("replace", &spec) {
                    eprintln!("braid: the server handed this end {spec}: on {ifname}");
                    p.applied.push((a, prefix));
                    changed = true;
                } else {
                    eprintln!(
                        "braid: cannot put the handed address {spec} on {ifname}; trying again"
                    );
                    *if a.is_ipv4() {
                        &mut failed_v4
                    } else {
                        &mut failed_v6
                    } = true;
                    p.retry_addresses_at = now + braid_proto::time::Duration::from_secs(1);
                }
            }
            // Not while the new address of the family failed to go on: the old one keeps the
            // device's routes.
            let mut gone = Vec::new();
            for &(a, prefix) in p.applied.iter().filter(|x| !handed.contains(x)) {
                if (a.is_ipv4() && failed_v4) || (a.is_ipv6() && failed_v6) {
                    continue;
                }
                let spec = format!("{a}/{prefix}");
                if ip("del", &spec) {
                    eprintln!("braid: the server no longer hands {spec}: removed from {ifname}");
                }
                gone.push((a, prefix));
                changed = true;
            }
            p.applied.retain(|x| !gone.contains(x));
            if !gone.is_empty() {
                // A secondary of the same prefix goes with the primary where the kernel does
                // not promote it (promote_secondaries could not be set): put the handed ones
                // back (`ip addr replace` leaves one that is there alone).
                for (a, prefix) in &p.applied {
                    ip("replace", &format!("{a}/{prefix}"));
                }
            }
            if p.applied.len() == handed.len() {
                // Same set, the server's order.
                p.applied = handed;
            }
        }
        // An address taken off the device may have taken routes through it along: put the
        // configured ones back, and try again each second while that fails.
        if changed || self.routes_retry.is_some_and(|(t, _)| now >= t) {
            match net::install_routes(&ifname, &self.cfg.routes) {
                Ok(()) => self.routes_retry = None,
                Err(e) => {
                    // Again after 1 s, then 2, 4... up to a minute.
                    let wait = self
                        .routes_retry
                        .map_or(braid_proto::time::Duration::from_secs(1), |(_, w)| {
                            (w * 2).min(braid_proto::time::Duration::from_secs(60))
                        });
                    self.routes_retry = Some((now + wait, wait));
                    self.warnings.say(now, "routes_again", || {
                        format!("after the handed addresses changed, {e}; trying again")
                    });
                }
            }
        }
    }

    /// Makes the status (and metrics) the control and metrics threads serve, for the readers
    /// that asked, up to request `answers`.
    fn publish(&mut self, answers: u64) {
        let st = self.status();
        let json = serde_json::to_string(&st).unwrap_or_default();
        let metrics = self.has_metrics.then(|| metrics::render(&st));
        self.board.publish(json, metrics, answers);
    }

    /// The peer a packet from the TUN goes to: the only one, or the client that owns its
    /// destination (its handed address, or a route behind it; the longest prefix wins).
    fn route(&self, packet: &[u8]) -> Option<usize> {
        if self.single() {
            return Some(0);
        }
        self.owner(packet_address(packet, false)?)
    }

    /// The client that owns `ip`: its handed address, or the longest of the clients' routes
    /// that holds it.
    /// A client may send only from what is routed to it: the source's owner must be client
    /// `k` (not another whose address a wider route of `k` covers), and never the server's own
    /// tunnel address. The one peer of `peer_public_key` (`catch_all`) may send from anywhere;
    /// callers check that first.
    fn may_send_from(&self, k: usize, src: IpAddr) -> bool {
        self.owner(src) == Some(k) && !self.cfg.addresses.iter().any(|a| a.addr == src)
    }

    fn owner(&self, ip: IpAddr) -> Option<usize> {
        self.owners.owner(ip)
    }

    /// Read from the TUN while the bond can take packets. With one peer, a packet the bond
    /// cannot take yet stays pending in the read batch with the rest of its batch behind it,
    /// and reading stops until it goes, so backpressure reaches the sender through the
    /// kernel's TUN queue. With several clients one full client must not stall the others:
    /// its packet is dropped (and counted by its session), as a router's full queue would.
    fn read_tun(&mut self) {
        let now = self.now();
        if !self.any_established() {
            // Nowhere to send: drain so the kernel queue holds nothing stale (counted as dropped).
            for _ in 0..MAX_TUN_READS {
                while let Some(p) = self.tun.pending() {
                    if let Some((k, j, dst)) = self.looped_path(p) {
                        self.tun.advance();
                        self.note_loop(now, k, j, dst);
                        continue;
                    }
                    match self.route(p) {
                        Some(i) => {
                            if self.peers[i].session.send(now, p) {
                                self.turns.busy(i, now);
                            } else {
                                self.turns.touch(i);
                            }
                        }
                        None if link_scoped(p) => self.link_local += 1,
                        None => self.unrouted += 1,
                    }
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
        let single = self.single();
        for _ in 0..MAX_TUN_READS {
            while let Some(p) = self.tun.pending() {
                let len = p.len();
                if let Some((k, j, dst)) = self.looped_path(p) {
                    self.tun.advance();
                    self.note_loop(now, k, j, dst);
                    continue;
                }
                let Some(i) = self.route(p) else {
                    if link_scoped(p) {
                        self.link_local += 1;
                    } else {
                        self.unrouted += 1;
                    }
                    self.tun.advance();
                    continue;
                };
                // Busy once it takes the packet (a packet for a client not connected, say from a
                // sweep of the handed addresses, makes none busy).
                self.turns.touch(i);
                // Larger than the bond carries: answered, or sent in fragments (with room for
                // the first, as for any packet, before the TUN packet is taken; the others
                // flush for theirs), never waited for in vain.
                let max = self.peers[i]
                    .session
                    .params()
                    .map(|b| b.max_packet as usize);
                if let Some(max) = max.filter(|&m| len > m) {
                    let verdict = braid_session::pmtu::too_big(p, max);
                    if let braid_session::pmtu::TooBig::Fragments(f) = &verdict {
                        let first = f.first().map_or(0, Vec::len);
                        if single && !self.room_after_flush(i, first) {
                            return;
                        }
                    }
                    self.tun.advance();
                    self.too_big(now, i, verdict);
                    continue;
                }
                if single && !self.room_after_flush(i, len) {
                    return;
                }
                if let Some(p) = self.tun.pending() {
                    if self.peers[i].session.send(now, p) {
                        self.turns.busy(i, now);
                    }
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

    /// Whether `packet`, read from the TUN device, is one of this end's own path datagrams
    /// (UDP from a path socket's port to that path's peer address), and of which path: the
    /// kernel routes the path's remote into the tunnel. Such a packet is dropped
    /// ([`Daemon::note_loop`]); forwarding it would nest the tunnel in itself.
    fn looped_path(&self, packet: &[u8]) -> Option<(usize, usize, SocketAddr)> {
        let (sport, dst) = udp_ends(packet)?;
        // Almost every packet leaves here: it is not from one of this end's sockets' ports.
        if !self.local_ports.contains(&sport) {
            return None;
        }
        // A dual-stack server records an IPv4 client as `::ffff:a.b.c.d`.
        let canonical = |a: SocketAddr| (a.ip().to_canonical(), a.port());
        let to = canonical(dst);
        for (k, peer) in self.peers.iter().enumerate() {
            for (j, a) in peer.addrs.iter().enumerate() {
                // A client has a socket per path; a server answers from its one.
                let sock = if self.cfg.role == Role::Initiator {
                    j
                } else {
                    0
                };
                if a.is_some_and(|a| canonical(a) == to)
                    && self.local_ports.get(sock) == Some(&sport)
                {
                    return Some((k, j, dst));
                }
            }
        }
        None
    }

    /// The local ports of the sockets, for [`Daemon::looped_path`] (0 where a path has none).
    fn refresh_local_ports(&mut self) {
        self.local_ports = local_ports(&self.sockets);
    }

    /// Count a packet of peer `k`'s path `j` that came back in through the TUN device, and
    /// explain the routing loop in the log (once a minute per peer and path). A client takes
    /// the path out of use for [`LOOP_RETRY`] (its answers from the server still come in, so
    /// they would keep it up while everything it sends is lost), then tries it again. A
    /// server's session finds the path one-way (the client hears nothing there) and takes it out
    /// for that client.
    fn note_loop(&mut self, now: Instant, k: usize, j: usize, dst: SocketAddr) {
        self.looped += 1;
        let client = self.cfg.role == Role::Initiator;
        if client && self.looped_out.get(j).is_some_and(Option::is_none) {
            self.looped_out[j] = Some((
                now + LOOP_RETRY,
                format!(
                    "its datagrams to {dst} are routed into {} itself; trying again every {} s",
                    self.cfg.ifname,
                    LOOP_RETRY.as_secs()
                ),
            ));
            self.apply_path_state(now, j);
        }
        let (names, ifname, peers) = (&self.names, &self.cfg.ifname, &self.peers);
        self.warnings.say_for(now, "routing_loop", k * braid_proto::path::MAX_PATHS + j, || {
            let name = names.get(j).cloned().unwrap_or_else(|| format!("path{j}"));
            let (whose, fix) = if client {
                (
                    String::new(),
                    format!("the path is out of use, tried again every {} s; add a host route for that address through the path's link (`ip route add ADDRESS/32 via GATEWAY dev LINK`), or bind the path to its link with `interface = \"LINK\"`, or take the address out of `[interface] routes`", LOOP_RETRY.as_secs()),
                )
            } else {
                (
                    format!(
                        " of {}",
                        peers.get(k).map_or("the client".to_owned(), |p| peer_label(
                            Role::Responder,
                            &p.cfg
                        ))
                    ),
                    "the client's address for this path must be reached through a real link: take it out of the routes into the tunnel (a [[client]]'s `routes`, `[interface] routes`), or add a host route for it through the link".to_owned(),
                )
            };
            format!(
                "path `{name}`{whose}: its datagrams to {dst} come back in through {ifname}: the kernel routes {} into the tunnel itself (dropped, counted as looped_packets); {fix}",
                dst.ip()
            )
        });
    }

    /// Whether peer `i`'s bond takes a packet of `len` bytes now, flushing what it has queued
    /// first if it would not: `false` leaves the packet waiting in the TUN batch (backpressure).
    fn room_after_flush(&mut self, i: usize, len: usize) -> bool {
        if self.peers[i].session.can_send(len) {
            return true;
        }
        self.flush();
        self.peers[i].session.can_send(len)
    }

    /// A packet from the TUN device larger than peer `i`'s bond carries, and
    /// `braid_session::pmtu`'s verdict on it: answer its sender with ICMP "packet too big"
    /// through the TUN device (at most [`TOO_BIG_ANSWERS_PER_S`] a second), or send it in IPv4
    /// fragments.
    fn too_big(&mut self, now: Instant, i: usize, verdict: braid_session::pmtu::TooBig) {
        use braid_session::pmtu::TooBig;
        self.too_big.packets += 1;
        match verdict {
            TooBig::Answer(icmp) => {
                let (rate, burst) = (TOO_BIG_ANSWERS_PER_S, TOO_BIG_ANSWERS_PER_S);
                if !self.too_big_answers.take(now, rate, burst) {
                    self.too_big.rate_limited += 1;
                    return;
                }
                if self.tun.queue_full() {
                    self.write_tun();
                }
                if let Some(b) = self.tun.queue() {
                    b.extend_from_slice(&icmp);
                    self.too_big.answered += 1;
                }
            }
            TooBig::Fragments(pieces) => {
                // Each piece gets room as any packet does (what is queued is flushed first);
                // a piece the bond still refuses (its queue full, no keys) ends the packet:
                // the rest would be of no use to the far end's reassembly.
                let single = self.single();
                let mut sent = 0;
                for f in &pieces {
                    if single && !self.room_after_flush(i, f.len()) {
                        break;
                    }
                    if !self.peers[i].session.send(now, f) {
                        break;
                    }
                    sent += 1;
                }
                if sent == pieces.len() {
                    self.too_big.fragmented += 1;
                } else {
                    self.too_big.fragments_dropped += 1;
                }
            }
            TooBig::Drop => self.too_big.dropped += 1,
        }
    }

    /// The peer a datagram is for: the only one; else the client whose key made a handshake
    /// initiation, or whose session owns a transport message's receiver index. `Err` names the
    /// key of an initiation from no client's key, if it could be read.
    fn claim(&self, datagram: &[u8]) -> Result<usize, Option<braid_session::PublicKey>> {
        if self.peers.len() == 1 {
            return Ok(0);
        }
        match braid_wire::outer::Outer::parse(datagram).map_err(|_| None)? {
            braid_wire::outer::Outer::HandshakeInit { .. } => {
                let key =
                    braid_session::initiator_key(&self.cfg.private_key, datagram).ok_or(None)?;
                self.peers
                    .iter()
                    .position(|p| p.cfg.public_key == key)
                    .ok_or(Some(key))
            }
            // The index's low bits name the session that drew it (`index_tag`): one look.
            braid_wire::outer::Outer::Transport { receiver_index, .. } => {
                let mask = 1u32
                    .checked_shl(u32::from(self.index_tag_bits))
                    .map_or(u32::MAX, |m| m - 1);
                let k = (receiver_index & mask) as usize;
                self.peers
                    .get(k)
                    .filter(|p| p.session.owns_index(receiver_index))
                    .map(|_| k)
                    .ok_or(None)
            }
            braid_wire::outer::Outer::HandshakeResponse { .. }
            | braid_wire::outer::Outer::CookieReply { .. } => Err(None),
        }
    }

    fn read_udp(&mut self, i: usize) {
        loop {
            let (Some(Some(sock)), Some(Some(state))) = (self.sockets.get(i), self.gso.get(i))
            else {
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
            // The datagrams of one receive are handled together: one clock reading for all.
            // Each buffer's own arrival is the kernel's receive timestamp (`SO_TIMESTAMPNS`,
            // which quinn-udp turns on), wall-clock time, taken back to the session's clock.
            let now = self.now();
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            for (k, m) in meta[..got].iter().enumerate() {
                let arrival = arrival_instant(now, wall, m.timestamp);
                let stride = if m.stride == 0 { m.len } else { m.stride };
                let base = k * RX_BUFFER_BYTES;
                let mut at = 0;
                while at < m.len.min(RX_BUFFER_BYTES) {
                    let end = (at + stride).min(m.len).min(RX_BUFFER_BYTES);
                    let datagram = &self.rx[base + at..base + end];
                    at = end;
                    if let Some(g) = &mut self.guard {
                        let known = || self.peers.iter().any(|p| p.addrs.contains(&Some(m.addr)));
                        match g.check(now, m.addr, known, datagram) {
                            Verdict::Pass => {}
                            Verdict::Drop(Refused::BadMac) => {
                                self.warnings.say(now, "bad_mac", || format!(
                                    "a handshake from {} is not meant for this server's key (its mac1): a client whose `peer_public_key` is not this server's public key (`braid pubkey` of its private key), or of a braid release before v5",
                                    m.addr
                                ));
                                continue;
                            }
                            Verdict::Drop(Refused::RateLimited) => continue,
                            Verdict::Reply(reply) => {
                                let sent =
                                    self.sockets[i].as_ref().map(|s| s.send_to(&reply, m.addr));
                                if !matches!(sent, Some(Ok(_))) {
                                    self.send_errors += 1;
                                }
                                continue;
                            }
                        }
                    }
                    let c = match self.claim(datagram) {
                        Ok(c) => c,
                        Err(stranger) => {
                            self.unclaimed += 1;
                            // A proxy: an initiation whose key is no `[[client]]`'s.
                            if let Some(key) = stranger {
                                self.warnings.say(now, "unknown_client", || format!(
                                    "a handshake from {} is from the key {}, which is no [[client]]'s `public_key`: add a [[client]] with it, or fix the client's key",
                                    m.addr,
                                    key.to_base64()
                                ));
                            }
                            continue;
                        }
                    };
                    // Busy only for data: a client's probes and their answers, or a replay, make it
                    // look at it this turn only.
                    self.turns.touch(c);
                    if !self.claimed.contains(&c) {
                        self.claimed.push(c);
                    }
                    let peer = &mut self.peers[c];
                    let restarts = peer.session.peer_restarts();
                    let data_before = peer.session.last_data();
                    let handled = peer
                        .session
                        .handle_datagram_at(now, arrival, arrived_on, datagram);
                    if peer.session.last_data() != data_before {
                        self.turns.busy(c, now);
                    }
                    if self.cfg.role == Role::Responder && peer.session.peer_restarts() > restarts {
                        // A new instance of the client: the addresses its predecessor's paths
                        // came from are no longer its (new ports): learnt anew, not "moved".
                        // (A client's are its paths' `remote`s, which a server's restart
                        // leaves as they are.)
                        peer.addrs.iter_mut().for_each(|a| *a = None);
                    }
                    // A handshake may bring new bond parameters (the client's largest packet).
                    if handled.is_ok()
                        && matches!(
                            datagram.get(1),
                            Some(&braid_wire::outer::kind::HANDSHAKE_INIT)
                                | Some(&braid_wire::outer::kind::HANDSHAKE_RESPONSE)
                        )
                    {
                        self.params_changed = true;
                    }
                    if let (Err(why), Role::Responder) = (handled, self.cfg.role) {
                        warn_drop(&mut self.warnings, now, why, m.addr);
                    }
                    if let Ok(path) = handled {
                        let p = path.index();
                        if self.cfg.role == Role::Initiator
                            && peer.addrs.get(p).copied().flatten() != Some(m.addr)
                        {
                            // The server answers from an address the path does not send to:
                            // if the path's remote is a host name, it may have moved.
                            if let Some(r) = &mut self.resolver {
                                r.stray(p, now, m.addr);
                            }
                        }
                        if self.cfg.role == Role::Responder {
                            if peer.addrs.len() <= p {
                                peer.addrs.resize(p + 1, None);
                            }
                            // Authenticated: learn (or follow) the client's address for this
                            // path; a move is said within the peer's path-line budget.
                            let old = peer.addrs[p].replace(m.addr);
                            if let Some(old) = old.filter(|o| *o != m.addr) {
                                let who = peer_label(Role::Responder, &peer.cfg);
                                let name = path_name(Role::Responder, &[], &peer.session, p);
                                peer.logged.lines += 1;
                                if peer.logged.lines <= PATH_LINES_PER_MINUTE {
                                    eprintln!(
                                        "braid: path `{name}` of {who} moved from {old} to {}: following it",
                                        m.addr
                                    );
                                } else if peer.logged.lines == PATH_LINES_PER_MINUTE + 1 {
                                    eprintln!("{}", paths_keep_changing(&who));
                                }
                            }
                        }
                    }
                }
            }
            self.deliver_claimed();
        }
    }

    /// Queue what the sessions of this turn deliver for the TUN, writing whenever a batch is
    /// full.
    fn deliver(&mut self) {
        let now = self.now();
        for i in 0.. {
            let Some(k) = self.turns.active_at(i) else {
                break;
            };
            self.deliver_peer(k, now);
        }
    }

    /// [`Daemon::deliver`] for the peers the last receive batch was for only: a proxy's other
    /// clients busy with data are delivered at the end of the turn.
    fn deliver_claimed(&mut self) {
        let now = self.now();
        let claimed = std::mem::take(&mut self.claimed);
        for &k in &claimed {
            self.deliver_peer(k, now);
        }
        self.claimed = claimed;
        self.claimed.clear();
    }

    /// Queue what peer `k`'s session delivers for the TUN (after handing it the pTCP segments
    /// that came), writing whenever a batch is full. A `[[client]]`'s packets must come from
    /// its own addresses.
    fn deliver_peer(&mut self, k: usize, now: Instant) {
        let p = &mut self.peers[k];
        p.ptcp.deliver(&mut p.session, now);
        while let Some(p) = self.peers[k].session.poll_deliver(now) {
            let own = self.peers[k].cfg.catch_all
                || packet_address(&p, true).is_some_and(|src| self.may_send_from(k, src));
            let peer = &mut self.peers[k];
            if !own && link_scoped(&p) {
                peer.link_local += 1;
                peer.session.recycle(p);
                continue;
            }
            if !own {
                peer.spoofed += 1;
                let src = packet_address(&p, true);
                peer.session.recycle(p);
                let cfg = &self.peers[k].cfg;
                self.warnings.say_for(now, "spoofed", k, || {
                    let who = peer_label(Role::Responder, cfg);
                    let handed: Vec<String> =
                        cfg.addresses.iter().map(ToString::to_string).collect();
                    format!(
                        "{who} sends from {}, not an address of its own (dropped, counted as spoofed_packets): its tunnel address must be one this server hands it ({}), and a LAN behind it must be in its [[client]] routes",
                        src.map_or("an unreadable source".into(), |a| a.to_string()),
                        handed.join(", ")
                    )
                });
                continue;
            }
            if self.tun.queue_full() {
                self.write_tun();
            }
            if let Some(b) = self.tun.queue() {
                b.extend_from_slice(&p);
            }
            self.peers[k].session.recycle(p);
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
        self.transmit_ptcp(now);
        for i in 0.. {
            let Some(k) = self.turns.active_at(i) else {
                break;
            };
            for p in 0..self.peers[k].session.paths() {
                let path = PathId(p as u8);
                let sock_index = sock_index(self.cfg.role, p);
                let peer = self.peers[k].addrs.get(p).copied().flatten();
                // Batch the path's datagrams for one GSO send: all segments the size of the
                // first, except a shorter last one (the kernel's rule for UDP_SEGMENT).
                let max_segments = gso::segments(&self.gso, sock_index);
                let mut used = 0usize;
                let mut segment = 0usize;
                let mut count = 0usize;
                loop {
                    let room = &mut self.out[used..used + self.room];
                    let Some(n) = self.peers[k].session.poll_transmit(now, path, room) else {
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
        let sent = gso::send(
            &self.sockets,
            &self.gso,
            sock_index,
            peer,
            &self.out[..len],
            segment,
            count,
        );
        match sent {
            Ok(()) => {}
            Err(None) => self.unaddressed += count as u64,
            Err(Some(e)) => {
                self.send_errors += count as u64;
                // The interface or the local address is gone. A socket bound to an address
                // taken off the host fails with "network unreachable" or "invalid argument"
                // rather than "address not available": look for the address itself.
                let local_gone = || {
                    self.cfg
                        .paths
                        .get(sock_index)
                        .and_then(|p| p.local)
                        .is_some_and(|a| !net::is_local_address(a))
                };
                if self.cfg.role == Role::Initiator && (net::is_absent(&e) || local_gone()) {
                    self.lose_socket(sock_index, &e);
                }
            }
        }
    }

    /// Seals the pTCP segments of every peer's connections and sends them on their paths,
    /// batched per path for one GSO send each (the connections alternate paths segment by
    /// segment, so a batch per path, not one for all).
    fn transmit_ptcp(&mut self, now: Instant) {
        let role = self.cfg.role;
        let (sockets, gso) = (&self.sockets, &self.gso);
        let (send_errors, unaddressed) = (&mut self.send_errors, &mut self.unaddressed);
        let batches = &mut self.ptcp_batches;
        // pTCP resends what it loses.
        let mut outcome = |n: usize, sent: gso::Sent| match sent {
            Ok(()) => {}
            Err(None) => *unaddressed += n as u64,
            Err(Some(_)) => *send_errors += n as u64,
        };
        for &k in self.turns.active() {
            let peer = &mut self.peers[k];
            if peer.ptcp.is_empty() && !peer.ptcp.owes_resets() {
                continue;
            }
            let route = gso::Route {
                sockets,
                gso,
                role,
                peers: &peer.addrs,
            };
            peer.ptcp
                .transmit(&mut peer.session, now, &mut self.ptcp_out, |path, d| {
                    batches.push(&route, path, d, &mut outcome)
                });
            batches.flush(&route, &mut outcome);
        }
    }

    /// Client with `[tcp] accelerate`: (re)install the nftables rules that redirect TCP for
    /// the tunnel's prefixes to the listener, whenever those prefixes change.
    fn install_tcp_rules(&mut self) {
        let (Role::Initiator, Some(listen_port)) =
            (self.cfg.role, self.cfg.tcp.as_ref().map(|t| t.listen_port))
        else {
            return;
        };
        // Redirect only to a server that said in its handshake response that it takes
        // accelerated TCP: one without `[tcp] accelerate` would drop the pTCP segments, and
        // every redirected connection would stall.
        let established = self.peers.iter().any(|p| p.session.is_established());
        let accepts = self.peers.iter().any(|p| p.session.peer_accepts_tcp());
        if established && self.accel.server_accepts != Some(accepts) {
            self.accel.server_accepts = Some(accepts);
            if !accepts {
                eprintln!(
                    "braid: the server does not take accelerated TCP (no [tcp] accelerate = true in its config): TCP rides the striped tunnel until it does"
                );
                self.remove_tcp_rules();
                self.accel.nft_rules.clear();
                self.accel.nft_handed = None;
            }
        }
        if self.accel.server_accepts != Some(true) {
            return;
        }
        // Only the handed addresses change at run time: nothing to do unless they did.
        let handed: Vec<(IpAddr, u8)> = self
            .peers
            .iter()
            .flat_map(|p| p.applied.iter().copied())
            .collect();
        if self.accel.nft_handed.as_ref() == Some(&handed) {
            return;
        }
        self.accel.nft_handed = Some(handed);
        let mut prefixes = self.cfg.addresses.clone();
        prefixes.extend(self.cfg.routes.iter().copied());
        let mut own: Vec<IpAddr> = self.cfg.addresses.iter().map(|a| a.addr).collect();
        for p in &self.peers {
            for &(addr, prefix) in &p.applied {
                prefixes.push(config::Cidr { addr, prefix });
                own.push(addr);
            }
        }
        if self.accel.listeners.len() < 2 {
            // No IPv6 listener: IPv6 TCP stays on the striped tunnel.
            prefixes.retain(|p| p.addr.is_ipv4());
        }
        let table = accel::nft_table(&self.cfg.ifname);
        let rules = accel::nft_ruleset(&table, &prefixes, &own, listen_port);
        if rules == self.accel.nft_rules {
            return;
        }
        match nft(&rules) {
            Ok(()) => {
                eprintln!(
                    "braid: TCP to the tunnel's prefixes is redirected to port {listen_port} and carried over pTCP (nftables table inet {table})"
                );
                self.accel.nft_table = Some(table);
            }
            Err(e) => eprintln!(
                "braid: cannot install the nftables rules of [tcp] accelerate ({e}); TCP rides the striped tunnel"
            ),
        }
        // Not tried again every turn when it failed; a change of prefixes tries again.
        self.accel.nft_rules = rules;
    }

    /// Removes the nftables table [`Daemon::install_tcp_rules`] or
    /// [`install_transparent_rules`] made, if any, and the latter's `ip` rules.
    fn remove_tcp_rules(&mut self) {
        let transparent = std::mem::take(&mut self.accel.transparent);
        let _lock = transparent.then(TransparentLock::take);
        if let Some(table) = self.accel.nft_table.take() {
            let _ = delete_nft_table(&table);
        }
        // The `ip` rules are the namespace's, not this daemon's: another transparent server
        // here may still need them.
        if transparent {
            release_transparent_ip_rules();
        }
    }

    /// TCP acceleration's turn: the client accepts redirected connections and opens a pTCP
    /// connection for each; the server reads each new connection's header and connects
    /// onward; every pair copies what it can.
    fn accelerate(&mut self, now: Instant) {
        if self.cfg.tcp.is_none() {
            return;
        }
        // Only the connections that took a segment or ran a timer can have changed state: a
        // paired one is pumped; one without a TCP side (done, refused, or the onward connect
        // failed) is forgotten once closed, after this turn's flush sent its last segments.
        // One that was already closed when it lost its TCP side is forgotten then
        // ([`Daemon::forget_if_closed`]).
        for i in 0.. {
            let Some(k) = self.turns.active_at(i) else {
                break;
            };
            for id in self.peers[k].ptcp.take_touched() {
                match self.accel.tokens.get(&(k, id)) {
                    Some(&token) => {
                        self.accel.ready.insert(token);
                    }
                    None => self.forget_if_closed(k, id),
                }
            }
        }
        self.accept_tcp(now);
        self.connect_onward(now);
        // Only the pairs something happened to: a pair waits on its socket's edge-triggered
        // events (bytes to read, room to write) and on its connection's segments and timers
        // (bytes that arrived, send-buffer room an acknowledgement made, a state change), and
        // each of those puts it in `ready`.
        let mut done = Vec::new();
        for token in std::mem::take(&mut self.accel.ready) {
            let Some(a) = self.accel.pairs.get_mut(&token) else {
                continue;
            };
            self.turns.busy(a.peer, now);
            let Some(c) = self.peers[a.peer].ptcp.conn_mut(a.pair.id()) else {
                done.push(token);
                continue;
            };
            if a.pair.pump(c, now) {
                done.push(token);
            }
        }
        for token in done {
            if let Some(mut a) = self.accel.pairs.remove(&token) {
                self.accel.tokens.remove(&(a.peer, a.pair.id()));
                // The connection leaves the table after a flush sent its last segments (the
                // ACK of the peer's FIN): now if it is closed, else when it closes.
                self.forget_if_closed(a.peer, a.pair.id());
                let _ = self.poll.registry().deregister(a.pair.tcp_mut());
            }
        }
    }

    /// The daemon stops: every accelerated connection ends with a reset, here towards its
    /// application (its socket closed with `SO_LINGER` 0) and at the peer (a pTCP reset on
    /// each path that is up, whose daemon then resets its side's socket). Closing the sockets
    /// as they are would send FINs, and an application reading to the end of the stream would
    /// take a truncated one for whole; and the peer's side would hang until a keepalive.
    /// Called before the redirect rules go: a socket closed after them may have its reset
    /// (or FIN) routed past the application, which then waits on a stream nobody holds. The
    /// listeners close first, so no connection lands while the others are reset, and the
    /// kernel resets those still waiting to be accepted.
    fn reset_accelerated(&mut self) {
        self.accel.listeners.clear();
        for a in self.accel.pairs.values() {
            a.pair.abort();
        }
        self.accel.pairs.clear();
        self.accel.tokens.clear();
        self.accel.pending.clear();
        let mut reset = 0;
        for k in 0..self.peers.len() {
            let p = &mut self.peers[k];
            if !p.ptcp.is_empty() {
                reset += p.ptcp.reset_all(&p.session);
                self.turns.touch(k);
            }
        }
        if reset > 0 {
            let now = self.now();
            self.transmit_ptcp(now);
            eprintln!("braid: stopping: {reset} accelerated TCP connection(s) reset at both ends");
        }
    }

    /// Counts connection `id` of peer `k` refused (it has no TCP side and no header pending)
    /// and closes it; it leaves the table once closed.
    fn refuse(&mut self, k: usize, id: u16, now: Instant) {
        self.accel.stats.refused += 1;
        self.turns.touch(k);
        if let Some(c) = self.peers[k].ptcp.conn_mut(id) {
            c.close(now);
        }
        self.forget_if_closed(k, id);
    }

    /// Connection `id` of peer `k`, which has no TCP side and no header pending, leaves the
    /// table after the next transmit if it is closed. Called when it loses its TCP side and
    /// whenever it is touched, so each one is visited at the turn it closes.
    fn forget_if_closed(&mut self, k: usize, id: u16) {
        if self.accel.tokens.contains_key(&(k, id)) || self.accel.pending.contains_key(&(k, id)) {
            return;
        }
        let p = &mut self.peers[k];
        if p.ptcp
            .conn(id)
            .is_some_and(|c| c.state() == braid_ptcp::State::Closed)
        {
            p.ptcp.remove_after_transmit(id);
            self.turns.touch(k);
        }
    }

    /// Registers `tcp` and pairs it with pTCP connection `id` of peer `peer`.
    fn adopt_tcp(&mut self, peer: usize, mut tcp: mio::net::TcpStream, id: u16, down: Vec<u8>) {
        let token = self.accel.next_token;
        self.accel.next_token += 1;
        if self
            .poll
            .registry()
            .register(
                &mut tcp,
                Token(token),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            let now = self.now();
            self.refuse(peer, id, now);
            return;
        }
        self.accel.stats.connections += 1;
        self.accel.tokens.insert((peer, id), token);
        // Pumped this turn: `down` may hold bytes already, and the socket's first events may
        // have come before it was registered.
        self.accel.ready.insert(token);
        self.accel.pairs.insert(
            token,
            Accelerated {
                peer,
                pair: Pair::with_down(tcp, id, down),
            },
        );
    }

    /// Client: accepts the redirected connections, each with its original destination, and
    /// opens a pTCP connection that starts with the [`accel::Header`].
    fn accept_tcp(&mut self, now: Instant) {
        for i in 0..self.accel.listeners.len() {
            self.accept_from(i, now);
        }
    }

    /// [`Daemon::accept_tcp`] for listener `i`.
    fn accept_from(&mut self, i: usize, now: Instant) {
        loop {
            let Some(l) = self.accel.listeners.get(i) else {
                return;
            };
            let (tcp, from) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            use std::os::fd::AsRawFd;
            let dst = net::original_dst(tcp.as_raw_fd(), from.is_ipv6());
            let Some(dst) = dst.ok().filter(|d| tcp.local_addr().ok() != Some(*d)) else {
                // Not redirected (someone connected to the port itself): nowhere to go.
                self.accel.stats.refused += 1;
                continue;
            };
            let peer = 0;
            let id = if self.accel.pairs.len() < MAX_TCP_PAIRS {
                let p = &mut self.peers[peer];
                if p.session.is_established() {
                    p.ptcp.connect(&p.session, now)
                } else {
                    None
                }
            } else {
                None
            };
            let Some(id) = id else {
                // Dropping the socket resets the connection: the application sees a refusal.
                self.accel.stats.refused += 1;
                continue;
            };
            let mut hdr = Vec::with_capacity(accel::Header::MAX_LEN);
            accel::Header {
                dst,
                src: Some(from),
            }
            .emit(&mut hdr);
            // A new connection's send buffer (megabytes) takes the header whole.
            let whole = self.peers[peer]
                .ptcp
                .conn_mut(id)
                .is_some_and(|c| c.write(&hdr) == hdr.len());
            if !whole {
                self.peers[peer].ptcp.remove(id);
                self.accel.stats.refused += 1;
                continue;
            }
            // What this end sends for it are the application's packets, from it to `dst`.
            self.classify_accel(peer, id, from, dst);
            self.adopt_tcp(peer, tcp, id, Vec::new());
        }
    }

    /// Server: takes the clients' new pTCP connections, reads each one's header and connects
    /// onward where [`accel::onward_allowed`]; refuses (closes) the rest.
    fn connect_onward(&mut self, now: Instant) {
        if self.cfg.role != Role::Responder {
            return;
        }
        for i in 0.. {
            let Some(k) = self.turns.active_at(i) else {
                break;
            };
            while let Some(id) = self.peers[k].ptcp.accept() {
                self.accel.pending.insert((k, id), Vec::new());
            }
        }
        let keys: Vec<(usize, u16)> = self.accel.pending.keys().copied().collect();
        for (k, id) in keys {
            self.turns.touch(k);
            let Some(c) = self.peers[k].ptcp.conn_mut(id) else {
                self.accel.pending.remove(&(k, id));
                continue;
            };
            let Some(buf) = self.accel.pending.get_mut(&(k, id)) else {
                continue;
            };
            // At most the header plus one read: bounded.
            let mut chunk = [0u8; 4096];
            if buf.len() < accel::Header::MAX_LEN {
                let n = c.read(&mut chunk);
                buf.extend_from_slice(&chunk[..n]);
            }
            let open = c.state() != braid_ptcp::State::Closed && !c.is_finished();
            let verdict = accel::Header::parse(buf);
            let (h, used) = match verdict {
                Ok(Some((h, used)))
                    if accel::onward_allowed(&self.cfg, h.dst)
                        && h.src.is_none_or(|s| self.source_allowed(k, s)) =>
                {
                    (h, used)
                }
                Ok(None) if open => continue,
                _ => {
                    // Malformed, a destination the tunnel would not carry, a source it would
                    // not take from this client, or closed early.
                    self.accel.pending.remove(&(k, id));
                    self.refuse(k, id, now);
                    continue;
                }
            };
            let rest = self
                .accel
                .pending
                .remove(&(k, id))
                .map(|mut b| b.split_off(used))
                .unwrap_or_default();
            let family_ok = |src: &SocketAddr| {
                if src.is_ipv4() {
                    self.accel.transparent
                } else {
                    self.accel.transparent_v6
                }
            };
            let tcp = match h.src.filter(family_ok) {
                Some(src) => {
                    let r = net::connect_transparent(src, h.dst, accel::SOCKET_MARK);
                    if r.is_ok() {
                        self.accel.stats.transparent += 1;
                    }
                    r
                }
                None => mio::net::TcpStream::connect(h.dst),
            };
            match tcp {
                Ok(tcp) => {
                    // What this end sends for it are the replies, from `dst` to the client's
                    // application (unknown to a version 1 header).
                    let to = h
                        .src
                        .unwrap_or_else(|| SocketAddr::new(net::unspecified(h.dst.is_ipv6()), 0));
                    self.classify_accel(k, id, h.dst, to);
                    self.adopt_tcp(k, tcp, id, rest)
                }
                Err(_) => self.refuse(k, id, now),
            }
        }
    }

    /// With `[qos]`: accelerated connection `id` of peer `k` queues its segments in the class
    /// its TCP packets from `src` to `dst` would have been in through the striped tunnel
    /// (`[[qos.class.filter]]` by addresses and ports; DSCP 0, since the application's DSCP
    /// does not reach a redirected socket).
    fn classify_accel(&mut self, k: usize, id: u16, src: SocketAddr, dst: SocketAddr) {
        if !self.accel.classify {
            return;
        }
        let headers = braid_qos::classifier::Headers {
            dscp: 0,
            proto: 6,
            src: src.ip(),
            dst: dst.ip(),
            src_port: Some(src.port()),
            dst_port: Some(dst.port()),
        };
        self.turns.touch(k);
        let p = &mut self.peers[k];
        if let Some(class) = p.session.ptcp_class(&headers) {
            p.ptcp.set_class(id, class);
            if p.ptcp.cap_rates(id, &p.session) {
                self.accel.stats.rate_capped += 1;
            }
        }
    }

    /// Server, `[tcp] transparent`: whether peer `k`'s accelerated connection may go onward
    /// from `src`, by the striped tunnel's own rule for a client's sources ([`Daemon::deliver`]:
    /// the one peer of `peer_public_key` any; a `[[client]]` only what routes to it and to no
    /// client more narrowly, never the server's tunnel address), never from an address of this
    /// host (its services must not see a connection from themselves; through the tunnel the
    /// kernel drops such packets as martians), and never from an address no host has
    /// ([`accel::transparent_source_plausible`]). Without transparency the source is not used.
    fn source_allowed(&self, k: usize, src: SocketAddr) -> bool {
        if !self.accel.transparent {
            return true;
        }
        let ip = src.ip();
        accel::transparent_source_plausible(src)
            && (self.peers[k].cfg.catch_all || self.may_send_from(k, ip))
            && !net::is_local_address(ip)
    }

    fn status(&self) -> Status {
        let cpu = net::cpu_time_s();
        let mut addresses: Vec<String> = self.cfg.addresses.iter().map(|a| a.to_string()).collect();
        for p in &self.peers {
            for (a, prefix) in &p.applied {
                let s = format!("{a}/{prefix}");
                if !addresses.contains(&s) {
                    addresses.push(s);
                }
            }
        }
        Status {
            interface: self.cfg.ifname.clone(),
            mtu: self.mtu,
            mtu_source: self.mtu_source.clone(),
            role: self.cfg.role,
            addresses,
            peers: self
                .peers
                .iter()
                .map(|p| {
                    let n = p.session.paths().max(self.names.len());
                    let names: Vec<String> = (0..n)
                        .map(|i| path_name(self.cfg.role, &self.names, &p.session, i))
                        .collect();
                    // Each path's name beside its figures too, not only in `paths`.
                    let committed = p.ptcp.committed_bytes();
                    let mut session = p.session.status();
                    for (ps, name) in session.paths.iter_mut().zip(&names) {
                        ps.name = Some(name.clone());
                    }
                    PeerStatus {
                        name: p.cfg.name.clone(),
                        public_key: p.cfg.public_key.to_base64(),
                        addresses: p.cfg.addresses.iter().map(|a| a.to_string()).collect(),
                        routes: p.cfg.routes.iter().map(|a| a.to_string()).collect(),
                        paths: (0..n)
                            .map(|i| {
                                PathInfo::new(
                                    names[i].clone(),
                                    p.addrs.get(i).copied().flatten(),
                                    self.cfg.paths.get(i),
                                    self.admin_down.get(i) == Some(&true),
                                    self.problems.get(i).cloned().flatten().or_else(|| {
                                        self.looped_out
                                            .get(i)
                                            .cloned()
                                            .flatten()
                                            .map(|(_, why)| why)
                                    }),
                                )
                            })
                            .collect(),
                        session,
                        spoofed_packets: p.spoofed,
                        link_local_packets: p.link_local,
                        ptcp_connections: p.ptcp.len(),
                        ptcp_unknown_conn: p.ptcp.unknown_conn(),
                        ptcp_unacked_bytes: committed.0,
                        ptcp_window_bytes: committed.1,
                    }
                })
                .collect(),
            unrouted_packets: self.unrouted,
            link_local_packets: self.link_local,
            looped_packets: self.looped,
            unclaimed_datagrams: self.unclaimed,
            too_big: self.too_big.clone(),
            handshake_guard: self.guard.as_ref().map(|g| GuardStatus {
                under_load: g.under_load(self.now()),
                counters: g.counters(),
            }),
            tun_offload: self.tun.offload(),
            tun_rx_packets: self.tun_rx,
            tun_rx_errors: self.tun_rx_errors,
            tun_tx_packets: self.tun_tx,
            tun_tx_errors: self.tun_tx_errors,
            udp_send_errors: self.send_errors,
            udp_unaddressed: self.unaddressed,
            tcp: self.cfg.tcp.as_ref().map(|_| TcpStatus {
                active: self.accel.pairs.len() as u64,
                server_accepts: self.cfg.role == Role::Responder
                    || self.accel.server_accepts == Some(true),
                ..self.accel.stats.clone()
            }),
            uptime_s: self.clock.elapsed().as_secs_f64(),
            cpu_user_s: cpu.0,
            cpu_system_s: cpu.1,
            event_loop: self.loop_timing.clone(),
        }
    }
}

/// The session-clock time at which a datagram reached the host, from its kernel receive
/// timestamp `stamp` (wall-clock time since the Unix epoch; `None` without one), given `now` on
/// the session's clock and `wall`, the wall clock read at the same moment. A stamp from the
/// future (the wall clock stepped back) is `now`; one older than [`MAX_RECEIVE_AGE`] (the
/// wall clock stepped forward, or the daemon stalled that long) is taken as that old.
fn arrival_instant(now: Instant, wall: StdDuration, stamp: Option<StdDuration>) -> Instant {
    let age = stamp.map_or(StdDuration::ZERO, |t| wall.saturating_sub(t));
    let age_ns = u64::try_from(age.min(MAX_RECEIVE_AGE).as_nanos()).unwrap_or(u64::MAX);
    Instant::from_nanos(now.as_nanos().saturating_sub(age_ns))
}

/// The oldest a datagram's kernel receive timestamp is believed ([`arrival_instant`]).
const MAX_RECEIVE_AGE: StdDuration = StdDuration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_timestamp_dates_the_arrival_back_on_the_session_clock() {
        let now = Instant::from_nanos(5_000_000_000);
        let wall = StdDuration::from_secs(1_800_000_000);
        let ms = StdDuration::from_millis;
        // Read 3 ms after it came in.
        assert_eq!(
            arrival_instant(now, wall, Some(wall - ms(3))),
            Instant::from_nanos(4_997_000_000)
        );
        // No timestamp, or one from the future (the wall clock stepped back): now.
        assert_eq!(arrival_instant(now, wall, None), now);
        assert_eq!(arrival_instant(now, wall, Some(wall + ms(50))), now);
        // The wall clock stepped forward an hour: at most a second back.
        assert_eq!(
            arrival_instant(now, wall, Some(wall - StdDuration::from_secs(3600))),
            Instant::from_nanos(4_000_000_000)
        );
        // Early in the session's life the clock cannot go below its epoch.
        assert_eq!(
            arrival_instant(Instant::from_nanos(1_000), wall, Some(wall - ms(3))),
            Instant::ZERO
        );
    }

    #[test]
    fn the_kernels_link_local_chatter_is_told_apart_from_spoofing() {
        let v6 = |src: &str, dst: &str| {
            let mut p = vec![0u8; 40];
            p[0] = 0x60;
            let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
                (src.parse().unwrap(), dst.parse().unwrap());
            p[8..24].copy_from_slice(&s.octets());
            p[24..40].copy_from_slice(&d.octets());
            p
        };
        let v4 = |src: [u8; 4], dst: [u8; 4]| {
            let mut p = vec![0u8; 20];
            p[0] = 0x45;
            p[12..16].copy_from_slice(&src);
            p[16..20].copy_from_slice(&dst);
            p
        };
        // A router solicitation, an MLD report before an address, IGMP, a link-local source.
        assert!(link_scoped(&v6("fe80::1", "ff02::2")));
        assert!(link_scoped(&v6("::", "ff02::16")));
        assert!(link_scoped(&v4([10, 77, 0, 2], [224, 0, 0, 22])));
        assert!(link_scoped(&v4([169, 254, 3, 4], [10, 77, 0, 1])));
        assert!(link_scoped(&v6("febf::1", "fd77::1")));
        // What a client may really spoof, and site-wide multicast, are not.
        assert!(!link_scoped(&v6("fd77::9", "fd77::1")));
        assert!(!link_scoped(&v6("fd77::2", "ff05::2")));
        assert!(!link_scoped(&v6("fec0::1", "fd77::1")));
        assert!(!link_scoped(&v4([10, 77, 0, 9], [10, 77, 0, 1])));
        assert!(!link_scoped(&v4([10, 77, 0, 2], [224, 0, 1, 1])));
        assert!(!link_scoped(&[0x45]));
    }

    #[test]
    fn udp_ends_reads_a_udp_packets_source_port_and_destination() {
        // IPv4 with options (IHL 6), UDP 40000 -> 10.201.1.2:7000.
        let mut v4 = vec![0u8; 24 + 8];
        v4[0] = 0x46;
        v4[9] = 17;
        v4[16..20].copy_from_slice(&[10, 201, 1, 2]);
        v4[24..26].copy_from_slice(&40000u16.to_be_bytes());
        v4[26..28].copy_from_slice(&7000u16.to_be_bytes());
        assert_eq!(
            udp_ends(&v4),
            Some((40000, "10.201.1.2:7000".parse().unwrap()))
        );
        // TCP, and a packet cut short: not UDP ends.
        let mut tcp = v4.clone();
        tcp[9] = 6;
        assert_eq!(udp_ends(&tcp), None);
        assert_eq!(udp_ends(&v4[..26]), None);
        // IPv6, UDP as the first next header.
        let mut v6 = vec![0u8; 40 + 8];
        v6[0] = 0x60;
        v6[6] = 17;
        v6[24..40].copy_from_slice(
            &"2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v6[40..42].copy_from_slice(&5u16.to_be_bytes());
        v6[42..44].copy_from_slice(&7000u16.to_be_bytes());
        assert_eq!(
            udp_ends(&v6),
            Some((5, "[2001:db8::1]:7000".parse().unwrap()))
        );
        assert_eq!(udp_ends(&[]), None);
        assert_eq!(udp_ends(&[0x45]), None);
        // A later fragment, and a header length below 20 bytes: no ports to read.
        let mut later = v4.clone();
        later[6..8].copy_from_slice(&185u16.to_be_bytes());
        assert_eq!(udp_ends(&later), None);
        let mut short = v4.clone();
        short[0] = 0x44;
        assert_eq!(udp_ends(&short), None);
    }
}

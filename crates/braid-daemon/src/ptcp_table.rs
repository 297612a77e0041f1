//! The socket-free part of hosting pTCP connections over a [`braid_session::Session`]: the
//! connection table both [`crate::ptcp_node::PtcpNode`] (`braid send/recv/forward`) and the
//! daemon (`braid up`) drive.
//!
//! A [`PtcpTable`] holds the [`StripedConnection`]s of one session, told apart by a connection
//! id: it opens them ([`PtcpTable::connect`]), accepts a peer's SYNs when it is the session's
//! responder and accepting, remembers retired ids so a late duplicate SYN does not open one
//! again, hands the session's arriving segments to their connections ([`PtcpTable::deliver`]),
//! and seals what the connections send with [`Session::seal_ptcp`] on the micro-flow's path
//! ([`PtcpTable::transmit`]). The caller owns the sockets and the clock.
//!
//! # Polling
//! After feeding datagrams to the session call [`PtcpTable::deliver`]; when
//! [`PtcpTable::poll_timeout`] has passed, [`PtcpTable::handle_timeout`]; after the application
//! read or wrote, [`PtcpTable::transmit`]. Time never goes backwards.

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::wire::{Flags, Segment};
use braid_ptcp::{CongestionAlgorithm, StripedConnection};
use braid_qos::ClassId;
use braid_session::params::WIRE_OVERHEAD_BYTES;
use braid_session::{Role, Session};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Connections a table holds at most; SYNs for more are dropped (not reset: the peer tries
/// again) and counted.
pub const MAX_CONNECTIONS: usize = 256;

/// What a connection may always commit in each direction, whatever the others hold of the
/// table's memory budget ([`TableOptions::memory_budget`]): Linux's default receive buffer.
pub const MEMORY_FLOOR: u64 = 128 << 10;

/// What a grant lets a connection grow by at least, beyond what it holds
/// ([`PtcpTable::grant`]): the first receive window autotuning offers.
pub const GRANT_HEADROOM: u64 = braid_ptcp::recv_buffer::AUTOTUNE_INITIAL_WINDOW;

/// The default of [`TableOptions::memory_budget`]: 256 MiB each way.
pub const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

/// Resets a table sends at most per [`PtcpTable::transmit`].
const MAX_RESETS: usize = 64;

/// Ids of removed connections a table remembers, so that a late duplicate SYN of one does not
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
/// is bound less data): 76 bytes over IPv4, 96 over IPv6.
pub fn ptcp_overhead(ipv6: bool) -> usize {
    let ip = if ipv6 { 40 } else { 20 };
    ip + 8 + Session::PTCP_OVERHEAD + braid_ptcp::wire::DATA_HEADER_LEN
}

/// The payload bytes per second of full segments of `mss` bytes that cost the `[qos]`
/// shaper `wire_bps` bits per second: each also carries a pTCP data header and
/// [`WIRE_OVERHEAD_BYTES`]; at least 1 (a cap of 0 would be no cap).
pub fn payload_rate(wire_bps: u64, mss: u64) -> u64 {
    let per_segment =
        mss + braid_ptcp::wire::DATA_HEADER_LEN as u64 + u64::from(WIRE_OVERHEAD_BYTES);
    let bytes = u128::from(wire_bps) / 8 * u128::from(mss) / u128::from(per_segment);
    u64::try_from(bytes).unwrap_or(u64::MAX).max(1)
}

/// The MSS of every micro-flow on paths of MTU `mtu` (at least 256 bytes).
pub fn mss_for(mtu: u16, ipv6: bool) -> u64 {
    usize::from(mtu)
        .saturating_sub(ptcp_overhead(ipv6))
        .max(256) as u64
}

/// The MSS of every micro-flow for a config: from its paths' smallest MTU (1500 for a server,
/// which has none), over IPv6 if any path or the listening address is.
pub fn mss_of(cfg: &crate::config::Config) -> u64 {
    let ipv6 =
        cfg.paths.iter().any(|p| p.remote.is_ipv6()) || cfg.listen.is_some_and(|l| l.is_ipv6());
    let mtu = cfg.paths.iter().map(|p| p.mtu).min().unwrap_or(1500);
    mss_for(mtu, ipv6)
}

/// The memory budget of a config's tables: `[tcp] memory_mib`, or
/// [`DEFAULT_MEMORY_BUDGET`] without a `[tcp]` table.
pub fn memory_budget_of(cfg: &crate::config::Config) -> u64 {
    cfg.tcp
        .as_ref()
        .map_or(DEFAULT_MEMORY_BUDGET, |t| t.memory_budget)
}

/// The default of a [`SharedBudget`] in the daemon (`[tcp] total_memory_mib`): 1 GiB each way.
pub const DEFAULT_TOTAL_MEMORY_BUDGET: u64 = 1 << 30;

/// A memory budget several tables draw on (a server's, one table per client, `[tcp]
/// total_memory_mib`), beside each table's own ([`TableOptions::memory_budget`]): what all
/// their connections together may commit in each direction. A connection grows only into
/// what the connections of every table sharing it leave, and always to [`MEMORY_FLOOR`], so
/// the tables together commit at most this plus [`MEMORY_FLOOR`] per connection each way,
/// however many clients there are. First come, first served, as within a table.
#[derive(Debug)]
pub struct SharedBudget {
    budget: u64,
    /// What the tables' connections commit, as their tables last counted.
    sent: AtomicU64,
    offered: AtomicU64,
}

impl SharedBudget {
    /// A budget of `budget` bytes each way, nothing committed yet.
    pub fn new(budget: u64) -> Arc<SharedBudget> {
        Arc::new(SharedBudget {
            budget,
            sent: AtomicU64::new(0),
            offered: AtomicU64::new(0),
        })
    }

    /// The budget, bytes each way.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// What the tables' connections commit, as their tables last counted: (sent and
    /// unacknowledged, receive windows offered).
    pub fn committed(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.offered.load(Ordering::Relaxed),
        )
    }

    /// A table's count moved from `old` to `new`.
    fn moved(&self, old: (u64, u64), new: (u64, u64)) {
        for (total, old, new) in [(&self.sent, old.0, new.0), (&self.offered, old.1, new.1)] {
            if new >= old {
                total.fetch_add(new - old, Ordering::Relaxed);
            } else {
                let before = total.fetch_sub(old - new, Ordering::Relaxed);
                debug_assert!(
                    before >= old - new,
                    "a shared budget's count went below zero"
                );
            }
        }
    }
}

/// How a table runs its connections.
#[derive(Clone, Debug)]
pub struct TableOptions {
    /// Congestion control of every micro-flow (pTCP paper section 3.2: TCP-v's alone).
    pub congestion: CongestionAlgorithm,
    /// Receive buffer of each connection, bytes; `None`: from the paths (see
    /// [`PtcpTable::connection_config`]).
    pub receive_buffer_bytes: Option<u64>,
    /// The MSS of every micro-flow, from the paths' MTUs ([`mss_for`]).
    pub mss: u64,
    /// Responder: open a connection for a peer's SYN. A table that does not accept drops
    /// and counts every segment for a connection it does not hold.
    pub accept: bool,
    /// What all the connections together may commit in each direction, in bytes: data
    /// written and not yet acknowledged, and receive windows offered (what the peer may make
    /// this end hold). A connection grows only into what the others leave of it, and always to
    /// [`MEMORY_FLOOR`], so the table commits at most this plus [`MEMORY_FLOOR`] per
    /// connection each way, whatever the peer declares or sends (the buffers themselves follow
    /// the paths' rates, which the peer declares).
    pub memory_budget: u64,
}

/// The pTCP connections of one session. See the module docs.
pub struct PtcpTable {
    role: Role,
    options: TableOptions,
    conns: BTreeMap<u16, StripedConnection>,
    accepted: VecDeque<u16>,
    /// Recently removed connection ids (at most [`RETIRED_IDS`]).
    retired: VecDeque<u16>,
    /// Connections of a peer instance before its last restart, still held (their TCP sides
    /// finishing): their ids are not retired when they go, since the new instance may name
    /// them ([`PtcpTable::deliver`]).
    old_instance: BTreeSet<u16>,
    next_conn: u16,
    /// Connections to forget once their last segments went out ([`PtcpTable::transmit`]).
    leaving: Vec<u16>,
    unknown_conn: u64,
    /// Segments the session would not seal (no keys, a path it lacks): pTCP resends them.
    unsealed: u64,
    /// Connections that took a segment or ran a timer since [`PtcpTable::take_touched`].
    touched: BTreeSet<u16>,
    /// Connections that took a segment or ran a timer since they were last granted
    /// ([`PtcpTable::grant_touched`]); unlike `touched`, not left to the driver to drain.
    to_grant: BTreeSet<u16>,
    /// Resets owed to the peer for segments of connections this end does not hold: (id,
    /// the path the segment came on). At most [`MAX_RESETS`].
    resets: Vec<(u16, PathId)>,
    resets_sent: u64,
    /// The session's count of peer restarts when [`PtcpTable::deliver`] last looked.
    peer_restarts: Option<u64>,
    /// The `[qos]` class each connection's segments queue in ([`PtcpTable::set_class`]).
    classes: BTreeMap<u16, ClassId>,
    /// What each connection is counted at, (sent and unacknowledged, receive window offered),
    /// and the sums ([`TableOptions::memory_budget`], [`PtcpTable::settle`]).
    committed: BTreeMap<u16, (u64, u64)>,
    committed_total: (u64, u64),
    /// The limits each connection was last granted ([`StripedConnection::set_memory_limits`]):
    /// it is counted at them, or at what it holds if that is more.
    limits: BTreeMap<u16, (u64, u64)>,
    /// The budget this table shares with others ([`PtcpTable::with_shared_budget`]).
    shared: Option<Arc<SharedBudget>>,
}

impl Drop for PtcpTable {
    /// What the connections committed leaves the shared budget with them.
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.moved(self.committed_total, (0, 0));
        }
    }
}

impl PtcpTable {
    /// An empty table for the session end `role`.
    pub fn new(role: Role, options: TableOptions) -> PtcpTable {
        PtcpTable {
            role,
            options,
            conns: BTreeMap::new(),
            accepted: VecDeque::new(),
            retired: VecDeque::new(),
            old_instance: BTreeSet::new(),
            next_conn: 1,
            leaving: Vec::new(),
            unknown_conn: 0,
            unsealed: 0,
            touched: BTreeSet::new(),
            to_grant: BTreeSet::new(),
            resets: Vec::new(),
            resets_sent: 0,
            peer_restarts: None,
            classes: BTreeMap::new(),
            committed: BTreeMap::new(),
            committed_total: (0, 0),
            limits: BTreeMap::new(),
            shared: None,
        }
    }

    /// The table with its connections drawing on `shared` too, beside its own
    /// [`TableOptions::memory_budget`]: a connection grows only into what both leave.
    #[must_use]
    pub fn with_shared_budget(mut self, shared: Arc<SharedBudget>) -> PtcpTable {
        if let Some(old) = &self.shared {
            old.moved(self.committed_total, (0, 0));
        }
        shared.moved((0, 0), self.committed_total);
        self.shared = Some(shared);
        self
    }

    /// Counts again what connection `id` commits ([`TableOptions::memory_budget`]): what it
    /// holds, or the limits it was granted if they are more, since it may grow to them
    /// without this table's knowing (a write, a window its autotuning widens). A connection no
    /// longer held commits nothing.
    fn settle(&mut self, id: u16) {
        let limits = self.limits.get(&id).copied().unwrap_or((0, 0));
        let now = self.conns.get(&id).map(|c| {
            (
                c.unacked_bytes().max(limits.0),
                c.receive_window_bytes().max(limits.1),
            )
        });
        if now.is_none() {
            self.limits.remove(&id);
        }
        let old = match now {
            Some(v) => self.committed.insert(id, v),
            None => self.committed.remove(&id),
        }
        .unwrap_or((0, 0));
        let new = now.unwrap_or((0, 0));
        let t = &mut self.committed_total;
        t.0 = t.0 - old.0 + new.0;
        t.1 = t.1 - old.1 + new.1;
        if let Some(shared) = &self.shared {
            shared.moved(old, new);
        }
    }

    /// [`PtcpTable::grant`] for every connection that took a segment or ran a timer: acks
    /// free what was sent, an abort frees everything, and a window that grew may grow on.
    fn grant_touched(&mut self) {
        for id in std::mem::take(&mut self.to_grant) {
            self.grant(id);
        }
    }

    /// Lets connection `id` grow into what the others leave of the memory budget, and of the
    /// shared one if any (at least [`MEMORY_FLOOR`]), and counts what it then commits: a
    /// larger limit may widen its receive window at once.
    ///
    /// A connection is counted at its limits ([`PtcpTable::settle`]), so a limit is what it
    /// may grow to before its next grant: twice what it holds, or that and
    /// [`GRANT_HEADROOM`], within its buffers and by at most half of the free room. (Limits
    /// as wide as the budget let two connections, or two tables sharing a budget, each grow
    /// into the same free room between their grants.) Grants come at every
    /// [`PtcpTable::conn_mut`] and whenever the connection takes a segment or runs a timer,
    /// so a busy connection doubles many times a round trip.
    fn grant(&mut self, id: u16) {
        let Some(c) = self.conns.get(&id) else {
            self.settle(id);
            return;
        };
        let held = (c.unacked_bytes(), c.receive_window_bytes());
        let capacity = (c.send_buffer_capacity(), c.receive_buffer_capacity());
        // A direction that is done grows no more: the send side once `close` was called or
        // the connection ended, the receive side once the peer's stream was read to its end
        // or the connection ended. (Not one side for the other's end: a server may still be
        // answering a client that half-closed, and that client still reading the answer.)
        let state = c.state();
        let ended = c.was_aborted() || state == braid_ptcp::State::Closed;
        let done = (
            ended || state == braid_ptcp::State::Closing,
            ended || c.is_finished(),
        );
        let own = self.committed.get(&id).copied().unwrap_or((0, 0));
        let left = |budget: u64, (sent, offered): (u64, u64)| {
            (
                budget.saturating_sub(sent.saturating_sub(own.0)),
                budget.saturating_sub(offered.saturating_sub(own.1)),
            )
        };
        let mut room = left(self.options.memory_budget, self.committed_total);
        if let Some(shared) = &self.shared {
            let wide = left(shared.budget, shared.committed());
            room = (room.0.min(wide.0), room.1.min(wide.1));
        }
        // Room to grow by what it holds (at least GRANT_HEADROOM), but never past its buffer
        // nor by more than half of what is free: the headroom is counted, and a grant that
        // took all the free room would keep it from connections that come later (every grant
        // of a steady connection would give it the same again).
        let limit = |held: u64, room: u64, capacity: u64, done: bool| {
            let free = room.saturating_sub(held);
            let headroom = if done {
                0
            } else {
                held.max(GRANT_HEADROOM).min(free / 2)
            };
            (held + headroom).min(capacity).min(room).max(MEMORY_FLOOR)
        };
        let limits = (
            limit(held.0, room.0, capacity.0, done.0),
            limit(held.1, room.1, capacity.1, done.1),
        );
        if let Some(c) = self.conns.get_mut(&id) {
            c.set_memory_limits(limits.0, limits.1);
        }
        self.limits.insert(id, limits);
        self.settle(id);
    }

    /// What the connections are counted at, in all: their limits, or what they hold where
    /// that is more ([`PtcpTable::settle`]). At least [`PtcpTable::committed_bytes`], and
    /// within the budget plus [`MEMORY_FLOOR`] per connection.
    pub fn counted_bytes(&self) -> (u64, u64) {
        self.committed_total
    }

    /// What the connections commit now, in all: (sent and unacknowledged, receive windows
    /// offered) ([`TableOptions::memory_budget`]).
    pub fn committed_bytes(&self) -> (u64, u64) {
        self.conns.values().fold((0, 0), |(s, r), c| {
            (s + c.unacked_bytes(), r + c.receive_window_bytes())
        })
    }

    /// From now on connection `id`'s segments queue in the session's `[qos]` shaper, in
    /// `class` ([`Session::ptcp_class`]), instead of going out at once.
    pub fn set_class(&mut self, id: u16, class: ClassId) {
        if self.conns.contains_key(&id) {
            self.classes.insert(id, class);
        }
    }

    /// Connection `id`'s flows send no faster than each path's cap
    /// ([`Session::ptcp_rate_cap_bps`]: the path's rate, configured or PET's estimate, at the
    /// `[qos]` shaper's fraction), so that one flow's start-up cannot fill its path's own queue while the
    /// shaper, which bounds only the bond's total, lets its segments through. The cap is in
    /// wire bits per second; a flow's is in payload bytes, at the shaper's cost of a full
    /// segment (its data header and [`WIRE_OVERHEAD_BYTES`] beyond the MSS).
    /// Returns whether any path was capped.
    pub fn cap_rates(&mut self, id: u16, session: &Session) -> bool {
        let mss = self.options.mss;
        let Some(conn) = self.conns.get_mut(&id) else {
            return false;
        };
        let mut capped = false;
        for i in 0..session.paths() {
            let path = PathId(i as u8);
            let cap = session
                .ptcp_rate_cap_bps(path)
                .map(|bps| payload_rate(bps, mss));
            capped |= cap.is_some();
            conn.set_rate_cap(path, cap);
        }
        capped
    }

    /// [`PtcpTable::cap_rates`] again for every connection that queues in `[qos]`: on a PET
    /// bond the caps follow PET's estimates, which move (and start as PET's guesses). The
    /// daemon calls it every second.
    pub fn refresh_rate_caps(&mut self, session: &Session) {
        let ids: Vec<u16> = self.classes.keys().copied().collect();
        for id in ids {
            self.cap_rates(id, session);
        }
    }

    /// Segments for a connection this table does not have (and that were no SYN it could
    /// accept), dropped.
    pub fn unknown_conn(&self) -> u64 {
        self.unknown_conn
    }

    /// Resets sent: answers to segments of connections this end does not hold.
    pub fn resets_sent(&self) -> u64 {
        self.resets_sent
    }

    /// Whether the table has resets to send ([`PtcpTable::transmit`] sends them) though it may
    /// hold no connection.
    pub fn owes_resets(&self) -> bool {
        !self.resets.is_empty()
    }

    /// The table with its first connection id `id` (not 0). A daemon starts from a random id,
    /// as TCP from a random sequence number, so that a restarted end does not reuse the ids
    /// of connections its peer still holds.
    #[must_use]
    pub fn with_first_id(mut self, id: u16) -> PtcpTable {
        self.next_conn = id.max(1);
        self
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether no connection is held.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
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
    pub fn connection_config(&self, session: &Session) -> braid_ptcp::Config {
        let mut c = braid_ptcp::Config::default();
        c.flow.congestion.algorithm = self.options.congestion;
        c.flow.congestion.mss = self.options.mss;
        c.sack_blocks_with_data = SACK_BLOCKS_WITH_DATA;
        let rates: Vec<u64> = session
            .params()
            .map(|p| p.rates_bps.clone())
            .unwrap_or_default();
        let rtt_max = session
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
        // A window offered counts against the memory budget: an idle connection should not
        // hold one of many megabytes. The window widens each loaded round trip to twice
        // what arrived in it.
        c.autotune_receive_window = Some(loaded);
        c
    }

    /// Initiator: opens a pTCP connection with one micro-flow on each path of the session and
    /// returns its id. `None` before the session has its paths, on a responder, or when the
    /// table is full.
    pub fn connect(&mut self, session: &Session, now: Instant) -> Option<u16> {
        let n = session.paths();
        if n == 0 || self.role != Role::Initiator || self.conns.len() >= MAX_CONNECTIONS {
            return None;
        }
        let paths: Vec<PathId> = (0..n.min(braid_ptcp::MAX_FLOWS))
            .map(|i| PathId(i as u8))
            .collect();
        let mut id = self.next_conn;
        while self.conns.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        self.next_conn = id.wrapping_add(1).max(1);
        let conn = StripedConnection::connect(self.connection_config(session), now, &paths);
        self.conns.insert(id, conn);
        self.grant(id);
        Some(id)
    }

    /// Responder: the next connection the peer opened, if any.
    pub fn accept(&mut self) -> Option<u16> {
        self.accepted.pop_front()
    }

    /// A connection.
    pub fn conn(&self, id: u16) -> Option<&StripedConnection> {
        self.conns.get(&id)
    }

    /// A connection, to read, write or close. It may grow only into what the other
    /// connections leave of the memory budget ([`TableOptions::memory_budget`]): to the
    /// limits it is granted now, at which it is counted, so nothing it does with the borrow
    /// takes it past its count.
    pub fn conn_mut(&mut self, id: u16) -> Option<&mut StripedConnection> {
        if !self.conns.contains_key(&id) {
            return None;
        }
        self.grant(id);
        self.conns.get_mut(&id)
    }

    /// The ids of the connections held.
    pub fn conn_ids(&self) -> Vec<u16> {
        self.conns.keys().copied().collect()
    }

    /// Forget a connection (closed, or given up on).
    pub fn remove(&mut self, id: u16) -> Option<StripedConnection> {
        let c = self.conns.remove(&id);
        if c.is_some() && !self.old_instance.remove(&id) {
            if self.retired.len() >= RETIRED_IDS {
                self.retired.pop_front();
            }
            self.retired.push_back(id);
        }
        self.accepted.retain(|&a| a != id);
        self.touched.remove(&id);
        self.to_grant.remove(&id);
        self.classes.remove(&id);
        self.settle(id);
        c
    }

    /// This end is going away (the daemon stops): every connection is forgotten, and the next
    /// [`PtcpTable::transmit`] sends the peer a reset for each on every path that is up (at
    /// least one), so its applications are told at once that their streams broke, instead of
    /// after a keepalive minutes later or a clean end of file on a truncated stream. Returns
    /// how many connections there were.
    pub fn reset_all(&mut self, session: &Session) -> usize {
        let mut paths: Vec<PathId> = (0..session.paths())
            .map(|p| PathId(p as u8))
            .filter(|&p| session.path_is_up(p))
            .collect();
        if paths.is_empty() && session.paths() > 0 {
            paths.push(PathId(0));
        }
        let ids = self.conn_ids();
        for &id in &ids {
            self.resets.extend(paths.iter().map(|&p| (id, p)));
            self.remove(id);
        }
        ids.len()
    }

    /// Forget a connection after the next [`PtcpTable::transmit`] sent what it has left (the
    /// ACK of the peer's FIN that closed it): a connection removed at once leaves its peer
    /// resending that FIN to an id nobody holds.
    pub fn remove_after_transmit(&mut self, id: u16) {
        if self.conns.contains_key(&id) && !self.leaving.contains(&id) {
            self.leaving.push(id);
        }
    }

    /// Hands the session's pTCP segments to their connections; a responder that accepts opens
    /// a connection for a SYN naming a new id.
    ///
    /// When the session has seen the peer restart since the last call, every connection that
    /// has heard from the peer aborts first ([`StripedConnection::peer_lost`]): the peer's new
    /// instance holds none of them, and an idle one would otherwise learn it only from its
    /// next keepalive. The retired ids are forgotten then too: they were the old instance's.
    pub fn deliver(&mut self, session: &mut Session, now: Instant) {
        let restarts = session.peer_restarts();
        if self.peer_restarts.is_some_and(|seen| seen != restarts) {
            // The ids retired were the old instance's: the new one draws its own, from a
            // random start, and one that fell among them had every connection reset until
            // its ids left them (a soak's client restart: about 370 failed in 15 s). The old
            // instance's late segments come under its old keys.
            self.retired.clear();
            // Not a connection that never heard from the peer: one opened while the peer was
            // away, whose SYN the new instance will take when it is sent again. The others
            // stay until their TCP sides finish; their ids, the old instance's too, are not
            // retired when they go (retired after the clearing above, one had the new
            // instance's connection of the same id reset, tens of seconds after a restart).
            for (&id, c) in &mut self.conns {
                if c.heard_from_peer() {
                    c.peer_lost();
                    self.old_instance.insert(id);
                    self.touched.insert(id);
                    self.to_grant.insert(id);
                }
            }
        }
        self.peer_restarts = Some(restarts);
        while let Some(seg) = session.poll_ptcp() {
            if !self.conns.contains_key(&seg.conn) {
                let flags = Segment::parse_bytes(&seg.segment).map(|s| s.flags).ok();
                let syn = flags.is_some_and(|f| f.contains(Flags::SYN) && !f.contains(Flags::ACK));
                let retired = self.retired.contains(&seg.conn);
                let full = self.conns.len() >= MAX_CONNECTIONS;
                let refused =
                    self.role != Role::Responder || !self.options.accept || !syn || full || retired;
                if refused {
                    self.unknown_conn += 1;
                    // Tell the peer this end holds no such connection, so that it aborts
                    // instead of resending into the void (this end restarted, or never had
                    // it), once per id in a turn. Never for a reset (never answer one with
                    // one); not for a straggler of a connection this end retired (its peer
                    // retired it too), but for a SYN naming a retired id all the same: a
                    // restarted peer whose ids run into ones this end retired would otherwise
                    // wait forever (a late duplicate SYN's reset finds nothing to abort). A
                    // SYN refused because the table is full is dropped, as TCP drops a SYN on
                    // a full backlog: the peer tries again.
                    let reset = flags.is_some_and(|f| f.contains(Flags::RST));
                    let answer = !reset && (if syn { !full } else { !retired });
                    if answer
                        && self.resets.len() < MAX_RESETS
                        && !self.resets.iter().any(|&(id, _)| id == seg.conn)
                    {
                        self.resets.push((seg.conn, seg.path));
                    }
                    continue;
                }
                let c = StripedConnection::accept(self.connection_config(session));
                self.conns.insert(seg.conn, c);
                // Its window within the budget before it is first advertised.
                self.grant(seg.conn);
                self.accepted.push_back(seg.conn);
            }
            if let Some(c) = self.conns.get_mut(&seg.conn) {
                c.handle_datagram(now, seg.path, &seg.segment);
                self.touched.insert(seg.conn);
                self.to_grant.insert(seg.conn);
            }
        }
        // Acknowledgements free what was sent; an abort frees everything.
        self.grant_touched();
    }

    /// The earliest timer of the connections.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(StripedConnection::poll_timeout)
            .min()
    }

    /// Runs the connections' timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (&id, c) in self.conns.iter_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
                self.touched.insert(id);
                self.to_grant.insert(id);
            }
        }
        self.grant_touched();
    }

    /// The connections that took a segment or ran a timer since the last call: the only ones
    /// whose readable bytes, send-buffer room or state can have changed without the
    /// application's doing. A driver that copies between sockets and connections (the
    /// daemon's TCP acceleration) visits these and the ones whose sockets had events, not all.
    pub fn take_touched(&mut self) -> BTreeSet<u16> {
        std::mem::take(&mut self.touched)
    }

    /// Seals every segment the connections have now into `out` and hands each datagram to
    /// `send` with the index of the path it must go out on; a connection with a class
    /// ([`PtcpTable::set_class`]) queues its segments in the session's shaper instead, and
    /// they leave from [`Session::poll_transmit`].
    pub fn transmit(
        &mut self,
        session: &mut Session,
        now: Instant,
        out: &mut [u8],
        mut send: impl FnMut(usize, &[u8]),
    ) {
        for (id, path) in std::mem::take(&mut self.resets) {
            match session.seal_ptcp(now, path, id, &Segment::RESET, out) {
                Some(n) => {
                    self.resets_sent += 1;
                    send(path.index(), &out[..n]);
                }
                None => self.unsealed += 1,
            }
        }
        for (&id, c) in self.conns.iter_mut() {
            // A connection about to leave sends its last segments (the ACK of the peer's FIN)
            // at once: queued, JoBS could drop them after the connection is gone.
            let class = self
                .classes
                .get(&id)
                .copied()
                .filter(|_| !self.leaving.contains(&id));
            while let Some((path, seg)) = c.poll_transmit(now) {
                // Only data waits in the class's queue; acknowledgements and the other
                // control segments are small, and the connection's progress hangs on them.
                let queued = class.is_some_and(|k| {
                    Segment::parse_bytes(&seg).is_ok_and(|s| !s.payload.is_empty())
                        && session.queue_ptcp(now, k, path, id, &seg)
                });
                if queued {
                    continue;
                }
                match session.seal_ptcp(now, path, id, &seg, out) {
                    Some(n) => send(path.index(), &out[..n]),
                    None => self.unsealed += 1,
                }
            }
        }
        for id in std::mem::take(&mut self.leaving) {
            self.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_session::PrivateKey;

    /// Two sessions and their tables over two in-memory paths of 1 ms, time jumping to the
    /// next event (quinn's `Pair`).
    struct Pair {
        ends: [(Session, PtcpTable); 2],
        /// The session configs, to start an end again.
        client_config: braid_session::SessionConfig,
        server_config: braid_session::SessionConfig,
        /// The wall clock (ns) the sessions started at.
        wall: u64,
        now: Instant,
        /// (arrival, path, to end, datagram).
        wire: Vec<(Instant, u8, usize, Vec<u8>)>,
    }

    /// The tables' options in these tests.
    fn options(accept: bool) -> TableOptions {
        TableOptions {
            congestion: CongestionAlgorithm::Bbr,
            receive_buffer_bytes: Some(1 << 20),
            mss: 1300,
            accept,
            memory_budget: DEFAULT_MEMORY_BUDGET,
        }
    }

    impl Pair {
        /// `extra` appended to both ends' configs.
        fn with(extra: &str) -> Pair {
            let (ck, sk) = (
                PrivateKey::from_random([1; 32]),
                PrivateKey::from_random([2; 32]),
            );
            // The daemon's own configs, as `braid up` would read them.
            let client = format!(
                "role = \"client\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n\
                 [interface]\naddress = [\"10.77.0.2/30\"]\n\
                 [[path]]\nremote = \"192.0.2.1:7000\"\nrate_mbit = 10\n\
                 [[path]]\nremote = \"192.0.2.1:7000\"\nrate_mbit = 20\n{extra}",
                ck.to_base64(),
                sk.public_key().to_base64()
            );
            let server = format!(
                "role = \"server\"\nprivate_key = \"{}\"\npeer_public_key = \"{}\"\n\
                 listen = \"0.0.0.0:7000\"\n[interface]\naddress = [\"10.77.0.1/30\"]\n{extra}",
                sk.to_base64(),
                ck.public_key().to_base64()
            );
            let session_config = |text: &str| {
                let cfg =
                    crate::config::Config::parse(text, std::path::Path::new("t.toml")).unwrap();
                let mut s = cfg.session_config(&cfg.peers[0]);
                // As the daemon adds it.
                s.qos = cfg.qos.clone();
                s
            };
            let (c, s) = (session_config(&client), session_config(&server));
            let wall = 1_700_000_000_000_000_000;
            Pair {
                client_config: c.clone(),
                server_config: s.clone(),
                wall,
                ends: [
                    (
                        Session::new(c, Instant::ZERO, [3; 32], wall),
                        PtcpTable::new(Role::Initiator, options(false)),
                    ),
                    (
                        Session::new(s, Instant::ZERO, [4; 32], wall),
                        PtcpTable::new(Role::Responder, options(true)),
                    ),
                ],
                now: Instant::ZERO,
                wire: Vec::new(),
            }
        }

        /// A pair whose sessions completed their handshake.
        fn established() -> Pair {
            Pair::established_with("")
        }

        /// [`Pair::established`] with `extra` in both configs.
        fn established_with(extra: &str) -> Pair {
            let mut n = Pair::with(extra);
            while !(n.ends[0].0.is_established() && n.ends[1].0.is_established()) {
                n.step();
                assert!(
                    n.now < Instant::ZERO + Duration::from_secs(5),
                    "no handshake"
                );
            }
            n
        }

        /// End `end` (0: the client, 1: the server) restarts: a new session (a new instance,
        /// its wall clock a minute on) and an empty table.
        fn restart(&mut self, end: usize) {
            let (config, role) = if end == 0 {
                (self.client_config.clone(), Role::Initiator)
            } else {
                (self.server_config.clone(), Role::Responder)
            };
            let seed = [8 + end as u8; 32];
            self.ends[end] = (
                Session::new(config, self.now, seed, self.wall + 60_000_000_000),
                PtcpTable::new(role, options(end == 1)),
            );
        }

        /// An established pair with one connection, open and idle: nothing to send either
        /// way. Its id.
        fn idle_connection() -> (Pair, u16) {
            let mut n = Pair::established();
            let id = n.connect().unwrap();
            while n.ends[1].1.accept().is_none() {
                n.step();
            }
            for _ in 0..20 {
                n.step();
            }
            (n, id)
        }

        /// Steps until `done` holds; panics with `what` if it does not within 5 s.
        fn step_until(&mut self, what: &str, done: impl Fn(&Pair) -> bool) {
            let start = self.now;
            while !done(self) {
                self.step();
                assert!(self.now < start + Duration::from_secs(5), "{what}");
            }
        }

        /// The client daemon restarts (a new session the server sees in its handshake) and
        /// its random first id is `first`; until both sessions are established again.
        fn restart_client_from(&mut self, first: u16) {
            self.restart(0);
            self.ends[0].1 = PtcpTable::new(Role::Initiator, options(false)).with_first_id(first);
            while !(self.ends[0].0.is_established() && self.ends[1].0.is_established()) {
                self.step();
            }
        }

        /// The client opens a connection, which must get id `id` and be taken by the server
        /// without a reset at either end.
        fn connect_taken_as(&mut self, id: u16) {
            assert_eq!(self.connect(), Some(id));
            self.step_until("the connection was not accepted", |n| {
                n.ends[1].1.conn(id).is_some()
            });
            assert!(!self.ends[0].1.conn(id).unwrap().was_reset());
            assert_eq!(self.ends[1].1.resets_sent(), 0);
        }

        /// The client opens a connection.
        fn connect(&mut self) -> Option<u16> {
            let now = self.now;
            let (s0, t0) = &mut self.ends[0];
            t0.connect(s0, now)
        }

        /// Sends what both ends have, then runs to the next arrival or timer.
        fn step(&mut self) {
            let now = self.now;
            let mut out = vec![0u8; 4096];
            for (e, (session, table)) in self.ends.iter_mut().enumerate() {
                let wire = &mut self.wire;
                table.transmit(session, now, &mut out, |path, d| {
                    wire.push((
                        now + Duration::from_millis(1),
                        path as u8,
                        1 - e,
                        d.to_vec(),
                    ))
                });
                for p in 0..session.paths() {
                    while let Some(n) = session.poll_transmit(now, PathId(p as u8), &mut out) {
                        let d = out[..n].to_vec();
                        wire.push((now + Duration::from_millis(1), p as u8, 1 - e, d));
                    }
                }
            }
            let next =
                self.wire
                    .iter()
                    .map(|w| w.0)
                    .chain(self.ends.iter().flat_map(|(s, t)| {
                        [s.poll_timeout(), t.poll_timeout()].into_iter().flatten()
                    }))
                    .min()
                    .unwrap_or(now + Duration::from_millis(10))
                    .max(now);
            self.now = next;
            let (due, keep): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|w| w.0 <= self.now);
            self.wire = keep;
            for (_, path, to, d) in due {
                let (session, table) = &mut self.ends[to];
                let arrived_on = (to == 0).then_some(PathId(path));
                let _ = session.handle_datagram(self.now, arrived_on, &d);
                table.deliver(session, self.now);
            }
            for (session, table) in &mut self.ends {
                session.handle_timeout(self.now);
                table.handle_timeout(self.now);
            }
        }
    }

    #[test]
    fn with_qos_both_ends_cap_a_connections_flows_at_their_paths_rates() {
        let qos = "[qos]\n[[qos.class]]\nname = \"all\"\ndefault = true\n";
        let mut n = Pair::established_with(qos);
        let id = n.connect().unwrap();
        let mut server_id = None;
        while server_id.is_none() {
            n.step();
            server_id = n.ends[1].1.accept();
            assert!(
                n.now < Instant::ZERO + Duration::from_secs(5),
                "not accepted"
            );
        }
        // The server caps the flows it accepted, by the rates the client's bond carries.
        for (end, id) in [(0, id), (1, server_id.unwrap())] {
            let (session, table) = &mut n.ends[end];
            assert!(table.cap_rates(id, session), "end {end}");
            let conn = table.conn(id).unwrap();
            assert_eq!(
                conn.rate_cap(PathId(0)),
                Some(payload_rate(9_700_000, 1300))
            );
            assert_eq!(
                conn.rate_cap(PathId(1)),
                Some(payload_rate(19_400_000, 1300))
            );
            assert!(conn.flows().iter().all(|f| f.pacing_rate().is_some()));
        }
        // Without [qos] nothing is capped.
        let mut n = Pair::established();
        let id = n.connect().unwrap();
        let (session, table) = &mut n.ends[0];
        assert!(!table.cap_rates(id, session));
        assert_eq!(table.conn(id).unwrap().rate_cap(PathId(0)), None);
    }

    #[test]
    fn a_connection_carries_its_bytes_and_leaves_both_tables() {
        let mut n = Pair::established();
        // A responder does not open connections; an initiator does not accept them.
        let now = n.now;
        let (s1, t1) = &mut n.ends[1];
        assert_eq!(t1.connect(s1, now), None);
        let (s0, t0) = &mut n.ends[0];
        let id = t0.connect(s0, now).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        let mut got = Vec::new();
        let mut server_id = None;
        let mut buf = vec![0u8; 65_536];
        for _ in 0..200_000 {
            let now = n.now;
            let c = n.ends[0].1.conn_mut(id);
            if let Some(c) = c {
                if sent < data.len() {
                    sent += c.write(&data[sent..]);
                    if sent == data.len() {
                        c.close(now);
                    }
                }
                if c.state() == braid_ptcp::State::Closed {
                    n.ends[0].1.remove_after_transmit(id);
                }
            }
            let t1 = &mut n.ends[1].1;
            if let Some(a) = t1.accept() {
                server_id = Some(a);
            }
            if let Some(c) = server_id.and_then(|a| t1.conn_mut(a)) {
                let k = c.read(&mut buf);
                got.extend_from_slice(&buf[..k]);
                if c.is_finished() && c.state() == braid_ptcp::State::Open {
                    c.close(now);
                }
                if c.state() == braid_ptcp::State::Closed {
                    let a = server_id.unwrap();
                    t1.remove_after_transmit(a);
                }
            }
            if n.ends.iter().all(|(_, t)| t.is_empty()) && got.len() == data.len() {
                break;
            }
            n.step();
        }
        assert_eq!(got, data);
        assert_eq!(server_id, Some(id));
        // Both ends closed and forgot the connection, and nothing arrived for a forgotten id.
        assert!(n.ends[0].1.is_empty() && n.ends[1].1.is_empty());
        assert_eq!(n.ends[0].1.unknown_conn() + n.ends[1].1.unknown_conn(), 0);
    }

    #[test]
    fn a_memory_budget_bounds_what_all_connections_commit_and_every_byte_still_arrives() {
        let mut n = Pair::established();
        // 1 MiB each way for the table, where each connection's buffer alone is 1 MiB.
        let budget = 1u64 << 20;
        let small = |accept| TableOptions {
            memory_budget: budget,
            ..options(accept)
        };
        n.ends[0].1 = PtcpTable::new(Role::Initiator, small(false));
        n.ends[1].1 = PtcpTable::new(Role::Responder, small(true));
        let conns = 8usize;
        let bound = budget + conns as u64 * MEMORY_FLOOR;
        let per_conn = 1usize << 20;
        let data: Vec<Vec<u8>> = (0..conns)
            .map(|k| (0..per_conn).map(|i| (i * 7 + k) as u8).collect())
            .collect();
        let ids: Vec<u16> = (0..conns).map(|_| n.connect().unwrap()).collect();
        let mut sent = vec![0usize; conns];
        let mut got: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
        let mut buf = vec![0u8; 65_536];
        let reading_from = n.now + Duration::from_secs(3);
        let mut most_held = 0u64;
        while got.values().map(Vec::len).sum::<usize>() < conns * per_conn {
            for (k, &id) in ids.iter().enumerate() {
                if let Some(c) = n.ends[0].1.conn_mut(id) {
                    sent[k] += c.write(&data[k][sent[k]..]);
                }
            }
            let (sent_total, _) = n.ends[0].1.committed_bytes();
            assert!(
                sent_total <= bound,
                "the client holds {sent_total} unacknowledged"
            );
            let t1 = &mut n.ends[1].1;
            while let Some(a) = t1.accept() {
                got.insert(a, Vec::new());
            }
            // The server's application reads nothing for 3 s, then everything.
            if n.now >= reading_from {
                for (&id, v) in &mut got {
                    while let Some(c) = t1.conn_mut(id) {
                        let k = c.read(&mut buf);
                        if k == 0 {
                            break;
                        }
                        v.extend_from_slice(&buf[..k]);
                    }
                }
            }
            let held: u64 = got
                .keys()
                .filter_map(|&id| t1.conn(id))
                .map(|c| c.receive_buffered_bytes())
                .sum();
            let (_, offered) = t1.committed_bytes();
            assert!(
                held <= offered && offered <= bound,
                "{held} held, {offered} offered"
            );
            most_held = most_held.max(held);
            n.step();
            assert!(n.now < reading_from + Duration::from_secs(30), "stalled");
        }
        // The windows filled to the budget (8 MiB without it) and drained to the last byte.
        assert!(most_held > budget / 2, "{most_held}");
        for (k, &id) in ids.iter().enumerate() {
            assert!(got[&id] == data[k], "connection {id}'s bytes");
        }
    }

    #[test]
    fn a_shared_budget_bounds_the_connections_of_every_client_together() {
        // Two clients of one server, each table under its own default budget (256 MiB) and
        // one shared budget of 1 MiB: four connections of each write 1 MiB, which the
        // server's application reads only after 3 s.
        let budget = 1u64 << 20;
        let shared = SharedBudget::new(budget);
        let mut pairs = [Pair::established(), Pair::established()];
        for n in &mut pairs {
            n.ends[1].1 =
                PtcpTable::new(Role::Responder, options(true)).with_shared_budget(shared.clone());
        }
        let conns = 4usize;
        let bound = budget + 2 * conns as u64 * MEMORY_FLOOR;
        let per_conn = 1usize << 20;
        let data: Vec<u8> = (0..per_conn).map(|i| (i * 7) as u8).collect();
        let ids: Vec<Vec<u16>> = pairs
            .iter_mut()
            .map(|n| (0..conns).map(|_| n.connect().unwrap()).collect())
            .collect();
        let mut sent = [vec![0usize; conns], vec![0usize; conns]];
        let mut got: [BTreeMap<u16, Vec<u8>>; 2] = Default::default();
        let mut buf = vec![0u8; 65_536];
        let reading_from = Instant::ZERO + Duration::from_secs(4);
        let mut most_offered = 0u64;
        let done = |got: &[BTreeMap<u16, Vec<u8>>; 2]| {
            got.iter()
                .flat_map(|g| g.values())
                .map(Vec::len)
                .sum::<usize>()
                == 2 * conns * per_conn
        };
        while !done(&got) {
            for (e, n) in pairs.iter_mut().enumerate() {
                for (k, &id) in ids[e].iter().enumerate() {
                    if let Some(c) = n.ends[0].1.conn_mut(id) {
                        sent[e][k] += c.write(&data[sent[e][k]..]);
                    }
                }
                let t1 = &mut n.ends[1].1;
                while let Some(a) = t1.accept() {
                    got[e].insert(a, Vec::new());
                }
                if n.now >= reading_from {
                    for (&id, v) in &mut got[e] {
                        while let Some(c) = t1.conn_mut(id) {
                            let k = c.read(&mut buf);
                            if k == 0 {
                                break;
                            }
                            v.extend_from_slice(&buf[..k]);
                        }
                    }
                }
                n.step();
                assert!(n.now < reading_from + Duration::from_secs(30), "stalled");
            }
            // What the servers' connections offer, counted afresh, and as the budget counts.
            let offered: u64 = pairs.iter().map(|n| n.ends[1].1.committed_bytes().1).sum();
            assert!(offered <= bound, "{offered} offered by both, bound {bound}");
            assert!(shared.committed().1 <= bound, "{:?}", shared.committed());
            most_offered = most_offered.max(offered);
        }
        // Both filled the budget between them (8 MiB of windows without it), and every byte
        // arrived.
        assert!(most_offered > budget / 2, "{most_offered}");
        for (e, n) in pairs.iter().enumerate() {
            for &id in &ids[e] {
                assert!(got[e][&id] == data, "client {e}'s connection {id}");
            }
            assert!(n.ends[1].1.committed_bytes().0 == 0);
        }
        // A table that goes takes what its connections committed out of the shared count.
        let [a, b] = pairs;
        let left_by_b = b.ends[1].1.counted_bytes();
        drop(a);
        assert_eq!(shared.committed(), left_by_b);
        drop(b);
        assert_eq!(shared.committed(), (0, 0));
    }

    #[test]
    fn tables_sharing_a_budget_cannot_each_grant_the_same_free_room() {
        // Four clients of one server, a shared budget of 1 MiB: the server's application
        // writes 8 MiB into one connection of each in turn, before anything is acknowledged.
        // Each table once granted its connection all that the shared count showed free, and
        // the four took 4 MiB between them.
        let budget = 1u64 << 20;
        let shared = SharedBudget::new(budget);
        let mut pairs: Vec<(Pair, u16)> = (0..4)
            .map(|_| {
                let mut n = Pair::established();
                n.ends[1].1 = PtcpTable::new(Role::Responder, options(true))
                    .with_shared_budget(shared.clone());
                assert_eq!(n.connect(), Some(1));
                let id = loop {
                    if let Some(id) = n.ends[1].1.accept() {
                        break id;
                    }
                    n.step();
                };
                (n, id)
            })
            .collect();
        let data = vec![9u8; 8 << 20];
        let bound = budget + 4 * MEMORY_FLOOR;
        for round in 0..3 {
            for (n, id) in &mut pairs {
                if let Some(c) = n.ends[1].1.conn_mut(*id) {
                    c.write(&data);
                }
            }
            let unacked: u64 = pairs
                .iter()
                .map(|(n, _)| n.ends[1].1.committed_bytes().0)
                .sum();
            assert!(
                unacked <= bound,
                "round {round}: {unacked} unacknowledged, bound {bound}"
            );
            assert!(shared.committed().0 >= unacked && shared.committed().0 <= bound);
            let counted: u64 = pairs
                .iter()
                .map(|(n, _)| n.ends[1].1.counted_bytes().0)
                .sum();
            assert_eq!(shared.committed().0, counted);
        }
        // And the data still flows: the clients read, the server writes on.
        let mut buf = vec![0u8; 1 << 16];
        let mut got = [0usize; 4];
        for _ in 0..200_000 {
            if got.iter().all(|&g| g >= 2 << 20) {
                break;
            }
            for (k, (n, id)) in pairs.iter_mut().enumerate() {
                // The client's connection: the first it opened, id 1.
                while let Some(c) = n.ends[0].1.conn_mut(1) {
                    let r = c.read(&mut buf);
                    if r == 0 {
                        break;
                    }
                    got[k] += r;
                }
                if let Some(c) = n.ends[1].1.conn_mut(*id) {
                    c.write(&data[..1 << 16]);
                }
                n.step();
            }
            let unacked: u64 = pairs
                .iter()
                .map(|(n, _)| n.ends[1].1.committed_bytes().0)
                .sum();
            assert!(unacked <= bound, "{unacked} unacknowledged, bound {bound}");
        }
        assert!(got.iter().all(|&g| g >= 2 << 20), "{got:?}");
    }

    #[test]
    fn a_connection_that_comes_late_still_gets_a_full_window_while_the_budget_has_room() {
        // A budget of 4 MiB, buffers of 1 MiB: one connection, then a second, then a third
        // joins, each once those before have their full window. Counted at twice their
        // windows, the first two once kept 4 MiB between them while offering 2, and the third
        // sat at 128 KiB (a review: 196 MB in 3 s, against 1,567 MB with a full window).
        let mut n = Pair::established();
        n.ends[1].1 = PtcpTable::new(
            Role::Responder,
            TableOptions {
                memory_budget: 4 << 20,
                ..options(true)
            },
        );
        let data = vec![7u8; 1 << 20];
        let mut buf = vec![0u8; 1 << 16];
        let mut client_ids = Vec::new();
        let mut server_ids: Vec<u16> = Vec::new();
        for i in 0..3 {
            client_ids.push(n.connect().unwrap());
            let start = n.now;
            // Until every connection's window is its whole buffer.
            loop {
                for &id in &client_ids {
                    if let Some(c) = n.ends[0].1.conn_mut(id) {
                        c.write(&data);
                    }
                }
                while let Some(a) = n.ends[1].1.accept() {
                    server_ids.push(a);
                }
                for &id in &server_ids {
                    while let Some(c) = n.ends[1].1.conn_mut(id) {
                        if c.read(&mut buf) == 0 {
                            break;
                        }
                    }
                }
                let t1 = &n.ends[1].1;
                let full = |&id: &u16| {
                    t1.conn(id)
                        .is_some_and(|c| c.receive_window_bytes() == 1 << 20)
                };
                if server_ids.len() == i + 1 && server_ids.iter().all(full) {
                    break;
                }
                let (_, offered) = t1.committed_bytes();
                assert!(offered <= 4 << 20, "{offered}");
                let windows: Vec<u64> = server_ids
                    .iter()
                    .filter_map(|&id| t1.conn(id))
                    .map(StripedConnection::receive_window_bytes)
                    .collect();
                assert!(
                    n.now < start + Duration::from_secs(2),
                    "connection {i} joined, windows {windows:?}"
                );
                n.step();
            }
        }
    }

    #[test]
    fn a_connection_half_closed_either_way_still_grows_the_other_way() {
        // The client sends its request and closes its side (as `nc -N` or an HTTP/1.0
        // client may); the server reads it to the end, then answers with 8 MiB. The server's
        // connection is finished as a receiver, not as a sender, and the client's is closing
        // as a sender, not as a receiver: the server's send limit and the client's window
        // must keep growing.
        let mut n = Pair::established();
        let cid = n.connect().unwrap();
        if let Some(c) = n.ends[0].1.conn_mut(cid) {
            c.write(b"GET /big");
            c.close(n.now);
        }
        let sid = loop {
            if let Some(id) = n.ends[1].1.accept() {
                break id;
            }
            n.step();
        };
        let mut buf = vec![0u8; 1 << 16];
        let answer = vec![3u8; 8 << 20];
        let (mut sent, mut got, mut most_unacked, mut widest) = (0usize, 0usize, 0u64, 0u64);
        while got < answer.len() {
            if let Some(c) = n.ends[1].1.conn_mut(sid) {
                while c.read(&mut buf) > 0 {}
                if c.is_finished() && sent < answer.len() {
                    sent += c.write(&answer[sent..]);
                    if sent == answer.len() {
                        c.close(n.now);
                    }
                }
                most_unacked = most_unacked.max(c.unacked_bytes());
            }
            if let Some(c) = n.ends[0].1.conn_mut(cid) {
                widest = widest.max(c.receive_window_bytes());
                // The client reads in bursts, so the window fills and autotuning widens it.
                if (n.now.as_nanos() / 1_000_000).is_multiple_of(20) {
                    loop {
                        let k = c.read(&mut buf);
                        if k == 0 {
                            break;
                        }
                        got += k;
                    }
                }
            }
            n.step();
            assert!(
                n.now < Instant::ZERO + Duration::from_secs(60),
                "stalled at {got}"
            );
        }
        assert!(
            most_unacked > 1 << 20,
            "the send limit stayed at {most_unacked}"
        );
        assert!(widest > 512 << 10, "the client's window stayed at {widest}");
    }

    #[test]
    fn an_idle_connection_keeps_a_small_window_and_leaves_the_budget_to_a_busy_one() {
        let mut n = Pair::established();
        // Buffers of 4 MiB, a budget of 4 MiB: offered whole, the idle connection's window
        // would leave the busy one 128 KiB.
        let opts = |accept| TableOptions {
            memory_budget: 4 << 20,
            receive_buffer_bytes: Some(4 << 20),
            ..options(accept)
        };
        n.ends[0].1 = PtcpTable::new(Role::Initiator, opts(false));
        n.ends[1].1 = PtcpTable::new(Role::Responder, opts(true));
        let idle = n.connect().unwrap();
        let busy = n.connect().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let chunk = vec![5u8; 1 << 16];
        let mut widest = 0;
        for step in 0..20_000 {
            if let Some(c) = n.ends[0].1.conn_mut(busy) {
                c.write(&chunk);
            }
            let t1 = &mut n.ends[1].1;
            while t1.accept().is_some() {}
            // The busy connection's reader reads in bursts, so its sender fills the window.
            if step % 50 == 0 {
                if let Some(c) = t1.conn_mut(busy) {
                    while c.read(&mut buf) > 0 {}
                    widest = widest.max(c.receive_window_bytes());
                }
            }
            if widest >= 2 << 20 {
                break;
            }
            n.step();
        }
        let t1 = &n.ends[1].1;
        let idle_window = t1.conn(idle).unwrap().receive_window_bytes();
        assert_eq!(
            idle_window,
            braid_ptcp::recv_buffer::AUTOTUNE_INITIAL_WINDOW
        );
        assert!(
            widest >= 2 << 20,
            "the busy connection's window reached only {widest}"
        );
    }

    /// A daemon that stops resets its connections ([`PtcpTable::reset_all`]): one whose peer
    /// is still reading a stream this end finished loses none of it, and one whose stream was
    /// cut gets nothing more, both ending aborted.
    #[test]
    fn a_stop_resets_every_connection_but_cuts_no_stream_the_stopping_end_finished() {
        let mut n = Pair::established();
        let whole = n.connect().unwrap();
        let cut = n.connect().unwrap();
        // On `whole` the client writes 200 kB and closes; on `cut` it writes 200 kB and does
        // not close. The server's application reads nothing yet.
        let mut written = [0usize; 2];
        for _ in 0..4000 {
            for (k, id) in [whole, cut].into_iter().enumerate() {
                if let Some(c) = n.ends[0].1.conn_mut(id) {
                    written[k] += c.write(&[7; 4096][..4096.min(200_000 - written[k])]);
                    if k == 0 && written[k] == 200_000 {
                        c.close(n.now);
                    }
                }
            }
            while n.ends[1].1.accept().is_some() {}
            n.step();
            let here = |id| n.ends[1].1.conn(id).map_or(0, |c| c.readable_bytes());
            if here(whole) == 200_000 && here(cut) == 200_000 {
                break;
            }
        }
        // The FIN, which follows the data.
        for _ in 0..10 {
            n.step();
        }
        assert!(n.ends[1].1.conn(whole).unwrap().peer_stream_whole());
        assert!(!n.ends[1].1.conn(cut).unwrap().peer_stream_whole());
        // The client's daemon stops.
        let (s0, t0) = &mut n.ends[0];
        assert_eq!(t0.reset_all(s0), 2);
        assert!(t0.is_empty() && t0.owes_resets());
        for _ in 0..20 {
            n.step();
        }
        let mut buf = vec![0u8; 1 << 20];
        let c = n.ends[1].1.conn_mut(whole).unwrap();
        assert!(c.was_aborted());
        assert_eq!(c.read(&mut buf), 200_000, "the whole stream is read");
        assert!(c.is_finished(), "and its end");
        let c = n.ends[1].1.conn_mut(cut).unwrap();
        assert!(c.was_aborted());
        assert_eq!(c.read(&mut buf), 0, "a cut stream gives nothing more");
    }

    #[test]
    fn a_peer_that_forgot_the_connection_resets_it() {
        let mut n = Pair::established();
        let id = n.connect().unwrap();
        let mut buf = vec![0u8; 65_536];
        let mut read = 0;
        while read < 10_000 {
            if let Some(c) = n.ends[0].1.conn_mut(id) {
                c.write(&[7; 4096]);
            }
            let t1 = &mut n.ends[1].1;
            while t1.accept().is_some() {}
            if let Some(c) = t1.conn_mut(id) {
                read += c.read(&mut buf);
            }
            n.step();
            assert!(n.now < Instant::ZERO + Duration::from_secs(5), "no data");
        }
        // The server restarts (a new daemon, a new table); the session goes on. Whatever the
        // client sends next for its connection is answered with a reset, and it aborts.
        n.ends[1].1 = PtcpTable::new(Role::Responder, options(true));
        let start = n.now;
        while n.ends[0].1.conn(id).unwrap().state() != braid_ptcp::State::Closed {
            if let Some(c) = n.ends[0].1.conn_mut(id) {
                c.write(&[7; 4096]);
            }
            n.step();
            assert!(
                n.now < start + Duration::from_secs(5),
                "the client's connection was not reset"
            );
        }
        let c = n.ends[0].1.conn_mut(id).unwrap();
        assert!(c.was_reset());
        assert_eq!(c.write(&[1]), 0, "a reset connection takes nothing");
        assert!(n.ends[1].1.resets_sent() >= 1);
        // The reset is not answered in turn, and the aborted connection sends nothing more:
        // once what was in flight has arrived (and drawn its own resets), they stop.
        for _ in 0..20 {
            n.step();
        }
        let sent = n.ends[1].1.resets_sent();
        for _ in 0..100 {
            n.step();
        }
        assert_eq!(n.ends[0].1.resets_sent(), 0);
        assert_eq!(n.ends[1].1.resets_sent(), sent);
        assert_eq!(
            n.ends[1].1.len(),
            0,
            "no connection opened by the stragglers"
        );
    }

    #[test]
    fn an_idle_connection_learns_by_keepalive_that_the_peer_forgot_it() {
        let (mut n, id) = Pair::idle_connection();
        // The server forgets it.
        n.ends[1].1 = PtcpTable::new(Role::Responder, options(true));
        let start = n.now;
        while n.ends[0].1.conn(id).unwrap().state() != braid_ptcp::State::Closed {
            n.step();
            assert!(
                n.now < start + braid_ptcp::DEFAULT_KEEPALIVE * 2,
                "the idle connection never learned"
            );
        }
        let c = n.ends[0].1.conn_mut(id).unwrap();
        assert!(c.was_reset());
        assert!(c.stats().keepalives > 0);
    }

    #[test]
    fn an_idle_connection_ends_at_once_when_the_peer_restarts() {
        let (mut n, id) = Pair::idle_connection();
        // The client daemon restarts: a new session (a new instance) and a new table. The
        // server's session sees the new instance in its handshake, and its table ends the
        // idle connection then, not a keepalive later.
        n.restart(0);
        n.wire.clear();
        n.step_until("the server never ended the connection", |n| {
            n.ends[1].1.conn(id).unwrap().state() == braid_ptcp::State::Closed
        });
        assert_eq!(n.ends[1].0.peer_restarts(), 1);
        let c = n.ends[1].1.conn_mut(id).unwrap();
        assert!(c.was_reset());
        assert_eq!(c.stats().keepalives, 0, "ended without a keepalive");
        assert!(
            n.ends[1].1.take_touched().contains(&id),
            "so the daemon visits it"
        );
    }

    #[test]
    fn a_connection_opened_while_the_peer_was_away_survives_its_restart() {
        let (mut n, old) = Pair::idle_connection();
        // The server daemon restarts: a new session and table. The client opens a connection
        // before it notices: its SYN goes out under the old keys and is lost.
        n.restart(1);
        let new = n.connect().unwrap();
        let start = n.now;
        while n.ends[1].1.conn(new).is_none() {
            n.step();
            while n.ends[1].1.accept().is_some() {}
            assert!(
                n.now < start + Duration::from_secs(60),
                "the new server never got the connection: {:?}",
                n.ends[0].1.conn(new).map(|c| c.state())
            );
        }
        assert_eq!(n.ends[0].0.peer_restarts(), 1);
        // The old connection ended with the restart; the new one lives on.
        assert!(n.ends[0].1.conn_mut(old).unwrap().was_reset());
        assert!(!n.ends[0].1.conn_mut(new).unwrap().was_aborted());
    }

    #[test]
    fn a_restarted_peer_that_reuses_a_retired_id_is_reset_not_ignored() {
        let mut n = Pair::established();
        // The server retired id 7 (a connection it removed).
        n.ends[1].1.retired.push_back(7);
        // The client restarts and its ids start at 7.
        n.ends[0].1 = PtcpTable::new(Role::Initiator, options(false)).with_first_id(7);
        let id = n.connect().unwrap();
        assert_eq!(id, 7);
        n.step_until("the SYN for a retired id went unanswered", |n| {
            n.ends[0].1.conn(id).unwrap().state() == braid_ptcp::State::Closed
        });
        assert!(n.ends[0].1.conn_mut(id).unwrap().was_reset());
        assert_eq!(n.ends[1].1.len(), 0);
        // The next id opens as usual.
        let now = n.now;
        let (s0, t0) = &mut n.ends[0];
        let next = t0.connect(s0, now).unwrap();
        assert_eq!(next, 8);
        n.step_until("id 8 not accepted", |n| n.ends[1].1.conn(next).is_some());
    }

    #[test]
    fn a_restarted_peer_may_reuse_the_old_instances_retired_ids() {
        let mut n = Pair::established();
        // The server retired id 7, a connection of the client's old instance.
        n.ends[1].1.retired.push_back(7);
        // The client daemon restarts, and its random first id is 7.
        n.restart_client_from(7);
        n.connect_taken_as(7);
    }

    /// A connection of the peer's old instance that goes only after the restart (its TCP side
    /// took a while to finish) leaves its id free for the new instance: retiring it then had
    /// the new instance's connection of that id reset (a soak's failures 30-90 s after a
    /// client restart).
    #[test]
    fn an_old_instances_connection_that_goes_after_the_restart_leaves_its_id_free() {
        let (mut n, old) = Pair::idle_connection();
        // The client daemon restarts; the new instance's first id is the old connection's.
        n.restart_client_from(old);
        n.step();
        assert!(n.ends[1].1.conn(old).unwrap().was_aborted());
        // Its TCP side done, the server lets the old connection go.
        assert!(n.ends[1].1.remove(old).is_some());
        n.connect_taken_as(old);
    }

    #[test]
    fn a_full_table_drops_a_syn_without_a_reset() {
        let mut n = Pair::established();
        // Fill the server's table.
        for id in 1000..1000 + MAX_CONNECTIONS as u16 {
            let c = StripedConnection::accept(n.ends[1].1.connection_config(&n.ends[1].0));
            n.ends[1].1.conns.insert(id, c);
        }
        let id = n.connect().unwrap();
        for _ in 0..50 {
            n.step();
        }
        assert!(n.ends[1].1.unknown_conn() > 0, "the SYN was refused");
        assert_eq!(
            n.ends[1].1.resets_sent(),
            0,
            "and not reset: the client retries"
        );
        assert!(!n.ends[0].1.conn_mut(id).unwrap().was_reset());
    }

    #[test]
    fn connection_ids_start_where_the_table_is_told() {
        let t = PtcpTable::new(Role::Initiator, options(false)).with_first_id(0xbeef);
        assert_eq!(t.next_conn, 0xbeef);
        let t = PtcpTable::new(Role::Initiator, options(false)).with_first_id(0);
        assert_eq!(t.next_conn, 1, "0 is never an id");
    }

    #[test]
    fn a_paths_cap_in_payload_bytes() {
        // 9.7 Mbit/s on the wire in 1,424-byte segments that cost the shaper 1,522 bytes each.
        assert_eq!(payload_rate(9_700_000, 1424), 1_212_500 * 1424 / 1522);
        assert_eq!(
            payload_rate(0, 1424),
            1,
            "never 0, which would lift the cap"
        );
        assert_eq!(
            u128::from(payload_rate(u64::MAX, 1424)),
            u128::from(u64::MAX) / 8 * 1424 / 1522
        );
    }

    #[test]
    fn mss_on_a_1500_byte_path() {
        // 20 + 8 + 16 (session header) + 16 (tag) + 4 (kind 9) + 12 (pTCP data header).
        assert_eq!(1500 - ptcp_overhead(false), 1424);
        assert_eq!(1500 - ptcp_overhead(true), 1404);
        assert_eq!(mss_for(1500, false), 1424);
        assert_eq!(mss_for(100, false), 256);
        // A data segment of that MSS fills the MTU exactly.
        let seg = Segment {
            payload: &[0; 1424],
            ..Segment::new(braid_ptcp::FlowId(0), Flags::VPKT)
        };
        assert_eq!(20 + 8 + Session::PTCP_OVERHEAD + seg.buffer_len(), 1500);
    }
}

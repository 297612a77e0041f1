//! A hostile client of a server's pTCP connections, for tests and fuzzing (feature `fuzzing`).
//!
//! A proxy serves many clients, and each one holds a valid key, so every pTCP segment a client's
//! session seals reaches the server's [`PtcpTable`] past the cryptography. [`run`] builds a bond
//! whose client lies ([`braid_session::hostile::Pair`]), puts a table that accepts at the server,
//! as the daemon's accelerated TCP does, and plays a list of steps read from bytes: the client's
//! own connections opening, writing, reading and closing honestly; forged segments (any bytes, a
//! real segment of the client's with a field moved, an old one again); the server's application
//! reading (or not) and writing; time passing. The property, checked after every step:
//! nothing panics, the table holds at most [`MAX_CONNECTIONS`], and what its connections commit
//! and hold stays within the memory budget ([`TableOptions::memory_budget`]): at most the budget
//! plus [`MEMORY_FLOOR`] per connection each way, and their receive buffers' charge at most half
//! as much again (held runs cost their entries, `RecvBuffer`).
//!
//! The client's connections are raw [`StripedConnection`]s the harness drives itself, so that it
//! sees their plaintext segments to alter and replay; what they send reaches the server at once
//! (sealed by the liar's session, [`Pair::forge_ptcp`]), what the server sends crosses the
//! pair's in-memory paths.

use crate::ptcp_table::{PtcpTable, SharedBudget, TableOptions, MAX_CONNECTIONS, MEMORY_FLOOR};
use braid_proto::time::Duration;
use braid_proto::PathId;
use braid_ptcp::wire::{Flags, SackBlock, Segment, VERSION};
use braid_ptcp::{CongestionAlgorithm, StripedConnection, VirtualSeq};
use braid_session::hostile::{Pair, Shape, PATHS};
use braid_session::{BondParams, Role};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Honest segments of the client's each connection remembers to alter and replay.
const REMEMBERED: usize = 16;

/// The longest step of virtual time between two turns of the tables.
const TURN: Duration = Duration::from_millis(5);

/// A server table under a lying client. See the module docs.
pub struct Bed {
    pair: Pair,
    table: PtcpTable,
    budget: u64,
    /// The budget the table shares (as a server's tables of all its clients do): three
    /// quarters of its own, so that it binds.
    shared: Arc<SharedBudget>,
    /// The liar's own connections, by id.
    client: BTreeMap<u16, StripedConnection>,
    /// The segments each of them sent last (newest last), and the path.
    sent: BTreeMap<u16, VecDeque<(PathId, Vec<u8>)>>,
    /// The server connections the application accepted.
    accepted: Vec<u16>,
    /// The server's application reads at most this much a turn from each connection (a slow
    /// socket), `usize::MAX` when it reads everything.
    read_per_turn: usize,
    /// Bytes the server's application read.
    server_read: u64,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Bed {
    /// A bond of `shape` whose client declares `params` (its path rates size the server's
    /// buffers) and a server table with `budget` bytes each way. `None` if the handshake did
    /// not complete (a defect).
    pub fn new(shape: &Shape, params: BondParams, budget: u64) -> Option<Bed> {
        let mut shape = shape.clone();
        shape.liar_is_client = true;
        let mut pair = Pair::established_with(&shape, params)?;
        pair.keep_ptcp = true;
        let shared = SharedBudget::new(budget / 4 * 3);
        let table = PtcpTable::new(Role::Responder, table_options(budget))
            .with_shared_budget(shared.clone());
        Some(Bed {
            pair,
            table,
            budget,
            shared,
            client: BTreeMap::new(),
            sent: BTreeMap::new(),
            accepted: Vec::new(),
            read_per_turn: usize::MAX,
            server_read: 0,
            out: vec![0; 1 << 17],
            buf: vec![0; 1 << 16],
        })
    }

    /// The server's table.
    pub fn table(&self) -> &PtcpTable {
        &self.table
    }

    /// Bytes the server's application read from its connections.
    pub fn server_read(&self) -> u64 {
        self.server_read
    }

    /// Plays `steps` (see [`run`]), checking the bounds after each; panics on a broken one.
    pub fn play(&mut self, mut steps: &[u8]) {
        while let Some((&op, rest)) = steps.split_first() {
            steps = self.step(op, rest);
            self.turn();
            self.check();
        }
        // Then a quiet while: timers, and the connections end or idle.
        self.pass(Duration::from_secs(3));
        self.check();
    }

    /// The server's table goes (its client left), and takes what it counted out of the
    /// shared budget; panics if anything is left there.
    pub fn release(&mut self) {
        let empty = PtcpTable::new(Role::Responder, table_options(self.budget));
        drop(std::mem::replace(&mut self.table, empty));
        assert_eq!(self.shared.committed(), (0, 0), "left in the shared budget");
    }

    /// One step: `op` and what it reads of `args`; returns the rest.
    fn step<'a>(&mut self, op: u8, args: &'a [u8]) -> &'a [u8] {
        let mut args = Args(args);
        match op % 16 {
            0 => {
                let id = u16::from(args.byte() % 16);
                if !self.client.contains_key(&id) {
                    let paths: Vec<PathId> = (0..PATHS as u8).map(PathId).collect();
                    let c = StripedConnection::connect(
                        braid_ptcp::Config::default(),
                        self.pair.now,
                        &paths,
                    );
                    self.client.insert(id, c);
                }
            }
            1 => {
                let id = u16::from(args.byte() % 16);
                let n = usize::from(args.byte()) * 512;
                if let Some(c) = self.client.get_mut(&id) {
                    c.write(&vec![0x5a; n]);
                }
            }
            2 => {
                let id = u16::from(args.byte() % 16);
                if let Some(c) = self.client.get_mut(&id) {
                    c.close(self.pair.now);
                }
            }
            3 => {
                // The server's application: reads everything, or a little a turn.
                self.read_per_turn = match args.byte() {
                    0 => 0,
                    b if b < 128 => usize::from(b) * 64,
                    _ => usize::MAX,
                };
            }
            4 => {
                let pick = usize::from(args.byte());
                let n = usize::from(args.byte()) * 512;
                if let Some(&id) = self.accepted.get(pick % self.accepted.len().max(1)) {
                    if let Some(c) = self.table.conn_mut(id) {
                        if n == 0 {
                            c.close(self.pair.now);
                        } else {
                            c.write(&vec![0xa5; n]);
                        }
                    }
                }
            }
            5 => {
                // Any bytes as a segment of any connection (a valid version byte, so that
                // more of them parse).
                let conn = u16::from_be_bytes([args.byte(), args.byte()]);
                let wire = PathId(args.byte() % 4);
                let n = usize::from(args.byte());
                let mut seg = args.take(n).to_vec();
                if let Some(b) = seg.first_mut() {
                    *b = VERSION;
                }
                self.pair.forge_ptcp(wire, conn, &seg);
            }
            6 => {
                // A real segment of the client's with a field moved.
                let (id, back, field) = (args.byte() % 16, args.byte(), args.byte());
                let v = u32::from_be_bytes([args.byte(), args.byte(), args.byte(), args.byte()]);
                if let Some((path, seg)) = self.remembered(id, back) {
                    if let Some(bytes) = alter(&seg, field, v) {
                        self.pair.forge_ptcp(path, u16::from(id), &bytes);
                    }
                }
            }
            7 => {
                // A real segment again, on any path, under another id perhaps.
                let (id, back, wire, other) =
                    (args.byte() % 16, args.byte(), args.byte(), args.byte());
                if let Some((_, seg)) = self.remembered(id, back) {
                    let conn = if other < 32 {
                        u16::from(other)
                    } else {
                        u16::from(id)
                    };
                    self.pair.forge_ptcp(PathId(wire % 4), conn, &seg);
                }
            }
            8 => self.pair.honest(u32::from(args.byte() % 8) + 1),
            9 => {
                // The client reads what its connections have.
                for c in self.client.values_mut() {
                    while c.read(&mut self.buf) > 0 {}
                }
            }
            k => self.pass(Duration::from_millis(
                u64::from(k - 9) * u64::from(args.byte()),
            )),
        }
        args.0
    }

    /// The `back`-th newest segment connection `id` of the client's sent, and its path.
    fn remembered(&self, id: u8, back: u8) -> Option<(PathId, Vec<u8>)> {
        let sent = self.sent.get(&u16::from(id))?;
        let i = usize::from(back) % sent.len().max(1);
        sent.iter().rev().nth(i).cloned()
    }

    /// Virtual time passes, the tables taking turns at least every [`TURN`].
    fn pass(&mut self, dt: Duration) {
        let end = self.pair.now + dt;
        while self.pair.now < end {
            let next = [Some(self.pair.now + TURN), self.table.poll_timeout()]
                .into_iter()
                .chain(self.client.values().map(StripedConnection::poll_timeout))
                .flatten()
                .min()
                .map_or(end, |t| t.min(end))
                .max(self.pair.now);
            let dt = next - self.pair.now;
            self.pair.step(dt);
            self.turn();
            if dt == Duration::ZERO {
                // A timer due now ran in the turn; on to the next.
                self.pair.step(Duration::from_micros(100));
            }
        }
    }

    /// Both ends' pTCP take a turn at the current time: deliveries, timers, the server's
    /// application, sending.
    fn turn(&mut self) {
        let now = self.pair.now;
        // The client: what the server sent, its timers, what its connections send.
        while let Some(seg) = self.pair.client.poll_ptcp() {
            if let Some(c) = self.client.get_mut(&seg.conn) {
                c.handle_datagram(now, seg.path, &seg.segment);
            }
        }
        let mut outgoing = Vec::new();
        for (&id, c) in &mut self.client {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
            while let Some((path, seg)) = c.poll_transmit(now) {
                outgoing.push((id, path, seg));
            }
            while c.poll_event().is_some() {}
        }
        for (id, path, seg) in outgoing {
            self.pair.forge_ptcp(path, id, &seg);
            let sent = self.sent.entry(id).or_default();
            if sent.len() >= REMEMBERED {
                sent.pop_front();
            }
            sent.push_back((path, seg));
        }
        // The server, as the daemon runs its table.
        self.table.deliver(&mut self.pair.server, now);
        if self.table.poll_timeout().is_some_and(|t| t <= now) {
            self.table.handle_timeout(now);
        }
        while let Some(id) = self.table.accept() {
            self.accepted.push(id);
        }
        let mut gone = Vec::new();
        for &id in &self.accepted {
            let Some(c) = self.table.conn_mut(id) else {
                gone.push(id);
                continue;
            };
            let mut left = self.read_per_turn;
            while left > 0 {
                let n = c.read(&mut self.buf[..left.min(1 << 16)]);
                if n == 0 {
                    break;
                }
                left -= n;
                self.server_read += n as u64;
            }
            while c.poll_event().is_some() {}
            if c.is_finished() || c.was_aborted() {
                self.table.remove_after_transmit(id);
                gone.push(id);
            }
        }
        self.accepted.retain(|id| !gone.contains(id));
        let mut datagrams = Vec::new();
        self.table
            .transmit(&mut self.pair.server, now, &mut self.out, |path, d| {
                datagrams.push((path, d.to_vec()))
            });
        for (path, d) in datagrams {
            self.pair.send(false, path, &d);
        }
    }

    /// The bounds; panics on a broken one.
    fn check(&self) {
        let n = self.table.len() as u64;
        assert!(self.table.len() <= MAX_CONNECTIONS, "{n} connections");
        let bound = self.shared.budget() + n * MEMORY_FLOOR;
        let (sent, offered) = self.table.committed_bytes();
        assert!(sent <= bound, "{sent} bytes unacknowledged, bound {bound}");
        assert!(
            offered <= bound,
            "{offered} bytes of windows, bound {bound}"
        );
        // What the table counted: at least what is committed, within the bound, and what the
        // shared budget holds of it.
        let counted = self.table.counted_bytes();
        assert!(
            counted.0 >= sent && counted.1 >= offered,
            "counted {counted:?}, committed ({sent}, {offered})"
        );
        assert!(
            counted.0 <= bound && counted.1 <= bound,
            "counted {counted:?}, bound {bound}"
        );
        assert_eq!(self.shared.committed(), counted);
        let (mut held, mut charge) = (0, 0);
        for id in self.table.conn_ids() {
            if let Some(c) = self.table.conn(id) {
                held += c.receive_buffered_bytes();
                charge += c.receive_held_charge();
            }
        }
        assert!(held <= bound, "{held} bytes held, bound {bound}");
        assert!(
            charge <= bound + bound / 2,
            "a charge of {charge} for what is held, bound {bound}"
        );
    }
}

/// The server table's options: a responder that accepts, with a budget of `budget` bytes.
fn table_options(budget: u64) -> TableOptions {
    TableOptions {
        congestion: CongestionAlgorithm::Bbr,
        receive_buffer_bytes: None,
        mss: 1300,
        accept: true,
        memory_budget: budget,
    }
}

/// `seg` with one field, chosen by `field`, moved by or set to `v`; `None` if it does not
/// parse.
fn alter(seg: &[u8], field: u8, v: u32) -> Option<Vec<u8>> {
    let mut s = Segment::parse_bytes(seg).ok()?;
    let v64 = u64::from(v);
    let payload;
    match field % 10 {
        0 => s.vseq = VirtualSeq(s.vseq.0.wrapping_add(v64)),
        1 => s.offset = s.offset.wrapping_add(v64),
        2 => s.data_ack = s.data_ack.wrapping_add(v64),
        3 => s.window = v,
        4 => s.vack = VirtualSeq(s.vack.0.wrapping_add(v64)),
        5 => s.flags = Flags::from_bits(v as u8).unwrap_or(s.flags),
        6 => {
            // A payload of another length.
            payload = vec![0x33; (v % 2048) as usize];
            s.payload = &payload;
        }
        7 => {
            // A block of at least one packet (an empty one does not encode).
            let start = s.vack.0.wrapping_add(v64 & 0xffff);
            s.flags = s.flags.with(Flags::ACK);
            s.sacks[0] = SackBlock {
                start: VirtualSeq(start),
                end: VirtualSeq(start.wrapping_add((v64 >> 16).max(1))),
            };
            s.sack_len = s.sack_len.max(1);
        }
        8 => s.flow = braid_ptcp::FlowId((v as usize % braid_ptcp::MAX_FLOWS) as u8),
        _ => s.offset = v64,
    }
    let mut out = vec![0; s.buffer_len()];
    let n = s.emit(&mut out).ok()?;
    out.truncate(n);
    Some(out)
}

/// Bytes read in order, zeros past their end.
struct Args<'a>(&'a [u8]);

impl<'a> Args<'a> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// Plays `data`: its first two bytes choose the bond's shape ([`Shape::from_bytes`]), the
/// third the memory budget (64 KiB to 16 MiB), the fourth the path rates the client declares
/// (they size the server's buffers, up to 64 MiB each); the rest are steps, each an op byte and
/// its arguments (zeros past the end). Panics if a bound breaks.
pub fn run(data: &[u8]) {
    let Some((&[a, b, budget, rates], steps)) = data.split_first_chunk::<4>() else {
        return;
    };
    let shape = Shape::from_bytes([a, b]);
    let mut params = shape.params();
    // From 1 Mbit/s to 4 Gbit/s a path.
    let rate = 1_000_000u64 << (rates % 13);
    for r in &mut params.rates_bps {
        *r = rate;
    }
    if params.validate().is_err() {
        params = shape.params();
    }
    let budget = (64u64 << 10) << (budget % 9);
    let mut bed = Bed::new(&shape, params, budget).expect("an honest handshake completes");
    bed.play(steps);
    bed.release();
}

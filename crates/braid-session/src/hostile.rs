//! A hostile peer, for tests and fuzzing (feature `fuzzing`): two sessions over three
//! in-memory paths, one of which is authenticated but lies.
//!
//! A proxy serves many clients, and any one of them holds a valid key, so whatever its session
//! can seal reaches the server's session past the cryptography. [`Pair::forge`] seals arbitrary
//! inner bytes under the liar's real keys and hands them to the other end, between the honest
//! traffic [`Pair::honest`] and [`Pair::step`] carry both ways. The property the tests and the
//! fuzz target check: nothing panics (a panic takes every client's tunnel down), neither end
//! holds more than its bounds ([`Pair::held_bytes`], [`HELD_BOUND`]), and both keep running
//! (timers, polls, status).
//!
//! Not checked: that the liar's own traffic still flows. A lie about the stripe's order (a
//! marker from a round far ahead, a sequence number far ahead) can hold that session's
//! deliveries until its buffer limit, as the strIPe receiver trusts its sender's markers; that
//! costs only the liar's own tunnel, which it could as well stop by sending nothing.

use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::MarkerPosition;
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use std::collections::VecDeque;

use crate::{BondParams, PrivateKey, Role, Session, SessionConfig};

/// The bond's paths.
pub const PATHS: usize = 3;

/// Each path's one-way delay, both ways.
const DELAY_MS: [u64; PATHS] = [5, 30, 80];

/// Each path's send queue in these bonds (`BondParams::queue_limit_bytes`).
const QUEUE_LIMIT_BYTES: u32 = 64 * 1024;

/// What either end may hold at most, whatever it is told: its resequencer's hard limit, twice
/// `ResequencerConfig::buffer_limit_bytes` (4 MiB: past it the resequencer skips gaps, past
/// twice it drops arrivals), plus a full send queue on every path, and one packet over each (a
/// packet is taken while there is room), plus the most copies waiting for reinjection (a
/// peer's notices that paths are dark: [`crate::retransmit::MAX_REINJECT`] packets, of the
/// bond's largest, 1500 bytes here, and their headers).
pub const HELD_BOUND: u64 = 2 * (4 << 20)
    + PATHS as u64 * (QUEUE_LIMIT_BYTES as u64 + 2048)
    + crate::retransmit::MAX_REINJECT as u64 * (1500 + 64);

/// [`HELD_BOUND`] for a bond of `params` (the client's choice of queue and packet size).
pub fn held_bound(params: &BondParams) -> u64 {
    let queue = u64::from(params.queue_limit_bytes.max(params.max_packet));
    2 * (4 << 20)
        + PATHS as u64 * (queue + u64::from(params.max_packet) + 2048)
        + crate::retransmit::MAX_REINJECT as u64 * u64::from(params.max_packet + 64)
}

/// The bond's shape.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The scheduler.
    pub scheduler: SchedulerKind,
    /// The resequencing.
    pub resequence: ResequenceMode,
    /// In-tunnel retransmission (NACKs and abandons).
    pub retransmit: bool,
    /// Delay equalisation.
    pub equalize_delay: bool,
    /// Adaptive SRR.
    pub adaptive: bool,
    /// TCP/IP header compression.
    pub compress_headers: bool,
    /// A `[qos]` shaper at both ends (voice on DSCP 46, bulk for the rest).
    pub qos: bool,
    /// Which end lies: the client (the proxy's case) or the server.
    pub liar_is_client: bool,
    /// Path 2 is a backup (`BondParams::backup_paths`; with sequence numbers only).
    pub backup: bool,
}

impl Shape {
    /// A shape from raw choices, moved to what the bond's parameters allow: EDPF is not
    /// causal (sequence numbers or none), PET's SIG-ACKs and adaptive SRR need sequence
    /// numbers.
    pub fn new(scheduler: SchedulerKind, resequence: ResequenceMode, flags: [bool; 7]) -> Shape {
        let [retransmit, equalize_delay, adaptive, qos, liar_is_client, compress_headers, backup] =
            flags;
        let adaptive = adaptive && scheduler == SchedulerKind::Srr;
        let resequence = match (scheduler, resequence) {
            (SchedulerKind::Pet, _) => ResequenceMode::Sequence,
            (_, _) if adaptive => ResequenceMode::Sequence,
            (SchedulerKind::Edpf, ResequenceMode::Logical) => ResequenceMode::Sequence,
            (_, r) => r,
        };
        Shape {
            scheduler,
            resequence,
            retransmit,
            equalize_delay,
            adaptive,
            qos,
            liar_is_client,
            compress_headers,
            backup: backup && resequence == ResequenceMode::Sequence,
        }
    }

    /// The shape the first bytes of a fuzz input choose (two bytes).
    pub fn from_bytes(b: [u8; 2]) -> Shape {
        let scheduler = [
            SchedulerKind::Srr,
            SchedulerKind::Pet,
            SchedulerKind::Edpf,
            SchedulerKind::Rr,
        ][usize::from(b[0] % 4)];
        let resequence = [
            ResequenceMode::Sequence,
            ResequenceMode::Logical,
            ResequenceMode::None,
        ][usize::from(b[0] / 4 % 3)];
        let flag = |i: u8| b[1] & (1 << i) != 0;
        Shape::new(
            scheduler,
            resequence,
            [
                flag(0),
                flag(1),
                flag(2),
                flag(3),
                flag(4),
                flag(5),
                flag(6),
            ],
        )
    }

    /// The bond's parameters for this shape (three paths of 8, 4 and 2 Mbit/s).
    pub fn params(&self) -> BondParams {
        BondParams {
            scheduler: self.scheduler,
            rates_bps: vec![8_000_000, 4_000_000, 2_000_000],
            max_packet: 1400,
            seed: 1,
            resequence: self.resequence,
            marker_interval_rounds: u32::from(self.resequence == ResequenceMode::Logical),
            marker_position: MarkerPosition::End,
            hold_ms: 100,
            credit_buffer_bytes: 0,
            queue_limit_bytes: QUEUE_LIMIT_BYTES,
            equalize_delay: self.equalize_delay,
            retransmit: self.retransmit,
            backup_rtt_multiple: 0,
            adaptive: self.adaptive,
            compress_headers: self.compress_headers,
            policies: Vec::new(),
            backup_paths: if self.backup { 0b100 } else { 0 },
            path_names: Vec::new(),
        }
    }
}

/// A datagram in flight between two sessions.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// When it arrives.
    pub at: Instant,
    /// Its path.
    pub path: usize,
    /// Client to server (else server to client).
    pub to_server: bool,
    /// The datagram.
    pub bytes: Vec<u8>,
}

/// The in-memory wires between two sessions, and the clock that runs them.
#[derive(Debug, Default)]
pub struct Wires {
    in_flight: VecDeque<InFlight>,
}

impl Wires {
    /// Put a datagram on the wire, to arrive `at`.
    pub fn push(&mut self, at: Instant, path: usize, to_server: bool, bytes: &[u8]) {
        self.in_flight.push_back(InFlight {
            at,
            path,
            to_server,
            bytes: bytes.to_vec(),
        });
    }

    /// Move `now` to the next instant, not after `end`, at which either session's timer
    /// fires or a datagram arrives, and take the datagrams due then off the wire; `None`
    /// (with `now` at `end`) if nothing happens until `end`.
    pub fn next(
        &mut self,
        now: &mut Instant,
        end: Instant,
        sessions: [&Session; 2],
    ) -> Option<Vec<InFlight>> {
        let wire = self.in_flight.iter().map(|w| w.at).min();
        let next = [wire, sessions[0].poll_timeout(), sessions[1].poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end)
            .max(*now);
        if next > end {
            *now = end;
            return None;
        }
        *now = next;
        let (due, keep): (Vec<_>, Vec<_>) = self.in_flight.drain(..).partition(|w| w.at <= next);
        self.in_flight = keep.into();
        Some(due)
    }
}

/// Two sessions over [`PATHS`] in-memory paths, driven as the daemon drives them.
pub struct Pair {
    /// The client (initiator).
    pub client: Session,
    /// The server (responder).
    pub server: Session,
    /// Which end lies.
    liar_is_client: bool,
    /// Virtual time.
    pub now: Instant,
    /// Leave the pTCP segments that arrive at either end for the caller, who runs pTCP
    /// connection tables over the sessions ([`Session::poll_ptcp`]), instead of dropping them.
    pub keep_ptcp: bool,
    wires: Wires,
    next_id: u32,
    buf: Vec<u8>,
}

impl Pair {
    /// A bond of `shape`, established honestly (300 ms of virtual time); `None` if the
    /// handshake did not complete, which would be a defect.
    pub fn established(shape: &Shape) -> Option<Pair> {
        Pair::established_with(shape, shape.params())
    }

    /// [`Pair::established`] with the client proposing `params` (of [`PATHS`] paths) in its
    /// handshake instead of the shape's: a lying client sets the server's limits this way.
    pub fn established_with(shape: &Shape, params: BondParams) -> Option<Pair> {
        let ck = PrivateKey::from_random([1; 32]);
        let sk = PrivateKey::from_random([2; 32]);
        let mut client_cfg =
            SessionConfig::new(Role::Initiator, ck.clone(), sk.public_key(), Some(params));
        let mut server_cfg = SessionConfig::new(Role::Responder, sk, ck.public_key(), None);
        if shape.qos {
            let mut qos = braid_qos::QosConfig::one_class("bulk", 200);
            qos.classes.insert(
                0,
                braid_qos::ClassTable {
                    name: "voice".into(),
                    dscp: vec![46],
                    ..braid_qos::ClassTable::default()
                },
            );
            client_cfg.qos = Some(qos.clone());
            server_cfg.qos = Some(qos);
        }
        let wall = 1_700_000_000_000_000_000;
        let mut pair = Pair {
            client: Session::new(client_cfg, Instant::ZERO, [3; 32], wall),
            server: Session::new(server_cfg, Instant::ZERO, [4; 32], wall),
            liar_is_client: shape.liar_is_client,
            now: Instant::ZERO,
            keep_ptcp: false,
            wires: Wires::default(),
            next_id: 0,
            // Room for the largest datagram any bond makes (jumbo frames included).
            buf: vec![0; 1 << 17],
        };
        pair.step(Duration::from_millis(300));
        (pair.client.is_established() && pair.server.is_established()).then_some(pair)
    }

    /// The liar seals `inner` on wire path `wire` under its real keys (it passes decryption
    /// and the replay window) and the other end takes it at once. False if the liar's session
    /// would not seal it (a path the bond does not have).
    pub fn forge(&mut self, wire: PathId, inner: &[u8]) -> bool {
        let liar = if self.liar_is_client {
            &mut self.client
        } else {
            &mut self.server
        };
        let Some(n) = liar.seal_inner(wire, inner, &mut self.buf) else {
            return false;
        };
        let bytes = self.buf[..n].to_vec();
        self.arrive(wire.index(), self.liar_is_client, &bytes);
        self.drain();
        true
    }

    /// The liar seals `segment` as one of its pTCP connection `conn`'s on wire path `wire`
    /// ([`Session::seal_ptcp`], under its real keys) and the other end takes it at once. False
    /// if the liar's session would not seal it (a path the bond does not have, an empty
    /// segment).
    pub fn forge_ptcp(&mut self, wire: PathId, conn: u16, segment: &[u8]) -> bool {
        let (liar, now) = if self.liar_is_client {
            (&mut self.client, self.now)
        } else {
            (&mut self.server, self.now)
        };
        let Some(n) = liar.seal_ptcp(now, wire, conn, segment, &mut self.buf) else {
            return false;
        };
        let bytes = self.buf[..n].to_vec();
        self.arrive(wire.index(), self.liar_is_client, &bytes);
        self.drain();
        true
    }

    /// A datagram the client (else the server) sends on path `path` outside its session's
    /// polls, as a pTCP table sends what it sealed ([`Session::seal_ptcp`]): it arrives after
    /// the path's delay.
    pub fn send(&mut self, from_client: bool, path: usize, bytes: &[u8]) {
        if let Some(ms) = DELAY_MS.get(path) {
            let at = self.now + Duration::from_millis(*ms);
            self.wires.push(at, path, from_client, bytes);
        }
    }

    /// Both ends send `n` honest packets to each other, and 1 ms passes.
    pub fn honest(&mut self, n: u32) {
        for _ in 0..n {
            let (a, b) = (self.packet(), self.packet());
            self.client.send(self.now, &a);
            self.server.send(self.now, &b);
        }
        self.step(Duration::from_millis(1));
    }

    /// What either end holds in its reorder buffer (its charge: bytes and entries) and send
    /// queues, the larger.
    pub fn held_bytes(&self) -> u64 {
        [&self.client, &self.server]
            .iter()
            .map(|s| {
                // The resequencer's charge, not its payload bytes: each held packet and marker
                // counts its entry too (`Resequencer::held_charge`), so empty packets count.
                let resequencer = s.resequencer_charge();
                let queued = s.status().paths.iter().map(|p| p.queued_bytes).sum::<u64>();
                resequencer + queued + s.reinjection_bytes()
            })
            .max()
            .unwrap_or(0)
    }

    /// Run both ends for `dt`: wires, timers, deliveries.
    pub fn step(&mut self, dt: Duration) {
        let end = self.now + dt;
        loop {
            self.flush();
            let sessions = [&self.client, &self.server];
            let Some(due) = self.wires.next(&mut self.now, end, sessions) else {
                break;
            };
            for w in due {
                self.arrive(w.path, w.to_server, &w.bytes);
            }
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
            self.drain();
        }
    }

    /// Everything both ends have to send, onto the wires.
    fn flush(&mut self) {
        for (p, ms) in DELAY_MS.iter().enumerate() {
            let at = self.now + Duration::from_millis(*ms);
            for to_server in [true, false] {
                let from = if to_server {
                    &mut self.client
                } else {
                    &mut self.server
                };
                while let Some(n) = from.poll_transmit(self.now, PathId(p as u8), &mut self.buf) {
                    self.wires.push(at, p, to_server, &self.buf[..n]);
                }
            }
        }
    }

    /// One datagram into its receiver, as the daemon hands it over (the server learns a
    /// datagram's path from its header; the client knows its sockets).
    fn arrive(&mut self, p: usize, to_server: bool, bytes: &[u8]) {
        if to_server {
            let _ = self.server.handle_datagram(self.now, None, bytes);
        } else {
            let _ = self
                .client
                .handle_datagram(self.now, Some(PathId(p as u8)), bytes);
        }
    }

    /// Take what each end delivers, and the pTCP segments that arrived.
    fn drain(&mut self) {
        for s in [&mut self.client, &mut self.server] {
            while s.poll_deliver(self.now).is_some() {}
            if !self.keep_ptcp {
                while s.poll_ptcp().is_some() {}
            }
        }
    }

    /// An honest IPv4 UDP packet, 60-1199 bytes, every fifth one DSCP 46.
    fn packet(&mut self) -> Vec<u8> {
        self.next_id = self.next_id.wrapping_add(1);
        let len = 60 + (self.next_id as usize * 97) % 1140;
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[1] = if self.next_id.is_multiple_of(5) {
            46 << 2
        } else {
            0
        };
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        if self.next_id.is_multiple_of(2) {
            // TCP, which header compression takes (when the shape has it): a valid IPv4
            // checksum, ports, a sequence number, no options, ACK.
            p[9] = 6;
            let sum = crate::pmtu::checksum(&p[..20]);
            p[10..12].copy_from_slice(&sum.to_be_bytes());
            p[20..24].copy_from_slice(&[0x13, 0x89, 0x9c, 0x40]);
            p[24..28].copy_from_slice(&self.next_id.to_be_bytes());
            p[32] = 5 << 4;
            p[33] = 0x10;
        } else {
            p[9] = 17;
            p[20..24].copy_from_slice(&self.next_id.to_be_bytes());
        }
        p
    }
}

/// An IPv4 TCP segment with timestamps as Linux sends one, with a valid IPv4 checksum: flow
/// 10.0.0.1:`sport` -> 10.0.0.2:80, sequence number `seq`, `len` bytes of data. Header
/// compression takes it (`crate::compress`); tests and benchmarks send it.
pub fn tcp_ts_segment(sport: u16, seq: u32, len: usize) -> Vec<u8> {
    let total = 52 + len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let sum = crate::pmtu::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&80u16.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[28..32].copy_from_slice(&1u32.to_be_bytes());
    p[32] = 8 << 4;
    p[33] = 0x10;
    p[34..36].copy_from_slice(&500u16.to_be_bytes());
    p[36..38].copy_from_slice(&(seq as u16 ^ 0x5a5a).to_be_bytes());
    p[40..44].copy_from_slice(&[1, 1, 8, 10]);
    p[44..48].copy_from_slice(&seq.wrapping_mul(7).to_be_bytes());
    p[48..52].copy_from_slice(&seq.wrapping_mul(3).to_be_bytes());
    for (i, b) in p[52..].iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    p
}

//! The striping sender (stripe paper section 3.2, Appendix A `Send`, `SendMarker`, `Send_i`).
//!
//! Packets enter in FIFO order through [`Striper::send`], go to the path the causal scheduler
//! selects (`f(s)`) and wait in that path's bounded transmit queue (the per-channel transmit
//! buffers of Figure 1 / Figure 17). The driver pulls them per path with
//! [`Striper::poll_transmit`] whenever the path can take a packet. Markers (section 5) are put
//! in band into the same queues at round boundaries, and credits (section 6.3.1) gate
//! transmission per path.

use crate::path::{Credit, Marker, PathId};
use crate::pet::{Pet, PetConfig};
use crate::scheduler::{CausalScheduler, ConfigError, Scheduler, SchedulerConfig, SchedulerKind};
use crate::time::Instant;
use std::collections::VecDeque;

/// Where in a path's round a marker is placed (stripe conference paper section 6.3: start and
/// end of a round gave the fewest misordered deliveries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkerPosition {
    /// Before the first packet of the round on the path.
    Start,
    /// After the first packet of the round on the path.
    Middle,
    /// After the last packet of the round on the path.
    End,
}

impl MarkerPosition {
    /// Name used in configs and result files.
    pub fn name(self) -> &'static str {
        match self {
            MarkerPosition::Start => "start",
            MarkerPosition::Middle => "middle",
            MarkerPosition::End => "end",
        }
    }
}

impl core::str::FromStr for MarkerPosition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "start" => Ok(MarkerPosition::Start),
            "middle" => Ok(MarkerPosition::Middle),
            "end" => Ok(MarkerPosition::End),
            other => Err(format!(
                "unknown marker position `{other}`: use start, middle or end"
            )),
        }
    }
}

/// Marker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerConfig {
    /// A marker every this many rounds on each path; 0 turns markers off.
    pub interval_rounds: u64,
    /// Where in the round it goes.
    pub position: MarkerPosition,
}

impl Default for MarkerConfig {
    fn default() -> Self {
        MarkerConfig {
            interval_rounds: 1,
            position: MarkerPosition::End,
        }
    }
}

/// Sender settings.
#[derive(Clone, Debug)]
pub struct StriperConfig {
    /// The causal scheduler; the receiver must use an equal one.
    pub scheduler: SchedulerConfig,
    /// Markers for resynchronisation.
    pub markers: MarkerConfig,
    /// Put a sequence number on every data packet (resequencing mode `sequence`).
    pub sequence_numbers: bool,
    /// Limit of each path's transmit queue, in payload bytes.
    pub queue_limit_bytes: u64,
    /// Credit flow control: the initial grant per path in bytes, or `None` for no flow control.
    pub initial_credit_bytes: Option<Vec<u64>>,
    /// The receiver equalises the paths' delays (scheduler `pet`: [`PetConfig::equalized`]).
    pub receiver_equalizes: bool,
    /// Adaptive SRR (scheduler `srr`, mode `sequence`): a [`Pet`] measures the paths from the
    /// packets SRR places ([`Pet::observe`]), and the driver sets SRR's quanta from its
    /// estimates ([`Striper::adapt_quanta`]).
    pub adaptive: bool,
    /// PET (scheduler `pet` or adaptive SRR) probes with padding pairs of `max_packet` bytes
    /// instead of data ([`PetConfig::padding`]); the driver queues them with
    /// [`Striper::queue_padding`].
    pub pet_padding: bool,
}

impl StriperConfig {
    /// Defaults: markers at the end of every round, no sequence numbers, 64 KiB queues, no
    /// credits.
    pub fn new(scheduler: SchedulerConfig) -> Self {
        StriperConfig {
            scheduler,
            markers: MarkerConfig::default(),
            sequence_numbers: false,
            queue_limit_bytes: 64 * 1024,
            initial_credit_bytes: None,
            receiver_equalizes: false,
            adaptive: false,
            pet_padding: false,
        }
    }
}

/// A message the sender puts on a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing<P> {
    /// A data packet.
    Data {
        /// Sequence number, in mode `sequence`.
        seq: Option<u64>,
        /// Payload length in bytes.
        len: u32,
        /// The payload (opaque to the core).
        payload: P,
    },
    /// A marker.
    Marker(Marker),
    /// A padding packet of PET's, for its estimates ([`PetConfig::padding`]): `len` bytes of
    /// nothing, reported by the receiver under `id`. Not data: no sequence number, no
    /// credits, never delivered.
    Padding {
        /// Its id ([`crate::pet::PADDING_ID_BIT`] set).
        id: u64,
        /// Payload length in bytes.
        len: u32,
    },
}

/// A message to transmit on a path now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit<P> {
    /// The path.
    pub path: PathId,
    /// The message.
    pub message: Outgoing<P>,
}

/// Why [`Striper::send`] refused a packet; the payload is handed back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError<P> {
    /// The selected path's transmit queue is full: try again after a `poll_transmit`.
    #[error("transmit queue of the selected path is full")]
    Full(P),
    /// Larger than the configured largest packet.
    #[error("packet larger than max_packet")]
    TooLarge(P),
}

/// Sender counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StriperStats {
    /// Data packets accepted.
    pub data_packets: u64,
    /// Data payload bytes accepted.
    pub data_bytes: u64,
    /// Markers queued.
    pub markers: u64,
    /// `send` calls refused because the queue was full.
    pub full: u64,
    /// `send` calls refused because the packet was too large.
    pub too_large: u64,
    /// `poll_transmit` calls that found data held back by credits.
    pub credit_stalls: u64,
    /// Credit grants that were stale (lower than one already applied) and ignored.
    pub stale_credits: u64,
    /// Copies queued by [`Striper::duplicate_last`].
    pub duplicates: u64,
    /// Copies that found no other path with room, and were not sent.
    pub duplicates_dropped: u64,
}

#[derive(Clone, Debug, Default)]
struct TxPath<P> {
    queue: VecDeque<Outgoing<P>>,
    queued_bytes: u64,
    /// Cumulative data bytes queued on this path (what a marker reports as `tx_bytes`).
    enqueued_bytes: u64,
    /// Cumulative data bytes transmitted.
    tx_bytes: u64,
    /// Cumulative credit limit, if flow control is on.
    credit_limit: Option<u64>,
    /// Round of the last data packet queued, to recognise the first packet of a round.
    last_round: u64,
}

/// The striping sender.
///
/// # Polling
/// Call [`send`](Self::send) for each packet in FIFO order; for each path that can transmit,
/// call [`poll_transmit`](Self::poll_transmit) until it returns `None`. Feed credit grants from
/// the peer to [`handle_credit`](Self::handle_credit). The striper has no timers. `now` must
/// never go backwards.
#[derive(Clone, Debug)]
pub struct Striper<P> {
    sched: Scheduler,
    paths: Vec<TxPath<P>>,
    markers: MarkerConfig,
    sequence_numbers: bool,
    next_seq: u64,
    /// The sequence number of the data packet queued last; `None` if it had none (or none
    /// was queued): what [`Striper::duplicate_last`] copies.
    last_seq: Option<u64>,
    queue_limit_bytes: u64,
    max_packet: u32,
    /// One-way delay of each path, as the driver measures it (for EDPF and small packets).
    path_delay: Vec<crate::time::Duration>,
    /// Scheduler `pet`: PET chooses every data packet's path (section V-A of the BAG paper).
    pet: Option<Pet>,
    /// Adaptive SRR: `pet` only measures; SRR places.
    adaptive: bool,
    stats: StriperStats,
}

/// In mode `sequence`, packets this small (TCP's pure ACKs, for instance) go on the active path
/// with the least one-way delay instead of taking their SRR turn: the receiver resequences by
/// number, so it need not predict them, and an ACK that crosses the slowest path would hold up
/// every ACK behind it. PET places them only while no path's delay is known yet (the first
/// packets of a bond); a receiver reports none of them in its SIG-ACKs, and PET's blackout
/// check waits for no report of one.
pub const SMALL_PACKET_BYTES: u32 = 160;

/// Adaptive SRR: the slowest path's quantum is this many of the largest packets, so that SRR
/// sends every path at least two packets back to back each round, and the measuring PET gets
/// its pairs (with one packet a round on a path, no two consecutive packets share it, and the
/// estimate never comes).
pub const ADAPTIVE_PACKETS_PER_ROUND: u32 = 2;

impl<P> Striper<P> {
    /// A sender with the given config.
    pub fn new(config: &StriperConfig) -> Result<Self, ConfigError> {
        let sched = config.scheduler.build()?;
        let n = sched.paths();
        let adaptive = config.adaptive && config.scheduler.kind == SchedulerKind::Srr;
        if config.adaptive && !adaptive {
            return Err(ConfigError::Invalid(
                "adaptive quanta are SRR's: use scheduler = \"srr\"",
            ));
        }
        let pet = if config.scheduler.kind == SchedulerKind::Pet || adaptive {
            if !config.sequence_numbers {
                return Err(ConfigError::NotCausal("pet"));
            }
            let mut c = PetConfig::new(config.scheduler.rates_bps.clone());
            c.overhead_bytes = config.scheduler.overhead_bytes;
            c.equalized = config.receiver_equalizes;
            c.padding = config.pet_padding.then_some(config.scheduler.max_packet);
            Some(Pet::new(c).map_err(|_| ConfigError::PathCount(n))?)
        } else {
            None
        };
        if let Some(c) = &config.initial_credit_bytes {
            if c.len() != n {
                return Err(ConfigError::PathCount(c.len()));
            }
        }
        let paths = (0..n)
            .map(|i| TxPath {
                queue: VecDeque::new(),
                queued_bytes: 0,
                enqueued_bytes: 0,
                tx_bytes: 0,
                credit_limit: config.initial_credit_bytes.as_ref().map(|c| c[i]),
                last_round: 0,
            })
            .collect();
        let mut striper = Striper {
            sched,
            paths,
            markers: config.markers,
            sequence_numbers: config.sequence_numbers,
            next_seq: 0,
            last_seq: None,
            queue_limit_bytes: config.queue_limit_bytes,
            max_packet: config.scheduler.max_packet,
            path_delay: vec![crate::time::Duration::ZERO; n],
            pet,
            adaptive,
            stats: StriperStats::default(),
        };
        if adaptive {
            // Quanta from the configured (or guessed) rates, the slowest path sending
            // ADAPTIVE_PACKETS_PER_ROUND packets a round, so every path sends pairs.
            let rates = &config.scheduler.rates_bps;
            let min = rates.iter().copied().min().unwrap_or(1).max(1);
            let unit = u64::from(striper.max_packet) * u64::from(ADAPTIVE_PACKETS_PER_ROUND);
            let q: Vec<u32> = rates
                .iter()
                .map(|&r| u32::try_from(unit * r / min).unwrap_or(u32::MAX))
                .collect();
            striper.set_quanta(&q);
        }
        Ok(striper)
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// The scheduler's state (for inspection and tests).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Counters.
    pub fn stats(&self) -> &StriperStats {
        &self.stats
    }

    /// Payload bytes waiting in `path`'s transmit queue.
    pub fn queued_bytes(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.queued_bytes)
    }

    /// The most a path's transmit queue holds, bytes ([`StriperConfig::queue_limit_bytes`]).
    pub fn queue_limit_bytes(&self) -> u64 {
        self.queue_limit_bytes
    }

    /// Messages waiting in `path`'s transmit queue.
    pub fn queued_messages(&self, path: PathId) -> usize {
        self.paths.get(path.index()).map_or(0, |p| p.queue.len())
    }

    /// The credit limit currently applied on `path`, if flow control is on.
    pub fn credit_limit(&self, path: PathId) -> Option<u64> {
        self.paths.get(path.index()).and_then(|p| p.credit_limit)
    }

    /// Cumulative data bytes transmitted on `path`.
    pub fn tx_bytes(&self, path: PathId) -> u64 {
        self.paths.get(path.index()).map_or(0, |p| p.tx_bytes)
    }

    /// Whether a packet of `len` bytes would be accepted now.
    pub fn can_send(&self, len: u32) -> bool {
        if len > self.max_packet {
            return false;
        }
        // A small packet goes on the least-delay path, outside the scheduler, as `send` puts
        // it. (Asking the scheduler's path instead let `send` refuse a TCP ACK `can_send` had
        // allowed when the fastest path's queue was full.)
        if let Some(p) = self.small_packet_path(len) {
            return self.has_room(p.index(), len);
        }
        if self.pet.is_some() && !self.adaptive {
            // PET's choice is made, and remembered, at send time: every path must have room.
            return self.all_have_room(len);
        }
        match &self.sched {
            // EDPF chooses at send time, by the clock, whatever path's queue is full: every
            // path must have room, as for PET. ("Any path with room" let `send` refuse what
            // `can_send` had allowed, and the simulator's backlogged source stopped at once.)
            Scheduler::Edpf(_) => self.all_have_room(len),
            _ => self.has_room(self.sched.select().index(), len),
        }
    }

    /// Whether path `i`'s transmit queue can take `len` more bytes.
    fn has_room(&self, i: usize, len: u32) -> bool {
        self.paths[i].queued_bytes + u64::from(len) <= self.queue_limit_bytes
    }

    /// Whether every path's transmit queue can take `len` more bytes.
    fn all_have_room(&self, len: u32) -> bool {
        (0..self.paths.len()).all(|i| self.has_room(i, len))
    }

    /// Among the active paths that `accept` takes, the one with the least measured one-way
    /// delay (paths not measured yet last).
    fn least_delay_path(&self, accept: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.paths.len())
            .filter(|&i| self.sched.is_active(PathId(i as u8)) && accept(i))
            .min_by_key(|&i| (self.path_delay[i].is_zero(), self.path_delay[i]))
    }

    /// EDPF: set the one-way delay `D_l` of `path` (e.g. half its measured RTT). Ignored by the
    /// causal schedulers.
    pub fn set_path_delay(&mut self, path: PathId, delay: crate::time::Duration) {
        if let Some(d) = self.path_delay.get_mut(path.index()) {
            *d = delay;
        }
        if let Scheduler::Edpf(e) = &mut self.sched {
            e.set_delay(path, delay);
        }
    }

    /// EDPF: set the bottleneck rate `B_l` of `path` in bit/s (a measured or estimated rate).
    /// Ignored by the causal schedulers.
    pub fn set_path_rate(&mut self, path: PathId, rate_bps: u64) {
        if let Scheduler::Edpf(e) = &mut self.sched {
            e.set_rate(path, rate_bps);
        }
    }

    /// In mode `sequence`, the path for a small packet: the active one with the least delay
    /// among those whose delay is known (zero means not measured yet).
    fn small_packet_path(&self, len: u32) -> Option<PathId> {
        if !self.sequence_numbers || len > SMALL_PACKET_BYTES {
            return None;
        }
        self.least_delay_path(|i| !self.path_delay[i].is_zero())
            .map(|i| PathId(i as u8))
    }

    /// The next sequence number `send` will use.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Stripe one packet: `Send(p)` of Appendix A.
    pub fn send(&mut self, now: Instant, len: u32, payload: P) -> Result<PathId, SendError<P>> {
        self.send_marked(now, len, payload, false)
    }

    /// [`send`](Self::send) for a packet the driver knows to be a TCP retransmission
    /// (`retransmit`): PET places it alone, on its earliest-delivery path, never as half of a
    /// pair (BAG paper section V-A). Other schedulers ignore the mark.
    pub fn send_marked(
        &mut self,
        now: Instant,
        len: u32,
        payload: P,
        retransmit: bool,
    ) -> Result<PathId, SendError<P>> {
        if len > self.max_packet {
            self.stats.too_large += 1;
            return Err(SendError::TooLarge(payload));
        }
        let small = self.small_packet_path(len);
        if small.is_none() && self.pet.is_some() && !self.adaptive {
            if !self.all_have_room(len) {
                self.stats.full += 1;
                return Err(SendError::Full(payload));
            }
            let seq = self.next_seq;
            let path = self
                .pet
                .as_mut()
                .expect("checked above")
                .schedule(now, seq, len, retransmit);
            self.enqueue_data(path.index(), len, payload);
            return Ok(path);
        }
        let path = match (small, &self.sched) {
            (Some(p), _) => p,
            (None, Scheduler::Edpf(e)) => e.peek(now, len),
            (None, _) => self.sched.select(),
        };
        let i = path.index();
        if !self.has_room(i, len) {
            self.stats.full += 1;
            return Err(SendError::Full(payload));
        }
        if small.is_some() {
            // Outside the scheduler's rotation: no round, no marker.
            if let Some(pet) = &mut self.pet {
                pet.account_extra(path, now, len);
            }
            self.enqueue_data(i, len, payload);
            return Ok(path);
        }
        if let Scheduler::Edpf(e) = &mut self.sched {
            e.choose(now, len);
        }
        let interval = self.markers.interval_rounds;
        let number = self.sched.number(path);
        let first_of_round = match number {
            Some(n) => {
                let first = n.round != self.paths[i].last_round;
                self.paths[i].last_round = n.round;
                first
            }
            None => false,
        };
        let due = |round: u64| interval > 0 && round.is_multiple_of(interval);
        if let (Some(n), MarkerPosition::Start, true) =
            (number, self.markers.position, first_of_round)
        {
            if due(n.round) {
                self.push_marker(path);
            }
        }
        if let (Some(pet), true) = (&mut self.pet, self.adaptive) {
            pet.observe(now, self.next_seq, len, path);
        }
        self.enqueue_data(i, len, payload);
        let round_ended = self.sched.update(len);
        match (number, self.markers.position) {
            (Some(n), MarkerPosition::Middle) if first_of_round && due(n.round) => {
                self.push_marker(path);
            }
            (Some(n), MarkerPosition::End) if round_ended && due(n.round) => {
                self.push_marker(path);
            }
            _ => {}
        }
        Ok(path)
    }

    /// Queue a data packet on `path`, chosen by the driver rather than the scheduler (PET,
    /// [`crate::pet::Pet::schedule`], decides outside the striper). Only in mode `sequence`:
    /// a causal receiver could not follow. The scheduler's state is left alone (an EDPF
    /// scheduler is told, so its `A_l` stays right); no markers are queued.
    pub fn send_on(
        &mut self,
        now: Instant,
        path: PathId,
        len: u32,
        payload: P,
    ) -> Result<PathId, SendError<P>> {
        self.place(now, path, len, payload, true)
    }

    /// Queue a data packet on `path` without a sequence number: the receiver delivers it as it
    /// arrives, outside the resequencing (a per-flow policy keeps a flow on one path, whose FIFO
    /// order is the flow's). Mode `sequence` only; no scheduler state or markers change.
    pub fn send_unsequenced(
        &mut self,
        now: Instant,
        path: PathId,
        len: u32,
        payload: P,
    ) -> Result<PathId, SendError<P>> {
        self.place(now, path, len, payload, false)
    }

    /// [`send_on`](Self::send_on) (`numbered`) or [`send_unsequenced`](Self::send_unsequenced).
    fn place(
        &mut self,
        now: Instant,
        path: PathId,
        len: u32,
        payload: P,
        numbered: bool,
    ) -> Result<PathId, SendError<P>> {
        if len > self.max_packet || !self.sequence_numbers || path.index() >= self.paths.len() {
            self.stats.too_large += u64::from(len > self.max_packet);
            return Err(SendError::TooLarge(payload));
        }
        let i = path.index();
        if !self.has_room(i, len) {
            self.stats.full += 1;
            return Err(SendError::Full(payload));
        }
        if let Scheduler::Edpf(e) = &mut self.sched {
            e.account(path, now, len);
        }
        if let Some(pet) = &mut self.pet {
            pet.account_extra(path, now, len);
        }
        if numbered {
            self.enqueue_data(i, len, payload);
        } else {
            self.enqueue(i, None, len, payload);
        }
        Ok(path)
    }

    /// Among the active paths in `allowed` (bit `i` for path `i`), the one with the least
    /// measured one-way delay (paths not measured yet last; the lowest-numbered allowed path if
    /// none is active).
    pub fn least_delay_in(&self, allowed: u64) -> PathId {
        let fallback = (0..self.paths.len())
            .find(|&i| allowed & (1 << i) != 0)
            .unwrap_or(0);
        PathId(
            self.least_delay_path(|i| allowed & (1 << i) != 0)
                .unwrap_or(fallback) as u8,
        )
    }

    /// Whether `path` is in the rotation (not taken out as dark).
    pub fn is_path_active(&self, path: PathId) -> bool {
        path.index() < self.paths.len() && self.sched.is_active(path)
    }

    /// Whether `path`'s transmit queue can take `len` more bytes.
    pub fn path_has_room(&self, path: PathId, len: u32) -> bool {
        path.index() < self.paths.len() && self.has_room(path.index(), len)
    }

    /// Scheduler `pet`: the PET that places the data packets (feed it SIG-ACKs and probe RTTs,
    /// run its timer, drain its events).
    pub fn pet(&self) -> Option<&Pet> {
        self.pet.as_ref()
    }

    /// Scheduler `pet`: the PET, to drive.
    pub fn pet_mut(&mut self) -> Option<&mut Pet> {
        self.pet.as_mut()
    }

    /// Adaptive SRR: set the quanta from the measuring PET's estimates, once every path has
    /// one; returns whether it did. Nothing without [`StriperConfig::adaptive`].
    pub fn adapt_quanta(&mut self) -> bool {
        if !self.adaptive {
            return false;
        }
        let unit = self.max_packet.saturating_mul(ADAPTIVE_PACKETS_PER_ROUND);
        let Some(q) = self.pet.as_ref().and_then(|p| p.srr_quanta(unit)) else {
            return false;
        };
        self.set_quanta(&q);
        true
    }

    /// Whether this is adaptive SRR ([`StriperConfig::adaptive`]).
    pub fn is_adaptive(&self) -> bool {
        self.adaptive
    }

    /// Adaptive SRR (beyond the stripe paper): give SRR new quanta, e.g. from PET's bandwidth
    /// estimates ([`crate::pet::Pet::srr_quanta`]). Only in mode `sequence`, where the
    /// receiver does not replay the schedule; ignored by the other schedulers, and quanta
    /// below the largest packet are raised to it (`q_i >= Max`, section 5).
    pub fn set_quanta(&mut self, quanta: &[u32]) {
        if !self.sequence_numbers {
            return;
        }
        if let Scheduler::Srr(s) = &mut self.sched {
            for (i, &q) in quanta.iter().enumerate() {
                s.set_quantum(PathId(i as u8), q.max(self.max_packet));
            }
        }
    }

    /// The BAG paper's reliability service (section IV): send a copy of the data packet that
    /// [`send`](Self::send) just queued on `first`, with the same sequence number, on the
    /// active path with the least delay other than `first`, so the packet arrives if either
    /// path delivers it; the receiver drops whichever copy comes second. Mode `sequence` only
    /// (the sequence number identifies the copy); `None` when there is no such path with room
    /// (counted) or no numbered packet was just sent (an unsequenced one is not copied: the
    /// receiver could not tell the copies apart).
    pub fn duplicate_last(&mut self, first: PathId, len: u32, payload: P) -> Option<PathId> {
        self.duplicate_last_within(first, len, payload, u64::MAX)
    }

    /// [`duplicate_last`](Self::duplicate_last) onto one of the paths in `allowed` (bit `i`
    /// for path `i`; a class's path policy).
    pub fn duplicate_last_within(
        &mut self,
        first: PathId,
        len: u32,
        payload: P,
        allowed: u64,
    ) -> Option<PathId> {
        let seq = self.last_seq.filter(|_| self.sequence_numbers)?;
        let Some(i) = self.least_delay_path(|i| {
            i != first.index() && allowed & (1 << i) != 0 && self.has_room(i, len)
        }) else {
            self.stats.duplicates_dropped += 1;
            return None;
        };
        let tx = &mut self.paths[i];
        tx.queue.push_back(Outgoing::Data {
            seq: Some(seq),
            len,
            payload,
        });
        tx.queued_bytes += u64::from(len);
        tx.enqueued_bytes += u64::from(len);
        self.stats.duplicates += 1;
        Some(PathId(i as u8))
    }

    /// Queue a data packet on path `i`, numbered in mode `sequence`.
    fn enqueue_data(&mut self, i: usize, len: u32, payload: P) {
        let seq = self.sequence_numbers.then(|| {
            let s = self.next_seq;
            self.next_seq += 1;
            s
        });
        self.enqueue(i, seq, len, payload);
    }

    /// Queue a data packet numbered `seq` on path `i`.
    fn enqueue(&mut self, i: usize, seq: Option<u64>, len: u32, payload: P) {
        self.last_seq = seq;
        let tx = &mut self.paths[i];
        tx.queue.push_back(Outgoing::Data { seq, len, payload });
        tx.queued_bytes += u64::from(len);
        tx.enqueued_bytes += u64::from(len);
        self.stats.data_packets += 1;
        self.stats.data_bytes += u64::from(len);
    }

    /// `SendMarker(i)`: queue a marker with `path`'s current implicit number.
    fn push_marker(&mut self, path: PathId) {
        let Some(number) = self.sched.number(path) else {
            return;
        };
        let tx = &mut self.paths[path.index()];
        tx.queue.push_back(Outgoing::Marker(Marker {
            path,
            number,
            tx_bytes: tx.enqueued_bytes,
        }));
        self.stats.markers += 1;
    }

    /// Take `path` out of the rotation (it went dark) or put it back. Packets already queued on
    /// it stay there (the driver may drain and drop them); a marker is queued on a path put back,
    /// so the receiver can realign its round.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        if path.index() >= self.paths.len() {
            return;
        }
        self.sched.set_active(path, active);
        if let Some(pet) = &mut self.pet {
            pet.set_path_enabled(path, active);
        }
        if active {
            self.push_marker(path);
        }
    }

    /// Drop the padding that waits in `path`'s queue (a path leaving the rotation whose data
    /// still goes: padding would only measure a path no longer used).
    pub fn drop_padding(&mut self, path: PathId) {
        if let Some(tx) = self.paths.get_mut(path.index()) {
            tx.queue.retain(|m| !matches!(m, Outgoing::Padding { .. }));
        }
    }

    /// Drop what waits in `path`'s queue (a dead path); returns the data packets dropped.
    pub fn clear_queue(&mut self, path: PathId) -> usize {
        let Some(tx) = self.paths.get_mut(path.index()) else {
            return 0;
        };
        let dropped = tx
            .queue
            .iter()
            .filter(|m| matches!(m, Outgoing::Data { .. }))
            .count();
        tx.queue.clear();
        tx.queued_bytes = 0;
        dropped
    }

    /// Queue the padding PET has due ([`PetConfig::padding`]; [`Pet::poll_padding`]), each
    /// pair back to back on its path, behind what waits there; returns the packets queued.
    /// Call after sending and at PET's timeout.
    pub fn queue_padding(&mut self, now: Instant) -> usize {
        let Some(pet) = self.pet.as_mut() else {
            return 0;
        };
        let mut n = 0;
        while let Some(p) = pet.poll_padding(now) {
            if let Some(tx) = self.paths.get_mut(p.path.index()) {
                tx.queue.push_back(Outgoing::Padding {
                    id: p.id,
                    len: p.len,
                });
                n += 1;
            }
        }
        n
    }

    /// Queue a marker on every path now (e.g. when the driver wants to resynchronise an idle
    /// bond). Markers are always safe to send: they carry the state of the next packet.
    pub fn queue_markers(&mut self) {
        for i in 0..self.paths.len() {
            self.push_marker(PathId(i as u8));
        }
    }

    /// `Send_i`: the next message for `path`, if any and if credits allow. Markers and padding
    /// are never held back by credits.
    pub fn poll_transmit(&mut self, _now: Instant, path: PathId) -> Option<Transmit<P>> {
        let tx = self.paths.get_mut(path.index())?;
        match tx.queue.front()? {
            Outgoing::Data { len, .. } => {
                let len = u64::from(*len);
                if let Some(limit) = tx.credit_limit {
                    if tx.tx_bytes + len > limit {
                        self.stats.credit_stalls += 1;
                        return None;
                    }
                }
                tx.queued_bytes -= len;
                tx.tx_bytes += len;
            }
            Outgoing::Marker(_) | Outgoing::Padding { .. } => {}
        }
        let message = tx.queue.pop_front()?;
        Some(Transmit { path, message })
    }

    /// Whether `path` has a message that `poll_transmit` would return now.
    pub fn has_transmit(&self, path: PathId) -> bool {
        let Some(tx) = self.paths.get(path.index()) else {
            return false;
        };
        match tx.queue.front() {
            None => false,
            Some(Outgoing::Marker(_) | Outgoing::Padding { .. }) => true,
            Some(Outgoing::Data { len, .. }) => tx
                .credit_limit
                .is_none_or(|l| tx.tx_bytes + u64::from(*len) <= l),
        }
    }

    /// Apply a credit grant. Grants are cumulative, so a stale or duplicated one is harmless and
    /// ignored.
    pub fn handle_credit(&mut self, credit: Credit) {
        let Some(tx) = self.paths.get_mut(credit.path.index()) else {
            return;
        };
        if let Some(limit) = &mut tx.credit_limit {
            if credit.limit_bytes > *limit {
                *limit = credit.limit_bytes;
            } else {
                self.stats.stale_credits += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{QuantumRule, SchedulerKind};

    fn config(position: MarkerPosition, interval: u64) -> StriperConfig {
        let mut s = SchedulerConfig::new(SchedulerKind::Srr, vec![1, 1]);
        s.quantum = QuantumRule::Explicit(vec![500, 500]);
        s.max_packet = 500;
        let mut c = StriperConfig::new(s);
        c.markers = MarkerConfig {
            interval_rounds: interval,
            position,
        };
        c
    }

    fn drain(s: &mut Striper<u32>, path: PathId) -> Vec<Outgoing<u32>> {
        std::iter::from_fn(|| s.poll_transmit(Instant::ZERO, path).map(|t| t.message)).collect()
    }

    #[test]
    fn end_of_round_markers_carry_next_number() {
        let mut s = Striper::new(&config(MarkerPosition::End, 1)).unwrap();
        for (i, len) in [300u32, 300, 500].into_iter().enumerate() {
            s.send(Instant::ZERO, len, i as u32).unwrap();
        }
        let q0 = drain(&mut s, PathId(0));
        assert_eq!(q0.len(), 3);
        assert!(matches!(q0[0], Outgoing::Data { payload: 0, .. }));
        assert!(matches!(q0[1], Outgoing::Data { payload: 1, .. }));
        match q0[2] {
            Outgoing::Marker(m) => {
                assert_eq!(m.number.round, 2);
                assert_eq!(m.number.deficit, 400);
                assert_eq!(m.tx_bytes, 600);
            }
            ref other => panic!("expected marker, got {other:?}"),
        }
    }

    #[test]
    fn start_of_round_markers_precede_the_round() {
        let mut s = Striper::new(&config(MarkerPosition::Start, 2)).unwrap();
        // Rounds: path0 r1 [500], path1 r1 [500], path0 r2 [500] (marker due), ...
        for i in 0..4u32 {
            s.send(Instant::ZERO, 500, i).unwrap();
        }
        let q0 = drain(&mut s, PathId(0));
        assert!(matches!(q0[0], Outgoing::Data { payload: 0, .. }));
        assert!(
            matches!(q0[1], Outgoing::Marker(m) if m.number.round == 2 && m.number.deficit == 500)
        );
        assert!(matches!(q0[2], Outgoing::Data { payload: 2, .. }));
    }

    #[test]
    fn credits_gate_data_but_not_markers() {
        let mut c = config(MarkerPosition::End, 1);
        c.initial_credit_bytes = Some(vec![400, 400]);
        let mut s = Striper::new(&c).unwrap();
        s.send(Instant::ZERO, 300, 0).unwrap();
        s.send(Instant::ZERO, 300, 1).unwrap();
        assert!(s.poll_transmit(Instant::ZERO, PathId(0)).is_some());
        assert!(s.poll_transmit(Instant::ZERO, PathId(0)).is_none());
        assert_eq!(s.stats().credit_stalls, 1);
        s.handle_credit(Credit {
            path: PathId(0),
            limit_bytes: 600,
        });
        s.handle_credit(Credit {
            path: PathId(0),
            limit_bytes: 500,
        });
        assert_eq!(s.stats().stale_credits, 1);
        assert!(s.poll_transmit(Instant::ZERO, PathId(0)).is_some());
        assert!(matches!(
            s.poll_transmit(Instant::ZERO, PathId(0)).unwrap().message,
            Outgoing::Marker(_)
        ));
    }

    #[test]
    fn full_queue_hands_payload_back() {
        let mut c = config(MarkerPosition::End, 0);
        c.queue_limit_bytes = 400;
        let mut s = Striper::new(&c).unwrap();
        s.send(Instant::ZERO, 300, 0).unwrap();
        assert_eq!(s.send(Instant::ZERO, 300, 1), Err(SendError::Full(1)));
        assert_eq!(s.send(Instant::ZERO, 501, 2), Err(SendError::TooLarge(2)));
        assert!(!s.can_send(300));
    }

    /// What `can_send` allows, `send` takes: with EDPF too, whose choice (by the clock) may
    /// be a path whose queue is full.
    #[test]
    fn with_edpf_can_send_means_send_succeeds() {
        let mut sched = SchedulerConfig::new(SchedulerKind::Edpf, vec![10_000_000, 1_000_000]);
        sched.max_packet = 500;
        let mut c = StriperConfig::new(sched);
        c.sequence_numbers = true;
        c.queue_limit_bytes = 2_000;
        let mut s: Striper<u32> = Striper::new(&c).unwrap();
        let mut sent = 0;
        for i in 0..100 {
            if !s.can_send(500) {
                break;
            }
            s.send(Instant::ZERO, 500, i).expect("can_send said yes");
            sent += 1;
        }
        // Path 0 filled first (EDPF's choice while it is the earlier), then `can_send` said no.
        assert!((4..100).contains(&sent), "{sent}");
    }

    #[test]
    fn can_send_asks_the_path_a_small_packet_takes() {
        // The shortest path's queue full of small packets, SRR's next path empty: a small
        // packet cannot go, a large one can, and `send` agrees with `can_send` for both.
        let mut c = config(MarkerPosition::End, 0);
        c.sequence_numbers = true;
        c.queue_limit_bytes = 600;
        let mut s = Striper::new(&c).unwrap();
        s.set_path_delay(PathId(0), crate::time::Duration::from_millis(60));
        s.set_path_delay(PathId(1), crate::time::Duration::from_millis(10));
        for i in 0..10 {
            assert_eq!(s.send(Instant::ZERO, 60, i), Ok(PathId(1)));
        }
        assert!(!s.can_send(60));
        assert!(matches!(
            s.send(Instant::ZERO, 60, 10),
            Err(SendError::Full(10))
        ));
        assert!(s.can_send(500));
        assert_eq!(s.send(Instant::ZERO, 500, 11), Ok(PathId(0)));
    }

    #[test]
    fn small_packets_take_the_shortest_path_in_sequence_mode() {
        let mut c = config(MarkerPosition::End, 0);
        c.sequence_numbers = true;
        let mut s = Striper::new(&c).unwrap();
        s.set_path_delay(PathId(0), crate::time::Duration::from_millis(60));
        s.set_path_delay(PathId(1), crate::time::Duration::from_millis(10));
        assert_eq!(s.send(Instant::ZERO, 500, 0), Ok(PathId(0))); // SRR's turn
        assert_eq!(s.send(Instant::ZERO, 60, 1), Ok(PathId(1))); // small: shortest
        assert_eq!(s.send(Instant::ZERO, 60, 2), Ok(PathId(1)));
        s.set_path_active(PathId(1), false);
        assert_eq!(s.send(Instant::ZERO, 60, 3), Ok(PathId(0)));
        // Sequence numbers stay one sequence across both kinds.
        let q1 = drain(&mut s, PathId(1));
        assert!(matches!(q1[0], Outgoing::Data { seq: Some(1), .. }));
        assert!(matches!(q1[1], Outgoing::Data { seq: Some(2), .. }));
    }

    #[test]
    fn send_on_places_packets_where_told_in_sequence_mode_only() {
        let mut c = config(MarkerPosition::End, 1);
        assert!(matches!(
            Striper::new(&c)
                .unwrap()
                .send_on(Instant::ZERO, PathId(1), 100, 0),
            Err(SendError::TooLarge(0))
        ));
        c.sequence_numbers = true;
        let mut s = Striper::new(&c).unwrap();
        assert_eq!(s.send_on(Instant::ZERO, PathId(1), 100, 0), Ok(PathId(1)));
        assert_eq!(s.send_on(Instant::ZERO, PathId(1), 100, 1), Ok(PathId(1)));
        assert!(s.send_on(Instant::ZERO, PathId(9), 100, 2).is_err());
        let q1 = drain(&mut s, PathId(1));
        assert!(matches!(q1[0], Outgoing::Data { seq: Some(0), .. }));
        assert!(matches!(q1[1], Outgoing::Data { seq: Some(1), .. }));
        assert_eq!(s.stats().markers, 0);
    }

    #[test]
    fn sequence_numbers_count_up() {
        let mut c = config(MarkerPosition::End, 0);
        c.sequence_numbers = true;
        let mut s = Striper::new(&c).unwrap();
        for i in 0..3 {
            s.send(Instant::ZERO, 500, i).unwrap();
        }
        let q0 = drain(&mut s, PathId(0));
        assert!(matches!(q0[0], Outgoing::Data { seq: Some(0), .. }));
        assert!(matches!(q0[1], Outgoing::Data { seq: Some(2), .. }));
    }

    #[test]
    fn a_copy_has_its_originals_number_and_an_unnumbered_packet_gets_none() {
        let mut c = config(MarkerPosition::End, 0);
        c.sequence_numbers = true;
        let mut s = Striper::new(&c).unwrap();
        assert_eq!(s.duplicate_last(PathId(0), 500, 9), None);
        let first = s.send(Instant::ZERO, 500, 1).unwrap();
        let copy = s.duplicate_last(first, 500, 1).expect("a copy");
        assert_ne!(copy, first);
        // A packet sent without a number cannot be copied: the receiver could not tell the
        // copy apart (without this check the copy took the previous packet's number).
        s.send_unsequenced(Instant::ZERO, PathId(0), 500, 2)
            .unwrap();
        assert_eq!(s.duplicate_last(PathId(0), 500, 2), None);
        let copies: Vec<_> = [PathId(0), PathId(1)]
            .into_iter()
            .flat_map(|p| drain(&mut s, p))
            .filter_map(|o| match o {
                Outgoing::Data { seq, payload, .. } => Some((payload, seq)),
                _ => None,
            })
            .collect();
        assert_eq!(copies.iter().filter(|(p, _)| *p == 1).count(), 2);
        assert!(copies.iter().all(|&(p, seq)| (p == 1) == (seq == Some(0))));
        assert_eq!(copies.iter().filter(|(p, _)| *p == 2).count(), 1);
    }
}

//! The discrete-event engine: one striping sender, N links, one receiver, in virtual time.
//!
//! The engine drives the same sans-IO cores the daemon runs ([`Striper`], [`Resequencer`],
//! [`CreditGrantor`], and with scheduler `pet` the [`PetReceiver`] whose SIG-ACKs feed the
//! striper's PET) and sizes every message with the wire codec. EDPF and PET know each link's
//! one-way delay (EDPF's `D_l`; PET's until its SIG-ACKs measure it, as the daemon's probes
//! give it), and the receiver's feedback (credits, SIG-ACKs) reaches the sender after the
//! lowest link delay without taking link capacity. Events are ordered by time,
//! ties by insertion order, and every random draw comes from one PRNG seeded by the run's seed,
//! so a run is fixed by its scenario and seed.

use crate::link::{Link, LinkConfig};
use crate::source::{Arrivals, Source, SourceConfig};
use braid_proto::credit::{CreditConfig, CreditGrantor};
use braid_proto::pet::{PetReceiver, PetReceiverConfig, SigAckEntry};
use braid_proto::resequence::{Delivery, Resequencer, ResequencerConfig, ResequencerStats};
use braid_proto::scheduler::ConfigError;
use braid_proto::striper::{Outgoing, Striper, StriperConfig, StriperStats};
use braid_proto::time::{Duration, Instant};
use braid_proto::{Credit, PathId};
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Everything that defines a run, apart from the seed.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// One link per path, sender to receiver.
    pub links: Vec<LinkConfig>,
    /// The traffic.
    pub source: SourceConfig,
    /// The sender.
    pub striper: StriperConfig,
    /// The receiver.
    pub receiver: ResequencerConfig,
    /// Credit flow control; the striper's initial grant is set from the shares.
    pub credits: Option<CreditConfig>,
    /// Bytes each packet occupies on a link beyond braid's own header (0 models the paper's
    /// channels; 28 would add IPv4 + UDP).
    pub link_overhead_bytes: u32,
    /// Virtual time to simulate.
    pub duration: Duration,
    /// Deliveries before this are not counted in goodput.
    pub warmup: Duration,
    /// Record when a marker sent at or after this time has been received and processed on every
    /// path (the `t` of Theorem 5.1, in the sense of Appendix B, Lemma B.4; logical mode only).
    pub watch_markers_after: Option<Instant>,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    /// Goodput over `[warmup, duration]`: payload bytes delivered in order, in bit/s.
    pub goodput_bps: f64,
    /// Packets offered by the source and accepted by the striper.
    pub sent_packets: u64,
    /// Packets delivered.
    pub delivered: u64,
    /// Payload bytes delivered.
    pub delivered_bytes: u64,
    /// Deliveries of a packet after a later one (misordered).
    pub out_of_order: u64,
    /// Times of misordered deliveries.
    pub misorder_times: Vec<Instant>,
    /// Times of deliveries whose id is below the previous delivery's (adjacent inversions):
    /// after the last one, the delivered sequence is increasing, i.e. FIFO again.
    pub inversion_times: Vec<Instant>,
    /// Packets delivered twice (must be zero).
    pub duplicates: u64,
    /// Packets lost on links (data and markers).
    pub link_lost: u64,
    /// Data packets lost on links.
    pub data_lost: u64,
    /// Payload bytes of data packets lost on links.
    pub data_lost_bytes: u64,
    /// Payload bytes accepted by the striper.
    pub sent_bytes: u64,
    /// Packets the Poisson source could not hand to the striper.
    pub source_drops: u64,
    /// Events processed.
    pub events: u64,
    /// Bytes sent on each link (wire bytes).
    pub link_sent_bytes: Vec<u64>,
    /// Largest receive buffer occupancy seen.
    pub max_buffered_bytes: u64,
    /// Per path: arrival time of the first marker sent at or after `watch_markers_after`.
    pub watched_marker_arrival: Vec<Option<Instant>>,
    /// When such a marker had been received and processed on every path.
    pub watched_marker_processed: Option<Instant>,
    /// Time of the last delivery.
    pub last_delivery: Option<Instant>,
    /// Sender counters.
    pub striper: StriperStats,
    /// Receiver counters.
    pub receiver: ResequencerStats,
    /// Payload bytes still buffered at the receiver at the end.
    pub final_buffered_bytes: u64,
    /// Payload bytes still queued or in flight at the end.
    pub final_in_transit_bytes: u64,
    /// Scheduler `pet`: each path's estimate at the end, bit/s (empty otherwise).
    pub pet_estimates_bps: Vec<Option<u64>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    LinkFree(u8),
    Arrive(u8),
    Credit,
    ReceiverTimer,
    SourceArrival,
    SigAck,
    PetTimer,
}

struct InFlight {
    message: Outgoing<u64>,
    sent_at: Instant,
}

/// Wire bytes of a message (braid header + payload).
pub fn wire_len(message: &Outgoing<u64>) -> u64 {
    match message {
        Outgoing::Data { seq, len, .. } => {
            (braid_wire::data_overhead(seq.is_some()) + *len as usize) as u64
        }
        Outgoing::Marker(_) => braid_wire::MARKER_LEN as u64,
        Outgoing::Padding { len, .. } => (braid_wire::PADDING_HEADER_LEN + *len as usize) as u64,
    }
}

struct Sim {
    now: Instant,
    seq: u64,
    heap: BinaryHeap<Reverse<(Instant, u64, Event)>>,
    links: Vec<Link>,
    link_busy: Vec<bool>,
    inflight: Vec<VecDeque<InFlight>>,
    credits_inflight: VecDeque<(Instant, Vec<Credit>)>,
    credit_delay: Duration,
    /// Scheduler `pet`: the receiver's half, and its SIG-ACKs on the way back.
    pet_rx: Option<PetReceiver>,
    sig_acks_inflight: VecDeque<(Instant, Vec<SigAckEntry>)>,
    /// When PET's timer is set for (an event is queued then).
    pet_timer: Option<Instant>,
    striper: Striper<u64>,
    receiver: Resequencer<u64>,
    grantor: Option<CreditGrantor>,
    credit_buf: Vec<Credit>,
    source: Source,
    rng: Xoshiro256PlusPlus,
    timer_pending: Option<Instant>,
    overhead: u64,
    warmup: Instant,
    end: Instant,
    watch: Option<Instant>,
    /// Per path: markers that arrived before the first watched one (`None`: none yet).
    markers_before_watched: Vec<Option<u64>>,
    markers_arrived: Vec<u64>,
    // Metrics.
    max_id: Option<u64>,
    last_id: Option<u64>,
    seen: Vec<u64>,
    in_order_bytes_window: u64,
    result: RunResult,
}

impl Sim {
    fn push(&mut self, at: Instant, ev: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    fn refill(&mut self) {
        if self.source.config().arrivals != Arrivals::Backlogged {
            return;
        }
        while self.striper.can_send(self.source.peek_len()) {
            let (id, len) = self.source.take(&mut self.rng);
            if self.striper.send(self.now, len, id).is_err() {
                unreachable!("can_send said yes");
            }
            self.result.sent_packets += 1;
            self.result.sent_bytes += u64::from(len);
        }
        self.striper.queue_padding(self.now);
    }

    fn try_start(&mut self, p: usize) {
        if self.link_busy[p] {
            return;
        }
        let Some(t) = self.striper.poll_transmit(self.now, PathId(p as u8)) else {
            return;
        };
        let bytes = wire_len(&t.message) + self.overhead;
        let sent = self.links[p].send(self.now, bytes, &mut self.rng);
        self.link_busy[p] = true;
        self.push(sent.free_at, Event::LinkFree(p as u8));
        match sent.arrival {
            Some(at) => {
                self.inflight[p].push_back(InFlight {
                    message: t.message,
                    sent_at: self.now,
                });
                self.push(at, Event::Arrive(p as u8));
            }
            None => {
                self.result.link_lost += 1;
                if let Outgoing::Data { len, .. } = t.message {
                    self.result.data_lost += 1;
                    self.result.data_lost_bytes += u64::from(len);
                }
            }
        }
    }

    fn start_idle_links(&mut self) {
        for p in 0..self.links.len() {
            self.try_start(p);
        }
    }

    fn record(&mut self, d: Delivery<u64>) {
        let id = d.payload;
        let word = (id / 64) as usize;
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        let bit = 1u64 << (id % 64);
        if self.seen[word] & bit != 0 {
            self.result.duplicates += 1;
            return;
        }
        self.seen[word] |= bit;
        self.result.delivered += 1;
        self.result.delivered_bytes += u64::from(d.len);
        self.result.last_delivery = Some(self.now);
        if self.last_id.is_some_and(|l| id < l) && self.result.inversion_times.len() < 1_000_000 {
            self.result.inversion_times.push(self.now);
        }
        self.last_id = Some(id);
        match self.max_id {
            Some(m) if id < m => {
                self.result.out_of_order += 1;
                if self.result.misorder_times.len() < 1_000_000 {
                    self.result.misorder_times.push(self.now);
                }
            }
            _ => {
                self.max_id = Some(id);
                if self.now >= self.warmup && self.now <= self.end {
                    self.in_order_bytes_window += u64::from(d.len);
                }
            }
        }
    }

    fn receiver_work(&mut self) {
        while let Some(d) = self.receiver.poll_deliver(self.now) {
            self.record(d);
        }
        if let (Some(_), None, Resequencer::Logical(l)) = (
            self.watch,
            self.result.watched_marker_processed,
            &self.receiver,
        ) {
            let processed = self
                .markers_before_watched
                .iter()
                .enumerate()
                .all(|(p, k)| {
                    let path = PathId(p as u8);
                    k.is_some_and(|k| l.markers_taken(path) > k && l.marker_processed(path))
                });
            if processed {
                self.result.watched_marker_processed = Some(self.now);
            }
        }
        let buffered = self.receiver.total_buffered_bytes();
        self.result.max_buffered_bytes = self.result.max_buffered_bytes.max(buffered);
        if let Some(g) = &mut self.grantor {
            let receiver = &self.receiver;
            if g.poll_credits(
                self.now,
                |p| receiver.buffered_bytes(p),
                &mut self.credit_buf,
            ) {
                let at = self.now + self.credit_delay;
                self.credits_inflight
                    .push_back((at, std::mem::take(&mut self.credit_buf)));
                self.push(at, Event::Credit);
            }
        }
        if let Some(rx) = &mut self.pet_rx {
            let at = self.now + self.credit_delay;
            let before = self.sig_acks_inflight.len();
            while let Some(entries) = rx.poll_transmit(self.now) {
                self.sig_acks_inflight.push_back((at, entries));
            }
            if self.sig_acks_inflight.len() > before {
                self.push(at, Event::SigAck);
            }
        }
        let next = [
            self.receiver.poll_timeout(),
            self.grantor.as_ref().and_then(|g| g.poll_timeout()),
            self.pet_rx.as_ref().and_then(PetReceiver::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(t) = next {
            let t = t.max(self.now);
            if self.timer_pending.is_none_or(|p| t < p) {
                self.timer_pending = Some(t);
                self.push(t, Event::ReceiverTimer);
            }
        }
    }

    fn arrive(&mut self, p: usize) {
        let Some(f) = self.inflight[p].pop_front() else {
            return;
        };
        let path = PathId(p as u8);
        match f.message {
            Outgoing::Data { seq, len, payload } => {
                if let Some(g) = &mut self.grantor {
                    g.on_data(path, len);
                }
                // As the daemon's endpoint: small packets never go through PET.
                if let (Some(rx), Some(seq), true) = (
                    &mut self.pet_rx,
                    seq,
                    len > braid_proto::striper::SMALL_PACKET_BYTES,
                ) {
                    rx.handle_data(self.now, path, seq);
                }
                self.receiver.handle_data(self.now, path, seq, len, payload);
            }
            Outgoing::Marker(m) => {
                if let Some(after) = self.watch {
                    let slot = &mut self.result.watched_marker_arrival[p];
                    if f.sent_at >= after && slot.is_none() {
                        *slot = Some(self.now);
                        self.markers_before_watched[p] = Some(self.markers_arrived[p]);
                    }
                }
                self.markers_arrived[p] += 1;
                if let Some(g) = &mut self.grantor {
                    g.on_marker(&m);
                }
                self.receiver.handle_marker(self.now, path, m);
            }
            // PET's padding pairs: measured, not delivered.
            Outgoing::Padding { id, .. } => {
                if let Some(rx) = &mut self.pet_rx {
                    rx.handle_data(self.now, path, id);
                }
            }
        }
        self.receiver_work();
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::LinkFree(p) => {
                self.link_busy[p as usize] = false;
                self.try_start(p as usize);
                self.refill();
                self.start_idle_links();
            }
            Event::Arrive(p) => self.arrive(p as usize),
            Event::Credit => {
                while let Some(credits) = take_due(&mut self.credits_inflight, self.now) {
                    for c in &credits {
                        self.striper.handle_credit(*c);
                    }
                    self.credit_buf = credits;
                }
                self.start_idle_links();
            }
            Event::ReceiverTimer => {
                if self.timer_pending.is_some_and(|t| t <= self.now) {
                    self.timer_pending = None;
                }
                self.receiver_work();
            }
            Event::SourceArrival => {
                let (id, len) = self.source.take(&mut self.rng);
                if self.striper.send(self.now, len, id).is_ok() {
                    self.result.sent_packets += 1;
                    self.result.sent_bytes += u64::from(len);
                    self.striper.queue_padding(self.now);
                } else {
                    self.result.source_drops += 1;
                }
                if let Some(at) = self.source.next_arrival(self.now, &mut self.rng) {
                    self.push(at, Event::SourceArrival);
                }
                self.start_idle_links();
            }
            Event::SigAck => {
                while let Some(entries) = take_due(&mut self.sig_acks_inflight, self.now) {
                    if let Some(pet) = self.striper.pet_mut() {
                        pet.handle_sig_ack(self.now, entries);
                    }
                }
                self.striper.adapt_quanta();
                self.refill();
                self.start_idle_links();
            }
            Event::PetTimer => {
                if self.pet_timer.is_some_and(|t| t <= self.now) {
                    self.pet_timer = None;
                }
                if let Some(pet) = self.striper.pet_mut() {
                    if pet.poll_timeout().is_some_and(|t| t <= self.now) {
                        pet.handle_timeout(self.now);
                        self.striper.queue_padding(self.now);
                    }
                }
                self.refill();
                self.start_idle_links();
            }
        }
        self.pet_work();
    }

    /// PET's events (read from its state, not kept) and its timer.
    fn pet_work(&mut self) {
        let Some(pet) = self.striper.pet_mut() else {
            return;
        };
        while pet.poll_event().is_some() {}
        if let Some(t) = pet.poll_timeout() {
            let t = t.max(self.now);
            if self.pet_timer.is_none_or(|p| t < p) {
                self.pet_timer = Some(t);
                self.push(t, Event::PetTimer);
            }
        }
    }
}

/// The first of `queue`'s feedback messages (each with its arrival time) if it has arrived.
fn take_due<T>(queue: &mut VecDeque<(Instant, T)>, now: Instant) -> Option<T> {
    queue
        .front()
        .is_some_and(|m| m.0 <= now)
        .then(|| queue.pop_front().map(|m| m.1))
        .flatten()
}

/// A scenario that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The sender or receiver config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The source makes packets the striper would refuse forever.
    #[error(
        "the source makes packets of up to {size} bytes but max_packet is {max}: raise max_packet"
    )]
    PacketTooLarge {
        /// Largest size of the source.
        size: u32,
        /// The striper's largest packet.
        max: u32,
    },
    /// Link count and path count differ.
    #[error("{links} links but the scheduler has {paths} paths: give one link per path")]
    PathMismatch {
        /// Links given.
        links: usize,
        /// Paths in the scheduler config.
        paths: usize,
    },
}

/// Run `scenario` with `seed`.
pub fn run(scenario: &Scenario, seed: u64) -> Result<RunResult, SimError> {
    let n = scenario.links.len();
    let max = scenario.striper.scheduler.max_packet;
    if scenario.source.sizes.max() > max {
        return Err(SimError::PacketTooLarge {
            size: scenario.source.sizes.max(),
            max,
        });
    }
    let mut striper_config = scenario.striper.clone();
    if let Some(c) = &scenario.credits {
        striper_config.initial_credit_bytes = Some(c.share_bytes.clone());
    }
    let mut striper = Striper::new(&striper_config)?;
    if striper.paths() != n {
        return Err(SimError::PathMismatch {
            links: n,
            paths: striper.paths(),
        });
    }
    let pet_rx = striper
        .pet()
        .is_some()
        .then(|| PetReceiver::new(PetReceiverConfig::default()));
    let mut receiver = Resequencer::new(&scenario.receiver)?;
    // Each link's one-way delay, as the daemon's probes measure it: EDPF's `D_l`, PET's until
    // its SIG-ACKs measure it, and the base delay an equalising receiver holds to.
    for (i, l) in scenario.links.iter().enumerate() {
        let path = PathId(i as u8);
        striper.set_path_delay(path, l.delay);
        if let Some(pet) = striper.pet_mut() {
            pet.set_probe_rtt(path, l.delay * 2);
        }
        if scenario.receiver.equalize_delay {
            receiver.set_path_delay(path, Some(l.delay));
        }
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let source = Source::new(scenario.source.clone(), &mut rng);
    let credit_delay = scenario
        .links
        .iter()
        .map(|l| l.delay)
        .min()
        .unwrap_or_default();
    let end = Instant::ZERO + scenario.duration;
    let mut sim = Sim {
        now: Instant::ZERO,
        seq: 0,
        heap: BinaryHeap::new(),
        links: scenario.links.iter().cloned().map(Link::new).collect(),
        link_busy: vec![false; n],
        inflight: (0..n).map(|_| VecDeque::new()).collect(),
        credits_inflight: VecDeque::new(),
        credit_delay,
        pet_rx,
        sig_acks_inflight: VecDeque::new(),
        pet_timer: None,
        striper,
        receiver,
        grantor: scenario.credits.as_ref().map(CreditGrantor::new),
        credit_buf: Vec::new(),
        source,
        rng,
        timer_pending: None,
        overhead: u64::from(scenario.link_overhead_bytes),
        warmup: Instant::ZERO + scenario.warmup,
        end,
        watch: scenario.watch_markers_after,
        markers_before_watched: vec![None; n],
        markers_arrived: vec![0; n],
        max_id: None,
        last_id: None,
        seen: Vec::new(),
        in_order_bytes_window: 0,
        result: RunResult {
            watched_marker_arrival: vec![None; n],
            ..RunResult::default()
        },
    };
    if let Some(at) = sim.source.next_arrival(Instant::ZERO, &mut sim.rng) {
        sim.push(at, Event::SourceArrival);
    }
    sim.refill();
    sim.start_idle_links();
    sim.pet_work();
    while let Some(Reverse((at, _, ev))) = sim.heap.pop() {
        if at > end {
            break;
        }
        sim.now = at;
        sim.result.events += 1;
        sim.handle(ev);
    }
    let window = scenario
        .duration
        .saturating_sub(scenario.warmup)
        .as_secs_f64();
    let mut r = sim.result;
    if window > 0.0 {
        r.goodput_bps = sim.in_order_bytes_window as f64 * 8.0 / window;
    }
    r.link_sent_bytes = sim.links.iter().map(|l| l.sent_bytes).collect();
    r.striper = sim.striper.stats().clone();
    if let Some(pet) = sim.striper.pet() {
        r.pet_estimates_bps = (0..n).map(|p| pet.estimate_bps(PathId(p as u8))).collect();
    }
    r.receiver = sim.receiver.stats().clone();
    r.final_buffered_bytes = sim.receiver.total_buffered_bytes();
    r.final_in_transit_bytes = (0..n)
        .map(|p| {
            sim.striper.queued_bytes(PathId(p as u8))
                + sim.inflight[p]
                    .iter()
                    .map(|f| match f.message {
                        Outgoing::Data { len, .. } => u64::from(len),
                        Outgoing::Marker(_) | Outgoing::Padding { .. } => 0,
                    })
                    .sum::<u64>()
        })
        .sum();
    Ok(r)
}

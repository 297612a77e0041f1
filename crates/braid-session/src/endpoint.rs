//! The bond endpoint: what one end of a bond runs, without I/O or crypto: a [`Striper`] for what
//! it sends, a [`Resequencer`] and a [`CreditGrantor`] for what it receives, and the inner wire
//! codec in between. The [`crate::Session`] wraps it with encryption and liveness; the
//! simulator's in-memory `Pair` drives it bare.

use crate::compress::{self, CompressStats, Compressor, Decompressor};
use crate::params::{PathPolicy, PolicyStriping};
use crate::policy;
use crate::tcp_retransmit::{TcpPacket, TcpRetransmits};
use braid_proto::credit::{CreditConfig, CreditGrantor};
use braid_proto::pet::{PetReceiver, PetReceiverConfig, SigAckEntry};
use braid_proto::resequence::ResequenceMode;
use braid_proto::resequence::{Resequencer, ResequencerConfig, Stall};
use braid_proto::scheduler::ConfigError;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::{Outgoing, SendError, Striper, StriperConfig, SMALL_PACKET_BYTES};
use braid_proto::time::Instant;
use braid_proto::{Credit, PathId};
use braid_wire::{Credits, Repr, SigAcks};
use std::collections::VecDeque;

/// Spare payload buffers kept for reuse at most (enough for a few batches of a driver).
const SPARE_BUFFERS: usize = 256;
/// A buffer that grew past this is not kept.
const SPARE_CAPACITY: usize = 64 * 1024;
/// SIG-ACKs waiting for a path to poll at most; older ones are dropped (and counted).
const SIG_ACK_QUEUE: usize = 64;

/// Settings of one endpoint. Both ends need matching scheduler configs for each direction.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// What this end sends.
    pub striper: StriperConfig,
    /// What this end receives (the peer's striper config, simulated).
    pub receiver: ResequencerConfig,
    /// Credits this end grants for what it receives; the peer's striper must start with these
    /// shares as its initial grant.
    pub credits: Option<CreditConfig>,
}

/// Endpoint counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams that did not parse, dropped.
    pub malformed: u64,
    /// Datagrams naming a path other than the one they arrived on, or an unknown path, dropped.
    pub wrong_path: u64,
    /// Feedback datagrams sent.
    pub feedback_sent: u64,
    /// Feedback datagrams received.
    pub feedback_received: u64,
    /// SIG-ACKs sent (scheduler `pet`: the arrival times of our received data).
    pub sig_acks_sent: u64,
    /// SIG-ACKs received and fed to PET.
    pub sig_acks_received: u64,
    /// SIG-ACKs not sent: the queue was full, or the receiver's batch overflowed.
    pub sig_acks_dropped: u64,
    /// Packets a path policy placed (`[[policy]]`).
    pub policy_packets: u64,
    /// Packets dropped because none of their policy's paths was up.
    pub policy_no_path: u64,
    /// TCP retransmissions seen (scheduler `pet`: each placed alone, never paired).
    pub tcp_retransmits: u64,
    /// PET's padding packets received (their arrivals are reported, nothing is delivered).
    pub padding_received: u64,
}

/// One end of a bond, without I/O.
#[derive(Debug)]
pub struct Endpoint {
    striper: Striper<Vec<u8>>,
    receiver: Resequencer<Vec<u8>>,
    grantor: Option<CreditGrantor>,
    feedback: VecDeque<Vec<Credit>>,
    credit_buf: Vec<Credit>,
    /// Scheduler `pet` at the peer: the arrivals to report (BAG's SIG-ACK receiver).
    pet_rx: Option<PetReceiver>,
    sig_acks: VecDeque<Vec<SigAckEntry>>,
    stats: EndpointStats,
    /// Payload buffers of packets sent or delivered, for the next ones (see
    /// [`Endpoint::recycle`]): steady traffic stops allocating per packet.
    spare: Vec<Vec<u8>>,
    /// DSCP values (bit `d` for DSCP `d`) whose packets go twice, on two paths.
    duplicate_dscp: u64,
    /// Per-class path policies ([`crate::policy`]).
    policies: Vec<PathPolicy>,
    /// The paths' configured rates, where PET has no estimate (for the policies' choices).
    rates_bps: Vec<u64>,
    /// Scheduler `pet`: the TCP flows' highest data, to tell retransmissions apart.
    tcp_retransmits: Option<TcpRetransmits>,
    /// Header compression ([`crate::compress`]): what this end sends, and what it receives.
    compressor: Option<Compressor>,
    decompressor: Option<Decompressor>,
    /// Header bytes compression saved since [`Endpoint::take_compression_savings`] last ran,
    /// on packets the striper took.
    saved: u64,
}

impl Endpoint {
    /// An endpoint.
    pub fn new(config: &EndpointConfig) -> Result<Self, ConfigError> {
        Ok(Endpoint {
            striper: Striper::new(&config.striper)?,
            receiver: Resequencer::new(&config.receiver)?,
            grantor: config.credits.as_ref().map(CreditGrantor::new),
            feedback: VecDeque::new(),
            credit_buf: Vec::new(),
            // PET at the peer (scheduler `pet`, or adaptive SRR's measuring PET) needs reports.
            pet_rx: ((config.receiver.scheduler.kind == SchedulerKind::Pet
                || config.striper.adaptive)
                && config.receiver.mode == ResequenceMode::Sequence)
                .then(|| PetReceiver::new(PetReceiverConfig::default())),
            sig_acks: VecDeque::new(),
            stats: EndpointStats::default(),
            spare: Vec::new(),
            duplicate_dscp: 0,
            policies: Vec::new(),
            rates_bps: config.striper.scheduler.rates_bps.clone(),
            tcp_retransmits: (config.striper.scheduler.kind == SchedulerKind::Pet
                && !config.striper.adaptive)
                .then(TcpRetransmits::new),
            compressor: None,
            decompressor: None,
            saved: 0,
        })
    }

    /// Compress the TCP headers of what this end sends and rebuild those of what it receives
    /// ([`crate::compress`]; the bond's `compress_headers`, which both ends must agree on).
    pub fn set_compression(&mut self, on: bool) {
        self.compressor = on.then(Compressor::new);
        self.decompressor = on.then(Decompressor::new);
    }

    /// Header compression's counters, both directions; `None` without compression.
    pub fn compress_stats(&self) -> Option<CompressStats> {
        let (c, d) = (self.compressor.as_ref()?, self.decompressor.as_ref()?);
        let (tx, rx) = (c.stats(), d.stats());
        Some(CompressStats {
            decompressed: rx.decompressed,
            undecodable: rx.undecodable,
            bad_installs: rx.bad_installs,
            stale_installs: rx.stale_installs,
            ..tx
        })
    }

    /// Compress `payload` in place with `compressor`, if `compress` and its flow's context
    /// allow; its length afterwards. (A function of the field, not of `self`, so that the
    /// caller may hold other fields.)
    fn squeeze(
        compressor: &mut Option<Compressor>,
        compress: bool,
        now: Instant,
        payload: &mut Vec<u8>,
    ) -> u32 {
        if let (Some(c), true) = (compressor, compress) {
            c.compress(now, payload);
        }
        u32::try_from(payload.len()).unwrap_or(u32::MAX)
    }

    /// Header bytes compression has saved so far.
    fn bytes_saved(&self) -> u64 {
        self.compressor
            .as_ref()
            .map_or(0, |c| c.stats().bytes_saved)
    }

    /// The header bytes compression saved on the packets sent since the last call: a shaper
    /// that charged them whole gives them back ([`crate::qos::QosShaper::refund`]).
    pub fn take_compression_savings(&mut self) -> u64 {
        std::mem::take(&mut self.saved)
    }

    /// Scheduler `pet`: `len` bytes went on `path` that PET did not place (a resend inside the
    /// tunnel, a duplicate); see [`braid_proto::pet::Pet::account_extra`]. Ignored otherwise.
    pub fn account_extra(&mut self, now: Instant, path: PathId, len: u32) {
        if let Some(pet) = self.striper.pet_mut() {
            pet.account_extra(path, now, len);
        }
    }

    /// Apply these per-class path policies to what this end sends (mode `sequence` only; the
    /// bond's parameters checked them).
    pub fn set_policies(&mut self, policies: Vec<PathPolicy>) {
        self.policies = policies;
    }

    /// Path `i`'s rate for the policies: PET's estimate, else the configured rate.
    fn rate(&self, i: usize) -> u64 {
        self.striper
            .pet()
            .and_then(|p| p.estimate_bps(PathId(i as u8)))
            .or_else(|| self.rates_bps.get(i).copied())
            .unwrap_or(1)
    }

    /// Send `payload`, an IP packet, under policy `k`; see [`crate::policy`]. Its headers are
    /// compressed if `compress`.
    fn send_by_policy(
        &mut self,
        now: Instant,
        k: usize,
        payload: Vec<u8>,
        compress: bool,
    ) -> Result<PathId, SendError<Vec<u8>>> {
        let active = (0..self.paths())
            .filter(|&i| self.striper.is_path_active(PathId(i as u8)))
            .fold(0u64, |m, i| m | 1 << i);
        // The flow key is read before the headers are compressed.
        let flow_key = policy::flow_key(&payload).unwrap_or(0);
        let mut payload = payload;
        let len = Self::squeeze(&mut self.compressor, compress, now, &mut payload);
        let p = &self.policies[k];
        let allowed = p.paths & active;
        if allowed == 0 {
            self.stats.policy_no_path += 1;
            return Err(SendError::Full(payload));
        }
        self.stats.policy_packets += 1;
        match p.striping {
            PolicyStriping::Flow => {
                let key = flow_key;
                // The configured rates, not PET's moving estimates: a flow must keep its path.
                let rates = &self.rates_bps;
                let path = policy::flow_path(key, allowed, |i| rates.get(i).copied().unwrap_or(1))
                    .expect("allowed != 0");
                return self
                    .striper
                    .send_unsequenced(now, PathId(path as u8), len, payload);
            }
            PolicyStriping::Fastest => {
                let path = self.striper.least_delay_in(allowed);
                return self.striper.send_unsequenced(now, path, len, payload);
            }
            PolicyStriping::Packet => {}
        }
        if allowed == active {
            return self.striper.send(now, len, payload);
        }
        let striper = &self.striper;
        let Some(path) = policy::least_loaded(
            allowed,
            len,
            |i| striper.queued_bytes(PathId(i as u8)),
            |i| self.rate(i),
            |i| striper.path_has_room(PathId(i as u8), len),
        ) else {
            return Err(SendError::Full(payload));
        };
        self.striper.send_on(now, PathId(path as u8), len, payload)
    }

    /// Send the packets of these DSCP values twice, on two paths (bit `d` of `mask` for DSCP
    /// `d`; see [`Striper::duplicate_last`]). Mode `sequence` only; 0 turns it off.
    pub fn set_duplicate_dscp(&mut self, mask: u64) {
        self.duplicate_dscp = mask;
    }

    /// Counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// The sending half.
    pub fn striper(&self) -> &Striper<Vec<u8>> {
        &self.striper
    }

    /// The receiving half.
    pub fn receiver(&self) -> &Resequencer<Vec<u8>> {
        &self.receiver
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.striper.paths()
    }

    /// Queue a packet for sending.
    pub fn send(&mut self, now: Instant, payload: Vec<u8>) -> Result<PathId, SendError<Vec<u8>>> {
        self.send_striped(now, payload, true)
    }

    /// [`Endpoint::send`], the headers compressed if `compress`.
    fn send_striped(
        &mut self,
        now: Instant,
        mut payload: Vec<u8>,
        compress: bool,
    ) -> Result<PathId, SendError<Vec<u8>>> {
        // PET pairs no TCP retransmission (`crate::tcp_retransmit`).
        let Some(t) = self.tcp_retransmits.as_mut() else {
            let len = Self::squeeze(&mut self.compressor, compress, now, &mut payload);
            return self.striper.send(now, len, payload);
        };
        let seg = match crate::tcp_retransmit::classify(&payload) {
            Some(TcpPacket::Data(s)) => Some(s),
            Some(TcpPacket::Restart(flow)) => {
                t.forget(&flow);
                None
            }
            None => None,
        };
        let retransmit = seg.as_ref().is_some_and(|s| t.is_retransmission(s));
        let len = Self::squeeze(&mut self.compressor, compress, now, &mut payload);
        let sent = self.striper.send_marked(now, len, payload, retransmit);
        if let (Ok(_), Some(s)) = (&sent, seg) {
            t.record(&s);
            self.stats.tcp_retransmits += u64::from(retransmit);
        }
        sent
    }

    /// Queue a copy of `packet` for sending, in a spare buffer if there is one; a refused
    /// packet's buffer goes back to the spares. See [`Endpoint::send_packet`].
    pub fn send_copy(&mut self, now: Instant, packet: &[u8]) -> Result<PathId, SendError<()>> {
        let payload = self.buffer(packet);
        self.send_packet(now, payload).map_err(|e| match e {
            SendError::Full(p) => {
                self.recycle(p);
                SendError::Full(())
            }
            SendError::TooLarge(p) => {
                self.recycle(p);
                SendError::TooLarge(())
            }
        })
    }

    /// Queue `payload`, an IP packet, under the path policy of its class, if any
    /// ([`crate::policy`]), and send a copy on a second path if its class is duplicated (a
    /// policy's `duplicate`, or [`Endpoint::set_duplicate_dscp`]). Packets of no policy go to
    /// [`Endpoint::send`].
    pub fn send_packet(
        &mut self,
        now: Instant,
        payload: Vec<u8>,
    ) -> Result<PathId, SendError<Vec<u8>>> {
        let dscp = if self.policies.is_empty() && self.duplicate_dscp == 0 {
            None
        } else {
            braid_qos::classifier::dscp(&payload)
        };
        let policy = policy::policy_for(&self.policies, dscp);
        let within = match policy {
            Some(k) => self.policies[k].duplicate.then_some(self.policies[k].paths),
            None => dscp
                .is_some_and(|d| self.duplicate_dscp & (1 << d) != 0)
                .then_some(u64::MAX),
        };
        let copy = within.map(|_| self.buffer(&payload));
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        // A packet sent twice goes whole: the copy, taken above, is whole too, and if a
        // compressed first could not be rebuilt, its place in the resequencing would shut the
        // copy out.
        let compress = copy.is_none();
        let saved_before = self.bytes_saved();
        let sent = match policy {
            Some(k) => self.send_by_policy(now, k, payload, compress),
            None => self.send_striped(now, payload, compress),
        };
        if sent.is_ok() {
            self.saved += self.bytes_saved() - saved_before;
            self.striper.queue_padding(now);
        }
        match (sent.as_ref().ok(), within, copy) {
            (Some(&first), Some(allowed), Some(copy)) => {
                // No other path with room: the copy is not sent (counted by the striper).
                if let Some(p) = self
                    .striper
                    .duplicate_last_within(first, len, copy, allowed)
                {
                    self.account_extra(now, p, len);
                }
            }
            (_, _, Some(copy)) => self.recycle(copy),
            _ => {}
        }
        sent
    }

    /// Give back a payload buffer (one [`Endpoint::poll_deliver`] returned, once the driver is
    /// done with it) for later packets. Optional: a buffer not given back is simply freed.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_CAPACITY {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// A copy of `bytes`, in a spare buffer if there is one.
    fn buffer(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.extend_from_slice(bytes);
        b
    }

    /// The next datagram for `path`, encoded into `buf` (cleared first). Feedback goes first,
    /// on whichever path polls.
    pub fn poll_transmit(&mut self, now: Instant, path: PathId, buf: &mut Vec<u8>) -> bool {
        self.poll_transmit_control(buf) || self.poll_transmit_queued(now, path, buf)
    }

    /// The next feedback datagram (credits, SIG-ACKs, header compression's installs and
    /// acknowledgements), for whichever path polls, encoded into `buf` (cleared first).
    pub fn poll_transmit_control(&mut self, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if let Some(credits) = self.feedback.pop_front() {
            let ok = emit(Repr::Feedback(Credits::from_slice(&credits)), buf);
            self.stats.feedback_sent += 1;
            self.credit_buf = credits;
            return ok;
        }
        if let Some(entries) = self.sig_acks.pop_front() {
            self.stats.sig_acks_sent += 1;
            return emit(Repr::SigAck(SigAcks::from_slice(&entries)), buf);
        }
        if let Some((cid, generation)) = self.decompressor.as_mut().and_then(|d| d.poll_ack()) {
            return emit(Repr::ContextAck { cid, generation }, buf);
        }
        if let Some((cid, generation, template)) =
            self.compressor.as_mut().and_then(|c| c.poll_install())
        {
            let repr = Repr::ContextInstall {
                cid,
                generation,
                template,
            };
            return emit(repr, buf);
        }
        false
    }

    /// What waits in `path`'s own queue (data, markers, padding), but none of the feedback,
    /// SIG-ACKs and header-compression messages [`poll_transmit`](Self::poll_transmit) puts
    /// first: for a path out of use (a backup in standby draining what it was given, a path
    /// gone down), where they would cost a metered link or be lost.
    pub fn poll_transmit_queued(&mut self, now: Instant, path: PathId, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let Some(t) = self.striper.poll_transmit(now, path) else {
            return false;
        };
        let repr = match &t.message {
            Outgoing::Data { seq, payload, .. } => Repr::Data {
                path,
                seq: *seq,
                payload,
            },
            Outgoing::Marker(m) => Repr::Marker(*m),
            &Outgoing::Padding { id, len } => Repr::Padding { path, id, len },
        };
        let ok = emit(repr, buf);
        if let Outgoing::Data { payload, .. } = t.message {
            self.recycle(payload);
        }
        ok
    }

    /// A datagram arrived on `path`. Anything malformed is dropped and counted.
    pub fn handle_datagram(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        match Repr::parse_bytes(bytes) {
            Ok(repr) => self.handle_repr(now, path, repr),
            Err(_) => self.stats.malformed += 1,
        }
    }

    /// A parsed inner packet arrived on `path`. Probes are the session's business and ignored
    /// here.
    pub fn handle_repr(&mut self, now: Instant, path: PathId, repr: Repr<'_>) {
        self.handle_repr_at(now, now, path, repr);
    }

    /// [`Endpoint::handle_repr`] for a packet that reached the host at `arrival` (no later
    /// than `now`; the kernel's receive timestamp): the arrival PET's SIG-ACKs report.
    pub fn handle_repr_at(&mut self, now: Instant, arrival: Instant, path: PathId, repr: Repr<'_>) {
        // A kernel timestamp a little ahead of the session's clock is taken as now.
        let arrival = arrival.min(now);
        match repr {
            Repr::Data {
                path: p,
                seq,
                payload,
            } => {
                if p != path || path.index() >= self.paths() {
                    self.stats.wrong_path += 1;
                    return;
                }
                let len = payload.len() as u32;
                if let Some(g) = &mut self.grantor {
                    g.on_data(path, len);
                }
                // Small packets (TCP's pure ACKs) never go through the peer's PET
                // (`SMALL_PACKET_BYTES`): reporting them would only cost SIG-ACKs on the way
                // back, on paths busy with this end's own data.
                if let (Some(rx), Some(seq), true) =
                    (&mut self.pet_rx, seq, len > SMALL_PACKET_BYTES)
                {
                    rx.handle_data(arrival, path, seq);
                    self.pump_sig_acks(now);
                }
                let copy = match &mut self.decompressor {
                    Some(d) if compress::is_compressed(payload) => {
                        // One that does not rebuild (counted) still takes its place in the
                        // resequencing, empty, and is dropped at delivery
                        // (`Endpoint::poll_deliver`): logical reception stays in step.
                        let mut b = self.spare.pop().unwrap_or_default();
                        d.decompress(payload, &mut b);
                        b
                    }
                    _ => self.buffer(payload),
                };
                if is_untimed_tcp(&copy) {
                    self.receiver.handle_data_unheld(now, path, seq, len, copy);
                } else {
                    self.receiver.handle_data(now, path, seq, len, copy);
                }
            }
            Repr::Padding { path: p, id, .. } => {
                if p != path || path.index() >= self.paths() {
                    self.stats.wrong_path += 1;
                    return;
                }
                self.stats.padding_received += 1;
                if let Some(rx) = &mut self.pet_rx {
                    rx.handle_data(arrival, path, id);
                    self.pump_sig_acks(now);
                }
            }
            Repr::Marker(m) => {
                if m.path != path || path.index() >= self.paths() {
                    self.stats.wrong_path += 1;
                    return;
                }
                if let Some(g) = &mut self.grantor {
                    g.on_marker(&m);
                }
                self.receiver.handle_marker(now, path, m);
            }
            Repr::Feedback(credits) => {
                self.stats.feedback_received += 1;
                for c in credits.iter() {
                    self.striper.handle_credit(c);
                }
            }
            Repr::SigAck(entries) => {
                if let Some(pet) = self.striper.pet_mut() {
                    self.stats.sig_acks_received += 1;
                    pet.handle_sig_ack(now, entries.iter());
                    self.drain_pet_events();
                    self.striper.adapt_quanta();
                }
            }
            Repr::ContextInstall {
                cid,
                generation,
                template,
            } => {
                if let Some(d) = &mut self.decompressor {
                    d.handle_install(cid, generation, template);
                }
            }
            Repr::ContextAck { cid, generation } => {
                if let Some(c) = &mut self.compressor {
                    c.handle_ack(cid, generation);
                }
            }
            // Liveness and retransmission are the session's job, and pTCP bypasses the bond.
            Repr::Probe(_)
            | Repr::ProbeAck(_)
            | Repr::Nack(_)
            | Repr::Abandon(_)
            | Repr::Unheard(_)
            | Repr::Ptcp { .. } => {}
        }
    }

    /// Move the SIG-ACKs that are due from the PET receiver to the send queue.
    fn pump_sig_acks(&mut self, now: Instant) {
        let Some(rx) = &mut self.pet_rx else {
            return;
        };
        while let Some(entries) = rx.poll_transmit(now) {
            if self.sig_acks.len() >= SIG_ACK_QUEUE {
                self.sig_acks.pop_front();
                self.stats.sig_acks_dropped += 1;
            }
            self.sig_acks.push_back(entries);
        }
    }

    /// The bond carries traffic outside the striper (pTCP segments): PET keeps measuring the
    /// paths with padding for it ([`braid_proto::pet::PetConfig::padding`]).
    pub fn note_traffic(&mut self, now: Instant) {
        if let Some(pet) = self.striper.pet_mut() {
            pet.note_traffic(now);
            self.striper.queue_padding(now);
        }
    }

    /// PET's timer (blackouts, padding) and its news.
    fn pet_timeout(&mut self, now: Instant) {
        if let Some(pet) = self.striper.pet_mut() {
            if pet.poll_timeout().is_some_and(|t| t <= now) {
                pet.handle_timeout(now);
                self.striper.queue_padding(now);
            }
            self.drain_pet_events();
        }
    }

    /// Discard PET's events: the session reads PET's state and counters directly
    /// (`Striper::pet`), and the queue must not grow.
    fn drain_pet_events(&mut self) {
        if let Some(pet) = self.striper.pet_mut() {
            while pet.poll_event().is_some() {}
        }
    }

    /// Resequencing `sequence`: a gap whose hold timer ran out, with a path that had not
    /// passed it ([`Stall`]), not taken yet.
    pub fn take_stall(&mut self) -> Option<Stall> {
        self.receiver.take_stall()
    }

    /// Resequencing `sequence`: the next sequence number the receiver waits for.
    pub fn next_seq(&self) -> Option<u64> {
        self.receiver.next_seq()
    }

    /// The next packet for the application, in order.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Vec<u8>> {
        loop {
            let Some(d) = self.receiver.poll_deliver(now) else {
                self.poll_credits(now);
                self.pump_sig_acks(now);
                self.pet_timeout(now);
                return None;
            };
            // A compressed packet that did not rebuild: empty, though it had bytes.
            if d.payload.is_empty() && d.len > 0 && self.decompressor.is_some() {
                self.recycle(d.payload);
                continue;
            }
            return Some(d.payload);
        }
    }

    fn poll_credits(&mut self, now: Instant) {
        if let Some(g) = &mut self.grantor {
            let receiver = &self.receiver;
            let mut buf = std::mem::take(&mut self.credit_buf);
            if g.poll_credits(now, |p| receiver.buffered_bytes(p), &mut buf) {
                self.feedback.push_back(buf);
            } else {
                self.credit_buf = buf;
            }
        }
    }

    /// Take `path` out of the rotation (it went dark) or put it back, at both halves. What
    /// waits in its transmit queue is dropped; returns the data packets dropped.
    pub fn set_path_active(&mut self, path: PathId, active: bool) -> usize {
        self.receiver.set_path_active(path, active);
        self.set_path_sending(path, active)
    }

    /// Take `path` out of the sending half only (it works one way: what the peer sends on it
    /// still arrives) or put it back; returns the data packets dropped from its queue.
    pub fn set_path_sending(&mut self, path: PathId, active: bool) -> usize {
        self.striper.set_path_active(path, active);
        if active {
            0
        } else {
            self.striper.clear_queue(path)
        }
    }

    /// Take `path` out of the sending half, or put it back, without dropping the data that
    /// waits in its queue: a backup path going to standby, whose queued packets are good to
    /// send (its padding goes).
    pub fn set_path_sending_held(&mut self, path: PathId, active: bool) {
        self.striper.set_path_active(path, active);
        if !active {
            self.striper.drop_padding(path);
        }
    }

    /// Take `path` out of the receiving half only (the peer no longer sends on it: a backup
    /// path in standby) or put it back: the receiver neither waits for it nor holds other
    /// paths' arrivals to its delay.
    pub fn set_path_receiving(&mut self, path: PathId, active: bool) {
        self.receiver.set_path_active(path, active);
    }

    /// EDPF: the one-way delay of `path`, from the session's probes.
    pub fn set_path_delay(&mut self, path: PathId, delay: braid_proto::time::Duration) {
        self.striper.set_path_delay(path, delay);
    }

    /// The base (uncongested) one-way delay of `path`, from the session's probes: the receiver's
    /// delay equalisation and gap timer use it.
    pub fn set_path_base_delay(
        &mut self,
        path: PathId,
        delay: Option<braid_proto::time::Duration>,
    ) {
        self.receiver.set_path_delay(path, delay);
        if let (Some(pet), Some(d)) = (self.striper.pet_mut(), delay) {
            // PET's D_l until SIG-ACKs give relative one-way delays (BAG section V-A).
            pet.set_probe_rtt(path, d * 2);
        }
    }

    /// `path`'s smoothed RTT, for the receiver's backup timer (BMP; used with
    /// `BondParams::backup_rtt_multiple`).
    pub fn set_path_rtt(&mut self, path: PathId, rtt: Option<braid_proto::time::Duration>) {
        self.receiver.set_path_rtt(path, rtt);
    }

    /// The paced release's rate (`braid_proto::resequence::Pacing`), bit/s.
    pub fn set_release_rate(&mut self, rate_bps: u64) {
        self.receiver.set_release_rate(rate_bps);
    }

    /// The peer will not send data `first..first + count` again (`crate::retransmit`).
    pub fn abandon(&mut self, first: u64, count: u32) {
        self.receiver.abandon(first, count);
    }

    /// How long the receiver waits for a resend once a gap's loss is certain
    /// (`crate::retransmit`).
    pub fn set_retransmit_grace(&mut self, grace: Option<braid_proto::time::Duration>) {
        self.receiver.set_retransmit_grace(grace);
    }

    /// Whether `poll_transmit(path)` would produce a datagram.
    pub fn has_transmit(&self, path: PathId) -> bool {
        self.has_control() || self.has_queued(path)
    }

    /// Whether [`poll_transmit_control`](Self::poll_transmit_control) would produce a packet.
    pub fn has_control(&self) -> bool {
        !self.feedback.is_empty()
            || !self.sig_acks.is_empty()
            || self.decompressor.as_ref().is_some_and(|d| d.has_ack())
            || self.compressor.as_ref().is_some_and(|c| c.has_install())
    }

    /// Whether [`poll_transmit_queued`](Self::poll_transmit_queued) would produce a packet.
    pub fn has_queued(&self, path: PathId) -> bool {
        self.striper.has_transmit(path)
    }

    /// When the endpoint needs to be polled even without input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.receiver.poll_timeout(),
            self.grantor.as_ref().and_then(|g| g.poll_timeout()),
            self.pet_rx.as_ref().and_then(|r| r.poll_timeout()),
            self.striper.pet().and_then(|p| p.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Encode `repr` into `buf`, resized to fit; whether it could be.
fn emit(repr: Repr<'_>, buf: &mut Vec<u8>) -> bool {
    buf.resize(repr.buffer_len(), 0);
    repr.emit_into(buf).is_ok()
}

/// Whether an IP packet is one no TCP takes an RTT sample from at its arrival end, so the
/// receiver's delay equalisation may let it through at once: a pure acknowledgement (no
/// payload, no SYN, FIN or RST; only what it acknowledges is timed) or an opening SYN (the
/// client times the SYN and SYN-ACK together). The acknowledgements of a bulk transfer then ride
/// the fastest path at its own delay, and every RTT either end measures, the handshake's
/// included (Linux seeds BBR's minimum RTT from it), is one held crossing plus one unheld one:
/// SYN (unheld) + SYN-ACK (held) at the client, SYN-ACK (held) + ACK (unheld) at the server,
/// data (held) + ACK (unheld) for either.
pub fn is_untimed_tcp(packet: &[u8]) -> bool {
    match etherparse::SlicedPacket::from_ip(packet) {
        Ok(etherparse::SlicedPacket {
            transport: Some(etherparse::TransportSlice::Tcp(tcp)),
            ..
        }) => {
            let bare = tcp.payload().is_empty() && !tcp.fin() && !tcp.rst();
            // ACK without SYN (a pure acknowledgement) or SYN without ACK (an opening SYN).
            bare && tcp.syn() != tcp.ack()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BondParams;
    use braid_proto::resequence::ResequenceMode;
    use braid_proto::scheduler::SchedulerKind;
    use braid_proto::striper::MarkerPosition;

    fn endpoint() -> Endpoint {
        let p = BondParams {
            scheduler: SchedulerKind::Srr,
            rates_bps: vec![10_000_000],
            max_packet: 1400,
            seed: 1,
            resequence: ResequenceMode::Sequence,
            marker_interval_rounds: 0,
            marker_position: MarkerPosition::End,
            hold_ms: 100,
            credit_buffer_bytes: 0,
            queue_limit_bytes: 64 * 1024,
            equalize_delay: false,
            retransmit: false,
            backup_rtt_multiple: 0,
            adaptive: false,
            compress_headers: false,
            policies: Vec::new(),
            backup_paths: 0,
            path_names: Vec::new(),
        };
        Endpoint::new(&EndpointConfig {
            striper: p.striper_config(),
            receiver: p.resequencer_config(),
            credits: p.credits(),
        })
        .unwrap()
    }

    /// Buffers go round (sent, delivered, recycled, filled again) without a stale byte: long
    /// and short packets alternate, so a reused buffer is always a different length.
    #[test]
    fn recycled_buffers_carry_exactly_the_new_packet() {
        let (mut a, mut b) = (endpoint(), endpoint());
        let now = Instant::ZERO;
        let mut wire = Vec::new();
        for round in 0..20u32 {
            let sent: Vec<Vec<u8>> = (0..8u32)
                .map(|k| {
                    let len = if (round + k) % 2 == 0 {
                        1400
                    } else {
                        40 + k as usize
                    };
                    vec![(round * 8 + k) as u8; len]
                })
                .collect();
            for p in &sent {
                a.send_copy(now, p).unwrap();
            }
            while a.poll_transmit(now, PathId(0), &mut wire) {
                b.handle_datagram(now, PathId(0), &wire);
            }
            let mut got = Vec::new();
            while let Some(p) = b.poll_deliver(now) {
                got.push(p.clone());
                b.recycle(p);
            }
            assert_eq!(got, sent, "round {round}");
        }
        assert!(!a.spare.is_empty() && !b.spare.is_empty());
        assert!(a.spare.len() <= SPARE_BUFFERS);
    }

    /// An IPv4 TCP segment with the given flags byte and payload (checksums left zero).
    fn tcp4(flags: u8, payload: &[u8]) -> Vec<u8> {
        crate::test_packets::tcp_ipv4(0, 0, 0, flags, payload)
    }

    const ACK: u8 = 0x10;
    const SYN: u8 = 0x02;
    const FIN: u8 = 0x01;

    #[test]
    fn only_bare_acknowledgements_and_opening_syns_are_untimed() {
        assert!(is_untimed_tcp(&tcp4(ACK, &[])));
        assert!(is_untimed_tcp(&tcp4(SYN, &[])));
        assert!(!is_untimed_tcp(&tcp4(ACK, b"data")));
        assert!(!is_untimed_tcp(&tcp4(SYN | ACK, &[])));
        assert!(!is_untimed_tcp(&tcp4(FIN | ACK, &[])));
        assert!(!is_untimed_tcp(&tcp4(0, &[])));
        // UDP, garbage and truncated packets are not.
        let mut udp = tcp4(0, &[]);
        udp[9] = 17;
        assert!(!is_untimed_tcp(&udp));
        assert!(!is_untimed_tcp(&[0xff; 3]));
        assert!(!is_untimed_tcp(&tcp4(ACK, &[])[..30]));
    }
}

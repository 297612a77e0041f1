//! TCP-v: one micro-flow of a striped connection, over one path.
//!
//! The pTCP paper's TCP-v (section 2 "Decoupling of Functionalities", section 3.1) is TCP with
//! the data taken out: it numbers, sends, acknowledges and retransmits *virtual* packets, and
//! runs congestion control, while the SM binds each virtual packet to real data at the moment it
//! goes out (delayed binding). Here:
//!
//! - **Congestion control** is a [`Congestion`] controller (NewReno, CUBIC or BBR) per flow
//!   (section 3.2 "Congestion Control"). The flow estimates its delivery rate
//!   ([`crate::delivery_rate`]) for the rate-based controller, and when the controller gives a
//!   pacing rate it releases its virtual packets no faster ([`MicroFlow::next_transmission`]
//!   returns `None` until the next release, which [`MicroFlow::poll_timeout`] includes), with
//!   a burst allowance of [`PACING_BURST_SEGMENTS`] segments or [`PACING_BURST_TIME`] of the
//!   rate, for drivers whose timers are a millisecond coarse.
//! - **Reliability** (section 3.2 "Reliability") is TCP's: a cumulative virtual acknowledgement
//!   plus SACK blocks (section 2 "Selective Acknowledgements"); a virtual packet is lost when
//!   [`DUP_THRESH`] packets sent after it were acknowledged (the SACK equivalent of three
//!   duplicate ACKs, RFC 6675) and is then fast-retransmitted, or when the RFC 6298 timer
//!   expires ([`crate::rtt`]). A retransmission reuses the virtual packet's number.
//! - **Upcalls to the SM** (section 3.1: established, closed, shrunk, and the acknowledgement of
//!   a virtual packet) are [`Signal`]s that the SM drains after every call. The SM's calls into
//!   TCP-v (open, close, receive, resume) are [`MicroFlow::connect`]/[`MicroFlow::accept`],
//!   [`MicroFlow::close`], [`MicroFlow::handle_segment`] and [`MicroFlow::resume`]; the paper's
//!   `send` upcall is the SM asking [`MicroFlow::next_transmission`] and answering with
//!   [`MicroFlow::on_sent`] or [`MicroFlow::freeze`] (FREEZE).
//! - **Shrunk** (section 2 "Packet Re-striping"): after a loss, lost virtual packets that no
//!   longer fit in the reduced window are reported with [`Signal::Shrunk`] so that the SM can
//!   unbind their data and stripe it on another flow; on a timeout the one packet left in the
//!   window is reported with [`Signal::Timeout`] so that the SM can copy it to another flow
//!   (section 2 "Redundant Striping").
//!
//! # Polling order
//!
//! The SM owns its flows and drives them: `expand_segment` then `handle_segment` for every
//! segment of the flow, `handle_timeout` at `poll_timeout`, then `poll_control`,
//! `next_transmission` (+ `on_sent` or `freeze`) and `take_ack` while it builds datagrams; after
//! each call it drains `poll_signal`. Time never goes backwards.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;

use crate::congestion::{Congestion, CongestionConfig, CongestionControl};
use crate::delivery_rate::{AckSampler, DeliveryRate, PacketRate};
use crate::ranges::RangeSet;
use crate::rtt::{RttConfig, RttEstimator};
use crate::wire::{self, Flags, SackBlock, Segment, MAX_SACK_BLOCKS};
use crate::{FlowId, VirtualSeq};

/// A virtual packet is lost once this many packets sent after it were acknowledged.
pub const DUP_THRESH: usize = 3;

/// A paced flow may send this many segments back to back after an idle moment ...
pub const PACING_BURST_SEGMENTS: u64 = 2;
/// ... or this much of its pacing rate, whichever is more.
pub const PACING_BURST_TIME: Duration = Duration::from_millis(1);

/// The most virtual packets between the oldest unacknowledged one and the next to send, and
/// the most a receiver accepts past its cumulative acknowledgement: bounds both scoreboards.
pub const MAX_VIRTUAL_WINDOW: u64 = 1 << 16;

/// The state of a micro-flow (a reduced TCP state diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowState {
    /// SYN sent, waiting for SYN_ACK.
    SynSent,
    /// SYN received and answered, waiting for the first acknowledgement.
    SynReceived,
    /// Open: data flows.
    Established,
    /// FIN sent, waiting for FIN_ACK and the peer's FIN.
    Closing,
    /// Closed; `aborted` when it gave up (handshake or FIN never answered).
    Closed {
        /// Gave up rather than closed cleanly.
        aborted: bool,
    },
}

/// What a micro-flow tells the SM (section 3.1's calls initiated by TCP-v).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The flow reached the established state.
    Established,
    /// The virtual packet was acknowledged: its binding is delivered.
    Acked(VirtualSeq),
    /// The lost virtual packet fell outside the reduced window: unbind it.
    Shrunk(VirtualSeq),
    /// The timer expired; this virtual packet is the one left in the window: copy it.
    Timeout(VirtualSeq),
    /// The virtual packet was declared lost by SACK and stays in the window (the flow will
    /// retransmit it itself).
    Lost(VirtualSeq),
    /// The flow closed.
    Closed {
        /// It gave up rather than closed cleanly.
        aborted: bool,
    },
}

/// A virtual packet the flow may send now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmission {
    /// Its number.
    pub vseq: VirtualSeq,
    /// Whether it was sent before.
    pub retransmit: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PacketState {
    Outstanding,
    Sacked,
    Lost,
}

#[derive(Clone, Copy, Debug)]
struct SentPacket {
    len: u64,
    time_sent: Instant,
    /// Transmission order within the flow: retransmissions get a fresh one, so that loss
    /// detection counts packets *sent* after this one, not numbered after it.
    order: u64,
    retransmitted: bool,
    state: PacketState,
    /// Reported with `Shrunk` since it was last sent.
    unbound: bool,
    /// Delivery-rate state at its (latest) send.
    rate: PacketRate,
}

/// Counters of one flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Virtual packets sent, first transmissions.
    pub packets_sent: u64,
    /// Virtual packets retransmitted.
    pub retransmits: u64,
    /// Loss events detected by SACK (fast retransmit).
    pub fast_retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Virtual packets reported `Shrunk`.
    pub shrunk: u64,
    /// Virtual packets received (including duplicates).
    pub packets_received: u64,
    /// Received virtual packets dropped as too far ahead.
    pub dropped_ahead: u64,
    /// Acknowledgements ignored as acknowledging what was never sent.
    pub bad_acks: u64,
}

/// Parameters of a micro-flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Congestion control.
    pub congestion: CongestionConfig,
    /// The retransmission timer.
    pub rtt: RttConfig,
    /// SYN, SYN_ACK and FIN are sent at most this many times before the flow gives up (15,
    /// as Linux's `tcp_retries2`: with the backoff capped at `rto_max` that is about ten
    /// minutes; 6 tries were too few at 11% loss each way, a property test found).
    pub max_control_tries: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            congestion: CongestionConfig::default(),
            rtt: RttConfig::default(),
            max_control_tries: 15,
        }
    }
}

/// One TCP-v.
///
/// Driven by its SM only (see the module docs for the order): `expand_segment` and
/// `handle_segment`, `handle_timeout` at `poll_timeout`, then `poll_control`,
/// `next_transmission` with `on_sent` or `freeze`, `take_ack`, and `poll_signal` until `None`
/// after each call. `now` never goes backwards.
#[derive(Clone, Debug)]
pub struct MicroFlow {
    id: FlowId,
    path: PathId,
    config: FlowConfig,
    state: FlowState,
    cc: Congestion,
    rtt: RttEstimator,
    // Sender.
    next_vseq: u64,
    snd_una: u64,
    sent: BTreeMap<u64, SentPacket>,
    retransmit: BTreeSet<u64>,
    bytes_in_flight: u64,
    /// Retransmissions allowed past the window (fast retransmit: one per loss event).
    allowance: u32,
    /// Transmission counter (see `SentPacket::order`).
    tx_count: u64,
    /// The [`DUP_THRESH`] largest transmission orders ever acknowledged, ascending.
    acked_orders: [u64; DUP_THRESH],
    frozen: bool,
    /// The window was full at the last send, and no FREEZE since: acknowledgements may grow it
    /// (RFC 7661's rule, as Linux's `tcp_is_cwnd_limited` and quinn's `app_limited`). A flow
    /// held back by the SM (no data, or the peer's window) must not inflate its window.
    cwnd_limited: bool,
    rto_deadline: Option<Instant>,
    /// Delivery-rate estimation.
    rate: DeliveryRate,
    /// A paced flow sends its next virtual packet no earlier than this.
    pacing_next: Instant,
    /// The most this flow may send, in payload bytes per second ([`MicroFlow::set_rate_cap`]).
    rate_cap: Option<u64>,
    // Handshake and close.
    syn_pending: bool,
    syn_ack_pending: bool,
    fin_pending: bool,
    fin_ack_pending: bool,
    /// The SM asked for a window probe on this flow.
    probe_pending: bool,
    fin_acked: bool,
    peer_fin: bool,
    control_tries: u32,
    control_deadline: Option<Instant>,
    // Receiver.
    rcv_next: u64,
    rcv_ranges: RangeSet,
    last_received: u64,
    ack_pending: bool,
    /// A data segment had to leave SACK blocks out (`Config::sack_blocks_with_data`): a pure
    /// ACK with all of them goes out before this flow's next data.
    sack_owed: bool,
    signals: VecDeque<Signal>,
    stats: FlowStats,
}

impl MicroFlow {
    fn new(id: FlowId, path: PathId, config: FlowConfig, state: FlowState) -> Self {
        MicroFlow {
            id,
            path,
            config,
            state,
            cc: Congestion::with_seed(config.congestion, u64::from(id.0)),
            rtt: RttEstimator::new(config.rtt),
            next_vseq: 0,
            snd_una: 0,
            sent: BTreeMap::new(),
            retransmit: BTreeSet::new(),
            bytes_in_flight: 0,
            allowance: 0,
            tx_count: 0,
            acked_orders: [0; DUP_THRESH],
            frozen: false,
            cwnd_limited: false,
            rto_deadline: None,
            rate: DeliveryRate::default(),
            pacing_next: Instant::ZERO,
            rate_cap: None,
            syn_pending: false,
            syn_ack_pending: false,
            fin_pending: false,
            fin_ack_pending: false,
            probe_pending: false,
            fin_acked: false,
            peer_fin: false,
            control_tries: 0,
            control_deadline: None,
            rcv_next: 0,
            rcv_ranges: RangeSet::new(),
            last_received: 0,
            ack_pending: false,
            sack_owed: false,
            signals: VecDeque::new(),
            stats: FlowStats::default(),
        }
    }

    /// Opens the flow actively (the SM's `open`): a SYN goes out at the next poll.
    pub fn connect(id: FlowId, path: PathId, config: FlowConfig) -> Self {
        let mut f = Self::new(id, path, config, FlowState::SynSent);
        f.syn_pending = true;
        f
    }

    /// Opens the flow passively on a received SYN: a SYN_ACK goes out at the next poll.
    pub fn accept(id: FlowId, path: PathId, config: FlowConfig) -> Self {
        let mut f = Self::new(id, path, config, FlowState::SynReceived);
        f.syn_ack_pending = true;
        f
    }

    /// The flow's id.
    pub fn id(&self) -> FlowId {
        self.id
    }
    /// The path it runs over.
    pub fn path(&self) -> PathId {
        self.path
    }
    /// Its state.
    pub fn state(&self) -> FlowState {
        self.state
    }
    /// Whether it is closed (cleanly or not).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, FlowState::Closed { .. })
    }
    /// Whether it may carry data.
    pub fn is_established(&self) -> bool {
        self.state == FlowState::Established
    }
    /// The congestion window in bytes.
    pub fn window(&self) -> u64 {
        self.cc.window()
    }
    /// Payload bytes of outstanding virtual packets.
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }
    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    /// Counters.
    pub fn stats(&self) -> FlowStats {
        self.stats
    }
    /// Whether the SM froze it.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }
    /// Whether it owes the peer an acknowledgement.
    pub fn ack_pending(&self) -> bool {
        self.ack_pending
    }
    /// Whether anything it sent is unacknowledged or owed a retransmission.
    pub fn has_outstanding(&self) -> bool {
        self.bytes_in_flight > 0 || !self.retransmit.is_empty()
    }

    /// The next upcall for the SM.
    pub fn poll_signal(&mut self) -> Option<Signal> {
        self.signals.pop_front()
    }

    /// When `handle_timeout` must be called next: the timers, and the next pacing release
    /// of a paced flow that has something to send (after which the SM's `poll_transmit`
    /// finds it ready).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let pacing = (self.pacing_rate().is_some() && self.unpaced_transmission().is_some())
            .then_some(self.pacing_next);
        [self.rto_deadline, self.control_deadline, pacing]
            .into_iter()
            .flatten()
            .min()
    }

    /// The pacing rate, in payload bytes per second (`None`: not paced): the controller's, no
    /// higher than the flow's cap ([`MicroFlow::set_rate_cap`]).
    pub fn pacing_rate(&self) -> Option<u64> {
        match (self.cc.pacing_rate(), self.rate_cap) {
            (Some(r), Some(cap)) => Some(r.min(cap)),
            (r, cap) => r.or(cap),
        }
    }

    /// Never send faster than `cap` payload bytes per second (beyond the pacing's burst
    /// allowance), whatever the controller asks; `None` (or 0) lifts the cap. For a path whose
    /// rate is known and whose segments wait behind a shaper that bounds only the bond's
    /// total (braid's `[qos]`): the cap keeps one flow's start-up or probing from filling its
    /// own path's queue. A flow whose controller does not pace (CUBIC, NewReno) is paced at
    /// the cap.
    pub fn set_rate_cap(&mut self, cap: Option<u64>) {
        self.rate_cap = cap.filter(|&c| c > 0);
    }

    fn mss(&self) -> u64 {
        self.config.congestion.mss
    }

    fn control_timeout(&self) -> Duration {
        let mut base = self.rtt.rto_base();
        if self.fin_acked {
            // FIN-WAIT-2 (`await_peer_fin`): the peer resends its FIN on its own timer, whose
            // base may be the initial RTO if it never sent data; wait on the longer of the two.
            base = base.max(self.config.rtt.rto_initial);
        }
        base.saturating_mul(1 << self.control_tries.min(16))
            .min(self.config.rtt.rto_max)
    }

    fn set_closed(&mut self, aborted: bool) {
        if self.is_closed() {
            return;
        }
        self.state = FlowState::Closed { aborted };
        self.rto_deadline = None;
        self.control_deadline = None;
        self.syn_pending = false;
        self.syn_ack_pending = false;
        self.fin_pending = false;
        self.signals.push_back(Signal::Closed { aborted });
    }

    fn set_established(&mut self) {
        self.state = FlowState::Established;
        self.control_deadline = None;
        self.control_tries = 0;
        self.signals.push_back(Signal::Established);
    }

    /// The SM's `close`: sends FIN (the SM calls it when all its data is acknowledged). A flow
    /// still opening is left to finish its handshake (or give up): the SM closes it once it is
    /// established, so that its FIN can carry the end of the stream if the other paths died.
    pub fn close(&mut self, now: Instant) {
        match self.state {
            FlowState::SynSent | FlowState::SynReceived => {}
            FlowState::Established => {
                self.state = FlowState::Closing;
                self.fin_pending = true;
                self.control_tries = 0;
                self.control_deadline = Some(now + self.control_timeout());
                self.rto_deadline = None;
                self.retransmit.clear();
            }
            FlowState::Closing | FlowState::Closed { .. } => {}
        }
    }

    /// The SM received the peer's whole stream: the peer has nothing left to send, so a flow
    /// in FIN-WAIT-2 (its FIN acknowledged, the peer's not yet come) only waits for the peer's
    /// FIN. It waits on the control timer's backoff for [`FlowConfig::max_control_tries`]
    /// tries, from a base of at least the initial RTO (the peer's FIN timer starts there when
    /// it has no RTT sample), so at least as long as the peer resends a FIN, and then gives
    /// up, closing aborted: on a path that died after this end's FIN got through, the peer's
    /// FIN never comes.
    pub fn await_peer_fin(&mut self, now: Instant) {
        if self.state == FlowState::Closing
            && self.fin_acked
            && !self.peer_fin
            && self.control_deadline.is_none()
        {
            self.control_deadline = Some(now + self.control_timeout());
        }
    }

    /// FREEZE from the SM: it has nothing to bind; stop asking until [`MicroFlow::resume`].
    pub fn freeze(&mut self) {
        self.frozen = true;
        self.cwnd_limited = false;
        // Nothing to send with window to spare: application-limited (delivery-rate estimation
        // section 3.4).
        if self.retransmit.is_empty() {
            self.rate.mark_app_limited(self.bytes_in_flight);
        }
    }

    /// The SM's `resume`: it has data again.
    pub fn resume(&mut self) {
        self.frozen = false;
    }

    /// A control segment (SYN, SYN_ACK, FIN_ACK, FIN) the flow must send now, as its flags; the
    /// SM adds the acknowledgement fields when the flags carry [`Flags::ACK`].
    pub fn poll_control(&mut self) -> Option<Flags> {
        if self.syn_pending {
            self.syn_pending = false;
            return Some(Flags::SYN);
        }
        let acking = Flags::ACK;
        if self.syn_ack_pending {
            self.syn_ack_pending = false;
            return Some(Flags::SYN_ACK.with(acking));
        }
        if self.fin_ack_pending {
            self.fin_ack_pending = false;
            let mut f = Flags::FIN_ACK.with(acking);
            if self.fin_pending {
                self.fin_pending = false;
                f = f.with(Flags::FIN);
            }
            return Some(f);
        }
        if self.fin_pending {
            self.fin_pending = false;
            return Some(Flags::FIN.with(acking));
        }
        if self.probe_pending {
            self.probe_pending = false;
            if matches!(self.state, FlowState::Established | FlowState::Closing) {
                return Some(Flags::PROBE.with(acking));
            }
        }
        None
    }

    /// The SM wants the peer to hear its acknowledgement fields (a window update): a pure
    /// ACK goes out at the next poll unless a data segment carries them first.
    pub fn request_ack(&mut self) {
        if matches!(self.state, FlowState::Established | FlowState::Closing) {
            self.ack_pending = true;
        }
    }

    /// A data segment of this flow left SACK blocks out: owe the peer a pure ACK with them.
    pub fn owe_sack(&mut self) {
        if matches!(self.state, FlowState::Established | FlowState::Closing) {
            self.sack_owed = true;
        }
    }

    /// Whether a pure ACK with the SACK blocks a data segment left out is owed (and clear it).
    pub fn take_sack_owed(&mut self) -> bool {
        std::mem::take(&mut self.sack_owed)
    }

    /// The SM wants a window probe sent on this flow (the peer answers with an ACK).
    pub fn request_probe(&mut self) {
        self.probe_pending = true;
    }

    /// Whether segments of this flow carry acknowledgement fields (it has heard from the peer).
    pub fn can_ack(&self) -> bool {
        self.state != FlowState::SynSent
    }

    /// Fills the acknowledgement fields of `seg` (cumulative virtual acknowledgement and SACK
    /// blocks, the block with the latest arrival first, RFC 2018) and clears the pending ACK.
    pub fn take_ack(&mut self, seg: &mut Segment<'_>) {
        self.ack_pending = false;
        seg.vack = VirtualSeq(self.rcv_next);
        let mut n = 0;
        let latest = self.rcv_ranges.range_containing(self.last_received);
        if let Some(r) = latest.clone() {
            seg.sacks[0] = SackBlock {
                start: VirtualSeq(r.start),
                end: VirtualSeq(r.end),
            };
            n = 1;
        }
        for r in self.rcv_ranges.iter().rev() {
            if n == MAX_SACK_BLOCKS {
                break;
            }
            if Some(&r) == latest.as_ref() {
                continue;
            }
            seg.sacks[n] = SackBlock {
                start: VirtualSeq(r.start),
                end: VirtualSeq(r.end),
            };
            n += 1;
        }
        seg.sack_len = n as u8;
    }

    /// SACK blocks the next acknowledgement of this flow would carry.
    pub fn sack_blocks(&self) -> usize {
        self.rcv_ranges.len().min(MAX_SACK_BLOCKS)
    }

    /// Expands the truncated virtual sequence numbers of a parsed `seg` of this flow (see
    /// [`crate::wire`], "Truncated numbers"): `vseq` against the next virtual packet this flow
    /// expects, `vack` and the SACK edges against its oldest unacknowledged one. Call it before
    /// [`MicroFlow::handle_segment`] on every segment that came off the wire.
    pub fn expand_segment(&self, seg: &mut Segment<'_>) {
        seg.vseq = VirtualSeq(wire::expand(wire::truncate(seg.vseq.0), self.rcv_next));
        seg.vack = VirtualSeq(wire::expand(wire::truncate(seg.vack.0), self.snd_una));
        let n = usize::from(seg.sack_len).min(MAX_SACK_BLOCKS);
        for b in &mut seg.sacks[..n] {
            let (start, end) = (wire::truncate(b.start.0), wire::truncate(b.end.0));
            let full = wire::expand(start, self.snd_una);
            b.start = VirtualSeq(full);
            b.end = VirtualSeq(full.saturating_add(u64::from(end.wrapping_sub(start))));
        }
    }

    /// The virtual packet this flow may send at `now`, if its window (or the fast-retransmit
    /// allowance) and its pacing let it: an owed retransmission first, then a new one. The SM
    /// binds data to it and calls [`MicroFlow::on_sent`], or calls [`MicroFlow::freeze`].
    pub fn next_transmission(&self, now: Instant) -> Option<Transmission> {
        if self.pacing_rate().is_some() && now < self.pacing_next {
            return None;
        }
        self.unpaced_transmission()
    }

    /// [`MicroFlow::next_transmission`] without pacing.
    fn unpaced_transmission(&self) -> Option<Transmission> {
        if self.state != FlowState::Established {
            return None;
        }
        let room = self.bytes_in_flight + self.mss() <= self.cc.window();
        if let Some(&v) = self.retransmit.first() {
            if room || self.allowance > 0 {
                return Some(Transmission {
                    vseq: VirtualSeq(v),
                    retransmit: true,
                });
            }
            return None;
        }
        if self.frozen || !room || self.next_vseq - self.snd_una >= MAX_VIRTUAL_WINDOW {
            return None;
        }
        Some(Transmission {
            vseq: VirtualSeq(self.next_vseq),
            retransmit: false,
        })
    }

    /// The SM sent `tx` with `len` payload bytes bound to it (zero for an empty one).
    ///
    /// # Panics
    /// If `tx` is not what [`MicroFlow::next_transmission`] returned.
    pub fn on_sent(&mut self, now: Instant, tx: Transmission, len: u64) {
        // A virtual packet takes a slot of the window whatever is bound to it: an empty one
        // (filling a hole) is charged a full segment, or a flow that just timed out would send
        // every owed hole at once and then take new data back onto its silent path.
        let len = if len == 0 { self.mss() } else { len };
        let rate = self.rate.on_sent(now, self.bytes_in_flight);
        self.pace(now, len);
        let v = tx.vseq.0;
        if tx.retransmit {
            assert!(self.retransmit.remove(&v), "on_sent: not owed");
            self.allowance = self.allowance.saturating_sub(1);
            self.stats.retransmits += 1;
            let p = self
                .sent
                .get_mut(&v)
                .expect("on_sent: owed packet is tracked");
            *p = SentPacket {
                len,
                time_sent: now,
                order: self.tx_count,
                retransmitted: true,
                state: PacketState::Outstanding,
                unbound: false,
                rate,
            };
        } else {
            assert_eq!(v, self.next_vseq, "on_sent: not the next virtual packet");
            self.next_vseq += 1;
            self.stats.packets_sent += 1;
            self.sent.insert(
                v,
                SentPacket {
                    len,
                    time_sent: now,
                    order: self.tx_count,
                    retransmitted: false,
                    state: PacketState::Outstanding,
                    unbound: false,
                    rate,
                },
            );
        }
        self.tx_count += 1;
        self.bytes_in_flight += len;
        self.cwnd_limited = self.bytes_in_flight + self.mss() > self.cc.window();
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    /// Moves the next pacing release `len` bytes of the pacing rate past the later of the
    /// previous release and `now` less the burst allowance (a token bucket in time). One gap is
    /// at most a quarter of the smoothed RTT (BBR's floor of four segments a round trip; 50 ms
    /// before the first sample), so an absurdly low rate, or one that rose after the packet
    /// went, holds the next packet back no longer than that; but never less than `len` bytes
    /// at the flow's cap.
    fn pace(&mut self, now: Instant, len: u64) {
        let Some(rate) = self.pacing_rate().filter(|&r| r > 0) else {
            return;
        };
        let ns = |bytes: u64, rate: u64| {
            let t = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
            u64::try_from(t).unwrap_or(u64::MAX)
        };
        let burst =
            ns(PACING_BURST_SEGMENTS * self.mss(), rate).max(PACING_BURST_TIME.as_nanos() as u64);
        let earliest = Instant::from_nanos(now.as_nanos().saturating_sub(burst));
        let longest = if self.rtt.has_sample() {
            self.rtt.srtt() / 4
        } else {
            Duration::from_millis(50)
        };
        // The cap is a hard limit: the quarter-RTT bound does not shorten its gap.
        let capped = self.rate_cap.map_or(0, |cap| ns(len, cap));
        let gap = Duration::from_nanos(ns(len, rate))
            .min(longest)
            .max(Duration::from_nanos(capped));
        self.pacing_next = self.pacing_next.max(earliest).saturating_add(gap);
    }

    /// The SM's `receive`: the flow part of a segment of this flow. Returns whether the segment
    /// belongs to an open flow (its data may be taken).
    pub fn handle_segment(&mut self, now: Instant, seg: &Segment<'_>) -> bool {
        let f = seg.flags;
        if f.contains(Flags::SYN) {
            match self.state {
                FlowState::SynReceived | FlowState::Established => self.syn_ack_pending = true,
                _ => {}
            }
            return false;
        }
        if f.contains(Flags::SYN_ACK) {
            match self.state {
                FlowState::SynSent => {
                    self.set_established();
                    self.ack_pending = true;
                }
                FlowState::Established => self.ack_pending = true,
                _ => {}
            }
        }
        if self.state == FlowState::SynSent {
            return false;
        }
        // A virtual packet proves the peer established as much as an ACK does (it sends one only
        // once established): data segments carry no acknowledgement when nothing is new.
        if self.state == FlowState::SynReceived
            && (f.contains(Flags::ACK) || f.contains(Flags::VPKT))
        {
            self.set_established();
        }
        if f.contains(Flags::ACK) {
            self.handle_ack(now, seg);
        }
        if f.contains(Flags::PROBE) {
            self.ack_pending = true;
        }
        let mut accepted = !self.is_closed() && self.state != FlowState::SynReceived;
        if f.contains(Flags::VPKT) {
            accepted &= self.receive_virtual(seg.vseq.0);
        }
        if f.contains(Flags::FIN) {
            self.peer_fin = true;
            self.fin_ack_pending = true;
        }
        if f.contains(Flags::FIN_ACK) && self.state == FlowState::Closing && !self.fin_acked {
            // Like FIN-WAIT-2: wait for the peer's FIN without a timer while the peer may
            // still send; [`MicroFlow::await_peer_fin`] starts one once it cannot.
            self.fin_acked = true;
            self.control_deadline = None;
            self.control_tries = 0;
        }
        if self.state == FlowState::Closing && self.fin_acked && self.peer_fin {
            self.set_closed(false);
        }
        accepted
    }

    /// Records virtual packet `v`; returns false if it is too far ahead to be tracked.
    fn receive_virtual(&mut self, v: u64) -> bool {
        self.stats.packets_received += 1;
        self.ack_pending = true;
        if v < self.rcv_next || self.rcv_ranges.contains(v) {
            return true;
        }
        if v - self.rcv_next >= MAX_VIRTUAL_WINDOW {
            self.stats.dropped_ahead += 1;
            return false;
        }
        self.rcv_ranges.insert(v..v + 1);
        self.last_received = v;
        if let Some(r) = self.rcv_ranges.first() {
            if r.start == self.rcv_next {
                self.rcv_next = r.end;
                self.rcv_ranges.remove_below(r.end);
            }
        }
        true
    }

    fn handle_ack(&mut self, now: Instant, seg: &Segment<'_>) {
        let vack = seg.vack.0;
        if vack > self.next_vseq {
            self.stats.bad_acks += 1;
            return;
        }
        let mut newly: Vec<(u64, SentPacket)> = Vec::new();
        if vack > self.snd_una {
            let keep = self.sent.split_off(&vack);
            let acked = core::mem::replace(&mut self.sent, keep);
            for (v, p) in acked {
                self.retransmit.remove(&v);
                if p.state != PacketState::Sacked {
                    newly.push((v, p));
                }
            }
            self.snd_una = vack;
        }
        for blk in seg.sack_blocks() {
            let lo = blk.start.0.max(self.snd_una);
            let hi = blk.end.0.min(self.next_vseq);
            if lo >= hi {
                continue;
            }
            for (&v, p) in self.sent.range_mut(lo..hi) {
                if p.state != PacketState::Sacked {
                    newly.push((v, *p));
                    p.state = PacketState::Sacked;
                    self.retransmit.remove(&v);
                }
            }
        }
        if newly.is_empty() {
            return;
        }
        let prior_in_flight = self.bytes_in_flight;
        let mut ack = AckSampler::default();
        let mut sample: Option<(u64, Instant)> = None;
        for &(v, p) in &newly {
            self.rate
                .on_acked(now, p.time_sent, p.len, &p.rate, &mut ack);
            if p.state == PacketState::Outstanding {
                self.bytes_in_flight -= p.len;
                if !p.retransmitted && sample.is_none_or(|(sv, _)| v > sv) {
                    sample = Some((v, p.time_sent));
                }
            }
            self.signals.push_back(Signal::Acked(VirtualSeq(v)));
            // Keep the DUP_THRESH largest acknowledged transmission orders (+1, so that 0
            // means none).
            let o = p.order + 1;
            if o > self.acked_orders[0] && !self.acked_orders.contains(&o) {
                self.acked_orders[0] = o;
                self.acked_orders.sort_unstable();
            }
        }
        let rtt = sample.map(|(_, sent)| now.saturating_duration_since(sent));
        if let Some(r) = rtt {
            self.rtt.on_sample(r);
        }
        for &(_, p) in &newly {
            if p.state == PacketState::Outstanding && self.cwnd_limited {
                self.cc.on_ack(now, p.time_sent, p.len.max(1), &self.rtt);
            }
        }
        self.rtt.reset_backoff();
        self.rto_deadline = (self.bytes_in_flight > 0).then(|| now + self.rtt.rto());
        let lost = self.detect_losses(now);
        let mut rs = self.rate.sample(&ack, self.rtt.min());
        rs.newly_lost = lost;
        rs.prior_in_flight = prior_in_flight;
        rs.in_flight = self.bytes_in_flight;
        rs.rtt = rtt;
        self.cc.on_rate_sample(now, &rs);
        if self.cc.holds_back() {
            self.rate.mark_app_limited(self.bytes_in_flight);
        }
        if lost > 0 {
            self.report_shrunk();
        }
    }

    /// Declares lost every outstanding packet of which [`DUP_THRESH`] packets sent later were
    /// acknowledged (RFC 6675's DupThresh counted in transmission order, so that a
    /// retransmission is not declared lost again by the acknowledgements that condemned it).
    /// Returns the bytes declared lost; the caller reports what no longer fits as `Shrunk`.
    fn detect_losses(&mut self, now: Instant) -> u64 {
        // Orders are stored +1; a packet of order o is lost when o + 1 < the third largest.
        let threshold = self.acked_orders[0];
        if threshold == 0 {
            return 0;
        }
        let lost: Vec<u64> = self
            .sent
            .iter()
            .filter(|(_, p)| p.state == PacketState::Outstanding && p.order + 1 < threshold)
            .map(|(&v, _)| v)
            .collect();
        if lost.is_empty() {
            return 0;
        }
        let mut latest_sent = Instant::ZERO;
        let mut lost_bytes = 0;
        for v in lost {
            if let Some(p) = self.sent.get_mut(&v) {
                p.state = PacketState::Lost;
                self.bytes_in_flight -= p.len;
                lost_bytes += p.len;
                latest_sent = latest_sent.max(p.time_sent);
                self.retransmit.insert(v);
                self.signals.push_back(Signal::Lost(VirtualSeq(v)));
            }
        }
        self.stats.fast_retransmits += 1;
        self.cc.on_congestion_event(now, latest_sent);
        self.allowance = 1;
        if self.bytes_in_flight == 0 {
            self.rto_deadline = None;
        }
        lost_bytes
    }

    /// Reports the owed retransmissions that do not fit in the window as [`Signal::Shrunk`].
    fn report_shrunk(&mut self) {
        let room = self.cc.window().saturating_sub(self.bytes_in_flight) / self.mss();
        let fits = room.max(u64::from(self.allowance)) as usize;
        let outside: Vec<u64> = self.retransmit.iter().skip(fits).copied().collect();
        for v in outside {
            if let Some(p) = self.sent.get_mut(&v) {
                if !p.unbound {
                    p.unbound = true;
                    self.stats.shrunk += 1;
                    self.signals.push_back(Signal::Shrunk(VirtualSeq(v)));
                }
            }
        }
    }

    /// Timers: the retransmission timer (RFC 6298 (5.4)-(5.6)) and the SYN/SYN_ACK/FIN timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.control_deadline.is_some_and(|d| d <= now) {
            self.control_tries += 1;
            if self.control_tries >= self.config.max_control_tries {
                self.set_closed(true);
                return;
            }
            match self.state {
                FlowState::SynSent => self.syn_pending = true,
                FlowState::SynReceived => self.syn_ack_pending = true,
                FlowState::Closing => self.fin_pending = !self.fin_acked,
                _ => {}
            }
            self.control_deadline = Some(now + self.control_timeout());
        }
        if self.rto_deadline.is_some_and(|d| d <= now) {
            self.on_rto(now);
        }
    }

    fn on_rto(&mut self, now: Instant) {
        self.stats.timeouts += 1;
        self.rtt.back_off();
        self.cc.on_timeout(now, self.bytes_in_flight);
        for (&v, p) in self.sent.iter_mut() {
            if p.state == PacketState::Outstanding {
                p.state = PacketState::Lost;
                self.retransmit.insert(v);
            }
        }
        self.bytes_in_flight = 0;
        self.allowance = 1;
        if let Some(&first) = self.retransmit.first() {
            self.signals.push_back(Signal::Timeout(VirtualSeq(first)));
        }
        self.report_shrunk();
        self.rto_deadline = None;
    }

    /// Moves both sequence spaces of a fresh flow (nothing sent or received yet) to start at
    /// `v`, as if `v` virtual packets had gone each way (tests of the wrap of the segment
    /// format's truncated numbers).
    #[cfg(test)]
    pub(crate) fn skip_virtual(&mut self, v: u64) {
        assert!(self.sent.is_empty() && self.rcv_ranges.is_empty() && self.rcv_next == 0);
        self.next_vseq = v;
        self.snd_una = v;
        self.rcv_next = v;
        self.last_received = v;
    }

    /// Arms the handshake timer of a new flow; the SM calls it once after creating the flow.
    pub fn start(&mut self, now: Instant) {
        if matches!(self.state, FlowState::SynSent | FlowState::SynReceived) {
            self.control_deadline = Some(now + self.control_timeout());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    /// Unpaced (loss-based) flows ignore the time asked at.
    const NOW: Instant = Instant::ZERO;

    fn established() -> MicroFlow {
        let mut f = MicroFlow::connect(FlowId(0), PathId(0), FlowConfig::default());
        f.start(ms(0));
        assert_eq!(f.poll_control(), Some(Flags::SYN));
        let seg = Segment::new(FlowId(0), Flags::SYN_ACK.with(Flags::ACK));
        f.handle_segment(ms(10), &seg);
        assert_eq!(f.poll_signal(), Some(Signal::Established));
        f
    }

    fn send_all(f: &mut MicroFlow, now: Instant) -> Vec<Transmission> {
        let mut out = Vec::new();
        while let Some(tx) = f.next_transmission(NOW) {
            f.on_sent(now, tx, 1200);
            out.push(tx);
        }
        out
    }

    fn ack(vack: u64, sacks: &[(u64, u64)]) -> Segment<'static> {
        let mut s = Segment::new(FlowId(0), Flags::ACK);
        s.vack = VirtualSeq(vack);
        for (i, &(a, b)) in sacks.iter().enumerate() {
            s.sacks[i] = SackBlock {
                start: VirtualSeq(a),
                end: VirtualSeq(b),
            };
        }
        s.sack_len = sacks.len() as u8;
        s
    }

    #[test]
    fn initial_window_then_slow_start() {
        let mut f = established();
        assert_eq!(send_all(&mut f, ms(10)).len(), 10);
        f.handle_segment(ms(110), &ack(5, &[]));
        assert_eq!(f.rtt().srtt(), Duration::from_millis(100));
        // Five acked: window 15 packets, five in flight: ten more.
        assert_eq!(send_all(&mut f, ms(110)).len(), 10);
        let acked: Vec<_> = core::iter::from_fn(|| f.poll_signal()).collect();
        assert_eq!(acked.len(), 5);
    }

    #[test]
    fn sack_three_above_is_a_loss_fast_retransmitted() {
        let mut f = established();
        send_all(&mut f, ms(10));
        // 0 lost; 1..4 arrive.
        f.handle_segment(ms(110), &ack(0, &[(1, 3)]));
        assert!(f.retransmit.is_empty());
        f.handle_segment(ms(111), &ack(0, &[(1, 4)]));
        assert_eq!(f.stats().fast_retransmits, 1);
        let tx = f.next_transmission(NOW).unwrap();
        assert_eq!(
            tx,
            Transmission {
                vseq: VirtualSeq(0),
                retransmit: true
            }
        );
        assert_eq!(f.window(), 7800);
        f.on_sent(ms(111), tx, 1200);
        // In flight: 0 and 4..9 = 7 packets, window 6.5: nothing more.
        assert_eq!(f.next_transmission(NOW), None);
    }

    #[test]
    fn losses_outside_the_reduced_window_are_shrunk() {
        let mut f = established();
        send_all(&mut f, ms(10));
        // 0..3 lost, 4..6 arrive, 7..9 still in flight: the window grows to 13 packets with the
        // three acks and halves to 6.5; 3 in flight leave room for 3 of the 4 retransmissions.
        f.handle_segment(ms(110), &ack(0, &[(4, 7)]));
        let sigs: Vec<_> = core::iter::from_fn(|| f.poll_signal()).collect();
        assert_eq!(
            sigs.iter()
                .filter(|s| matches!(s, Signal::Acked(_)))
                .count(),
            3
        );
        assert_eq!(f.window(), 7800);
        assert_eq!(sigs.last(), Some(&Signal::Shrunk(VirtualSeq(3))));
        assert_eq!(f.stats().shrunk, 1);
        // The shrunk packet is still owed (its number must be filled), after the other three.
        let mut owed = Vec::new();
        while let Some(tx) = f.next_transmission(NOW) {
            f.on_sent(ms(111), tx, 1200);
            owed.push(tx.vseq.0);
        }
        assert_eq!(owed, vec![0, 1, 2]);
    }

    #[test]
    fn timeout_backs_off_keeps_one_and_shrinks_the_rest() {
        let mut f = established();
        send_all(&mut f, ms(10));
        let d = f.poll_timeout().unwrap();
        assert_eq!(d, ms(1010));
        f.handle_timeout(d);
        let sigs: Vec<_> = core::iter::from_fn(|| f.poll_signal()).collect();
        assert_eq!(sigs[0], Signal::Timeout(VirtualSeq(0)));
        assert_eq!(sigs.len(), 10, "{sigs:?}");
        assert!(sigs[1..].iter().all(|s| matches!(s, Signal::Shrunk(_))));
        assert_eq!(f.window(), 1200);
        let tx = f.next_transmission(NOW).unwrap();
        // Even sent empty (its data unbound), the packet takes the one-segment window.
        f.on_sent(d, tx, 0);
        assert_eq!(f.bytes_in_flight(), 1200);
        assert_eq!(f.next_transmission(NOW), None);
        // Backed off: 2 s.
        assert_eq!(f.poll_timeout(), Some(d + Duration::from_secs(2)));
    }

    #[test]
    fn receiver_acks_cumulatively_with_sack() {
        let mut f = established();
        for v in [0, 1, 3, 4, 7] {
            let mut s = Segment::new(FlowId(0), Flags::VPKT.with(Flags::ACK));
            s.vseq = VirtualSeq(v);
            assert!(f.handle_segment(ms(20), &s));
        }
        let mut s = Segment::new(FlowId(0), Flags::ACK);
        f.take_ack(&mut s);
        assert_eq!(s.vack, VirtualSeq(2));
        assert_eq!(
            s.sack_blocks(),
            &[
                SackBlock {
                    start: VirtualSeq(7),
                    end: VirtualSeq(8)
                },
                SackBlock {
                    start: VirtualSeq(3),
                    end: VirtualSeq(5)
                },
            ]
        );
        let mut far = Segment::new(FlowId(0), Flags::VPKT);
        far.vseq = VirtualSeq(MAX_VIRTUAL_WINDOW + 5);
        assert!(!f.handle_segment(ms(20), &far));
    }

    #[test]
    fn window_grows_only_when_it_limited_the_flow() {
        let mut f = established();
        // Two packets, then FREEZE (the SM had nothing more): not window-limited.
        for _ in 0..2 {
            let tx = f.next_transmission(NOW).unwrap();
            f.on_sent(ms(10), tx, 1200);
        }
        f.freeze();
        f.handle_segment(ms(110), &ack(2, &[]));
        assert_eq!(f.window(), 12_000);
        // A full window, acknowledged: slow start grows it.
        f.resume();
        send_all(&mut f, ms(110));
        f.handle_segment(ms(210), &ack(12, &[]));
        assert_eq!(f.window(), 24_000);
    }

    #[test]
    fn a_bbr_flow_paces_with_a_small_burst_and_wakes_for_the_next_release() {
        let mut config = FlowConfig::default();
        config.congestion.algorithm = crate::CongestionAlgorithm::Bbr;
        let mut f = MicroFlow::connect(FlowId(0), PathId(0), config);
        f.start(ms(0));
        f.poll_control();
        f.handle_segment(
            ms(10),
            &Segment::new(FlowId(0), Flags::SYN_ACK.with(Flags::ACK)),
        );
        // Before an RTT sample the pacing rate is the initial window per millisecond (times
        // the Startup gain): the initial window goes out at once.
        let mut sent = 0;
        while let Some(tx) = f.next_transmission(ms(10)) {
            f.on_sent(ms(10), tx, 1200);
            sent += 1;
        }
        assert_eq!(sent, 10);
        assert_eq!(
            f.poll_timeout(),
            Some(ms(1010)),
            "window full: only the RTO"
        );
        // Half acknowledged after 100 ms: paced at the initial window per RTT times 2.885 now.
        f.handle_segment(ms(110), &ack(5, &[]));
        let rate = f.pacing_rate().unwrap();
        assert_eq!(rate, 342_738);
        let gap = Duration::from_nanos(1200 * 1_000_000_000 / rate);
        let mut now = ms(110);
        let mut burst = 0;
        while let Some(tx) = f.next_transmission(now) {
            f.on_sent(now, tx, 1200);
            burst += 1;
        }
        // One packet and the two-segment burst allowance, then one per gap.
        assert_eq!(burst, 1 + PACING_BURST_SEGMENTS);
        for _ in 0..3 {
            let release = f.poll_timeout().unwrap();
            assert!(release > now && release - now <= gap + Duration::from_nanos(1));
            let early = Instant::from_nanos(release.as_nanos() - 1);
            assert_eq!(f.next_transmission(early), None);
            let tx = f.next_transmission(release).unwrap();
            f.on_sent(release, tx, 1200);
            assert_eq!(f.next_transmission(release), None);
            now = release;
        }
        // FREEZE (no data): no pacing wake-up, only the RTO.
        f.freeze();
        assert_eq!(f.poll_timeout(), Some(ms(110) + f.rtt().rto()));
    }

    #[test]
    fn a_capped_flow_is_paced_at_its_cap_though_its_controller_does_not_pace() {
        let mut f = established();
        assert_eq!(f.pacing_rate(), None, "CUBIC does not pace");
        // 12,000 bytes/s: one 1,200-byte packet every 100 ms, longer than the quarter-RTT
        // bound on a pacing gap (50 ms at most), which must not shorten it.
        f.set_rate_cap(Some(12_000));
        assert_eq!(f.pacing_rate(), Some(12_000));
        let mut now = ms(1_000);
        while let Some(tx) = f.next_transmission(now) {
            f.on_sent(now, tx, 1200);
        }
        for _ in 0..3 {
            // The wake-up is the next release (not the RTO), one packet's time at the cap on.
            let release = f.poll_timeout().unwrap();
            assert!(release > now, "{release:?}");
            let tx = f.next_transmission(release).unwrap();
            f.on_sent(release, tx, 1200);
            assert_eq!(f.next_transmission(release), None);
            assert_eq!(
                f.poll_timeout().unwrap() - release,
                Duration::from_millis(100)
            );
            now = release;
        }
        // Lifted: unpaced again.
        f.set_rate_cap(None);
        assert_eq!(f.pacing_rate(), None);
        assert!(f.next_transmission(now).is_some());
    }

    #[test]
    fn acks_of_unsent_packets_are_ignored() {
        let mut f = established();
        f.handle_segment(ms(20), &ack(50, &[]));
        assert_eq!(f.stats().bad_acks, 1);
    }

    #[test]
    fn a_virtual_packet_completes_the_passive_open() {
        // The peer's data segments carry no acknowledgement when it has nothing new to
        // acknowledge; if its first ACK was lost, its data still proves it established.
        let mut f = MicroFlow::accept(FlowId(0), PathId(0), FlowConfig::default());
        f.start(ms(0));
        assert_eq!(f.poll_control(), Some(Flags::SYN_ACK.with(Flags::ACK)));
        assert!(f.handle_segment(ms(10), &Segment::new(FlowId(0), Flags::VPKT)));
        assert_eq!(f.poll_signal(), Some(Signal::Established));
        assert!(f.ack_pending());
    }

    #[test]
    fn truncated_numbers_expand_across_the_wrap() {
        let wrap = 1u64 << 32;
        let mut f = established();
        f.skip_virtual(wrap - 2);
        let sent = send_all(&mut f, ms(10));
        assert_eq!(sent.last().unwrap().vseq, VirtualSeq(wrap + 7));
        // An ACK of the peer's, as it comes off the wire: 32-bit numbers.
        let bytes = ack(wrap + 3, &[(wrap + 5, wrap + 7), (wrap - 1, wrap + 1)]).to_vec();
        let mut seg = Segment::parse_bytes(&bytes).unwrap();
        assert_eq!(seg.vack, VirtualSeq(3));
        f.expand_segment(&mut seg);
        assert_eq!(seg.vack, VirtualSeq(wrap + 3));
        assert_eq!(
            seg.sack_blocks(),
            &[
                SackBlock {
                    start: VirtualSeq(wrap + 5),
                    end: VirtualSeq(wrap + 7)
                },
                SackBlock {
                    start: VirtualSeq(wrap - 1),
                    end: VirtualSeq(wrap + 1)
                },
            ]
        );
        f.handle_segment(ms(110), &seg);
        assert_eq!(f.stats().bad_acks, 0);
        let acked = core::iter::from_fn(|| f.poll_signal())
            .filter(|s| matches!(s, Signal::Acked(_)))
            .count();
        assert_eq!(acked, 7);
        // A virtual packet just below the wrap, then one just past it.
        for v in [wrap - 2, wrap - 1, wrap, wrap + 1] {
            let mut d = Segment::new(FlowId(0), Flags::VPKT);
            d.vseq = VirtualSeq(v);
            let bytes = d.to_vec();
            let mut d = Segment::parse_bytes(&bytes).unwrap();
            f.expand_segment(&mut d);
            assert_eq!(d.vseq, VirtualSeq(v));
            assert!(f.handle_segment(ms(120), &d));
        }
        let mut s = Segment::new(FlowId(0), Flags::ACK);
        f.take_ack(&mut s);
        assert_eq!(s.vack, VirtualSeq(wrap + 2));
    }

    #[test]
    fn syn_retried_then_aborted() {
        let mut f = MicroFlow::connect(FlowId(1), PathId(1), FlowConfig::default());
        f.start(ms(0));
        let mut tries = 0;
        while let Some(t) = f.poll_timeout() {
            if f.poll_control().is_some() {
                tries += 1;
            }
            f.handle_timeout(t);
        }
        assert_eq!(f.poll_control(), None);
        assert!(tries >= 5);
        assert_eq!(f.state(), FlowState::Closed { aborted: true });
    }
}

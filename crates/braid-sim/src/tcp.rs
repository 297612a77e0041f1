//! A packet-level TCP for the simulator: a NewReno (RFC 6582) or SACK (RFC 6675, simplified)
//! sender and a receiver with optional delayed ACKs, in the form the BAG paper's ns-2 runs used
//! (section III-A: NewReno, a maximum window of 50 packets, 1500-byte packets, a max-burst of
//! four packets per ACK, no delayed ACKs).
//!
//! Segments are whole packets numbered 0, 1, 2, ... (the sender is a backlogged FTP: it always
//! has more). An ACK carries the next segment expected and up to three SACK blocks. Both halves
//! are sans-IO like the protocol cores: `on_*(now, ..)` in, `poll_*` out, and `now` must never
//! go backwards. They are models for experiments, not a TCP to ship. [`TcpConfig::linux`]
//! sets the model up like Linux's TCP with `reno` (`experiments::tcp_check` checks it against
//! the kernel in the lab).

use braid_proto::time::{Duration, Instant};
use std::collections::{BTreeSet, VecDeque};

/// Loss recovery of the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// NewReno: fast retransmit on the third duplicate ACK, window inflation, a retransmission
    /// per partial ACK (RFC 6582).
    NewReno,
    /// SACK: the scoreboard marks a segment lost once three segments above it are SACKed;
    /// lost segments are resent while the pipe is below the window (RFC 6675, without the
    /// rescue retransmission). As in Linux, a retransmission found lost (RACK's rule) is sent
    /// again, resending the oldest segment restarts the timer, and the scoreboard survives a
    /// timeout.
    Sack,
}

/// Sender settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Loss recovery.
    pub recovery: Recovery,
    /// Largest congestion window, packets (the paper's 50).
    pub max_cwnd: u32,
    /// Initial congestion window, packets.
    pub initial_cwnd: u32,
    /// Most packets sent in answer to one ACK (the paper's max-burst of 4).
    pub max_burst: u32,
    /// Duplicate ACKs that trigger fast retransmit.
    pub dupthresh: u32,
    /// Retransmission timeout before any RTT sample.
    pub initial_rto: Duration,
    /// Smallest variance term of the retransmission timeout: `RTO = SRTT + max(4 RTTVAR,
    /// min_rto)`, as Linux does.
    pub min_rto: Duration,
    /// Largest retransmission timeout (the backoff stops there).
    pub max_rto: Duration,
    /// Grow the window by the segments an ACK acknowledges rather than by one per ACK (RFC
    /// 3465's byte counting without its limit `L`, as Linux's `tcp_slow_start` and
    /// `tcp_cong_avoid_ai` do): with delayed ACKs, each ACK covering two segments, slow start
    /// still doubles the window every round trip. Off in the paper's sender (one ACK per
    /// segment, where the two agree).
    pub count_acked_segments: bool,
    /// SACK recovery sends by proportional rate reduction (RFC 6937, as Linux's
    /// `tcp_cwnd_reduction`) rather than by RFC 6675's `pipe < cwnd` with the window halved
    /// at once: about one segment for every two delivered until the pipe is down to
    /// ssthresh, so new data keeps flowing from the start of recovery.
    pub proportional_rate_reduction: bool,
    /// ssthresh is half the congestion window (Linux's `tcp_reno_ssthresh`) rather than half
    /// the flight size (RFC 5681). The flight counts SACKed segments and what was sent on
    /// them before recovery began, so it can exceed the window.
    pub ssthresh_from_cwnd: bool,
}

impl Default for TcpConfig {
    /// The paper's sender: NewReno, window 50, burst 4; dupthresh 3, initial window 2,
    /// RTO from 3 s (RFC 2988 era) with a floor of 200 ms, up to 64 s.
    fn default() -> Self {
        TcpConfig {
            recovery: Recovery::NewReno,
            max_cwnd: 50,
            initial_cwnd: 2,
            max_burst: 4,
            dupthresh: 3,
            initial_rto: Duration::from_secs(3),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(64),
            count_acked_segments: false,
            proportional_rate_reduction: false,
            ssthresh_from_cwnd: false,
        }
    }
}

/// The largest window of [`TcpConfig::linux`], packets: a bound, not a limit any of the lab's
/// paths reaches (their drop-tail queues overflow long before; Linux's receive-buffer
/// autotuning grows the advertised window to `tcp_rmem[2]`, 6-32 MiB, on demand).
pub const LINUX_MAX_CWND: u32 = 10_000;

impl TcpConfig {
    /// As close to Linux's TCP with `reno` congestion control as the model goes: SACK
    /// recovery, an initial window of 10 segments (RFC 6928), no max-burst, dupthresh 3, an
    /// initial RTO of 1 s (RFC 6298, `TCP_TIMEOUT_INIT`), a 200 ms floor (`TCP_RTO_MIN`),
    /// backoff up to 120 s (`TCP_RTO_MAX`), and windows that grow by the segments acknowledged.
    /// Recovery sends by PRR and finds lost retransmissions as RACK does; ssthresh is half the
    /// window. What it leaves out (RACK's time-based marking of first transmissions, tail loss
    /// probes, undo, pacing) is listed in `docs/sim.md`.
    pub fn linux() -> Self {
        TcpConfig {
            recovery: Recovery::Sack,
            max_cwnd: LINUX_MAX_CWND,
            initial_cwnd: 10,
            max_burst: u32::MAX,
            dupthresh: 3,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(120),
            count_acked_segments: true,
            proportional_rate_reduction: true,
            ssthresh_from_cwnd: true,
        }
    }
}

/// A cumulative ACK with SACK blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// The next segment the receiver expects (everything below has arrived).
    pub next: u64,
    /// Up to three blocks `[start, end)` received above `next`, most recent first.
    pub sack: [Option<(u64, u64)>; 3],
}

/// A segment the sender puts on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its number.
    pub seq: u64,
    /// Whether this number was sent before (a retransmission).
    pub retransmit: bool,
}

/// Sender counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments sent, retransmissions included.
    pub sent: u64,
    /// Retransmitted segments (fast, partial-ACK, SACK and after a timeout).
    pub retransmits: u64,
    /// Fast retransmits (entries into recovery).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Duplicate ACKs received.
    pub dup_acks: u64,
}

/// The TCP sender of a backlogged transfer.
///
/// # Polling
/// After [`on_ack`](Self::on_ack) or [`on_timeout`](Self::on_timeout), call
/// [`poll_transmit`](Self::poll_transmit) until `None`; call `on_timeout` at
/// [`poll_timeout`](Self::poll_timeout).
#[derive(Clone, Debug)]
pub struct TcpSender {
    config: TcpConfig,
    snd_una: u64,
    snd_nxt: u64,
    snd_max: u64,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    in_recovery: bool,
    /// Recovery ends when this is acknowledged (exclusive bound).
    recover: u64,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    deadline: Option<Instant>,
    /// Per segment in `[snd_una, snd_max)`: when last sent, and whether it was resent.
    sent_at: VecDeque<(Instant, bool)>,
    sacked: BTreeSet<u64>,
    resent_in_recovery: BTreeSet<u64>,
    pending_retransmit: VecDeque<u64>,
    /// SACK: the latest send time of a segment known delivered (RACK's `xmit_ts`).
    rack_xmit: Option<Instant>,
    /// Smallest RTT sample (RACK's reordering window is a quarter of it).
    min_rtt: Option<Duration>,
    /// PRR: segments delivered and sent since recovery began, and the window before it.
    prr_delivered: u64,
    prr_out: u64,
    prior_cwnd: f64,
    burst_left: u32,
    stats: TcpStats,
}

impl TcpSender {
    /// A sender at segment 0.
    pub fn new(config: TcpConfig) -> Self {
        TcpSender {
            config,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            cwnd: f64::from(config.initial_cwnd.max(1)),
            ssthresh: f64::from(config.max_cwnd),
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: config.initial_rto,
            deadline: None,
            sent_at: VecDeque::new(),
            sacked: BTreeSet::new(),
            resent_in_recovery: BTreeSet::new(),
            pending_retransmit: VecDeque::new(),
            rack_xmit: None,
            min_rtt: None,
            prr_delivered: 0,
            prr_out: 0,
            prior_cwnd: 0.0,
            burst_left: config.initial_cwnd.max(1),
            stats: TcpStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    /// The congestion window, packets.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// An RTT measured before the first segment (the SYN and SYN-ACK exchange, as Linux takes
    /// it), so the first RTO follows the path rather than `initial_rto`.
    pub fn on_handshake_rtt(&mut self, rtt: Duration) {
        self.rtt_sample(rtt);
    }

    /// The slow-start threshold, packets.
    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }

    /// The oldest unacknowledged segment.
    pub fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Segments in flight by the RFC 6675 pipe: not SACKed and not deemed lost, plus those
    /// resent during this recovery.
    fn pipe(&self) -> u64 {
        (self.snd_una..self.snd_nxt.max(self.snd_una))
            .filter(|s| !self.sacked.contains(s))
            .map(|s| u64::from(!self.is_lost(s)) + u64::from(self.resent_in_recovery.contains(&s)))
            .sum()
    }

    /// RFC 6675 `IsLost`: at least `dupthresh` SACKed segments above `seq`.
    fn is_lost(&self, seq: u64) -> bool {
        self.sacked.range(seq + 1..).count() >= self.config.dupthresh as usize
    }

    fn flight(&self) -> u64 {
        self.snd_max - self.snd_una
    }

    fn arm(&mut self, now: Instant) {
        self.deadline = (self.snd_una < self.snd_max).then(|| now + self.rto);
    }

    fn rtt_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        // RFC 6298.
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + rtt) / 8);
            }
        }
        // Linux's floor: the variance term is at least `min_rto`, so a steady RTT (a queue
        // that never drains) does not leave the timer at the RTT itself.
        let s = self.srtt.unwrap_or(rtt);
        self.rto = (s + (self.rttvar * 4).max(self.config.min_rto)).min(self.config.max_rto);
    }

    /// The ssthresh after a loss: half the window or half the flight, at least two segments.
    fn halved(&self) -> f64 {
        let half = if self.config.ssthresh_from_cwnd {
            // Linux counts the window in whole segments: `max(cwnd >> 1, 2)`.
            (self.cwnd.floor() / 2.0).floor()
        } else {
            self.flight() as f64 / 2.0
        };
        half.max(2.0)
    }

    fn enter_recovery(&mut self) {
        self.stats.fast_retransmits += 1;
        self.ssthresh = self.halved();
        self.in_recovery = true;
        self.recover = self.snd_max;
        self.resent_in_recovery.clear();
        match self.config.recovery {
            Recovery::NewReno => {
                self.cwnd = self.ssthresh + f64::from(self.config.dupthresh);
                self.pending_retransmit.push_back(self.snd_una);
            }
            Recovery::Sack => {
                self.prior_cwnd = self.cwnd;
                self.prr_delivered = 0;
                self.prr_out = 0;
                self.cwnd = self.ssthresh;
                // The first hole goes at once, whatever the scoreboard says.
                self.pending_retransmit.push_back(self.snd_una);
            }
        }
    }

    /// RFC 6937 as Linux's `tcp_cwnd_reduction` has it: while the pipe is above ssthresh, send
    /// `ceil(prr_delivered x ssthresh / prior_cwnd) - prr_out`; below it, grow back towards
    /// ssthresh by what was delivered (slow-start reduction bound); at least the fast
    /// retransmission. The window becomes the pipe plus that.
    fn prr_reduce(&mut self, delivered: u64, una_advanced: bool) {
        let pipe = self.pipe() as f64;
        let prr_out = self.prr_out as f64;
        let mut sndcnt = if pipe > self.ssthresh {
            (self.prr_delivered as f64 * self.ssthresh / self.prior_cwnd.max(1.0)).ceil() - prr_out
        } else {
            let limit = if una_advanced {
                (self.prr_delivered as f64 - prr_out).max(delivered as f64)
            } else {
                delivered as f64
            };
            limit.min(self.ssthresh - pipe)
        };
        if self.prr_out == 0 {
            sndcnt = sndcnt.max(1.0);
        }
        self.cwnd = pipe + sndcnt.max(0.0);
    }

    /// RACK's rule for retransmissions (RFC 8985, section 6.2, as Linux applies it): a
    /// retransmission that is still not acknowledged although a segment sent more than a
    /// reordering window (a quarter of the smallest RTT) after it has been delivered was lost
    /// too; it leaves the set of segments resent in this recovery, so the scoreboard resends
    /// it instead of waiting for the retransmission timer.
    fn detect_lost_retransmissions(&mut self) {
        let (Some(rack), true) = (self.rack_xmit, self.in_recovery) else {
            return;
        };
        let reo_wnd = self.min_rtt.unwrap_or(Duration::ZERO) / 4;
        let una = self.snd_una;
        let sent_at = &self.sent_at;
        let sacked = &self.sacked;
        self.resent_in_recovery.retain(|&s| {
            sacked.contains(&s)
                || sent_at
                    .get((s - una) as usize)
                    .is_none_or(|&(t, _)| t + reo_wnd >= rack)
        });
    }

    /// An ACK arrived.
    pub fn on_ack(&mut self, now: Instant, ack: Ack) {
        self.burst_left = self.config.max_burst;
        // Segments this ACK reports delivered for the first time (PRR's DeliveredData).
        let mut delivered = 0u64;
        let una_advanced = ack.next > self.snd_una && ack.next <= self.snd_max;
        if self.config.recovery == Recovery::Sack {
            let mut delivered_sent: Option<Instant> = None;
            let mut note = |at: Option<&(Instant, bool)>| {
                if let Some(&(t, _)) = at {
                    delivered_sent = Some(delivered_sent.map_or(t, |d| d.max(t)));
                }
            };
            for (a, b) in ack.sack.iter().flatten().copied() {
                for s in a.max(ack.next).max(self.snd_una)..b.min(self.snd_max) {
                    if self.sacked.insert(s) {
                        delivered += 1;
                        note(self.sent_at.get((s - self.snd_una) as usize));
                    }
                }
            }
            if una_advanced {
                let was_sacked = self.sacked.range(..ack.next).count() as u64;
                delivered += ack.next - self.snd_una - was_sacked;
                note(self.sent_at.get((ack.next - 1 - self.snd_una) as usize));
            }
            if let Some(t) = delivered_sent {
                self.rack_xmit = Some(self.rack_xmit.map_or(t, |r| r.max(t)));
            }
            self.detect_lost_retransmissions();
        }
        if ack.next > self.snd_una && ack.next <= self.snd_max {
            let acked = ack.next - self.snd_una;
            // Karn: no sample from a segment that was resent.
            if let Some(&(sent, resent)) = self.sent_at.get((acked - 1) as usize) {
                if !resent {
                    self.rtt_sample(now.saturating_duration_since(sent));
                }
            }
            for _ in 0..acked {
                self.sent_at.pop_front();
            }
            self.snd_una = ack.next;
            self.snd_nxt = self.snd_nxt.max(self.snd_una);
            let una = self.snd_una;
            self.sacked = self.sacked.split_off(&una);
            self.resent_in_recovery = self.resent_in_recovery.split_off(&una);
            self.pending_retransmit.retain(|&s| s >= una);
            if self.in_recovery {
                if ack.next >= self.recover {
                    self.in_recovery = false;
                    self.dupacks = 0;
                    self.cwnd = self.ssthresh;
                } else if self.config.recovery == Recovery::NewReno {
                    // Partial ACK: resend the next hole, deflate by what was acknowledged.
                    self.pending_retransmit.push_back(self.snd_una);
                    self.cwnd = (self.cwnd - acked as f64 + 1.0).max(1.0);
                }
            } else {
                self.dupacks = 0;
                if !self.config.count_acked_segments {
                    if self.cwnd < self.ssthresh {
                        self.cwnd += 1.0;
                    } else {
                        self.cwnd += 1.0 / self.cwnd;
                    }
                } else {
                    // Linux: slow start up to ssthresh, the rest of the ACK in congestion
                    // avoidance (one segment per window acknowledged).
                    let mut segments = acked as f64;
                    if self.cwnd < self.ssthresh {
                        let grown = (self.cwnd + segments).min(self.ssthresh);
                        segments -= grown - self.cwnd;
                        self.cwnd = grown;
                    }
                    self.cwnd += segments / self.cwnd;
                }
            }
            self.cwnd = self.cwnd.min(f64::from(self.config.max_cwnd));
            self.arm(now);
        } else if ack.next == self.snd_una && self.snd_max > self.snd_una {
            self.stats.dup_acks += 1;
            if self.in_recovery {
                if self.config.recovery == Recovery::NewReno {
                    self.cwnd += 1.0;
                }
            } else {
                self.dupacks += 1;
                // After a timeout, duplicates of what was sent before it do not count
                // (RFC 6582's `recover` check). With SACK, the scoreboard may show the loss
                // before the third duplicate.
                let third = self.dupacks == self.config.dupthresh;
                let sack_lost = self.config.recovery == Recovery::Sack
                    && self.dupacks < self.config.dupthresh
                    && self.is_lost(self.snd_una);
                if (third || sack_lost) && self.snd_una >= self.recover {
                    self.enter_recovery();
                }
            }
        }
        if self.in_recovery
            && self.config.recovery == Recovery::Sack
            && self.config.proportional_rate_reduction
        {
            self.prr_delivered += delivered;
            self.prr_reduce(delivered, una_advanced);
        }
    }

    /// The next segment to send now, if the window and the burst limit allow one.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Segment> {
        if let Some(seq) = self.pending_retransmit.pop_front() {
            if self.in_recovery {
                self.resent_in_recovery.insert(seq);
            }
            return Some(self.emit(now, seq));
        }
        if self.burst_left == 0 {
            return None;
        }
        let window_open = match (self.config.recovery, self.in_recovery) {
            (Recovery::Sack, true) => (self.pipe() as f64) < self.cwnd,
            // SACKed segments below `snd_nxt` have left the network: before recovery each SACK
            // lets a new segment out (as Linux's `tcp_packets_in_flight`), and after a timeout
            // they are not resent.
            (Recovery::Sack, false) => {
                let sacked = self.sacked.range(..self.snd_nxt).count() as u64;
                ((self.snd_nxt - self.snd_una - sacked) as f64) < self.cwnd
            }
            _ => ((self.snd_nxt - self.snd_una) as f64) < self.cwnd,
        };
        if !window_open {
            return None;
        }
        if self.config.recovery == Recovery::Sack && self.in_recovery {
            let hole = (self.snd_una..self.snd_max).find(|s| {
                !self.sacked.contains(s) && !self.resent_in_recovery.contains(s) && self.is_lost(*s)
            });
            if let Some(seq) = hole {
                self.resent_in_recovery.insert(seq);
                self.burst_left -= 1;
                return Some(self.emit(now, seq));
            }
        }
        // Going back over what a timeout left unacknowledged, skip what was SACKed.
        while self.snd_nxt < self.snd_max && self.sacked.contains(&self.snd_nxt) {
            self.snd_nxt += 1;
        }
        let seq = self.snd_nxt;
        self.snd_nxt += 1;
        self.burst_left -= 1;
        Some(self.emit(now, seq))
    }

    fn emit(&mut self, now: Instant, seq: u64) -> Segment {
        let retransmit = seq < self.snd_max;
        self.stats.sent += 1;
        if self.in_recovery {
            self.prr_out += 1;
        }
        if retransmit {
            self.stats.retransmits += 1;
            // With SACK, as Linux's `tcp_xmit_retransmit_queue`: resending the oldest
            // segment restarts the retransmission timer, so a lost retransmission found by
            // the scoreboard is not overtaken by the timer that was running for the original.
            if seq == self.snd_una && self.config.recovery == Recovery::Sack {
                self.arm(now);
            }
            if let Some(e) = self.sent_at.get_mut((seq - self.snd_una) as usize) {
                *e = (now, true);
            }
        } else {
            self.snd_max = seq + 1;
            self.sent_at.push_back((now, false));
        }
        if self.deadline.is_none() {
            self.arm(now);
        }
        Segment { seq, retransmit }
    }

    /// When the retransmission timer fires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The retransmission timer, if due: back off, collapse the window, go back to the oldest
    /// unacknowledged segment.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.deadline.is_none_or(|d| now < d) {
            return;
        }
        self.stats.timeouts += 1;
        let sack = self.config.recovery == Recovery::Sack;
        // With SACK, as Linux's `tcp_enter_loss`: a timeout in fast recovery keeps the
        // ssthresh recovery set (the window was already halved for this loss), and the
        // scoreboard survives (RFC 6675 section 5.1), so only the holes are resent.
        if !(sack && self.in_recovery) {
            self.ssthresh = self.halved();
        }
        self.cwnd = 1.0;
        self.snd_nxt = self.snd_una;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.snd_max;
        if !sack {
            self.sacked.clear();
        }
        self.resent_in_recovery.clear();
        self.pending_retransmit.clear();
        self.rto = (self.rto * 2).min(self.config.max_rto);
        self.burst_left = 1;
        self.deadline = Some(now + self.rto);
    }
}

/// Receiver counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpReceiverStats {
    /// Segments delivered in order to the application.
    pub delivered: u64,
    /// Duplicate ACKs sent (for a segment that did not advance the cumulative ACK).
    pub dup_acks: u64,
    /// Segments that had arrived before, or fell below what was delivered.
    pub duplicates: u64,
}

/// The TCP receiver.
///
/// # Polling
/// [`on_segment`](Self::on_segment) for each arrival, then [`poll_ack`](Self::poll_ack) until
/// `None`; with delayed ACKs, `on_timeout` at [`poll_timeout`](Self::poll_timeout).
#[derive(Clone, Debug)]
pub struct TcpReceiver {
    rcv_nxt: u64,
    ooo: BTreeSet<u64>,
    /// Delayed ACKs: ACK every second in-order segment, or after this long.
    delayed_ack: Option<Duration>,
    /// Segments still to be acknowledged at once before delayed ACKs start.
    quick_acks: u32,
    unacked: u32,
    deadline: Option<Instant>,
    last: u64,
    acks: VecDeque<Ack>,
    stats: TcpReceiverStats,
}

/// The most out-of-order segments the receiver keeps (a bounded reassembly queue).
pub const MAX_OUT_OF_ORDER: usize = 4096;

impl TcpReceiver {
    /// A receiver expecting segment 0; `delayed_ack` as described on the type.
    pub fn new(delayed_ack: Option<Duration>) -> Self {
        TcpReceiver {
            rcv_nxt: 0,
            ooo: BTreeSet::new(),
            delayed_ack,
            quick_acks: 0,
            unacked: 0,
            deadline: None,
            last: 0,
            acks: VecDeque::new(),
            stats: TcpReceiverStats::default(),
        }
    }

    /// Acknowledge the next `n` in-order segments at once even with delayed ACKs: Linux's
    /// quick-ACK mode at the start of a connection (`tcp_incr_quickack`, at most
    /// `TCP_MAX_QUICKACKS` = 16), so the sender's slow start is not held back by the timer.
    pub fn set_quick_acks(&mut self, n: u32) {
        self.quick_acks = n;
    }

    /// Counters.
    pub fn stats(&self) -> &TcpReceiverStats {
        &self.stats
    }

    /// The next segment expected.
    pub fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// Segment `seq` arrived; returns how many segments it delivered in order.
    pub fn on_segment(&mut self, now: Instant, seq: u64) -> u64 {
        self.last = seq;
        if seq < self.rcv_nxt || self.ooo.contains(&seq) {
            self.stats.duplicates += 1;
            self.stats.dup_acks += 1;
            self.push_ack();
            return 0;
        }
        if seq > self.rcv_nxt {
            if self.ooo.len() < MAX_OUT_OF_ORDER {
                self.ooo.insert(seq);
            }
            self.stats.dup_acks += 1;
            self.push_ack();
            return 0;
        }
        let had_gap = !self.ooo.is_empty();
        self.rcv_nxt += 1;
        while self.ooo.remove(&self.rcv_nxt) {
            self.rcv_nxt += 1;
        }
        let delivered = self.rcv_nxt - seq;
        self.stats.delivered += delivered;
        if self.quick_acks > 0 && self.delayed_ack.is_some() {
            self.quick_acks -= 1;
            self.push_ack();
            return delivered;
        }
        match self.delayed_ack {
            Some(d) if !had_gap => {
                self.unacked += 1;
                if self.unacked >= 2 {
                    self.push_ack();
                } else if self.deadline.is_none() {
                    self.deadline = Some(now + d);
                }
            }
            _ => self.push_ack(),
        }
        delivered
    }

    fn push_ack(&mut self) {
        self.unacked = 0;
        self.deadline = None;
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for &s in &self.ooo {
            match blocks.last_mut() {
                Some((_, end)) if *end == s => *end += 1,
                _ => blocks.push((s, s + 1)),
            }
        }
        // The block with the latest arrival first, then the highest others.
        let recent = blocks
            .iter()
            .position(|&(a, b)| a <= self.last && self.last < b);
        let mut sack = [None; 3];
        let mut k = 0;
        if let Some(i) = recent {
            sack[0] = Some(blocks[i]);
            k = 1;
        }
        for (i, b) in blocks.iter().enumerate().rev() {
            if k == 3 {
                break;
            }
            if Some(i) != recent {
                sack[k] = Some(*b);
                k += 1;
            }
        }
        self.acks.push_back(Ack {
            next: self.rcv_nxt,
            sack,
        });
    }

    /// The next ACK to send.
    pub fn poll_ack(&mut self) -> Option<Ack> {
        self.acks.pop_front()
    }

    /// When a delayed ACK is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The delayed-ACK timer.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            self.push_ack();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// One sender and one receiver over a fixed-delay, fixed-rate link that drops the
    /// segments `drop` names (first transmissions only) and optionally swaps neighbours.
    fn transfer(config: TcpConfig, drop: &[u64], until_ms: u64) -> (TcpStats, TcpReceiverStats) {
        transfer_until(config, drop, until_ms, u64::MAX)
    }

    /// As `transfer`, stopping early once `delivered` segments have arrived in order.
    fn transfer_until(
        config: TcpConfig,
        drop: &[u64],
        until_ms: u64,
        delivered: u64,
    ) -> (TcpStats, TcpReceiverStats) {
        transfer_dropping(config, drop, &[], until_ms, delivered)
    }

    /// As `transfer_until`, also dropping the first retransmission of the segments in
    /// `drop_resent`.
    fn transfer_dropping(
        config: TcpConfig,
        drop: &[u64],
        drop_resent: &[u64],
        until_ms: u64,
        delivered: u64,
    ) -> (TcpStats, TcpReceiverStats) {
        let mut resent_dropped: Vec<u64> = Vec::new();
        let mut tx = TcpSender::new(config);
        let mut rx = TcpReceiver::new(None);
        let mut events: BinaryHeap<Reverse<(Instant, u8, u64, u64)>> = BinaryHeap::new();
        let one_way = Duration::from_millis(50);
        let air = Duration::from_millis(10);
        let mut link_free = Instant::ZERO;
        let mut n = 0u64;
        let mut now = Instant::ZERO;
        let end = Instant::ZERO + Duration::from_millis(until_ms);
        let mut acks: Vec<Ack> = Vec::new();
        loop {
            while let Some(s) = tx.poll_transmit(now) {
                let start = link_free.max(now);
                link_free = start + air;
                let drop_this = if s.retransmit {
                    let first = drop_resent.contains(&s.seq) && !resent_dropped.contains(&s.seq);
                    if first {
                        resent_dropped.push(s.seq);
                    }
                    first
                } else {
                    drop.contains(&s.seq)
                };
                if !drop_this {
                    n += 1;
                    events.push(Reverse((link_free + one_way, 0, n, s.seq)));
                }
            }
            if let Some(t) = tx.poll_timeout() {
                events.push(Reverse((t, 2, 0, 0)));
            }
            let Some(Reverse((t, kind, _, seq))) = events.pop() else {
                break;
            };
            if t > end || rx.stats().delivered >= delivered {
                break;
            }
            now = t;
            match kind {
                0 => {
                    rx.on_segment(now, seq);
                    while let Some(a) = rx.poll_ack() {
                        n += 1;
                        acks.push(a);
                        events.push(Reverse((now + one_way, 1, n, acks.len() as u64 - 1)));
                    }
                }
                1 => tx.on_ack(now, acks[seq as usize]),
                _ => tx.on_timeout(now),
            }
        }
        (tx.stats().clone(), rx.stats().clone())
    }

    #[test]
    fn a_clean_transfer_fills_the_link() {
        let (tx, rx) = transfer(TcpConfig::default(), &[], 10_000);
        assert_eq!(tx.retransmits, 0);
        // 100 segments per second once the window covers the 110 ms pipe.
        assert!(rx.delivered > 900, "{rx:?}");
    }

    #[test]
    fn one_loss_is_one_fast_retransmit() {
        for recovery in [Recovery::NewReno, Recovery::Sack] {
            let config = TcpConfig {
                recovery,
                ..TcpConfig::default()
            };
            let (tx, rx) = transfer(config, &[100], 10_000);
            assert_eq!(tx.fast_retransmits, 1, "{recovery:?}");
            assert_eq!(tx.retransmits, 1, "{recovery:?}");
            assert_eq!(tx.timeouts, 0, "{recovery:?}");
            assert!(
                tx.dup_acks >= 3 && rx.delivered > 850,
                "{recovery:?} {tx:?}"
            );
        }
    }

    #[test]
    fn several_losses_in_a_window_recover_without_a_timeout() {
        for recovery in [Recovery::NewReno, Recovery::Sack] {
            let config = TcpConfig {
                recovery,
                ..TcpConfig::default()
            };
            let (tx, _) = transfer(config, &[200, 203, 207], 10_000);
            assert_eq!(tx.fast_retransmits, 1, "{recovery:?} {tx:?}");
            assert_eq!(tx.retransmits, 3, "{recovery:?} {tx:?}");
            assert_eq!(tx.timeouts, 0, "{recovery:?} {tx:?}");
        }
    }

    /// With SACK a lost retransmission is found as RACK finds it (segments sent after it
    /// are SACKed) and resent in the same recovery; NewReno can only wait for the timer.
    #[test]
    fn sack_resends_a_lost_retransmission_without_a_timeout() {
        let sack = TcpConfig {
            recovery: Recovery::Sack,
            proportional_rate_reduction: true,
            ..TcpConfig::default()
        };
        let (tx, rx) = transfer_dropping(sack, &[200], &[200], 10_000, u64::MAX);
        assert_eq!(tx.timeouts, 0, "{tx:?}");
        assert_eq!(tx.fast_retransmits, 1, "{tx:?}");
        assert_eq!(tx.retransmits, 2, "{tx:?}");
        assert!(rx.delivered > 850, "{rx:?}");
        let (tx, _) = transfer_dropping(TcpConfig::default(), &[200], &[200], 10_000, u64::MAX);
        assert_eq!(tx.timeouts, 1, "{tx:?}");
    }

    /// SACKed segments free room in the window before recovery starts, so by the third
    /// duplicate the flight exceeds the window; Linux halves the window, RFC 5681 the flight.
    #[test]
    fn linux_halves_the_window_not_the_flight() {
        for (from_cwnd, expected) in [(true, 5.0), (false, 6.0)] {
            let config = TcpConfig {
                ssthresh_from_cwnd: from_cwnd,
                ..TcpConfig::linux()
            };
            let mut tx = TcpSender::new(config);
            let t = Instant::ZERO;
            let first: Vec<u64> =
                std::iter::from_fn(|| tx.poll_transmit(t).map(|s| s.seq)).collect();
            assert_eq!(first, (0..10).collect::<Vec<_>>());
            // Segment 0 is lost; 1, 2, 3 arrive and are SACKed one ACK at a time.
            for k in 1..=3 {
                tx.on_ack(
                    t,
                    Ack {
                        next: 0,
                        sack: [Some((1, k + 1)), None, None],
                    },
                );
                while tx.poll_transmit(t).is_some() {}
            }
            assert_eq!(tx.stats().fast_retransmits, 1);
            assert_eq!(tx.ssthresh(), expected, "from cwnd: {from_cwnd}");
        }
    }

    #[test]
    fn a_lost_retransmission_costs_a_timeout_with_backoff() {
        let mut tx = TcpSender::new(TcpConfig::default());
        let t0 = Instant::ZERO;
        assert_eq!(tx.poll_transmit(t0).map(|s| s.seq), Some(0));
        assert_eq!(tx.poll_transmit(t0).map(|s| s.seq), Some(1));
        assert_eq!(tx.poll_transmit(t0), None);
        let first = tx.poll_timeout().unwrap();
        assert_eq!(first, t0 + Duration::from_secs(3));
        tx.on_timeout(first);
        assert_eq!(
            tx.poll_transmit(first),
            Some(Segment {
                seq: 0,
                retransmit: true
            })
        );
        assert_eq!(tx.poll_timeout(), Some(first + Duration::from_secs(6)));
        assert_eq!(tx.stats().timeouts, 1);
        assert_eq!(tx.cwnd(), 1.0);
    }

    #[test]
    fn delayed_acks_ack_every_second_segment_or_on_the_timer() {
        let mut rx = TcpReceiver::new(Some(Duration::from_millis(100)));
        let t = Instant::ZERO;
        rx.on_segment(t, 0);
        assert_eq!(rx.poll_ack(), None);
        assert_eq!(rx.poll_timeout(), Some(t + Duration::from_millis(100)));
        rx.on_segment(t, 1);
        assert_eq!(rx.poll_ack().map(|a| a.next), Some(2));
        rx.on_segment(t, 2);
        rx.on_timeout(t + Duration::from_millis(100));
        assert_eq!(rx.poll_ack().map(|a| a.next), Some(3));
        // Out of order: at once, with a SACK block.
        rx.on_segment(t, 5);
        assert_eq!(
            rx.poll_ack(),
            Some(Ack {
                next: 3,
                sack: [Some((5, 6)), None, None]
            })
        );
        assert_eq!(rx.stats().dup_acks, 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever is lost (first transmissions only), the transfer gets past it: every
        /// dropped segment is resent and the receiver keeps delivering.
        #[test]
        fn any_loss_pattern_is_recovered(
            drop in proptest::collection::btree_set(0u64..300, 0..30),
            sack in any::<bool>(),
        ) {
            let drop: Vec<u64> = drop.into_iter().collect();
            let config = TcpConfig {
                recovery: if sack { Recovery::Sack } else { Recovery::NewReno },
                ..TcpConfig::default()
            };
            // Long enough for a few backed-off timeouts (3 + 6 + 12 + 24 s) when the early
            // losses take out the window: the model is judged on recovering, not on speed.
            let (tx, rx) = transfer_until(config, &drop, 200_000, 301);
            prop_assert!(rx.delivered > 300, "{:?} {:?}", tx, rx);
            prop_assert!(tx.retransmits >= drop.len() as u64);
        }
    }
}

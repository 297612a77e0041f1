//! BBR v1 (draft-cardwell-iccrg-bbr-congestion-control-00, as Linux's `tcp_bbr.c`), in bytes.
//!
//! A model-based controller: it estimates the bottleneck bandwidth `BtlBw` (the windowed maximum
//! of delivery-rate samples over [`BTLBW_FILTER_ROUNDS`] round trips, section 4.1.1) and the
//! round-trip propagation time `RTprop` (the windowed minimum RTT over [`RTPROP_FILTER`],
//! section 4.1.2), paces at `pacing_gain x BtlBw` and bounds the data in flight with
//! `cwnd = cwnd_gain x BtlBw x RTprop` plus a quanta allowance (section 4.2). Random loss does
//! not lower either estimate: a loss only costs the packets lost and one round of packet
//! conservation (section 4.2.3.4), so a micro-flow on a lossy path keeps its rate where a
//! loss-based controller halves its window on every loss.
//!
//! The state machine of section 4.3: [`BbrState::Startup`] (gain `2/ln 2` for pacing and
//! window, until three rounds in a row grow `BtlBw` by less than 25%), [`BbrState::Drain`]
//! (pacing gain `ln 2 / 2` until the queue Startup built is gone), [`BbrState::ProbeBw`]
//! (pacing gains cycling `1.25, 0.75, 1 x 6`, one phase per `RTprop`, starting at a phase
//! drawn from the flow's seed rather than from an OS random source, so runs are reproducible)
//! and [`BbrState::ProbeRtt`] (a window of half a BDP, [`PROBE_RTT_CWND_GAIN`], for at least
//! [`PROBE_RTT_DURATION`] and one round when `RTprop` was not refreshed for
//! [`RTPROP_FILTER`]).
//!
//! One departure from v1: ProbeRTT keeps half a BDP in flight, as BBR v2 and v3 do
//! (draft-cardwell-iccrg-bbr-congestion-control-02, section 4.6.4.4, `BBRProbeRTTCwndGain`),
//! not v1's four segments. Half a BDP empties the bottleneck queue just as well, so `RTprop`
//! is measured the same, and the flow keeps half its rate for those 200 ms instead of almost
//! none: on the lab's two paths v1's ProbeRTT cost pTCP about 1% of its goodput.
//!
//! A second departure, also from BBR v2/v3 (draft-02, sections 4.5.10 and 4.6.3.3): a bound on
//! the data in flight learnt from loss, `inflight_hi`. BBR v1 ignores loss, so on a path whose
//! drop-tail buffer is smaller than the bandwidth-delay product its window of two BDPs keeps
//! the buffer overflowing (the lab's `bag.toml`: 6% and 14% of the two slow paths' packets
//! dropped, each drop a head-of-line wait for the connection's one receive buffer).
//!
//! - A loss round (its own round marker, v3's `loss_round_delivered`) that loses more than
//!   [`LOSS_THRESH`] of what it carried, and more than [`RANDOM_LOSS_MULTIPLE`] times the loss
//!   rate of the rounds that do not probe (a departure from v2: random loss of 2-3% is not a
//!   full queue), had too much in flight: `inflight_hi` becomes [`BETA`] times what the path
//!   held in that round (the bytes it delivered, v2's `inflight_latest`, at most the round's
//!   largest data in flight).
//! - Only rounds that can tell count: in Startup a round with [`FULL_LOSS_COUNT`] loss events,
//!   which also ends Startup (v3's `BBRCheckStartupHighLoss`); in ProbeBW the rounds of a
//!   gain-1.25 probe and the [`PROBE_LOSS_ROUNDS`] after it (v2 lowers `inflight_hi` on its
//!   probes' losses); never a round with application-limited samples. Random loss puts one
//!   lost packet in a round of a few dozen, which is over 2%: a first version without these
//!   gates held a 20 Mbit/s 200 ms path with 1% loss at 0.28-0.41 of its rate.
//! - The window stays below the bound, which is never less than [`BOUND_FLOOR_GAIN`] BDPs (and
//!   three quanta) of the current estimates, so it follows a `BtlBw` that grows. (At one BDP,
//!   random loss of 2-3% cost up to 35% against v1 on paths of 500 kB and more: lost packets
//!   not yet detected take part of the window, samples fall, and the floor with them.)
//! - Each gain-1.25 phase that reaches the bound without a lossy round raises it, by one
//!   segment and then twice as much each time (v2's `BBRProbeInflightHiUpward`, one step per
//!   probe rather than per acknowledgement).
//!
//! Not implemented: Linux's long-term bandwidth sampling (policer detection), its ACK
//! aggregation allowance and the restart-from-idle pacing adjustment.

use std::collections::VecDeque;

use braid_proto::time::{Duration, Instant};

use super::{CongestionConfig, CongestionControl, RateSample};
use crate::rtt::RttEstimator;

/// `BBRHighGain`, `2/ln 2`: Startup's pacing and window gain, the smallest that doubles the
/// sending rate every round (section 4.3.2.1; `bbr_high_gain` is 2885/1000).
pub const HIGH_GAIN: f64 = 2.885;
/// `BBRGainCycleLen` pacing gains of ProbeBW (section 4.3.4.3).
pub const PACING_GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// The window gain outside Startup and Drain (section 4.3.4.2).
pub const CWND_GAIN: f64 = 2.0;
/// `BtlBwFilterLen`: the bandwidth filter's window, in round trips.
pub const BTLBW_FILTER_ROUNDS: u64 = 10;
/// `RTpropFilterLen`.
pub const RTPROP_FILTER: Duration = Duration::from_secs(10);
/// `ProbeRTTDuration`.
pub const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// `BBRMinPipeCwnd`, in segments.
pub const MIN_PIPE_CWND_SEGMENTS: u64 = 4;
/// `BBRProbeRTTCwndGain` of BBR v2/v3: ProbeRTT's window, in BDPs (at least
/// [`MIN_PIPE_CWND_SEGMENTS`]).
pub const PROBE_RTT_CWND_GAIN: f64 = 0.5;
/// Startup ends when `BtlBw` grew by less than this factor ...
const FULL_BW_THRESH: f64 = 1.25;
/// ... this many rounds in a row (section 4.3.2.2).
const FULL_BW_COUNT: u32 = 3;
/// `BBRLossThresh` (BBR v2/v3): a round that loses more than this fraction of the data it
/// delivered and lost had too much in flight.
pub const LOSS_THRESH: f64 = 0.02;
/// The share of what the path held in a lossy round (its delivered bytes, at most its largest
/// data in flight) that `inflight_hi` keeps: v2's `BBRBeta` (0.7) is applied to a window v2
/// then cruises 15% below (`BBRHeadroom`); this one cruises at the bound itself.
pub const BETA: f64 = 0.85;
/// `BBRFullLossCnt` (v3): loss events a round of Startup needs, beside [`LOSS_THRESH`], to end
/// Startup.
pub const FULL_LOSS_COUNT: u32 = 6;
/// Loss rounds after a ProbeBW gain-1.25 phase whose losses still lower `inflight_hi`: the
/// probe's own round, and the next, in which the losses of its last packets are found.
pub const PROBE_LOSS_ROUNDS: u32 = 2;
/// A round has too much in flight only if it also loses more than this many times the loss
/// rate of the rounds that do not probe (a departure from v2, whose fixed 2% mistakes random
/// loss of 2% or more for a full queue).
pub const RANDOM_LOSS_MULTIPLE: f64 = 2.0;
/// The bound from loss is never below this many BDPs (and three send quanta).
pub const BOUND_FLOOR_GAIN: f64 = 1.25;
/// The weight of a round in the loss rate of the rounds that do not probe.
pub const LOSS_BASELINE_GAIN: f64 = 0.125;
/// Pace 1% below the estimate, as `tcp_bbr.c` (`bbr_pacing_margin_percent`), so that the
/// bottleneck queue drains.
const PACING_MARGIN: f64 = 0.99;

/// The modes of section 4.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrState {
    /// Doubling the rate every round to find the bottleneck bandwidth.
    Startup,
    /// Draining the queue Startup built.
    Drain,
    /// Cruising at `BtlBw`, probing for more once every eight phases.
    ProbeBw,
    /// A small window for a moment, to measure `RTprop` with an empty queue.
    ProbeRtt,
}

/// The windowed maximum of the `BtlBw` filter: the largest sample of each of the last
/// [`BTLBW_FILTER_ROUNDS`] rounds (bounded by the window).
#[derive(Clone, Debug, Default)]
struct MaxFilter {
    rounds: VecDeque<(u64, u64)>,
}

impl MaxFilter {
    /// A sample of `round`; samples of rounds out of the window are forgotten (only then: as
    /// Linux's `minmax_running_max`, a filter that gets no sample keeps its maximum).
    fn update(&mut self, round: u64, value: u64) {
        match self.rounds.back_mut() {
            Some((r, v)) if *r == round => *v = (*v).max(value),
            _ => self.rounds.push_back((round, value)),
        }
        while self
            .rounds
            .front()
            .is_some_and(|&(r, _)| r + BTLBW_FILTER_ROUNDS <= round)
        {
            self.rounds.pop_front();
        }
    }

    fn get(&self) -> u64 {
        self.rounds.iter().map(|&(_, v)| v).max().unwrap_or(0)
    }
}

/// The BBR controller of one micro-flow.
#[derive(Clone, Debug)]
pub struct Bbr {
    config: CongestionConfig,
    /// splitmix64 state, for ProbeBW's starting phase.
    rng: u64,
    state: BbrState,
    pacing_gain: f64,
    cwnd_gain: f64,
    btl_bw: MaxFilter,
    /// `RTprop`; `None` before the first RTT sample.
    rt_prop: Option<Duration>,
    rt_prop_stamp: Instant,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    round_count: u64,
    next_round_delivered: u64,
    round_start: bool,
    filled_pipe: bool,
    full_bw: u64,
    full_bw_count: u32,
    cycle_index: usize,
    cycle_stamp: Instant,
    /// Window and the one saved before recovery or ProbeRTT, bytes.
    cwnd: u64,
    prior_cwnd: u64,
    /// Bytes per second.
    pacing_rate: u64,
    has_rtt: bool,
    /// In loss recovery (fast recovery or after a timeout) since: it ends when a packet sent
    /// after this is acknowledged.
    recovery_start: Option<Instant>,
    /// A congestion event began fast recovery; the next sample starts packet conservation.
    recovery_entering: bool,
    packet_conservation: bool,
    /// `BBR.inflight_hi`, bytes: the most in flight the path took without too much loss
    /// (`u64::MAX` until a round loses more than [`LOSS_THRESH`]).
    inflight_hi: u64,
    /// How much the next ProbeBW probe that reaches `inflight_hi` raises it, bytes.
    probe_up_step: u64,
    /// This round so far: bytes acknowledged, bytes declared lost, samples that declared a
    /// loss, and the most in flight before an acknowledgement.
    round_acked: u64,
    round_lost: u64,
    round_loss_events: u32,
    round_peak_in_flight: u64,
    /// Where the loss round ends: v3's `loss_round_delivered`, apart from the round of the
    /// other estimates, which recovery and ProbeRTT restart.
    loss_round_delivered: u64,
    /// This loss round had an application-limited sample.
    round_app_limited: bool,
    /// The loss rate of rounds that do not probe (Startup's before it ends, and ProbeBW's
    /// outside a probe's rounds): random loss, which more in flight does not change. Bytes
    /// lost over bytes carried, both sums decayed by [`LOSS_BASELINE_GAIN`] per round.
    base_lost: f64,
    base_total: f64,
    /// Loss rounds of ProbeBW still judged: [`PROBE_LOSS_ROUNDS`] from the start of each
    /// gain-1.25 phase, counted down once it is over.
    probe_loss_rounds: u32,
    /// A round with too much in flight ended during the current gain-1.25 phase.
    probe_up_lossy: bool,
    /// The current gain-1.25 phase had `inflight_hi` in flight at some point.
    probe_up_reached_hi: bool,
}

impl Bbr {
    /// A controller in Startup at the initial window; `seed` draws the ProbeBW phase.
    pub fn new(config: CongestionConfig, seed: u64) -> Self {
        let cwnd = config.initial_window();
        Bbr {
            config,
            rng: seed,
            state: BbrState::Startup,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            btl_bw: MaxFilter::default(),
            rt_prop: None,
            rt_prop_stamp: Instant::ZERO,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            round_count: 0,
            next_round_delivered: 0,
            round_start: false,
            filled_pipe: false,
            full_bw: 0,
            full_bw_count: 0,
            cycle_index: 0,
            cycle_stamp: Instant::ZERO,
            cwnd,
            prior_cwnd: cwnd,
            // Before any RTT sample, as `tcp_bbr.c` with no SRTT: the initial window per
            // millisecond, times the high gain.
            pacing_rate: Self::rate_of(HIGH_GAIN, cwnd, Duration::from_millis(1)),
            has_rtt: false,
            recovery_start: None,
            recovery_entering: false,
            packet_conservation: false,
            inflight_hi: u64::MAX,
            probe_up_step: config.mss,
            round_acked: 0,
            round_lost: 0,
            round_loss_events: 0,
            round_peak_in_flight: 0,
            loss_round_delivered: 0,
            round_app_limited: false,
            base_lost: 0.0,
            base_total: 0.0,
            probe_loss_rounds: 0,
            probe_up_lossy: false,
            probe_up_reached_hi: false,
        }
    }

    /// The mode.
    pub fn state(&self) -> BbrState {
        self.state
    }
    /// `BtlBw`, bytes per second (0 before a sample).
    pub fn btl_bw(&self) -> u64 {
        self.btl_bw.get()
    }
    /// `RTprop` (`None` before a sample).
    pub fn rt_prop(&self) -> Option<Duration> {
        self.rt_prop
    }
    /// The current pacing gain.
    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }
    /// Whether Startup found the pipe full.
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }
    /// `inflight_hi`, bytes (`u64::MAX` before a round lost too much).
    pub fn inflight_hi(&self) -> u64 {
        self.inflight_hi
    }

    /// `gain x bytes / interval` in bytes per second, less the pacing margin.
    fn rate_of(gain: f64, bytes: u64, interval: Duration) -> u64 {
        let ns = interval.as_nanos().max(1) as f64;
        (gain * PACING_MARGIN * bytes as f64 * 1e9 / ns).max(1.0) as u64
    }

    fn mss(&self) -> u64 {
        self.config.mss
    }

    fn min_pipe_cwnd(&self) -> u64 {
        MIN_PIPE_CWND_SEGMENTS * self.mss()
    }

    /// `BBRProbeRTTCwnd`: [`PROBE_RTT_CWND_GAIN`] BDPs, without the quanta allowance, and at
    /// least [`MIN_PIPE_CWND_SEGMENTS`].
    fn probe_rtt_cwnd(&self) -> u64 {
        let bw = self.btl_bw();
        let bdp = self.rt_prop.filter(|_| bw > 0).map_or(0, |rt_prop| {
            u128::from(bw) * rt_prop.as_nanos() / 1_000_000_000
        });
        ((PROBE_RTT_CWND_GAIN * bdp as f64) as u64).max(self.min_pipe_cwnd())
    }

    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `BBRSendQuantum` (section 4.2.2): one segment below 1.2 Mbit/s, two below 24 Mbit/s,
    /// else a millisecond of the pacing rate up to 64 KB.
    fn send_quantum(&self) -> u64 {
        match self.pacing_rate {
            r if r < 150_000 => self.mss(),
            r if r < 3_000_000 => 2 * self.mss(),
            r => (r / 1000).min(64 << 10),
        }
    }

    /// `BBRInflight(gain)`: `gain` bandwidth-delay products plus three send quanta (section
    /// 4.2.3.2); the initial window before both estimates exist.
    fn inflight(&self, gain: f64) -> u64 {
        let bw = self.btl_bw();
        let Some(rt_prop) = self.rt_prop.filter(|_| bw > 0) else {
            return self.config.initial_window();
        };
        let bdp = u128::from(bw) * rt_prop.as_nanos() / 1_000_000_000;
        ((gain * bdp as f64).ceil() as u64).saturating_add(3 * self.send_quantum())
    }

    /// `BBRSaveCwnd`: remembers the window to restore after recovery or ProbeRTT.
    fn save_cwnd(&mut self) {
        self.prior_cwnd = if self.recovery_start.is_none() && self.state != BbrState::ProbeRtt {
            self.cwnd
        } else {
            self.prior_cwnd.max(self.cwnd)
        };
    }

    fn enter_startup(&mut self) {
        self.state = BbrState::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    /// `BBREnterProbeBW`: a phase other than the 0.75 one, drawn from the seed.
    fn enter_probe_bw(&mut self, now: Instant) {
        self.state = BbrState::ProbeBw;
        self.pacing_gain = 1.0;
        self.cwnd_gain = CWND_GAIN;
        let draw = (self.next_random() % 7) as usize;
        self.cycle_index = PACING_GAIN_CYCLE.len() - 1 - draw;
        self.advance_cycle_phase(now);
    }

    fn advance_cycle_phase(&mut self, now: Instant) {
        if self.pacing_gain > 1.0 && self.state == BbrState::ProbeBw {
            // A probe that reached the bound (so there is one) without too much loss: the path
            // takes more.
            if self.probe_up_reached_hi && !self.probe_up_lossy {
                self.inflight_hi = self.bound().saturating_add(self.probe_up_step);
                self.probe_up_step = self.probe_up_step.saturating_mul(2);
            }
        }
        if PACING_GAIN_CYCLE[(self.cycle_index + 1) % PACING_GAIN_CYCLE.len()] > 1.0 {
            self.probe_loss_rounds = PROBE_LOSS_ROUNDS;
        }
        self.probe_up_lossy = false;
        self.probe_up_reached_hi = false;
        self.cycle_stamp = now;
        self.cycle_index = (self.cycle_index + 1) % PACING_GAIN_CYCLE.len();
        self.pacing_gain = PACING_GAIN_CYCLE[self.cycle_index];
    }

    /// `BBRUpdateRound`: a round ends when a packet sent after the previous round ended is
    /// acknowledged.
    fn update_round(&mut self, rs: &RateSample) {
        self.round_start = false;
        if rs.newly_acked > 0 && rs.prior_delivered >= self.next_round_delivered {
            self.next_round_delivered = rs.total_delivered;
            self.round_count += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        if rs.newly_acked > 0 && rs.prior_delivered >= self.loss_round_delivered {
            self.loss_round_delivered = rs.total_delivered;
            self.end_loss_round();
        }
        self.round_app_limited |= rs.is_app_limited;
        self.round_acked += rs.newly_acked;
        self.round_lost += rs.newly_lost;
        self.round_loss_events += u32::from(rs.newly_lost > 0);
        self.round_peak_in_flight = self.round_peak_in_flight.max(rs.prior_in_flight);
        if self.pacing_gain > 1.0 && self.at_inflight_hi(rs) {
            self.probe_up_reached_hi = true;
        }
    }

    /// The window's bound from loss: `inflight_hi`, but never below [`BOUND_FLOOR_GAIN`] BDPs
    /// (and three quanta) of the current estimates, so a bound set while `BtlBw` was lower
    /// does not hold the flow there. `u64::MAX` before any round lost too much.
    fn bound(&self) -> u64 {
        match self.inflight_hi {
            u64::MAX => u64::MAX,
            hi => hi.max(self.bound_floor()),
        }
    }

    /// The least the bound from loss ever is: [`BOUND_FLOOR_GAIN`] BDPs and three quanta, at
    /// least the smallest window.
    fn bound_floor(&self) -> u64 {
        self.inflight(BOUND_FLOOR_GAIN).max(self.min_pipe_cwnd())
    }

    /// The sample had the bound in flight, to within a segment (never before there is one).
    fn at_inflight_hi(&self, rs: &RateSample) -> bool {
        rs.prior_in_flight + self.mss() >= self.bound()
    }

    /// v2's `IsInflightTooHigh` and `BBRHandleInflightTooHigh`, once per loss round: a round
    /// that lost more than [`LOSS_THRESH`], and more than [`RANDOM_LOSS_MULTIPLE`] times the
    /// loss rate of the rounds that do not probe (which it then updates), sets `inflight_hi`
    /// to [`BETA`] times what the path held in it (at least [`Bbr::bound_floor`]). Only rounds
    /// that can tell: in Startup a round with [`FULL_LOSS_COUNT`] loss events, which also ends
    /// Startup (v3's `BBRCheckStartupHighLoss`); in ProbeBW a round of a gain-1.25 probe or of
    /// the [`PROBE_LOSS_ROUNDS`] after it (v2 lowers `inflight_hi` only on its probes' losses);
    /// never a round with application-limited samples. A round of a few dozen packets that
    /// loses one to random loss is over 2%, and must not bound the window.
    fn end_loss_round(&mut self) {
        let (acked, lost) = (self.round_acked, self.round_lost);
        let rate = lost as f64 / (acked + lost).max(1) as f64;
        let baseline = self.base_lost / self.base_total.max(1.0);
        let threshold = LOSS_THRESH.max(RANDOM_LOSS_MULTIPLE * baseline);
        let too_high = lost > 0 && rate > threshold;
        let cruising = self.state == BbrState::ProbeBw
            && self.probe_loss_rounds == 0
            && self.pacing_gain <= 1.0;
        let judged = !self.round_app_limited
            && match self.state {
                BbrState::Startup => self.round_loss_events >= FULL_LOSS_COUNT,
                BbrState::ProbeBw => self.probe_loss_rounds > 0,
                BbrState::Drain | BbrState::ProbeRtt => false,
            };
        if self.state == BbrState::ProbeBw && self.pacing_gain <= 1.0 {
            self.probe_loss_rounds = self.probe_loss_rounds.saturating_sub(1);
        }
        let sets_bound = too_high && judged;
        if !(self.round_app_limited || sets_bound) && (cruising || self.state == BbrState::Startup)
        {
            self.base_lost = (1.0 - LOSS_BASELINE_GAIN) * self.base_lost + lost as f64;
            self.base_total = (1.0 - LOSS_BASELINE_GAIN) * self.base_total + (acked + lost) as f64;
        }
        if sets_bound {
            // What the path held: the round's acknowledged bytes (v2's `inflight_latest`, one
            // round's delivery), no more than it ever had in flight.
            let held = acked.min(self.round_peak_in_flight);
            self.inflight_hi = ((BETA * held as f64) as u64).max(self.bound_floor());
            self.probe_up_step = self.mss();
            self.probe_up_lossy = true;
            if self.state == BbrState::Startup {
                self.filled_pipe = true;
            }
        }
        self.round_app_limited = false;
        self.round_acked = 0;
        self.round_lost = 0;
        self.round_loss_events = 0;
        self.round_peak_in_flight = 0;
    }

    /// `BBRUpdateBtlBw`: application-limited samples count only if they raise the estimate.
    fn update_btl_bw(&mut self, rs: &RateSample) {
        if let Some(rate) = rs.delivery_rate() {
            if !rs.is_app_limited || rate >= self.btl_bw() {
                self.btl_bw.update(self.round_count, rate);
            }
        }
    }

    /// `BBRCheckCyclePhase` (section 4.3.4.3).
    fn check_cycle_phase(&mut self, now: Instant, rs: &RateSample) {
        if self.state != BbrState::ProbeBw {
            return;
        }
        let rt_prop = self.rt_prop.unwrap_or(Duration::ZERO);
        let full_length = now.saturating_duration_since(self.cycle_stamp) > rt_prop;
        let next = if self.pacing_gain > 1.0 {
            // The probe also ends once it reached `inflight_hi`, which the window does not
            // pass (v2's `BBRIsTimeToGoDown` stops probing up at the bound as well).
            full_length
                && (rs.newly_lost > 0
                    || rs.prior_in_flight >= self.inflight(self.pacing_gain)
                    || self.at_inflight_hi(rs))
        } else if self.pacing_gain < 1.0 {
            full_length || rs.prior_in_flight <= self.inflight(1.0)
        } else {
            full_length
        };
        if next {
            self.advance_cycle_phase(now);
        }
    }

    /// `BBRCheckFullPipe` (section 4.3.2.2).
    fn check_full_pipe(&mut self, rs: &RateSample) {
        if self.filled_pipe || !self.round_start || rs.is_app_limited {
            return;
        }
        let bw = self.btl_bw();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_THRESH {
            self.full_bw = bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= FULL_BW_COUNT {
            self.filled_pipe = true;
        }
    }

    /// `BBRCheckDrain` (section 4.3.3).
    fn check_drain(&mut self, now: Instant, rs: &RateSample) {
        if self.state == BbrState::Startup && self.filled_pipe {
            self.state = BbrState::Drain;
            self.pacing_gain = 1.0 / HIGH_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.state == BbrState::Drain && rs.in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    /// `BBRUpdateRTprop` and `BBRCheckProbeRTT` (sections 4.1.2.3 and 4.3.5).
    fn update_rt_prop(&mut self, now: Instant, rs: &RateSample) {
        let expired = self.rt_prop.is_some() && now > self.rt_prop_stamp + RTPROP_FILTER;
        if let Some(rtt) = rs.rtt {
            if self.rt_prop.is_none_or(|m| rtt <= m) || expired {
                self.rt_prop = Some(rtt);
                self.rt_prop_stamp = now;
            }
        }
        if expired && self.state != BbrState::ProbeRtt {
            self.save_cwnd();
            self.state = BbrState::ProbeRtt;
            self.probe_loss_rounds = 0;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
        }
        if self.state != BbrState::ProbeRtt {
            return;
        }
        match self.probe_rtt_done {
            None if rs.in_flight <= self.probe_rtt_cwnd() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.next_round_delivered = rs.total_delivered;
            }
            None => {}
            Some(done) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now >= done {
                    self.rt_prop_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    self.probe_rtt_done = None;
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.enter_startup();
                    }
                }
            }
        }
    }

    /// `BBRSetPacingRate`: never lowered before the pipe is full.
    fn set_pacing_rate(&mut self, rs: &RateSample) {
        if !self.has_rtt {
            if let Some(rtt) = rs.rtt {
                self.has_rtt = true;
                self.pacing_rate = Self::rate_of(HIGH_GAIN, self.cwnd, rtt);
            }
        }
        let bw = self.btl_bw();
        if bw == 0 {
            return;
        }
        let rate = Self::rate_of(self.pacing_gain, bw, Duration::from_secs(1));
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// `BBRSetCwnd` with `BBRModulateCwndForRecovery` and `BBRModulateCwndForProbeRTT`
    /// (sections 4.2.3.4 to 4.2.3.6).
    fn set_cwnd(&mut self, rs: &RateSample) {
        let acked = rs.newly_acked;
        if acked > 0 {
            if rs.newly_lost > 0 {
                self.cwnd = self.cwnd.saturating_sub(rs.newly_lost).max(self.mss());
            }
            if self.recovery_entering {
                // The first round of recovery: packet conservation, and the unused window
                // cut.
                self.recovery_entering = false;
                self.packet_conservation = true;
                self.next_round_delivered = rs.total_delivered;
                self.cwnd = rs.in_flight + acked;
            } else if self.recovery_start.is_some_and(|r| rs.last_sent > r) {
                self.recovery_start = None;
                self.packet_conservation = false;
                self.cwnd = self.cwnd.max(self.prior_cwnd);
            }
            if self.packet_conservation {
                self.cwnd = self.cwnd.max(rs.in_flight + acked);
            } else {
                let target = self.inflight(self.cwnd_gain);
                if self.filled_pipe {
                    self.cwnd = (self.cwnd + acked).min(target);
                } else if self.cwnd < target || rs.total_delivered < self.config.initial_window() {
                    self.cwnd += acked;
                }
                self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
            }
        }
        self.cwnd = self.cwnd.min(self.config.max_window).min(self.bound());
        if self.state == BbrState::ProbeRtt {
            self.cwnd = self.cwnd.min(self.probe_rtt_cwnd());
        }
    }
}

impl CongestionControl for Bbr {
    /// BBR grows its window from rate samples only.
    fn on_ack(&mut self, _now: Instant, _sent: Instant, _bytes: u64, _rtt: &RttEstimator) {}

    /// Fast recovery (section 4.2.3.4): save the window; the next sample cuts it to what is in
    /// flight and holds it there for one round (packet conservation). Neither estimate changes.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant) {
        match self.recovery_start {
            Some(r) if sent <= r => {}
            Some(_) => self.recovery_start = Some(now),
            None => {
                self.save_cwnd();
                self.recovery_start = Some(now);
                self.recovery_entering = true;
            }
        }
    }

    /// Section 4.2.3.4: save the window, then one segment; the window is restored when a
    /// packet sent after the timeout is acknowledged. As `tcp_bbr.c`, the timeout also ends a
    /// round of Startup's plateau count.
    fn on_timeout(&mut self, now: Instant, _bytes_in_flight: u64) {
        self.save_cwnd();
        self.recovery_start = Some(now);
        self.recovery_entering = false;
        self.packet_conservation = false;
        self.full_bw = 0;
        self.cwnd = self.config.loss_window();
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    /// BBR has no slow-start threshold.
    fn ssthresh(&self) -> u64 {
        u64::MAX
    }

    /// `BBRUpdateModelAndState` then `BBRUpdateControlParameters` (section 4.4).
    fn on_rate_sample(&mut self, now: Instant, rs: &RateSample) {
        self.update_round(rs);
        self.update_btl_bw(rs);
        self.check_cycle_phase(now, rs);
        self.check_full_pipe(rs);
        self.check_drain(now, rs);
        self.update_rt_prop(now, rs);
        self.set_pacing_rate(rs);
        self.set_cwnd(rs);
    }

    fn pacing_rate(&self) -> Option<u64> {
        Some(self.pacing_rate)
    }

    fn holds_back(&self) -> bool {
        self.state == BbrState::ProbeRtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1200;

    fn ago(t: Instant, ms: u64) -> Instant {
        Instant::from_nanos(t.as_nanos() - ms * 1_000_000)
    }

    /// Feeds a controller one round trip at a time: every sample acknowledges a round's worth
    /// of data sent one RTT earlier, so each starts a new round.
    struct Drive {
        now: Instant,
        delivered: u64,
    }

    impl Drive {
        fn new() -> Self {
            Drive {
                now: Instant::from_nanos(1_000_000_000),
                delivered: 0,
            }
        }

        /// One round at `rate` bytes/s and `rtt`, with `in_flight` bytes left after the ack.
        fn round(&mut self, b: &mut Bbr, rate: u64, rtt_ms: u64, in_flight: u64, app: bool) {
            let rtt = Duration::from_millis(rtt_ms);
            let bytes = (rate * rtt_ms / 1000).max(1);
            // Sent a millisecond after the previous acknowledgement.
            let last_sent = self.now + Duration::from_millis(1);
            self.now = self.now + rtt;
            let rs = RateSample {
                delivered: bytes,
                interval: Some(rtt),
                is_app_limited: app,
                prior_delivered: self.delivered,
                total_delivered: self.delivered + bytes,
                last_sent,
                newly_acked: bytes,
                newly_lost: 0,
                prior_in_flight: in_flight + bytes,
                in_flight,
                rtt: Some(rtt),
            };
            self.delivered += bytes;
            b.on_rate_sample(self.now, &rs);
        }

        /// `n` rounds alike.
        fn rounds(
            &mut self,
            b: &mut Bbr,
            n: u32,
            rate: u64,
            rtt_ms: u64,
            in_flight: u64,
            app: bool,
        ) {
            for _ in 0..n {
                self.round(b, rate, rtt_ms, in_flight, app);
            }
        }
    }

    fn bbr() -> Bbr {
        Bbr::new(CongestionConfig::default(), 1)
    }

    /// One round of `samples` acknowledgements that together acknowledge `acked` bytes over
    /// 150 ms or more (at most 1 MB/s) and declare `lost` lost (each sample some of both), with `peak` bytes in flight
    /// before each; `app`: application-limited.
    fn lossy_round(
        d: &mut Drive,
        b: &mut Bbr,
        acked: u64,
        lost: u64,
        samples: u64,
        peak: u64,
        app: bool,
    ) {
        let start = d.delivered;
        let last_sent = d.now + Duration::from_millis(1);
        let step = Duration::from_millis(100) / samples as u32;
        for i in 0..samples {
            let (a, l) = (acked / samples, lost / samples);
            d.now = d.now + step;
            let rs = RateSample {
                delivered: acked,
                // At 1 MB/s: a round that acknowledged more took longer.
                interval: Some(Duration::from_micros(acked.max(150_000))),
                prior_delivered: start,
                total_delivered: d.delivered + a,
                last_sent: last_sent + step * i as u32,
                newly_acked: a,
                newly_lost: l,
                prior_in_flight: peak,
                in_flight: peak - a - l,
                rtt: Some(Duration::from_millis(150)),
                is_app_limited: app,
            };
            d.delivered += a;
            b.on_rate_sample(d.now, &rs);
        }
    }

    /// Startup, then Drain, then ProbeBW on a 1 MB/s, 100 ms path (BDP 100 000 bytes).
    fn cruising(d: &mut Drive) -> Bbr {
        let mut b = bbr();
        d.rounds(&mut b, 6, 1_000_000, 100, 250_000, false);
        d.round(&mut b, 1_000_000, 100, 50_000, false);
        assert_eq!(b.state(), BbrState::ProbeBw);
        b
    }

    /// Rounds at one BDP in flight until a ProbeBW gain-1.25 phase is on.
    fn to_probe(d: &mut Drive, b: &mut Bbr) {
        for _ in 0..32 {
            if b.pacing_gain() > 1.0 {
                return;
            }
            d.round(b, 1_000_000, 100, 0, false);
        }
        panic!("no probe in 32 rounds");
    }

    /// In a probe ([`to_probe`]), a [`lossy_round`], then the round that judges it.
    fn probe_loss(
        d: &mut Drive,
        b: &mut Bbr,
        acked: u64,
        lost: u64,
        samples: u64,
        peak: u64,
        app: bool,
    ) {
        to_probe(d, b);
        lossy_round(d, b, acked, lost, samples, peak, app);
        d.round(b, 1_000_000, 100, 0, false);
    }

    /// [`cruising`], then four rounds at one BDP in flight.
    fn settled(d: &mut Drive) -> Bbr {
        let mut b = cruising(d);
        d.rounds(&mut b, 4, 1_000_000, 100, 100_000, false);
        b
    }

    #[test]
    fn startup_grows_then_exits_on_a_plateau() {
        let mut b = bbr();
        let mut d = Drive::new();
        assert_eq!(b.window(), 12_000);
        // The rate doubles each round: Startup, the window growing by what was acknowledged.
        for (i, rate) in [100_000, 200_000, 400_000, 800_000].into_iter().enumerate() {
            let w = b.window();
            d.round(&mut b, rate, 100, 1_000_000, false);
            assert_eq!(b.state(), BbrState::Startup, "round {i}");
            assert_eq!(b.window(), w + rate / 10);
            assert_eq!(b.btl_bw(), rate);
            let pacing = b.pacing_rate().unwrap();
            assert!(pacing >= (2.8 * rate as f64) as u64, "{pacing}");
        }
        // Flat: three rounds without 25% growth fill the pipe.
        for _ in 0..2 {
            d.round(&mut b, 850_000, 100, 1_000_000, false);
            assert_eq!(b.state(), BbrState::Startup);
        }
        d.round(&mut b, 850_000, 100, 1_000_000, false);
        assert!(b.filled_pipe());
        assert_eq!(b.state(), BbrState::Drain);
        assert!((b.pacing_gain() - 1.0 / HIGH_GAIN).abs() < 1e-9);
    }

    #[test]
    fn app_limited_plateau_does_not_end_startup() {
        let mut b = bbr();
        let mut d = Drive::new();
        d.rounds(&mut b, 10, 100_000, 100, 5_000, true);
        assert_eq!(b.state(), BbrState::Startup);
        assert!(!b.filled_pipe());
    }

    #[test]
    fn drain_ends_when_the_queue_is_gone() {
        let mut b = bbr();
        let mut d = Drive::new();
        d.rounds(&mut b, 6, 1_000_000, 100, 250_000, false);
        assert_eq!(b.state(), BbrState::Drain);
        // Still more than a BDP (100 000) plus quanta in flight: still draining.
        d.round(&mut b, 1_000_000, 100, 150_000, false);
        assert_eq!(b.state(), BbrState::Drain);
        d.round(&mut b, 1_000_000, 100, 100_000, false);
        assert_eq!(b.state(), BbrState::ProbeBw);
        // ProbeBW's window: two BDPs plus three quanta of two segments, reached by growth.
        d.rounds(&mut b, 4, 1_000_000, 100, 100_000, false);
        assert_eq!(b.window(), 200_000 + 6 * MSS);
    }

    #[test]
    fn probe_bw_cycles_its_gains_one_phase_per_rtprop() {
        let mut d = Drive::new();
        let mut b = cruising(&mut d);
        let start = b.cycle_index;
        assert_ne!(start, 1, "never starts in the 0.75 phase");
        let mut gains = vec![b.pacing_gain()];
        for _ in 0..8 {
            // A phase lasts more than an RTprop (100 ms); the 1.25 one also needs 1.25 BDP in
            // flight.
            d.round(&mut b, 1_000_000, 101, 130_000, false);
            gains.push(b.pacing_gain());
        }
        let expected: Vec<f64> = (0..=8)
            .map(|k| PACING_GAIN_CYCLE[(start + k) % PACING_GAIN_CYCLE.len()])
            .collect();
        assert_eq!(gains, expected);
        assert!(gains.contains(&1.25) && gains.contains(&0.75));
        // The pacing rate follows the gain.
        assert_eq!(
            b.pacing_rate(),
            Some((b.pacing_gain() * PACING_MARGIN * b.btl_bw() as f64) as u64)
        );
    }

    #[test]
    fn the_starting_phase_comes_from_the_seed() {
        let phase = |seed| {
            let mut d = Drive::new();
            let mut b = Bbr::new(CongestionConfig::default(), seed);
            d.rounds(&mut b, 6, 1_000_000, 100, 250_000, false);
            d.round(&mut b, 1_000_000, 100, 50_000, false);
            b.cycle_index
        };
        assert_eq!(phase(7), phase(7));
        let phases: std::collections::BTreeSet<usize> = (0..40).map(phase).collect();
        assert!(phases.len() > 3, "{phases:?}");
        assert!(!phases.contains(&1));
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_lower_rtt_then_back() {
        let mut d = Drive::new();
        let mut b = cruising(&mut d);
        let w = b.window();
        // RTT samples above RTprop (100 ms) for ten seconds: RTprop expires.
        let mut rounds = 0;
        while b.state() != BbrState::ProbeRtt {
            d.round(&mut b, 1_000_000, 110, 100_000, false);
            rounds += 1;
            assert!(rounds < 100, "ProbeRTT after 10 s");
        }
        assert!(rounds >= 85, "not before 10 s: {rounds} rounds of 110 ms");
        assert!(b.holds_back());
        // Half a BDP of the 1 MB/s at the 110 ms RTprop it just took.
        assert_eq!(b.window(), 55_000, "cwnd of half a BDP");
        // The expired RTprop took the new sample.
        assert_eq!(b.rt_prop(), Some(Duration::from_millis(110)));
        // In flight falls to four segments: 200 ms and a round later, ProbeBW again with the
        // window it had.
        d.round(&mut b, 40_000, 100, 4 * MSS, true);
        assert_eq!(b.state(), BbrState::ProbeRtt);
        d.round(&mut b, 40_000, 100, 4 * MSS, true);
        assert_eq!(b.state(), BbrState::ProbeRtt, "100 ms in");
        d.round(&mut b, 40_000, 100, 4 * MSS, true);
        assert_eq!(b.state(), BbrState::ProbeBw);
        assert!(b.window() >= w, "{} restored to {w}", b.window());
        assert_eq!(b.rt_prop(), Some(Duration::from_millis(100)));
        // The low-rate ProbeRTT samples (app-limited) left BtlBw alone.
        assert_eq!(b.btl_bw(), 1_000_000);
    }

    #[test]
    fn app_limited_samples_do_not_lower_btl_bw_but_real_ones_do_after_ten_rounds() {
        let mut d = Drive::new();
        let mut b = cruising(&mut d);
        // The last 1 MB/s sample is of this round.
        let last = b.round_count;
        d.rounds(&mut b, 5, 200_000, 100, 20_000, true);
        assert_eq!(b.btl_bw(), 1_000_000);
        while b.btl_bw() == 1_000_000 {
            d.round(&mut b, 500_000, 100, 50_000, false);
        }
        assert_eq!(b.btl_bw(), 500_000);
        assert_eq!(
            b.round_count,
            last + BTLBW_FILTER_ROUNDS,
            "a ten-round window"
        );
    }

    #[test]
    fn the_window_never_falls_below_four_segments() {
        let mut b = bbr();
        let mut d = Drive::new();
        for _ in 0..30 {
            d.round(&mut b, 1_000, 10, 0, false);
            assert!(b.window() >= 4 * MSS, "{}", b.window());
        }
        assert!(b.filled_pipe());
        assert_eq!(b.window(), 4 * MSS);
    }

    #[test]
    fn random_loss_costs_one_round_of_conservation_not_the_rate() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        let (w, bw) = (b.window(), b.btl_bw());
        // One packet lost: the window holds what is in flight plus what was acknowledged.
        b.on_congestion_event(d.now, ago(d.now, 50));
        let rs = RateSample {
            delivered: 100_000,
            interval: Some(Duration::from_millis(100)),
            prior_delivered: d.delivered - 1000,
            total_delivered: d.delivered + 1000,
            last_sent: ago(d.now, 50),
            newly_acked: 1000,
            newly_lost: MSS,
            prior_in_flight: 100_000,
            in_flight: 100_000 - 1000 - MSS,
            rtt: Some(Duration::from_millis(100)),
            ..RateSample::default()
        };
        d.delivered += 1000;
        b.on_rate_sample(d.now, &rs);
        assert_eq!(b.window(), 100_000 - MSS);
        assert_eq!(b.btl_bw(), bw);
        // A packet sent after the loss acknowledged: recovery over, the window restored.
        d.round(&mut b, 1_000_000, 100, 100_000, false);
        assert_eq!(b.window(), w);
        assert_eq!(b.btl_bw(), bw);
    }

    #[test]
    fn timeout_drops_to_one_segment_then_restores() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        let w = b.window();
        b.on_timeout(d.now, 100_000);
        assert_eq!(b.window(), MSS);
        // An acknowledgement of a packet sent before the timeout does not end the loss episode:
        // the window grows by what was acknowledged only.
        let rs = RateSample {
            prior_delivered: d.delivered,
            total_delivered: d.delivered + MSS,
            last_sent: ago(d.now, 1),
            newly_acked: MSS,
            ..RateSample::default()
        };
        b.on_rate_sample(d.now + Duration::from_millis(10), &rs);
        assert_eq!(b.window(), 4 * MSS);
        d.delivered += MSS;
        d.round(&mut b, 1_000_000, 100, 10_000, false);
        assert_eq!(b.window(), w);
    }

    #[test]
    fn a_probe_round_that_loses_too_much_bounds_the_window_and_clean_probes_raise_the_bound() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        assert_eq!(b.inflight_hi(), u64::MAX);
        assert!(b.window() > 200_000, "two BDPs: {}", b.window());
        // In a probe, 200 000 bytes delivered in a 200 ms round (a queue of 100 ms), 3.8%
        // lost: the bound is 0.85 x 200 000, above 1.25 BDPs and three quanta (132 200).
        to_probe(&mut d, &mut b);
        lossy_round(&mut d, &mut b, 200_000, 8_000, 5, 240_000, false);
        assert_eq!(b.inflight_hi(), u64::MAX, "judged when the round ends");
        d.round(&mut b, 1_000_000, 100, 90_000, false);
        assert_eq!(b.inflight_hi(), 170_000);
        assert!(b.window() <= 170_000, "{}", b.window());
        // Clean rounds that reach the bound: each gain-1.25 phase raises it, by one segment
        // and then twice as much each time.
        let mut his = vec![b.inflight_hi()];
        for _ in 0..90 {
            d.round(&mut b, 1_000_000, 100, 90_000, false);
            assert!(b.window() <= b.inflight_hi());
            if b.inflight_hi() != *his.last().unwrap() {
                his.push(b.inflight_hi());
            }
        }
        let steps: Vec<u64> = his.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.len() >= 3, "{his:?}");
        assert_eq!(steps[..3], [MSS, 2 * MSS, 4 * MSS], "{his:?}");
        // Another lossy probe, with less in flight than it acknowledged and less than the
        // last lossy round: a bound from this round's largest flight, and the step back to one
        // segment.
        probe_loss(&mut d, &mut b, 200_000, 8_000, 5, 190_000, false);
        assert_eq!(b.inflight_hi(), 161_500);
        for _ in 0..64 {
            d.round(&mut b, 1_000_000, 100, 90_000, false);
            if b.inflight_hi() != 161_500 {
                break;
            }
        }
        assert_eq!(b.inflight_hi(), 161_500 + MSS);
    }

    #[test]
    fn only_a_probes_rounds_of_more_than_two_percent_loss_not_application_limited_set_the_bound() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        // Cruising, the probe's rounds over: loss there is not the probe's.
        // (133 000 bytes in flight end the probe: 1.25 BDPs and three quanta are 132 200.)
        to_probe(&mut d, &mut b);
        for gain in [0.75, 1.0] {
            for _ in 0..8 {
                if b.pacing_gain() == gain {
                    break;
                }
                d.round(&mut b, 1_000_000, 100, 33_000, false);
            }
            assert_eq!(b.pacing_gain(), gain);
        }
        d.round(&mut b, 1_000_000, 100, 0, false);
        assert_eq!(b.pacing_gain(), 1.0);
        lossy_round(&mut d, &mut b, 150_000, 6_000, 5, 200_000, false);
        d.round(&mut b, 1_000_000, 100, 0, false);
        assert_eq!(b.inflight_hi(), u64::MAX, "cruising");
        // In a probe: application-limited, then exactly 2%: neither counts.
        probe_loss(&mut d, &mut b, 150_000, 6_000, 5, 200_000, true);
        assert_eq!(b.inflight_hi(), u64::MAX, "application-limited");
        probe_loss(&mut d, &mut b, 147_000, 3_000, 5, 200_000, false);
        assert_eq!(b.inflight_hi(), u64::MAX, "2%");
        // 2.5% does.
        probe_loss(&mut d, &mut b, 195_000, 5_000, 5, 240_000, false);
        assert_eq!(b.inflight_hi(), 165_750);
    }

    #[test]
    fn probes_that_do_not_reach_the_bound_do_not_raise_it() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        probe_loss(&mut d, &mut b, 176_500, 7_000, 5, 200_000, false);
        assert_eq!(b.inflight_hi(), 150_025);
        // 133 000 bytes in flight: each probe ends at 1.25 BDPs and its quanta (132 200),
        // below the bound.
        let (mut probes, mut gain) = (0, b.pacing_gain());
        for _ in 0..64 {
            d.round(&mut b, 1_000_000, 100, 33_000, false);
            probes += u32::from(gain > 1.0 && b.pacing_gain() <= 1.0);
            gain = b.pacing_gain();
        }
        assert!(probes >= 3, "{probes} probes");
        assert_eq!(b.inflight_hi(), 150_025);
    }

    #[test]
    fn the_bound_is_never_below_one_and_a_quarter_bdps_of_the_current_estimates() {
        let mut d = Drive::new();
        let mut b = settled(&mut d);
        // A lossy probe round that delivered little: the bound is 1.25 BDPs plus three send
        // quanta, not 0.85 x 40 000.
        probe_loss(&mut d, &mut b, 40_000, 2_400, 2, 60_000, false);
        assert_eq!(b.inflight_hi(), 125_000 + 3 * 2 * MSS);
        assert_eq!(b.btl_bw(), 1_000_000);
        d.rounds(&mut b, 4, 1_000_000, 100, 100_000, false);
        assert_eq!(b.window(), 125_000 + 3 * 2 * MSS);
        // The path turns out faster: the window follows the new rate.
        d.rounds(&mut b, 4, 2_000_000, 100, 100_000, false);
        assert_eq!(b.btl_bw(), 2_000_000);
        assert_eq!(b.window(), 250_000 + 3 * 2 * MSS);
        // A probe that reaches it raises the bound from there, not from the old 132 200.
        for _ in 0..32 {
            d.round(&mut b, 2_000_000, 100, 60_000, false);
            if b.inflight_hi() != 125_000 + 3 * 2 * MSS {
                break;
            }
        }
        assert_eq!(b.inflight_hi(), 250_000 + 3 * 2 * MSS + MSS);
    }

    #[test]
    fn startup_is_bounded_and_ended_only_by_a_round_of_six_loss_events() {
        let mut b = bbr();
        let mut d = Drive::new();
        for rate in [100_000, 200_000, 400_000] {
            d.round(&mut b, rate, 100, 1_000_000, false);
        }
        // One random loss in a small round: 4.8%, but one event.
        lossy_round(&mut d, &mut b, 24_000, 1_200, 1, 30_000, false);
        d.round(&mut b, 800_000, 100, 100_000, false);
        // Two rounds of five events each, however much they lose.
        lossy_round(&mut d, &mut b, 60_000, 12_000, 5, 120_000, false);
        d.round(&mut b, 1_600_000, 100, 100_000, false);
        lossy_round(&mut d, &mut b, 60_000, 12_000, 5, 120_000, false);
        d.round(&mut b, 3_200_000, 100, 100_000, false);
        assert_eq!(b.state(), BbrState::Startup);
        assert_eq!(b.inflight_hi(), u64::MAX);
        // Six end Startup at the bound (here its floor: 0.85 x 60 000 is less).
        lossy_round(&mut d, &mut b, 60_000, 12_000, 6, 120_000, false);
        let floor = b.inflight(BOUND_FLOOR_GAIN);
        d.round(&mut b, 6_400_000, 100, 100_000, false);
        assert!(b.filled_pipe());
        assert_ne!(b.state(), BbrState::Startup);
        assert_eq!(b.inflight_hi(), floor);
        assert!(b.window() <= b.inflight(BOUND_FLOOR_GAIN), "{}", b.window());
    }

    #[test]
    fn random_loss_from_the_start_raises_the_bar_a_round_must_clear() {
        let mut b = bbr();
        let mut d = Drive::new();
        // 3% random loss in every round of Startup; the last round has six loss events.
        for (acked, samples) in [(12_000, 1), (24_000, 1), (48_000, 1), (96_000, 2)] {
            lossy_round(
                &mut d,
                &mut b,
                acked,
                acked * 3 / 100,
                samples,
                2 * acked,
                false,
            );
        }
        lossy_round(&mut d, &mut b, 192_000, 5_760, 6, 384_000, false);
        d.round(&mut b, 1_000_000, 100, 100_000, false);
        assert_eq!(
            b.state(),
            BbrState::Startup,
            "3% is this path's random loss"
        );
        assert_eq!(b.inflight_hi(), u64::MAX);
        // Five times as much is a full queue.
        lossy_round(&mut d, &mut b, 160_000, 40_000, 6, 400_000, false);
        d.round(&mut b, 2_000_000, 100, 100_000, false);
        assert!(b.filled_pipe());
        assert_ne!(b.inflight_hi(), u64::MAX);
    }
}

//! PET: Packet-pair based Earliest-Delivery-Path-First scheduling for TCP applications (BAG
//! paper section V-A).
//!
//! PET is EDPF ([`Edpf`], section III-B) with the perfect knowledge replaced by estimates:
//!
//! - **Bandwidth `B_l` from packet pairs.** Every packet is treated as part of a pair; EDPF
//!   picks the path of a pair's first packet and the second always follows it there. The
//!   receiver reports each packet's arrival time in SIG-ACKs ([`PetReceiver`]), and the pair's
//!   dispersion gives a sample of the path's bottleneck rate ([`PacketPair`]: 0.8 new, 0.2 old).
//! - **Start-up.** Until every path has an estimate, pairs go round robin over the paths.
//! - **Retransmissions are not paired** ("the bandwidth estimate can be ambiguous"): the driver
//!   says which packets are TCP retransmissions; they go by EDPF alone.
//! - **Idle paths are probed.** A path that has not carried a pair for `probe_interval` gets the
//!   next pair whatever EDPF says, so an estimate that once fell low can recover ("there is a
//!   danger of getting stuck to a single interface").
//! - **Delay `D_l`** from probes at the start ([`Pet::set_probe_rtt`]: half the RTT), then from
//!   the SIG-ACKs: each entry gives `arrival - sent - L / B_l`, a one-way delay plus the offset
//!   between the two clocks. The offset is the same for every path, and "only the relative
//!   delay between the different paths matters" (section V-A), so `D_l` is the probe floor
//!   plus how much longer path `l`'s smallest such sample is than the smallest path's.
//! - **Blackouts** (section VII-C): "they can be detected if no SIG-ACKs arrive from MH in
//!   response to packets sent on it in a long while". A path whose oldest unreported packet is
//!   `blackout_after` past its predicted delivery leaves EDPF's choice
//!   ([`PetEvent::PathDown`]) and comes back with the next SIG-ACK from it. A path that is down
//!   is still probed with a pair every `probe_interval`.
//!
//! - **Padding pairs** (beyond the paper, [`PetConfig::padding`]): PET can probe with pairs
//!   of padding packets of its own instead of with data ([`Pet::poll_padding`]). Every path is
//!   then measured from the first packet the bond carries, before a data pair could be, and an
//!   idle or blacked-out path is measured without risking data on it. Padding goes out only
//!   while the bond carries traffic (data PET places, or what the driver reports with
//!   [`Pet::note_traffic`]), so an idle bond sends nothing. Its ids have [`PADDING_ID_BIT`]
//!   set, and the receiver reports them in SIG-ACKs like data sequence numbers.
//!
//! Departures, each documented where it is coded: a pair whose second packet would reach the
//! bottleneck after the first had left it (by the estimates) is no pair, the packet starts a
//! new one; a pair whose second arrived no further behind the first than it was sent may show
//! the sender's spacing, and may raise the estimate but not lower it, nor undo a held-back
//! outlier, nor count as measuring the path for its padding; the estimate EDPF uses
//! is the pair estimate capped by what the path delivered while busy ([`DeliveryRate`]:
//! behind a token bucket, pairs read the wire's speed); the RTT of each path is also kept
//! (SIG-ACK arrival minus send time), for the driver's timers; SIG-ACKs are batched.
//!
//! Beyond the paper, [`Pet::srr_quanta`] turns the estimates into SRR quanta (adaptive SRR:
//! `Srr::set_quanta`), for a bond that wants SRR's causal striping with rates that follow the
//! paths.

mod delivery;
mod pair;
mod receiver;

pub use delivery::{
    DeliveryRate, Report, FLOOR_WINDOW, GROWTH_PCT, GROWTH_STEPS, MIN_PACKETS, MIN_QUEUE, MIN_SPAN,
    RAISE_SPAN,
};
pub use pair::{PacketPair, NEW_SAMPLE_WEIGHT_PCT, OUTLIER_FACTOR};
pub use receiver::{PetReceiver, PetReceiverConfig, MAX_SIGACK_ENTRIES};

use crate::path::{PathId, MAX_PATHS};
use crate::scheduler::Edpf;
use crate::time::{transmission_time, Duration, Instant};
use std::collections::VecDeque;

/// One entry of a SIG-ACK: data packet `seq` arrived on `path` at `arrival`, on the receiver's
/// clock (which need not agree with the sender's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SigAckEntry {
    /// The path it arrived on.
    pub path: PathId,
    /// Its sequence number (the striper's, mode `sequence`).
    pub seq: u64,
    /// When it arrived, receiver clock.
    pub arrival: Instant,
}

/// Ids of padding packets ([`Pet::poll_padding`]) have this bit set, so a SIG-ACK entry tells
/// them from data sequence numbers, which never reach it.
pub const PADDING_ID_BIT: u64 = 1 << 63;

/// How long after a policed path lost twice its `A_l` is re-anchored only later ([`Pet`]'s
/// `reanchor`, [`DeliveryRate::losing`]): a path that drops instead of queueing shows no
/// backlog.
pub const LOSING_WINDOW: Duration = Duration::from_millis(250);

/// A padding packet for the driver to send ([`Pet::poll_padding`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Padding {
    /// The path to send it on.
    pub path: PathId,
    /// Its id, [`PADDING_ID_BIT`] set: the receiver reports its arrival under this number.
    pub id: u64,
    /// Payload bytes (the packet is as long on the wire as a data packet of this payload).
    pub len: u32,
}

/// PET settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PetConfig {
    /// Number of paths (1 to [`MAX_PATHS`]).
    pub paths: usize,
    /// A prior rate per path in bit/s, used only to account packets sent before the path has
    /// an estimate (the start-up round robin); the configured rates, or any guess.
    pub prior_rates_bps: Vec<u64>,
    /// Bytes each packet costs on a path beyond its payload (`L` includes them).
    pub overhead_bytes: u32,
    /// A path that has not carried a pair for this long gets the next one.
    pub probe_interval: Duration,
    /// A path is out when its oldest unreported packet is this late.
    pub blackout_after: Duration,
    /// One-way delay samples are the smallest over a window of this length (two half windows);
    /// `None`, the default, keeps the smallest ever. A window lets `D_l` follow a route that
    /// got longer, but a bottleneck whose queue never drains for a whole window then inflates
    /// the samples by the queue, and `A_l`, anchored on them, falls short of the real queue
    /// (the blackout check then fires on a healthy path). Clock drift between the two ends
    /// also moves the samples; over a transfer of minutes it is a few milliseconds.
    pub delay_window: Option<Duration>,
    /// The most packets remembered for matching SIG-ACKs; older ones are forgotten.
    pub max_records: usize,
    /// The receiver holds every arrival until the slowest path's delay has passed (braid's
    /// delay equalisation, `resequence::equalize`), so what TCP sees is a packet's *release*,
    /// `d_l + (D_max - D_l)`, not its delivery `d_l`: EDPF then compares releases. Beyond the
    /// paper, whose client has no such hold. Without it, EDPF keeps a long path idle until
    /// the short paths' queues are as long as the difference in delay, which a real
    /// drop-tail buffer seldom is.
    pub equalized: bool,
    /// Beyond the paper: probe with pairs of padding packets of this many payload bytes
    /// ([`Pet::poll_padding`]) instead of with data. An unmeasured path gets a padding pair
    /// every quarter `probe_interval`, and a measured one when it has carried no pair for
    /// `probe_interval`, both only while the bond carries traffic; data then never goes to a
    /// path only to measure it. `None`, the default, is the paper's data pairs.
    pub padding: Option<u32>,
}

impl PetConfig {
    /// Defaults: probe every 1 s, blackout after 1 s, the smallest delay sample ever, 4096
    /// records.
    pub fn new(prior_rates_bps: Vec<u64>) -> Self {
        PetConfig {
            paths: prior_rates_bps.len(),
            prior_rates_bps,
            overhead_bytes: 0,
            probe_interval: Duration::from_secs(1),
            blackout_after: Duration::from_secs(1),
            delay_window: None,
            max_records: 4096,
            equalized: false,
            padding: None,
        }
    }
}

/// A PET config that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PetConfigError {
    /// No paths or too many.
    #[error("{0} paths configured: PET needs between 1 and 64 paths")]
    PathCount(usize),
    /// `prior_rates_bps` does not have one entry per path.
    #[error("{rates} prior rates for {paths} paths: give one rate per path")]
    RateCount {
        /// Rates given.
        rates: usize,
        /// Paths.
        paths: usize,
    },
    /// A zero prior rate.
    #[error("path {0} has a prior rate of 0 bit/s: give a positive guess")]
    ZeroRate(usize),
    /// `max_records` of zero.
    #[error("max_records is 0: PET must remember at least one packet")]
    NoRecords,
}

/// What PET tells the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PetEvent {
    /// A new bandwidth estimate for `path`.
    Estimate {
        /// The path.
        path: PathId,
        /// The estimate, bit/s.
        rate_bps: u64,
    },
    /// No SIG-ACK from `path` in a long while: it is out of EDPF's choice.
    PathDown(PathId),
    /// A SIG-ACK came from a path that was down: it is back.
    PathUp(PathId),
}

/// How a packet was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// First of a pair.
    First,
    /// Second of a pair whose first is `first`.
    Second { first: u64 },
    /// Not part of a pair (a retransmission, or a pair's first whose second never came).
    Single,
}

#[derive(Clone, Debug)]
struct Record {
    seq: u64,
    path: PathId,
    len: u32,
    sent: Instant,
    role: Role,
    arrival: Option<Instant>,
    /// Its number among the packets of its path the receiver reports (`None`: one it does
    /// not, too small), and the wire bytes accounted on the path up to it: for
    /// [`DeliveryRate`].
    key: Option<u64>,
    bytes_at: u64,
}

/// The smallest value over a sliding window, kept as two half windows.
#[derive(Clone, Copy, Debug, Default)]
struct WindowedMin {
    current: Option<i128>,
    previous: Option<i128>,
    started: Instant,
}

impl WindowedMin {
    fn update(&mut self, now: Instant, value: i128, half: Option<Duration>) {
        if half.is_some_and(|h| now.saturating_duration_since(self.started) >= h) {
            self.previous = self.current;
            self.current = None;
            self.started = now;
        }
        self.current = Some(self.current.map_or(value, |c| c.min(value)));
    }
    fn get(&self) -> Option<i128> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[derive(Clone, Debug)]
struct PetPath {
    pair: PacketPair,
    /// What the path delivered while busy: caps the pair estimate ([`DeliveryRate`]).
    delivery: DeliveryRate,
    /// Wire bytes accounted on the path, and packets sent on it that the receiver reports
    /// (for [`Record::key`]).
    accounted_bytes: u64,
    keys: u64,
    /// The rate EDPF uses: the pair estimate, capped by the delivery rate.
    rate: Option<u64>,
    /// Smallest `arrival - sent - L / B` (ns, receiver clock minus sender clock).
    owd: WindowedMin,
    /// Half the probe RTT, from the driver.
    probe_delay: Option<Duration>,
    /// Smoothed RTT from SIG-ACKs (RFC 6298 gains).
    srtt: Option<Duration>,
    last_pair: Option<Instant>,
    /// When a pair last measured the path: its second arrived further behind the first than
    /// it was sent, so the path, not the sender, spaced them.
    last_measured: Option<Instant>,
    /// When the last padding pair started on this path.
    pad_sent: Option<Instant>,
    down: bool,
    /// The driver took the path out ([`Pet::set_path_enabled`]): never chosen, not probed.
    disabled: bool,
    /// Unreported packets sent on this path: (seq, expected delivery), in sending order.
    unreported: VecDeque<(u64, Instant)>,
    /// Everything `A_l` counts that may still be on its way, in sending order. Re-anchoring
    /// replays Equation 1 over what follows the packet a SIG-ACK reports, and drops what
    /// precedes it. What no SIG-ACK can report leaves the front at once
    /// ([`InFlight::is_key`]), so an end whose packets are never reported (one that sends only
    /// TCP's ACKs) keeps a list of one.
    in_flight: VecDeque<InFlight>,
}

/// A packet `A_l` counts, on a path's in-flight list.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// The data sequence number, if PET placed the packet.
    seq: Option<u64>,
    sent: Instant,
    /// Payload bytes.
    len: u32,
}

impl InFlight {
    /// Whether a SIG-ACK may report this packet and re-anchor on it: data PET placed, larger
    /// than the receiver's reports skip. Nothing else is ever an anchor, so at the front of the
    /// list (before every anchor) it can go: a re-anchor would drain it anyway.
    fn is_key(&self) -> bool {
        self.seq.is_some() && self.len > crate::striper::SMALL_PACKET_BYTES
    }
}

/// PET counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PetStats {
    /// Pairs started.
    pub pairs: u64,
    /// Pair samples taken.
    pub samples: u64,
    /// Delivery-rate samples taken ([`DeliveryRate`]).
    pub delivery_samples: u64,
    /// Of those, samples from overload windows: a path that lost a tenth or more of what it
    /// was sent (a policer), not one whose queue filled.
    pub overload_samples: u64,
    /// Pairs whose second arrived no further behind the first than it was sent, which did
    /// not raise the estimate: they showed the sender's spacing, and read below it or more
    /// than `OUTLIER_FACTOR` above it.
    pub spaced_pairs: u64,
    /// Packets sent unpaired (retransmissions, and firsts whose pair expired).
    pub singles: u64,
    /// Pairs started on a path because it had been idle for `probe_interval`.
    pub probes: u64,
    /// Pairs started round robin before every path had an estimate.
    pub startup_pairs: u64,
    /// SIG-ACK entries for packets PET does not remember, or on the wrong path.
    pub unknown_feedback: u64,
    /// Blackouts declared.
    pub blackouts: u64,
    /// Records forgotten because `max_records` was reached.
    pub records_evicted: u64,
    /// Packets other parts of the bond placed, accounted on their paths
    /// ([`Pet::account_extra`]).
    pub extra: u64,
    /// Padding pairs started ([`PetConfig::padding`]).
    pub padding_pairs: u64,
    /// Padding bytes sent (payload, as `len` counts it).
    pub padding_bytes: u64,
}

/// The PET scheduler (BAG paper section V-A): EDPF on packet-pair estimates.
///
/// # Polling
/// For every data packet, in FIFO order: [`schedule`](Self::schedule) with the sequence number
/// the striper will give it (`Striper::next_seq`) and whether it is a TCP retransmission, then
/// queue it on the returned path (`Striper::send_on`). Feed every SIG-ACK to
/// [`handle_sig_ack`](Self::handle_sig_ack). Call [`handle_timeout`](Self::handle_timeout) at
/// [`poll_timeout`](Self::poll_timeout), and drain [`poll_event`](Self::poll_event) after any of
/// these. Probe RTTs (from the session's probes) go to [`set_probe_rtt`](Self::set_probe_rtt).
/// `now` must never go backwards. Nothing here panics on any feedback a peer can send.
#[derive(Clone, Debug)]
pub struct Pet {
    config: PetConfig,
    edpf: Edpf,
    paths: Vec<PetPath>,
    /// The first packet of the open pair: (path, seq).
    open: Option<(PathId, u64)>,
    /// Next path of the start-up round robin.
    rr_next: usize,
    records: VecDeque<Record>,
    /// Padding packets sent, by id (without [`PADDING_ID_BIT`]), like `records`.
    pads: VecDeque<Record>,
    /// The next padding id (without the bit).
    next_pad: u64,
    /// The first of a padding pair whose second is still to go: (path, id).
    pad_open: Option<(PathId, u64)>,
    /// When the bond last carried traffic: data PET placed, or [`Pet::note_traffic`].
    last_traffic: Option<Instant>,
    events: VecDeque<PetEvent>,
    stats: PetStats,
}

impl Pet {
    /// PET for `config`.
    pub fn new(config: PetConfig) -> Result<Self, PetConfigError> {
        let n = config.paths;
        if n == 0 || n > MAX_PATHS {
            return Err(PetConfigError::PathCount(n));
        }
        if config.prior_rates_bps.len() != n {
            return Err(PetConfigError::RateCount {
                rates: config.prior_rates_bps.len(),
                paths: n,
            });
        }
        if let Some(i) = config.prior_rates_bps.iter().position(|&r| r == 0) {
            return Err(PetConfigError::ZeroRate(i));
        }
        if config.max_records == 0 {
            return Err(PetConfigError::NoRecords);
        }
        let edpf = Edpf::new(&config.prior_rates_bps, config.overhead_bytes);
        let paths = (0..n)
            .map(|_| PetPath {
                pair: PacketPair::new(),
                delivery: DeliveryRate::new(),
                accounted_bytes: 0,
                keys: 0,
                rate: None,
                owd: WindowedMin::default(),
                probe_delay: None,
                srtt: None,
                last_pair: None,
                last_measured: None,
                pad_sent: None,
                down: false,
                disabled: false,
                unreported: VecDeque::new(),
                in_flight: VecDeque::new(),
            })
            .collect();
        Ok(Pet {
            config,
            edpf,
            paths,
            open: None,
            rr_next: 0,
            records: VecDeque::new(),
            pads: VecDeque::new(),
            next_pad: 0,
            pad_open: None,
            last_traffic: None,
            events: VecDeque::new(),
            stats: PetStats::default(),
        })
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// The EDPF state PET schedules with (its `B_l`, `D_l`, `A_l`).
    pub fn edpf(&self) -> &Edpf {
        &self.edpf
    }

    /// The bandwidth estimate of `path` in bit/s, once a pair has been measured on it: the
    /// pair estimate, capped by what the path delivered while busy ([`DeliveryRate`]). EDPF
    /// schedules with it.
    pub fn estimate_bps(&self, path: PathId) -> Option<u64> {
        self.paths.get(path.index())?.rate
    }

    /// The packet-pair estimate of `path` alone, in bit/s (before the delivery-rate cap).
    pub fn pair_estimate_bps(&self, path: PathId) -> Option<u64> {
        self.paths.get(path.index())?.pair.estimate_bps()
    }

    /// The delivery-rate cap of `path` in bit/s, if it has one: the most it delivered while
    /// busy lately, raised by what it carried since or grown while it is not kept busy
    /// ([`DeliveryRate::cap_bps`]).
    pub fn delivery_cap_bps(&self, path: PathId) -> Option<u64> {
        let p = self.paths.get(path.index())?;
        p.delivery.cap_bps(self.config.probe_interval)
    }

    /// The bytes a packet of `len` payload bytes takes on the wire (`L`).
    fn wire(&self, len: u32) -> u64 {
        u64::from(len) + u64::from(self.config.overhead_bytes)
    }

    /// Set `path`'s rate to its pair estimate capped by its delivery rate, and no lower than
    /// its last delivery sample if that is fresh; whether it changed.
    fn refresh_rate(&mut self, path: PathId, now: Instant) -> bool {
        let interval = self.config.probe_interval;
        let p = &mut self.paths[path.index()];
        let cap = p.delivery.cap_bps(interval);
        let Some(pair) = p.pair.estimate_bps() else {
            return false;
        };
        // Never below what the path carried while busy just now: a pair estimate that low
        // is wrong (a start-up pair spaced by the sender, which later spaced pairs may not
        // lower, nor, while the path is under-used, raise).
        let floor = p.delivery.floor_bps(now, interval).unwrap_or(0);
        let capped = match cap {
            // Behind a policer the pairs read the wire's speed, or the sender's spacing when a
            // bucket is empty: its losses measured it, and only they count.
            Some(c) if p.delivery.policed(now) => c,
            Some(c) => c.min(pair),
            None => pair,
        };
        let rate = capped.max(floor).max(1);
        if p.rate == Some(rate) {
            return false;
        }
        p.rate = Some(rate);
        self.edpf.set_rate(path, rate);
        true
    }

    /// The one-way delay `D_l` PET uses for `path`, once known.
    pub fn delay(&self, path: PathId) -> Option<Duration> {
        let p = self.paths.get(path.index())?;
        (p.probe_delay.is_some() || p.owd.get().is_some()).then(|| self.edpf.delay(path))
    }

    /// The smoothed RTT of `path` from SIG-ACKs (data out, SIG-ACK back, batching included).
    pub fn rtt(&self, path: PathId) -> Option<Duration> {
        self.paths.get(path.index())?.srtt
    }

    /// Whether `path` is in EDPF's choice (not blacked out, not taken out by the driver).
    pub fn is_active(&self, path: PathId) -> bool {
        self.paths
            .get(path.index())
            .is_some_and(|p| !p.down && !p.disabled)
    }

    /// Whether `path` is measured as policed: an overload window ([`DeliveryRate`]) measured it
    /// within [`FLOOR_WINDOW`] of `now`, so its rate is its delivery cap alone (its pairs say
    /// nothing of it), grown four times slower.
    pub fn policed(&self, path: PathId, now: Instant) -> bool {
        self.paths
            .get(path.index())
            .is_some_and(|p| p.delivery.policed(now))
    }

    /// Whether every path the driver has not taken out has a bandwidth estimate (the start-up
    /// phase is over).
    pub fn estimated(&self) -> bool {
        self.paths
            .iter()
            .filter(|p| !p.disabled)
            .all(|p| p.pair.estimate_bps().is_some())
    }

    /// Take `path` out of PET's choice (`false`: the driver found it dead, e.g. its probes go
    /// unanswered) or put it back (`true`). A path taken out gets nothing, not even probe
    /// pairs, and does not hold up the start-up phase; PET's own blackouts are separate.
    pub fn set_path_enabled(&mut self, path: PathId, enabled: bool) {
        let Some(p) = self.paths.get_mut(path.index()) else {
            return;
        };
        p.disabled = !enabled;
        if !enabled {
            p.unreported.clear();
            p.in_flight.clear();
            if self.open.is_some_and(|(o, _)| o == path) {
                self.close_open_pair();
            }
            if self.pad_open.is_some_and(|(o, _)| o == path) {
                self.pad_open = None;
            }
        }
    }

    /// The first enabled path at or after `from` (round robin), or path 0 if none is.
    fn next_enabled(&self, from: usize) -> usize {
        let n = self.paths.len();
        (0..n)
            .map(|k| (from + k) % n)
            .find(|&i| !self.paths[i].disabled)
            .unwrap_or(0)
    }

    /// Counters.
    pub fn stats(&self) -> &PetStats {
        &self.stats
    }

    /// A probe RTT of `path` (e.g. from the session's probes at start-up): `D_l` is half of it
    /// until SIG-ACKs give relative one-way delays.
    pub fn set_probe_rtt(&mut self, path: PathId, rtt: Duration) {
        let Some(p) = self.paths.get_mut(path.index()) else {
            return;
        };
        let half = rtt / 2;
        p.probe_delay = Some(p.probe_delay.map_or(half, |d| d.min(half)));
        self.refresh_delays();
    }

    /// Adaptive SRR (beyond the paper): SRR quanta in bytes proportional to the estimates, the
    /// slowest path getting `max_packet` (the `q_i >= Max` rule of the stripe paper's section
    /// 5), or `None` until every path has an estimate.
    pub fn srr_quanta(&self, max_packet: u32) -> Option<Vec<u32>> {
        let rates: Option<Vec<u64>> = self.paths.iter().map(|p| p.rate).collect();
        let rates = rates?;
        let min = *rates.iter().min()?;
        Some(
            rates
                .iter()
                .map(|&r| {
                    let q = (u128::from(max_packet) * u128::from(r)).div_ceil(u128::from(min));
                    u32::try_from(q).unwrap_or(u32::MAX).max(max_packet)
                })
                .collect(),
        )
    }

    /// The path for data packet `seq` of `len` payload bytes, arriving at `now`; `retransmit`
    /// for a TCP retransmission (never paired). PET accounts the packet on that path (EDPF's
    /// `A_l = d_l`) and remembers it for the SIG-ACKs.
    pub fn schedule(&mut self, now: Instant, seq: u64, len: u32, retransmit: bool) -> PathId {
        self.check_blackouts(now);
        self.last_traffic = Some(now);
        if retransmit {
            self.close_open_pair();
            let path = self.choose_path(now, len);
            self.account(path, now, len, Some(seq));
            self.stats.singles += 1;
            self.remember(now, seq, len, path, Role::Single);
            return path;
        }
        if let Some((path, first)) = self.open.take() {
            // The second of a pair follows the first (section V-A), if it reaches the
            // bottleneck while the first is still there (by the estimates): otherwise the two
            // are no pair, and the spacing would measure the gap between them, not the path.
            let p = &self.paths[path.index()];
            if !p.down && self.in_time(path, now, first) {
                self.account(path, now, len, Some(seq));
                self.remember(now, seq, len, path, Role::Second { first });
                return path;
            }
            self.mark_single(first);
        }
        let path = self.pair_path(now, len);
        self.account(path, now, len, Some(seq));
        self.paths[path.index()].last_pair = Some(now);
        self.stats.pairs += 1;
        self.open = Some((path, seq));
        self.remember(now, seq, len, path, Role::First);
        path
    }

    /// Adaptive SRR (beyond the paper): SRR placed data packet `seq` of `len` bytes on `path`
    /// at `now`, and PET only measures. Consecutive packets on one path (SRR sends a quantum's
    /// worth in a row) pair up when the second reaches the bottleneck while the first is still
    /// there, by the estimates (as in [`schedule`](Self::schedule)); the SIG-ACKs then give
    /// estimates for [`srr_quanta`](Self::srr_quanta).
    pub fn observe(&mut self, now: Instant, seq: u64, len: u32, path: PathId) {
        if path.index() >= self.paths.len() {
            return;
        }
        self.check_blackouts(now);
        self.last_traffic = Some(now);
        let paired = self
            .open
            .is_some_and(|(p, first)| p == path && self.in_time(path, now, first));
        match self.open.take() {
            Some((_, first)) if paired => {
                self.account(path, now, len, Some(seq));
                self.remember(now, seq, len, path, Role::Second { first });
            }
            open => {
                if let Some((_, first)) = open {
                    self.mark_single(first);
                }
                self.account(path, now, len, Some(seq));
                self.paths[path.index()].last_pair = Some(now);
                self.stats.pairs += 1;
                self.open = Some((path, seq));
                self.remember(now, seq, len, path, Role::First);
            }
        }
    }

    /// Whether a packet sent on `path` at `now` reaches the bottleneck while `first`, the open
    /// pair's first packet, is still there, by the pair estimate. During start-up the prior
    /// rates say nothing, so every pair counts. EDPF's `A_l` runs at the capped rate, which
    /// behind a token bucket is far below the pairs' (the first packet, finding tokens, left at
    /// the wire's speed): judged by it, a second sent milliseconds later would count, arrive
    /// as far behind the first as it was sent, and measure the sender's spacing.
    fn in_time(&self, path: PathId, now: Instant, first: u64) -> bool {
        if !self.estimated() {
            return true;
        }
        let mut free = self.edpf.free_at(path);
        let p = &self.paths[path.index()];
        if let (Some(pair), Some(i)) = (p.pair.estimate_bps(), index_of(&self.records, first)) {
            let wire = self.wire(self.records[i].len);
            let capped = transmission_time(wire, self.edpf.rate(path));
            let sooner = capped.saturating_sub(transmission_time(wire, pair));
            let sooner = u64::try_from(sooner.as_nanos()).unwrap_or(u64::MAX);
            free = Instant::from_nanos(free.as_nanos().saturating_sub(sooner));
        }
        now + self.edpf.delay(path) < free
    }

    /// `len` bytes went on `path` at `now` that PET did not place (a resend inside the tunnel,
    /// a small packet sent on the fastest path, a duplicate, a class's packet under a path
    /// policy): EDPF's `A_l` must count them, or PET believes the path free while its queue
    /// holds them, and overfills it. Not remembered for the SIG-ACKs (never a pair).
    pub fn account_extra(&mut self, path: PathId, now: Instant, len: u32) {
        if path.index() < self.paths.len() {
            self.account(path, now, len, None);
            self.stats.extra += 1;
        }
    }

    /// EDPF's `A_l = d_l` for `len` bytes sent on `path` at `now` (data packet `seq`, if PET
    /// placed it), and the path's in-flight list for re-anchoring.
    fn account(&mut self, path: PathId, now: Instant, len: u32, seq: Option<u64>) {
        self.edpf.account(path, now, len);
        let wire = self.wire(len);
        let p = &mut self.paths[path.index()];
        p.accounted_bytes = p.accounted_bytes.wrapping_add(wire);
        while p.in_flight.front().is_some_and(|f| !f.is_key()) {
            p.in_flight.pop_front();
        }
        if p.in_flight.len() >= self.config.max_records {
            p.in_flight.pop_front();
        }
        p.in_flight.push_back(InFlight {
            seq,
            sent: now,
            len,
        });
    }

    /// The bond carries traffic PET does not place (the driver's own, such as segments of a
    /// transport that bypasses the striper): padding pairs keep measuring the paths for it
    /// ([`PetConfig::padding`]).
    pub fn note_traffic(&mut self, now: Instant) {
        self.last_traffic = Some(now);
    }

    /// When path `i` is due a padding pair, if it will be while the bond carries traffic: an
    /// unmeasured path every quarter `probe_interval`, a measured one once no pair has
    /// measured it for `probe_interval` and none was padding then. Padding is due only before
    /// `probe_interval` has passed since the last traffic, so an idle bond sends none, and a
    /// lone packet costs one pair on each path that was not measured in the last
    /// `probe_interval`.
    ///
    /// Data pairs that only show the sender's spacing do not count as measuring: a path EDPF
    /// under-uses because its estimate is low carries its data spaced, and such pairs may
    /// neither lower its estimate nor raise it past the sender's pace. Counted, they kept
    /// padding off the path, and its estimate stayed low for good (a client restarted while
    /// its bond carried light traffic took a 20 Mbit/s path's first pair at 0.36 Mbit/s and
    /// kept that for the 90 s left of the run, benchmarks.md "A soak").
    fn padding_due(&self, i: usize) -> Option<Instant> {
        self.config.padding?;
        let busy_until = self.last_traffic? + self.config.probe_interval;
        let p = &self.paths[i];
        if p.disabled {
            return None;
        }
        let due = if p.pair.estimate_bps().is_none() {
            p.pad_sent
                .map_or(Instant::ZERO, |t| t + self.config.probe_interval / 4)
        } else {
            p.last_measured
                .max(p.pad_sent)
                .map_or(Instant::ZERO, |t| t + self.config.probe_interval)
        };
        (due < busy_until).then_some(due)
    }

    /// The next padding packet to send, if one is due ([`PetConfig::padding`]); call until
    /// `None` after every [`schedule`](Self::schedule), [`note_traffic`](Self::note_traffic)
    /// and [`handle_timeout`](Self::handle_timeout). The two packets of a pair come one after
    /// the other, for the same path: queue them back to back on it. PET accounts them there
    /// (`A_l`, re-anchoring included) as it does data. Padding is not in the blackout check:
    /// a path that carries only padding is found dead by the driver's own probes
    /// ([`set_path_enabled`](Self::set_path_enabled)), not by PET.
    pub fn poll_padding(&mut self, now: Instant) -> Option<Padding> {
        let len = self.config.padding?;
        self.expire_traffic(now);
        if let Some((path, first)) = self.pad_open.take() {
            return Some(self.send_padding(now, path, len, Role::Second { first }));
        }
        let i = (0..self.paths.len()).find(|&i| self.padding_due(i).is_some_and(|t| t <= now))?;
        let path = PathId(i as u8);
        // A data pair open on the path would have its second behind the padding, and measure
        // three packets' spacing as one's: it is no pair.
        if self.open.is_some_and(|(o, _)| o == path) {
            self.close_open_pair();
        }
        let pad = self.send_padding(now, path, len, Role::First);
        let p = &mut self.paths[i];
        p.pad_sent = Some(now);
        p.last_pair = Some(now);
        self.pad_open = Some((path, pad.id));
        self.stats.padding_pairs += 1;
        Some(pad)
    }

    /// Forget the last traffic once it is `probe_interval` old: no padding is due after it.
    fn expire_traffic(&mut self, now: Instant) {
        if self
            .last_traffic
            .is_some_and(|t| t + self.config.probe_interval < now)
        {
            self.last_traffic = None;
        }
    }

    /// Account and remember one padding packet.
    fn send_padding(&mut self, now: Instant, path: PathId, len: u32, role: Role) -> Padding {
        let id = self.next_pad | PADDING_ID_BIT;
        self.next_pad += 1;
        self.account(path, now, len, None);
        self.stats.padding_bytes += u64::from(len);
        while self.pads.len() >= self.config.max_records {
            self.pads.pop_front();
            self.stats.records_evicted += 1;
        }
        let p = &mut self.paths[path.index()];
        p.keys += 1;
        let (key, bytes_at) = (Some(p.keys), p.accounted_bytes);
        self.pads.push_back(Record {
            seq: id,
            path,
            len,
            sent: now,
            role,
            arrival: None,
            key,
            bytes_at,
        });
        Padding { path, id, len }
    }

    /// The path for a new pair's first packet.
    fn pair_path(&mut self, now: Instant, len: u32) -> PathId {
        let n = self.paths.len();
        if !self.estimated() {
            // Start-up: pairs round robin until every path has an estimate.
            let i = self.next_enabled(self.rr_next);
            self.rr_next = (i + 1) % n;
            self.stats.startup_pairs += 1;
            return PathId(i as u8);
        }
        // A path idle for probe_interval (or down) gets this pair, unless padding measures it.
        let due = (0..n).filter(|_| self.config.padding.is_none()).find(|&i| {
            !self.paths[i].disabled
                && self.paths[i]
                    .last_pair
                    .is_none_or(|t| now.saturating_duration_since(t) >= self.config.probe_interval)
        });
        if let Some(i) = due {
            self.stats.probes += 1;
            return PathId(i as u8);
        }
        self.choose_path(now, len)
    }

    /// EDPF over the paths that are up; any enabled path if all are down. With
    /// [`PetConfig::equalized`], by release time: the delivery plus the hold the receiver
    /// adds, `D_max - D_l`.
    fn choose_path(&self, now: Instant, len: u32) -> PathId {
        if !self.estimated() {
            return PathId(self.next_enabled(self.rr_next.min(self.paths.len() - 1)) as u8);
        }
        let up = || (0..self.paths.len()).filter(|&i| self.is_active(PathId(i as u8)));
        let d_max = if self.config.equalized {
            up().map(|i| self.edpf.delay(PathId(i as u8))).max()
        } else {
            None
        };
        let best = up().min_by_key(|&i| {
            let path = PathId(i as u8);
            let d = self.edpf.delivery(path, now, len);
            d_max.map_or(d, |m| d + m.saturating_sub(self.edpf.delay(path)))
        });
        PathId(best.unwrap_or_else(|| self.next_enabled(0)) as u8)
    }

    fn close_open_pair(&mut self) {
        if let Some((_, first)) = self.open.take() {
            self.mark_single(first);
        }
    }

    fn mark_single(&mut self, seq: u64) {
        if let Some(r) = self.record_mut(seq) {
            r.role = Role::Single;
            self.stats.singles += 1;
        }
    }

    fn remember(&mut self, now: Instant, seq: u64, len: u32, path: PathId, role: Role) {
        if self.records.back().is_some_and(|r| r.seq >= seq) {
            // Sequence numbers must grow; a driver that reuses one gets no feedback for it.
            self.stats.unknown_feedback += 1;
            return;
        }
        while self.records.len() >= self.config.max_records {
            self.records.pop_front();
            self.stats.records_evicted += 1;
        }
        let expected = self.edpf.free_at(path);
        let p = &mut self.paths[path.index()];
        // The receiver reports every packet PET places but the smallest.
        let key = (len > crate::striper::SMALL_PACKET_BYTES).then(|| {
            p.keys += 1;
            p.keys
        });
        let bytes_at = p.accounted_bytes;
        self.records.push_back(Record {
            seq,
            path,
            len,
            sent: now,
            role,
            arrival: None,
            key,
            bytes_at,
        });
        // The receiver reports no packet this small (only the start-up, before the driver
        // has the paths' delays, sends one through PET): the blackout check must not wait
        // for it.
        if len <= crate::striper::SMALL_PACKET_BYTES {
            return;
        }
        let p = &mut self.paths[path.index()];
        if p.unreported.len() >= self.config.max_records {
            p.unreported.pop_front();
        }
        p.unreported.push_back((seq, expected));
    }

    fn record_mut(&mut self, seq: u64) -> Option<&mut Record> {
        let i = index_of(&self.records, seq)?;
        self.records.get_mut(i)
    }

    /// A SIG-ACK arrived at `now`: the arrival times of the packets it lists.
    pub fn handle_sig_ack(&mut self, now: Instant, entries: impl IntoIterator<Item = SigAckEntry>) {
        let mut latest: Vec<Option<(u64, Instant)>> = vec![None; self.paths.len()];
        for e in entries {
            if self.handle_entry(now, e) && e.seq & PADDING_ID_BIT == 0 {
                let l = &mut latest[e.path.index()];
                if l.is_none_or(|(s, _)| s < e.seq) {
                    *l = Some((e.seq, e.arrival));
                }
            }
        }
        self.refresh_delays();
        for (i, l) in latest.into_iter().enumerate() {
            if let Some((seq, arrival)) = l {
                self.reanchor(now, PathId(i as u8), seq, arrival);
            }
        }
    }

    /// Re-anchor `A_l` on what the receiver saw (a departure from the paper, whose `A_l` only
    /// ever follows its own predictions): packet `seq` left `path`'s bottleneck at `arrival`
    /// (receiver clock, moved to the sender's by the offset the one-way delays show); replaying
    /// Equation 1 over the packets sent on the path after it gives when the bottleneck frees
    /// now. Without this, the packets sent at start-up on prior rates, or any error of an
    /// estimate, would stay in `A_l` for good.
    fn reanchor(&mut self, now: Instant, path: PathId, seq: u64, arrival: Instant) {
        let (floor, Some(base), Some(_)) =
            (self.delay_floor(), self.owd_base(), self.estimate_bps(path))
        else {
            return;
        };
        // Receiver clock minus sender clock.
        let offset = base - i128::from(floor.as_nanos() as u64);
        let Ok(left) = u64::try_from(i128::from(arrival.as_nanos()) - offset) else {
            return;
        };
        let delay = self.edpf.delay(path);
        let rate = self.edpf.rate(path);
        let overhead = u64::from(self.config.overhead_bytes);
        let p = &mut self.paths[path.index()];
        // The packet itself (data sequence numbers grow, so the search stops at the first one
        // not below it); what was sent before it has left the bottleneck or was lost.
        let Some(at) = p
            .in_flight
            .iter()
            .position(|f| f.seq.is_some_and(|s| s >= seq))
            .filter(|&at| p.in_flight[at].seq == Some(seq))
        else {
            return;
        };
        p.in_flight.drain(..=at);
        // Everything sent on the path after it, data, padding and packets PET did not place,
        // in the order sent.
        let mut free = Instant::from_nanos(left);
        for f in &p.in_flight {
            let air = transmission_time(u64::from(f.len) + overhead, rate);
            free = (f.sent + delay).max(free) + air;
        }
        // A path that drops what exceeds its rate (a policer) shows no queue: what it kept
        // left at once, and `A_l` taken from it would grant again, at every SIG-ACK, the
        // backlog EDPF had already given it. While such a path is losing, `A_l` follows
        // EDPF's own predictions (the paper's rule) and moves only later.
        if p.delivery.policed(now) && p.delivery.losing(now, LOSING_WINDOW) {
            free = free.max(self.edpf.free_at(path));
        }
        self.edpf.set_free_at(path, free);
    }

    /// One entry; `false` if it was refused. Data and padding go the same way, each in its
    /// own records; only data counts for the blackout check (`unreported`).
    fn handle_entry(&mut self, now: Instant, e: SigAckEntry) -> bool {
        let padding = e.seq & PADDING_ID_BIT != 0;
        let records = if padding {
            &mut self.pads
        } else {
            &mut self.records
        };
        let Some(i) = index_of(records, e.seq) else {
            self.stats.unknown_feedback += 1;
            return false;
        };
        let r = &records[i];
        if r.path != e.path || r.arrival.is_some() {
            self.stats.unknown_feedback += 1;
            return false;
        }
        let (path, len, sent, role, key, bytes_at) =
            (r.path, r.len, r.sent, r.role, r.key, r.bytes_at);
        records[i].arrival = Some(e.arrival);
        let wire = u64::from(len) + u64::from(self.config.overhead_bytes);
        let half_window = self.config.delay_window.map(|w| w / 2);
        let p = &mut self.paths[path.index()];
        // The packet's transmission time at the path's best estimate so far, never at a rate
        // an outlier dragged down: subtracting too long a time would give a delay sample below
        // the truth, and the smallest sample is kept for good.
        let air = transmission_time(
            wire,
            p.pair
                .peak_bps()
                .unwrap_or(self.edpf.rate(path))
                .max(self.edpf.rate(path)),
        );
        // The path answers: it is up, and everything sent on it before this packet has either
        // been reported or was lost (paths are FIFO).
        if p.down {
            p.down = false;
            self.edpf.set_active(path, true);
            self.events.push_back(PetEvent::PathUp(path));
        }
        if !padding {
            while p.unreported.front().is_some_and(|&(s, _)| s <= e.seq) {
                p.unreported.pop_front();
            }
        }
        let owd = i128::from(e.arrival.as_nanos())
            - i128::from(sent.as_nanos())
            - i128::from(air.as_nanos() as u64);
        p.owd.update(now, owd, half_window);
        let overloads = p.delivery.overload_samples();
        let sustained = key.and_then(|key| {
            let report = Report {
                sent: i128::from(sent.as_nanos()),
                arrival: i128::from(e.arrival.as_nanos()),
                key,
                bytes_at,
                wire_bytes: wire,
                // `L / B` at a prior rate says nothing.
                delay: p.pair.peak_bps().map(|_| owd),
            };
            p.delivery
                .on_report(now, report, self.config.probe_interval)
        });
        let rtt = now.saturating_duration_since(sent);
        p.srtt = Some(match p.srtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
        // A pair is complete when both halves have arrived, whichever is reported last.
        // (the first's send and arrival, the second's send, arrival and length)
        let pair = match role {
            Role::Second { first } => index_of(records, first).and_then(|f| {
                let r1 = &records[f];
                r1.arrival.map(|a1| (r1.sent, a1, sent, e.arrival, len))
            }),
            Role::First => records
                .range(i + 1..)
                .find(|r| r.role == Role::Second { first: e.seq })
                .and_then(|r2| r2.arrival.map(|a2| (sent, e.arrival, r2.sent, a2, r2.len))),
            Role::Single => None,
        };
        let mut sampled = false;
        if let Some((s1, a1, s2, a2, len2)) = pair {
            let wire2 = self.wire(len2);
            let dispersion = a2.saturating_duration_since(a1);
            let gap = s2.saturating_duration_since(s1);
            let p = &mut self.paths[path.index()];
            // A second that did not queue behind the first arrives as far behind it as it was
            // sent: the spacing is the sender's (its pacing, or the whole-bond shaper's). It
            // shows only that the path is at least that fast, so it may raise the estimate but
            // not lower it: taken at face value it dragged an under-used path's estimate down
            // to the sender's pace, the shaper followed, and the path stayed under-used.
            let spaced = dispersion <= gap + gap / 8 + pair::MIN_DISPERSION;
            if spaced {
                // A lower bound: it may raise the estimate, or give a path its first, but
                // padding keeps measuring the path until a pair does (`padding_due`).
                if p.pair.raise(wire2, dispersion).is_some() {
                    self.stats.samples += 1;
                    sampled = true;
                } else {
                    self.stats.spaced_pairs += 1;
                }
            } else if p.pair.sample(wire2, dispersion).is_some() {
                self.stats.samples += 1;
                sampled = true;
                p.last_measured = Some(now);
            }
        }
        if sustained.is_some() {
            self.stats.delivery_samples += 1;
            if self.paths[path.index()].delivery.overload_samples() > overloads {
                self.stats.overload_samples += 1;
            }
        }
        // Every pair sample is told; a delivery sample only when it moves the rate.
        if self.refresh_rate(path, now) || sampled {
            self.push_estimate(path);
        }
        true
    }

    /// Tell the driver `path`'s rate.
    fn push_estimate(&mut self, path: PathId) {
        if let Some(rate_bps) = self.paths[path.index()].rate {
            self.events.push_back(PetEvent::Estimate { path, rate_bps });
        }
    }

    /// The smallest probe delay (zero without probes): the `D_l` of the shortest path.
    fn delay_floor(&self) -> Duration {
        self.paths
            .iter()
            .filter_map(|p| p.probe_delay)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// The smallest one-way sample over the paths (receiver clock minus sender clock).
    fn owd_base(&self) -> Option<i128> {
        self.paths.iter().filter_map(|p| p.owd.get()).min()
    }

    /// `D_l` = the smallest probe delay, plus how much longer path `l`'s one-way samples are
    /// than the smallest path's (the clock offset cancels); half the probe RTT where there are
    /// no samples.
    fn refresh_delays(&mut self) {
        let floor = self.delay_floor();
        let base = self.owd_base();
        for (i, p) in self.paths.iter().enumerate() {
            let d = match (p.owd.get(), base) {
                (Some(o), Some(b)) => {
                    let extra = u64::try_from(o - b).unwrap_or(u64::MAX);
                    floor.saturating_add(Duration::from_nanos(extra))
                }
                _ => match p.probe_delay {
                    Some(d) => d,
                    None => continue,
                },
            };
            self.edpf.set_delay(PathId(i as u8), d);
        }
    }

    /// When a blackout check or a padding pair ([`PetConfig::padding`]) is due: the earliest `expected + blackout_after` of an
    /// unreported packet on a path that is up.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let blackout = self
            .paths
            .iter()
            .filter(|p| !p.down)
            .filter_map(|p| p.unreported.front())
            .map(|&(_, expected)| expected.saturating_add(self.config.blackout_after));
        let padding = (0..self.paths.len()).filter_map(|i| self.padding_due(i));
        blackout.chain(padding).min()
    }

    /// Run the blackout check; padding that is due comes from
    /// [`poll_padding`](Self::poll_padding).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.check_blackouts(now);
        self.expire_traffic(now);
    }

    fn check_blackouts(&mut self, now: Instant) {
        let after = self.config.blackout_after;
        for (i, p) in self.paths.iter_mut().enumerate() {
            let late = p
                .unreported
                .front()
                .is_some_and(|&(_, expected)| now >= expected.saturating_add(after));
            if late && !p.down {
                p.down = true;
                // What was sent into the dark is not waited for again.
                p.unreported.clear();
                self.edpf.set_active(PathId(i as u8), false);
                self.stats.blackouts += 1;
                self.events.push_back(PetEvent::PathDown(PathId(i as u8)));
            }
        }
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<PetEvent> {
        self.events.pop_front()
    }
}

/// The index of the record numbered `seq` (records are in increasing order).
fn index_of(records: &VecDeque<Record>, seq: u64) -> Option<usize> {
    let i = records.partition_point(|r| r.seq < seq);
    records.get(i).filter(|r| r.seq == seq).map(|_| i)
}

#[cfg(test)]
mod tests;

//! The sustained rate of one path: what it delivered while its bottleneck was never idle.
//! Beyond the BAG paper, whose packet pairs (section V-A, [`super::PacketPair`]) measure the
//! rate at which one packet crosses the bottleneck.
//!
//! On the paper's links (a FIFO queue drained at `B_l`) the two are the same. Behind a token
//! bucket that queues (a `tbf` qdisc, a cellular scheduler's grants) they are not: while the
//! bucket holds tokens, a pair crosses it back to back, at the speed of the wire, and measures
//! many times the rate the bucket lets through in the long run. EDPF then believes the path
//! almost free and overfills its queue (docs/benchmarks.md, "PET behind token-bucket shapers":
//! estimates of 543-734 Mbit/s on links of 1-8 Mbit/s, a bond at a third of its sum). What a
//! path sustains shows while its queue is never empty, as BBR's delivery rate does: the bytes
//! that left it over an interval in which a packet was always waiting, over the interval's
//! length. In a token bucket that has a queue, there are no tokens left. (A policer that drops
//! what exceeds its rate instead of queueing it never shows a queue, and no sample.)
//!
//! **Busy.** Of two packets reported one after the other on a path, `x` then `y`, the
//! bottleneck was never idle from `x`'s departure to `y`'s if both of these hold:
//! - `y` reached the bottleneck before `x` left it: `sent_y + o <= arrival_x`, where `o` is the
//!   path's least `arrival - sent - L / B` over the last 5-10 s ([`FLOOR_WINDOW`], two halves:
//!   its delay, plus the offset between the two clocks, which cancels);
//! - `y` waited in the queue: its own `arrival - sent - L / B` is [`MIN_QUEUE`] or more above
//!   `o` (a floor a little too low, which an `L / B` at a stale rate gives, would pass the
//!   first test alone).
//!
//! A sender that spaces its packets itself (it sends at less than the path's rate) fails both,
//! so the cap never takes the sender's pace for the path's. A run of busy packets is a busy
//! period; its first packet's arrival starts a window, and once a window spans [`MIN_SPAN`]
//! and [`MIN_PACKETS`], the bytes that left the path in it over its span are a sample, and the
//! next window starts there.
//!
//! **Counted bytes.** Between two reports whose packets followed one another among those the
//! receiver reports ([`Report::key`]), everything accounted on the path between them: the
//! packets reported, and those the receiver does not report (small packets, resends inside the
//! tunnel), which took the bottleneck's time too ([`Report::bytes_at`]). After a reported
//! packet that was lost, only the later packet's own bytes: a queue that drops from its tail
//! under a steady overload loses one every few packets, and its windows must run across the
//! losses, or it would never give a sample; what was sent into it and dropped does not count.
//! Traffic PET does not see at all (another host's, a transport beside the striper) makes a
//! sample low: it is this bond's share of a busy path.
//!
//! **Overload.** A path that drops what exceeds its rate instead of queueing it (a policer,
//! as ISPs and mobile networks rate-limit with) never shows a queue, and gives no busy window.
//! It shows by its losses, as BBR detects a policer (`lt_bw`: 20% lost over an interval): a
//! window from one lost packet to a later one, at least [`OVERLOAD_SPAN`] long, in which
//! [`OVERLOAD_LOSS_PCT`] or more of the bytes sent were lost, and no two losses further apart
//! than [`MAX_OVERLOAD_GAP`], carried what the path lets through: its delivered bytes over its
//! span are a sample. Both its ends are at a loss, where a bucket held less than a packet, so
//! the bucket's burst does not count (and the last packet is left out, so a sample errs low).
//! Such a sample ends the cap's growth. It brings the cap below where it stood before growth
//! (a fall: a policer whose rate dropped) only if [`FALL_LOSS_PCT`] was lost, or if a tenth was
//! lost in two windows in a row that agree within an eighth (BBR's test for a policer's rate:
//! a path offered its cap, whose rate fell by a fifth, loses a fifth); a fall halves the cap at
//! most, and replaces it at once rather than after a window or two of larger samples. An
//! arrival gap over [`MAX_OVERLOAD_GAP`] (the path went dark, not a path that delivers little),
//! or a loss that long after the last, starts the window again; a window whose arrivals came in
//! bursts with pauses between ([`MAX_GAP_TO_MEAN`]) gives no sample. Random loss that high (a
//! tenth of what is sent, losses never 100 ms apart) is taken for the same thing: it ends
//! growth, and two agreeing windows take the cap down a tenth or so, once (not again until
//! the path has gone `interval` without a loss, as a policer offered its new rate does). At a
//! quarter, such a path is given what it delivers, and less each time, as what it is offered
//! shrinks with its cap (BBR's policer detection has the same blind spot).
//!
//! **Losses, not gaps.** A loss shows as a gap in the keys of the reports; so does a SIG-ACK
//! that was lost or overtaken by a later one on a faster path. The rules below act only when a
//! path lost twice within [`RAISE_SPAN`] ([`DeliveryRate::losing`]); the windows above count
//! every gap, but need many of them. (Two SIG-ACKs lost within half a second still look like a
//! path that loses: SIG-ACKs carry no number of their own.)
//!
//! **A first cap from a loss.** A path with no cap yet (never busy, never overloaded) that
//! loses is given what it delivered lately, lost packets or not: over the last [`RAISE_SPAN`]
//! or more, or over the window under way if more and at least [`OVERLOAD_SPAN`] long (a flow
//! in slow start). Behind a policer, a
//! sender that backs off at every loss (CUBIC through the tunnel) never overloads a path for
//! long, and the pairs go on reading the wire's speed, so EDPF keeps spreading the flow as if
//! every path were free, and the slowest path's losses hold the whole bond to a few times its
//! rate. The cap then grows as any does, and busy or overload windows replace it.
//!
//! **A loss ends growth.** Once a path's cap has grown a step, a loss takes it back to where it
//! stood before growth (or to what the path delivered over the last whole [`RAISE_SPAN`], if
//! more), as a loss ends BBR's
//! probing: growth overfilled the path, and a sender that backs off at every loss would never
//! overload it long enough for an overload window to say so. A lossy path still grows: the
//! raise below counts what arrived across losses.
//!
//! **Unless growth found room.** A path that loses a few percent at random (a radio link)
//! loses within every growth step, so the rule above would hold a cap far below the path's
//! rate (a policer's rate lifted, a first cap taken while the sender collapsed) there for good:
//! 2.6-4.1 Mbit/s after 10 s on a 10 Mbit/s path losing 1-3%, from a cap of 0.5. A raise
//! window that delivered more than an eighth above the cap before growth while losing at most
//! a sixteenth of what it was sent shows that the path carried more as it was offered more;
//! for [`ROOM_SPAN`] after it, losses do not end growth, and the cap compounds back to the
//! rate within 7 s. (A path taken for policed, measured by an overload window in the last
//! [`FLOOR_WINDOW`], still grows four times slower until that expires.) A policer whose bucket
//! is empty delivers no more when offered more and loses what is above (a fifth for one growth
//! step): no room. A bucket's burst after a pause can pass for room on a slow
//! policer (16 KiB over [`RAISE_SPAN`] is an eighth of 2.1 Mbit/s), and a policer that lets
//! through a little more than the cap before growth can show some; the overload windows, and
//! the next loss after [`ROOM_SPAN`], end that growth (a cap climbing from 0.5 Mbit/s into a
//! 4 Mbit/s policer that also loses 2% at random averages 4.14 Mbit/s after 10 s, 4.03
//! without this rule).
//!
//! **Cap.** [`DeliveryRate::cap_bps`] is the largest sample of the last one or two
//! `interval`s (two half windows, so one short window does not drag it down); after a quiet
//! spell, the cap from before stays until a whole `interval` of new samples confirms a lower
//! one. While the path carries reported packets that did not queue, none lost, and gives no
//! sample (it is no longer kept busy), the cap grows by [`GROWTH_PCT`] each `interval`, up to
//! [`GROWTH_STEPS`] steps (about twice the last cap), so a path that got faster is given more,
//! as BBR's bandwidth probing does. What it then carries shows, busy or not: a window of
//! [`RAISE_SPAN`] or more in which the path delivered more than the cap was before growth
//! (whether its queue filled or not, as BBR takes an app-limited sample that is above its
//! estimate) raises that, and the growth so far stays, so a raise never lowers the cap. A
//! bucket's burst can make a raise too high by up to the burst over [`RAISE_SPAN`] (16 KiB:
//! 0.26 Mbit/s) until busy samples replace it. The bound keeps a path that is never filled
//! (EDPF gives it less than it could carry) from growing a cap that protects nothing: after
//! 15 s a bucket's pairs would rule again. An idle path's cap does not grow: growth counts only
//! time between reports an `interval` or less apart.

use super::{PacketPair, WindowedMin};
use crate::scheduler::MAX_RATE_BPS;
use crate::time::{Duration, Instant};

/// The shortest window taken as a sample: the receiver's timestamps come in batches (an
/// interrupt, a GRO burst) a millisecond or so apart, 2% of this.
pub const MIN_SPAN: Duration = Duration::from_millis(50);

/// The fewest packets in a window taken as a sample.
pub const MIN_PACKETS: u32 = 4;

/// The least delay is the smallest of this long (two half windows): long enough to span the
/// times a path's queue drains, short enough to forget samples an early, low estimate spoiled,
/// or a route that got longer.
pub const FLOOR_WINDOW: Duration = Duration::from_secs(10);

/// The least wait in the queue that shows a packet queued: above the jitter of the two ends'
/// timestamps (the sender's loop and batching, the receiver's interrupts).
pub const MIN_QUEUE: Duration = Duration::from_millis(2);

/// How much the cap grows, in percent, for each `interval` without a sample.
pub const GROWTH_PCT: u32 = 25;

/// The most growth steps: 1.25^3, about twice the last cap.
pub const GROWTH_STEPS: u32 = 3;

/// How many times slower the cap grows on a path an overload window measured in the last
/// [`FLOOR_WINDOW`]: there, growth is paid in losses, not in queueing, so it probes every few seconds,
/// as BBR keeps a policer's rate for 48 round trips before it probes again.
pub const POLICED_GROWTH_SLOWDOWN: u32 = 4;

/// The shortest window whose delivery, busy or not, may raise the cap. Long against a
/// bucket's burst: 16 KiB let through at once adds 0.26 Mbit/s to a 500 ms window.
pub const RAISE_SPAN: Duration = Duration::from_millis(500);

/// A raise by more than `1 / ROOM_FRACTION` of the cap before growth, from a window that lost
/// at most a sixteenth of what it was sent, shows that growth found room on the path (it
/// delivered more as it was offered more), and for [`ROOM_SPAN`] after it a loss does not end
/// the growth: random loss of a few percent, which any window of a fast path holds, would
/// otherwise stop a cap far below the path's rate from ever climbing back. Offered more than a
/// policer lets through once its bucket is empty, a path delivers no more and loses what is
/// above, and its losses end growth again.
pub const ROOM_FRACTION: u64 = 8;

/// How long after a raise that found room ([`ROOM_FRACTION`]) losses do not end growth: the
/// next two raise windows, twice [`RAISE_SPAN`] (the raise is stamped as its window closes).
/// With a `probe_interval` shorter than this, growth may take more than one step through
/// losses.
pub const ROOM_SPAN: Duration = Duration::from_millis(1000);

/// The least share of the bytes sent in an overload window, in percent, that must be lost for
/// the window to show the path's rate. It then ends the cap's growth (a path offered 25% more
/// than a policer lets through, one growth step of [`GROWTH_PCT`], loses 20%), but brings the
/// cap no lower than it was before growth unless [`FALL_LOSS_PCT`] was lost.
pub const OVERLOAD_LOSS_PCT: u64 = 10;

/// The least share lost, in percent, for one overload window to bring the cap below what it
/// was before growth: a policer whose rate fell by a fifth or more (a throttled plan). BBR's
/// policer detection takes 20% (`lt_loss_thresh`). Random loss this high is taken for the
/// same: such a path is given what it delivers, and less each time, as what it is offered
/// shrinks with its cap.
pub const FALL_LOSS_PCT: u64 = 25;

/// The shortest overload window: long enough to hold several losses and to average the
/// receiver's timestamp batches (a policer of 1 Mbit/s passes 21 full packets in it).
pub const OVERLOAD_SPAN: Duration = Duration::from_millis(250);

/// The fewest packets delivered in an overload window (a policer of 0.5 Mbit/s passes 10 full
/// packets in [`OVERLOAD_SPAN`]): a few packets over a span say little of a path that lost most
/// of what it was sent.
pub const MIN_OVERLOAD_PACKETS: u32 = 10;

/// The longest gap inside an overload window between two arrivals, and between two losses.
/// A path that goes dark (an outage, a route change) is not one that delivers little; and a
/// path is overloaded throughout a window only if it keeps losing: a sender's burst that
/// overflows a bucket once, then little for a while, loses a fifth of a window that mostly
/// did not fill the path. At 1 Mbit/s, full packets pass a policer every 12 ms, and offered
/// 25% more it drops one every 60 ms; a policer below 0.6 Mbit/s shows only when offered more.
pub const MAX_OVERLOAD_GAP: Duration = Duration::from_millis(100);

/// An overload window ([`DeliveryRate`]'s "Overload").
#[derive(Clone, Copy, Debug)]
struct Overload {
    /// The arrival of its first packet, the first after a loss (receiver clock, ns).
    start: i128,
    /// Bytes accounted on the path up to that packet.
    sent_at: u64,
    /// Bytes delivered since.
    delivered: u64,
    /// Packets delivered since.
    packets: u32,
    /// The arrival of the last packet that followed a loss.
    last_loss: i128,
    /// The longest gap between two arrivals in it.
    max_gap: i128,
}

impl Overload {
    fn at(r: &Report) -> Overload {
        Overload {
            start: r.arrival,
            sent_at: r.bytes_at,
            delivered: 0,
            packets: 0,
            last_loss: r.arrival,
            max_gap: 0,
        }
    }
}

/// The longest gap between two arrivals in an overload window, in multiples of their mean
/// spacing (plus [`MIN_QUEUE`] of the timestamps' jitter). A path kept overloaded delivers
/// steadily, one packet each time its bucket holds one again; a sender's bursts that each
/// overflow a full bucket, with a pause between, deliver a bucket per burst, and the tokens of
/// the pause go unused: less than the path carries.
pub const MAX_GAP_TO_MEAN: i128 = 4;

/// One reported packet, as [`DeliveryRate::on_report`] takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// When it was sent (sender clock, ns).
    pub sent: i128,
    /// When it arrived (receiver clock, ns).
    pub arrival: i128,
    /// Its number among the packets of the path the receiver reports, in sending order.
    pub key: u64,
    /// Wire bytes accounted on the path up to and including it, in sending order.
    pub bytes_at: u64,
    /// Its own wire bytes.
    pub wire_bytes: u64,
    /// Its `arrival - sent - L / B` (ns, receiver clock minus sender clock); `None` while `B`
    /// is only a prior guess.
    pub delay: Option<i128>,
}

impl Report {
    /// Whether it is the next packet reported after `prev`: no reported packet between the
    /// two was lost (or its SIG-ACK missed).
    fn follows(&self, prev: &Report) -> bool {
        self.key == prev.key.saturating_add(1)
    }

    /// The bytes that left the path from `prev` to this packet: everything accounted
    /// between the two (small packets the receiver does not report, resends inside the
    /// tunnel), or after a loss only this packet's own (some of the rest never left).
    fn left_after(&self, prev: &Report) -> u64 {
        if self.follows(prev) {
            self.bytes_at.saturating_sub(prev.bytes_at)
        } else {
            self.wire_bytes
        }
    }
}

/// The delivery rate of one path while it was busy.
#[derive(Clone, Debug, Default)]
pub struct DeliveryRate {
    /// The path's least `arrival - sent - L / B` lately.
    floor: WindowedMin,
    /// The last packet reported.
    last: Option<Report>,
    /// When (sender clock) the last report came.
    last_now: Option<Instant>,
    /// The window being measured: its start (receiver clock, ns), the bytes that left the
    /// path after its start, and the packets that arrived after its start.
    window: Option<(i128, u64, u32)>,
    /// The window that may raise the cap, busy or not: its start, the bytes delivered since,
    /// and the bytes accounted on the path up to its start.
    raise_window: Option<(i128, u64, u64)>,
    /// The overload window being measured.
    overload: Option<Overload>,
    /// What the path delivered lately, lost packets or not: the window being measured (its
    /// start, bytes and packets delivered since) and the rate of the last whole one.
    recent: Option<(i128, u64, u32)>,
    recent_rate: Option<u64>,
    /// The largest sample in the current and the previous half window.
    current: Option<u64>,
    previous: Option<u64>,
    /// When the current half window started (sender clock).
    started: Instant,
    /// The cap as of the last sample.
    base: Option<u64>,
    /// Time the path carried reported packets since the last sample.
    quiet: Duration,
    /// When (sender clock) the last overload window gave a sample.
    last_overload: Option<Instant>,
    /// When (sender clock) the last two reports that followed a lost packet came, the later
    /// first: one gap alone may be a lost or overtaken SIG-ACK, not a lost packet.
    gaps: [Option<Instant>; 2],
    /// The rate of the last overload window, lost between a tenth and a quarter, that did not
    /// lower the cap (one that agrees with it may).
    pending_fall: Option<u64>,
    /// Whether two agreeing windows may make the cap fall: not again after they did, until
    /// the path has gone `interval` without a loss. A policer offered its new rate stops
    /// losing; random loss of a tenth goes on, and would otherwise take the cap down a tenth
    /// each time.
    agreement_spent: bool,
    /// When (sender clock) a window last raised the cap: the path delivered more than it
    /// had, so growth found room, and a loss then is not the path filling.
    last_raise: Option<Instant>,
    /// The last sample and when it was taken (sender clock).
    latest: Option<(u64, Instant)>,
    samples: u64,
    overload_samples: u64,
    raises: u64,
}

impl DeliveryRate {
    /// No samples yet.
    pub fn new() -> Self {
        DeliveryRate::default()
    }

    /// Samples taken (busy and overload windows).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Whether an overload window gave a sample within [`FLOOR_WINDOW`] of `now`: the path
    /// drops what exceeds its rate instead of queueing it, and its pairs, which cross a bucket
    /// at the wire's speed or lose their second (or wait behind the one packet a policer may
    /// hold), say nothing of its rate.
    pub fn policed(&self, now: Instant) -> bool {
        self.last_overload
            .is_some_and(|t| now.saturating_duration_since(t) <= FLOOR_WINDOW)
    }

    /// Whether the path lost packets twice, the second time within `within` of `now`, the
    /// first within `within` before that: one gap in the reports may be a SIG-ACK that was
    /// lost or overtaken, not a loss on the path.
    pub fn losing(&self, now: Instant, within: Duration) -> bool {
        match self.gaps {
            [Some(last), Some(before)] => {
                now.saturating_duration_since(last) <= within
                    && last.saturating_duration_since(before) <= within
            }
            _ => false,
        }
    }

    /// Whether a window raised the cap within [`ROOM_SPAN`] of `now` by more than
    /// [`ROOM_FRACTION`], losing little: growth found room, and a loss is not the path filling.
    fn found_room(&self, now: Instant) -> bool {
        self.last_raise
            .is_some_and(|t| now.saturating_duration_since(t) <= ROOM_SPAN)
    }

    /// Samples taken from overload windows (losses, not a queue).
    pub fn overload_samples(&self) -> u64 {
        self.overload_samples
    }

    /// Packet `r` was reported at `now`. Returns the sample it completes, if any; the cap
    /// halves its window every `interval`.
    pub fn on_report(&mut self, now: Instant, r: Report, interval: Duration) -> Option<u64> {
        if let Some(d) = r.delay {
            self.floor.update(now, d, Some(FLOOR_WINDOW / 2));
        }
        let min_queue = ns(MIN_QUEUE);
        let queued = r
            .delay
            .zip(self.floor.get())
            .is_some_and(|(d, f)| d.saturating_sub(f) >= min_queue);
        let prev = self.last;
        if prev.is_some_and(|p| r.key <= p.key) {
            // A SIG-ACK overtaken by a later one: it says nothing of the windows.
            self.forget_windows();
            return None;
        }
        // Growth counts time the path carried traffic without being kept busy: not a packet
        // that queued, nor one after a loss (a queue dropping from its tail, whose windows
        // may be too short for a sample).
        let continuous = prev.is_some_and(|p| r.follows(&p));
        let gap = prev.is_some() && !continuous;
        if gap {
            if self.gaps[0].is_none_or(|t| now.saturating_duration_since(t) >= interval) {
                self.agreement_spent = false;
            }
            self.gaps = [Some(now), self.gaps[0]];
        }
        if let Some(t) = self.last_now {
            let since = now.saturating_duration_since(t);
            if since <= interval && continuous && !queued {
                let since = if self.policed(now) {
                    since / POLICED_GROWTH_SLOWDOWN
                } else {
                    since
                };
                self.quiet = self.quiet.saturating_add(since);
            }
        }
        self.last_now = Some(now);
        self.last = Some(r);
        if prev.is_some_and(|p| r.arrival < p.arrival) {
            // Arrivals went backwards (a clock step at the receiver, or a lie): start afresh
            // from this one.
            self.forget_windows();
            return None;
        }
        self.follow_raise_window(now, prev, &r);
        let partial = self.follow_recent(prev, &r);
        let recent = self.recent_rate;
        let mut first = None;
        if gap && self.losing(now, RAISE_SPAN) {
            match self.base {
                None => {
                    if let Some(rate) = partial.max(recent) {
                        self.take(now, rate, interval);
                        first = Some(rate);
                    }
                }
                Some(base) if self.quiet >= interval && !self.found_room(now) => {
                    // A loss ends the growth (as a loss ends BBR's probing): the cap goes back
                    // to where it stood, or to what the path delivered lately if more.
                    self.quiet = Duration::ZERO;
                    if let Some(rate) = recent.filter(|&r| r > base) {
                        self.base = Some(rate);
                        self.current = Some(self.current.map_or(rate, |c| c.max(rate)));
                    }
                }
                Some(_) => {}
            }
        }
        if let Some((rate, fall)) = self.follow_overload_window(prev, &r) {
            self.window = None;
            if fall {
                self.fall_to(now, rate);
            } else {
                self.take(now, rate, interval);
            }
            self.overload_samples += 1;
            self.last_overload = Some(now);
            return Some(rate);
        }
        self.follow_busy_window(now, prev, &r, queued, interval)
            .or(first)
    }

    /// Drop every window under way and what they showed lately: the reports no longer follow
    /// one another in order (an overtaken SIG-ACK, arrivals that went backwards).
    fn forget_windows(&mut self) {
        self.window = None;
        self.raise_window = None;
        self.overload = None;
        self.recent = None;
        self.recent_rate = None;
        self.pending_fall = None;
        self.last_raise = None;
    }

    /// Extend the busy window to `r`, reported after `prev`; the sample it completes, if any.
    fn follow_busy_window(
        &mut self,
        now: Instant,
        prev: Option<Report>,
        r: &Report,
        queued: bool,
        interval: Duration,
    ) -> Option<u64> {
        let Some(prev) =
            prev.filter(|p| queued && r.sent.saturating_add(self.floor_or_max()) <= p.arrival)
        else {
            self.window = None;
            return None;
        };
        let left = r.left_after(&prev);
        let (start, bytes, packets) = self.window.get_or_insert((prev.arrival, 0, 0));
        *bytes = bytes.saturating_add(left);
        *packets = packets.saturating_add(1);
        let span = r.arrival - *start;
        if span < ns(MIN_SPAN) || *packets < MIN_PACKETS {
            return None;
        }
        let bytes = *bytes;
        self.window = Some((r.arrival, 0, 0));
        let rate = rate_over(bytes, span)?;
        self.take(now, rate, interval);
        Some(rate)
    }

    /// An overload window showed the path's rate fell: the cap is `rate` from now on, not the
    /// largest sample of the last interval or two.
    fn fall_to(&mut self, now: Instant, rate: u64) {
        self.latest = Some((rate, now));
        self.samples += 1;
        self.quiet = Duration::ZERO;
        self.current = Some(rate);
        self.previous = Some(rate);
        self.base = Some(rate);
        self.started = now;
        // The path is full: what showed room before no longer does.
        self.last_raise = None;
    }

    /// The least delay, or a value no send time passes the busy test with.
    fn floor_or_max(&self) -> i128 {
        self.floor.get().unwrap_or(i128::MAX)
    }

    /// Extend the raising window to `r`, reported after `prev`; raise the cap if the window
    /// is long enough and the path delivered more in it than the cap.
    fn follow_raise_window(&mut self, now: Instant, prev: Option<Report>, r: &Report) {
        let Some(prev) = prev else {
            self.raise_window = None;
            return;
        };
        // Across a loss, only what arrived counts (a lossy path that carries more than its cap
        // must be able to raise it).
        let left = r.left_after(&prev);
        let (start, delivered, sent_at) =
            self.raise_window
                .get_or_insert((prev.arrival, 0, prev.bytes_at));
        *delivered = delivered.saturating_add(left);
        let span = r.arrival - *start;
        if span < ns(RAISE_SPAN) {
            return;
        }
        let (delivered, sent) = (*delivered, r.bytes_at.saturating_sub(*sent_at));
        self.raise_window = Some((r.arrival, 0, r.bytes_at));
        let Some(rate) = rate_over(delivered, span) else {
            return;
        };
        // The growth so far stays (`quiet` is kept): a raise never lowers the cap.
        let Some(base) = self.base.filter(|&b| rate > b) else {
            return;
        };
        // Lost at most a sixteenth of what it was sent in the window.
        let kept_most = u128::from(delivered) * 16 >= u128::from(sent) * 15;
        if rate - base > base / ROOM_FRACTION && kept_most {
            // Growth found room: a loss now is not the path filling up.
            self.last_raise = Some(now);
        }
        self.base = Some(rate);
        self.current = Some(self.current.map_or(rate, |c| c.max(rate)));
        self.raises += 1;
    }

    /// Extend the window of what the path delivered lately to `r`, reported after `prev`;
    /// the rate of the window under way, once it spans [`OVERLOAD_SPAN`] and
    /// [`MIN_OVERLOAD_PACKETS`] (a flow in slow start delivers more now than over the last
    /// half second; a bucket's burst counts more in it, up to the burst over its span).
    fn follow_recent(&mut self, prev: Option<Report>, r: &Report) -> Option<u64> {
        let Some(prev) = prev.filter(|p| r.arrival - p.arrival <= ns(MAX_OVERLOAD_GAP)) else {
            self.recent = None;
            self.recent_rate = None;
            return None;
        };
        let left = r.left_after(&prev);
        let (start, bytes, packets) = self.recent.get_or_insert((prev.arrival, 0, 0));
        *bytes = bytes.saturating_add(left);
        *packets = packets.saturating_add(1);
        let span = r.arrival - *start;
        let now_rate = (span >= ns(OVERLOAD_SPAN) && *packets >= MIN_OVERLOAD_PACKETS)
            .then(|| rate_over(*bytes, span))
            .flatten();
        if span >= ns(RAISE_SPAN) && *packets >= MIN_OVERLOAD_PACKETS {
            self.recent_rate = now_rate;
            self.recent = Some((r.arrival, 0, 0));
        }
        now_rate
    }

    /// Extend the overload window to `r`, reported after `prev`; the rate it shows, if it
    /// ends at `r` having lost enough.
    fn follow_overload_window(&mut self, prev: Option<Report>, r: &Report) -> Option<(u64, bool)> {
        let base = self.base.unwrap_or(0);
        let gap = ns(MAX_OVERLOAD_GAP);
        let Some(prev) = prev.filter(|p| r.arrival - p.arrival <= gap) else {
            self.overload = None;
            self.pending_fall = None;
            return None;
        };
        let lost = !r.follows(&prev);
        let Some(w) = &mut self.overload else {
            if lost {
                self.overload = Some(Overload::at(r));
            }
            return None;
        };
        if lost && r.arrival - w.last_loss > gap {
            // The path stopped losing for a while: it was not overloaded throughout.
            *w = Overload::at(r);
            self.pending_fall = None;
            return None;
        }
        w.delivered = w.delivered.saturating_add(r.left_after(&prev));
        w.packets = w.packets.saturating_add(1);
        w.max_gap = w.max_gap.max(r.arrival - prev.arrival);
        if !lost {
            return None;
        }
        w.last_loss = r.arrival;
        let span = r.arrival - w.start;
        if span < ns(OVERLOAD_SPAN) || w.packets < MIN_OVERLOAD_PACKETS {
            return None;
        }
        let (sent, delivered) = (r.bytes_at.saturating_sub(w.sent_at), w.delivered);
        let steady = w.max_gap.saturating_mul(i128::from(w.packets))
            <= span
                .saturating_mul(MAX_GAP_TO_MEAN)
                .saturating_add(ns(MIN_QUEUE).saturating_mul(i128::from(w.packets)));
        *w = Overload::at(r);
        let kept = u128::from(delivered) * 100;
        let lost_pct = |pct: u64| kept <= u128::from(sent) * u128::from(100 - pct);
        if !lost_pct(OVERLOAD_LOSS_PCT) || !steady {
            self.pending_fall = None;
            return None;
        }
        // What passed is at most the rate over the span and the tokens left at its start,
        // under a packet; the last packet is left out, so a sample errs low, not high (high,
        // a cap loses a little all the time; low, growth finds the rest).
        let rate = rate_over(delivered.saturating_sub(r.wire_bytes), span)?;
        // A fall: a quarter lost, or a tenth in two windows in a row that agree within an
        // eighth (BBR's test for a policer's rate). One window halves the cap at most: a
        // throttled plan's fall from 50 to 1 Mbit/s takes six windows, under two seconds; a
        // window that misjudged a path costs half of it.
        let agreed = self
            .pending_fall
            .filter(|&p| !self.agreement_spent && p.abs_diff(rate) <= p.max(rate) / 8)
            .map(|p| (p + rate) / 2);
        if lost_pct(FALL_LOSS_PCT) || agreed.is_some() {
            self.pending_fall = None;
            self.agreement_spent |= agreed.is_some();
            let rate = agreed.map_or(rate, |a| a.max(rate));
            if base > 0 && rate > base {
                // Not a fall: a sample above the cap, taken as any.
                return Some((rate, false));
            }
            return Some((rate.max(base / 2), true));
        }
        self.pending_fall = (rate < base).then_some(rate);
        Some((rate.max(base), false))
    }

    /// Times the cap was raised by what the path carried without being kept busy.
    pub fn raises(&self) -> u64 {
        self.raises
    }

    fn take(&mut self, now: Instant, rate: u64, interval: Duration) {
        self.latest = Some((rate, now));
        let age = now.saturating_duration_since(self.started);
        if age >= interval.saturating_mul(2) {
            // After a quiet spell the cap from before stands for one more half window, so a
            // single short window cannot bring it down alone.
            self.previous = self.base;
            self.current = Some(rate);
            self.started = now;
        } else if age >= interval {
            self.previous = self.current;
            self.current = Some(rate);
            self.started = now;
        } else {
            self.current = Some(self.current.map_or(rate, |c| c.max(rate)));
        }
        self.samples += 1;
        self.quiet = Duration::ZERO;
        self.base = self.current.max(self.previous);
    }

    /// The last sample, if it was taken within `interval` of `now`: the path has just carried
    /// that much while busy, so it is at least that fast. A floor for the pair estimate,
    /// which a low pair (one the sender's spacing made, taken before the path had an
    /// estimate) can hold below what the path plainly carries.
    pub fn floor_bps(&self, now: Instant, interval: Duration) -> Option<u64> {
        self.latest
            .filter(|&(_, at)| now.saturating_duration_since(at) <= interval)
            .map(|(r, _)| r)
    }

    /// The most the path has sustained lately, in bit/s: the largest sample of the last one or
    /// two `interval`s (or what it carried since, if more), grown by [`GROWTH_PCT`] for each
    /// whole `interval` the path has carried reported packets since without a sample, at most
    /// [`GROWTH_STEPS`] times; `None` before the first sample.
    pub fn cap_bps(&self, interval: Duration) -> Option<u64> {
        let base = self.base?;
        let steps = if interval.is_zero() {
            0
        } else {
            self.quiet.as_nanos() / interval.as_nanos()
        };
        let steps = u32::try_from(steps).map_or(GROWTH_STEPS, |s| s.min(GROWTH_STEPS));
        let factor = (1.0 + f64::from(GROWTH_PCT) / 100.0).powi(steps as i32);
        let grown = (base as f64 * factor).ceil().min(MAX_RATE_BPS as f64);
        Some(grown as u64)
    }
}

/// `d` in nanoseconds, as the reports' times are.
fn ns(d: Duration) -> i128 {
    i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)
}

/// The rate of `bytes` over `span_ns` (at least [`MIN_SPAN`]), as a pair's sample is
/// ([`PacketPair::sample_rate`]: `None` for a rate of 0 or above every link's).
fn rate_over(bytes: u64, span_ns: i128) -> Option<u64> {
    let span = u64::try_from(span_ns).ok()?;
    PacketPair::sample_rate(bytes, Duration::from_nanos(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i128 = 1_000_000;
    const SECOND: Duration = Duration::from_secs(1);

    /// A FIFO path of `rate_bps` and 10 ms delay, no clock offset, every packet reported 20
    /// ms after it arrives, and `L / B` taken at `peak_bps`.
    struct Path {
        d: DeliveryRate,
        rate_bps: u64,
        peak_bps: u64,
        free: i128,
        key: u64,
        bytes: u64,
        samples: Vec<u64>,
        /// The most a packet may wait in the queue; later ones are dropped at its tail.
        limit: Option<i128>,
    }

    impl Path {
        fn new(rate_bps: u64) -> Path {
            Path {
                d: DeliveryRate::new(),
                rate_bps,
                peak_bps: rate_bps,
                free: 0,
                key: 0,
                bytes: 0,
                samples: Vec::new(),
                limit: None,
            }
        }

        fn air(bytes: u64, rate: u64) -> i128 {
            i128::from(bytes * 8 * 1_000_000_000 / rate)
        }

        /// Send a packet of `len` bytes at `sent_ms`.
        fn send(&mut self, sent_ns: i128, len: u64) {
            self.key += 1;
            self.bytes += len;
            let start = self.free.max(sent_ns + 10 * MS);
            if self.limit.is_some_and(|l| start - (sent_ns + 10 * MS) > l) {
                // Dropped at the queue's tail: never reported.
                return;
            }
            self.free = start + Self::air(len, self.rate_bps);
            let r = Report {
                sent: sent_ns,
                arrival: self.free,
                key: self.key,
                bytes_at: self.bytes,
                wire_bytes: len,
                delay: Some(self.free - sent_ns - Self::air(len, self.peak_bps)),
            };
            let now = Instant::from_nanos(u64::try_from(self.free + 20 * MS).unwrap());
            self.samples.extend(self.d.on_report(now, r, SECOND));
        }

        /// Send `n` packets of `len` bytes `gap_us` apart from `from_ms`.
        fn offer(&mut self, from_ms: i128, gap_us: i128, n: i128, len: u64) {
            for k in 0..n {
                self.send(from_ms * MS + k * gap_us * 1000, len);
            }
        }
    }

    #[test]
    fn a_backlogged_path_shows_its_rate() {
        // 2 Mbit/s offered 10 Mbit/s: always busy after the first packet.
        let mut p = Path::new(2_000_000);
        p.offer(0, 1200, 200, 1500);
        assert!(p.samples.len() > 2, "{:?}", p.samples);
        assert!(p.samples.iter().all(|&r| r == 2_000_000), "{:?}", p.samples);
        assert_eq!(p.d.cap_bps(SECOND), Some(2_000_000));
    }

    #[test]
    fn a_sender_slower_than_the_path_gives_no_sample() {
        // 10 Mbit/s offered 5 Mbit/s: each packet finds the bottleneck free.
        let mut p = Path::new(10_000_000);
        p.offer(0, 2400, 2000, 1500);
        assert!(p.samples.is_empty());
        assert_eq!(p.d.cap_bps(SECOND), None);
    }

    #[test]
    fn a_stale_rate_and_mixed_sizes_do_not_pass_for_a_queue() {
        // A path measured at 8 Mbit/s that now runs at 2, carrying 1.2 Mbit/s of full packets
        // and every seventh one short: `L / B` at 8 Mbit/s puts a lone full packet 3.6 ms
        // above a short one, as if it had queued. It did not: no sample, no cap at the
        // sender's pace.
        let mut p = Path::new(2_000_000);
        p.peak_bps = 8_000_000;
        for k in 0..3000i128 {
            let len = if k % 7 == 6 { 300 } else { 1500 };
            p.send(k * 10 * MS, len);
        }
        assert!(
            p.samples.is_empty(),
            "{:?}",
            &p.samples[..p.samples.len().min(5)]
        );
    }

    #[test]
    fn unreported_packets_count_and_a_lost_one_ends_the_window() {
        // Every other packet is one the receiver does not report (its bytes still count).
        let mut p = Path::new(2_000_000);
        for k in 0..200i128 {
            p.free = p.free.max(k * 1200 * 1000 + 10 * MS) + Path::air(1500, 2_000_000);
            p.bytes += 1500;
            if k % 2 == 1 {
                // The next one is reported as usual.
                continue;
            }
            p.key += 1;
            let r = Report {
                sent: k * 1200 * 1000,
                arrival: p.free,
                key: p.key,
                bytes_at: p.bytes,
                wire_bytes: 1500,
                delay: Some(p.free - k * 1200 * 1000 - Path::air(1500, 2_000_000)),
            };
            let now = Instant::from_nanos(u64::try_from(p.free + 20 * MS).unwrap());
            p.samples.extend(p.d.on_report(now, r, SECOND));
        }
        assert!(!p.samples.is_empty());
        assert!(p.samples.iter().all(|&r| r == 2_000_000), "{:?}", p.samples);
    }

    #[test]
    fn a_queue_that_drops_from_its_tail_is_measured_and_its_cap_does_not_grow() {
        // 1 Mbit/s with a 50 ms queue (a `tbf ... latency 50ms`), offered 1.5 Mbit/s: a third
        // of the packets are dropped, a loss every few packets, and the path is busy
        // throughout. Windows run across the losses, counting what left.
        let mut p = Path::new(1_000_000);
        p.limit = Some(50 * MS);
        p.offer(0, 8000, 1000, 1500);
        assert!(p.samples.len() > 20, "{:?}", p.samples);
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap.abs_diff(1_000_000) <= 50_000, "{cap}");
        assert_eq!(p.d.quiet, Duration::ZERO);
    }

    /// A policer of `rate_bps` with a bucket of `burst` bytes (full at the start) and no
    /// queue, on a 100 Mbit/s wire with 10 ms of delay; every packet it passes is reported
    /// 20 ms after it arrives, and `lose_pct` of those are lost after it at random (a
    /// deterministic generator).
    struct Policer {
        d: DeliveryRate,
        rate_bps: u64,
        burst: u64,
        tokens: u64,
        at: i128,
        key: u64,
        bytes: u64,
        samples: Vec<u64>,
        lose_pct: u64,
        rng: u64,
        passed: u64,
    }

    impl Policer {
        fn new(rate_bps: u64, burst: u64) -> Policer {
            Policer {
                d: DeliveryRate::new(),
                rate_bps,
                burst,
                tokens: burst,
                at: 0,
                key: 0,
                bytes: 0,
                samples: Vec::new(),
                lose_pct: 0,
                rng: 0x9E37_79B9_7F4A_7C15,
                passed: 0,
            }
        }

        fn send(&mut self, sent: i128, len: u64) {
            self.key += 1;
            self.bytes += len;
            let reach = sent + 10 * MS;
            let refill = u64::try_from((reach - self.at) * i128::from(self.rate_bps) / 8).unwrap()
                / 1_000_000_000;
            if refill > 0 {
                self.tokens = (self.tokens + refill).min(self.burst);
                self.at = reach;
            }
            if self.tokens < len {
                return;
            }
            self.tokens -= len;
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if self.rng % 100 < self.lose_pct {
                return;
            }
            self.passed += len;
            let arrival = reach + Path::air(len, 100_000_000);
            let r = Report {
                sent,
                arrival,
                key: self.key,
                bytes_at: self.bytes,
                wire_bytes: len,
                delay: Some(10 * MS),
            };
            let now = Instant::from_nanos(u64::try_from(arrival + 20 * MS).unwrap());
            self.samples.extend(self.d.on_report(now, r, SECOND));
        }

        fn offer(&mut self, from_ms: i128, gap_us: i128, n: i128, len: u64) {
            for k in 0..n {
                self.send(from_ms * MS + k * gap_us * 1000, len);
            }
        }

        /// A sender that offers `offer_pct` of the cap (at most 10 Mbit/s) each second, paced,
        /// for `secs` seconds; the cap at the start of each second.
        fn offer_cap_each_second(&mut self, offer_pct: u64, secs: i128) -> Vec<u64> {
            let mut caps = Vec::new();
            for second in 0..secs {
                let cap = self.d.cap_bps(SECOND).unwrap().min(10_000_000);
                caps.push(cap);
                let gap_us = i128::from(1500 * 8 * 1_000_000 / (cap * offer_pct / 100));
                self.offer(second * 1000, gap_us, 1_000_000 / gap_us, 1500);
            }
            caps
        }
    }

    #[test]
    fn a_policer_shows_its_rate_by_its_losses() {
        // 1 Mbit/s behind a 16 KiB bucket with no queue, offered 3 Mbit/s for 5 s: no packet
        // ever queues, two of three are dropped, and the windows between losses carry what
        // the policer lets through.
        let mut p = Policer::new(1_000_000, 16 * 1024);
        p.offer(0, 4000, 1250, 1500);
        assert!(p.d.overload_samples() > 8, "{:?}", p.samples);
        // The first loss's sample, before any window closed, counts the bucket's burst
        // (2.16 Mbit/s); the windows bring the cap down to the rate, halving it at most.
        assert!(p.d.samples() - p.d.overload_samples() <= 1);
        for &s in &p.samples[2..] {
            assert!(s.abs_diff(1_000_000) <= 100_000, "{:?}", p.samples);
        }
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap.abs_diff(1_000_000) <= 100_000, "{cap}");
        // Offered 1.5 times its rate, a third lost: the same.
        let mut p = Policer::new(2_000_000, 16 * 1024);
        p.offer(0, 4000, 1250, 1500);
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap.abs_diff(2_000_000) <= 200_000, "{cap} {:?}", p.samples);
    }

    #[test]
    fn bursts_that_overflow_a_full_bucket_are_not_overload() {
        // A sender's bursts of 30 packets every 80 ms into a 4 Mbit/s policer with a 16 KiB
        // bucket: each burst loses two thirds, yet the bucket fills again in each pause, and
        // what passes (1.6 Mbit/s) is not the path's rate. Only the first loss gives a cap,
        // what the path carried; no overload window brings it lower.
        let mut p = Policer::new(4_000_000, 16 * 1024);
        for burst in 0..60i128 {
            p.offer(burst * 80, 120, 30, 1500);
        }
        assert_eq!(p.d.overload_samples(), 0, "{:?}", p.samples);
        assert!(p.samples.len() <= 1, "{:?}", p.samples);
    }

    #[test]
    fn a_path_with_no_cap_that_loses_is_given_what_it_delivered() {
        // A sender that backs off (CUBIC): 0.9 Mbit/s into a 1 Mbit/s policer, and once a
        // burst of 20 packets at the wire's speed, which loses most of it. The path never
        // queues and is never overloaded for long; its first loss caps it at what it carried.
        let mut p = Policer::new(1_000_000, 16 * 1024);
        p.offer(0, 13_333, 150, 1500);
        assert_eq!(p.d.cap_bps(SECOND), None);
        p.offer(2000, 100, 20, 1500);
        p.offer(2010, 13_333, 10, 1500);
        // One loss alone may be a lost SIG-ACK: no cap yet. A second within half a second is
        // a path that loses.
        assert_eq!(p.d.cap_bps(SECOND), None);
        p.offer(2200, 100, 20, 1500);
        p.offer(2210, 13_333, 10, 1500);
        let cap = p.d.cap_bps(SECOND).unwrap();
        // (The bucket's 16 KiB that the burst took at once count too: 0.26 Mbit/s over the
        // 500 ms.)
        assert!((800_000..=1_300_000).contains(&cap), "{cap}");
        assert_eq!(p.d.overload_samples(), 0);
    }

    #[test]
    fn light_random_loss_and_an_outage_are_not_overload() {
        // 5% lost at random below the rate: no overload. The first loss gives the path, which
        // had no cap, what it delivers (4.75 Mbit/s), and the cap then grows while it carries
        // that: never below it.
        let mut p = Policer::new(10_000_000, 64 * 1024);
        p.lose_pct = 5;
        p.offer(0, 2400, 4000, 1500);
        assert_eq!(p.d.overload_samples(), 0);
        assert!(
            p.samples.len() <= 1,
            "{:?}",
            &p.samples[..p.samples.len().min(5)]
        );
        assert!(p.d.cap_bps(SECOND).is_some_and(|c| c >= 4_500_000));
        // Measured at 1 Mbit/s; then the path goes dark for two seconds while the sender
        // goes on: nothing arrives, and the window across the gap gives no sample.
        let mut p = Policer::new(1_000_000, 16 * 1024);
        p.offer(0, 4000, 500, 1500);
        let (before, cap) = (p.d.samples(), p.d.cap_bps(SECOND));
        p.rate_bps = 1;
        p.tokens = 0;
        p.offer(2000, 4000, 500, 1500);
        assert_eq!(p.d.samples(), before);
        assert_eq!(p.d.cap_bps(SECOND), cap);
        // The path comes back, overloaded as before: the first windows after the gap are at
        // its rate, not at what the dark seconds delivered.
        p.rate_bps = 1_000_000;
        let seen = p.samples.len();
        p.offer(4000, 4000, 500, 1500);
        assert!(p.d.samples() > before);
        for &s in &p.samples[seen..] {
            assert!(s.abs_diff(1_000_000) <= 100_000, "{:?}", &p.samples[seen..]);
        }
    }

    #[test]
    fn a_lossy_path_given_what_its_cap_allows_still_grows() {
        // 1% lost at random on a 10 Mbit/s path with a cap of 2 (a wrong first reading): a
        // sender that offers 95% of the cap each second. Growth stops at a loss only once it
        // has grown, and what the path delivers across its losses raises the cap.
        let mut p = Policer::new(10_000_000, 1 << 30);
        p.lose_pct = 1;
        p.d.base = Some(2_000_000);
        p.offer_cap_each_second(95, 30);
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap >= 7_000_000, "{cap}");
    }

    /// A sender that offers `offer_pct` of the cap each second for `secs` seconds, on a 10
    /// Mbit/s path that loses `loss_pct` at random and whose cap starts at 0.5 Mbit/s; the
    /// cap at the start of each second.
    fn climb(loss_pct: u64, offer_pct: u64, secs: i128) -> Vec<u64> {
        let mut p = Policer::new(10_000_000, 1 << 30);
        p.lose_pct = loss_pct;
        p.d.base = Some(500_000);
        p.offer_cap_each_second(offer_pct, secs)
    }

    #[test]
    fn a_cap_far_below_a_lossy_path_climbs_back() {
        // A cap of 0.5 Mbit/s on a 10 Mbit/s path that loses 1-3% at random (a radio link
        // whose policer was just lifted): every growth step meets a loss. Each raise by more
        // than an eighth with little lost shows the room, and losses then do not end growth:
        // the cap is at 8 Mbit/s or more within 10 s. (Without it, losses stopped growth at
        // each step: 2.6-4.1 Mbit/s after 10 s, 3.4-9.3 after 30.)
        for loss in [1, 2, 3] {
            let caps = climb(loss, 95, 12);
            assert!(caps[10] >= 8_000_000, "{loss}%: {caps:?}");
        }
    }

    #[test]
    fn climbing_into_a_policer_through_random_loss_stops_near_its_rate() {
        // A cap of 0.5 Mbit/s on a path behind a 4 Mbit/s policer (16 KiB bucket) that also
        // loses 2% at random, its sender offering the whole cap, paced: the windows show room
        // on the way up, and at the policer the losses (a fifth of each growth step) and the
        // overload windows stop the climb. Seconds 10-30: the cap's mean within a tenth of the
        // rate, never twice it.
        let mut p = Policer::new(4_000_000, 16 * 1024);
        p.lose_pct = 2;
        p.d.base = Some(500_000);
        let (mut sum, mut high, mut budget) = (0, 0, 0);
        for tick in 0..3000i128 {
            let cap = p.d.cap_bps(SECOND).unwrap();
            if tick >= 1000 {
                sum += cap;
                high = high.max(cap);
            }
            // 10 ms of the cap, paced; what does not fill a packet carries over.
            budget += cap / 800;
            let n = i128::from(budget / 1500);
            budget %= 1500;
            if n > 0 {
                p.offer(tick * 10, 10_000 / n, n, 1500);
            }
        }
        let mean = sum / 2000;
        assert!(mean.abs_diff(4_000_000) <= 400_000, "{mean}");
        assert!(high < 8_000_000, "{high}");
    }

    #[test]
    fn random_loss_of_a_seventh_takes_the_cap_down_once_not_for_good() {
        // 15% lost at random on a 10 Mbit/s path capped at 8, a sender that offers the cap:
        // the windows lose a tenth and more, and agree, as a policer's would. The cap falls
        // once; as the loss goes on, it falls no further.
        let mut p = Policer::new(10_000_000, 1 << 30);
        p.lose_pct = 15;
        p.d.base = Some(8_000_000);
        let low = p.offer_cap_each_second(100, 30).into_iter().min().unwrap();
        assert!(low >= 5_500_000, "{low}");
    }

    #[test]
    fn a_policer_whose_rate_falls_by_a_fifth_is_followed() {
        // Measured at 10 Mbit/s; the policer drops to 8 while the sender keeps offering the
        // cap: a fifth is lost, under the quarter one window needs, and two windows that
        // agree bring the cap down.
        let mut p = Policer::new(10_000_000, 16 * 1024);
        p.offer(0, 800, 2500, 1500);
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap.abs_diff(10_000_000) <= 1_000_000, "{cap}");
        p.rate_bps = 8_000_000;
        let gap_us = i128::from(1500 * 8 * 1_000_000 / cap);
        p.offer(2000, gap_us, 3_000_000 / gap_us, 1500);
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap.abs_diff(8_000_000) <= 800_000, "{cap}");
    }

    #[test]
    fn heavy_random_loss_is_given_what_it_delivers() {
        // A fifth and more lost at random looks like overload: the path is given what it
        // carried (documented), never less.
        let mut p = Policer::new(10_000_000, 64 * 1024);
        p.lose_pct = 30;
        p.offer(0, 2400, 4000, 1500);
        let offered: u64 = 5_000_000;
        assert!(p.d.overload_samples() > 0);
        for &s in &p.samples {
            assert!(s >= offered / 2 && s <= offered, "{:?}", p.samples);
        }
        assert!(p.passed > 0);
    }

    #[test]
    fn an_idle_gap_ends_the_window() {
        let mut p = Path::new(2_000_000);
        p.offer(0, 1200, 30, 1500);
        let before = p.d.samples();
        // The next packet comes 1 s later to an empty queue: no sample may span the gap.
        p.offer(1000, 1200, 1, 1500);
        assert_eq!(p.d.samples(), before);
        assert!(p.d.window.is_none());
    }

    #[test]
    fn the_cap_grows_only_while_the_path_carries_traffic() {
        let mut p = Path::new(2_000_000);
        p.offer(0, 1200, 200, 1500);
        let cap = p.d.cap_bps(SECOND).unwrap();
        // Ten idle seconds: no growth.
        p.offer(10_000, 20_000, 1, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(cap));
        assert_eq!(p.d.cap_bps(SECOND), Some(cap));
        // Two seconds of traffic well below the rate: two steps.
        p.offer(10_020, 20_000, 101, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(cap * 25 / 16));
        // At most three.
        p.d.quiet = SECOND * 200;
        assert_eq!(p.d.cap_bps(SECOND), Some(cap * 125 / 64));
    }

    #[test]
    fn a_path_that_got_faster_raises_its_cap_by_what_it_carries() {
        // Measured busy at 2 Mbit/s; the path becomes 8 Mbit/s and is offered what the grown
        // cap lets through, 95% of it each second: its deliveries lift the cap, step by step,
        // to the new rate, without its queue ever filling.
        let mut p = Path::new(2_000_000);
        p.offer(0, 1200, 200, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(2_000_000));
        p.rate_bps = 8_000_000;
        let mut t = 2000i128;
        for _ in 0..40 {
            let cap = p.d.cap_bps(SECOND).unwrap().min(8_000_000);
            let gap_us = i128::from(1500 * 8 * 1_000_000 / (cap * 95 / 100));
            p.offer(t, gap_us, 1_000_000 / gap_us, 1500);
            t += 1000;
        }
        assert!(p.d.raises() > 3, "{}", p.d.raises());
        let cap = p.d.cap_bps(SECOND).unwrap();
        assert!(cap >= 7_000_000, "{cap}");
    }

    #[test]
    fn a_tiny_cap_grows_back() {
        // A peer's reports can make a sample of a few bit/s; what the path then carries lifts
        // it.
        let mut d = DeliveryRate::new();
        d.base = Some(2);
        d.quiet = SECOND * 60;
        assert_eq!(d.cap_bps(SECOND), Some(4));
        let mut p = Path::new(2_000_000);
        p.d = d;
        p.offer(0, 20_000, 100, 1500);
        assert!(p.d.cap_bps(SECOND).unwrap() >= 500_000);
    }

    #[test]
    fn after_a_quiet_spell_one_low_window_does_not_bring_the_cap_down_alone() {
        let mut p = Path::new(8_000_000);
        p.offer(0, 500, 2000, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(8_000_000));
        // Five seconds later the path runs at 2 Mbit/s, busy: the old cap stands for a half
        // window, then the new rate is the cap.
        p.rate_bps = 2_000_000;
        p.free = 0;
        p.offer(5000, 1200, 60, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(8_000_000));
        p.offer(5100, 1200, 2000, 1500);
        assert_eq!(p.d.cap_bps(SECOND), Some(2_000_000));
    }

    #[test]
    fn out_of_order_reports_and_absurd_values_are_survived() {
        let mut d = DeliveryRate::new();
        let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let r = |sent: i128, arrival: i128, key: u64, bytes_at: u64, delay: Option<i128>| Report {
            sent,
            arrival,
            key,
            bytes_at,
            wire_bytes: 1500,
            delay,
        };
        assert_eq!(
            d.on_report(at(0), r(0, 100 * MS, 1, 1500, None), SECOND),
            None
        );
        assert_eq!(
            d.on_report(at(0), r(0, 50 * MS, 2, 3000, Some(MS)), SECOND),
            None
        );
        assert!(d.window.is_none());
        let extremes = [
            r(i128::MIN / 4, i128::MAX / 4, 3, u64::MAX, Some(i128::MAX)),
            r(i128::MAX / 4, i128::MAX / 4, 4, 0, Some(i128::MIN)),
            r(0, i128::MAX / 4, u64::MAX, u64::MAX, Some(0)),
        ];
        for e in extremes {
            let _ = d.on_report(at(1), e, Duration::ZERO);
            let _ = d.cap_bps(Duration::ZERO);
            let _ = d.cap_bps(SECOND);
        }
        // Whatever came before, a sample is a rate within bounds.
        assert!(d.cap_bps(SECOND).is_none_or(|c| c <= MAX_RATE_BPS));
    }
}

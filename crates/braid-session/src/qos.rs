//! The bond's egress shaper: the QoSbox's JoBS queue (`braid_qos`) in front of the striper,
//! drained by a token bucket at the bond's capacity.
//!
//! JoBS can only give per-class delay, loss and rate guarantees where the queue builds (the
//! QoSbox paper's section 2: the guarantees hold at the output link of the router). A bond's
//! real bottlenecks are its paths, downstream of braid; so, as any edge shaper must, braid
//! sends no faster than the bond can carry, by a token bucket at [`SHAPE_FRACTION`] of the
//! summed path rates (or `[qos] rate_mbit`), charging each packet with braid's per-packet
//! overhead. The backlog then sits in JoBS, which decides which class's packet goes next and
//! which class loses a packet when its buffer is full. Reading from the TUN device never
//! stops: JoBS's buffer, not the kernel's queue, is where the bond's excess is dropped.

use crate::params::WIRE_OVERHEAD_BYTES;
use braid_proto::time::{Duration, Instant};
use braid_qos::classifier::Headers;
use braid_qos::{ClassId, Classifier, Jobs, QosConfig};
use serde::Serialize;

/// Fraction of the configured bond rate the shaper sends at, so the queue stays in braid and
/// not in the paths' own buffers when the configured rates are a little optimistic.
pub const SHAPE_FRACTION: f64 = 0.97;

/// Fraction of the bond's rate the shaper sends at when PET measures the rates
/// (`scheduler = "pet"`). Measured rates need less margin than typed ones: PET places each
/// packet by when its path really drained the last ones (its SIG-ACKs re-anchor `A_l`), so a
/// path whose estimate runs a little high gets less, and only the sum has to hold. On the BAG
/// lab scenario 0.99 gave one TCP flow 2% more than 0.97 with as many retransmissions; 1.0 doubled
/// BBR's retransmissions (docs/benchmarks.md).
pub const MEASURED_SHAPE_FRACTION: f64 = 0.99;

/// Where the bond's rate comes from, which sets how far below it the shaper sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BondRates {
    /// The paths' `rate_mbit` from the config: [`SHAPE_FRACTION`].
    Configured,
    /// PET's estimates (a PET bond, or adaptive SRR's): [`MEASURED_SHAPE_FRACTION`].
    Measured,
}

impl BondRates {
    /// The fraction of the bond's rate the shaper sends at.
    pub fn fraction(self) -> f64 {
        match self {
            BondRates::Configured => SHAPE_FRACTION,
            BondRates::Measured => MEASURED_SHAPE_FRACTION,
        }
    }

    /// The shaping rate for a bond of `bond_rate_bps` (at least 1 bit/s).
    fn shaping_rate(self, bond_rate_bps: u64) -> u64 {
        ((bond_rate_bps as f64 * self.fraction()) as u64).max(1)
    }
}

/// The least queueing time a whole-bond shaper's buffer holds at the shaping rate
/// ([`QosShaper::whole_bond`]); the session raises it to the bond's equalised round trip
/// ([`QosShaper::set_queue_time`]). A buffer of one round trip (one bandwidth-delay product)
/// lets a loss-based TCP back off without leaving the bond idle, and BBR's start-up overshoot
/// waits here rather than overflowing a path's own buffer.
pub const WHOLE_BOND_QUEUE: Duration = Duration::from_millis(250);

/// The whole-bond shaper's buffer never holds fewer packets than this, nor more than
/// [`WHOLE_BOND_MAX_PACKETS`].
const WHOLE_BOND_MIN_PACKETS: u32 = 64;
const WHOLE_BOND_MAX_PACKETS: u32 = 16_384;

/// The token bucket holds at most this much sending time (and never less than two packets).
const BURST: Duration = Duration::from_millis(5);

/// What waits in the shaper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Egress {
    /// An IP packet from the TUN device, for the striper.
    Packet(Vec<u8>),
    /// A segment of an accelerated TCP connection (`[tcp] accelerate`), for its micro-flow's
    /// path.
    Ptcp(PtcpOut),
}

/// A pTCP segment the shaper let go: the session seals it for `path` when that path is
/// polled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtcpOut {
    /// The path of the micro-flow that sent it.
    pub path: braid_proto::PathId,
    /// The pTCP connection.
    pub conn: u16,
    /// The segment.
    pub segment: Vec<u8>,
}

/// JoBS plus its classifier and the token bucket that drains it.
pub struct QosShaper {
    names: Vec<String>,
    classifier: Classifier,
    jobs: Jobs<Egress>,
    /// Shaping rate on the wire, bit/s.
    rate_bps: u64,
    /// `[qos] rate_mbit` was given: the rate is fixed, whatever the bond does.
    fixed_rate: bool,
    /// Where the bond's rate comes from (and so the fraction of it the shaper sends at).
    rates: BondRates,
    mtu: u32,
    /// A whole-bond shaper ([`QosShaper::whole_bond`]): the buffer is this much time at the
    /// shaping rate, resized when the rate moves.
    queue_time: Option<Duration>,
    tokens: f64,
    burst: f64,
    last: Instant,
}

/// One class in `braid status`.
#[derive(Clone, Debug, Serialize)]
pub struct ClassReport {
    /// The class's name from the config.
    pub name: String,
    /// Packets offered.
    pub arrivals: u64,
    /// Packets sent on.
    pub sent: u64,
    /// Packets dropped (buffer overflow or to meet a delay bound).
    pub drops: u64,
    /// Dropped bytes over offered bytes since start, percent.
    pub loss_pct: f64,
    /// Mean and largest queueing delay of the sent packets, ms.
    pub delay_ms_mean: f64,
    /// Largest queueing delay, ms.
    pub delay_ms_max: f64,
    /// Service rate of the current busy period, Mbit/s.
    pub service_rate_mbit: f64,
    /// Packets queued now.
    pub backlog: u32,
    /// Packets sent later than the class's delay bound.
    pub delay_bound_violations: u64,
    /// Drops that took the busy period's loss rate above the class's loss bound.
    pub loss_bound_violations: u64,
    /// Times the class's minimum rate could not be given (the bond too slow for it).
    pub rate_bound_violations: u64,
    /// The busy period's loss rate (`p_i`, bytes dropped over bytes offered), percent.
    pub busy_loss_pct: f64,
}

impl QosShaper {
    /// A shaper for `config` on a bond of `bond_rate_bps` on the wire (configured or measured
    /// as `rates` says), carrying packets of up to `mtu` bytes.
    pub fn new(
        config: &QosConfig,
        bond_rate_bps: u64,
        rates: BondRates,
        mtu: u32,
        now: Instant,
    ) -> Result<Self, braid_qos::config::QosConfigError> {
        let rate_bps = config
            .rate_mbit
            .map_or(rates.shaping_rate(bond_rate_bps), |m| (m * 1e6) as u64);
        // JoBS reasons about the inner packets: its capacity is the shaping rate less braid's
        // share of a full-size packet.
        let inner_bps = inner_rate(rate_bps, mtu);
        let mut jobs_config = config.jobs_config(inner_bps.max(1))?;
        jobs_config.capacity_bps = inner_bps.max(1);
        let jobs = Jobs::new(&jobs_config).map_err(|e| braid_qos::config::QosConfigError {
            key: "qos".into(),
            message: e.to_string(),
        })?;
        let burst = burst_bytes(rate_bps, mtu);
        Ok(QosShaper {
            names: config.class_names().into_iter().map(String::from).collect(),
            classifier: config.classifier()?,
            jobs,
            rate_bps: rate_bps.max(1),
            fixed_rate: config.rate_mbit.is_some(),
            rates,
            mtu,
            queue_time: None,
            tokens: burst,
            burst,
            last: now,
        })
    }

    /// The egress of a bond without `[qos]` whose rates braid measures (`scheduler = "pet"`,
    /// or any bond with `shape_egress = true`): one class named `bond`, a FIFO whose buffer
    /// holds [`WHOLE_BOND_QUEUE`] at the shaping rate, drained at `rates`' fraction of the
    /// bond's rate as with `[qos]`. The backlog of a single fast flow then builds here, where
    /// PET's equalised release times assume it, and not in the paths' own (often short)
    /// drop-tail buffers.
    pub fn whole_bond(bond_rate_bps: u64, rates: BondRates, mtu: u32, now: Instant) -> Self {
        let config = QosConfig::one_class("bond", WHOLE_BOND_MIN_PACKETS);
        let mut s = QosShaper::new(&config, bond_rate_bps, rates, mtu, now)
            .expect("one best-effort class with a non-empty buffer is always valid");
        s.queue_time = Some(WHOLE_BOND_QUEUE);
        s.fit_buffer();
        s
    }

    /// A whole-bond shaper's buffer holds `time` (at least [`WHOLE_BOND_QUEUE`]) at the
    /// shaping rate from now on; ignored by a `[qos]` shaper, whose buffer is configured.
    pub fn set_queue_time(&mut self, time: Duration) {
        if let Some(t) = self.queue_time.as_mut() {
            *t = time.max(WHOLE_BOND_QUEUE);
            self.fit_buffer();
        }
    }

    /// A whole-bond shaper: the buffer holds its queueing time at the shaping rate.
    fn fit_buffer(&mut self) {
        if let Some(t) = self.queue_time {
            self.jobs
                .set_shared_limit(queue_packets(self.rate_bps, self.mtu, t));
        }
    }

    /// The buffer's limit in packets (shared by all classes).
    pub fn buffer_packets(&self) -> u32 {
        self.jobs.limit_packets()
    }

    /// The shaping rate on the wire, bit/s.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The bond's rate now (paths go down and come back, estimates move): shape at this
    /// shaper's fraction of `bond_rate_bps` from now on, and give JoBS the matching capacity,
    /// so the per-class rates it hands out are ones the bond can carry. Ignored with
    /// `[qos] rate_mbit` (a fixed rate) and for a rate of zero (every path down: the last
    /// rate stays until one is back). A lower rate is taken at once; a higher one only when it
    /// is 1% higher, so the shaper never sends above its fraction of the bond's rate.
    pub fn set_bond_rate(&mut self, now: Instant, bond_rate_bps: u64) {
        if self.fixed_rate || bond_rate_bps == 0 {
            return;
        }
        let rate_bps = self.rates.shaping_rate(bond_rate_bps);
        if rate_bps == self.rate_bps
            || (rate_bps > self.rate_bps && (rate_bps - self.rate_bps) * 100 <= self.rate_bps)
        {
            return;
        }
        self.refill(now);
        self.rate_bps = rate_bps;
        self.burst = burst_bytes(rate_bps, self.mtu);
        self.tokens = self.tokens.min(self.burst);
        let inner = inner_rate(rate_bps, self.mtu);
        self.jobs.set_capacity(now, inner.max(1));
        self.fit_buffer();
    }

    /// Classify and queue an IP packet; JoBS may drop it or another packet.
    pub fn enqueue(&mut self, now: Instant, packet: &[u8]) {
        let class = self.classifier.classify(packet);
        let len = packet.len() as u32;
        self.offer(now, class, len, Egress::Packet(packet.to_vec()));
    }

    /// The class of a packet with these headers (an accelerated TCP connection's, whose
    /// packets do not pass through here).
    pub fn classify_headers(&self, headers: &Headers) -> ClassId {
        self.classifier.classify_headers(headers)
    }

    /// Queue a pTCP segment in `class`; JoBS may drop it (pTCP resends) or another packet.
    pub fn enqueue_ptcp(&mut self, now: Instant, class: ClassId, out: PtcpOut) {
        let len = out.segment.len() as u32;
        self.offer(now, class, len, Egress::Ptcp(out));
    }

    fn offer(&mut self, now: Instant, class: ClassId, len: u32, item: Egress) {
        let _ = self.jobs.enqueue(now, class, len, item);
        // Drops are counted by JoBS per class; the buffers are simply freed.
        while self.jobs.poll_dropped().is_some() {}
    }

    /// Whether accelerated TCP's segments may queue here ([`QosShaper::enqueue_ptcp`]): in a
    /// `[qos]` shaper, not a whole-bond one (`[bond] shape_egress` without `[qos]`, which
    /// carries striped traffic only). Where the rate follows PET's estimates, PET keeps them
    /// fresh with padding pairs while accelerated TCP is all the bond carries
    /// (`braid_proto::pet::PetConfig::padding`).
    pub fn takes_ptcp(&self) -> bool {
        self.queue_time.is_none()
    }

    /// The rate an accelerated connection's flow over a path of `path_rate_bps` may send at
    /// (bits per second on the wire): the shaper bounds the bond's total, not each path, so a
    /// micro-flow in start-up could take the whole shaped rate on one path and fill that
    /// path's own queue, in front of the voice the shaper is there to protect. The path's rate
    /// at the shaper's fraction (the path's configured rate, or PET's estimate of it); `None`
    /// where accelerated TCP does not queue here.
    pub fn ptcp_path_cap(&self, path_rate_bps: u64) -> Option<u64> {
        self.takes_ptcp()
            .then(|| self.rates.shaping_rate(path_rate_bps))
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate_bps as f64 / 8.0).min(self.burst);
    }

    /// The next packet to send, if the bucket and, for a packet to stripe, the striper
    /// (`room`) allow. (A pTCP segment goes to its own path, outside the striper, and may be
    /// longer than the striper's largest packet, and than the bucket holds: such a packet
    /// leaves when the bucket is full, and the tokens go below zero.)
    pub fn poll(&mut self, now: Instant, room: impl Fn(u32) -> bool) -> Option<Egress> {
        self.refill(now);
        let (head, len) = self.jobs.peek_payload(now)?;
        let cost = f64::from(len + WIRE_OVERHEAD_BYTES);
        if self.tokens < cost.min(self.burst) || (matches!(head, Egress::Packet(_)) && !room(len)) {
            return None;
        }
        let d = self.jobs.dequeue(now)?;
        self.tokens -= cost;
        Some(d.payload)
    }

    /// `bytes` the bucket charged for did not go on the wire (header compression shrank the
    /// packets after the shaper let them go): the bucket gets them back, up to its depth, so
    /// the shaper's rate is one of wire bytes, which is what the paths carry.
    pub fn refund(&mut self, bytes: u64) {
        self.tokens = (self.tokens + bytes as f64).min(self.burst);
    }

    /// When the bucket will have room for the packet JoBS would send next.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let (_, len) = self.jobs.peek(now)?;
        let missing = f64::from(len + WIRE_OVERHEAD_BYTES).min(self.burst) - self.tokens;
        if missing <= 0.0 {
            return None;
        }
        let secs = missing * 8.0 / self.rate_bps as f64;
        Some(now + Duration::from_secs_f64(secs).max(Duration::from_micros(50)))
    }

    /// Per-class counters for `braid status`.
    pub fn report(&self, now: Instant) -> Vec<ClassReport> {
        (0..self.jobs.classes())
            .map(|i| {
                let c = ClassId(i as u8);
                let st = self.jobs.class_stats(c);
                let busy = self.jobs.class_status(c, now);
                ClassReport {
                    name: self.names.get(i).cloned().unwrap_or_default(),
                    arrivals: st.arrivals,
                    sent: st.xmit,
                    drops: st.drops(),
                    loss_pct: st.loss_rate() * 100.0,
                    delay_ms_mean: st.delay_mean().as_secs_f64() * 1e3,
                    delay_ms_max: st.delay_max.as_secs_f64() * 1e3,
                    service_rate_mbit: busy.service_rate_bps / 1e6,
                    backlog: busy.backlog,
                    delay_bound_violations: st.delay_bound_violations,
                    loss_bound_violations: st.loss_bound_violations,
                    rate_bound_violations: st.rate_bound_violations,
                    busy_loss_pct: busy.loss_rate * 100.0,
                }
            })
            .collect()
    }
}

/// The rate of the inner packets when `rate_bps` on the wire carries full-size ones (in
/// `u128`: no rate a handshake can name overflows it).
fn inner_rate(rate_bps: u64, mtu: u32) -> u64 {
    let r = u128::from(rate_bps) * u128::from(mtu) / u128::from(mtu + WIRE_OVERHEAD_BYTES);
    u64::try_from(r).unwrap_or(u64::MAX)
}

/// Full-size packets that take `time` to send at `rate_bps` on the wire, within the
/// whole-bond shaper's bounds.
fn queue_packets(rate_bps: u64, mtu: u32, time: Duration) -> u32 {
    let bytes = rate_bps as f64 / 8.0 * time.as_secs_f64();
    let n = (bytes / f64::from(mtu + WIRE_OVERHEAD_BYTES)).ceil();
    (n as u32).clamp(WHOLE_BOND_MIN_PACKETS, WHOLE_BOND_MAX_PACKETS)
}

/// The token bucket's depth: [`BURST`] of sending time, at least two full packets.
fn burst_bytes(rate_bps: u64, mtu: u32) -> f64 {
    (rate_bps as f64 / 8.0 * BURST.as_secs_f64()).max(2.0 * f64::from(mtu + WIRE_OVERHEAD_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_with_dscp(dscp: u8, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[1] = dscp << 2;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p
    }

    #[test]
    fn shapes_to_the_rate_and_serves_the_classes_by_jobs() {
        let cfg: QosConfig = toml::from_str(
            r#"
            buffer_packets = 2000
            [[class]]
            name = "voice"
            dscp = [46]
            delay_bound_ms = 5.0
            [[class]]
            name = "bulk"
            default = true
            "#,
        )
        .unwrap();
        let mut now = Instant::ZERO;
        // 10 Mbit/s on the wire.
        let mut s = QosShaper::new(&cfg, 10_000_000, BondRates::Configured, 1400, now).unwrap();
        for _ in 0..900 {
            s.enqueue(now, &ipv4_with_dscp(0, 1400));
        }
        let mut sent_bytes = 0u64;
        let mut voice_sent = 0;
        let step = Duration::from_millis(1);
        for ms in 0..1000 {
            if ms % 20 == 0 {
                s.enqueue(now, &ipv4_with_dscp(46, 200));
            }
            while let Some(Egress::Packet(p)) = s.poll(now, |_| true) {
                sent_bytes += p.len() as u64 + u64::from(WIRE_OVERHEAD_BYTES);
                voice_sent += usize::from(p[1] >> 2 == 46);
            }
            if let Some(t) = s.poll_timeout(now) {
                assert!(t > now);
            }
            now = now + step;
        }
        // About 0.97 x 10 Mbit/s for one second, plus the initial burst.
        let mbit = sent_bytes as f64 * 8.0 / 1e6;
        assert!((9.4..=9.9).contains(&mbit), "{mbit} Mbit");
        assert_eq!(
            voice_sent, 50,
            "every voice packet went, ahead of the bulk backlog"
        );
        let r = s.report(now);
        assert_eq!(r[0].name, "voice");
        assert_eq!(r[0].drops, 0);
        assert!(r[0].delay_ms_max < 5.0, "{r:?}");
        assert!(r[1].backlog > 0);
        // Nothing leaves while the striper has no room.
        s.enqueue(now, &ipv4_with_dscp(46, 200));
        assert!(s.poll(now + Duration::from_secs(1), |_| false).is_none());
    }

    #[test]
    fn a_whole_bond_shaper_holds_a_quarter_second_and_follows_the_rate() {
        let mut now = Instant::ZERO;
        // PET's estimates leave a margin of 1%: 0.99 x 14 Mbit/s.
        let s = QosShaper::whole_bond(14_000_000, BondRates::Measured, 1400, now);
        assert_eq!(s.rate_bps(), 13_860_000);
        // Configured rates, 3%: 0.97 x 14 Mbit/s for 250 ms is 286 packets of 1400 + 86 bytes.
        let mut s = QosShaper::whole_bond(14_000_000, BondRates::Configured, 1400, now);
        assert_eq!(s.buffer_packets(), 286);
        assert_eq!(s.rate_bps(), 13_580_000);
        // Everything lands in the one class; a burst past the buffer is cut at its limit.
        for _ in 0..400 {
            s.enqueue(now, &ipv4_with_dscp(10, 1400));
        }
        let r = s.report(now);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "bond");
        assert_eq!(r[0].backlog, 286);
        assert_eq!(r[0].drops, 114);
        // The bond halves: so do the rate and the buffer. Nothing queued is dropped for it:
        // each arrival costs one drop while the backlog is over the new limit, and the
        // backlog drains down to it.
        now = now + Duration::from_millis(1);
        s.set_bond_rate(now, 7_000_000);
        assert_eq!(s.buffer_packets(), 143);
        s.enqueue(now, &ipv4_with_dscp(0, 1400));
        let r = s.report(now);
        assert_eq!((r[0].backlog, r[0].drops), (286, 115));
        // Offered 1400-byte packets at twice the new rate for a second, it settles at the new
        // limit.
        let mut sent = 0;
        for ms in 0..1000 {
            if ms % 2 == 0 {
                for _ in 0..3 {
                    s.enqueue(now, &ipv4_with_dscp(0, 1400));
                }
            }
            while s.poll(now, |_| true).is_some() {
                sent += 1;
            }
            now = now + Duration::from_millis(1);
        }
        assert!(
            (140..=144).contains(&s.report(now)[0].backlog),
            "{:?}",
            s.report(now)
        );
        // 1 s of 0.97 x 7 Mbit/s is 571 packets of 1400 + 86 bytes.
        assert!((560..=580).contains(&sent), "{sent}");
    }

    #[test]
    fn a_segment_larger_than_the_bucket_leaves_at_the_rate() {
        // 1 Mbit/s configured: the bucket holds 2 x (1400 + 86) bytes, and a pTCP segment of
        // 8000 bytes (a jumbo path's) costs more. It must leave when the bucket is full, and
        // the next one a segment's time at the rate later, not never.
        let mut now = Instant::ZERO;
        let cfg = QosConfig::one_class("all", 100);
        let mut s = QosShaper::new(&cfg, 1_000_000, BondRates::Configured, 1400, now).unwrap();
        for conn in 0..3 {
            let out = PtcpOut {
                path: braid_proto::PathId(0),
                conn,
                segment: vec![0; 8000],
            };
            s.enqueue_ptcp(now, ClassId(0), out);
        }
        let mut left = Vec::new();
        for _ in 0..300 {
            while let Some(Egress::Ptcp(o)) = s.poll(now, |_| false) {
                left.push((o.conn, now));
            }
            now = now + Duration::from_millis(1);
        }
        assert_eq!(left.len(), 3, "{left:?}");
        // 8086 bytes at 0.97 Mbit/s: about 67 ms apart.
        let gap = left[2].1.saturating_duration_since(left[1].1);
        assert!(
            (Duration::from_millis(60)..=Duration::from_millis(75)).contains(&gap),
            "{left:?}"
        );
    }

    #[test]
    fn the_rate_falls_at_once_and_rises_by_one_percent() {
        let now = Instant::ZERO;
        let mut s = QosShaper::whole_bond(10_000_000, BondRates::Measured, 1400, now);
        assert_eq!(s.rate_bps(), 9_900_000);
        // Half a percent lower: taken, so the shaper never sends above 0.99 of the estimate.
        s.set_bond_rate(now, 9_950_000);
        assert_eq!(s.rate_bps(), 9_850_500);
        // Half a percent higher: not worth a change yet; 2% higher is.
        s.set_bond_rate(now, 10_000_000);
        assert_eq!(s.rate_bps(), 9_850_500);
        s.set_bond_rate(now, 10_150_000);
        assert_eq!(s.rate_bps(), 10_048_500);
        // Every path down (a rate of zero): the last rate stays.
        s.set_bond_rate(now, 0);
        assert_eq!(s.rate_bps(), 10_048_500);
    }
}

//! Delivery-rate estimation of a micro-flow, for rate-based congestion control (BBR).
//!
//! draft-cheng-iccrg-delivery-rate-estimation-00 (as Linux's `tcp_rate.c`): every virtual
//! packet records at send time how much the flow had delivered and when
//! ([`PacketRate`], section 3.2 "Transmitting a data packet"); when packets are acknowledged,
//! cumulatively or by SACK, the most recently sent of them gives one [`RateSample`]: the data
//! delivered since it was sent over the longer of its send and ack intervals (section 3.3
//! "Upon receiving an ACK"). A flow that had nothing to send marks itself *application-limited*
//! (section 3.4) until everything then in flight is delivered; samples of packets sent meanwhile
//! say so, and a controller does not lower its bandwidth estimate on them.
//!
//! Counted in payload bytes (an empty filler is charged one segment, as in the window).

use braid_proto::time::{Duration, Instant};

/// The flow's delivery state (section 3.1 "Connection state": `C.delivered`,
/// `C.delivered_time`, `C.first_sent_time`, `C.app_limited`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeliveryRate {
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    /// `C.app_limited`: the `delivered` count at which the application-limited period ends,
    /// 0 when not limited.
    app_limited: u64,
}

/// What a virtual packet records when it is sent (section 3.1 "Per-packet state").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketRate {
    /// `P.delivered`: bytes the flow had delivered when it was sent.
    pub delivered: u64,
    /// `P.delivered_time`.
    pub delivered_time: Instant,
    /// `P.first_sent_time`: send time of the first packet of the current flight.
    pub first_sent_time: Instant,
    /// `P.is_app_limited`.
    pub is_app_limited: bool,
}

/// One acknowledgement as a rate-based controller sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes delivered over `interval` (`rs.delivered`).
    pub delivered: u64,
    /// `rs.interval`, the longer of the send and ack intervals; `None` when the sample is not
    /// valid (shorter than the minimum RTT, or no packet of this ack carried rate state).
    pub interval: Option<Duration>,
    /// `rs.is_app_limited`.
    pub is_app_limited: bool,
    /// `rs.prior_delivered`: the flow's delivered count when the newest acknowledged packet
    /// was sent (for round counting).
    pub prior_delivered: u64,
    /// The flow's delivered count after this acknowledgement (`C.delivered`).
    pub total_delivered: u64,
    /// Send time of the newest acknowledged packet.
    pub last_sent: Instant,
    /// Bytes newly acknowledged by this acknowledgement.
    pub newly_acked: u64,
    /// Bytes newly declared lost by this acknowledgement.
    pub newly_lost: u64,
    /// Bytes in flight before this acknowledgement.
    pub prior_in_flight: u64,
    /// Bytes in flight after it (losses taken out).
    pub in_flight: u64,
    /// The RTT sample of this acknowledgement (Karn: none if only retransmissions were newly
    /// acknowledged).
    pub rtt: Option<Duration>,
}

impl RateSample {
    /// The delivery rate in bytes per second, if the sample is valid.
    pub fn delivery_rate(&self) -> Option<u64> {
        let ns = self.interval?.as_nanos();
        if ns == 0 {
            return None;
        }
        let rate = u128::from(self.delivered) * 1_000_000_000 / ns;
        Some(u64::try_from(rate).unwrap_or(u64::MAX))
    }
}

/// The newest packet of one acknowledgement, gathered over its packets.
#[derive(Clone, Copy, Debug, Default)]
pub struct AckSampler {
    newest: Option<(PacketRate, Instant)>,
    send_elapsed: Duration,
    ack_elapsed: Duration,
    newly_acked: u64,
}

impl DeliveryRate {
    /// Bytes delivered so far (`C.delivered`).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Whether the flow is in an application-limited period.
    pub fn is_app_limited(&self) -> bool {
        self.app_limited != 0
    }

    /// A packet goes out at `now` with `in_flight` bytes already outstanding (section 3.2).
    pub fn on_sent(&mut self, now: Instant, in_flight: u64) -> PacketRate {
        if in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        PacketRate {
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
            is_app_limited: self.app_limited != 0,
        }
    }

    /// A packet of `len` bytes sent at `sent` with state `p` was acknowledged at `now`
    /// (section 3.3, `UpdateRateSample`).
    pub fn on_acked(
        &mut self,
        now: Instant,
        sent: Instant,
        len: u64,
        p: &PacketRate,
        ack: &mut AckSampler,
    ) {
        self.delivered = self.delivered.saturating_add(len);
        self.delivered_time = now;
        ack.newly_acked = ack.newly_acked.saturating_add(len);
        // The most recently sent packet decides: the largest `P.delivered`, ties to the later
        // send (a SACKed packet sent after the cumulatively acknowledged ones).
        let newer = ack
            .newest
            .is_none_or(|(q, t)| (p.delivered, sent) > (q.delivered, t));
        if newer {
            ack.newest = Some((*p, sent));
            ack.send_elapsed = sent.saturating_duration_since(p.first_sent_time);
            ack.ack_elapsed = now.saturating_duration_since(p.delivered_time);
            self.first_sent_time = sent;
        }
    }

    /// The sample of one acknowledgement; intervals shorter than `min_rtt` are not valid (they
    /// would overestimate the rate, section 3.3).
    pub fn sample(&mut self, ack: &AckSampler, min_rtt: Duration) -> RateSample {
        // The application-limited period ends once its data is delivered.
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        let mut rs = RateSample {
            total_delivered: self.delivered,
            newly_acked: ack.newly_acked,
            ..RateSample::default()
        };
        if let Some((p, sent)) = ack.newest {
            rs.delivered = self.delivered - p.delivered;
            rs.prior_delivered = p.delivered;
            rs.is_app_limited = p.is_app_limited;
            rs.last_sent = sent;
            let interval = ack.send_elapsed.max(ack.ack_elapsed);
            rs.interval = (!interval.is_zero() && interval >= min_rtt).then_some(interval);
        }
        rs
    }

    /// The sender had nothing to send with window to spare (section 3.4): samples of packets
    /// sent from now until the data now in flight is delivered are application-limited.
    pub fn mark_app_limited(&mut self, in_flight: u64) {
        self.app_limited = self.delivered.saturating_add(in_flight).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    #[test]
    fn a_flight_acknowledged_a_round_later_gives_its_rate() {
        let mut d = DeliveryRate::default();
        // Ten packets of 1000 bytes paced 1 ms apart from t = 0, acknowledged 100 ms later each.
        let sent: Vec<_> = (0..10)
            .map(|i| (ms(i), d.on_sent(ms(i), i * 1000)))
            .collect();
        let mut last = RateSample::default();
        for (t, p) in &sent {
            let mut ack = AckSampler::default();
            d.on_acked(*t + Duration::from_millis(100), *t, 1000, p, &mut ack);
            last = d.sample(&ack, Duration::from_millis(100));
        }
        // The last: 10 000 bytes delivered between t = 100 (first send's delivered_time was
        // t = 0) and t = 109: the ack interval 109 ms wins over the send interval 9 ms.
        assert_eq!(last.delivered, 10_000);
        assert_eq!(last.interval, Some(Duration::from_millis(109)));
        assert_eq!(last.delivery_rate(), Some(10_000_000 / 109));
        assert!(!last.is_app_limited);
        assert_eq!(last.total_delivered, 10_000);
    }

    #[test]
    fn short_intervals_are_not_valid_and_app_limited_is_marked_until_delivered() {
        let mut d = DeliveryRate::default();
        let p = d.on_sent(ms(0), 0);
        d.mark_app_limited(1000);
        let q = d.on_sent(ms(1), 1000);
        assert!(!p.is_app_limited && q.is_app_limited);
        let mut ack = AckSampler::default();
        d.on_acked(ms(50), ms(0), 1000, &p, &mut ack);
        let rs = d.sample(&ack, Duration::from_millis(60));
        assert_eq!(rs.interval, None, "50 ms is shorter than the 60 ms min RTT");
        assert!(d.is_app_limited(), "1000 delivered, not past the mark");
        let mut ack = AckSampler::default();
        d.on_acked(ms(51), ms(1), 1000, &q, &mut ack);
        let rs = d.sample(&ack, Duration::from_millis(40));
        assert!(rs.is_app_limited);
        assert!(
            !d.is_app_limited(),
            "everything of the limited period delivered"
        );
    }
}

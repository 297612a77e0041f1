//! A two-endpoint in-memory harness (after quinn's `Pair`): two braid endpoints joined by
//! in-memory paths, every message encoded and parsed with the wire codec, virtual time jumping
//! straight to the next wake-up.
//!
//! [`Endpoint`] (from `braid-session`) is the composition the daemon drives: a striper for what
//! this end sends, a resequencer and a credit grantor for what it receives, and the codec in
//! between. It is sans-IO like the cores: datagrams in, datagrams out, `now` passed in.

pub use braid_session::endpoint::{Endpoint, EndpointConfig, EndpointStats};

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use std::collections::VecDeque;

/// One direction of one in-memory path.
#[derive(Clone, Debug)]
pub struct Wire {
    /// One-way delay.
    pub delay: Duration,
    /// Datagrams in flight: arrival time and bytes.
    in_flight: VecDeque<(Instant, Vec<u8>)>,
    /// Drop every datagram whose index (counted from 0 on this wire) satisfies this.
    pub drop: fn(u64) -> bool,
    sent: u64,
    /// Datagrams dropped.
    pub dropped: u64,
}

impl Wire {
    /// A lossless wire with this delay.
    pub fn new(delay: Duration) -> Self {
        Wire {
            delay,
            in_flight: VecDeque::new(),
            drop: |_| false,
            sent: 0,
            dropped: 0,
        }
    }
}

/// Two endpoints, `a` and `b`, joined by one [`Wire`] per path and direction.
#[derive(Debug)]
pub struct Pair {
    /// Endpoint A.
    pub a: Endpoint,
    /// Endpoint B.
    pub b: Endpoint,
    /// Wires from A to B, per path.
    pub a_to_b: Vec<Wire>,
    /// Wires from B to A, per path.
    pub b_to_a: Vec<Wire>,
    /// Current virtual time.
    pub now: Instant,
    /// Packets delivered to A's application.
    pub delivered_a: Vec<Vec<u8>>,
    /// Packets delivered to B's application.
    pub delivered_b: Vec<Vec<u8>>,
    buf: Vec<u8>,
}

impl Pair {
    /// A pair over paths with the given one-way delays (same both ways).
    pub fn new(a: Endpoint, b: Endpoint, delays: &[Duration]) -> Self {
        Pair {
            a,
            b,
            a_to_b: delays.iter().map(|&d| Wire::new(d)).collect(),
            b_to_a: delays.iter().map(|&d| Wire::new(d)).collect(),
            now: Instant::ZERO,
            delivered_a: Vec::new(),
            delivered_b: Vec::new(),
            buf: Vec::new(),
        }
    }

    fn flush(from: &mut Endpoint, wires: &mut [Wire], now: Instant, buf: &mut Vec<u8>) {
        for (p, w) in wires.iter_mut().enumerate() {
            while from.poll_transmit(now, PathId(p as u8), buf) {
                let i = w.sent;
                w.sent += 1;
                if (w.drop)(i) {
                    w.dropped += 1;
                    continue;
                }
                w.in_flight.push_back((now + w.delay, buf.clone()));
            }
        }
    }

    fn arrive(to: &mut Endpoint, wires: &mut [Wire], now: Instant) {
        for (p, w) in wires.iter_mut().enumerate() {
            while w.in_flight.front().is_some_and(|f| f.0 <= now) {
                let (_, bytes) = w.in_flight.pop_front().expect("checked");
                to.handle_datagram(now, PathId(p as u8), &bytes);
            }
        }
    }

    /// Process everything due at the current time: transmissions, arrivals, deliveries.
    pub fn drive_now(&mut self) {
        loop {
            Self::flush(&mut self.a, &mut self.a_to_b, self.now, &mut self.buf);
            Self::flush(&mut self.b, &mut self.b_to_a, self.now, &mut self.buf);
            Self::arrive(&mut self.b, &mut self.a_to_b, self.now);
            Self::arrive(&mut self.a, &mut self.b_to_a, self.now);
            while let Some(p) = self.a.poll_deliver(self.now) {
                self.delivered_a.push(p);
            }
            while let Some(p) = self.b.poll_deliver(self.now) {
                self.delivered_b.push(p);
            }
            let pending = (0..self.a.paths()).any(|p| self.a.has_transmit(PathId(p as u8)))
                || (0..self.b.paths()).any(|p| self.b.has_transmit(PathId(p as u8)));
            if !pending {
                break;
            }
        }
    }

    /// The next time anything happens, if anything will.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.a_to_b
            .iter()
            .chain(&self.b_to_a)
            .filter_map(|w| w.in_flight.front().map(|f| f.0))
            .chain(self.a.poll_timeout())
            .chain(self.b.poll_timeout())
            .min()
    }

    /// Jump to the next wake-up and process it. Returns `false` when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.drive_now();
        match self.next_wakeup() {
            Some(t) => {
                self.now = self.now.max(t);
                self.drive_now();
                true
            }
            None => false,
        }
    }

    /// Step until nothing is left or `deadline` passes.
    pub fn run_until_idle(&mut self, deadline: Instant) {
        while self.now <= deadline && self.step() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_proto::credit::CreditConfig;
    use braid_proto::resequence::{ResequenceMode, ResequencerConfig};
    use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};
    use braid_proto::striper::StriperConfig;

    fn endpoint_config(
        kind: SchedulerKind,
        rates: &[u64],
        mode: ResequenceMode,
        credits: Option<CreditConfig>,
    ) -> EndpointConfig {
        let sched = SchedulerConfig::new(kind, rates.to_vec());
        let mut striper = StriperConfig::new(sched.clone());
        striper.sequence_numbers = mode == ResequenceMode::Sequence;
        striper.initial_credit_bytes = credits.as_ref().map(|c| c.share_bytes.clone());
        let receiver = ResequencerConfig::new(mode, sched);
        EndpointConfig {
            striper,
            receiver,
            credits,
        }
    }

    fn payloads(n: usize, tag: u8) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let len = 8 + (i * 7919) % 1392;
                let mut v = vec![tag; len];
                v[..8].copy_from_slice(&(i as u64).to_be_bytes());
                v
            })
            .collect()
    }

    /// Send `data` from A and `back` from B, as fast as the striper takes them.
    fn transfer(pair: &mut Pair, data: &[Vec<u8>], back: &[Vec<u8>]) {
        let (mut i, mut j) = (0, 0);
        let deadline = Instant::ZERO + Duration::from_secs(60);
        while (i < data.len() || j < back.len()) && pair.now < deadline {
            while i < data.len() && pair.a.send(pair.now, data[i].clone()).is_ok() {
                i += 1;
            }
            while j < back.len() && pair.b.send(pair.now, back[j].clone()).is_ok() {
                j += 1;
            }
            if !pair.step() {
                break;
            }
        }
        pair.run_until_idle(deadline);
    }

    #[test]
    fn bidirectional_transfer_is_byte_identical() {
        for mode in [ResequenceMode::Logical, ResequenceMode::Sequence] {
            let rates = [10_000_000, 30_000_000, 5_000_000];
            let cfg = endpoint_config(SchedulerKind::Srr, &rates, mode, None);
            let delays = [
                Duration::from_millis(40),
                Duration::from_millis(5),
                Duration::from_millis(120),
            ];
            let mut pair = Pair::new(
                Endpoint::new(&cfg).unwrap(),
                Endpoint::new(&cfg).unwrap(),
                &delays,
            );
            let data = payloads(3000, 0xAA);
            let back = payloads(1000, 0xBB);
            transfer(&mut pair, &data, &back);
            assert_eq!(pair.delivered_b, data, "{mode:?} A->B");
            assert_eq!(pair.delivered_a, back, "{mode:?} B->A");
        }
    }

    #[test]
    fn credits_bound_the_receive_buffer() {
        let rates = [10_000_000, 20_000_000];
        let credits = CreditConfig::proportional(8_000, &[1, 2], Duration::from_millis(20));
        let cfg = endpoint_config(
            SchedulerKind::Srr,
            &rates,
            ResequenceMode::Logical,
            Some(credits),
        );
        let mut pair = Pair::new(
            Endpoint::new(&cfg).unwrap(),
            Endpoint::new(&cfg).unwrap(),
            &[Duration::from_millis(5), Duration::from_millis(50)],
        );
        let data = payloads(2000, 1);
        let mut i = 0;
        let mut max_buffered = 0;
        let deadline = Instant::ZERO + Duration::from_secs(120);
        while pair.delivered_b.len() < data.len() && pair.now < deadline {
            while i < data.len() && pair.a.send(pair.now, data[i].clone()).is_ok() {
                i += 1;
            }
            if !pair.step() {
                break;
            }
            max_buffered = max_buffered.max(pair.b.receiver().total_buffered_bytes());
            for p in 0..2 {
                let path = PathId(p);
                let limit = pair.a.striper().credit_limit(path).unwrap();
                assert!(pair.a.striper().tx_bytes(path) <= limit);
            }
        }
        assert_eq!(pair.delivered_b, data);
        assert!(max_buffered <= 8_000, "buffered {max_buffered}");
        assert!(pair.b.stats().feedback_sent > 0);
        // Every grant sent has arrived but those still in flight.
        let in_flight = pair
            .b_to_a
            .iter()
            .map(|w| w.in_flight.len() as u64)
            .sum::<u64>();
        assert_eq!(
            pair.a.stats().feedback_received + in_flight,
            pair.b.stats().feedback_sent
        );
    }

    #[test]
    fn sequence_mode_survives_loss_in_order() {
        let rates = [10_000_000, 10_000_000];
        let mut cfg = endpoint_config(SchedulerKind::Srr, &rates, ResequenceMode::Sequence, None);
        cfg.receiver.hold = Some(Duration::from_millis(50));
        let mut pair = Pair::new(
            Endpoint::new(&cfg).unwrap(),
            Endpoint::new(&cfg).unwrap(),
            &[Duration::from_millis(10), Duration::from_millis(30)],
        );
        pair.a_to_b[0].drop = |i| i % 7 == 3;
        pair.a_to_b[1].drop = |i| i % 11 == 5;
        let data = payloads(2000, 2);
        transfer(&mut pair, &data, &[]);
        let ids: Vec<u64> = pair
            .delivered_b
            .iter()
            .map(|p| u64::from_be_bytes(p[..8].try_into().unwrap()))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "not FIFO");
        assert!(ids.len() > 1600 && ids.len() < 2000, "{}", ids.len());
        let lost = pair.b.receiver().stats().lost;
        assert_eq!(lost + ids.len() as u64, 2000);
    }

    #[test]
    fn garbage_is_dropped_and_counted() {
        let cfg = endpoint_config(SchedulerKind::Srr, &[1, 1], ResequenceMode::Logical, None);
        let mut e = Endpoint::new(&cfg).unwrap();
        e.handle_datagram(Instant::ZERO, PathId(0), &[]);
        e.handle_datagram(Instant::ZERO, PathId(0), &[9, 9, 9]);
        e.handle_datagram(Instant::ZERO, PathId(0), &[1, 1, 1, 0, 42]); // data claiming path 1
        e.handle_datagram(Instant::ZERO, PathId(7), &[1, 1, 7, 0, 42]); // no such path
        assert_eq!(e.stats().malformed, 2);
        assert_eq!(e.stats().wrong_path, 2);
        assert_eq!(e.poll_deliver(Instant::ZERO), None);
    }
}

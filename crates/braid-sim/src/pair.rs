//! A two-endpoint in-memory harness (after quinn's `Pair`): two braid endpoints joined by
//! in-memory paths, every message encoded and parsed with the wire codec, virtual time jumping
//! straight to the next wake-up.
//!
//! [`Endpoint`] is the composition the daemon will drive: a [`Striper`] for what this end sends,
//! a [`Resequencer`] and a [`CreditGrantor`] for what it receives, and the codec in between. It is
//! sans-IO like the cores: datagrams in, datagrams out, `now` passed in.

use braid_proto::credit::{CreditConfig, CreditGrantor};
use braid_proto::resequence::{Resequencer, ResequencerConfig};
use braid_proto::scheduler::ConfigError;
use braid_proto::striper::{Outgoing, SendError, Striper, StriperConfig};
use braid_proto::time::{Duration, Instant};
use braid_proto::{Credit, PathId};
use braid_wire::{Credits, Repr};
use std::collections::VecDeque;

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
}

/// One end of a bond, without I/O.
#[derive(Debug)]
pub struct Endpoint {
    striper: Striper<Vec<u8>>,
    receiver: Resequencer<Vec<u8>>,
    grantor: Option<CreditGrantor>,
    feedback: VecDeque<Vec<Credit>>,
    credit_buf: Vec<Credit>,
    stats: EndpointStats,
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
            stats: EndpointStats::default(),
        })
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
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        self.striper.send(now, len, payload)
    }

    /// The next datagram for `path`, encoded into `buf` (cleared first). Feedback goes first,
    /// on whichever path polls.
    pub fn poll_transmit(&mut self, now: Instant, path: PathId, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if let Some(credits) = self.feedback.pop_front() {
            let repr = Repr::Feedback(Credits::from_slice(&credits));
            buf.resize(repr.buffer_len(), 0);
            let ok = repr.emit_into(buf).is_ok();
            self.stats.feedback_sent += 1;
            self.credit_buf = credits;
            return ok;
        }
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
        };
        buf.resize(repr.buffer_len(), 0);
        repr.emit_into(buf).is_ok()
    }

    /// A datagram arrived on `path`. Anything malformed is dropped and counted.
    pub fn handle_datagram(&mut self, now: Instant, path: PathId, bytes: &[u8]) {
        let repr = match Repr::parse_bytes(bytes) {
            Ok(r) => r,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
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
                self.receiver
                    .handle_data(now, path, seq, len, payload.to_vec());
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
            // Liveness is the session's job (braid-session); the in-memory harness ignores it.
            Repr::Probe(_) | Repr::ProbeAck(_) => {}
        }
    }

    /// The next packet for the application, in order.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Vec<u8>> {
        let d = self.receiver.poll_deliver(now);
        if d.is_none() {
            self.poll_credits(now);
        }
        d.map(|d| d.payload)
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

    /// Whether `poll_transmit(path)` would produce a datagram.
    pub fn has_transmit(&self, path: PathId) -> bool {
        !self.feedback.is_empty() || self.striper.has_transmit(path)
    }

    /// When the endpoint needs to be polled even without input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.receiver.poll_timeout(),
            self.grantor.as_ref().and_then(|g| g.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

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
    use braid_proto::resequence::ResequenceMode;
    use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};

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

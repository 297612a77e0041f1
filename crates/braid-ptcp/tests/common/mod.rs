//! A two-endpoint in-memory harness (after quinn's `Pair`): a client and a server
//! [`StripedConnection`] joined by simulated paths of a given rate, delay, loss, jitter
//! (reordering), duplication and death time, driven in virtual time that jumps to the next
//! wake-up. Deterministic: every random draw comes from the seed.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use braid_proto::time::{transmission_time, Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::{Config, Event, State, StripedConnection};

/// SplitMix64: small, seeded, good enough for a link model.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction of one path.
#[derive(Clone, Copy, Debug)]
pub struct LinkSpec {
    pub rate_bps: u64,
    pub delay: Duration,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Extra delay, uniform in [0, jitter): reorders datagrams of one path.
    pub jitter: Duration,
    /// Probability that a datagram arrives twice.
    pub duplicate: f64,
    /// From this instant on the path swallows everything, both ways.
    pub dies_at: Option<Instant>,
    /// A blackout: the path swallows everything sent or arriving in `[start, end)`.
    pub outage: Option<(Instant, Instant)>,
    /// Tail-drop queue in front of the link, in bytes.
    pub queue_bytes: u64,
}

impl LinkSpec {
    pub fn new(rate_bps: u64, delay_ms: u64) -> Self {
        let delay = Duration::from_millis(delay_ms);
        // A queue of one bandwidth-delay product of the round trip, at least 16 datagrams.
        let bdp = (u128::from(rate_bps) * 2 * delay.as_nanos() / 8 / 1_000_000_000) as u64;
        LinkSpec {
            rate_bps,
            delay,
            loss: 0.0,
            jitter: Duration::ZERO,
            duplicate: 0.0,
            dies_at: None,
            outage: None,
            queue_bytes: bdp.max(16 * 1500),
        }
    }
}

/// Bytes a datagram costs on the link beyond its payload (IP + UDP).
const LINK_OVERHEAD: u64 = 28;

#[derive(Clone, Debug)]
struct Link {
    spec: LinkSpec,
    free_at: Instant,
    dropped: u64,
    /// The longest a datagram waited in the queue in front of the link.
    max_backlog: Duration,
}

impl Link {
    fn dead(&self, now: Instant) -> bool {
        self.spec.dies_at.is_some_and(|t| now >= t)
            || self.spec.outage.is_some_and(|(a, b)| a <= now && now < b)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    at: Instant,
    order: u64,
    to_server: bool,
    path: u8,
    bytes: Vec<u8>,
}

/// Both ends and the paths between them.
pub struct Pair {
    pub now: Instant,
    pub client: StripedConnection,
    pub server: StripedConnection,
    /// `links[0]` client to server, `links[1]` server to client, one per path.
    links: [Vec<Link>; 2],
    queue: BinaryHeap<Reverse<Arrival>>,
    order: u64,
    rng: Rng,
    pub client_events: Vec<Event>,
    pub server_events: Vec<Event>,
    /// Largest receive-buffer occupancy seen at either end, against its capacity.
    pub max_buffered: u64,
    pub datagrams: u64,
    /// A wake-up the application wants (a slow reader's next read).
    pub app_wakeup: Option<Instant>,
}

impl Pair {
    /// `paths[i]` is path `i`, the same both ways.
    pub fn new(config: Config, paths: &[LinkSpec], seed: u64) -> Self {
        let now = Instant::ZERO;
        let ids: Vec<PathId> = (0..paths.len()).map(|i| PathId(i as u8)).collect();
        let link = |s: &LinkSpec| Link {
            spec: *s,
            free_at: now,
            dropped: 0,
            max_backlog: Duration::ZERO,
        };
        Pair {
            now,
            client: StripedConnection::connect(config, now, &ids),
            server: StripedConnection::accept(config),
            links: [
                paths.iter().map(link).collect(),
                paths.iter().map(link).collect(),
            ],
            queue: BinaryHeap::new(),
            order: 0,
            rng: Rng::new(seed),
            client_events: Vec::new(),
            server_events: Vec::new(),
            max_buffered: 0,
            datagrams: 0,
            app_wakeup: None,
        }
    }

    fn send(&mut self, to_server: bool, path: PathId, bytes: Vec<u8>) {
        self.datagrams += 1;
        let now = self.now;
        let link = &mut self.links[usize::from(!to_server)][path.index()];
        if link.dead(now) {
            return;
        }
        let len = bytes.len() as u64 + LINK_OVERHEAD;
        let backlog = link.free_at.saturating_duration_since(now);
        let backlog_bytes =
            (u128::from(link.spec.rate_bps) * backlog.as_nanos() / 8 / 1_000_000_000) as u64;
        if backlog_bytes + len > link.spec.queue_bytes {
            link.dropped += 1;
            return;
        }
        link.max_backlog = link.max_backlog.max(backlog);
        let depart = link.free_at.max(now) + transmission_time(len, link.spec.rate_bps);
        link.free_at = depart;
        let spec = link.spec;
        if self.rng.unit() < spec.loss {
            return;
        }
        let copies = if self.rng.unit() < spec.duplicate {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = spec.jitter.mul_f64(self.rng.unit());
            self.order += 1;
            self.queue.push(Reverse(Arrival {
                at: depart + spec.delay + jitter,
                order: self.order,
                to_server,
                path: path.0,
                bytes: bytes.clone(),
            }));
        }
    }

    /// The longest a client-to-server datagram waited in `path`'s queue, and how many that queue
    /// dropped.
    pub fn upstream_queue(&self, path: usize) -> (Duration, u64) {
        let l = &self.links[0][path];
        (l.max_backlog, l.dropped)
    }

    /// Sends everything both ends have to send now.
    pub fn flush(&mut self) {
        loop {
            let mut any = false;
            while let Some((p, b)) = self.client.poll_transmit(self.now) {
                self.send(true, p, b);
                any = true;
            }
            while let Some((p, b)) = self.server.poll_transmit(self.now) {
                self.send(false, p, b);
                any = true;
            }
            self.client_events
                .extend(core::iter::from_fn(|| self.client.poll_event()));
            self.server_events
                .extend(core::iter::from_fn(|| self.server.poll_event()));
            self.max_buffered = self
                .max_buffered
                .max(self.client.receive_buffered_bytes())
                .max(self.server.receive_buffered_bytes());
            if !any {
                break;
            }
        }
    }

    /// The next instant anything happens.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let arrival = self.queue.peek().map(|Reverse(a)| a.at);
        [
            arrival,
            self.client.poll_timeout(),
            self.server.poll_timeout(),
            self.app_wakeup.filter(|&t| t > self.now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps to the next wake-up (no later than `limit`) and handles what is due. Returns
    /// false if there is nothing left before `limit`.
    pub fn step(&mut self, limit: Instant) -> bool {
        self.flush();
        let Some(next) = self.next_wakeup() else {
            return false;
        };
        if next > limit {
            return false;
        }
        self.now = self.now.max(next);
        while self.queue.peek().is_some_and(|Reverse(a)| a.at <= self.now) {
            let Some(Reverse(a)) = self.queue.pop() else {
                break;
            };
            let link = &self.links[usize::from(!a.to_server)][usize::from(a.path)];
            if link.dead(self.now) {
                continue;
            }
            let ep = if a.to_server {
                &mut self.server
            } else {
                &mut self.client
            };
            ep.handle_datagram(self.now, PathId(a.path), &a.bytes);
        }
        if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
            self.client.handle_timeout(self.now);
        }
        if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
            self.server.handle_timeout(self.now);
        }
        true
    }

    /// Both ends closed.
    pub fn closed(&self) -> bool {
        self.client.state() == State::Closed && self.server.state() == State::Closed
    }
}

/// The test pattern: byte `i` of a transfer.
pub fn pattern(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (i as u8)
}

/// What a one-way transfer from client to server did.
#[derive(Debug)]
pub struct Outcome {
    pub received: Vec<u8>,
    pub finished: bool,
    pub closed: bool,
    pub duration: Duration,
    /// When the last byte was read.
    pub done_at: Option<Instant>,
    pub max_buffered: u64,
    pub capacity: u64,
    pub datagrams: u64,
    /// The longest time between two reads that returned data.
    pub max_read_gap: Duration,
}

/// How the server application reads.
#[derive(Clone, Copy, Debug)]
pub struct Reader {
    /// Time between reads (zero: whenever anything happens).
    pub period: Duration,
    /// The most bytes one read takes.
    pub bytes_per_read: usize,
}

impl Reader {
    /// Reads everything as soon as it arrives.
    pub const EAGER: Reader = Reader {
        period: Duration::ZERO,
        bytes_per_read: usize::MAX,
    };
}

/// Sends `len` bytes of [`pattern`] from client to server, reading at the server as fast as
/// data arrives; both close at the end. Stops at `limit` of virtual time.
pub fn transfer(pair: &mut Pair, len: u64, limit: Instant) -> Outcome {
    transfer_with(pair, len, limit, Reader::EAGER)
}

/// [`transfer`] with a reader of its own pace.
pub fn transfer_with(pair: &mut Pair, len: u64, limit: Instant, reader: Reader) -> Outcome {
    let mut written = 0u64;
    let mut received = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut buf = vec![0u8; 64 << 10];
    let mut client_closed = false;
    let mut server_closed = false;
    let mut done_at = None;
    let mut last_read = Instant::ZERO;
    let mut max_read_gap = Duration::ZERO;
    loop {
        while written < len {
            let n = (len - written).min(chunk.len() as u64) as usize;
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(written + k as u64);
            }
            let took = pair.client.write(&chunk[..n]);
            written += took as u64;
            if took < n {
                break;
            }
        }
        if written == len && !client_closed {
            pair.client.close(pair.now);
            client_closed = true;
        }
        if pair.app_wakeup.is_none_or(|t| t <= pair.now) {
            let mut budget = reader.bytes_per_read;
            while budget > 0 {
                let want = budget.min(buf.len());
                let n = pair.server.read(&mut buf[..want]);
                if n == 0 {
                    break;
                }
                budget -= n;
                received.extend_from_slice(&buf[..n]);
                max_read_gap = max_read_gap.max(pair.now - last_read);
                last_read = pair.now;
            }
            if !reader.period.is_zero() {
                pair.app_wakeup = Some(pair.now + reader.period);
            }
        }
        if pair.server.is_finished() && !server_closed {
            done_at = Some(pair.now);
            pair.server.close(pair.now);
            server_closed = true;
        }
        if pair.closed() || !pair.step(limit) {
            break;
        }
    }
    pair.flush();
    Outcome {
        received,
        // As the application saw it: a connection that ends later (a user timeout) forgets.
        finished: done_at.is_some(),
        closed: pair.closed(),
        duration: pair.now - Instant::ZERO,
        done_at,
        max_buffered: pair.max_buffered,
        capacity: pair.server.receive_buffer_capacity(),
        datagrams: pair.datagrams,
        max_read_gap,
    }
}

/// Checks an outcome byte for byte against the pattern.
pub fn check_exact(out: &Outcome, len: u64) -> Result<(), String> {
    if out.received.len() as u64 != len {
        return Err(format!(
            "received {} of {len} bytes (finished {}, at {:?})",
            out.received.len(),
            out.finished,
            out.duration
        ));
    }
    if let Some(i) = (0..len).find(|&i| out.received[i as usize] != pattern(i)) {
        return Err(format!("byte {i} differs"));
    }
    if !out.finished {
        return Err("stream not finished".into());
    }
    if out.max_buffered > out.capacity {
        return Err(format!(
            "receive buffer held {} > {}",
            out.max_buffered, out.capacity
        ));
    }
    Ok(())
}

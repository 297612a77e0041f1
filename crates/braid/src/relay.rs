//! `braid relay`: a UDP forwarder that turns a third host into an overlay path (the pTCP
//! paper, section 4.3 "Application Layer Switching": a connection striped "across the k paths"
//! of an overlay whose hosts "act as application layer switches").
//!
//! A client points one of its paths at the relay instead of at the server; the relay forwards
//! each datagram to the server from an upstream socket of its own for that client (one per
//! client source address), and the server's answers on that socket back to the client. The
//! server follows a path to the latest address it authenticated a datagram from (see
//! `docs/security.md`, "Roaming follows authenticated packets only"), so it answers the relay's
//! upstream socket without any configuration. The relay holds no key: it sees only the
//! session's ciphertext, and end-to-end security stays between client and server.
//!
//! Bounded: at most `max_clients` mappings (more are refused and counted), each dropped after
//! `idle` without traffic either way (counted). A datagram that cannot be sent is dropped and
//! counted; the relay never stops for a peer's misbehaviour.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

/// The largest datagram forwarded (a UDP payload of any size fits).
const MAX_DATAGRAM: usize = 65_535;
/// The listening socket's token; client mappings take the tokens after it.
const LISTEN: Token = Token(0);

/// What a relay does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// Where clients send (the address a client's path names as its `remote`).
    pub listen: SocketAddr,
    /// The server (its `listen` address).
    pub server: SocketAddr,
    /// A mapping without traffic either way for this long is dropped.
    pub idle: Duration,
    /// The most client mappings at once.
    pub max_clients: usize,
}

/// Why a relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr} (is another relay or braid server using that port? is the address one of this host's?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// `--to` did not resolve.
    #[error("cannot resolve the server address {0:?}: give HOST:PORT or IP:PORT")]
    Resolve(String),
    /// The poller failed.
    #[error("cannot set up polling: {0}")]
    Poll(#[source] io::Error),
}

/// Counters of a relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Datagrams from clients.
    pub from_clients: u64,
    /// Bytes from clients.
    pub from_clients_bytes: u64,
    /// Datagrams from the server forwarded to a client.
    pub to_clients: u64,
    /// Bytes forwarded to clients.
    pub to_clients_bytes: u64,
    /// Datagrams forwarded to the server.
    pub to_server: u64,
    /// Mappings opened.
    pub clients_opened: u64,
    /// Mappings dropped after `idle` without traffic.
    pub clients_expired: u64,
    /// Datagrams of a new client refused because `max_clients` mappings exist.
    pub refused_full: u64,
    /// Datagrams dropped because a send or an upstream socket failed.
    pub send_errors: u64,
}

/// One client's mapping: its address and the upstream socket that speaks for it.
struct Client {
    addr: SocketAddr,
    upstream: UdpSocket,
    last_seen: Instant,
}

/// The relay: a listening socket and one upstream socket per client source address.
pub struct Relay {
    config: RelayConfig,
    poll: Poll,
    events: Events,
    listen: UdpSocket,
    by_addr: HashMap<SocketAddr, Token>,
    clients: HashMap<Token, Client>,
    next_token: usize,
    stats: RelayStats,
    buf: Vec<u8>,
}

/// Resolves `HOST:PORT` (the first address).
pub fn resolve(s: &str) -> Result<SocketAddr, RelayError> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| RelayError::Resolve(s.to_owned()))
}

impl Relay {
    /// Binds the listening socket.
    pub fn bind(config: RelayConfig) -> Result<Relay, RelayError> {
        let mut listen = UdpSocket::bind(config.listen).map_err(|source| RelayError::Bind {
            addr: config.listen,
            source,
        })?;
        let poll = Poll::new().map_err(RelayError::Poll)?;
        poll.registry()
            .register(&mut listen, LISTEN, Interest::READABLE)
            .map_err(RelayError::Poll)?;
        Ok(Relay {
            config,
            poll,
            events: Events::with_capacity(256),
            listen,
            by_addr: HashMap::new(),
            clients: HashMap::new(),
            next_token: 1,
            stats: RelayStats::default(),
            buf: vec![0; MAX_DATAGRAM],
        })
    }

    /// The listening address (with the port the OS chose, if `listen` asked for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listen.local_addr()
    }

    /// Counters.
    pub fn stats(&self) -> RelayStats {
        self.stats
    }

    /// Mappings open now.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Waits up to `timeout` for datagrams and forwards them; then drops idle mappings.
    pub fn poll_once(&mut self, timeout: Duration) -> io::Result<()> {
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        let tokens: Vec<Token> = self.events.iter().map(|e| e.token()).collect();
        for t in tokens {
            if t == LISTEN {
                self.forward_from_clients();
            } else {
                self.forward_from_server(t);
            }
        }
        self.expire(Instant::now());
        Ok(())
    }

    /// Drops the mappings idle since before `now - idle`.
    pub fn expire(&mut self, now: Instant) {
        let idle = self.config.idle;
        let stale: Vec<Token> = self
            .clients
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.last_seen) >= idle)
            .map(|(&t, _)| t)
            .collect();
        for t in stale {
            if let Some(mut c) = self.clients.remove(&t) {
                let _ = self.poll.registry().deregister(&mut c.upstream);
                self.by_addr.remove(&c.addr);
                self.stats.clients_expired += 1;
            }
        }
    }

    /// Datagrams on the listening socket, until it would block.
    fn forward_from_clients(&mut self) {
        loop {
            let (n, from) = match self.listen.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // An ICMP error queued on the socket (a client gone): drop it and go on.
                Err(_) => {
                    self.stats.send_errors += 1;
                    continue;
                }
            };
            self.stats.from_clients += 1;
            self.stats.from_clients_bytes += n as u64;
            let Some(token) = self.client_for(from) else {
                continue;
            };
            let Some(c) = self.clients.get_mut(&token) else {
                continue;
            };
            c.last_seen = Instant::now();
            match c.upstream.send(&self.buf[..n]) {
                Ok(_) => self.stats.to_server += 1,
                Err(_) => self.stats.send_errors += 1,
            }
        }
    }

    /// The mapping of client `from`, opened if new and there is room.
    fn client_for(&mut self, from: SocketAddr) -> Option<Token> {
        if let Some(&t) = self.by_addr.get(&from) {
            return Some(t);
        }
        if self.clients.len() >= self.config.max_clients {
            self.stats.refused_full += 1;
            return None;
        }
        let any: SocketAddr = if self.config.server.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let token = Token(self.next_token);
        let opened = UdpSocket::bind(any).and_then(|mut s| {
            // Connected: the kernel passes up only the server's datagrams.
            s.connect(self.config.server)?;
            self.poll
                .registry()
                .register(&mut s, token, Interest::READABLE)?;
            Ok(s)
        });
        let Ok(upstream) = opened else {
            self.stats.send_errors += 1;
            return None;
        };
        self.next_token += 1;
        self.by_addr.insert(from, token);
        self.clients.insert(
            token,
            Client {
                addr: from,
                upstream,
                last_seen: Instant::now(),
            },
        );
        self.stats.clients_opened += 1;
        Some(token)
    }

    /// Datagrams from the server on a mapping's upstream socket, until it would block.
    fn forward_from_server(&mut self, token: Token) {
        let Some(c) = self.clients.get_mut(&token) else {
            return;
        };
        loop {
            let n = match c.upstream.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // The server's port unreachable (ICMP): drop and go on.
                Err(_) => {
                    self.stats.send_errors += 1;
                    continue;
                }
            };
            c.last_seen = Instant::now();
            match self.listen.send_to(&self.buf[..n], c.addr) {
                Ok(_) => {
                    self.stats.to_clients += 1;
                    self.stats.to_clients_bytes += n as u64;
                }
                Err(_) => self.stats.send_errors += 1,
            }
        }
    }
}

/// `braid relay`.
#[derive(clap::Args, Debug)]
pub struct RelayArgs {
    /// Where clients send: a client path's `remote` names this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// The braid server's listen address (HOST:PORT or IP:PORT).
    #[arg(long, value_name = "SERVER:PORT")]
    pub to: String,
    /// Drop a client's mapping after this long without traffic either way.
    #[arg(long, default_value = "120s")]
    pub idle: String,
    /// The most client source addresses at once; more are refused and counted.
    #[arg(long, default_value_t = 1024)]
    pub max_clients: usize,
    /// Print the counters this often (0: only at exit).
    #[arg(long, default_value = "0s")]
    pub stats_every: String,
}

/// Runs a relay in the foreground until SIGINT or SIGTERM; prints the counters at exit.
pub fn run(args: &RelayArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::sync::atomic::Ordering;
    let to_std = |s: &str, what: &str| -> anyhow::Result<Duration> {
        let d = crate::spec::duration(s).with_context(|| format!("in --{what}"))?;
        Ok(Duration::from_nanos(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        ))
    };
    let idle = to_std(&args.idle, "idle")?;
    if idle.is_zero() {
        anyhow::bail!("--idle must be longer than 0s");
    }
    let stats_every = to_std(&args.stats_every, "stats-every")?;
    if args.max_clients == 0 {
        anyhow::bail!("--max-clients must be at least 1");
    }
    let server = resolve(&args.to)?;
    let mut relay = Relay::bind(RelayConfig {
        listen: args.listen,
        server,
        idle,
        max_clients: args.max_clients,
    })?;
    let stop = crate::stop_signal()?;
    eprintln!(
        "braid relay: {} -> {server}, idle {:?}, at most {} clients (Ctrl-C to stop)",
        relay.local_addr().unwrap_or(args.listen),
        idle,
        args.max_clients
    );
    let mut last_print = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        relay
            .poll_once(Duration::from_millis(500))
            .context("polling the relay's sockets")?;
        if !stats_every.is_zero() && last_print.elapsed() >= stats_every {
            last_print = Instant::now();
            eprintln!(
                "braid relay: {} clients, {:?}",
                relay.clients(),
                relay.stats()
            );
        }
    }
    eprintln!("braid relay: stopped, {} clients open", relay.clients());
    println!("{:?}", relay.stats());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket as StdUdp;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn config(server: SocketAddr) -> RelayConfig {
        RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            server,
            idle: Duration::from_secs(60),
            max_clients: 2,
        }
    }

    /// Polls `relay` until `done` says so (bounded number of rounds; no timing assertion).
    fn pump(relay: &mut Relay, mut done: impl FnMut(&Relay) -> bool) {
        for _ in 0..500 {
            relay.poll_once(Duration::from_millis(10)).unwrap();
            if done(relay) {
                return;
            }
        }
        panic!("relay did not get there: {:?}", relay.stats());
    }

    #[test]
    fn forwards_both_ways_one_upstream_socket_per_client() {
        let server = StdUdp::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut relay = Relay::bind(config(server.local_addr().unwrap())).unwrap();
        let at = relay.local_addr().unwrap();
        // The server echoes everything, prefixed with the address it came from.
        let stop = Arc::new(AtomicBool::new(false));
        let echo = {
            let server = server.try_clone().unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0; 1500];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = server.recv_from(&mut buf) {
                        seen.push(from);
                        server.send_to(&buf[..n], from).unwrap();
                    }
                }
                seen
            })
        };
        let a = StdUdp::bind("127.0.0.1:0").unwrap();
        let b = StdUdp::bind("127.0.0.1:0").unwrap();
        for c in [&a, &b] {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        a.send_to(b"from a", at).unwrap();
        b.send_to(b"from b", at).unwrap();
        a.send_to(b"again a", at).unwrap();
        pump(&mut relay, |r| r.stats().to_clients == 3);
        let mut buf = [0; 64];
        let mut got_a = Vec::new();
        for _ in 0..2 {
            let (n, from) = a.recv_from(&mut buf).unwrap();
            assert_eq!(from, at, "answers come from the relay's listening address");
            got_a.push(buf[..n].to_vec());
        }
        got_a.sort();
        assert_eq!(got_a, vec![b"again a".to_vec(), b"from a".to_vec()]);
        let (n, _) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"from b");
        stop.store(true, Ordering::Relaxed);
        // Wake the echo thread.
        a.send_to(b"bye", at).unwrap();
        pump(&mut relay, |r| r.stats().to_server == 4);
        let seen = echo.join().unwrap();
        // Two clients, two upstream sockets: the server saw two source addresses.
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 2, "{seen:?}");
        let s = relay.stats();
        assert_eq!(
            (s.from_clients, s.clients_opened, s.refused_full),
            (4, 2, 0)
        );
        assert_eq!(s.from_clients_bytes, 6 + 6 + 7 + 3);
    }

    #[test]
    fn refuses_past_max_clients_and_expires_idle_mappings() {
        let server = StdUdp::bind("127.0.0.1:0").unwrap();
        let mut relay = Relay::bind(config(server.local_addr().unwrap())).unwrap();
        let at = relay.local_addr().unwrap();
        let clients: Vec<StdUdp> = (0..3)
            .map(|_| StdUdp::bind("127.0.0.1:0").unwrap())
            .collect();
        for c in &clients {
            c.send_to(b"x", at).unwrap();
        }
        pump(&mut relay, |r| r.stats().from_clients == 3);
        assert_eq!(relay.clients(), 2);
        assert_eq!(relay.stats().refused_full, 1);
        // Time is injected: nothing is idle yet, then everything is.
        relay.expire(Instant::now());
        assert_eq!(relay.clients(), 2);
        relay.expire(Instant::now() + Duration::from_secs(61));
        assert_eq!(relay.clients(), 0);
        assert_eq!(relay.stats().clients_expired, 2);
        // The refused client gets a mapping now.
        clients[2].send_to(b"y", at).unwrap();
        pump(&mut relay, |r| r.clients() == 1);
    }

    #[test]
    fn bind_failure_says_what_to_check() {
        let taken = StdUdp::bind("127.0.0.1:0").unwrap();
        let mut c = config("127.0.0.1:9".parse().unwrap());
        c.listen = taken.local_addr().unwrap();
        let err = Relay::bind(c).err().expect("the port is taken");
        let msg = err.to_string();
        assert!(msg.starts_with("cannot listen on 127.0.0.1:"), "{msg}");
        assert!(msg.contains("another relay"), "{msg}");
        assert!(matches!(
            resolve("no port here"),
            Err(RelayError::Resolve(_))
        ));
    }
}

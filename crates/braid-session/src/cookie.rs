//! Handshake flood protection: WireGuard's cookie MACs, cookie replies under load and a rate
//! limit per source (the WireGuard paper, NDSS 2017, section 5.4.4 "Cookie MACs" and section 5.3
//! "Denial of service mitigation"; WireGuard's `cookie.c` and `ratelimiter.c`).
//!
//! A handshake initiation makes the responder do Diffie-Hellman work before it can tell whether
//! the initiation is genuine: four X25519 operations in [`crate::Session`], two more when a
//! proxy first looks up which client it is from ([`crate::initiator_key`]). Without a defence a
//! flood of initiations keeps the daemon's one thread busy and the tunnel slow. So every
//! initiation ends in two MACs:
//!
//! - **`mac1`**, keyed by a hash of the responder's public key, over everything before it. It
//!   costs a BLAKE2s to check, and an initiation without it is dropped before any DH
//!   ([`CookieKeys::mac1_ok`], counted `bad_mac`). Whoever does not know the server's public key
//!   (a port scanner, a stray packet) costs it nothing more.
//! - **`mac2`**, keyed by a *cookie*, over everything before it. A responder under load
//!   ([`CookieGuard`]: more than [`LOAD_RATE`] initiations a second with a good `mac1`) answers
//!   an initiation without a good `mac2` with a cookie reply instead of a handshake: the cookie
//!   is a MAC of the initiator's source address and port under a secret that changes every
//!   [`COOKIE_SECRET_LIFETIME`], encrypted under a key from the responder's public key with the
//!   initiation's `mac1` as associated data (so only the one who sent that initiation and can
//!   receive at its source address can use it). The initiator's next initiation from that
//!   address carries `mac2` keyed by the cookie ([`CookieKeys::seal_init`]). A flood from
//!   spoofed addresses therefore gets cookie replies (64 bytes, smaller than an initiation, so
//!   no amplification) and no DH; initiations that prove their address are limited to
//!   [`SOURCE_RATE`] a second per source address (an IPv6 source counts by its /64), except
//!   that a source the server already has authenticated traffic from (a running client's path,
//!   rekeying) counts by its exact address and port, so a neighbour behind the same address
//!   (carrier-grade NAT) cannot use up its share.
//!
//! A cookie reply carries no handshake: the initiator keeps it per path (each path has its own
//! source address) and retries on that path when its retry timer fires.
//!
//! braid departs from WireGuard in three small ways: only the initiation carries the MACs (the
//! responder's answer is matched to a pending handshake by its index before any DH, and a
//! client has no listening port to flood); "under load" is a rate of initiations rather than a
//! queue length, because the daemon handles them on its one thread as they come; and the
//! cookie is keyed by address and port, as WireGuard's is, but kept per path by the initiator.

use crate::keys::PublicKey;
use blake2::digest::consts::U16;
use blake2::digest::{Digest, FixedOutput, Mac};
use blake2::{Blake2s256, Blake2sMac};
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_wire::outer::{
    Outer, COOKIE_NONCE_LEN, COOKIE_REPLY_LEN, ENCRYPTED_COOKIE_LEN, INIT_MACS_LEN, MAC_LEN,
};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Label of the `mac1` key's hash (WireGuard's).
const LABEL_MAC1: &[u8] = b"mac1----";
/// Label of the cookie encryption key's hash (WireGuard's).
const LABEL_COOKIE: &[u8] = b"cookie--";

/// The responder draws a new cookie secret this often (WireGuard: two minutes).
pub const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);
/// The initiator uses a cookie this long after it arrived: the secret's lifetime less a margin
/// for the reply's trip (WireGuard's `COOKIE_SECRET_LATENCY`).
pub const COOKIE_LIFETIME: Duration = Duration::from_secs(115);
/// Initiations with a good `mac1` a second, beyond which the responder is under load.
pub const LOAD_RATE: u64 = 100;
/// ... and how many may come at once before that.
pub const LOAD_BURST: u64 = 100;
/// A responder stays under load this long after the last initiation that found it so.
pub const LOAD_HOLD: Duration = Duration::from_secs(1);
/// Initiations with a good `mac2` a second from one source address, under load (WireGuard's
/// `PACKETS_PER_SECOND`).
pub const SOURCE_RATE: u64 = 20;
/// ... and how many at once (WireGuard's `PACKETS_BURSTABLE`).
pub const SOURCE_BURST: u64 = 5;
/// At most this many source addresses are tracked; an initiation from one more while all are
/// busy is dropped.
pub const MAX_SOURCES: usize = 8192;

/// BLAKE2s-128 keyed by `key` over `data`: WireGuard's `MAC`.
fn mac(key: &[u8], data: &[u8]) -> [u8; MAC_LEN] {
    let mut m = <Blake2sMac<U16> as Mac>::new_from_slice(key).expect("a key of at most 32 bytes");
    Mac::update(&mut m, data);
    m.finalize_fixed().into()
}

/// `MAC(key, data) == tag`, in constant time.
fn mac_ok(key: &[u8], data: &[u8], tag: &[u8]) -> bool {
    let mut m = <Blake2sMac<U16> as Mac>::new_from_slice(key).expect("a key of at most 32 bytes");
    Mac::update(&mut m, data);
    m.verify_slice(tag).is_ok()
}

/// BLAKE2s-256 of `label || key`: WireGuard's `HASH(LABEL || Spub)`.
fn labelled_hash(label: &[u8], key: &PublicKey) -> [u8; 32] {
    Blake2s256::new()
        .chain_update(label)
        .chain_update(key.0)
        .finalize()
        .into()
}

/// The keys both ends derive from the responder's public key.
#[derive(Clone)]
pub struct CookieKeys {
    mac1: [u8; 32],
    cookie: [u8; 32],
}

impl std::fmt::Debug for CookieKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKeys")
    }
}

impl CookieKeys {
    /// The keys of the responder whose public key is `responder`.
    pub fn new(responder: &PublicKey) -> Self {
        CookieKeys {
            mac1: labelled_hash(LABEL_MAC1, responder),
            cookie: labelled_hash(LABEL_COOKIE, responder),
        }
    }

    /// Writes `mac1`, and `mac2` keyed by `cookie` (zero without one), into the last 32 bytes
    /// of an emitted initiation; returns `mac1`. `datagram` must be at least 32 bytes long.
    fn seal_init(&self, datagram: &mut [u8], cookie: Option<&[u8; MAC_LEN]>) -> [u8; MAC_LEN] {
        let at1 = datagram.len() - INIT_MACS_LEN;
        let mac1 = mac(&self.mac1, &datagram[..at1]);
        datagram[at1..at1 + MAC_LEN].copy_from_slice(&mac1);
        let at2 = at1 + MAC_LEN;
        let mac2 = cookie.map_or([0; MAC_LEN], |c| mac(c, &datagram[..at2]));
        datagram[at2..].copy_from_slice(&mac2);
        mac1
    }

    /// An initiation datagram on `path` from `sender_index` carrying the Noise message
    /// `noise`, sealed with `mac1` and with `mac2` keyed by `cookie` (zero without one); and
    /// its `mac1`.
    pub fn initiation(
        &self,
        path: PathId,
        sender_index: u32,
        noise: &[u8],
        cookie: Option<&[u8; MAC_LEN]>,
    ) -> (Vec<u8>, [u8; MAC_LEN]) {
        let outer = Outer::HandshakeInit {
            path,
            sender_index,
            noise,
            mac1: [0; MAC_LEN],
            mac2: [0; MAC_LEN],
        };
        let mut d = vec![0u8; outer.buffer_len()];
        outer
            .emit_into(&mut d)
            .expect("the buffer is the initiation's length");
        let mac1 = self.seal_init(&mut d, cookie);
        (d, mac1)
    }

    /// Whether an initiation's `mac1` is right (one BLAKE2s; constant time).
    pub fn mac1_ok(&self, datagram: &[u8]) -> bool {
        let Some(at) = datagram.len().checked_sub(INIT_MACS_LEN) else {
            return false;
        };
        mac_ok(&self.mac1, &datagram[..at], &datagram[at..at + MAC_LEN])
    }

    /// Initiator: the cookie in a cookie reply that answers the initiation whose `mac1` was
    /// `mac1`; `None` if it does not open.
    pub fn open_cookie(
        &self,
        mac1: &[u8; MAC_LEN],
        nonce: &[u8; COOKIE_NONCE_LEN],
        sealed: &[u8; ENCRYPTED_COOKIE_LEN],
    ) -> Option<[u8; MAC_LEN]> {
        let aead = XChaCha20Poly1305::new((&self.cookie).into());
        let mut cookie: [u8; MAC_LEN] = sealed[..MAC_LEN].try_into().expect("16 bytes");
        let tag = &sealed[MAC_LEN..];
        aead.decrypt_in_place_detached(XNonce::from_slice(nonce), mac1, &mut cookie, tag.into())
            .ok()?;
        Some(cookie)
    }

    fn seal_cookie(
        &self,
        mac1: &[u8; MAC_LEN],
        nonce: &[u8; COOKIE_NONCE_LEN],
        cookie: [u8; MAC_LEN],
    ) -> [u8; ENCRYPTED_COOKIE_LEN] {
        let aead = XChaCha20Poly1305::new((&self.cookie).into());
        let mut out = [0u8; ENCRYPTED_COOKIE_LEN];
        out[..MAC_LEN].copy_from_slice(&cookie);
        let tag = aead
            .encrypt_in_place_detached(XNonce::from_slice(nonce), mac1, &mut out[..MAC_LEN])
            .expect("16 bytes always encrypt");
        out[MAC_LEN..].copy_from_slice(&tag);
        out
    }
}

/// A token bucket: `burst` tokens, refilled at `rate` a second, kept in nanoseconds of credit.
/// The guard's limits, and the daemon's on its ICMP "packet too big" answers.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    credit_ns: u64,
    last: Instant,
}

impl Bucket {
    /// A bucket holding `burst` tokens at `now`.
    pub fn full(now: Instant, rate: u64, burst: u64) -> Self {
        Bucket {
            credit_ns: burst * (1_000_000_000 / rate),
            last: now,
        }
    }

    /// Takes a token if there is one.
    pub fn take(&mut self, now: Instant, rate: u64, burst: u64) -> bool {
        let cost = 1_000_000_000 / rate;
        let elapsed = now.saturating_duration_since(self.last).as_nanos();
        self.credit_ns = self
            .credit_ns
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
            .min(burst * cost);
        self.last = now;
        if self.credit_ns >= cost {
            self.credit_ns -= cost;
            true
        } else {
            false
        }
    }
}

/// Whose rate an initiation counts against under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SourceKey {
    /// An unknown source: its IPv4 address, or its IPv6 /64.
    Address(IpAddr),
    /// A source with authenticated traffic: its exact address and port.
    Known(SocketAddr),
}

/// Why [`CookieGuard::check`] dropped an initiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its `mac1` is not keyed by this responder's public key.
    BadMac,
    /// Under load, with a good `mac2`, but its source is over its rate.
    RateLimited,
}

/// What [`CookieGuard::check`] decided about a datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the session (anything that is not an initiation passes untouched).
    Pass,
    /// Drop it, and why.
    Drop(Refused),
    /// Drop it and send this cookie reply to its source.
    Reply([u8; COOKIE_REPLY_LEN]),
}

/// What the guard has done, for `braid status` and the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GuardCounters {
    /// Initiations dropped for a wrong `mac1` (no DH done).
    pub bad_mac: u64,
    /// Cookie replies sent instead of handshakes, under load.
    pub cookies_sent: u64,
    /// Initiations with a good `mac2` dropped because their source was over its rate.
    pub rate_limited: u64,
    /// Initiations handed on to the handshake.
    pub passed: u64,
    /// Times the responder came under load.
    pub load_events: u64,
}

/// The responder's front door: checks every initiation's MACs before any Diffie-Hellman work,
/// and under load answers with cookies and limits each source's rate (module docs). Sans-IO:
/// the driver passes the clock and the source address, and sends the replies.
pub struct CookieGuard {
    keys: CookieKeys,
    secret: [u8; 32],
    secret_born: Instant,
    rng: ChaCha20Rng,
    load: Bucket,
    under_load_until: Option<Instant>,
    sources: HashMap<SourceKey, Bucket>,
    last_prune: Instant,
    counters: GuardCounters,
}

impl CookieGuard {
    /// A guard for the responder whose public key is `responder`; `seed` feeds its cookie
    /// secrets and reply nonces.
    pub fn new(responder: &PublicKey, now: Instant, seed: [u8; 32]) -> Self {
        let mut rng = ChaCha20Rng::from_seed(seed);
        let mut secret = [0u8; 32];
        rng.fill_bytes(&mut secret);
        CookieGuard {
            keys: CookieKeys::new(responder),
            secret,
            secret_born: now,
            rng,
            load: Bucket::full(now, LOAD_RATE, LOAD_BURST),
            under_load_until: None,
            sources: HashMap::new(),
            last_prune: now,
            counters: GuardCounters::default(),
        }
    }

    /// What the guard has done so far.
    pub fn counters(&self) -> GuardCounters {
        self.counters
    }

    /// Whether initiations now need a cookie.
    pub fn under_load(&self, now: Instant) -> bool {
        self.under_load_until.is_some_and(|t| now < t)
    }

    /// Checks a datagram from `source` before it reaches any session. `known` says whether the
    /// driver has authenticated traffic from exactly this address and port (a peer's path), so
    /// that under load it gets a rate of its own rather than its address's; it is asked only
    /// then (an initiation under load with a good `mac2`).
    pub fn check(
        &mut self,
        now: Instant,
        source: SocketAddr,
        known: impl FnOnce() -> bool,
        datagram: &[u8],
    ) -> Verdict {
        let Ok(Outer::HandshakeInit {
            path,
            sender_index,
            mac1,
            mac2,
            ..
        }) = Outer::parse(datagram)
        else {
            return Verdict::Pass;
        };
        if !self.keys.mac1_ok(datagram) {
            self.counters.bad_mac += 1;
            return Verdict::Drop(Refused::BadMac);
        }
        if !self.load.take(now, LOAD_RATE, LOAD_BURST) {
            if !self.under_load(now) {
                self.counters.load_events += 1;
            }
            self.under_load_until = Some(now + LOAD_HOLD);
        }
        if !self.under_load(now) {
            self.counters.passed += 1;
            return Verdict::Pass;
        }
        self.rotate_secret(now);
        let cookie = self.cookie(source);
        let at2 = datagram.len() - MAC_LEN;
        if !mac_ok(&cookie, &datagram[..at2], &mac2) {
            self.counters.cookies_sent += 1;
            return Verdict::Reply(self.reply(path, sender_index, &mac1, cookie));
        }
        let key = if known() {
            SourceKey::Known(source)
        } else {
            SourceKey::Address(address_key(source.ip()))
        };
        if !self.source_allows(now, key) {
            self.counters.rate_limited += 1;
            return Verdict::Drop(Refused::RateLimited);
        }
        self.counters.passed += 1;
        Verdict::Pass
    }

    fn rotate_secret(&mut self, now: Instant) {
        if now.saturating_duration_since(self.secret_born) >= COOKIE_SECRET_LIFETIME {
            self.rng.fill_bytes(&mut self.secret);
            self.secret_born = now;
        }
    }

    /// The cookie of a source: a MAC of its address and port under the current secret.
    fn cookie(&self, source: SocketAddr) -> [u8; MAC_LEN] {
        let mut data = [0u8; 18];
        let n = match source.ip() {
            IpAddr::V4(a) => {
                data[..4].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                data[..16].copy_from_slice(&a.octets());
                16
            }
        };
        data[n..n + 2].copy_from_slice(&source.port().to_be_bytes());
        mac(&self.secret, &data[..n + 2])
    }

    fn reply(
        &mut self,
        path: PathId,
        receiver_index: u32,
        mac1: &[u8; MAC_LEN],
        cookie: [u8; MAC_LEN],
    ) -> [u8; COOKIE_REPLY_LEN] {
        let mut nonce = [0u8; COOKIE_NONCE_LEN];
        self.rng.fill_bytes(&mut nonce);
        let reply = Outer::CookieReply {
            path,
            receiver_index,
            nonce,
            cookie: self.keys.seal_cookie(mac1, &nonce, cookie),
        };
        let mut out = [0u8; COOKIE_REPLY_LEN];
        reply
            .emit_into(&mut out)
            .expect("a cookie reply is 64 bytes");
        out
    }

    /// Takes a token from `key`'s bucket. A new unknown source is refused while
    /// [`MAX_SOURCES`] are tracked; a known one never (there are only as many as the peers'
    /// paths).
    fn source_allows(&mut self, now: Instant, key: SourceKey) -> bool {
        if now.saturating_duration_since(self.last_prune) >= Duration::from_secs(1) {
            // A bucket idle for a second is full again: forgetting it changes nothing.
            self.sources
                .retain(|_, b| now.saturating_duration_since(b.last) < Duration::from_secs(1));
            self.last_prune = now;
        }
        if matches!(key, SourceKey::Address(_))
            && !self.sources.contains_key(&key)
            && self.sources.len() >= MAX_SOURCES
        {
            return false;
        }
        self.sources
            .entry(key)
            .or_insert_with(|| Bucket::full(now, SOURCE_RATE, SOURCE_BURST))
            .take(now, SOURCE_RATE, SOURCE_BURST)
    }
}

/// An unknown source's rate key: an IPv4 address (also when mapped into IPv6), or an IPv6 /64.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut o = a.octets();
                o[8..].fill(0);
                IpAddr::V6(o.into())
            }
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PrivateKey;

    fn responder() -> PublicKey {
        PrivateKey([7; 32]).public_key()
    }

    /// A sealed initiation with an arbitrary Noise part, as an initiator would send it.
    fn init(keys: &CookieKeys, sender_index: u32, cookie: Option<&[u8; 16]>) -> Vec<u8> {
        keys.initiation(PathId(1), sender_index, &[0x42; 120], cookie)
            .0
    }

    /// The cookie a guard under load gives `source` for an initiation without one.
    fn cookie_for(
        g: &mut CookieGuard,
        keys: &CookieKeys,
        now: Instant,
        source: SocketAddr,
        known: bool,
    ) -> [u8; 16] {
        let (d, mac1) = keys.initiation(PathId(1), 1, &[0x42; 120], None);
        let Verdict::Reply(r) = g.check(now, source, || known, &d) else {
            panic!("under load: a cookie reply");
        };
        let Ok(Outer::CookieReply { nonce, cookie, .. }) = Outer::parse(&r) else {
            panic!("a cookie reply parses");
        };
        keys.open_cookie(&mac1, &nonce, &cookie)
            .expect("the reply opens")
    }

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn src(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    /// Drives the guard into load with `LOAD_BURST` initiations at one instant.
    fn load(g: &mut CookieGuard, keys: &CookieKeys, now: Instant) {
        for i in 0..LOAD_BURST {
            let d = init(keys, i as u32, None);
            assert_eq!(g.check(now, src(9), || false, &d), Verdict::Pass);
        }
    }

    /// The test vector: a MAC is keyed BLAKE2s with a 16-byte output, the key is BLAKE2s-256 of
    /// the label and the public key (WireGuard's construction), so anything built from the
    /// same primitives agrees.
    #[test]
    fn macs_are_keyed_blake2s_128() {
        let keys = CookieKeys::new(&responder());
        let d = init(&keys, 5, None);
        let at1 = d.len() - 32;
        let key: [u8; 32] = Blake2s256::new()
            .chain_update(b"mac1----")
            .chain_update(responder().0)
            .finalize()
            .into();
        let mut m = <Blake2sMac<U16> as Mac>::new_from_slice(&key).unwrap();
        Mac::update(&mut m, &d[..at1]);
        assert_eq!(&d[at1..at1 + 16], &m.finalize_fixed()[..]);
        assert_eq!(&d[at1 + 16..], &[0u8; 16], "no cookie: mac2 is zero");
        assert!(keys.mac1_ok(&d));
        let other = CookieKeys::new(&PrivateKey([8; 32]).public_key());
        assert!(!other.mac1_ok(&d), "keyed by the responder's key");
    }

    #[test]
    fn a_wrong_mac1_is_dropped_and_anything_else_passes_untouched() {
        let keys = CookieKeys::new(&responder());
        let mut g = CookieGuard::new(&responder(), at(0), [1; 32]);
        let mut d = init(&keys, 1, None);
        let last = d.len() - 20;
        d[last] ^= 1;
        assert_eq!(
            g.check(at(0), src(1), || false, &d),
            Verdict::Drop(Refused::BadMac)
        );
        let stranger = CookieKeys::new(&PrivateKey([9; 32]).public_key());
        assert_eq!(
            g.check(at(0), src(1), || false, &init(&stranger, 1, None)),
            Verdict::Drop(Refused::BadMac)
        );
        assert_eq!(g.counters().bad_mac, 2);
        assert_eq!(g.check(at(0), src(1), || false, b"garbage"), Verdict::Pass);
        assert_eq!(
            g.check(at(0), src(1), || false, &init(&keys, 1, None)),
            Verdict::Pass
        );
        assert_eq!(g.counters().passed, 1);
        // Whether the source is known is asked only under load, of a good mac2.
        let unasked = || -> bool { panic!("`known` asked out of load") };
        assert_eq!(
            g.check(at(0), src(1), unasked, &init(&keys, 2, None)),
            Verdict::Pass
        );
        // Wrong MACs do not count towards the load.
        for _ in 0..10 * LOAD_BURST {
            assert_eq!(
                g.check(at(1), src(1), || false, &d),
                Verdict::Drop(Refused::BadMac)
            );
        }
        assert!(!g.under_load(at(1)));
    }

    #[test]
    fn under_load_an_initiation_needs_the_cookie_of_its_address() {
        let keys = CookieKeys::new(&responder());
        let mut g = CookieGuard::new(&responder(), at(0), [2; 32]);
        load(&mut g, &keys, at(0));
        assert!(!g.under_load(at(0)));
        let first = init(&keys, 77, None);
        let Verdict::Reply(reply) = g.check(at(0), src(4000), || false, &first) else {
            panic!("under load: a cookie reply");
        };
        assert!(g.under_load(at(0)));
        assert_eq!(g.counters().load_events, 1);
        let Ok(Outer::CookieReply {
            path,
            receiver_index,
            nonce,
            cookie,
        }) = Outer::parse(&reply)
        else {
            panic!("a cookie reply parses");
        };
        assert_eq!((path, receiver_index), (PathId(1), 77));
        let mac1: [u8; 16] = first[first.len() - 32..first.len() - 16]
            .try_into()
            .unwrap();
        // Only the mac1 of the initiation it answers opens it.
        assert_eq!(keys.open_cookie(&[0; 16], &nonce, &cookie), None);
        let c = keys.open_cookie(&mac1, &nonce, &cookie).expect("opens");
        let retry = init(&keys, 78, Some(&c));
        assert_eq!(g.check(at(0), src(4000), || false, &retry), Verdict::Pass);
        // The cookie is bound to the address and port it was sent to.
        assert!(matches!(
            g.check(at(0), src(4001), || false, &retry),
            Verdict::Reply(_)
        ));
        let elsewhere = SocketAddr::from(([192, 0, 2, 2], 4000));
        assert!(matches!(
            g.check(at(0), elsewhere, || false, &retry),
            Verdict::Reply(_)
        ));
        // Out of load a second after the last initiation that found it so.
        assert!(g.under_load(at(999)));
        assert!(!g.under_load(at(1000)));
        assert_eq!(g.check(at(1000), src(1), || false, &first), Verdict::Pass);
    }

    /// A neighbour behind the client's address (carrier-grade NAT) that holds cookies of its
    /// own uses up the address's rate; a source the server has authenticated traffic from has
    /// its own, and is never refused for a full table.
    #[test]
    fn a_known_source_keeps_its_own_rate_under_load() {
        let keys = CookieKeys::new(&responder());
        let mut g = CookieGuard::new(&responder(), at(0), [7; 32]);
        load(&mut g, &keys, at(0));
        let cookie_for =
            |g: &mut CookieGuard, s: SocketAddr, known| cookie_for(g, &keys, at(0), s, known);
        let (client, neighbour) = (src(7000), src(7001));
        let cn = cookie_for(&mut g, neighbour, false);
        let from_neighbour = init(&keys, 2, Some(&cn));
        while g.check(at(0), neighbour, || false, &from_neighbour) == Verdict::Pass {}
        let cc = cookie_for(&mut g, client, true);
        let from_client = init(&keys, 3, Some(&cc));
        // As an unknown source the client would share the neighbour's empty bucket.
        assert_eq!(
            g.check(at(0), client, || false, &from_client),
            Verdict::Drop(Refused::RateLimited)
        );
        assert_eq!(g.check(at(0), client, || true, &from_client), Verdict::Pass);
        // Two known sources behind one address (a client's two paths through one NAT) have a
        // rate each.
        while g.check(at(0), client, || true, &from_client) == Verdict::Pass {}
        let other_path = src(7002);
        let co = cookie_for(&mut g, other_path, true);
        assert_eq!(
            g.check(at(0), other_path, || true, &init(&keys, 4, Some(&co))),
            Verdict::Pass
        );
        // Fill the table with other addresses: the known source still gets in.
        for i in 0..MAX_SOURCES as u32 {
            let _ = g.source_allows(
                at(0),
                SourceKey::Address(IpAddr::V4((i + 1).to_be_bytes().into())),
            );
        }
        let other = SocketAddr::from(([198, 51, 100, 5], 9));
        assert!(!g.source_allows(at(0), SourceKey::Address(other.ip())));
        assert!(g.source_allows(at(0), SourceKey::Known(other)));
    }

    #[test]
    fn under_load_each_source_gets_its_rate_and_no_more() {
        let keys = CookieKeys::new(&responder());
        let mut g = CookieGuard::new(&responder(), at(0), [3; 32]);
        load(&mut g, &keys, at(0));
        let cookie_for =
            |g: &mut CookieGuard, s: SocketAddr, now| cookie_for(g, &keys, now, s, false);
        let a = src(5000);
        let c = cookie_for(&mut g, a, at(0));
        let good = init(&keys, 2, Some(&c));
        let passed = (0..20)
            .filter(|_| g.check(at(0), a, || false, &good) == Verdict::Pass)
            .count() as u64;
        assert_eq!(passed, SOURCE_BURST);
        assert_eq!(g.counters().rate_limited, 20 - SOURCE_BURST);
        // Another port of the same address shares the address's bucket.
        let b = src(5001);
        let cb = cookie_for(&mut g, b, at(0));
        assert_eq!(
            g.check(at(0), b, || false, &init(&keys, 3, Some(&cb))),
            Verdict::Drop(Refused::RateLimited)
        );
        // 1 / SOURCE_RATE later there is one more token.
        let later = at(1000 / SOURCE_RATE);
        assert_eq!(g.check(later, a, || false, &good), Verdict::Pass);
        assert_eq!(
            g.check(later, a, || false, &good),
            Verdict::Drop(Refused::RateLimited)
        );
        // An IPv6 source counts by its /64.
        let v6 = |last: u16| SocketAddr::from(([0x2001, 0xdb8, 0, 1, 0, 0, 0, last], 7000));
        let c6 = cookie_for(&mut g, v6(1), at(0));
        for _ in 0..SOURCE_BURST {
            assert_eq!(
                g.check(at(0), v6(1), || false, &init(&keys, 4, Some(&c6))),
                Verdict::Pass
            );
        }
        let c6b = cookie_for(&mut g, v6(2), at(0));
        assert_eq!(
            g.check(at(0), v6(2), || false, &init(&keys, 5, Some(&c6b))),
            Verdict::Drop(Refused::RateLimited)
        );
    }

    #[test]
    fn a_cookie_lasts_until_the_secret_changes() {
        let keys = CookieKeys::new(&responder());
        let mut g = CookieGuard::new(&responder(), at(0), [4; 32]);
        load(&mut g, &keys, at(0));
        let d = init(&keys, 1, None);
        let c = cookie_for(&mut g, &keys, at(0), src(6000), false);
        let good = init(&keys, 2, Some(&c));
        // Keep the guard under load the whole time: a burst every second.
        let mut now = 0;
        while now < COOKIE_SECRET_LIFETIME.as_millis() as u64 + 1000 {
            now += 900;
            for _ in 0..LOAD_BURST {
                let _ = g.check(at(now), src(9), || false, &d);
            }
            assert!(g.under_load(at(now)));
            let verdict = g.check(at(now), src(6000), || false, &good);
            if now < COOKIE_SECRET_LIFETIME.as_millis() as u64 {
                assert_eq!(verdict, Verdict::Pass, "at {now} ms");
            } else {
                assert!(matches!(verdict, Verdict::Reply(_)), "at {now} ms");
            }
        }
    }

    proptest::proptest! {
        /// Whatever arrives, the guard decides without panicking, and an initiation-shaped
        /// datagram that was not sealed with the server's key is dropped.
        #[test]
        fn arbitrary_datagrams_never_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            as_init in proptest::prelude::any::<bool>(),
            loaded in proptest::prelude::any::<bool>(),
        ) {
            let keys = CookieKeys::new(&responder());
            let mut g = CookieGuard::new(&responder(), at(0), [6; 32]);
            if loaded {
                load(&mut g, &keys, at(0));
                let _ = g.check(at(0), src(9), || false, &init(&keys, 1, None));
            }
            let mut d = body;
            if as_init && d.len() >= 4 {
                d[..4].copy_from_slice(&[1, 0x10, 0, 0]);
            }
            let v = g.check(at(0), src(1), || false, &d);
            if as_init && d.len() >= 40 && !keys.mac1_ok(&d) {
                proptest::prop_assert_eq!(v, Verdict::Drop(Refused::BadMac));
            }
        }
    }

    #[test]
    fn the_source_table_is_bounded() {
        let mut g = CookieGuard::new(&responder(), at(0), [5; 32]);
        for i in 0..MAX_SOURCES as u32 + 10 {
            assert_eq!(
                g.source_allows(
                    at(0),
                    SourceKey::Address(IpAddr::V4(i.to_be_bytes().into()))
                ),
                (i as usize) < MAX_SOURCES
            );
        }
        assert_eq!(g.sources.len(), MAX_SOURCES);
        // A second later the idle buckets are forgotten.
        assert!(g.source_allows(
            at(1000),
            SourceKey::Address(IpAddr::V4([10, 0, 0, 1].into()))
        ));
        assert_eq!(g.sources.len(), 1);
    }
}

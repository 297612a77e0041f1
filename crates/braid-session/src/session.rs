//! The session: handshake, rekey, per-path encryption and replay protection, liveness, and the
//! bond endpoint.
//!
//! # Protocol
//! - **Handshake.** Noise IK ([`crate::noise::PATTERN`]). The initiator (the client) sends
//!   message 1 on one path, carrying (encrypted) its wall-clock timestamp and the
//!   [`BondParams`]; the responder (the server) accepts it only if the initiator's static key is
//!   the configured peer key and the timestamp is newer than any accepted before (so a replayed
//!   initiation is ignored), and answers with message 2 on the same path. Anything that does not
//!   authenticate gets no answer at all.
//! - **Transport.** Every inner packet (data, marker, feedback, probe) travels encrypted with
//!   ChaCha20-Poly1305 under the handshake's keys, with an explicit nonce `path << 56 | counter`:
//!   a counter per path, and an anti-replay window per path, so striping over paths that reorder
//!   relative to each other never trips the window.
//! - **Rekey.** The initiator runs a new handshake every `rekey_after`; the old keys stay valid
//!   for receiving for `keep_previous_keys`, so packets in flight are not lost.
//! - **Liveness.** Every `probe_interval` both ends probe every path; the answer gives the RTT and
//!   a loss estimate. A path with nothing authenticated received for `dead_after` (plus its base
//!   RTT, or 1 s before one is measured, so a long path's first answer is waited for) is taken out of
//!   the rotation at both halves of the endpoint; any authenticated packet on it puts it back.
//!   A path that works one way only is taken out of the sending half, and only an answer to
//!   one of this end's probes puts it back: the peer's probes say it hears nothing there
//!   ([`braid_wire::PROBE_UNHEARD`], set after the same silence that takes a path down,
//!   believed once this end's own probes have gone unanswered for a round trip and a probe
//!   interval), or, failing that, this end's probes go unanswered for `dead_after` plus four
//!   smoothed RTTs (at least 2 s) while the peer's packets come in.
//! - **A path found dead from the data** (beyond the papers; `resequence = "sequence"`). A path
//!   that dies under load is out long before `dead_after`: when the resequencer gives up on a
//!   gap (its hold timer, or a full buffer) that the path, which delivered up to just before
//!   it, had not passed while another path had ([`braid_proto::resequence::Stall`]), the gap
//!   was not one lost packet, and nothing comes on the path for a probe interval, its smoothed
//!   RTT and half that again (at least 25 ms) after its last packet, it leaves the rotation
//!   at both halves (back with the next packet heard), and the peer is told
//!   ([`Repr::Unheard`] on the fastest path in use), which takes it out of its sending half
//!   until one of its probes is answered.
//! - **Backup paths** (beyond the papers; [`BondParams::backup_paths`], `[[path]] backup =
//!   true`). A backup path is in *standby* while any other path is up (in use both ways): out
//!   of the rotation at both halves, carrying nothing but its probes, every
//!   `backup_probe_interval` instead of every `probe_interval`, so a metered link costs little
//!   and is known to work when it is needed. When no other path is up (they went silent, one
//!   way only, or were disabled), the backup paths join the rotation at once, and leave it as
//!   soon as another path is up again. Each end decides from what it sees itself; what the
//!   peer still sends on a path gone to standby is received for a round trip or so more
//!   before the receiving half leaves the rotation.
//!
//! - **pTCP.** Segments of pTCP connections (`braid-ptcp`, the pTCP paper) travel as inner
//!   packets of kind `Ptcp` under the same keys, counters and replay windows, each on the path
//!   of the micro-flow it belongs to: they bypass the striper and the resequencer (a micro-flow
//!   *is* a path's transport, pTCP paper section 2), and a connection id lets several pTCP
//!   connections share the session. They count as traffic for liveness and, at the server, for
//!   learning each path's address.
//!
//! # Polling
//! Feed datagrams to [`Session::handle_datagram`] and IP packets to [`Session::send`]; for each
//! path, call [`Session::poll_transmit`] until it returns `None`; take IP packets with
//! [`Session::poll_deliver`] and pTCP segments with [`Session::poll_ptcp`]; seal pTCP segments
//! with [`Session::seal_ptcp`] whenever there are some; call [`Session::handle_timeout`] when
//! [`Session::poll_timeout`] says. `now` must never go backwards.

use crate::cookie::{CookieKeys, COOKIE_LIFETIME};
use crate::endpoint::{Endpoint, EndpointConfig};
use crate::keys::{PrivateKey, PublicKey};
use crate::noise::{SeededResolver, PATTERN, PROLOGUE};
use crate::params::BondParams;
use crate::qos::{BondRates, ClassReport, Egress, PtcpOut, QosShaper};
use crate::replay::ReplayWindow;
use crate::retransmit::{
    GapDetector, Reinjection, RetransmitRing, MAX_NACK_COUNT, MAX_REPAIRABLE_GAP,
};
use braid_proto::resequence::{Pacing, Stall};
use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_qos::classifier::Headers;
use braid_qos::ClassId;
use braid_wire::outer::{self, Outer, TAG_LEN, TRANSPORT_HEADER_LEN};
use braid_wire::{Abandon, Nack, Packet, Probe, Repr, Unheard};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::Serialize;
use snow::{HandshakeState, StatelessTransportState};
use std::collections::VecDeque;
use std::net::IpAddr;

/// The paced release may send this many full packets back to back.
const RELEASE_BURST_PACKETS: u64 = 8;

/// `pct` percent of `rate_bps`.
/// A peer's claimed rate on a path is kept within this factor of the path's configured rate
/// (and at least 100 kbit/s): see `Session::note_peer_rate`.
const PEER_RATE_RANGE: u64 = 16;

/// A peer's claim of `rate_kbps` on a path configured (or guessed) at `configured_bps`, in
/// bit/s, kept within [`PEER_RATE_RANGE`] of the configured rate and at least 100 kbit/s;
/// `None` for no opinion (0).
fn peer_rate_bps(configured_bps: u64, rate_kbps: u32) -> Option<u64> {
    if rate_kbps == 0 {
        return None;
    }
    let configured = configured_bps.max(1);
    let lo = (configured / PEER_RATE_RANGE).max(100_000);
    let hi = configured.saturating_mul(PEER_RATE_RANGE).max(lo);
    Some((u64::from(rate_kbps) * 1000).clamp(lo, hi))
}

fn pacing_rate(rate_bps: u64, pct: u32) -> u64 {
    rate_bps.saturating_mul(u64::from(pct)) / 100
}

/// Which end of the bond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Role {
    /// The client: knows the server's key, chooses the bond parameters, starts handshakes.
    #[serde(rename = "client")]
    Initiator,
    /// The server: answers handshakes from its configured peer.
    #[serde(rename = "server")]
    Responder,
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Which end.
    pub role: Role,
    /// This end's static key.
    pub private_key: PrivateKey,
    /// The only peer this session talks to.
    pub peer_public_key: PublicKey,
    /// Initiator: the bond parameters (path count, rates, scheduler...). Responder: `None`; it
    /// adopts the initiator's.
    pub bond: Option<BondParams>,
    /// Probe every path this often.
    pub probe_interval: Duration,
    /// A path with nothing received for this long is out of the rotation.
    pub dead_after: Duration,
    /// The initiator rekeys this often.
    pub rekey_after: Duration,
    /// The initiator resends an unanswered initiation after this long (on the next path).
    pub handshake_retry: Duration,
    /// Old keys stay valid for receiving this long after a rekey.
    pub keep_previous_keys: Duration,
    /// Per-class egress service (JoBS, `crate::qos`); `None`: first come, first striped.
    pub qos: Option<braid_qos::QosConfig>,
    /// DSCP values (bit `d` for DSCP `d`) whose packets this end sends twice, on two paths
    /// (the BAG paper's reliability service); only with `resequence = "sequence"`.
    pub duplicate_dscp: u64,
    /// The receiver releases what it resequenced no faster than this percentage of the bond's
    /// rate (the BAG paper's BMP criterion 5: no bursts into TCP after a hole fills); 0: off.
    /// Only with `resequence = "sequence"`.
    pub release_pacing_pct: u32,
    /// Responder: the tunnel addresses (address, prefix length) this peer is handed in the
    /// handshake response (the BAG paper's fixed IP: the proxy role); empty: none.
    pub handed_addresses: Vec<(IpAddr, u8)>,
    /// Responder: this end takes the initiator's pTCP connections for accelerated TCP
    /// (`[tcp] accelerate`), and says so in its handshake response so that an initiator does
    /// not redirect TCP to a peer that would drop it.
    pub accepts_tcp: bool,
    /// Without `qos`: shape this end's egress anyway, as one class
    /// ([`QosShaper::whole_bond`]) at the bond's live rate. `None`: when the bond schedules by
    /// PET, whose equalised release times assume the backlog waits in braid rather than in
    /// the paths' buffers.
    pub shape_egress: Option<bool>,
    /// Probe a backup path in standby this often (`BondParams::backup_paths`); rounded up to
    /// a multiple of `probe_interval`.
    pub backup_probe_interval: Duration,
    /// Probe every path this often instead of `probe_interval` while the session is idle: no
    /// data sent or received for [`IDLE_AFTER`] ([`Session::is_idle`]). Rounded up to a
    /// multiple of `probe_interval`; `probe_interval` or less: never idle.
    pub idle_probe_interval: Duration,
    /// `(tag, bits)`: every receiver index this session draws has `tag` in its low `bits`
    /// bits, the rest random. A server's sessions (one per client) take their own tags, so
    /// two of them never draw the same index: each index names one session, and a transport
    /// message reaches the one that owns it. With random indices alone, two of a thousand
    /// clients collided about once in five days, and one was cut off until its next
    /// handshake. `(0, 0)`: all 32 bits random.
    pub index_tag: (u32, u8),
}

impl SessionConfig {
    /// Defaults: probes every 100 ms (every second on a backup path in standby, and on every
    /// path while the session is idle), dead after 400 ms, rekey every 2 minutes, retry after
    /// 1 s.
    pub fn new(
        role: Role,
        private_key: PrivateKey,
        peer_public_key: PublicKey,
        bond: Option<BondParams>,
    ) -> Self {
        SessionConfig {
            role,
            private_key,
            peer_public_key,
            bond,
            probe_interval: Duration::from_millis(100),
            dead_after: Duration::from_millis(400),
            rekey_after: Duration::from_secs(120),
            handshake_retry: Duration::from_secs(1),
            keep_previous_keys: Duration::from_secs(10),
            qos: None,
            duplicate_dscp: 0,
            release_pacing_pct: 0,
            handed_addresses: Vec::new(),
            accepts_tcp: false,
            shape_egress: None,
            backup_probe_interval: Duration::from_secs(1),
            idle_probe_interval: Duration::from_secs(1),
            index_tag: (0, 0),
        }
    }
}

/// Why a datagram was dropped. Every drop is counted; none is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The outer framing did not parse.
    Malformed,
    /// Arrived on one path but claims another.
    WrongPath,
    /// A handshake message this end does not expect (e.g. an initiation at the initiator).
    UnexpectedHandshake,
    /// A handshake message that failed Noise processing.
    BadHandshake,
    /// An initiation from a static key other than the configured peer's.
    UnknownPeer,
    /// An initiation whose timestamp is not newer than the last accepted (a replay).
    StaleInitiation,
    /// Bond parameters in the initiation that do not decode or make no valid bond.
    BadParams,
    /// A transport message for no current session index.
    UnknownIndex,
    /// A counter already seen, or too old for the replay window.
    Replayed,
    /// Authentication failed.
    DecryptFailed,
    /// Decrypted, but the inner packet did not parse or names another path.
    BadInner,
    /// An initiation whose `mac1` is wrong: not keyed by this end's public key (a peer of
    /// another braid version, or one told the wrong server key), dropped before any
    /// Diffie-Hellman work (`crate::cookie`).
    BadMac,
}

const DROP_REASONS: usize = 12;

fn drop_index(r: DropReason) -> usize {
    r as usize
}

/// What one path is doing.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathStatus {
    /// The path's name, for readers of the JSON (the driver's: a client's from its config, a
    /// server's from the client's handshake); `None` from the session itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `up`, `down` (nothing heard on it), `one-way` (the peer's packets come in, this end's
    /// probes go unanswered, or the peer's probes say it hears nothing: out of the sending
    /// half), `standby` (a backup path, up, carrying nothing while another path is up),
    /// `settling` (a path back while the backups carry the traffic, not up for a second yet:
    /// nothing of this end's goes on it) or `disabled` (taken out by the driver).
    pub state: &'static str,
    /// A backup path (`BondParams::backup_paths`).
    pub backup: bool,
    /// Smoothed round-trip time from probes, ms.
    pub rtt_ms: Option<f64>,
    /// Estimated probe loss, percent.
    pub loss_pct: f64,
    /// Transmit rate over the last probe interval (smoothed), bit/s.
    pub tx_bps: f64,
    /// Receive rate over the last probe interval (smoothed), bit/s.
    pub rx_bps: f64,
    /// Datagrams and bytes sent.
    pub tx_packets: u64,
    /// Bytes sent (datagram payload).
    pub tx_bytes: u64,
    /// Authenticated datagrams received.
    pub rx_packets: u64,
    /// Bytes received in authenticated datagrams.
    pub rx_bytes: u64,
    /// Credit the sender has left on this path, bytes (if credits are on).
    pub credit_bytes: Option<u64>,
    /// Payload bytes waiting in the receiver's buffer for this path.
    pub reorder_buffer_bytes: u64,
    /// Mode `sequence`: times packets that arrived on other paths waited 20 ms or more past
    /// their release behind a packet of this path (it came later than the sender's schedule
    /// said: `braid_proto::resequence::PathHolds`), and the longest such wait, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<u64>,
    /// The longest of those waits, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_max_ms: Option<f64>,
    /// Payload bytes waiting in this path's transmit queue.
    pub queued_bytes: u64,
    /// Times the path went down.
    pub down_events: u64,
    /// Of those, times this end found it dark from the data before `dead_after`: a gap given
    /// up on behind it while the other paths delivered, or its busy traffic stopped short
    /// while it was the only path in use and a backup waited; and nothing heard on it since
    /// for the probes' pace and a round trip and a half ([`Session`]'s liveness).
    pub stalls: u64,
    /// Scheduler `pet`: the path's rate as PET schedules with it, bit/s (as it counts on the
    /// wire: braid's overhead included): the packet-pair estimate, capped by what the path
    /// delivered while busy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_estimate_bps: Option<u64>,
    /// Scheduler `pet`: the packet-pair estimate alone, bit/s. Behind a token-bucket shaper it
    /// reads the speed a burst crosses at, far above what the path sustains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_pair_bps: Option<u64>,
    /// Scheduler `pet`: the most the path delivered lately while its queue was never empty (or
    /// carried in half a second since, if more), bit/s, grown 25% for each second it carries
    /// traffic without being kept busy, to about twice that; absent before it ever was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_delivery_bps: Option<u64>,
    /// Scheduler `pet`: the one-way delay PET uses for the path, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_delay_ms: Option<f64>,
    /// Scheduler `pet`: whether PET has the path in its choice (not blacked out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_active: Option<bool>,
    /// Scheduler `pet`: whether the path lost a tenth or more of what it was sent, steadily,
    /// within the last 10 s (it drops what exceeds its rate, as a policer does): its rate is
    /// then its delivery cap alone, which grows four times slower.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet_policed: Option<bool>,
}

/// A snapshot of the session for `braid status`.
#[derive(Clone, Debug, Serialize)]
pub struct SessionStatus {
    /// This end's role.
    pub role: Role,
    /// Whether keys are established.
    pub established: bool,
    /// Whether the session is idle: no data for [`IDLE_AFTER`], every path probed every
    /// `idle_probe_interval` ([`Session::is_idle`]).
    pub idle: bool,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Initiator: cookie replies received (the responder was under load; `crate::cookie`).
    pub cookie_replies: u64,
    /// Times the peer turned out to have restarted (a new instance in its handshake), and the
    /// bond started afresh.
    pub peer_restarts: u64,
    /// Per path.
    pub paths: Vec<PathStatus>,
    /// Packets delivered to the application (the TUN).
    pub delivered_packets: u64,
    /// Packets the receiver declared lost (sequence mode).
    pub lost_packets: u64,
    /// Packets the receiver dropped as stale, invalid or over its buffer.
    pub receiver_dropped: u64,
    /// Packets delivered ahead of their turn because nothing at this end times them (TCP's
    /// pure ACKs and opening SYNs, sequence mode), so a packet delay equalisation holds does
    /// not hold them too.
    pub delivered_early: u64,
    /// Resynchronisation activity: marker skips, hold skips, forced skips, late deliveries.
    pub resync: [u64; 4],
    /// Packets from the application dropped because the bond could not take them.
    pub send_dropped: u64,
    /// NACKs sent: gaps seen in the peer's per-path counters (retransmission).
    pub nacks_sent: u64,
    /// Data packets resent because the peer's NACK named them.
    pub retransmitted_packets: u64,
    /// Data packets resent on the other paths because the peer found the path they went on
    /// dark (reinjection).
    pub reinjected_packets: u64,
    /// Abandon notices sent: runs of data a path lost to congestion, not resent.
    pub abandons_sent: u64,
    /// Notices sent that a path is dark (this end found it from the data: per-path `stalls`).
    pub unheard_sent: u64,
    /// Such notices from the peer that took a path out of this end's sending half.
    pub unheard_received: u64,
    /// Data packets sent a second time on another path (`duplicate_dscp`).
    pub duplicated_packets: u64,
    /// Packets the receiver declared lost at once because the peer abandoned them.
    pub abandoned_packets: u64,
    /// Packets a path policy placed (`[[policy]]`).
    pub policy_packets: u64,
    /// TCP retransmissions this end striped (scheduler `pet`: placed alone, never paired).
    pub tcp_retransmits: u64,
    /// TCP/IP header compression's counters (`compress_headers`); absent when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<crate::compress::CompressStats>,
    /// Packets dropped because none of their policy's paths was up.
    pub policy_no_path: u64,
    /// Datagrams dropped, by reason.
    pub dropped: Vec<(DropReason, u64)>,
    /// The receiver's paced release (`release_pacing_pct` of the peer's rates), bit/s; absent
    /// when unpaced or before the bond's parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_rate_bps: Option<u64>,
    /// The egress shaper's rate on the wire (`[qos]`, or a PET bond's whole-bond shaper),
    /// bit/s; absent when the egress is not shaped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shaping_rate_bps: Option<u64>,
    /// Per-class service when `[qos]` is on (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassReport>,
    /// Scheduler `pet`: SIG-ACKs and PET's counters (absent for the other schedulers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pet: Option<PetStatus>,
    /// pTCP segments carried (absent when there were none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptcp: Option<PtcpCounters>,
}

/// pTCP segments the session carried ([`Session::seal_ptcp`], [`Session::poll_ptcp`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PtcpCounters {
    /// Segments sealed for sending.
    pub sent: u64,
    /// Segments that could not be sealed (no keys yet, unknown path, buffer too small).
    pub unsent: u64,
    /// Segments received and queued for [`Session::poll_ptcp`].
    pub received: u64,
    /// Segments received while the queue was full, dropped (pTCP recovers them).
    pub dropped: u64,
}

/// A pTCP segment that arrived, authenticated and decrypted ([`Session::poll_ptcp`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtcpSegment {
    /// The path it arrived on (its micro-flow's).
    pub path: PathId,
    /// The pTCP connection it belongs to.
    pub conn: u16,
    /// The segment, for `StripedConnection::handle_datagram`.
    pub segment: Vec<u8>,
}

/// pTCP segments received and not yet taken by [`Session::poll_ptcp`] at most; more are
/// dropped and counted.
pub const PTCP_RX_QUEUE: usize = 4096;

/// What PET did (scheduler `pet`), for `braid status`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PetStatus {
    /// SIG-ACKs this end sent (arrival reports of what it received).
    pub sig_acks_sent: u64,
    /// SIG-ACKs this end received and fed to PET.
    pub sig_acks_received: u64,
    /// SIG-ACKs not sent (queue or batch overflow).
    pub sig_acks_dropped: u64,
    /// Packet pairs started, and samples taken from them.
    pub pairs: u64,
    /// Pair samples taken (bandwidth estimates updated).
    pub samples: u64,
    /// Delivery-rate samples taken: windows in which a path's queue never emptied
    /// (`braid_proto::pet::DeliveryRate`), which cap its pair estimate.
    pub delivery_samples: u64,
    /// Of those, windows in which a path lost a tenth or more of what it was sent (a policer
    /// that drops instead of queueing), not one whose queue filled.
    pub overload_samples: u64,
    /// Pairs that showed only the sender's spacing, below the estimate (not lowering it).
    pub spaced_pairs: u64,
    /// Packets placed alone: TCP retransmissions, and pairs' firsts whose second never came.
    pub singles: u64,
    /// Pairs of data sent on an idle path to probe it (the paper's rule, without padding).
    pub probes: u64,
    /// Data pairs placed round robin before every path had an estimate.
    pub startup_pairs: u64,
    /// Pairs of padding PET sent to measure paths (`PetConfig::padding`), and their bytes.
    pub padding_pairs: u64,
    /// Payload bytes of that padding.
    pub padding_bytes: u64,
    /// Paths PET took out for lack of SIG-ACKs.
    pub blackouts: u64,
    /// SIG-ACK entries for packets PET did not remember.
    pub unknown_feedback: u64,
    /// Packets PET forgot unreported because it remembers at most `max_records`.
    pub records_evicted: u64,
    /// Packets other parts of the bond placed (resends, small packets, duplicates, a class's
    /// packets under a path policy), which PET counted on their paths.
    pub extra: u64,
}

struct KeySet {
    local_index: u32,
    remote_index: u32,
    transport: StatelessTransportState,
    created: Instant,
    counters: Vec<u64>,
    replay: Vec<ReplayWindow>,
    retired_at: Option<Instant>,
}

struct PendingHandshake {
    state: HandshakeState,
    local_index: u32,
    sent_at: Instant,
    path: usize,
    /// The initiation's `mac1`: a cookie reply to it is sealed with it as associated data.
    mac1: [u8; outer::MAC_LEN],
    /// A cookie reply answered it: retry on the same path, with the cookie.
    cookie_replied: bool,
    /// It carried a cookie already (a nonzero `mac2`).
    had_cookie: bool,
}

#[derive(Clone, Debug, Default)]
struct PathState {
    /// Initiator: the responder's cookie for this path's source address, and when it came
    /// (`crate::cookie`).
    cookie: Option<(Instant, [u8; outer::MAC_LEN])>,
    up: bool,
    last_rx: Option<Instant>,
    probe_id: u32,
    /// Probes sent and not yet answered: id and send time (at most 32).
    /// With each, the transport counter it went with.
    outstanding: VecDeque<(u32, Instant, u64)>,
    /// Since when this end's probes on the path have gone unanswered (the first probe sent
    /// after the last answer, or after the path came up, or after new keys); `None` while
    /// they are answered.
    unanswered_since: Option<Instant>,
    /// Probes sent since `unanswered_since`.
    unanswered: u32,
    /// Out of the sending half because the path works one way only (the peer said it hears
    /// nothing there, or this end's probes went unanswered while the peer's packets came in):
    /// what arrives on it does not bring it back, an answer to a probe does.
    deaf: bool,
    loss: f64,
    srtt: Option<Duration>,
    min_rtt: MinRtt,
    acks: VecDeque<Probe>,
    probe_due: bool,
    tx_packets: u64,
    tx_bytes: u64,
    rx_packets: u64,
    rx_bytes: u64,
    tick_tx_bytes: u64,
    tick_rx_bytes: u64,
    tx_bps: f64,
    rx_bps: f64,
    down_events: u64,
    /// Times the path went down because the data showed it dark ([`Session::on_stall`],
    /// [`Session::sole_line_dark_at`]).
    stalls: u64,
    /// Found dark at this time if nothing comes on it before ([`Session::on_stall`], a gap
    /// given up on behind it; [`Session::sole_line_dark_at`]); cleared by any packet heard.
    dark_at: Option<Instant>,
    /// Down because this end found it dark from the data; until it comes up again.
    found_dark: bool,
    /// Times the peer is told again, a probe tick apart, while the path stays dark (a notice
    /// can be lost).
    notices_left: u8,
    /// The peer has heard this end on the path up to this transport counter (exclusive): one
    /// past the counter of the last of this end's probes it answered. A notice that it has
    /// not heard from below that on ([`Session::on_unheard`]) was sent before, and crossed
    /// the path's recovery: stale.
    heard_to: u64,
    /// Answers to this end's probes since the path last came up (saturating): how much its
    /// `loss` has seen.
    answered: u32,
    /// When the last data packet (not a probe, NACK or other control) arrived on it.
    last_data_rx: Option<Instant>,
    /// When the peer's last probe on it arrived, and the smoothed time between its probes
    /// (the peer's own pace, which its config sets): for [`dark_quiet`].
    last_peer_probe: Option<Instant>,
    peer_probe_gap: Option<Duration>,
    /// The rate the peer believes it can send at on this path (from its probes and probe
    /// acknowledgements), bit/s; `None` until it said.
    peer_rate_bps: Option<u64>,
    /// Taken out by the driver ([`Session::set_path_enabled`]): nothing is sent on it and it
    /// is not brought back by what arrives on it.
    disabled: bool,
    /// A backup path held out of the rotation while another path is up
    /// ([`Session::update_standby`]); it is still probed, every `backup_probe_interval`.
    standby: bool,
    /// A path gone to standby: when its receiving half leaves the rotation, once what the peer
    /// sent on it before it saw another path up has had time to arrive.
    receive_off_at: Option<Instant>,
    /// Probe ticks a path has let pass since its last probe (in standby, or while the session
    /// is idle).
    probe_ticks: u32,
    /// Since when the path is up (its last coming up); `None` while down, or up since the
    /// bond began.
    up_since: Option<Instant>,
    /// A path that is not a backup, back up while the backups carry the traffic, and not up
    /// for `STANDBY_HOLD` yet: out of the sending half ([`Session::update_standby`]).
    probation: bool,
    /// Up since the bond began, or up for `STANDBY_HOLD` and heard lately then; until it
    /// goes down ([`Session::update_standby`]).
    settled: bool,
    /// Out of standby at this time and not heard since: its last packet may be a slow probe
    /// interval old, so it is not silent before its wake-up probe could be answered
    /// ([`PathState::silent`]).
    woke_at: Option<Instant>,
    /// Woken from idle at this time, and no answer yet to a probe sent since: one not
    /// answered within two round trips (and 200 ms) takes the path out of the sending half,
    /// as the peer's "unheard" would (a path that broke one way while the bond was idle; the
    /// peer, idle too, would say so only after its idle allowance). `woke_at` does not do:
    /// the peer's own slow probes clear it.
    wake_probe: Option<Instant>,
}

impl PathState {
    /// How long a probe may go unanswered before it counts as lost: three smoothed RTTs, at
    /// least 300 ms (judging it by the probe interval would call every probe of a long path
    /// lost).
    fn probe_lost_after(&self) -> Duration {
        self.srtt.map_or(Duration::from_millis(300), |r| {
            (r * 3).max(Duration::from_millis(300))
        })
    }

    /// How long a path woken from standby or idle waits for its wake-up probe's answer: two
    /// round trips and [`WAKE_SLACK`].
    fn wake_wait(&self) -> Duration {
        self.srtt.unwrap_or(UNMEASURED_RTT_SLACK) * 2 + WAKE_SLACK
    }

    /// Whether the path carries traffic: up, not a backup in standby, not a line on
    /// probation.
    fn in_use(&self) -> bool {
        self.up && !self.standby && !self.probation
    }

    /// Whether nothing authenticated has arrived on the path for `dead_after` plus its base
    /// RTT (1 s until one is measured: a long path's first answer takes its RTT to come
    /// back, or a 300 ms path would flap at every start); `None` if nothing ever has.
    /// A path probed slowly (in standby, or while the session is idle), every `slow_probe`,
    /// is allowed two of its probe intervals more (`slow_probe` is zero for one probed at
    /// the normal pace).
    ///
    /// One just woken from standby or from idle (`woke_at`) may have last been heard a slow
    /// probe interval ago: it is silent only once the probe sent as it woke has had two round
    /// trips (and 200 ms) to be answered as well.
    fn silent(&self, now: Instant, dead_after: Duration, slow_probe: Duration) -> Option<bool> {
        let allowed =
            dead_after + slow_probe * 2 + self.min_rtt.get().unwrap_or(UNMEASURED_RTT_SLACK);
        let woken_wait = self.wake_wait();
        let waited = self
            .woke_at
            .is_none_or(|w| now.saturating_duration_since(w) > woken_wait);
        self.last_rx
            .map(|t| now.saturating_duration_since(t) > allowed && waited)
    }
}

/// The smallest RTT sample of the last 10 to 20 seconds: the path's base RTT without queueing,
/// kept in two windows so an old minimum ages out (as BBR's `min_rtt`).
#[derive(Clone, Copy, Debug, Default)]
struct MinRtt {
    current: Option<Duration>,
    previous: Option<Duration>,
    window_start: Option<Instant>,
}

impl MinRtt {
    const WINDOW: Duration = Duration::from_secs(10);

    fn update(&mut self, now: Instant, sample: Duration) -> Duration {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= Self::WINDOW {
            self.previous = self.current;
            self.current = None;
            self.window_start = Some(now);
        }
        self.current = Some(self.current.map_or(sample, |c| c.min(sample)));
        self.get().unwrap_or(sample)
    }

    fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A path whose probes go unanswered while the peer's packets come in is out (one way only)
/// after `dead_after` plus four smoothed RTTs, at least this (twice this before an RTT is
/// measured), and at least [`ONE_WAY_PROBES`] probes.
const ONE_WAY_SLACK: Duration = Duration::from_secs(2);
/// The fewest probes unanswered before a path counts as one-way.
const ONE_WAY_PROBES: u32 = 4;

/// Whether path `i` is a backup in the mask `backups` (`BondParams::backup_paths`).
fn is_backup(backups: u64, i: usize) -> bool {
    i < 64 && backups & (1u64 << i) != 0
}

/// How long a path that is not a backup must be up before the backup paths go (back) to
/// standby ([`Session::update_standby`]).
const STANDBY_HOLD: Duration = Duration::from_secs(1);

/// The peer's earlier instances a session remembers, to tell peers that share a key from
/// restarts ([`Session::peer_instance_returns`]).
const EARLIER_INSTANCES: usize = 4;

/// What a backup path woken from standby is allowed beyond two round trips for its wake-up
/// probe's answer ([`PathState::silent`]).
const WAKE_SLACK: Duration = Duration::from_millis(200);

/// Whether an IP packet is the kernel's link-scoped chatter: to link- or node-local
/// multicast (IPv6 ff01::/ff02::, router and neighbour solicitations, MLD reports; IPv4's
/// 224.0.0.0/24, IGMP), or from IPv6's unspecified address. Carried like any packet, but no
/// data that keeps a bond from going idle (a TUN device's IPv6 sends a few such as it comes
/// up and now and then after). Anything else is data: link-local unicast too (routing
/// sessions over fe80::, 169.254.x.x tunnel addressing), and a compressed header.
fn is_link_chatter(packet: &[u8]) -> bool {
    match packet.first().map(|b| b >> 4) {
        Some(4) if packet.len() >= 20 => packet[16..19] == [224, 0, 0],
        Some(6) if packet.len() >= 40 => {
            let (src, dst) = (&packet[8..24], &packet[24..40]);
            (dst[0] == 0xff && dst[1] & 0x0f <= 2) || src.iter().all(|&b| b == 0)
        }
        _ => false,
    }
}

/// A session with no data sent or received for this long is idle: it probes its paths every
/// `idle_probe_interval` ([`Session::is_idle`]).
pub const IDLE_AFTER: Duration = Duration::from_secs(5);

/// A gap of fewer missing sequence numbers than this does not take a path out however
/// quiet it is ([`Session::on_stall`]): a lost packet on a path that carries little.
const STALL_MISSING: u64 = 4;

/// The peer is told a path is dark ([`Repr::Unheard`]) this many times more, a probe tick
/// apart, while it stays dark: one notice may be lost.
const UNHEARD_REPEATS: u8 = 2;

/// Reinjection's pace when neither the path it goes on nor the dark one has a known rate (no
/// rates configured, no PET): modest, so a slow backup's queue survives it.
const REINJECT_DEFAULT_BPS: u64 = 8_000_000;

/// A peer's notice of what it missed on a path this end found dark is awaited (the data for
/// the path the copies take waiting) a round trip of that path, at most this, ...
const AWAIT_NOTICE_MAX: Duration = Duration::from_millis(200);

/// ... and this more (the peer's turn; its quiet time ends a little after this end's).
const AWAIT_NOTICE_SLACK: Duration = Duration::from_millis(10);

/// A path is dark only after a probe interval, its smoothed RTT and half that again, at least
/// this, without a packet ([`dark_quiet`]).
const DARK_SLACK: Duration = Duration::from_millis(25);

/// How long a path must bring nothing before it counts as dark ([`Session::on_stall`]): a probe
/// interval (the peer probes every path every probe interval), its smoothed RTT (a probe
/// waits behind about a round trip of queued data on a loaded path) and half that again, at
/// least [`DARK_SLACK`] (a queue that grew: the smoothed RTT is a mean).
fn dark_quiet(p: &PathState, probe_interval: Duration) -> Duration {
    let srtt = p.srtt.unwrap_or(UNMEASURED_RTT_SLACK);
    probe_pace(p, probe_interval) + srtt + (srtt / 2).max(DARK_SLACK)
}

/// How often a probe comes on path `p`: every `probe_interval` (this end's), or the peer's
/// pace as its probes have come if slower (each end's config sets its own).
fn probe_pace(p: &PathState, probe_interval: Duration) -> Duration {
    p.peer_probe_gap
        .map_or(probe_interval, |g| g.max(probe_interval))
}

/// The one path in use is busy, for [`Session::sole_line_dark_at`], if it receives at least
/// this much (bit/s, smoothed over probe intervals): data, not just probes.
const BUSY_RX_BPS: f64 = 256_000.0;

/// The one path in use counts as dark by [`Session::sole_line_dark_at`] only if data came on it
/// at most this long before the last packet it brought (a probe may trail the data in flight
/// as the line dies).
const DATA_RECENT: Duration = Duration::from_millis(20);

/// Answers to its probes the one path in use must have had since it came up before
/// [`Session::sole_line_dark_at`] judges it: two seconds of them at the default pace, for its
/// probes' loss to mean something.
const SOLE_LINE_ANSWERS: u32 = 20;

/// Added to `dead_after` for a path whose RTT has not been measured yet.
const UNMEASURED_RTT_SLACK: Duration = Duration::from_secs(1);

/// Largest inner packet: the bond's data plus headers.
const INNER_MAX: usize = 65_535;

/// The session. See the module docs.
pub struct Session {
    cfg: SessionConfig,
    rng: ChaCha20Rng,
    wall_at_start: u64,
    started: Instant,
    params: Option<BondParams>,
    endpoint: Option<Endpoint>,
    paths: Vec<PathState>,
    current: Option<KeySet>,
    previous: Option<KeySet>,
    pending: Option<PendingHandshake>,
    next_handshake_path: usize,
    last_init_timestamp: u64,
    /// This session's instance: random, drawn once. A peer that sees it change knows this end
    /// restarted (rekeys keep it), and starts its endpoint afresh.
    instance: u64,
    /// The peer's instance, from its last accepted handshake message.
    peer_instance: Option<u64>,
    /// The peer's instances before `peer_instance`, the latest last (at most
    /// [`EARLIER_INSTANCES`]).
    earlier_instances: VecDeque<u64>,
    /// Handshakes from the instance before the last one ([`Session::peer_instance_returns`]).
    instance_returns: u64,
    /// Times the peer turned out to have restarted, and the endpoint started afresh.
    peer_restarts: u64,
    control: VecDeque<(usize, Vec<u8>)>,
    next_tick: Instant,
    handshakes: u64,
    /// The MAC keys from the responder's public key (`crate::cookie`).
    cookie_keys: CookieKeys,
    cookie_replies: u64,
    send_dropped: u64,
    dropped: [u64; DROP_REASONS],
    inner: Vec<u8>,
    plain: Vec<u8>,
    /// The endpoint's encoded packet before sealing (sized by the endpoint, reused).
    tx_plain: Vec<u8>,
    /// Retransmission inside the tunnel (`crate::retransmit`), if the bond has it.
    retransmit: bool,
    ring: RetransmitRing,
    gaps: GapDetector,
    /// NACKs waiting for the fastest path.
    nacks: VecDeque<Nack>,
    /// Abandon notices (answers to NACKs of long runs) waiting for the fastest path.
    abandons: VecDeque<Abandon>,
    /// Paths this end found dark from the data, for the peer to stop sending on
    /// ([`Session::on_stall`]); sent on the fastest path in use.
    unheard: VecDeque<Unheard>,
    unheard_sent: u64,
    unheard_received: u64,
    abandons_sent: u64,
    /// Data packets to resend: the path to resend on and the plaintext.
    resend: VecDeque<(usize, Vec<u8>)>,
    /// What a path the peer found dark swallowed, resent on the others
    /// ([`Session::on_unheard`]).
    reinjection: Reinjection,
    reinjected: u64,
    nacks_sent: u64,
    retransmitted: u64,
    /// The highest arrival rate lately, bit/s (for the paced release).
    rx_peak_bps: f64,
    /// The receiver's paced release now, bit/s (0: unpaced or no bond yet).
    release_rate_bps: u64,
    /// JoBS in front of the striper, once the bond's rates are known.
    qos: Option<QosShaper>,
    /// When the shaper's bucket next has room for its head packet.
    qos_wake: Option<Instant>,
    /// The shaper let packets go into the striper while a path was polled, since the last
    /// [`Session::handle_timeout`]: the striper may have put some on a path the driver had
    /// already polled in its turn ([`Session::poll_timeout`]).
    pumped_in_poll: bool,
    /// The last `now` seen (for status snapshots).
    last_now: Instant,
    /// When data (a packet to stripe, a data packet or a pTCP segment from the peer, a pTCP
    /// segment sealed) last passed ([`Session::note_data`]).
    last_data: Instant,
    /// Probing every `idle_probe_interval` ([`Session::is_idle`]).
    idle: bool,
    /// Initiator: the tunnel addresses the responder handed over in its last response.
    handed: Vec<(IpAddr, u8)>,
    /// Initiator: whether the responder's last response said it takes accelerated TCP.
    peer_accepts_tcp: bool,
    /// pTCP segments received, for [`Session::poll_ptcp`] (at most [`PTCP_RX_QUEUE`]).
    ptcp_rx: VecDeque<PtcpSegment>,
    /// pTCP segments the `[qos]` shaper let go, sealed when their path is polled.
    ptcp_tx: VecDeque<PtcpOut>,
    ptcp: PtcpCounters,
}

impl Session {
    /// A session. `seed` feeds every random choice (ephemeral keys, indices); `wall_ns` is the
    /// Unix time at `now`, in nanoseconds (for the replay-proof handshake timestamp).
    pub fn new(cfg: SessionConfig, now: Instant, seed: [u8; 32], wall_ns: u64) -> Self {
        let mut s = Session {
            rng: ChaCha20Rng::from_seed(seed),
            wall_at_start: wall_ns,
            started: now,
            params: None,
            endpoint: None,
            paths: Vec::new(),
            current: None,
            previous: None,
            pending: None,
            next_handshake_path: 0,
            last_init_timestamp: 0,
            instance: 0,
            peer_instance: None,
            earlier_instances: VecDeque::new(),
            instance_returns: 0,
            peer_restarts: 0,
            control: VecDeque::new(),
            next_tick: now,
            handshakes: 0,
            cookie_keys: CookieKeys::new(&match cfg.role {
                Role::Initiator => cfg.peer_public_key,
                Role::Responder => cfg.private_key.public_key(),
            }),
            cookie_replies: 0,
            send_dropped: 0,
            dropped: [0; DROP_REASONS],
            inner: vec![0; INNER_MAX],
            plain: vec![0; INNER_MAX],
            tx_plain: Vec::with_capacity(INNER_MAX),
            retransmit: false,
            ring: RetransmitRing::default(),
            gaps: GapDetector::default(),
            nacks: VecDeque::new(),
            abandons: VecDeque::new(),
            unheard: VecDeque::new(),
            unheard_sent: 0,
            unheard_received: 0,
            abandons_sent: 0,
            resend: VecDeque::new(),
            reinjection: Reinjection::default(),
            reinjected: 0,
            nacks_sent: 0,
            rx_peak_bps: 0.0,
            release_rate_bps: 0,
            retransmitted: 0,
            qos: None,
            qos_wake: None,
            pumped_in_poll: false,
            last_now: now,
            last_data: now,
            idle: false,
            handed: Vec::new(),
            peer_accepts_tcp: false,
            ptcp_rx: VecDeque::new(),
            ptcp_tx: VecDeque::new(),
            ptcp: PtcpCounters::default(),
            cfg,
        };
        s.instance = s.rng.next_u64();
        if let Some(p) = s.cfg.bond.clone() {
            s.adopt_params(p, now, None, false);
        }
        s
    }

    /// Number of paths (0 until a responder has heard from its peer).
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// Whether transport keys are established.
    pub fn is_established(&self) -> bool {
        self.current.is_some()
    }

    /// The bond parameters in force.
    pub fn params(&self) -> Option<&BondParams> {
        self.params.as_ref()
    }

    fn wall(&self, now: Instant) -> u64 {
        self.wall_at_start + (now - self.started).as_nanos() as u64
    }

    fn drop(&mut self, r: DropReason) -> DropReason {
        self.dropped[drop_index(r)] += 1;
        r
    }

    /// Run the bond `p` (a fresh endpoint), unless it already runs `p` and `afresh` is false. A
    /// responder (`heard_on` = the handshake's path) starts with only that path in the
    /// rotation: it does not know where the others end until their first authenticated
    /// packet, and what it striped onto them before would be lost.
    fn adopt_params(
        &mut self,
        p: BondParams,
        now: Instant,
        heard_on: Option<PathId>,
        afresh: bool,
    ) {
        if !afresh && self.params.as_ref() == Some(&p) {
            return;
        }
        match self.new_endpoint(&p) {
            Ok(mut e) => {
                self.paths = (0..p.rates_bps.len())
                    .map(|i| {
                        let known = heard_on.is_none_or(|h| h.index() == i);
                        if !known {
                            e.set_path_active(PathId(i as u8), false);
                        }
                        PathState {
                            up: known,
                            last_rx: known.then_some(now),
                            // Measure every path at once: the receiver's delay equalisation
                            // needs each path's delay before data reaches it.
                            probe_due: known,
                            ..PathState::default()
                        }
                    })
                    .collect();
                self.endpoint = Some(e);
                // Resends of the old bond's packets would reach a receiver that never knew them.
                self.resend.clear();
                self.retransmit = p.retransmit
                    && p.resequence == braid_proto::resequence::ResequenceMode::Sequence;
                let n = if self.retransmit { self.paths.len() } else { 0 };
                self.ring = RetransmitRing::new(n);
                self.gaps = GapDetector::new(n);
                // A config the daemon validated cannot fail here; if it did, no shaping.
                let bond_bps = p.rates_bps.iter().sum();
                let pet = p.scheduler == braid_proto::scheduler::SchedulerKind::Pet;
                let whole_bond = self.cfg.shape_egress.unwrap_or(pet);
                // Adaptive SRR's quanta, and so its shaper, follow PET's estimates too.
                let rates = if pet || p.adaptive {
                    BondRates::Measured
                } else {
                    BondRates::Configured
                };
                let mtu = p.max_packet;
                // What a previous shaper let go belongs to its bond's paths.
                self.drop_ptcp_tx(|_| true);
                self.qos = match &self.cfg.qos {
                    Some(q) => QosShaper::new(q, bond_bps, rates, mtu, now).ok(),
                    None if whole_bond => Some(QosShaper::whole_bond(bond_bps, rates, mtu, now)),
                    None => None,
                };
                self.params = Some(p);
                self.update_standby(now);
                self.update_qos_rate(now);
                // PET measures every path in use with padding for a second from now, so that
                // the first data finds estimates rather than the start-up round robin (not a
                // backup in standby: its padding would be queued already).
                if let Some(e) = &mut self.endpoint {
                    e.note_traffic(now);
                }
            }
            Err(_) => {
                self.dropped[drop_index(DropReason::BadParams)] += 1;
            }
        }
    }

    /// Records the peer's instance from an accepted handshake message; whether it is a new
    /// instance of a peer this session knew (the peer restarted).
    fn note_peer_instance(&mut self, instance: u64) -> bool {
        let restarted = self.peer_instance.is_some_and(|i| i != instance);
        if restarted {
            // Back to an instance it had before: no restart brings an old one back, so two
            // (or more) peers run with the same key and take the session from each other.
            if self.earlier_instances.contains(&instance) {
                self.instance_returns += 1;
                self.earlier_instances.retain(|&i| i != instance);
            }
            if let Some(last) = self.peer_instance {
                if self.earlier_instances.len() == EARLIER_INSTANCES {
                    self.earlier_instances.pop_front();
                }
                self.earlier_instances.push_back(last);
            }
        }
        self.peer_instance = Some(instance);
        if restarted {
            self.peer_restarts += 1;
        }
        restarted
    }

    /// Initiator: the server restarted, so its striper and receiver start from zero; ours must
    /// too, or each end would wait for sequence numbers the other never sends. The paths keep
    /// their state (up, disabled, measured delays); what was queued for the old bond goes.
    fn restart_endpoint(&mut self) {
        let Some(p) = self.params.clone() else {
            return;
        };
        let Ok(mut e) = self.new_endpoint(&p) else {
            return;
        };
        for (i, path) in self.paths.iter().enumerate() {
            if path.probation && path.up {
                // Its receiving half stays: the peer may use it.
                e.set_path_sending_held(PathId(i as u8), false);
            } else if !path.in_use() {
                e.set_path_active(PathId(i as u8), false);
            }
        }
        self.endpoint = Some(e);
        self.resend.clear();
    }

    /// A fresh endpoint for the bond `p` (and the receiver's paced release rate).
    fn new_endpoint(&mut self, p: &BondParams) -> Result<Endpoint, ()> {
        let mut receiver = p.resequencer_config();
        if self.cfg.release_pacing_pct > 0 {
            self.release_rate_bps =
                pacing_rate(p.rates_bps.iter().sum(), self.cfg.release_pacing_pct);
            receiver.pacing = Some(Pacing {
                rate_bps: self.release_rate_bps,
                burst_bytes: RELEASE_BURST_PACKETS * u64::from(p.max_packet),
            });
        }
        let config = EndpointConfig {
            striper: p.striper_config(),
            receiver,
            credits: p.credits(),
        };
        let mut e = Endpoint::new(&config).map_err(|_| ())?;
        e.set_duplicate_dscp(self.cfg.duplicate_dscp);
        e.set_policies(p.policies.clone());
        e.set_compression(p.compress_headers);
        Ok(e)
    }

    fn random_index(&mut self) -> u32 {
        let (tag, bits) = self.cfg.index_tag;
        match bits {
            0 => self.rng.next_u32(),
            1..=31 => (self.rng.next_u32() << bits) | (tag & ((1 << bits) - 1)),
            _ => tag,
        }
    }

    fn noise_builder<'a>(&mut self) -> snow::Builder<'a> {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        snow::Builder::with_resolver(
            PATTERN.parse().expect("valid Noise pattern"),
            Box::new(SeededResolver::new(seed)),
        )
    }

    /// Initiator: start a handshake on the next path.
    fn start_handshake(&mut self, now: Instant) {
        if self.cfg.role != Role::Initiator || self.paths.is_empty() {
            return;
        }
        let private = self.cfg.private_key.0;
        let peer = self.cfg.peer_public_key.0;
        let local_index = self.random_index();
        let mut payload = self.wall(now).to_be_bytes().to_vec();
        payload.extend(self.instance.to_be_bytes());
        payload.extend(self.params.as_ref().map(|p| p.encode()).unwrap_or_default());
        let path = self.next_handshake_path % self.paths.len();
        // A rekey prefers a path in use (not the metered backup in standby). The first
        // handshake and retries take any path that is up in turn, a backup in standby
        // included: a client started while its line is dead, which counts as up until it has
        // been silent for a while, gets its retry through the backup. Then any path; never
        // one that is disabled.
        let rekey = self.pending.is_none() && self.current.is_some();
        let order = || (0..self.paths.len()).map(|k| (path + k) % self.paths.len());
        let usable = |p: usize| !self.paths[p].disabled;
        let Some(path) = order()
            .find(|&p| rekey && self.paths[p].in_use() && usable(p))
            .or_else(|| order().find(|&p| self.paths[p].up && usable(p)))
            .or_else(|| order().find(|&p| usable(p)))
        else {
            return;
        };
        let prologue = prologue(PathId(path as u8), local_index);
        let state = self
            .noise_builder()
            .local_private_key(&private)
            .and_then(|b| b.remote_public_key(&peer))
            .and_then(|b| b.prologue(&prologue))
            .and_then(|b| b.build_initiator());
        let Ok(mut state) = state else {
            return;
        };
        let mut msg = vec![0u8; 1024];
        let Ok(n) = state.write_message(&payload, &mut msg) else {
            return;
        };
        self.next_handshake_path = path + 1;
        let cookie = self.paths[path]
            .cookie
            .filter(|(at, _)| now.saturating_duration_since(*at) < COOKIE_LIFETIME)
            .map(|(_, c)| c);
        let (dgram, mac1) = self.cookie_keys.initiation(
            PathId(path as u8),
            local_index,
            &msg[..n],
            cookie.as_ref(),
        );
        self.control.push_back((path, dgram));
        self.pending = Some(PendingHandshake {
            state,
            local_index,
            sent_at: now,
            path,
            mac1,
            cookie_replied: false,
            had_cookie: cookie.is_some(),
        });
    }

    fn install_keys(&mut self, now: Instant, keys: KeySet) {
        if let Some(mut old) = self.current.take() {
            old.retired_at = Some(now);
            self.previous = Some(old);
        }
        self.current = Some(keys);
        self.handshakes += 1;
        // Counters start again under the new keys.
        self.ring.clear();
        for plain in self.reinjection.clear() {
            self.ring.recycle(plain);
        }
        for p in &mut self.paths {
            p.heard_to = 0;
        }
        self.gaps.reset();
        self.nacks.clear();
        self.abandons.clear();
        self.unheard.clear();
        // Probe at once: it confirms the keys to the peer and measures the paths. Probes
        // under the old keys may go unanswered (a lost handshake response): the one-way clock
        // starts again.
        for p in &mut self.paths {
            p.probe_due = true;
            p.unanswered_since = None;
            p.unanswered = 0;
        }
    }

    fn new_keyset(
        &self,
        now: Instant,
        local: u32,
        remote: u32,
        t: StatelessTransportState,
    ) -> KeySet {
        KeySet {
            local_index: local,
            remote_index: remote,
            transport: t,
            created: now,
            counters: vec![0; self.paths.len()],
            replay: vec![ReplayWindow::default(); self.paths.len()],
            retired_at: None,
        }
    }

    fn handle_init(
        &mut self,
        now: Instant,
        path: PathId,
        sender_index: u32,
        noise: &[u8],
        datagram: &[u8],
    ) -> Result<(), DropReason> {
        if self.cfg.role != Role::Responder {
            return Err(self.drop(DropReason::UnexpectedHandshake));
        }
        if !self.cookie_keys.mac1_ok(datagram) {
            return Err(self.drop(DropReason::BadMac));
        }
        let private = self.cfg.private_key.0;
        let prologue = prologue(path, sender_index);
        let state = self
            .noise_builder()
            .local_private_key(&private)
            .and_then(|b| b.prologue(&prologue))
            .and_then(|b| b.build_responder());
        let Ok(mut state) = state else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        let mut buf = vec![0u8; 1024];
        let Ok(n) = state.read_message(noise, &mut buf) else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        // Only what the peer sent: a short payload must fail the reads below, not slice past it.
        let payload = &buf[..n];
        if state.get_remote_static() != Some(&self.cfg.peer_public_key.0[..]) {
            return Err(self.drop(DropReason::UnknownPeer));
        }
        let Some(ts) = payload
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
        else {
            return Err(self.drop(DropReason::BadParams));
        };
        if ts <= self.last_init_timestamp {
            return Err(self.drop(DropReason::StaleInitiation));
        }
        let Some(instance) = payload
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
        else {
            return Err(self.drop(DropReason::BadParams));
        };
        let params = match BondParams::decode(&payload[16..]) {
            Ok(p) => p,
            Err(_) => return Err(self.drop(DropReason::BadParams)),
        };
        if path.index() >= params.rates_bps.len() {
            return Err(self.drop(DropReason::WrongPath));
        }
        let local_index = self.random_index();
        let mut msg = vec![0u8; 1024];
        let handed = encode_response(&Response {
            instance: self.instance,
            addresses: self.cfg.handed_addresses.clone(),
            accepts_tcp: self.cfg.accepts_tcp,
        });
        let Ok(m) = state.write_message(&handed, &mut msg) else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        let Ok(transport) = state.into_stateless_transport_mode() else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        self.last_init_timestamp = ts;
        // The client restarted: its striper and receiver start from zero, so the bond starts
        // afresh here too, even with the same parameters (a rekey keeps them). Its old keys go
        // too: nothing sent under them belongs to the new bond.
        let restarted = self.note_peer_instance(instance);
        if restarted {
            self.current = None;
            self.previous = None;
        }
        self.adopt_params(params, now, Some(path), restarted);
        let keys = self.new_keyset(now, local_index, sender_index, transport);
        self.install_keys(now, keys);
        let outer = Outer::HandshakeResponse {
            path,
            sender_index: local_index,
            receiver_index: sender_index,
            noise: &msg[..m],
        };
        let mut dgram = vec![0u8; outer.buffer_len()];
        if outer.emit_into(&mut dgram).is_ok() {
            self.control.push_back((path.index(), dgram));
        }
        Ok(())
    }

    fn handle_response(
        &mut self,
        now: Instant,
        sender_index: u32,
        receiver_index: u32,
        noise: &[u8],
    ) -> Result<(), DropReason> {
        let matches = self
            .pending
            .as_ref()
            .is_some_and(|p| p.local_index == receiver_index);
        if self.cfg.role != Role::Initiator || !matches {
            return Err(self.drop(DropReason::UnexpectedHandshake));
        }
        let mut pending = self.pending.take().expect("checked");
        let mut payload = vec![0u8; 1024];
        let Ok(n) = pending.state.read_message(noise, &mut payload) else {
            // Keep waiting for a genuine response.
            self.pending = Some(pending);
            return Err(self.drop(DropReason::BadHandshake));
        };
        let Some(response) = decode_response(&payload[..n]) else {
            return Err(self.drop(DropReason::BadParams));
        };
        let Ok(transport) = pending.state.into_stateless_transport_mode() else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        if self.note_peer_instance(response.instance) {
            // The server restarted: start the endpoint afresh (architecture.md, "Handshakes:
            // the guard, and restarts").
            self.restart_endpoint();
        }
        self.handed = response.addresses;
        self.peer_accepts_tcp = response.accepts_tcp;
        let keys = self.new_keyset(now, pending.local_index, sender_index, transport);
        self.install_keys(now, keys);
        Ok(())
    }

    /// Initiator: a responder under load answered the pending initiation with a cookie for
    /// this path's source address. Keep it; the retry goes out on this path with it.
    fn handle_cookie_reply(
        &mut self,
        now: Instant,
        path: PathId,
        receiver_index: u32,
        nonce: &[u8; outer::COOKIE_NONCE_LEN],
        sealed: &[u8; outer::ENCRYPTED_COOKIE_LEN],
    ) -> Result<(), DropReason> {
        let Some(pending) = self.pending.as_mut().filter(|p| {
            self.cfg.role == Role::Initiator
                && p.local_index == receiver_index
                && p.path == path.index()
        }) else {
            return Err(self.drop(DropReason::UnexpectedHandshake));
        };
        let Some(cookie) = self.cookie_keys.open_cookie(&pending.mac1, nonce, sealed) else {
            return Err(self.drop(DropReason::BadHandshake));
        };
        // Stay on the path for the retry only if this initiation had no cookie yet: a cookie
        // reply to one that had (a secret rotated, or a reply forged by someone who sees this
        // path's initiations) must not keep the handshake off the other paths.
        pending.cookie_replied = !pending.had_cookie;
        if let Some(p) = self.paths.get_mut(path.index()) {
            p.cookie = Some((now, cookie));
        }
        self.cookie_replies += 1;
        Ok(())
    }

    /// A datagram arrived. `arrived_on` is the path of the socket it came in on, if the driver
    /// knows it (the client: one socket per path); the server passes `None` and learns the path
    /// from the authenticated packet. Returns the authenticated path, so the driver can update
    /// that path's peer address (NAT, roaming); errors say why it was dropped.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        arrived_on: Option<PathId>,
        bytes: &[u8],
    ) -> Result<PathId, DropReason> {
        self.handle_datagram_at(now, now, arrived_on, bytes)
    }

    /// [`Session::handle_datagram`] for a datagram that reached the host at `arrival` (no
    /// later than `now`): the kernel's receive timestamp, where the driver has one. PET's
    /// SIG-ACKs report it as the packet's arrival, so that a pair's dispersion, and with it the
    /// peer's bandwidth estimate, is the path's and not how late the driver got to read each
    /// packet: on a loaded host one late read turned a pair's spacing into a sample several
    /// times off (docs/benchmarks.md, "Kernel receive timestamps"). Everything else uses
    /// `now`. An `arrival` after `now` is taken as `now`.
    pub fn handle_datagram_at(
        &mut self,
        now: Instant,
        arrival: Instant,
        arrived_on: Option<PathId>,
        bytes: &[u8],
    ) -> Result<PathId, DropReason> {
        let outer = match Outer::parse(bytes) {
            Ok(o) => o,
            Err(_) => return Err(self.drop(DropReason::Malformed)),
        };
        let path = match outer {
            Outer::HandshakeInit { path, .. }
            | Outer::HandshakeResponse { path, .. }
            | Outer::Transport { path, .. }
            | Outer::CookieReply { path, .. } => path,
        };
        if arrived_on.is_some_and(|a| a != path) {
            return Err(self.drop(DropReason::WrongPath));
        }
        match outer {
            Outer::HandshakeInit {
                sender_index,
                noise,
                ..
            } => self.handle_init(now, path, sender_index, noise, bytes)?,
            Outer::CookieReply {
                receiver_index,
                nonce,
                cookie,
                ..
            } => {
                // Not the peer's authenticated traffic: the path is not heard from.
                self.handle_cookie_reply(now, path, receiver_index, &nonce, &cookie)?;
                return Ok(path);
            }
            Outer::HandshakeResponse {
                sender_index,
                receiver_index,
                noise,
                ..
            } => self.handle_response(now, sender_index, receiver_index, noise)?,
            Outer::Transport {
                receiver_index,
                counter,
                ciphertext,
                ..
            } => self.handle_transport(now, arrival, path, receiver_index, counter, ciphertext)?,
        }
        self.path_heard(now, path, bytes.len());
        Ok(path)
    }

    fn path_heard(&mut self, now: Instant, path: PathId, bytes: usize) {
        let Some(p) = self.paths.get_mut(path.index()) else {
            return;
        };
        p.last_rx = Some(now);
        p.woke_at = None;
        p.dark_at = None;
        p.rx_packets += 1;
        p.rx_bytes += bytes as u64;
        p.tick_rx_bytes += bytes as u64;
        if !p.up && !p.disabled && !p.deaf {
            p.up = true;
            p.found_dark = false;
            p.answered = 0;
            p.up_since = Some(now);
            // A notice not sent yet would take a path that works out of the peer's rotation.
            self.unheard.retain(|u| u.path != path);
            p.settled = false;
            // Probes unanswered while the path was down do not count against it now.
            p.unanswered_since = None;
            p.unanswered = 0;
            if !p.standby {
                if let Some(e) = &mut self.endpoint {
                    e.set_path_active(path, true);
                }
            }
            self.update_standby(now);
            self.update_qos_rate(now);
        }
    }

    /// The rate this end sends at on path `i`, as far as it knows: PET's (or adaptive SRR's)
    /// estimate where it has one, else the configured rate (PET's starting guess when none was
    /// configured); `None` before the bond's parameters.
    fn own_rate_bps(&self, i: usize) -> Option<u64> {
        let p = self.params.as_ref()?;
        let pet = self.endpoint.as_ref().and_then(|e| e.striper().pet());
        pet.and_then(|t| t.estimate_bps(PathId(i as u8)))
            .or_else(|| p.rates_bps.get(i).copied())
    }

    /// The peer says, in a probe or probe acknowledgement on path `i`, that it sends at
    /// `rate_kbps` there (0: no opinion). Kept within [`PEER_RATE_RANGE`] times the path's
    /// configured rate (PET's starting guess when none is configured): a peer that claims
    /// 1 kbit/s must not stall the release, nor one that claims terabits turn pacing off.
    fn note_peer_rate(&mut self, i: usize, rate_kbps: u32) {
        let (Some(p), Some(st)) = (&self.params, self.paths.get_mut(i)) else {
            return;
        };
        let configured = p.rates_bps.get(i).copied().unwrap_or(0);
        if let Some(r) = peer_rate_bps(configured, rate_kbps) {
            st.peer_rate_bps = Some(r);
        }
    }

    /// [`Session::own_rate_bps`] in kbit/s for a probe: 0 (no opinion) before the bond.
    fn own_rate_kbps(&self, i: usize) -> u32 {
        self.own_rate_bps(i)
            .map_or(0, |r| u32::try_from(r / 1000).unwrap_or(u32::MAX))
    }

    /// The bond's rate now: the paths that are up, each at [`Session::own_rate_bps`].
    fn bond_rate_bps(&self) -> u64 {
        // PET's blackouts only where PET places the packets (adaptive SRR's measuring PET
        // does not take a path out of SRR's rotation).
        let pet = self
            .endpoint
            .as_ref()
            .and_then(|e| e.striper().pet())
            .filter(|_| {
                self.params
                    .as_ref()
                    .is_some_and(|p| p.scheduler == braid_proto::scheduler::SchedulerKind::Pet)
            });
        (0..self.paths.len())
            .filter(|&i| self.paths[i].in_use())
            .filter(|&i| pet.is_none_or(|t| t.is_active(PathId(i as u8))))
            .filter_map(|i| self.own_rate_bps(i))
            .sum()
    }

    /// Keep the receiver's paced release above what arrives: the rates the peer says it sends
    /// at on the paths that are up (its probes carry them: PET's or adaptive SRR's estimates,
    /// else its configured rates), or the highest arrival rate lately (decaying 2% a probe
    /// tick), whichever is higher. Before the peer has said, its configured rates (PET's
    /// starting guesses when it measures them), which can be several times the truth: a
    /// release paced at 2.4 times the bond's rate cost CUBIC a third of its goodput on the
    /// lab's lossy paths (docs/benchmarks.md).
    fn update_release_rate(&mut self) {
        let pct = self.cfg.release_pacing_pct;
        let (Some(p), Some(e), true) = (&self.params, &mut self.endpoint, pct > 0) else {
            return;
        };
        if !self.paths.iter().any(PathState::in_use) {
            // Nothing arrives: keep the rate until a path is back.
            return;
        }
        let arriving: f64 = self.paths.iter().map(|p| p.rx_bps).sum();
        self.rx_peak_bps = arriving.max(self.rx_peak_bps * 0.98);
        let said: u64 = self
            .paths
            .iter()
            .zip(&p.rates_bps)
            .filter(|(st, _)| st.in_use())
            .map(|(st, &configured)| st.peer_rate_bps.unwrap_or(configured))
            .sum();
        let base = (self.rx_peak_bps as u64).max(said);
        self.release_rate_bps = pacing_rate(base, pct);
        e.set_release_rate(self.release_rate_bps);
    }

    /// Keep the `[qos]` shaper at the bond's rate: paths go down and come back, and PET's
    /// estimates move. A whole-bond shaper's buffer also follows the bond's equalised round
    /// trip, the slowest path's base one-way delay plus the fastest's (the way back of a TCP
    /// acknowledgement).
    fn update_qos_rate(&mut self, now: Instant) {
        if self.qos.is_some() {
            let rate = self.bond_rate_bps();
            let (lo, hi) = (self.up_min_rtts().min(), self.up_min_rtts().max());
            if let Some(q) = &mut self.qos {
                q.set_bond_rate(now, rate);
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    q.set_queue_time((lo + hi) / 2);
                }
            }
        }
    }

    /// Take `path` out of use, or give it back (a client's care-of address dropped or added at
    /// run time: `braid path down|up`, or its interface gone). A disabled path sends nothing,
    /// not even probes or handshakes, leaves the rotation at once (what waits in its queue is
    /// dropped) and is not brought back by what still arrives on it. Enabled again, it is
    /// probed and rejoins the rotation when its first answer arrives. The peer sees the path
    /// go silent and takes it out after its dead-path timeout.
    pub fn set_path_enabled(&mut self, now: Instant, path: PathId, enabled: bool) {
        let i = path.index();
        let Some(p) = self.paths.get_mut(i) else {
            return;
        };
        if p.disabled != enabled {
            return;
        }
        p.disabled = !enabled;
        p.unanswered_since = None;
        p.unanswered = 0;
        p.deaf = false;
        if enabled {
            p.probe_due = true;
            return;
        }
        // Answers to the peer's probes from before would give it RTT samples minutes long.
        p.acks.clear();
        let was_up = std::mem::replace(&mut p.up, false);
        if was_up {
            p.down_events += 1;
            if let Some(e) = &mut self.endpoint {
                e.set_path_active(path, false);
            }
        }
        self.control.retain(|(p, _)| *p != i);
        self.resend.retain(|(p, _)| *p != i);
        self.drop_ptcp_tx(|o| o.path == path);
        self.update_standby(now);
        self.update_qos_rate(now);
    }

    /// Forget the shaped pTCP segments waiting for their path that `which` picks (counted as
    /// unsent: pTCP resends them).
    fn drop_ptcp_tx(&mut self, which: impl Fn(&PtcpOut) -> bool) {
        let before = self.ptcp_tx.len();
        self.ptcp_tx.retain(|o| !which(o));
        self.ptcp.unsent += (before - self.ptcp_tx.len()) as u64;
    }

    /// Whether transport messages for receiver index `index` are this session's (under its
    /// current or previous keys). A server with several clients routes datagrams with it.
    pub fn owns_index(&self, index: u32) -> bool {
        [self.current.as_ref(), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .any(|k| k.local_index == index)
    }

    /// Initiator: the tunnel addresses (address, prefix length) the responder handed over in
    /// its last handshake response; empty if it handed none.
    pub fn handed_addresses(&self) -> &[(IpAddr, u8)] {
        &self.handed
    }

    /// Initiator: whether the responder said in its last handshake response that it takes
    /// accelerated TCP (its `[tcp] accelerate`); `false` before the first response.
    pub fn peer_accepts_tcp(&self) -> bool {
        self.peer_accepts_tcp
    }

    fn handle_transport(
        &mut self,
        now: Instant,
        arrival: Instant,
        path: PathId,
        index: u32,
        counter: u64,
        ciphertext: &[u8],
    ) -> Result<(), DropReason> {
        let i = path.index();
        if i >= self.paths.len() {
            return Err(self.drop(DropReason::WrongPath));
        }
        let under_current = self
            .current
            .as_ref()
            .is_some_and(|k| k.local_index == index);
        let keys = [self.current.as_mut(), self.previous.as_mut()]
            .into_iter()
            .flatten()
            .find(|k| k.local_index == index);
        let Some(keys) = keys else {
            return Err(self.drop(DropReason::UnknownIndex));
        };
        // Keys made for a bond of fewer paths (a peer that restarted with more) have no window
        // for this path: nothing of theirs can be on it.
        let Some(window) = keys.replay.get(i) else {
            return Err(self.drop(DropReason::WrongPath));
        };
        if !window.check(counter) {
            return Err(self.drop(DropReason::Replayed));
        }
        let Ok(n) =
            keys.transport
                .read_message(outer::nonce(path, counter), ciphertext, &mut self.plain)
        else {
            return Err(self.drop(DropReason::DecryptFailed));
        };
        keys.replay[i].update(counter);
        if self.retransmit && under_current {
            if let Some((first, count)) = self.gaps.on_counter(i, counter) {
                // Every gap is named: the sender resends a short one (random loss) and
                // abandons a long one (congestion, which TCP must see to back off), so either
                // way the receiver stops waiting a fastest-path round trip after the loss.
                if self.nacks.len() < 64 {
                    self.nacks.push_back(Nack { path, first, count });
                }
            }
        }
        let plain = std::mem::take(&mut self.plain);
        let result = match Repr::parse_bytes(&plain[..n]) {
            Ok(Repr::Probe(p)) if p.path == path => {
                self.note_peer_rate(i, p.rate_kbps);
                let st = &mut self.paths[i];
                if let Some(t) = st.last_peer_probe.replace(now) {
                    let gap = now.saturating_duration_since(t);
                    st.peer_probe_gap = Some(st.peer_probe_gap.map_or(gap, |g| (g * 7 + gap) / 8));
                }
                // A disabled path sends nothing: answers queued now would go out on re-enabling,
                // giving the peer RTT samples as long as the pause.
                if st.acks.len() < 8 && !st.disabled {
                    st.acks.push_back(Probe {
                        unheard: false,
                        ..p
                    });
                }
                if p.unheard {
                    self.peer_hears_nothing(now, i);
                }
                Ok(())
            }
            Ok(Repr::ProbeAck(p)) if p.path == path => {
                self.note_peer_rate(i, p.rate_kbps);
                let st = &mut self.paths[i];
                let sample = now - Instant::from_nanos(p.timestamp);
                st.srtt = Some(match st.srtt {
                    Some(s) => (s * 7 + sample) / 8,
                    None => sample,
                });
                let one_way = st.srtt.map_or(Duration::ZERO, |r| r / 2);
                let base_one_way = st.min_rtt.update(now, sample) / 2;
                let srtt = st.srtt;
                if let Some(e) = &mut self.endpoint {
                    e.set_path_delay(path, one_way);
                    e.set_path_base_delay(path, Some(base_one_way));
                    e.set_path_rtt(path, srtt);
                }
                self.update_retransmit_grace();
                let st = &mut self.paths[i];
                st.unanswered_since = None;
                st.unanswered = 0;
                if st
                    .wake_probe
                    .is_some_and(|w| Instant::from_nanos(p.timestamp) >= w)
                {
                    st.wake_probe = None;
                }
                if let Some(k) = st.outstanding.iter().position(|&(id, ..)| id == p.id) {
                    if let Some((.., counter)) = st.outstanding.remove(k) {
                        st.heard_to = st.heard_to.max(counter + 1);
                    }
                    st.loss *= 0.9;
                    st.answered = st.answered.saturating_add(1);
                    // An answer to a probe still awaited: the path works both ways again
                    // (path_heard puts a one-way path back). A late answer to an old probe
                    // does not say so.
                    st.deaf = false;
                }
                Ok(())
            }
            Ok(Repr::Probe(_) | Repr::ProbeAck(_)) => Err(DropReason::BadInner),
            Ok(Repr::Ptcp { conn, segment }) => {
                // Not for pure ACKs and keepalives (an idle accelerated connection's).
                if segment.len() > braid_proto::striper::SMALL_PACKET_BYTES as usize {
                    self.note_data(now);
                    self.paths[i].last_data_rx = Some(now);
                }
                if self.ptcp_rx.len() >= PTCP_RX_QUEUE {
                    self.ptcp.dropped += 1;
                } else {
                    self.ptcp.received += 1;
                    self.ptcp_rx.push_back(PtcpSegment {
                        path,
                        conn,
                        segment: segment.to_vec(),
                    });
                }
                Ok(())
            }
            Ok(Repr::Nack(n)) => {
                self.on_nack(now, n);
                Ok(())
            }
            Ok(Repr::Abandon(a)) => {
                if let Some(e) = &mut self.endpoint {
                    e.abandon(a.first, a.count);
                }
                Ok(())
            }
            Ok(Repr::Unheard(u)) => {
                self.on_unheard(now, u);
                Ok(())
            }
            Ok(repr) => {
                if let Repr::Data { payload, .. } = repr {
                    if !is_link_chatter(payload) {
                        self.note_data(now);
                        self.paths[i].last_data_rx = Some(now);
                    }
                }
                if let Some(e) = &mut self.endpoint {
                    e.handle_repr_at(now, arrival, path, repr);
                }
                Ok(())
            }
            Err(_) => Err(DropReason::BadInner),
        };
        self.plain = plain;
        result.map_err(|r| self.drop(r))
    }

    /// An IP packet from the application, to stripe. Dropped (and counted) if the bond cannot
    /// take it now: not established, or the selected path's queue is full.
    pub fn send(&mut self, now: Instant, packet: &[u8]) -> bool {
        self.last_now = now;
        if self.current.is_some() && !is_link_chatter(packet) {
            self.note_data(now);
        }
        if let (Some(q), true) = (&mut self.qos, self.current.is_some()) {
            q.enqueue(now, packet);
            self.pump_qos(now);
            return true;
        }
        let Some(e) = &mut self.endpoint else {
            self.send_dropped += 1;
            return false;
        };
        if self.current.is_none() || e.send_copy(now, packet).is_err() {
            self.send_dropped += 1;
            return false;
        }
        true
    }

    /// Seal one segment of pTCP connection `conn` for `path` (the path of the micro-flow that
    /// sent it) into `out`, and return the datagram's length. The segment goes out on that
    /// path with the session's encryption and counters, outside the striper and the
    /// resequencer; send the datagram on `path` as one from [`Session::poll_transmit`].
    ///
    /// `None` (counted) if there are no keys yet, `path` is not one of the session's, the
    /// segment is empty, or `out` cannot hold the datagram (the segment's length plus
    /// [`Session::PTCP_OVERHEAD`]): pTCP resends what it loses, so the caller may just drop it.
    pub fn seal_ptcp(
        &mut self,
        now: Instant,
        path: PathId,
        conn: u16,
        segment: &[u8],
        out: &mut [u8],
    ) -> Option<usize> {
        self.last_now = now;
        let i = path.index();
        // Not on a backup in standby nor a line settling: its micro-flow finds the path dead
        // (the segment counts as unsent) and pTCP stripes over the paths in use.
        let sealed = if self
            .paths
            .get(i)
            .is_some_and(|p| !p.standby && !p.probation)
        {
            self.seal_repr(i, Repr::Ptcp { conn, segment }, out)
        } else {
            None
        };
        match sealed {
            Some(_) => {
                self.ptcp.sent += 1;
                // Data (not ACKs and keepalives alone): the bond is busy, and PET keeps
                // measuring the paths with padding while accelerated TCP carries it.
                if segment.len() > braid_proto::striper::SMALL_PACKET_BYTES as usize {
                    self.note_data(now);
                    if let Some(e) = &mut self.endpoint {
                        e.note_traffic(now);
                    }
                }
            }
            None => self.ptcp.unsent += 1,
        }
        sealed
    }

    /// The `[qos]` class of an accelerated TCP connection whose packets would carry `headers`
    /// (its addresses and ports as they leave this end), when this end shapes its egress with
    /// `[qos]` classes: `None` without `[qos]`. On a PET bond the shaper's rate follows PET's
    /// estimates, which PET's padding pairs keep fresh while accelerated TCP is all the bond
    /// carries.
    pub fn ptcp_class(&self, headers: &Headers) -> Option<ClassId> {
        let q = self.qos.as_ref().filter(|q| q.takes_ptcp())?;
        Some(q.classify_headers(headers))
    }

    /// The most an accelerated connection's flow over `path` may send, in bits per second on
    /// the wire, when its segments queue in `[qos]` ([`QosShaper::ptcp_path_cap`]): the path's
    /// rate at the shaper's fraction, PET's estimate where it has one, else the configured
    /// rate (PET's starting guess until the first estimate). `None`: no cap (no `[qos]`, or a
    /// whole-bond shaper, which does not take accelerated TCP).
    pub fn ptcp_rate_cap_bps(&self, path: PathId) -> Option<u64> {
        let rate = self.own_rate_bps(path.index())?;
        self.qos.as_ref()?.ptcp_path_cap(rate)
    }

    /// Queue a segment of pTCP connection `conn` for `path` in `[qos]` class `class` (from
    /// [`Session::ptcp_class`]): it waits, and may be dropped, in JoBS like the class's
    /// packets, and leaves from [`Session::poll_transmit`] on `path` when the shaper lets it.
    /// `false` (nothing queued) if the session has no `[qos]` shaper or no keys yet: seal it
    /// with [`Session::seal_ptcp`] instead.
    pub fn queue_ptcp(
        &mut self,
        now: Instant,
        class: ClassId,
        path: PathId,
        conn: u16,
        segment: &[u8],
    ) -> bool {
        self.last_now = now;
        let Some(q) = self.qos.as_mut().filter(|q| q.takes_ptcp()) else {
            return false;
        };
        if self.current.is_none() {
            return false;
        }
        q.enqueue_ptcp(
            now,
            class,
            PtcpOut {
                path,
                conn,
                segment: segment.to_vec(),
            },
        );
        self.pump_qos(now);
        true
    }

    /// Bytes a pTCP segment grows by on the wire in a UDP payload: the transport header, the
    /// AEAD tag and the inner pTCP header.
    pub const PTCP_OVERHEAD: usize = TRANSPORT_HEADER_LEN + TAG_LEN + braid_wire::PTCP_HEADER_LEN;

    /// The next pTCP segment that arrived, in arrival order, for the connection it names.
    pub fn poll_ptcp(&mut self) -> Option<PtcpSegment> {
        self.ptcp_rx.pop_front()
    }

    /// Counters of the pTCP segments carried.
    pub fn ptcp_counters(&self) -> PtcpCounters {
        self.ptcp
    }

    /// Whether `path` is up: its probes answered, in the rotation unless it is a backup in
    /// standby (`false` before the handshake, and for a path that is not the session's).
    pub fn path_is_up(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|p| p.up)
    }

    /// The peer's probe on path `i` says it hears nothing from this end there: what this end
    /// sends on it is lost, though the peer's packets come in. Out of the sending half, as if
    /// this end's probes had gone unanswered, until an answer to one of them comes back.
    ///
    /// Only if this end's own probes back it: unanswered for longer than a round trip and a
    /// probe interval. A flag the peer sent before it heard this end again (a path just back,
    /// a server just restarted) comes within a round trip of this end's first probe since,
    /// and is stale.
    fn peer_hears_nothing(&mut self, now: Instant, i: usize) {
        let established = self.current.is_some();
        let p = &self.paths[i];
        let interval = if p.standby {
            self.standby_probe_interval()
        } else {
            self.cfg.probe_interval
        };
        let p = &mut self.paths[i];
        let backed = p.unanswered_since.is_some_and(|t| {
            now.saturating_duration_since(t) > p.srtt.unwrap_or(UNMEASURED_RTT_SLACK) + interval
        });
        if !established || p.disabled || p.deaf || !backed {
            return;
        }
        self.mark_one_way(now, i);
    }

    /// Path `i` out of the sending half: what this end sends on it is lost, though the peer's
    /// packets come in. Back with an answer to one of this end's probes.
    fn mark_one_way(&mut self, now: Instant, i: usize) {
        let p = &mut self.paths[i];
        p.wake_probe = None;
        let was_up = std::mem::replace(&mut p.up, false);
        p.deaf = true;
        if was_up {
            p.down_events += 1;
        }
        if let Some(e) = &mut self.endpoint {
            // A path that was down for silence: its receiving half is back (the peer's probe
            // just came), its sending half stays out.
            if !was_up && !p.standby {
                e.set_path_active(PathId(i as u8), true);
            }
            e.set_path_sending(PathId(i as u8), false);
        }
        self.update_standby(now);
        self.update_qos_rate(now);
    }

    /// The resequencer gave up on a gap that `stall.path`, which carried traffic up to just
    /// before it, had not passed. If the gap was not one lost packet ([`STALL_MISSING`]) and
    /// nothing comes on that path for [`dark_quiet`] after the last packet heard on it (the
    /// peer probes every path at its pace, and a probe waits behind the data queued before
    /// it: about a round trip of it on a loaded path, the slack allowing for a queue that
    /// grew), the path died: out at both halves then ([`Self::check_dark`], from
    /// `handle_timeout`), as a path silent for `dead_after` would be, and back with the next
    /// packet heard; and the peer is told ([`Repr::Unheard`], on the fastest path in use, and
    /// again at the next [`UNHEARD_REPEATS`] probe ticks while it stays dark), so its sending
    /// half stops feeding the path a one-way trip later instead of after its own
    /// `dead_after`. A path the peer took out of this end's sending half that way already
    /// leaves the receiving half too, and the peer is told as well (it may be sending there
    /// again, having heard this end's probes).
    fn on_stall(&mut self, stall: Stall) {
        let i = stall.path.index();
        let Some(p) = self.paths.get_mut(i) else {
            return;
        };
        // A path the peer took out of this end's sending half (it found it dark first) still
        // receives: its own direction may have died too.
        let receiving = p.in_use() || (p.deaf && !p.standby);
        if self.current.is_none() || !receiving || p.disabled || stall.missing < STALL_MISSING {
            return;
        }
        // Never heard from is no evidence either way: the tick takes such a path down. A
        // packet that comes on it from now on clears the timer (`path_heard`); one already in
        // flight as the gap opened (a probe) is no sign of life.
        let Some(last) = p.last_rx else {
            return;
        };
        let at = last + dark_quiet(p, self.cfg.probe_interval);
        p.dark_at = Some(p.dark_at.map_or(at, |d| d.min(at)));
        // Acted on in handle_timeout, not here: a driver that delivers after each socket it
        // reads may call this before it has read the path's own socket, whose packets would
        // say it lives.
    }

    /// The one path in use while a backup waits in standby, busy (receiving at least
    /// [`BUSY_RX_BPS`]): it and when it counts as dark if nothing comes on it. No other path
    /// delivers past its gaps ([`Self::on_stall`] cannot find it), but a busy path quiet for
    /// two probe intervals and a round trip and a half has stopped all the same (two of the
    /// peer's probes missing: one lost just as a download ended would look like a line that
    /// died), and the backup can take over then instead of after `dead_after` (by when the
    /// transport above has backed off its retransmission timer twice). A path whose probes
    /// get lost waits a probe interval more (its probe loss 1% or more) or two (10% or more):
    /// probes lost between bursts of data are not a line that died. One that loses a quarter
    /// or more is left to `dead_after`, and so is one whose probes have been answered fewer
    /// than [`SOLE_LINE_ANSWERS`] times since it came up, and one whose last data came more
    /// than [`DATA_RECENT`] before its last packet.
    fn sole_line_dark_at(&self) -> Option<(usize, Instant)> {
        let backups = self.params.as_ref().map_or(0, |p| p.backup_paths);
        if self.current.is_none() || backups == 0 {
            return None;
        }
        // A backup that waits and works: none of its probes overdue (one that died in standby
        // stays up for its slow probes' dead-path time, seconds).
        let now = self.last_now;
        let waiting = self.paths.iter().enumerate().any(|(i, p)| {
            is_backup(backups, i)
                && p.up
                && p.standby
                && p.unanswered_since
                    .is_none_or(|t| now.saturating_duration_since(t) <= p.probe_lost_after())
        });
        let mut in_use = self.paths.iter().enumerate().filter(|(_, p)| p.in_use());
        let (i, p) = in_use.next()?;
        if !waiting || in_use.next().is_some() || p.disabled || p.rx_bps < BUSY_RX_BPS {
            return None;
        }
        // Its probes' loss must be known (a path just up has lost none yet), and low enough.
        if p.answered < SOLE_LINE_ANSWERS || p.loss >= 0.25 {
            return None;
        }
        // Data must have come up to its last packet: a line whose data just ended (a
        // download done) brings only probes, and its smoothed rate says busy for a second
        // more; one lost probe then is no line that died.
        let last = p.last_rx?;
        if p.last_data_rx? + DATA_RECENT < last {
            return None;
        }
        let more = 1 + u32::from(p.loss >= 0.01) + u32::from(p.loss >= 0.1);
        let pace = probe_pace(p, self.cfg.probe_interval);
        let quiet = dark_quiet(p, self.cfg.probe_interval) + pace * more;
        Some((i, last + quiet))
    }

    /// Paths whose [`PathState::dark_at`] has come, heard nothing since: out at both halves,
    /// and the peer told (one the peer took out of the sending half already: out of the
    /// receiving half too, the peer knows).
    fn check_dark(&mut self, now: Instant) {
        let due: Vec<usize> = (0..self.paths.len())
            .filter(|&i| self.paths[i].dark_at.is_some_and(|t| now >= t))
            .collect();
        if due.is_empty() {
            return;
        }
        for &i in &due {
            let p = &mut self.paths[i];
            p.dark_at = None;
            if self.current.is_none() || p.disabled {
                continue;
            }
            let path = PathId(i as u8);
            let mut sending = false;
            if p.deaf && !p.standby {
                // The peer may be sending on it again (it heard this end's probes there).
                p.deaf = false;
            } else if p.in_use() {
                p.up = false;
                p.deaf = false;
                p.down_events += 1;
                sending = p.tx_bps > 0.0;
            } else {
                continue;
            }
            p.found_dark = true;
            p.stalls += 1;
            p.notices_left = UNHEARD_REPEATS;
            if sending && self.retransmit {
                self.await_notice(now, i);
            }
            if let Some(e) = &mut self.endpoint {
                e.set_path_active(path, false);
            }
            self.queue_unheard(i);
        }
        self.update_standby(now);
        self.update_qos_rate(now);
    }

    /// This end took path `i`, which carried data, out of its sending half: the peer is likely
    /// to find it dark too and say what it missed there ([`Self::on_unheard`]). The data for
    /// the path that will carry those copies waits for them, a round trip of that path at
    /// most (of a backup too, which leaves standby now).
    fn await_notice(&mut self, now: Instant, i: usize) {
        let backups = self.params.as_ref().map_or(0, |p| p.backup_paths);
        let rtt = self
            .paths
            .iter()
            .enumerate()
            .filter(|&(j, q)| j != i && q.up && (q.in_use() || is_backup(backups, j)))
            .filter_map(|(_, q)| q.srtt.or(q.min_rtt.get()))
            .min();
        if let Some(rtt) = rtt {
            let wait = rtt.min(AWAIT_NOTICE_MAX) + AWAIT_NOTICE_SLACK;
            self.reinjection.await_notice(i, now + wait);
        }
    }

    /// Tell the peer that path `i` is dark here ([`Repr::Unheard`]), on the fastest path in
    /// use.
    fn queue_unheard(&mut self, i: usize) {
        let first = self
            .current
            .as_ref()
            .and_then(|k| k.replay.get(i))
            .map_or(0, ReplayWindow::next);
        let next_seq = self
            .endpoint
            .as_ref()
            .and_then(Endpoint::next_seq)
            .unwrap_or(0);
        if self.unheard.len() >= 64 {
            self.unheard.pop_front();
        }
        self.unheard.push_back(Unheard {
            path: PathId(i as u8),
            first,
            next_seq,
        });
    }

    /// The peer found `u.path` dark from the data it received: out of the sending half
    /// ([`Self::peer_finds_dark`]), and what it swallowed from the peer's next expected
    /// counter there on is reinjected on the paths left ([`Reinjection`]). A notice that says
    /// the peer has not heard what it has since answered (a probe) crossed the path's
    /// recovery: stale, nothing to do. A repeat finds nothing more to reinject unless this end
    /// sent there again meanwhile, which the peer did not hear either.
    fn on_unheard(&mut self, now: Instant, u: Unheard) {
        let i = u.path.index();
        let Some(p) = self.paths.get(i) else {
            return;
        };
        if self.current.is_none() || u.first < p.heard_to {
            return;
        }
        // The notice this end waited for, if it found the path dark too: what waits for the
        // copies' path goes now, or behind the copies.
        self.reinjection.notice_came(i);
        self.peer_finds_dark(now, i);
        if !self.retransmit {
            return;
        }
        // Not what the peer has given up on: its holes are the transport's to fill now (a
        // copy would come after the transport's own resend, a duplicate).
        let mut packets = self.ring.take_from(i, u.first);
        packets.retain(|plain| {
            Packet::new_checked(&plain[..])
                .and_then(|p| p.seq())
                .is_ok_and(|seq| seq.is_some_and(|s| s >= u.next_seq))
        });
        if packets.is_empty() {
            return;
        }
        // Paced at the rate of the path it will go on (PET's estimate or the configured
        // rate); the dark path's own when that is unknown (the pace the data had), else
        // a modest default.
        let rate = self
            .fastest_path(Some(i))
            .filter(|&t| t != i)
            .and_then(|t| self.own_rate_bps(t))
            .or_else(|| self.own_rate_bps(i))
            .unwrap_or(REINJECT_DEFAULT_BPS);
        for plain in self.reinjection.start(now, i, packets, rate) {
            self.ring.recycle(plain);
        }
    }

    /// Where reinjected packets go: the fastest path in use other than the one that went
    /// dark.
    fn reinject_path(&self) -> Option<usize> {
        let dark = self.reinjection.dark()?;
        self.fastest_path(Some(dark)).filter(|&t| t != dark)
    }

    /// Whether reinjected packets wait for path `i`: the endpoint's data for it waits behind
    /// them (they are older; sent ahead of them, it would open a gap at the peer's
    /// resequencer that they must fill within its retransmit grace).
    /// It waits only while the path's queue is less than half full: held longer it would be
    /// refused, and a gap the copies fill late is better than data lost.
    fn reinjects_on(&self, i: usize) -> bool {
        self.reinjection.is_holding(self.last_now)
            && self.reinject_path() == Some(i)
            && self.endpoint.as_ref().is_some_and(|e| {
                let s = e.striper();
                s.queued_bytes(PathId(i as u8)) < s.queue_limit_bytes() / 2
            })
    }

    /// The peer found path `i` dark from the data it received ([`Self::check_dark`]): out of
    /// the sending half, as a path the peer's probes say it hears nothing on, and back with an
    /// answer to one of this end's probes. The peer's word is taken at once: it saw the
    /// path's data stop short and nothing come since.
    fn peer_finds_dark(&mut self, now: Instant, i: usize) {
        let Some(p) = self.paths.get(i) else {
            return;
        };
        if self.current.is_none() || !p.in_use() || p.disabled || p.deaf {
            return;
        }
        self.unheard_received += 1;
        self.mark_one_way(now, i);
    }

    /// Bytes of copies waiting to be reinjected ([`Reinjection`]).
    pub fn reinjection_bytes(&self) -> u64 {
        self.reinjection.bytes()
    }

    /// Whether `path` is down because this end found it dark from the data (a gap the
    /// resequencer gave up on behind it, or the only path in use going quiet while a backup
    /// waits): its traffic stopped short and nothing came since.
    pub fn path_found_dark(&self, path: PathId) -> bool {
        self.paths
            .get(path.index())
            .is_some_and(|p| p.found_dark && !p.up)
    }

    /// Whether `path` is out of the sending half because it works one way only: the peer hears
    /// nothing there, though its packets come in.
    pub fn path_is_one_way(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|p| p.deaf)
    }

    /// Whether `path` is settling: back while the backups carry the traffic, carrying
    /// nothing until it has been up for a second.
    pub fn path_is_settling(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|p| p.probation)
    }

    /// Whether `path` is a backup path in standby: up (its probes answered) but carrying
    /// nothing, because another path is up.
    pub fn path_is_standby(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|p| p.standby)
    }

    /// Probe ticks per probe of a path in standby.
    fn standby_probe_ticks(&self) -> u32 {
        let tick = self.cfg.probe_interval.as_nanos().max(1);
        let every = self.cfg.backup_probe_interval.as_nanos().div_ceil(tick);
        u32::try_from(every).unwrap_or(u32::MAX).max(1)
    }

    /// How often a path in standby is probed (a multiple of `probe_interval`).
    fn standby_probe_interval(&self) -> Duration {
        self.cfg.probe_interval * self.standby_probe_ticks()
    }

    /// Probe ticks per probe of every path while the session is idle; 1: never idle.
    fn idle_probe_ticks(&self) -> u32 {
        let tick = self.cfg.probe_interval.as_nanos().max(1);
        let every = self.cfg.idle_probe_interval.as_nanos().div_ceil(tick);
        u32::try_from(every).unwrap_or(u32::MAX).max(1)
    }

    /// Probe ticks per probe of a path now: in standby, while idle, or neither (1).
    fn probe_ticks_for(&self, standby: bool) -> u32 {
        let idle = if self.idle {
            self.idle_probe_ticks()
        } else {
            1
        };
        if standby {
            self.standby_probe_ticks().max(idle)
        } else {
            idle
        }
    }

    /// How often a path (in standby or not) is probed now if that is slower than
    /// `probe_interval` (in standby, or while the session is idle), else zero: what
    /// [`PathState::silent`] allows it more.
    fn slow_probe_for(&self, standby: bool) -> Duration {
        match self.probe_ticks_for(standby) {
            1 => Duration::ZERO,
            n => self.cfg.probe_interval * n,
        }
    }

    /// [`Session::slow_probe_for`] path `i`.
    fn slow_probe_interval(&self, i: usize) -> Duration {
        self.slow_probe_for(self.paths.get(i).is_some_and(|p| p.standby))
    }

    /// Whether the session is idle: established, and no data sent or received for
    /// [`IDLE_AFTER`]. An idle session probes every path every `idle_probe_interval` (1 s by
    /// default) instead of every `probe_interval`, and allows each two of those intervals more
    /// before it counts as silent: an idle bond of two paths sends 4 probes and answers a
    /// second instead of 40. The first data out of idle probes every path at once, and a path
    /// counts as silent only once that probe has had two round trips (and 200 ms) to be
    /// answered, as a backup's does when it wakes from standby.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// When data last passed: a packet to stripe, a data packet or a pTCP segment from the
    /// peer, a pTCP segment sealed (a proxy's loop keeps looking at a client that carries data,
    /// and at one that only probes when it does).
    pub fn last_data(&self) -> Instant {
        self.last_data
    }

    /// Data passed at `now` (a packet to stripe, a data packet or a pTCP segment from the
    /// peer, a pTCP segment sealed): out of idle, every path probed at once.
    fn note_data(&mut self, now: Instant) {
        self.last_data = now;
        if std::mem::take(&mut self.idle) {
            // Backups in standby keep their own pace, unless idle had slowed them below it.
            let slowed_standby = self.idle_probe_ticks() > self.standby_probe_ticks();
            for p in self
                .paths
                .iter_mut()
                .filter(|p| !p.disabled && (!p.standby || slowed_standby))
            {
                p.probe_ticks = 0;
                p.probe_due = true;
                p.woke_at = Some(now);
                p.wake_probe = p.up.then_some(now);
            }
        }
    }

    /// Backup paths ([`BondParams::backup_paths`]; module docs, "Backup paths"): in standby
    /// while a path that is not a backup is up, in the rotation while none is. Call whenever a
    /// path goes up, down, one way or is disabled.
    ///
    /// Into standby, a path leaves the sending half at once (what waits in its queue still
    /// goes) and the receiving half a little later: the peer switches when it hears the other
    /// path, up to a probe interval and a round trip after this end, and what it sent on the
    /// backup until then is still to come.
    fn update_standby(&mut self, now: Instant) {
        let backups = self.params.as_ref().map_or(0, |p| p.backup_paths);
        if backups == 0 {
            return;
        }
        let is_backup = |i: usize| is_backup(backups, i);
        // A line is settled once up from the bond's start, or up for STANDBY_HOLD and heard
        // lately as that second ends (a flapping line whose odd packet gets through does not
        // take the traffic off the backup each time, nor one that dies again just before,
        // which counts as down only after `dead_after`). Settled, it stays so until it goes
        // down: a lossy line's gaps do not wake the backups.
        // The pace of the paths' probes now (slower while the session is idle).
        let probe = self.cfg.probe_interval * self.probe_ticks_for(false);
        for p in &mut self.paths {
            if !p.up {
                p.settled = false;
            } else if !p.settled {
                let fresh = probe * 2 + p.srtt.unwrap_or(Duration::ZERO);
                p.settled = p.up_since.is_none_or(|t| {
                    now.saturating_duration_since(t) >= STANDBY_HOLD
                        && p.last_rx
                            .is_some_and(|r| now.saturating_duration_since(r) <= fresh)
                });
            }
        }
        let settled = |p: &PathState| p.up && p.settled;
        let other_up = self
            .paths
            .iter()
            .enumerate()
            .any(|(i, p)| !is_backup(i) && settled(p));
        // While the backups carry the traffic, a line that came back sends nothing until it
        // is settled: a flapping line would lose its share each time it died again.
        let backups_in_use = !other_up
            && self
                .paths
                .iter()
                .enumerate()
                .any(|(i, p)| is_backup(i) && p.up);
        let mut changed = false;
        for (i, p) in self.paths.iter_mut().enumerate() {
            let hold = !is_backup(i) && backups_in_use && p.up && !settled(p);
            if is_backup(i) || p.probation == hold {
                continue;
            }
            changed = true;
            p.probation = hold;
            if let (Some(e), true) = (&mut self.endpoint, p.up) {
                e.set_path_sending_held(PathId(i as u8), !hold);
            }
        }
        for (i, p) in self.paths.iter_mut().enumerate() {
            if !is_backup(i) || p.standby == other_up {
                continue;
            }
            changed = true;
            p.standby = other_up;
            p.probe_ticks = 0;
            let path = PathId(i as u8);
            if other_up {
                let rtt = p.srtt.unwrap_or(UNMEASURED_RTT_SLACK);
                p.receive_off_at = Some(now + probe * 2 + rtt * 2);
                if let Some(e) = &mut self.endpoint {
                    e.set_path_sending_held(path, false);
                }
            } else {
                p.receive_off_at = None;
                p.probe_due = true;
                p.woke_at = Some(now);
                if let Some(e) = &mut self.endpoint {
                    if p.up {
                        e.set_path_active(path, true);
                    } else if p.deaf {
                        e.set_path_receiving(path, true);
                    }
                }
            }
        }
        if changed {
            self.update_retransmit_grace();
        }
    }

    /// Handshakes from the peer's instance before the last one: no restart brings back an
    /// instance, so two peers hold the same key (two clients started with one config, a
    /// copied key file) and each handshake takes the session from the other.
    pub fn peer_instance_returns(&self) -> u64 {
        self.instance_returns
    }

    /// Handshakes from a new instance of the peer (it restarted) since this session began.
    pub fn peer_restarts(&self) -> u64 {
        self.peer_restarts
    }

    /// Whether a packet of `len` bytes would be accepted by [`Session::send`] now.
    pub fn can_send(&self, len: usize) -> bool {
        if self.qos.is_some() {
            // JoBS takes everything; its buffer decides what is dropped.
            return self.current.is_some();
        }
        self.current.is_some()
            && self
                .endpoint
                .as_ref()
                .is_some_and(|e| e.striper().can_send(len as u32))
    }

    /// Move what the shaper lets go from JoBS into the striper; whether anything went.
    fn pump_qos(&mut self, now: Instant) -> bool {
        let (Some(q), Some(e)) = (&mut self.qos, &mut self.endpoint) else {
            return false;
        };
        let mut moved = false;
        while let Some(item) = q.poll(now, |len| e.striper().can_send(len)) {
            moved = true;
            match item {
                Egress::Packet(p) => {
                    if e.send_packet(now, p).is_err() {
                        self.send_dropped += 1;
                    }
                    q.refund(e.take_compression_savings());
                }
                // A segment for a path taken out is dropped (pTCP resends it).
                Egress::Ptcp(o) => match self.paths.get(o.path.index()) {
                    Some(st) if !st.disabled => self.ptcp_tx.push_back(o),
                    _ => self.ptcp.unsent += 1,
                },
            }
        }
        self.qos_wake = q.poll_timeout(now);
        moved
    }

    /// Encrypt `plain` for `path` into `out`.
    fn seal(&mut self, path: usize, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        let len = plain.len();
        let keys = self.current.as_mut()?;
        let counter = *keys.counters.get(path)?;
        if counter >= outer::MAX_COUNTER {
            return None;
        }
        if out.len() < TRANSPORT_HEADER_LEN + len + TAG_LEN {
            return None;
        }
        keys.counters[path] += 1;
        let pid = PathId(path as u8);
        outer::emit_transport_header(out, pid, keys.remote_index, counter).ok()?;
        let n = keys
            .transport
            .write_message(
                outer::nonce(pid, counter),
                plain,
                &mut out[TRANSPORT_HEADER_LEN..],
            )
            .ok()?;
        let total = TRANSPORT_HEADER_LEN + n;
        let st = &mut self.paths[path];
        st.tx_packets += 1;
        st.tx_bytes += total as u64;
        st.tick_tx_bytes += total as u64;
        Some(total)
    }

    /// Seal arbitrary inner bytes as this end's transport datagram on `path`, under the
    /// current keys: what a hostile peer, authenticated but lying, can put on the wire. For
    /// the hostile-peer tests and the fuzz target only (feature `fuzzing`).
    #[cfg(feature = "fuzzing")]
    pub fn seal_inner(&mut self, path: PathId, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        if path.index() >= self.paths.len() {
            return None;
        }
        self.seal(path.index(), plain, out)
    }

    fn seal_repr(&mut self, path: usize, repr: Repr<'_>, out: &mut [u8]) -> Option<usize> {
        let mut inner = std::mem::take(&mut self.inner);
        let sealed = match repr.emit_into(&mut inner) {
            Ok(len) => self.seal(path, &inner[..len], out),
            Err(_) => None,
        };
        self.inner = inner;
        sealed
    }

    /// The next datagram for `path`, written into `out` (which should hold at least the path
    /// MTU); returns its length.
    pub fn poll_transmit(&mut self, now: Instant, path: PathId, out: &mut [u8]) -> Option<usize> {
        let i = path.index();
        if self.qos.is_some() && self.pump_qos(now) {
            self.pumped_in_poll = true;
        }
        if self.paths.get(i).is_some_and(|p| p.disabled) {
            return None;
        }
        if let Some(pos) = self.control.iter().position(|(p, _)| *p == i) {
            let (_, d) = self.control.remove(pos).expect("found");
            let n = d.len().min(out.len());
            out[..n].copy_from_slice(&d[..n]);
            if let Some(st) = self.paths.get_mut(i) {
                st.tx_packets += 1;
                st.tx_bytes += n as u64;
            }
            return Some(n);
        }
        if self.current.is_none() || i >= self.paths.len() {
            return None;
        }
        if let Some(mut p) = self.paths[i].acks.pop_front() {
            // The id and timestamp echo the probe; the rate is this end's own.
            p.rate_kbps = self.own_rate_kbps(i);
            p.unheard = false;
            return self.seal_repr(i, Repr::ProbeAck(p), out);
        }
        if self.paths[i].probe_due {
            let counter = self
                .current
                .as_ref()
                .and_then(|k| k.counters.get(i).copied())
                .unwrap_or(0);
            let st = &mut self.paths[i];
            st.probe_due = false;
            st.probe_id = st.probe_id.wrapping_add(1);
            let wait = st.probe_lost_after();
            while st
                .outstanding
                .front()
                .is_some_and(|&(_, sent, _)| now.saturating_duration_since(sent) > wait)
                || st.outstanding.len() >= 32
            {
                st.outstanding.pop_front();
                st.loss = 0.9 * st.loss + 0.1;
            }
            st.outstanding.push_back((st.probe_id, now, counter));
            st.unanswered_since.get_or_insert(now);
            st.unanswered += 1;
            let id = st.probe_id;
            // Heard nothing from the peer here: say so, and it stops sending into the void at
            // once rather than after its own wait for answers.
            let st = &self.paths[i];
            let unheard = !st.disabled
                && st.silent(now, self.cfg.dead_after, self.slow_probe_interval(i)) == Some(true);
            let probe = Probe {
                path,
                id,
                timestamp: now.as_nanos(),
                rate_kbps: self.own_rate_kbps(i),
                unheard,
            };
            return self.seal_repr(i, Repr::Probe(probe), out);
        }
        if !self.nacks.is_empty() && self.nack_path() == Some(i) {
            let n = self.nacks.pop_front().expect("not empty");
            self.nacks_sent += 1;
            return self.seal_repr(i, Repr::Nack(n), out);
        }
        if !self.unheard.is_empty() && self.nack_path() == Some(i) {
            let u = self.unheard.pop_front().expect("not empty");
            self.unheard_sent += 1;
            return self.seal_repr(i, Repr::Unheard(u), out);
        }
        if !self.abandons.is_empty() && self.nack_path() == Some(i) {
            let a = self.abandons.pop_front().expect("not empty");
            self.abandons_sent += 1;
            return self.seal_repr(i, Repr::Abandon(a), out);
        }
        if let Some(pos) = self.resend.iter().position(|&(p, _)| p == i) {
            let (_, plain) = self.resend.remove(pos).expect("found");
            let sealed = self.seal_recorded(i, &plain, out);
            self.ring.recycle(plain);
            if sealed.is_some() {
                self.retransmitted += 1;
            }
            return sealed;
        }
        if self.reinjection.is_due(now) && self.reinject_path() == Some(i) {
            if let Some(mut plain) = self.reinjection.pop(now) {
                if self.relabel(now, &mut plain, path) {
                    let sealed = self.seal_recorded(i, &plain, out);
                    self.ring.recycle(plain);
                    if sealed.is_some() {
                        self.reinjected += 1;
                        return sealed;
                    }
                } else {
                    self.ring.recycle(plain);
                }
            }
        }
        if let Some(pos) = self.ptcp_tx.iter().position(|o| o.path == path) {
            let o = self.ptcp_tx.remove(pos).expect("found");
            return self.seal_ptcp(now, path, o.conn, &o.segment, out);
        }
        let mut v = std::mem::take(&mut self.tx_plain);
        // The endpoint's feedback goes on a path in use: not onto a backup in standby (a
        // metered link) nor one gone down, where it would be lost.
        let in_use = self.paths[i].in_use();
        // What a dark path swallowed is older than what waits here: it goes first.
        let behind = self.reinjects_on(i);
        let got = self
            .endpoint
            .as_mut()
            .is_some_and(|e| match (in_use, behind) {
                (true, false) => e.poll_transmit(now, path, &mut v),
                (true, true) => e.poll_transmit_control(&mut v),
                (false, false) => e.poll_transmit_queued(now, path, &mut v),
                (false, true) => false,
            });
        let sealed = if got {
            self.seal_recorded(i, &v, out)
        } else {
            None
        };
        self.tx_plain = v;
        sealed
    }

    /// Seal an inner packet from the endpoint (or a resend) for `path`, keeping a copy of data
    /// packets for resending when the bond retransmits.
    fn seal_recorded(&mut self, path: usize, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        let counter = self
            .current
            .as_ref()
            .and_then(|k| k.counters.get(path).copied());
        let sealed = self.seal(path, plain, out)?;
        // Only numbered data: a packet of a `flow` or `fastest` class must keep to its path
        // and its order, and a resend on another path would break both.
        let numbered = plain
            .get(3)
            .is_some_and(|f| f & braid_wire::FLAG_HAS_SEQ != 0);
        if self.retransmit && numbered && plain.get(1) == Some(&u8::from(braid_wire::Kind::Data)) {
            if let Some(c) = counter {
                self.ring.record(path, c, plain);
            }
        }
        Some(sealed)
    }

    /// The fastest path in the rotation by base RTT, other than `avoid` if there is another.
    fn fastest_path(&self, avoid: Option<usize>) -> Option<usize> {
        let best = |skip: Option<usize>| {
            self.paths
                .iter()
                .enumerate()
                .filter(|&(i, p)| p.in_use() && Some(i) != skip)
                .min_by_key(|(_, p)| p.min_rtt.get().unwrap_or(Duration::MAX))
                .map(|(i, _)| i)
        };
        best(avoid).or_else(|| best(None))
    }

    /// Where NACKs go: the fastest path, so the resend starts as soon as possible.
    fn nack_path(&self) -> Option<usize> {
        self.fastest_path(None)
    }

    /// The peer lost datagrams on one of our paths. A short gap (random loss) is resent, once,
    /// on the fastest other path, relabelled for that path; the data of a long run
    /// (congestion) is abandoned: the peer is told its sequence numbers, so it stops waiting
    /// for them and TCP sees the loss at once.
    fn on_nack(&mut self, now: Instant, n: Nack) {
        if !self.retransmit {
            return;
        }
        let count = u64::from(n.count.min(MAX_NACK_COUNT));
        if n.count > MAX_REPAIRABLE_GAP {
            self.abandon(n.path, n.first, count);
            return;
        }
        let Some(target) = self.fastest_path(Some(n.path.index())) else {
            return;
        };
        for c in n.first..n.first.saturating_add(count) {
            let Some(mut plain) = self.ring.take(n.path.index(), c) else {
                continue;
            };
            if self.resend.len() < 4096 && self.relabel(now, &mut plain, PathId(target as u8)) {
                self.resend.push_back((target, plain));
            } else {
                self.ring.recycle(plain);
            }
        }
    }

    /// A data packet sent on one path, to go again on `target` (a resend, a reinjected copy):
    /// its path field says `target`, and PET counts its bytes on `target`'s time. False if it
    /// cannot be relabelled.
    fn relabel(&mut self, now: Instant, plain: &mut [u8], target: PathId) -> bool {
        if Packet::new_unchecked(&mut plain[..])
            .set_path(target)
            .is_err()
        {
            return false;
        }
        if let Some(e) = &mut self.endpoint {
            e.account_extra(now, target, plain.len() as u32);
        }
        true
    }

    /// Tell the peer the data sequence numbers that `path`'s transport counters
    /// `first..first + count` carried will not come, as runs of consecutive numbers.
    fn abandon(&mut self, path: PathId, first: u64, count: u64) {
        let mut seqs = Vec::new();
        for c in first..first.saturating_add(count) {
            let Some(plain) = self.ring.take(path.index(), c) else {
                continue;
            };
            if let Ok(Some(seq)) = Packet::new_checked(&plain[..]).and_then(|p| p.seq()) {
                seqs.push(seq);
            }
            self.ring.recycle(plain);
        }
        seqs.sort_unstable();
        let mut runs: Vec<Abandon> = Vec::new();
        for seq in seqs {
            match runs.last_mut() {
                Some(r) if r.first + u64::from(r.count) == seq => r.count += 1,
                _ => runs.push(Abandon {
                    path,
                    first: seq,
                    count: 1,
                }),
            }
        }
        for r in runs {
            if self.abandons.len() >= 256 {
                self.abandons.pop_front();
            }
            self.abandons.push_back(r);
        }
    }

    /// The probes' minimum RTTs of the paths that are up.
    fn up_min_rtts(&self) -> impl Iterator<Item = Duration> + '_ {
        self.paths
            .iter()
            .filter(|p| p.in_use())
            .filter_map(|p| p.min_rtt.get())
    }

    /// The receiver waits this long for a resend once a gap's loss is certain: the fastest
    /// path's RTT and a half, plus 5 ms (the NACK's trip, the resend's, and the peer's turn).
    fn update_retransmit_grace(&mut self) {
        if !self.retransmit {
            return;
        }
        let fastest = self.up_min_rtts().min();
        if let (Some(rtt), Some(e)) = (fastest, self.endpoint.as_mut()) {
            e.set_retransmit_grace(Some(rtt * 3 / 2 + Duration::from_millis(5)));
        }
    }

    /// Whether `poll_transmit(path)` would produce a datagram.
    pub fn has_transmit(&self, path: PathId) -> bool {
        let i = path.index();
        if self.control.iter().any(|(p, _)| *p == i) {
            return true;
        }
        self.current.is_some()
            && ((!(self.nacks.is_empty() && self.abandons.is_empty() && self.unheard.is_empty())
                && self.nack_path() == Some(i))
                || self.resend.iter().any(|&(p, _)| p == i)
                || (self.reinjection.is_due(self.last_now) && self.reinject_path() == Some(i))
                || self
                    .paths
                    .get(i)
                    .is_some_and(|p| !p.acks.is_empty() || p.probe_due)
                || self.endpoint.as_ref().is_some_and(|e| {
                    let in_use = self.paths.get(i).is_some_and(PathState::in_use);
                    match (in_use, self.reinjects_on(i)) {
                        (true, false) => e.has_transmit(path),
                        (true, true) => e.has_control(),
                        (false, false) => e.has_queued(path),
                        (false, true) => false,
                    }
                }))
    }

    /// The next IP packet for the application, in order. Hand the buffer back with
    /// [`Session::recycle`] once done with it, and the session reuses it for a later packet.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Vec<u8>> {
        let e = self.endpoint.as_mut()?;
        let delivered = e.poll_deliver(now);
        while let Some(stall) = self.endpoint.as_mut().and_then(Endpoint::take_stall) {
            self.on_stall(stall);
        }
        delivered
    }

    /// Give back a buffer [`Session::poll_deliver`] returned, for reuse (optional).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if let Some(e) = &mut self.endpoint {
            e.recycle(buf);
        }
    }

    /// When [`Session::handle_timeout`] should next be called: `None` for a server's session
    /// that has never had its client ([`Session::is_dormant`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_dormant() {
            return None;
        }
        let mut t = self.next_tick;
        if let Some(e) = self.endpoint.as_ref().and_then(|e| e.poll_timeout()) {
            t = t.min(e);
        }
        if let Some(q) = self.qos_wake {
            t = t.min(q);
        }
        if let Some(d) = self.paths.iter().filter_map(|p| p.dark_at).min() {
            t = t.min(d);
        }
        if let Some((_, d)) = self.sole_line_dark_at() {
            t = t.min(d);
        }
        // Only while a path can take the copies (none can: they wait for one, or expire at
        // the next tick).
        if let Some(r) = self.reinjection.poll_timeout() {
            if self.reinject_path().is_some() {
                t = t.min(r.max(self.last_now));
            }
        }
        // A pump while another path was polled let packets or segments go for a path the
        // driver may have polled already in its turn: call again at once. (Only after a pump
        // that moved something, which handle_timeout clears: whatever has_transmit says, this
        // asks for one more turn per pump, never for turns without end.)
        let left = |p: usize| self.has_transmit(PathId(p as u8));
        if self.current.is_some()
            && (!self.ptcp_tx.is_empty() || self.pumped_in_poll && (0..self.paths.len()).any(left))
        {
            t = t.min(self.last_now);
        }
        Some(t)
    }

    /// A server's session that has never had its client: no keys, no bond, nothing queued,
    /// nothing measured. It has nothing to time until the client's first handshake, which
    /// comes as a datagram, so a proxy's clients that are not connected cost it nothing
    /// between datagrams (its loop looks at a client when its timers are due).
    pub fn is_dormant(&self) -> bool {
        self.cfg.role == Role::Responder
            && self.current.is_none()
            && self.previous.is_none()
            && self.endpoint.is_none()
            && self.qos_wake.is_none()
            && self
                .paths
                .iter()
                .all(|p| p.tx_bps == 0.0 && p.rx_bps == 0.0)
    }

    /// Timers: probes, dead paths, handshake retries, rekeys, key expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        self.pumped_in_poll = false;
        if let Some((i, at)) = self.sole_line_dark_at().filter(|&(_, at)| now >= at) {
            self.paths[i].dark_at = Some(at);
        }
        self.check_dark(now);
        for plain in self.reinjection.expire(now) {
            self.ring.recycle(plain);
        }
        if self.qos.is_some() {
            self.pump_qos(now);
        }
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.cfg.probe_interval;
        let interval = self.cfg.probe_interval.as_secs_f64().max(1e-6);
        let established = self.current.is_some();
        // Idle from IDLE_AFTER without data: every path probed every idle_probe_interval.
        self.idle = established
            && self.idle_probe_ticks() > 1
            && now.saturating_duration_since(self.last_data) >= IDLE_AFTER;
        let every = [self.probe_ticks_for(false), self.probe_ticks_for(true)];
        let slow = [self.slow_probe_for(false), self.slow_probe_for(true)];
        let (idle, standby_every) = (self.idle, self.standby_probe_ticks());
        let mut one_way = Vec::new();
        let mut tell_again = Vec::new();
        for (i, p) in self.paths.iter_mut().enumerate() {
            if p.found_dark && !p.up && p.notices_left > 0 {
                p.notices_left -= 1;
                tell_again.push(i);
            }
            p.tx_bps = 0.7 * p.tx_bps + 0.3 * (p.tick_tx_bytes as f64 * 8.0 / interval);
            p.rx_bps = 0.7 * p.rx_bps + 0.3 * (p.tick_rx_bytes as f64 * 8.0 / interval);
            p.tick_tx_bytes = 0;
            p.tick_rx_bytes = 0;
            if established {
                // A backup in standby: a probe every backup_probe_interval; every path while
                // idle: every idle_probe_interval; else every tick. While idle, a probe
                // unanswered after three round trips (at least 300 ms) is followed by probes at
                // the pace the path would have without idle until one is answered: on a lossy
                // path, a few lost slow probes would otherwise look like a path that died or
                // works one way.
                let unanswered = p
                    .unanswered_since
                    .is_some_and(|t| now.saturating_duration_since(t) > p.probe_lost_after());
                let pace = match (idle && unanswered, p.standby) {
                    (true, true) => standby_every,
                    (true, false) => 1,
                    (false, standby) => every[usize::from(standby)],
                };
                p.probe_ticks += 1;
                if p.probe_ticks >= pace {
                    p.probe_ticks = 0;
                    p.probe_due = true;
                }
                // Woken from idle, and no probe sent since answered within two round trips.
                if let Some(w) = p.wake_probe {
                    if !p.up || p.deaf || p.disabled {
                        p.wake_probe = None;
                    } else if now.saturating_duration_since(w) > p.wake_wait() {
                        one_way.push(i);
                    }
                }
            }
            if p.receive_off_at.is_some_and(|t| now >= t) {
                p.receive_off_at = None;
                if p.standby {
                    if let Some(e) = &mut self.endpoint {
                        e.set_path_receiving(PathId(i as u8), false);
                    }
                }
            }
            // A path never heard from counts as silent.
            let silent =
                p.silent(now, self.cfg.dead_after, slow[usize::from(p.standby)]) != Some(false);
            // One way only: the peer's packets come in, but this end's probes have gone
            // unanswered for longer than any RTT the path has shown (a route that sends this
            // end's datagrams elsewhere, an upstream that died). Everything sent on it would
            // be lost while the peer's traffic kept it up.
            // The wait allows a round trip that suddenly grows by seconds (a bloated uplink)
            // before the RTT estimate has seen it, and at least ONE_WAY_PROBES probes.
            let deaf_after = self.cfg.dead_after
                + p.srtt
                    .map_or(ONE_WAY_SLACK * 2, |r| (r * 4).max(ONE_WAY_SLACK));
            let deaf = p.unanswered >= ONE_WAY_PROBES
                && p.unanswered_since
                    .is_some_and(|t| now.saturating_duration_since(t) > deaf_after);
            if established && p.up && (silent || deaf) && !p.disabled {
                p.up = false;
                p.deaf = !silent;
                p.down_events += 1;
                if let Some(e) = &mut self.endpoint {
                    if silent {
                        e.set_path_active(PathId(i as u8), false);
                    } else {
                        // What the peer still sends on it is received as before.
                        e.set_path_sending(PathId(i as u8), false);
                    }
                }
            } else if p.deaf && silent {
                // The peer's packets stopped too: out at both halves, and back with the next
                // packet heard, as any silent path.
                p.deaf = false;
                if let Some(e) = &mut self.endpoint {
                    e.set_path_active(PathId(i as u8), false);
                }
            }
        }
        for i in tell_again {
            self.queue_unheard(i);
        }
        for i in one_way {
            if self.paths[i].up {
                self.mark_one_way(now, i);
            } else {
                self.paths[i].wake_probe = None;
            }
        }
        self.update_standby(now);
        self.update_qos_rate(now);
        self.update_release_rate();
        if let Some(prev) = &self.previous {
            if prev
                .retired_at
                .is_some_and(|t| now >= t + self.cfg.keep_previous_keys)
            {
                self.previous = None;
            }
        }
        if self.cfg.role == Role::Initiator {
            let retry = self
                .pending
                .as_ref()
                .is_some_and(|p| now >= p.sent_at + self.cfg.handshake_retry);
            let rekey = self.pending.is_none()
                && self
                    .current
                    .as_ref()
                    .is_none_or(|k| now >= k.created + self.cfg.rekey_after);
            // Every path silent: the server may have restarted and lost the keys; handshake
            // again now rather than at the next rekey.
            let all_dark = self.pending.is_none()
                && self.current.is_some()
                && self.paths.iter().any(|p| !p.disabled)
                && self.paths.iter().all(|p| !p.up && !p.deaf);
            if retry || rekey || all_dark {
                if let Some(p) = &self.pending {
                    // After a cookie reply, the same path (its source has the cookie).
                    self.next_handshake_path = p.path + usize::from(!p.cookie_replied);
                }
                self.start_handshake(now);
            }
        }
    }

    /// What the resequencer holds, charged per entry as well as per byte
    /// (`Resequencer::held_charge`): for the hostile-peer tests' bound.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn resequencer_charge(&self) -> u64 {
        self.endpoint
            .as_ref()
            .map_or(0, |e| e.receiver().held_charge())
    }

    /// A snapshot for `braid status`.
    pub fn status(&self) -> SessionStatus {
        let e = self.endpoint.as_ref();
        let pet = e.and_then(|e| e.striper().pet());
        let paths = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let path = PathId(i as u8);
                let holds = e.and_then(|e| e.receiver().path_holds(path));
                PathStatus {
                    name: None,
                    state: match (p.disabled, p.up, p.deaf) {
                        (true, _, _) => "disabled",
                        (false, true, _) if p.standby => "standby",
                        (false, true, _) if p.probation => "settling",
                        (false, true, _) => "up",
                        (false, false, true) => "one-way",
                        (false, false, false) => "down",
                    },
                    backup: self
                        .params
                        .as_ref()
                        .is_some_and(|b| is_backup(b.backup_paths, i)),
                    rtt_ms: p.srtt.map(|d| d.as_secs_f64() * 1e3),
                    loss_pct: p.loss * 100.0,
                    tx_bps: p.tx_bps,
                    rx_bps: p.rx_bps,
                    tx_packets: p.tx_packets,
                    tx_bytes: p.tx_bytes,
                    rx_packets: p.rx_packets,
                    rx_bytes: p.rx_bytes,
                    credit_bytes: e.and_then(|e| {
                        let s = e.striper();
                        s.credit_limit(path)
                            .map(|l| l.saturating_sub(s.tx_bytes(path)))
                    }),
                    reorder_buffer_bytes: e.map_or(0, |e| e.receiver().buffered_bytes(path)),
                    holds: holds.map(|h| h.count),
                    hold_max_ms: holds.map(|h| h.max.as_secs_f64() * 1e3),
                    queued_bytes: e.map_or(0, |e| e.striper().queued_bytes(path)),
                    down_events: p.down_events,
                    stalls: p.stalls,
                    pet_estimate_bps: pet.and_then(|t| t.estimate_bps(path)),
                    pet_pair_bps: pet.and_then(|t| t.pair_estimate_bps(path)),
                    pet_delivery_bps: pet.and_then(|t| t.delivery_cap_bps(path)),
                    pet_delay_ms: pet
                        .and_then(|t| t.delay(path))
                        .map(|d| d.as_secs_f64() * 1e3),
                    pet_active: pet.map(|t| t.is_active(path)),
                    pet_policed: pet.map(|t| t.policed(path, self.last_now)),
                }
            })
            .collect();
        let rx = e.map(|e| e.receiver().stats().clone()).unwrap_or_default();
        SessionStatus {
            role: self.cfg.role,
            established: self.current.is_some(),
            idle: self.idle,
            handshakes: self.handshakes,
            cookie_replies: self.cookie_replies,
            peer_restarts: self.peer_restarts,
            paths,
            delivered_packets: rx.delivered,
            lost_packets: rx.lost,
            receiver_dropped: rx.stale_dropped + rx.invalid_dropped + rx.overflow_dropped,
            delivered_early: rx.delivered_early,
            resync: [
                rx.marker_skips,
                rx.hold_skips,
                rx.forced_skips,
                rx.late_deliveries,
            ],
            send_dropped: self.send_dropped,
            nacks_sent: self.nacks_sent,
            retransmitted_packets: self.retransmitted,
            reinjected_packets: self.reinjected,
            abandons_sent: self.abandons_sent,
            unheard_sent: self.unheard_sent,
            unheard_received: self.unheard_received,
            duplicated_packets: e.map_or(0, |e| e.striper().stats().duplicates),
            abandoned_packets: rx.abandoned,
            policy_packets: e.map_or(0, |e| e.stats().policy_packets),
            tcp_retransmits: e.map_or(0, |e| e.stats().tcp_retransmits),
            compression: e.and_then(|e| e.compress_stats()),
            policy_no_path: e.map_or(0, |e| e.stats().policy_no_path),
            classes: self
                .qos
                .as_ref()
                .map(|q| q.report(self.last_now))
                .unwrap_or_default(),
            dropped: ALL_REASONS
                .iter()
                .map(|&r| (r, self.dropped[drop_index(r)]))
                .filter(|&(_, n)| n > 0)
                .collect(),
            release_rate_bps: (self.release_rate_bps > 0).then_some(self.release_rate_bps),
            shaping_rate_bps: self.qos.as_ref().map(QosShaper::rate_bps),
            pet: e.and_then(|e| {
                let p = e.striper().pet()?.stats();
                let s = e.stats();
                Some(PetStatus {
                    sig_acks_sent: s.sig_acks_sent,
                    sig_acks_received: s.sig_acks_received,
                    sig_acks_dropped: s.sig_acks_dropped,
                    pairs: p.pairs,
                    samples: p.samples,
                    delivery_samples: p.delivery_samples,
                    overload_samples: p.overload_samples,
                    spaced_pairs: p.spaced_pairs,
                    singles: p.singles,
                    probes: p.probes,
                    startup_pairs: p.startup_pairs,
                    padding_pairs: p.padding_pairs,
                    padding_bytes: p.padding_bytes,
                    blackouts: p.blackouts,
                    unknown_feedback: p.unknown_feedback,
                    records_evicted: p.records_evicted,
                    extra: p.extra,
                })
            }),
            ptcp: (self.ptcp != PtcpCounters::default()).then_some(self.ptcp),
        }
    }
}

/// The static key of the initiator of a handshake initiation, read with this end's
/// `private_key`; `None` if `datagram` is not an initiation or does not decrypt. A server with
/// several clients (the proxy role) uses it to find the session an initiation is for; the
/// session then checks it again, timestamp and all. Costs two Diffie-Hellman operations.
pub fn initiator_key(private_key: &PrivateKey, datagram: &[u8]) -> Option<PublicKey> {
    let Ok(Outer::HandshakeInit {
        path,
        sender_index,
        noise,
        ..
    }) = Outer::parse(datagram)
    else {
        return None;
    };
    // Reading message 1 draws no randomness: any seed will do.
    let prologue = prologue(path, sender_index);
    let mut state = snow::Builder::with_resolver(
        PATTERN.parse().expect("valid Noise pattern"),
        Box::new(SeededResolver::new([0; 32])),
    )
    .local_private_key(&private_key.0)
    .and_then(|b| b.prologue(&prologue))
    .and_then(|b| b.build_responder())
    .ok()?;
    let mut payload = vec![0u8; 1024];
    state.read_message(noise, &mut payload).ok()?;
    let key: [u8; 32] = state.get_remote_static()?.try_into().ok()?;
    Some(PublicKey(key))
}

/// What a handshake response carries: the tunnel addresses handed to the initiator and what
/// the responder offers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Response {
    /// The responder's instance (`Session::instance`).
    instance: u64,
    addresses: Vec<(IpAddr, u8)>,
    accepts_tcp: bool,
}

/// Record tag of the responder's feature flags (after the addresses; absent: no features).
const FEATURES: u8 = 0x80;
/// Feature flag: the responder takes accelerated TCP.
const FEATURE_ACCEPTS_TCP: u8 = 0x01;

/// Encode a handshake response: the responder's instance (8 bytes); per handed address its IP
/// version (4 or 6), its 4 or 16 bytes and its prefix length; then, if the responder offers
/// anything, [`FEATURES`] and a flags byte. Only the instance: no addresses, no features.
fn encode_response(r: &Response) -> Vec<u8> {
    let mut out = r.instance.to_be_bytes().to_vec();
    for (a, prefix) in &r.addresses {
        match a {
            IpAddr::V4(v4) => {
                out.push(4);
                out.extend(v4.octets());
            }
            IpAddr::V6(v6) => {
                out.push(6);
                out.extend(v6.octets());
            }
        }
        out.push(*prefix);
    }
    if r.accepts_tcp {
        out.extend([FEATURES, FEATURE_ACCEPTS_TCP]);
    }
    out
}

/// The inverse of [`encode_response`]; `None` for anything malformed (a wrong record tag, a
/// truncated address, a prefix longer than the address, unknown feature bits, anything after
/// the features).
fn decode_response(bytes: &[u8]) -> Option<Response> {
    let (instance, mut bytes) = bytes.split_first_chunk::<8>()?;
    let mut out = Response {
        instance: u64::from_be_bytes(*instance),
        ..Response::default()
    };
    while let Some((&version, rest)) = bytes.split_first() {
        let (addr, bits, rest): (IpAddr, u8, &[u8]) = match version {
            4 => {
                let (a, r) = rest.split_first_chunk::<4>()?;
                ((*a).into(), 32, r)
            }
            6 => {
                let (a, r) = rest.split_first_chunk::<16>()?;
                ((*a).into(), 128, r)
            }
            FEATURES => {
                let [flags] = rest else { return None };
                if flags & !FEATURE_ACCEPTS_TCP != 0 {
                    return None;
                }
                out.accepts_tcp = flags & FEATURE_ACCEPTS_TCP != 0;
                return Some(out);
            }
            _ => return None,
        };
        let (&prefix, rest) = rest.split_first()?;
        // A short prefix would route much of the client's traffic into the tunnel.
        let shortest = if bits == 32 {
            MIN_HANDED_PREFIX_V4
        } else {
            MIN_HANDED_PREFIX_V6
        };
        if prefix > bits || prefix < shortest || out.addresses.len() >= MAX_HANDED_ADDRESSES {
            return None;
        }
        out.addresses.push((addr, prefix));
        bytes = rest;
    }
    Some(out)
}

/// The most addresses a handshake response hands over (they must fit one Noise message).
pub const MAX_HANDED_ADDRESSES: usize = 32;
/// The shortest prefix of a handed IPv4 address: a shorter one would put a route to much of
/// the Internet into the tunnel on the client.
pub const MIN_HANDED_PREFIX_V4: u8 = 8;
/// The shortest prefix of a handed IPv6 address.
pub const MIN_HANDED_PREFIX_V6: u8 = 16;

/// The Noise prologue of a handshake: the protocol label, plus the initiation's cleartext header
/// fields (path and the initiator's index), so tampering with them makes the handshake fail.
fn prologue(path: PathId, initiator_index: u32) -> Vec<u8> {
    let mut p = PROLOGUE.to_vec();
    p.push(path.0);
    p.extend(initiator_index.to_be_bytes());
    p
}

const ALL_REASONS: [DropReason; DROP_REASONS] = [
    DropReason::Malformed,
    DropReason::WrongPath,
    DropReason::UnexpectedHandshake,
    DropReason::BadHandshake,
    DropReason::UnknownPeer,
    DropReason::StaleInitiation,
    DropReason::BadParams,
    DropReason::UnknownIndex,
    DropReason::Replayed,
    DropReason::DecryptFailed,
    DropReason::BadInner,
    DropReason::BadMac,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_chatter_is_told_from_data() {
        let v6 = |src: [u8; 2], dst: [u8; 2]| {
            let mut p = vec![0u8; 48];
            p[0] = 0x60;
            p[8..10].copy_from_slice(&src);
            p[24..26].copy_from_slice(&dst);
            p[39] = 1;
            p
        };
        let v4 = |src: [u8; 4], dst: [u8; 4]| {
            let mut p = vec![0u8; 28];
            p[0] = 0x45;
            p[12..16].copy_from_slice(&src);
            p[16..20].copy_from_slice(&dst);
            p
        };
        // A router solicitation (fe80:: to ff02::2), an MLD report (:: to ff02::16).
        assert!(is_link_chatter(&v6([0xfe, 0x80], [0xff, 0x02])));
        let mut mld = v6([0, 0], [0xff, 0x02]);
        mld[8..24].fill(0);
        assert!(is_link_chatter(&mld));
        assert!(is_link_chatter(&v4([10, 77, 0, 2], [224, 0, 0, 5])));
        // Data: link-local unicast (a routing session over fe80::, 169.254.x.x addressing),
        // global unicast, site-wide multicast, a compressed header, a short packet.
        assert!(!is_link_chatter(&v6([0xfe, 0x80], [0xfe, 0x80])));
        assert!(!is_link_chatter(&v4([169, 254, 1, 1], [169, 254, 1, 2])));
        assert!(!is_link_chatter(&v6([0xfd, 0x77], [0xfd, 0x77])));
        assert!(!is_link_chatter(&v6([0xfd, 0x77], [0xff, 0x05])));
        assert!(!is_link_chatter(&v4([10, 77, 0, 2], [10, 77, 0, 1])));
        assert!(!is_link_chatter(&v4([10, 77, 0, 2], [224, 0, 1, 1])));
        assert!(!is_link_chatter(&[0xc0, 1, 2, 3]));
        assert!(!is_link_chatter(&[0x45, 0, 0]));
    }

    /// A server's sessions draw receiver indices in disjoint spaces: the tag in the low bits,
    /// random above it.
    #[test]
    fn receiver_indices_carry_the_sessions_tag() {
        let k = PrivateKey::from_random([1; 32]);
        let peer = PrivateKey::from_random([2; 32]).public_key();
        let mut cfg = SessionConfig::new(Role::Responder, k, peer, None);
        cfg.index_tag = (5, 4);
        let mut s = Session::new(cfg, Instant::ZERO, [3; 32], 0);
        let drawn: Vec<u32> = (0..64).map(|_| s.random_index()).collect();
        assert!(drawn.iter().all(|i| i & 0xf == 5), "{drawn:x?}");
        assert!(drawn.iter().any(|i| i >> 4 != drawn[0] >> 4));
        // Untagged: any index.
        let k = PrivateKey::from_random([1; 32]);
        let cfg = SessionConfig::new(Role::Responder, k, peer, None);
        let mut s = Session::new(cfg, Instant::ZERO, [3; 32], 0);
        assert!((0..64).any(|_| s.random_index() & 0xf != 5));
    }

    /// An initiation from the configured peer, authenticated, whose payload is too short for a
    /// timestamp, an instance and bond parameters: refused, never a panic (the peer may be a
    /// proxy's client, and a panic would take every client's tunnel down).
    #[test]
    fn a_short_authenticated_initiation_payload_is_refused() {
        let ck = PrivateKey::from_random([1; 32]);
        let sk = PrivateKey::from_random([2; 32]);
        for len in [0usize, 7, 8, 12, 15, 16, 17, 24, 40, 60] {
            let mut server = Session::new(
                SessionConfig::new(Role::Responder, sk.clone(), ck.public_key(), None),
                Instant::ZERO,
                [4; 32],
                0,
            );
            let (server_key, pro) = (sk.public_key(), prologue(PathId(0), 9));
            let mut state = snow::Builder::with_resolver(
                PATTERN.parse().unwrap(),
                Box::new(SeededResolver::new([5; 32])),
            )
            .local_private_key(&ck.0)
            .and_then(|b| b.remote_public_key(&server_key.0))
            .and_then(|b| b.prologue(&pro))
            .and_then(|b| b.build_initiator())
            .unwrap();
            let payload: Vec<u8> = (0..len).map(|i| if i < 8 { 0xFF } else { 0 }).collect();
            let mut msg = vec![0u8; 1024];
            let n = state.write_message(&payload, &mut msg).unwrap();
            let (d, _) =
                CookieKeys::new(&sk.public_key()).initiation(PathId(0), 9, &msg[..n], None);
            assert_eq!(
                server.handle_datagram(Instant::ZERO, None, &d),
                Err(DropReason::BadParams),
                "{len}-byte payload"
            );
        }
    }

    #[test]
    fn handshake_responses_round_trip_and_garbage_is_refused() {
        let a = vec![
            ("10.77.0.2".parse().unwrap(), 24),
            ("fd77::2".parse().unwrap(), 128),
        ];
        for accepts_tcp in [false, true] {
            let r = Response {
                instance: 0x0102_0304_0506_0708,
                addresses: a.clone(),
                accepts_tcp,
            };
            assert_eq!(decode_response(&encode_response(&r)), Some(r));
        }
        assert_eq!(decode_response(&[0; 8]), Some(Response::default()));
        assert_eq!(decode_response(&[0; 7]), None, "no instance");
        let tcp_only =
            decode_response(&[0, 0, 0, 0, 0, 0, 0, 9, FEATURES, FEATURE_ACCEPTS_TCP]).unwrap();
        assert!(tcp_only.accepts_tcp && tcp_only.addresses.is_empty());
        assert_eq!(tcp_only.instance, 9);
        for bad in [
            &[5u8, 1, 2, 3, 4, 24][..],
            &[4, 10, 77, 0, 2][..],
            &[4, 10, 77, 0, 2, 33][..],
            &[4, 10, 77, 0, 2, 0][..],
            &[6, 0, 0][..],
            // Features: missing flags, unknown bits, anything after them.
            &[FEATURES][..],
            &[FEATURES, 0x02][..],
            &[FEATURES, FEATURE_ACCEPTS_TCP, 4, 10, 0, 0, 1, 32][..],
        ] {
            let with_instance = [&[0u8; 8][..], bad].concat();
            assert_eq!(decode_response(&with_instance), None, "{bad:?}");
        }
        let many: Vec<u8> = [0u8; 8]
            .into_iter()
            .chain((0..=MAX_HANDED_ADDRESSES).flat_map(|_| [4, 10, 0, 0, 1, 32]))
            .collect();
        assert_eq!(decode_response(&many), None);
    }

    #[test]
    fn a_peers_rate_claim_is_kept_within_sixteen_times_the_configured_rate() {
        // PET's 10 Mbit/s guess: a claim of 4 Mbit/s stands.
        assert_eq!(peer_rate_bps(10_000_000, 4_000), Some(4_000_000));
        assert_eq!(peer_rate_bps(10_000_000, 0), None, "0 is no opinion");
        // 1 kbit/s would stall the release; u32::MAX kbit/s would turn pacing off.
        assert_eq!(peer_rate_bps(10_000_000, 1), Some(625_000));
        assert_eq!(peer_rate_bps(10_000_000, u32::MAX), Some(160_000_000));
        // Never below 100 kbit/s, whatever was configured.
        assert_eq!(peer_rate_bps(0, 1), Some(100_000));
        // No overflow at the extremes.
        assert!(peer_rate_bps(u64::MAX, u32::MAX).is_some());
    }
}

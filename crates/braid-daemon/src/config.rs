//! `braid.toml`: the daemon's configuration. Every key is documented in `docs/config.md`.
//!
//! Parsing is strict: unknown keys, wrong types and malformed values are errors that name the
//! line (from the TOML parser's spans) and the fix. Checks that span several keys name the keys.
//! Nothing starts half-configured: [`Config::load`] either returns a complete, checked
//! configuration or an error.

use braid_proto::resequence::ResequenceMode;
use braid_proto::scheduler::SchedulerKind;
use braid_proto::striper::MarkerPosition;
use braid_proto::time::Duration;
use braid_proto::MAX_PATHS;
use braid_session::{BondParams, PrivateKey, PublicKey, Role};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    // Not a `#[source]`: the message already says it, and error chains would say it twice.
    #[error("{}", read_message(path, error))]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type or a bad value (the message has the line).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with line, column and the offending text.
        message: String,
    },
    /// A check across keys failed.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// An address with a prefix length, such as `10.77.0.1/30` or `fd77::1/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("`{s}` is not an address with a prefix length, e.g. 10.77.0.1/30 or fd77::1/64")
        };
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let prefix: u8 = p.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!(
                "prefix /{prefix} is too long for {addr} (at most /{max})"
            ));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// The prefix with the host bits cleared (`10.77.0.2/30` -> `10.77.0.0/30`).
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Cidr {
            addr,
            prefix: self.prefix,
        }
    }

    /// Whether `ip` is inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn from_str<'de, D: Deserializer<'de>, T: FromStr<Err = E>, E: fmt::Display>(
    d: D,
) -> Result<T, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(de::Error::custom)
}

fn from_str_vec<'de, D: Deserializer<'de>, T: FromStr<Err = E>, E: fmt::Display>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    v.iter()
        .map(|s| s.parse().map_err(de::Error::custom))
        .collect()
}

fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(|_| {
        de::Error::custom(format!(
            "`{s}` is not an address and port, e.g. 203.0.113.5:7000 or [2001:db8::1]:7000"
        ))
    })
}

/// A path's `remote` as written: an address and port, or a host name and port (resolved when
/// the config is checked, and again at run time by the daemon).
#[derive(Debug)]
enum RawRemote {
    Addr(SocketAddr),
    Host(String, u16),
}

fn remote<'de, D: Deserializer<'de>>(d: D) -> Result<RawRemote, D::Error> {
    let s = String::deserialize(d)?;
    if let Ok(a) = s.parse() {
        return Ok(RawRemote::Addr(a));
    }
    let named = s
        .rsplit_once(':')
        .filter(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
        .filter(|&(host, _)| is_host_name(host));
    named
        .map(|(host, port)| RawRemote::Host(host.to_owned(), port))
        .ok_or_else(|| {
            de::Error::custom(format!(
                "`{s}` is not an address and port, nor a host name and port, e.g. 203.0.113.5:7000, [2001:db8::1]:7000 or vpn.example.net:7000"
            ))
        })
}

/// A host name: dot-separated labels of letters, digits, inner hyphens (RFC 1123) and
/// underscores (names in hosts files and container networks have them), 253 characters at
/// most, not all digits (that would be a malformed address). An internationalised name is
/// given in its ASCII form (`xn--...`).
fn is_host_name(s: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let s = s.strip_suffix('.').unwrap_or(s);
    (1..=253).contains(&s.len())
        && s.split('.').all(label)
        && !s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// The addresses `host` resolves to (the system's resolver: `/etc/hosts`, DNS), each with
/// `port`. It blocks: the daemon calls it from a thread of its own.
pub fn resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    (host, port).to_socket_addrs().map(Iterator::collect)
}

/// Which of the addresses a path's `remote` host name resolved to (`found`) to send to: the
/// one in use (`current`) while it is still among them, else the first of the IP version `v6`
/// asks for (`None`: IPv4 first, then IPv6). `None` if there is none of that version.
pub fn pick_remote(
    current: Option<SocketAddr>,
    found: &[SocketAddr],
    v6: Option<bool>,
) -> Option<SocketAddr> {
    let fits = |a: &&SocketAddr| v6.is_none_or(|v6| a.is_ipv6() == v6);
    if let Some(c) = current.filter(|c| found.contains(c) && fits(&c)) {
        return Some(c);
    }
    found
        .iter()
        .filter(fits)
        .min_by_key(|a| a.is_ipv6())
        .copied()
}

/// Any TOML number, integer or float: an integer too large for 64 bits is then a value out of
/// range, which the key's check names, not a type error.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct Number;
    impl de::Visitor<'_> for Number {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u128<E: de::Error>(self, v: u128) -> Result<f64, E> {
            Ok(v as f64)
        }
    }
    d.deserialize_any(Number).map(Some)
}

fn opt_socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    socket_addr(d).map(Some)
}

fn ip_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse()
        .map(Some)
        .map_err(|_| de::Error::custom(format!("`{s}` is not an IP address, e.g. 192.168.1.10")))
}

fn scheduler<'de, D: Deserializer<'de>>(d: D) -> Result<SchedulerKind, D::Error> {
    from_str::<D, SchedulerKind, _>(d)
}

fn resequence<'de, D: Deserializer<'de>>(d: D) -> Result<ResequenceMode, D::Error> {
    from_str::<D, ResequenceMode, _>(d)
}

fn position<'de, D: Deserializer<'de>>(d: D) -> Result<MarkerPosition, D::Error> {
    from_str::<D, MarkerPosition, _>(d)
}

fn role<'de, D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
    match String::deserialize(d)?.as_str() {
        "client" => Ok(Role::Initiator),
        "server" => Ok(Role::Responder),
        other => Err(de::Error::custom(format!(
            "role `{other}` is unknown: use \"client\" (the end with several paths, which starts the handshake) or \"server\""
        ))),
    }
}

/// The whole file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(deserialize_with = "role")]
    role: Role,
    private_key: Option<String>,
    private_key_file: Option<PathBuf>,
    peer_public_key: Option<String>,
    state_dir: Option<PathBuf>,
    #[serde(default, rename = "client")]
    clients: Vec<RawClient>,
    #[serde(default, deserialize_with = "opt_socket_addr")]
    listen: Option<SocketAddr>,
    interface: RawInterface,
    bond: Option<RawBond>,
    #[serde(default, rename = "path")]
    paths: Vec<RawPath>,
    #[serde(default, rename = "policy")]
    policies: Vec<RawPolicy>,
    #[serde(default)]
    liveness: RawLiveness,
    #[serde(default)]
    control: RawControl,
    qos: Option<braid_qos::QosConfig>,
    tcp: Option<RawTcp>,
}

/// The `[tcp]` table: TCP acceleration over pTCP.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTcp {
    #[serde(default)]
    accelerate: bool,
    listen_port: Option<u16>,
    congestion: Option<String>,
    transparent: Option<bool>,
    memory_mib: Option<u64>,
    total_memory_mib: Option<u64>,
}

/// The port a client's redirected TCP lands on unless `[tcp] listen_port` says otherwise.
pub const DEFAULT_TCP_LISTEN_PORT: u16 = 7199;

/// `[tcp]`: TCP acceleration. A client redirects TCP routed into the tunnel to a local
/// listener and carries each connection over its own pTCP connection in the session; a server
/// accepts those and connects onward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Client: the local port the nftables `redirect` targets.
    pub listen_port: u16,
    /// The congestion control of this end's micro-flows: what it sends (`[tcp] congestion`,
    /// default BBR).
    pub congestion: braid_ptcp::CongestionAlgorithm,
    /// Server: connect onward from the client's own address (`[tcp] transparent`, default
    /// on), so the destination sees the client as it would through the striped tunnel.
    pub transparent: bool,
    /// What one session's accelerated connections may commit in each direction, in bytes
    /// (`[tcp] memory_mib`, default 256 MiB; `ptcp_table::TableOptions::memory_budget`).
    pub memory_budget: u64,
    /// Server: what the accelerated connections of all its clients together may commit in
    /// each direction, in bytes (`[tcp] total_memory_mib`, default 1 GiB;
    /// `ptcp_table::SharedBudget`). A client's is its one session's, `memory_budget`.
    pub total_memory_budget: u64,
}

/// A client's `[[policy]]` table: which paths a class may use, and how it is striped.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    name: Option<String>,
    dscp: Vec<u8>,
    paths: Option<Vec<String>>,
    #[serde(default)]
    striping: Striping,
    #[serde(default)]
    duplicate: bool,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Striping {
    #[default]
    Packet,
    Flow,
    Fastest,
}

/// A server's `[[client]]` table (the proxy role).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    name: Option<String>,
    public_key: String,
    #[serde(default, deserialize_with = "from_str_vec")]
    address: Vec<BareAddr>,
    #[serde(default, deserialize_with = "from_str_vec")]
    routes: Vec<Cidr>,
}

/// A `[[client]]` address: an address without a prefix length (the prefix is that of the
/// server's `interface.address` holding it).
#[derive(Debug, Clone, Copy)]
struct BareAddr(IpAddr);

impl FromStr for BareAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((a, _)) = s.split_once('/') {
            return Err(format!(
                "`{s}`: a [[client]] address takes no prefix length (it gets that of the server's interface.address holding it): write \"{}\"",
                a.trim()
            ));
        }
        s.trim()
            .parse()
            .map(BareAddr)
            .map_err(|_| format!("`{s}` is not an IP address, e.g. \"10.77.0.2\" or \"fd77::2\""))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    #[serde(default = "default_ifname")]
    name: String,
    #[serde(default, deserialize_with = "from_str_vec")]
    address: Vec<Cidr>,
    mtu: Option<u16>,
    #[serde(default, deserialize_with = "from_str_vec")]
    routes: Vec<Cidr>,
    #[serde(default = "default_offload")]
    offload: bool,
}

fn default_offload() -> bool {
    true
}

fn default_ifname() -> String {
    "braid0".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBond {
    #[serde(deserialize_with = "scheduler")]
    scheduler: SchedulerKind,
    #[serde(deserialize_with = "resequence")]
    resequence: ResequenceMode,
    marker_interval_rounds: Option<u32>,
    #[serde(deserialize_with = "position")]
    marker_position: MarkerPosition,
    hold_ms: u32,
    credit_buffer_kb: u64,
    queue_kb: u32,
    seed: u64,
    equalize_delay: bool,
    retransmit: bool,
    duplicate_dscp: Vec<u8>,
    release_pacing_pct: u32,
    backup_rtt_multiple: u8,
    adaptive: bool,
    shape_egress: Option<bool>,
    compress_headers: bool,
}

impl Default for RawBond {
    fn default() -> Self {
        RawBond {
            scheduler: SchedulerKind::Srr,
            resequence: ResequenceMode::Sequence,
            marker_interval_rounds: None,
            marker_position: MarkerPosition::End,
            hold_ms: 100,
            credit_buffer_kb: 0,
            queue_kb: 64,
            seed: 0,
            equalize_delay: true,
            retransmit: true,
            duplicate_dscp: Vec::new(),
            release_pacing_pct: DEFAULT_RELEASE_PACING_PCT,
            backup_rtt_multiple: 0,
            adaptive: false,
            shape_egress: None,
            compress_headers: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    name: Option<String>,
    #[serde(default, deserialize_with = "ip_addr")]
    local: Option<IpAddr>,
    interface: Option<String>,
    #[serde(deserialize_with = "remote")]
    remote: RawRemote,
    #[serde(default, deserialize_with = "number")]
    rate_mbit: Option<f64>,
    #[serde(default = "default_path_mtu")]
    mtu: u16,
    #[serde(default)]
    backup: bool,
}

/// The smallest `rate_mbit`: 1 kbit/s. Below it a rate rounds to a few bit/s, or to none.
pub const MIN_RATE_MBIT: f64 = 0.001;

/// The largest `rate_mbit`: 1 Tbit/s.
pub const MAX_RATE_MBIT: f64 = 1e6;

/// The `[bond]` keys a server may set: what each end decides for itself.
pub const SERVER_BOND_KEYS: [&str; 3] = ["duplicate_dscp", "release_pacing_pct", "shape_egress"];

/// The receiver's paced release, in percent of the bond's rate, by default (`[bond]
/// release_pacing_pct`). Measured on the lab's three paths with CUBIC: 12.34 Mbit/s paced at
/// 120%, 9.08 unpaced; with 1% loss on a path, 11.04 against 5.08 (docs/benchmarks.md).
pub const DEFAULT_RELEASE_PACING_PCT: u32 = 120;

/// The rate PET assumes for a path without `rate_mbit` until its first packet pairs are
/// measured (a few round trips): it only places the start-up pairs.
pub const PET_PRIOR_RATE_BPS: u64 = 10_000_000;

/// Markers every this many rounds by default when nothing needs them every round: in
/// `sequence` mode they only resynchronise the receiver's fast-path prediction, and one per
/// round costs about 100 bytes per path per round (2.7% of a 20 + 5 Mbit/s bond).
pub const SEQUENCE_MARKER_INTERVAL: u32 = 32;

/// Where a client keeps its handshake clock floor unless `state_dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/braid";

fn default_path_mtu() -> u16 {
    1500
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLiveness {
    probe_interval_ms: u64,
    dead_after_ms: u64,
    idle_probe_interval_ms: u64,
    rekey_after_s: u64,
}

impl Default for RawLiveness {
    fn default() -> Self {
        RawLiveness {
            probe_interval_ms: 100,
            dead_after_ms: 400,
            idle_probe_interval_ms: 1000,
            rekey_after_s: 120,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Option<PathBuf>,
    #[serde(default, deserialize_with = "opt_socket_addr")]
    prometheus: Option<SocketAddr>,
}

/// One path of a client.
#[derive(Clone, Debug, PartialEq)]
pub struct PathConfig {
    /// A name for `status` (defaults to `path<i>`).
    pub name: String,
    /// Local address to bind, if any.
    pub local: Option<IpAddr>,
    /// Interface to bind to (SO_BINDTODEVICE), if any.
    pub interface: Option<String>,
    /// The server's address for this path (a host name's, resolved when the config was read).
    pub remote: SocketAddr,
    /// The host name and port `remote` was given as, if it was a name: the daemon resolves it
    /// again at run time (a server on dynamic DNS).
    pub remote_host: Option<(String, u16)>,
    /// Rate in bit/s (sets the scheduler's quantum); with scheduler `pet` and no `rate_mbit`,
    /// [`PET_PRIOR_RATE_BPS`], a guess PET replaces with its measurement.
    pub rate_bps: u64,
    /// The path's MTU (IP packet size on the link).
    pub mtu: u16,
    /// A backup path: it carries nothing while another path is up
    /// (`BondParams::backup_paths`).
    pub backup: bool,
}

/// A peer this end talks to: a client's server, or one of a server's clients.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerConfig {
    /// A name for `status` (a `[[client]]`'s `name`; `server` or `client` otherwise).
    pub name: String,
    /// Its static public key.
    pub public_key: PublicKey,
    /// Server, `[[client]]`: the tunnel addresses handed to this client, each with the prefix
    /// of the server's interface address that contains it. Packets to them go to this client.
    pub addresses: Vec<Cidr>,
    /// Server, `[[client]]`: more prefixes behind this client (its LAN), routed to it.
    pub routes: Vec<Cidr>,
    /// `true` for the one peer of `peer_public_key`: every packet goes to it and it may send
    /// from any address. `false` for a `[[client]]`: only its `addresses` and `routes` are
    /// routed to it, and packets it sends from any other source are dropped.
    pub catch_all: bool,
}

/// The key on the line of `text` that holds byte `offset` (`hold_ms` for `hold_ms = -5`), if
/// that line starts with one.
fn key_at(text: &str, offset: usize) -> Option<&str> {
    let start = text.get(..offset)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let key = line.split_once('=')?.0.trim();
    (!key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
    .then_some(key)
}

/// The parser's message for a number an unsigned integer key cannot take (`invalid value:
/// integer `-5`, expected u32`, a fraction, or one too large), in plain words with the key's
/// unit and range.
fn plain_number(message: &str, key: Option<&str>) -> Option<String> {
    let (head, ty) = message.rsplit_once(", expected ")?;
    let max = match ty {
        "u8" => u64::from(u8::MAX),
        "u16" => u64::from(u16::MAX),
        "u32" => u64::from(u32::MAX),
        "u64" => u64::MAX,
        _ => return None,
    };
    if !(head.starts_with("invalid value: integer ")
        || head.starts_with("invalid type: integer ")
        || head.starts_with("invalid type: floating point "))
    {
        return None;
    }
    let value = head.split('`').nth(1)?;
    let unit = match key {
        Some(k) if k.ends_with("_ms") => " of milliseconds",
        Some(k) if k.ends_with("_s") => " of seconds",
        Some(k) if k.ends_with("_kb") => " of KiB",
        Some(k) if k.ends_with("_pct") => " of percent",
        Some(k) if k.ends_with("_rounds") => " of rounds",
        Some(k) if k.ends_with("mtu") => " of bytes",
        _ => "",
    };
    let what = key.map_or(format!("`{value}`"), |k| format!("{k} = {value}"));
    Some(format!(
        "{what}: must be a whole number{unit} from 0 to {max}"
    ))
}

/// What to do about the commonest TOML mistakes, from the parser's message.
fn parse_hint(message: &str) -> &'static str {
    let last = message.lines().last().unwrap_or_default();
    if last.starts_with("invalid type: map, expected a sequence") {
        "\n(a table that may appear several times takes double brackets: [[path]], [[client]], [[policy]], [[qos.class]])"
    } else if last.starts_with("invalid type: string") && last.ends_with("expected a sequence") {
        "\n(a list: put the value in brackets, e.g. routes = [\"192.168.50.0/24\"])"
    } else if last.starts_with("invalid type: string")
        && (last.ends_with("expected f64")
            || last.ends_with("expected a number")
            || last.contains("expected u")
            || last.contains("expected i"))
    {
        "\n(a number: write it without quotes)"
    } else if last == "missing field `role`" {
        "\n(every config starts with role = \"client\" or role = \"server\"; examples/client.toml and examples/server.toml are templates)"
    } else {
        ""
    }
}

/// Why a config file cannot be read, and what to do.
fn read_message(path: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::IsADirectory {
        return format!(
            "cannot read config file {path}: it is a directory: give the config file itself with -c, e.g. {}/client.toml",
            path.trim_end_matches('/')
        );
    }
    format!("cannot read config file {path}: {e}{}", read_hint(e))
}

/// What to do about a config file that cannot be read.
fn read_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            " (give the file with -c; examples/client.toml and examples/server.toml are templates)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (it holds a private key, so it is readable by its owner only: run as that user, or as root)"
        }
        _ => "",
    }
}

impl Config {
    /// The session settings this end uses with `peer`: role, keys, the bond and liveness.
    /// What only the tunnel uses (`[qos]`, duplication, paced release) the daemon adds.
    pub fn session_config(&self, peer: &PeerConfig) -> braid_session::SessionConfig {
        let mut s = braid_session::SessionConfig::new(
            self.role,
            self.private_key.clone(),
            peer.public_key,
            self.bond.clone(),
        );
        s.probe_interval = self.probe_interval;
        s.idle_probe_interval = self.idle_probe_interval;
        s.dead_after = self.dead_after;
        s.rekey_after = self.rekey_after;
        s
    }
}

impl PeerConfig {
    /// Whether `ip` is one of this peer's addresses or inside one of its routes.
    pub fn owns(&self, ip: IpAddr) -> bool {
        self.catch_all
            || self.addresses.iter().any(|c| c.addr == ip)
            || self.routes.iter().any(|c| c.contains(ip))
    }
}

/// A checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Client (initiator) or server (responder).
    pub role: Role,
    /// This end's key.
    pub private_key: PrivateKey,
    /// Who this end talks to: a client's one server; a server's one client (`peer_public_key`)
    /// or its `[[client]]` tables, in file order.
    pub peers: Vec<PeerConfig>,
    /// Server: the UDP address to listen on.
    pub listen: Option<SocketAddr>,
    /// TUN name.
    pub ifname: String,
    /// TUN addresses.
    pub addresses: Vec<Cidr>,
    /// TUN MTU: the client's is set or derived from its paths; a server's is set or `None`, and
    /// in any case the server adopts the client's from the handshake.
    pub mtu: Option<u16>,
    /// Whether `interface.mtu` was given (rather than derived).
    pub mtu_configured: bool,
    /// Routes through the TUN.
    pub routes: Vec<Cidr>,
    /// Ask for the TUN's offloads (TSO/USO super-packets, GRO-coalesced writes).
    pub offload: bool,
    /// Client: the paths.
    pub paths: Vec<PathConfig>,
    /// Client: the bond parameters (with `max_packet` = the TUN MTU).
    pub bond: Option<BondParams>,
    /// Probe interval.
    pub probe_interval: Duration,
    /// Dead-path timeout.
    pub dead_after: Duration,
    /// Probe interval while the session is idle (`SessionConfig::idle_probe_interval`).
    pub idle_probe_interval: Duration,
    /// Rekey interval.
    pub rekey_after: Duration,
    /// Control socket.
    pub control_socket: PathBuf,
    /// Where a client keeps its handshake clock floor (`client-<key>.clock`,
    /// [`crate::clock_floor`]).
    pub state_dir: PathBuf,
    /// Prometheus endpoint.
    pub prometheus: Option<SocketAddr>,
    /// Per-class egress service (`[qos]`, JoBS), checked.
    pub qos: Option<braid_qos::QosConfig>,
    /// `[bond] duplicate_dscp` as a mask (bit `d` for DSCP `d`): what this end sends twice.
    pub duplicate_dscp: u64,
    /// `[bond] release_pacing_pct`: this end's receiver releases at most this percentage of
    /// the bond's rate; 0: unpaced.
    pub release_pacing_pct: u32,
    /// `[tcp] accelerate = true`: TCP over pTCP; `None`: TCP rides the striped tunnel.
    pub tcp: Option<TcpConfig>,
    /// `[bond] shape_egress`: shape this end's egress as one class when there is no `[qos]`;
    /// `None`: when the bond runs `scheduler = "pet"`.
    pub shape_egress: Option<bool>,
    /// Files that hold this end's private key (the config itself with `private_key`, or
    /// `private_key_file`) and that users other than the owner may read: `braid up` warns.
    pub exposed_secrets: Vec<PathBuf>,
}

impl Config {
    /// Refuses a server's `listen` on port 0, for the commands that serve clients (`braid up`,
    /// also with `--check`, `braid recv`, `braid forward --target`): the system would pick a
    /// port, which no client's `remote` names. (Not in [`Config::parse`]: a config that only
    /// has to parse, as in the CLI's own tests of other mistakes, may leave the port to the
    /// system.) `path` names the file in the message.
    pub fn check_listen_port(&self, path: &Path) -> Result<(), ConfigError> {
        match self.listen {
            Some(l) if l.port() == 0 => Err(ConfigError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "listen = \"{l}\": port 0 would be a port the system picks, which no client's remote names: give the port the clients' paths send to, e.g. \"{}\"",
                    SocketAddr::new(l.ip(), 7000)
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Bytes braid adds to an IP packet on a path: outer IP + UDP + transport header + AEAD tag +
/// inner data header (+ sequence number).
pub fn overhead(ipv6: bool, with_seq: bool) -> u16 {
    let ip = if ipv6 { 40 } else { 20 };
    (ip + 8
        + braid_wire::outer::TRANSPORT_HEADER_LEN
        + braid_wire::outer::TAG_LEN
        + braid_wire::data_overhead(with_seq)) as u16
}

impl Config {
    /// Read, parse and check `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, true)
    }

    /// [`Config::load`] without resolving the paths' `remote` host names: for a command that
    /// only needs the interface and control socket (`braid status -c`, `braid path -c`), which
    /// must work when DNS does not. A named `remote` is the unspecified address of `local`'s
    /// IP version (IPv4 without one), with its port.
    pub fn load_offline(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, false)
    }

    fn load_with(path: &Path, resolve_names: bool) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            error: e,
        })?;
        Config::parse_with(&text, path, resolve_names)
    }

    /// Parse and check `text` (named `path` in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::parse_with(text, path, true)
    }

    /// [`Config::parse`], resolving the paths' `remote` host names if `resolve_names`.
    fn parse_with(text: &str, path: &Path, resolve_names: bool) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let mut message = e.to_string().trim_end().to_owned();
            // The parser's "expected u32" in plain words, in place of its last line.
            let key = e.span().and_then(|s| key_at(text, s.start));
            if let Some(plain) = plain_number(e.message().trim_end(), key) {
                if let Some(kept) = message.strip_suffix(e.message().trim_end()) {
                    message = format!("{kept}{plain}");
                }
            }
            let hint = parse_hint(&message);
            ConfigError::Parse {
                path: name.clone(),
                message: format!("{message}{hint}"),
            }
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            path: name.clone(),
            message,
        };
        // Who else may read the key: a file that group or others can read leaks it.
        let exposed = |f: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(f).is_ok_and(|m| m.permissions().mode() & 0o044 != 0)
        };
        let mut exposed_secrets = Vec::new();
        let private_key = match (&raw.private_key, &raw.private_key_file) {
            (Some(k), None) => {
                if exposed(path) {
                    exposed_secrets.push(path.to_path_buf());
                }
                PrivateKey::from_base64(k).map_err(|e| invalid(format!("private_key: {e}")))?
            }
            (None, Some(f)) => {
                let base = path.parent().unwrap_or(Path::new("."));
                let file = base.join(f);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    invalid(format!("private_key_file: cannot read {}: {e}", file.display()))
                })?;
                if exposed(&file) {
                    exposed_secrets.push(file.clone());
                }
                PrivateKey::from_base64(&text).map_err(|e| {
                    invalid(format!("private_key_file {}: {e}", file.display()))
                })?
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "both private_key and private_key_file are set: keep one".into(),
                ))
            }
            (None, None) => {
                return Err(invalid(
                    "no private key: set private_key = \"...\" or private_key_file = \"...\" (make one with `braid genkey`)".into(),
                ))
            }
        };
        let peers = peers(&raw, &private_key).map_err(invalid)?;
        let ifname = raw.interface.name.clone();
        if ifname.is_empty()
            || ifname.len() > 15
            || !ifname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(invalid(format!(
                "interface.name `{ifname}`: use 1 to 15 letters, digits, '-', '_' or '.'"
            )));
        }
        if raw.interface.address.is_empty() && raw.role == Role::Responder {
            return Err(invalid("interface.address is empty: give the tunnel at least one address, e.g. [\"10.77.0.1/30\"]".into()));
        }
        let l = &raw.liveness;
        if l.probe_interval_ms == 0 || l.dead_after_ms <= l.probe_interval_ms {
            return Err(invalid(format!(
                "liveness: dead_after_ms ({}) must be longer than probe_interval_ms ({}), which must be positive",
                l.dead_after_ms, l.probe_interval_ms
            )));
        }
        if l.idle_probe_interval_ms < l.probe_interval_ms {
            return Err(invalid(format!(
                "liveness: idle_probe_interval_ms ({}) must be at least probe_interval_ms ({}): give the same value to probe at one pace, idle or not",
                l.idle_probe_interval_ms, l.probe_interval_ms
            )));
        }
        if l.rekey_after_s == 0 {
            return Err(invalid("liveness.rekey_after_s must be positive".into()));
        }
        let mut paths = Vec::new();
        let mut bond = None;
        let mut mtu = raw.interface.mtu;
        if let Some(m) = mtu {
            if m < 576 {
                return Err(invalid(format!("interface.mtu = {m} is below 576")));
            }
        }
        let mut duplicate_dscp = 0u64;
        let shape_egress = raw.bond.as_ref().and_then(|b| b.shape_egress);
        let release_pacing_pct = raw
            .bond
            .as_ref()
            .map_or(DEFAULT_RELEASE_PACING_PCT, |b| b.release_pacing_pct);
        if release_pacing_pct != 0 && !(100..=1000).contains(&release_pacing_pct) {
            return Err(invalid(format!(
                "[bond] release_pacing_pct = {release_pacing_pct}: give 0 (no pacing) or 100 to 1000 percent of the bond's rate (below 100 the bond could not deliver what it carries)"
            )));
        }
        if let Some(b) = &raw.bond {
            for &d in &b.duplicate_dscp {
                if d > 63 {
                    return Err(invalid(format!(
                        "[bond] duplicate_dscp: {d} is not a DSCP value (0 to 63; EF is 46)"
                    )));
                }
                duplicate_dscp |= 1 << d;
            }
            if duplicate_dscp != 0
                && raw.role == Role::Initiator
                && b.resequence != ResequenceMode::Sequence
            {
                return Err(invalid(
                    "[bond] duplicate_dscp needs resequence = \"sequence\" (the copies are told apart by their sequence numbers)".into(),
                ));
            }
        }
        match raw.role {
            Role::Responder => {
                if !raw.policies.is_empty() {
                    return Err(invalid(
                        "[[policy]] tables are for role = \"client\": the client sends its policies in the handshake and both ends apply them; remove them here".into(),
                    ));
                }
                // A server's [bond] holds only what this end decides for itself: what it sends
                // twice, how fast its receiver releases and whether it shapes its egress. The
                // client chooses the rest.
                let table = toml::from_str::<toml::Table>(text).unwrap_or_default();
                let others: Vec<&str> = table
                    .get("bond")
                    .and_then(|b| b.as_table())
                    .into_iter()
                    .flat_map(|b| b.keys())
                    .map(String::as_str)
                    .filter(|k| !SERVER_BOND_KEYS.contains(k))
                    .collect();
                if !others.is_empty() {
                    return Err(invalid(format!(
                        "[bond] on a server may set only duplicate_dscp, release_pacing_pct and shape_egress (what this end sends twice, how fast its receiver releases, whether it shapes its egress): the client chooses the striping and sends it in the handshake; remove {} here",
                        others.join(", ")
                    )));
                }
                if raw.listen.is_none() {
                    return Err(invalid(
                        "role = \"server\" needs listen = \"ADDRESS:PORT\" (the UDP address clients reach)".into(),
                    ));
                }
                if !raw.paths.is_empty() {
                    return Err(invalid(
                        "[[path]] sections are for role = \"client\": a server learns the client's paths in the handshake; remove them".into(),
                    ));
                }
            }
            Role::Initiator => {
                if raw.listen.is_some() {
                    return Err(invalid(
                        "listen is for role = \"server\"; a client binds one socket per [[path]] (use local or interface there)".into(),
                    ));
                }
                if raw.paths.is_empty() || raw.paths.len() > MAX_PATHS {
                    return Err(invalid(format!(
                        "{} [[path]] sections: a client needs between 1 and {MAX_PATHS}",
                        raw.paths.len()
                    )));
                }
                // PET, or adaptive SRR, measures the rates: they may be left out.
                let pet = raw
                    .bond
                    .as_ref()
                    .is_some_and(|b| b.scheduler == SchedulerKind::Pet || b.adaptive);
                for (i, p) in raw.paths.iter().enumerate() {
                    let rate_bps = match p.rate_mbit {
                        Some(r) if (MIN_RATE_MBIT..=MAX_RATE_MBIT).contains(&r) => {
                            (r * 1e6).round() as u64
                        }
                        Some(r) => {
                            return Err(invalid(format!(
                                "path {i}: rate_mbit = {r}: give the path's rate in Mbit/s, from {MIN_RATE_MBIT} (1 kbit/s) to {MAX_RATE_MBIT} (1 Tbit/s); it sets the striping share"
                            )))
                        }
                        None if pet => PET_PRIOR_RATE_BPS,
                        None => {
                            return Err(invalid(format!(
                                "path {i}: rate_mbit is missing: give the path's rate in Mbit/s (it sets the striping share), or set [bond] scheduler = \"pet\" or adaptive = true, which measure the paths' rates"
                            )))
                        }
                    };
                    if p.mtu < 576 {
                        return Err(invalid(format!("path {i}: mtu = {} is below 576", p.mtu)));
                    }
                    let (shown, port) = match &p.remote {
                        RawRemote::Addr(a) => (a.to_string(), a.port()),
                        RawRemote::Host(host, port) => (format!("{host}:{port}"), *port),
                    };
                    if port == 0 {
                        return Err(invalid(format!(
                            "path {i}: remote = \"{shown}\": port 0 is no server's port: give the port of the server's `listen`, e.g. \"203.0.113.5:7000\""
                        )));
                    }
                    if let Some(dev) = &p.interface {
                        interface_name_ok(dev).map_err(|why| {
                            invalid(format!(
                                "path {i}: interface = {dev:?}: {why}: give the device's name as `ip link` shows it (e.g. \"wwan0\")"
                            ))
                        })?;
                    }
                    let want_v6 = p.local.map(|l| l.is_ipv6());
                    let (remote, remote_host) = match &p.remote {
                        RawRemote::Addr(a) => (*a, None),
                        RawRemote::Host(host, port) if !resolve_names => {
                            let ip = match want_v6 {
                                Some(true) => IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED),
                                _ => IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED),
                            };
                            (SocketAddr::new(ip, *port), Some((host.clone(), *port)))
                        }
                        RawRemote::Host(host, port) => {
                            let found = resolve(host, *port).map_err(|e| {
                                invalid(format!(
                                    "path {i}: remote `{host}:{port}`: cannot resolve {host} ({e}): check the name and this host's DNS, or give the server's address (e.g. 203.0.113.5:{port})"
                                ))
                            })?;
                            let a = pick_remote(None, &found, want_v6).ok_or_else(|| {
                                let listed = found
                                    .iter()
                                    .map(|a| a.ip().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ");
                                invalid(match want_v6 {
                                    Some(v6) => format!(
                                        "path {i}: remote `{host}:{port}` resolves to no {} address, the version of `local` (only {listed}): give a `local` of the other version, or the server's address",
                                        if v6 { "IPv6" } else { "IPv4" }
                                    ),
                                    None => format!(
                                        "path {i}: remote `{host}:{port}` resolves to no address: check the name and this host's DNS, or give the server's address (e.g. 203.0.113.5:{port})"
                                    ),
                                })
                            })?;
                            (a, Some((host.clone(), *port)))
                        }
                    };
                    if let Some(local) = p.local {
                        if local.is_ipv4() != remote.is_ipv4() {
                            return Err(invalid(format!(
                                "path {i}: local {local} and remote {remote} are of different IP versions"
                            )));
                        }
                    }
                    let name = p.name.clone().unwrap_or_else(|| format!("path{i}"));
                    if !braid_session::params::path_name_ok(&name) {
                        return Err(invalid(format!(
                            "path {i}: name `{name}`: give 1 to 32 letters, digits, '.', '_', ':' or '-' (`braid path up|down NAME`, the metrics and the server's log use it)"
                        )));
                    }
                    if paths.iter().any(|x: &PathConfig| x.name == name) {
                        return Err(invalid(format!(
                            "path {i}: another [[path]] is already named `{name}`: names must be unique"
                        )));
                    }
                    paths.push(PathConfig {
                        name,
                        local: p.local,
                        interface: p.interface.clone(),
                        remote,
                        remote_host,
                        rate_bps,
                        mtu: p.mtu,
                        backup: p.backup,
                    });
                }
                let b = raw.bond.unwrap_or_default();
                let with_seq = b.resequence == ResequenceMode::Sequence;
                let derived = paths
                    .iter()
                    .map(|p| p.mtu.saturating_sub(overhead(p.remote.is_ipv6(), with_seq)))
                    .min()
                    .unwrap_or(1280);
                match mtu {
                    Some(m) if m > derived => {
                        return Err(invalid(format!(
                            "interface.mtu = {m} is larger than the paths allow ({derived}: the smallest path mtu minus braid's overhead); lower it or remove it"
                        )))
                    }
                    None if derived < 576 => {
                        return Err(invalid(format!(
                            "the smallest path mtu leaves {derived} bytes for the tunnel, below 576: raise the paths' mtu"
                        )))
                    }
                    _ => {}
                }
                let tun_mtu = mtu.unwrap_or(derived);
                mtu = Some(tun_mtu);
                let mut params = BondParams {
                    scheduler: b.scheduler,
                    rates_bps: paths.iter().map(|p| p.rate_bps).collect(),
                    max_packet: u32::from(tun_mtu),
                    seed: b.seed,
                    resequence: b.resequence,
                    marker_interval_rounds: b.marker_interval_rounds.unwrap_or(
                        if b.resequence == ResequenceMode::Logical || b.credit_buffer_kb > 0 {
                            1
                        } else {
                            SEQUENCE_MARKER_INTERVAL
                        },
                    ),
                    marker_position: b.marker_position,
                    hold_ms: b.hold_ms,
                    credit_buffer_bytes: b
                        .credit_buffer_kb
                        .checked_mul(1024)
                        .ok_or_else(|| invalid("[bond] credit_buffer_kb is too large".into()))?,
                    queue_limit_bytes: b.queue_kb.saturating_mul(1024),
                    equalize_delay: b.equalize_delay,
                    retransmit: b.retransmit,
                    backup_rtt_multiple: match b.backup_rtt_multiple {
                        0..=braid_session::params::MAX_BACKUP_RTT_MULTIPLE => b.backup_rtt_multiple,
                        m => {
                            return Err(invalid(format!(
                                "[bond] backup_rtt_multiple = {m}: give 0 (off: hold_ms plus the paths' delay skew) or 1 to 16 times the largest path RTT"
                            )))
                        }
                    },
                    adaptive: b.adaptive,
                    compress_headers: b.compress_headers,
                    policies: policies(&raw.policies, &paths, b.resequence).map_err(&invalid)?,
                    backup_paths: backup_paths(&paths, b.resequence).map_err(&invalid)?,
                    path_names: Vec::new(),
                };
                // The paths' names go to the server for its status and logs, when one is not
                // the default `path<i>` (a server of an earlier release refuses the block) and
                // the handshake has the room.
                let names: Vec<String> = paths.iter().map(|p| p.name.clone()).collect();
                let named = names
                    .iter()
                    .enumerate()
                    .any(|(i, n)| *n != format!("path{i}"));
                if named {
                    params.path_names = names;
                    if params.encode().len() > braid_session::params::NAMES_BUDGET {
                        params.path_names.clear();
                    }
                }
                params
                    .validate()
                    .map_err(|e| invalid(format!("[bond]: {e}")))?;
                bond = Some(params);
            }
        }
        if raw.qos.is_some() && shape_egress == Some(false) {
            return Err(invalid(
                "[bond] shape_egress = false with a [qos] table: [qos] always shapes the egress (that is where its classes queue); remove one of them".into(),
            ));
        }
        if let Some(q) = &raw.qos {
            // The client checks against its bond's rate; a server learns the rate from the
            // client's handshake, so it checks against a nominal 10 Gbit/s.
            let bond_bps: u64 = paths.iter().map(|p| p.rate_bps).sum();
            q.jobs_config(if bond_bps > 0 {
                bond_bps
            } else {
                10_000_000_000
            })
            .and_then(|_| q.classifier())
            .map_err(|e| invalid(format!("{}: {}", e.key, e.message)))?;
        }
        let tcp = match &raw.tcp {
            Some(t) => {
                if raw.role == Role::Responder && t.listen_port.is_some() {
                    return Err(invalid(
                        "[tcp] listen_port: only a client listens for redirected TCP; remove it from the server's config".into(),
                    ));
                }
                if t.listen_port == Some(0) {
                    return Err(invalid(
                        "[tcp] listen_port = 0: give the local port (1-65535) the redirected TCP lands on, e.g. 7199, one no other program uses".into(),
                    ));
                }
                if !t.accelerate && t.listen_port.is_some() {
                    return Err(invalid(
                        "[tcp] listen_port without accelerate = true: add accelerate = true, or remove the [tcp] table".into(),
                    ));
                }
                if raw.role == Role::Initiator && t.transparent.is_some() {
                    return Err(invalid(
                        "[tcp] transparent: the server connects onward, so only a server's [tcp] decides whether it does so from the client's address; remove it from the client's config".into(),
                    ));
                }
                if !t.accelerate && t.transparent.is_some() {
                    return Err(invalid(
                        "[tcp] transparent without accelerate = true: add accelerate = true, or remove the [tcp] table".into(),
                    ));
                }
                if !t.accelerate && t.congestion.is_some() {
                    return Err(invalid(
                        "[tcp] congestion without accelerate = true: add accelerate = true, or remove the [tcp] table".into(),
                    ));
                }
                if raw.role == Role::Initiator && t.total_memory_mib.is_some() {
                    return Err(invalid(
                        "[tcp] total_memory_mib: only a server shares memory among its clients; a client's one session is bounded by memory_mib, so remove it from the client's config".into(),
                    ));
                }
                // A budget in MiB: `key`, its value, its default in bytes, what it bounds.
                let budget = |key: &str, value: Option<u64>, default: u64, what: &str| {
                    match value {
                        Some(_) if !t.accelerate => Err(invalid(format!(
                            "[tcp] {key} without accelerate = true: add accelerate = true, or remove the [tcp] table"
                        ))),
                        None => Ok(default),
                        Some(m @ 1..=1_048_576) => Ok(m << 20),
                        Some(m) => Err(invalid(format!(
                            "[tcp] {key} = {m}: give what {what} may hold each way in MiB, 1-1048576 (default {})",
                            default >> 20
                        ))),
                    }
                };
                let memory_budget = budget(
                    "memory_mib",
                    t.memory_mib,
                    crate::ptcp_table::DEFAULT_MEMORY_BUDGET,
                    "one session's accelerated connections",
                )?;
                // By default at least one client's own budget, so that raising `memory_mib`
                // alone is not undone by the total.
                let total_memory_budget = budget(
                    "total_memory_mib",
                    t.total_memory_mib,
                    crate::ptcp_table::DEFAULT_TOTAL_MEMORY_BUDGET.max(memory_budget),
                    "the accelerated connections of all clients together",
                )?;
                let congestion = match &t.congestion {
                    None => braid_ptcp::CongestionAlgorithm::Bbr,
                    Some(name) => name.parse().map_err(|_| {
                        invalid(format!(
                            "[tcp] congestion = {name:?}: give \"bbr\" (the default), \"cubic\" or \"newreno\""
                        ))
                    })?,
                };
                t.accelerate.then(|| TcpConfig {
                    listen_port: t.listen_port.unwrap_or(DEFAULT_TCP_LISTEN_PORT),
                    congestion,
                    transparent: t.transparent.unwrap_or(true),
                    memory_budget,
                    total_memory_budget,
                })
            }
            None => None,
        };
        let control_socket = raw
            .control
            .socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("/run/braid/{ifname}.sock")));
        let state_dir = match &raw.state_dir {
            // Relative to the config file, as private_key_file.
            Some(d) => path.parent().unwrap_or(Path::new(".")).join(d),
            None => PathBuf::from(DEFAULT_STATE_DIR),
        };
        // Made if missing; but something else of that name would refuse the clock floor at
        // every start (a server ignores the key).
        if raw.role == Role::Initiator {
            if let Ok(meta) = std::fs::metadata(&state_dir) {
                if !meta.is_dir() {
                    return Err(invalid(format!(
                        "state_dir = {:?}: {} is not a directory: give a directory (it is made if missing), or leave state_dir out for {DEFAULT_STATE_DIR}",
                        raw.state_dir.as_deref().unwrap_or(Path::new(DEFAULT_STATE_DIR)),
                        state_dir.display()
                    )));
                }
            }
        }
        host_bits("[interface] routes", &raw.interface.routes).map_err(invalid)?;
        Ok(Config {
            role: raw.role,
            state_dir,
            private_key,
            peers,
            listen: raw.listen,
            ifname,
            addresses: raw.interface.address,
            mtu,
            mtu_configured: raw.interface.mtu.is_some(),
            routes: raw.interface.routes,
            offload: raw.interface.offload,
            paths,
            bond,
            probe_interval: Duration::from_millis(l.probe_interval_ms),
            dead_after: Duration::from_millis(l.dead_after_ms),
            idle_probe_interval: Duration::from_millis(l.idle_probe_interval_ms),
            rekey_after: Duration::from_secs(l.rekey_after_s),
            control_socket,
            prometheus: raw.control.prometheus,
            qos: raw.qos,
            duplicate_dscp,
            release_pacing_pct,
            tcp,
            shape_egress,
            exposed_secrets,
        })
    }
}

/// Why `name` cannot be a network device's name (`[[path]] interface`), if it cannot: Linux
/// takes 1 to 15 bytes (IFNAMSIZ less the terminating NUL), without '/', ':' or white space,
/// and not `.` or `..`.
fn interface_name_ok(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > 15 {
        return Err(format!(
            "{} bytes, but Linux gives a network device at most 15 (IFNAMSIZ)",
            name.len()
        ));
    }
    if name == "."
        || name == ".."
        || name.contains(['/', ':'])
        || name.contains(char::is_whitespace)
    {
        return Err("no network device has this name (no '/', ':' or spaces, not . or ..)".into());
    }
    Ok(())
}

/// The `[[policy]]` tables as the bond's path policies; errors name the table and the fix.
fn policies(
    raw: &[RawPolicy],
    paths: &[PathConfig],
    resequence: ResequenceMode,
) -> Result<Vec<braid_session::params::PathPolicy>, String> {
    if !raw.is_empty() && resequence != ResequenceMode::Sequence {
        return Err(
            "[[policy]] needs [bond] resequence = \"sequence\" (the default): the receiver tells the classes' packets apart by their sequence numbers".into(),
        );
    }
    if raw.len() > braid_session::params::MAX_POLICIES {
        return Err(format!(
            "{} [[policy]] tables: at most {}",
            raw.len(),
            braid_session::params::MAX_POLICIES
        ));
    }
    let mut out = Vec::new();
    let mut seen = 0u64;
    for (i, p) in raw.iter().enumerate() {
        let name = p.name.clone().unwrap_or_else(|| format!("policy {i}"));
        let mut dscp = 0u64;
        for &d in &p.dscp {
            if d > 63 {
                return Err(format!(
                    "[[policy]] {name}: dscp {d} is not a DSCP value (0 to 63; EF is 46)"
                ));
            }
            dscp |= 1 << d;
        }
        if dscp == 0 {
            return Err(format!(
                "[[policy]] {name}: dscp is empty: list the DSCP values it applies to, e.g. [46]"
            ));
        }
        if dscp & seen != 0 {
            return Err(format!(
                "[[policy]] {name}: a DSCP value is already in an earlier [[policy]]: each value may be in one"
            ));
        }
        seen |= dscp;
        let mut mask = 0u64;
        match &p.paths {
            None => mask = u64::MAX >> (64 - paths.len()),
            Some(names) => {
                for n in names {
                    let Some(k) = paths.iter().position(|x| &x.name == n) else {
                        let known: Vec<&str> = paths.iter().map(|x| x.name.as_str()).collect();
                        return Err(format!(
                            "[[policy]] {name}: no [[path]] is named `{n}` (the paths are {})",
                            known.join(", ")
                        ));
                    };
                    mask |= 1 << k;
                }
            }
        }
        if mask == 0 {
            return Err(format!(
                "[[policy]] {name}: paths is empty: name at least one [[path]], or leave paths out for all"
            ));
        }
        let backups = paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.backup)
            .fold(0u64, |m, (i, _)| m | 1 << i);
        if mask & !backups == 0 {
            return Err(format!(
                "[[policy]] {name}: every path it may use is a backup, and a backup carries nothing while another path is up, so the class would be dropped: add a path that is not a backup"
            ));
        }
        if p.duplicate && p.striping != Striping::Packet {
            return Err(format!(
                "[[policy]] {name}: duplicate = true needs striping = \"packet\" (the receiver tells the copies apart by their sequence numbers, which a per-flow class does not use)"
            ));
        }
        if p.duplicate && mask.count_ones() < 2 {
            return Err(format!(
                "[[policy]] {name}: duplicate = true needs at least two paths to send the copies on"
            ));
        }
        out.push(braid_session::params::PathPolicy {
            dscp,
            paths: mask,
            striping: match p.striping {
                Striping::Packet => braid_session::params::PolicyStriping::Packet,
                Striping::Flow => braid_session::params::PolicyStriping::Flow,
                Striping::Fastest => braid_session::params::PolicyStriping::Fastest,
            },
            duplicate: p.duplicate,
        });
    }
    Ok(out)
}

/// Refuses a route with host bits set (`192.168.60.1/24`), which `ip route` would refuse at
/// start: names the prefix meant.
fn host_bits(what: &str, routes: &[Cidr]) -> Result<(), String> {
    match routes.iter().find(|r| r.network() != **r) {
        Some(r) => Err(format!(
            "{what}: {r} has bits set beyond its /{} prefix: write {}",
            r.prefix,
            r.network()
        )),
        None => Ok(()),
    }
}

/// The backup paths' mask (`[[path]] backup = true`); errors name the fix.
fn backup_paths(paths: &[PathConfig], resequence: ResequenceMode) -> Result<u64, String> {
    let mask = paths
        .iter()
        .enumerate()
        .filter(|(_, p)| p.backup)
        .fold(0u64, |m, (i, _)| m | 1 << i);
    if mask == 0 {
        return Ok(0);
    }
    if resequence != ResequenceMode::Sequence {
        return Err(
            "[[path]] backup = true needs [bond] resequence = \"sequence\" (the default): a backup leaves the bond and comes back at each end on its own, and only sequence numbers keep the order across that".into(),
        );
    }
    if mask.count_ones() as usize == paths.len() {
        return Err(
            "every [[path]] has backup = true: a backup carries traffic only while no other path is up, so at least one path must not be a backup".into(),
        );
    }
    Ok(mask)
}

/// The peers of `raw`: `peer_public_key` (one peer, every address), or a server's
/// `[[client]]` tables, each with its handed addresses. Errors name the key and the fix.
fn peers(raw: &Raw, private_key: &PrivateKey) -> Result<Vec<PeerConfig>, String> {
    let own = private_key.public_key();
    let key = |what: &str, text: &str| {
        let k = PublicKey::from_base64(text)
            .map_err(|e| format!("{what}: {e} (the peer's `braid pubkey`)"))?;
        if k == own {
            return Err(format!(
                "{what} is this end's own public key: put the other end's key there"
            ));
        }
        if k.0 == [0; 32] {
            return Err(format!(
                "{what} is all zeros, which is no one's key (no handshake with it can succeed): put the other end's `braid pubkey` there"
            ));
        }
        Ok(k)
    };
    match (&raw.peer_public_key, raw.clients.is_empty(), raw.role) {
        (Some(k), true, role) => Ok(vec![PeerConfig {
            name: if role == Role::Initiator { "server" } else { "client" }.into(),
            public_key: key("peer_public_key", k)?,
            addresses: Vec::new(),
            routes: Vec::new(),
            catch_all: true,
        }]),
        (None, true, Role::Initiator) => Err(
            "peer_public_key is missing: give the server's public key (`braid pubkey` on the server)".into(),
        ),
        (None, true, Role::Responder) => Err(
            "no client: give peer_public_key = \"...\" for one client, or one [[client]] table per client (public_key, address)".into(),
        ),
        (Some(_), false, _) => Err(
            "both peer_public_key and [[client]] tables: keep peer_public_key for a single client, or move it into a [[client]] table".into(),
        ),
        (None, false, Role::Initiator) => Err(
            "[[client]] tables are for role = \"server\"; a client names its server with peer_public_key".into(),
        ),
        (None, false, Role::Responder) => {
            let mut out: Vec<PeerConfig> = Vec::new();
            for (i, c) in raw.clients.iter().enumerate() {
                let name = c.name.clone().unwrap_or_else(|| format!("client{i}"));
                if !braid_session::params::path_name_ok(&name) {
                    return Err(format!(
                        "[[client]] name `{name}`: give 1 to 32 letters, digits, '.', '_', ':' or '-' (it names the client in status, the log and the metrics)"
                    ));
                }
                let public_key = key(&format!("[[client]] {name}: public_key"), &c.public_key)?;
                if c.address.is_empty() || c.address.len() > braid_session::session::MAX_HANDED_ADDRESSES {
                    return Err(format!(
                        "[[client]] {name}: give address = [\"10.77.0.2\"], the tunnel address(es) this client is handed (1 to {})",
                        braid_session::session::MAX_HANDED_ADDRESSES
                    ));
                }
                let mut addresses: Vec<Cidr> = Vec::new();
                for a in c.address.iter().map(|b| b.0) {
                    if addresses.iter().any(|x| x.addr == a) {
                        return Err(format!(
                            "[[client]] {name}: address {a} is listed twice: list each once"
                        ));
                    }
                    let Some(net) = raw.interface.address.iter().find(|n| n.contains(a)) else {
                        return Err(format!(
                            "[[client]] {name}: address {a} is outside the server's interface.address prefixes: pick an address inside one of them (e.g. 10.77.0.2 for 10.77.0.1/24), so the client reaches the server through the tunnel"
                        ));
                    };
                    if raw.interface.address.iter().any(|n| n.addr == a) {
                        return Err(format!(
                            "[[client]] {name}: address {a} is the server's own tunnel address: pick another"
                        ));
                    }
                    let cidr = Cidr { addr: a, prefix: net.prefix };
                    // IPv4's first and last address of a prefix (up to /30) are no host's.
                    if let (IpAddr::V4(v4), true) = (a, net.prefix <= 30) {
                        let host_mask = u32::MAX >> net.prefix;
                        let host = u32::from(v4) & host_mask;
                        if host == 0 || host == host_mask {
                            return Err(format!(
                                "[[client]] {name}: address {a} is the {} address of {}: pick one between the first and the last",
                                if host == 0 { "network" } else { "broadcast" },
                                net.network()
                            ));
                        }
                    }
                    addresses.push(cidr);
                }
                host_bits(&format!("[[client]] {name}: routes"), &c.routes)?;
                for other in &out {
                    if other.public_key == public_key {
                        return Err(format!(
                            "[[client]] {name} has the same public_key as {}: each client needs its own key pair",
                            other.name
                        ));
                    }
                    if let Some(a) = addresses
                        .iter()
                        .find(|a| other.addresses.iter().any(|o| o.addr == a.addr))
                    {
                        return Err(format!(
                            "[[client]] {name}: address {} is already {}'s: each client needs its own",
                            a.addr, other.name
                        ));
                    }
                    if other.name == name {
                        return Err(format!("two [[client]] tables are named {name}: rename one"));
                    }
                }
                out.push(PeerConfig {
                    name,
                    public_key,
                    addresses,
                    routes: c.routes.clone(),
                    catch_all: false,
                });
            }
            // A client's routes are what it may send from: they must not hold the server's
            // tunnel address or another client's.
            for p in &out {
                for r in &p.routes {
                    if let Some(a) = raw.interface.address.iter().find(|a| r.contains(a.addr)) {
                        return Err(format!(
                            "[[client]] {}: route {r} holds the server's own address {}: route only the prefixes behind this client",
                            p.name, a.addr
                        ));
                    }
                    for o in out.iter().filter(|o| o.name != p.name) {
                        if let Some(a) = o.addresses.iter().find(|a| r.contains(a.addr)) {
                            return Err(format!(
                                "[[client]] {}: route {r} holds {}'s address {}: route only the prefixes behind this client",
                                p.name, o.name, a.addr
                            ));
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT_KEY: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const SERVER_PUB: &str = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";

    fn client(extra: &str) -> String {
        format!(
            r#"
role = "client"
private_key = "{CLIENT_KEY}"
peer_public_key = "{SERVER_PUB}"
[interface]
address = ["10.77.0.2/30"]
{extra}
[[path]]
name = "dsl"
remote = "192.0.2.1:7000"
rate_mbit = 20
[[path]]
local = "198.51.100.7"
remote = "192.0.2.1:7000"
rate_mbit = 5
"#
        )
    }

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("braid.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_commonest_toml_mistakes_say_how_to_write_it() {
        let err = parse("role = \"client\"\n[path]\nremote = \"192.0.2.1:7000\"\n").unwrap_err();
        assert!(err.contains("double brackets: [[path]]"), "{err}");
        let err = parse("role = \"client\"\n[interface]\naddress = \"10.0.0.1/24\"\n").unwrap_err();
        assert!(err.contains("put the value in brackets"), "{err}");
        let err = parse(&client("").replace("rate_mbit = 20", "rate_mbit = \"20\"")).unwrap_err();
        assert!(err.contains("without quotes"), "{err}");
        let err = parse("").unwrap_err();
        assert!(
            err.contains("role = \"client\" or role = \"server\""),
            "{err}"
        );
        // Anything else is the parser's message alone.
        let err = parse("role = \"client\"\ncolour = 1\n").unwrap_err();
        assert!(!err.contains("\n("), "{err}");
    }

    /// The example client with its first path's `remote` (and `local`, if any) replaced.
    fn client_remote(remote: &str, local: Option<&str>) -> String {
        let local = local.map_or(String::new(), |l| format!("local = \"{l}\"\n"));
        client("").replacen(
            "remote = \"192.0.2.1:7000\"",
            &format!("{local}remote = \"{remote}\""),
            1,
        )
    }

    #[test]
    fn a_remote_may_be_a_host_name() {
        // `localhost` is in /etc/hosts everywhere: 127.0.0.1, and often ::1 too.
        let c = parse(&client_remote("localhost:7000", None)).unwrap();
        assert_eq!(c.paths[0].remote, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(c.paths[0].remote_host, Some(("localhost".to_owned(), 7000)));
        assert_eq!(c.paths[1].remote_host, None);
        let c = parse(&client_remote("localhost:7000", Some("127.0.0.1"))).unwrap();
        assert_eq!(c.paths[0].remote, "127.0.0.1:7000".parse().unwrap());
        // Not a name, not an address.
        for bad in [
            "localhost",
            "local:host:7000",
            "localhost:+7000",
            "-x.example:7000",
            "300.1.1.1:7000",
            "vpn.example.net:99999",
        ] {
            let e = parse(&client_remote(bad, None)).unwrap_err();
            assert!(e.contains("nor a host name and port"), "{bad}: {e}");
        }
        // A name with port 0: a port no server listens on.
        let e = parse(&client_remote("localhost:0", None)).unwrap_err();
        assert!(e.contains("port 0 is no server's port"), "{e}");
        // A name that does not resolve (RFC 6761 reserves .invalid): what to do about it.
        let e = parse(&client_remote("braid-test.invalid:7000", None)).unwrap_err();
        assert!(
            e.contains("cannot resolve braid-test.invalid")
                && e.contains("give the server's address"),
            "{e}"
        );
    }

    #[test]
    fn a_config_read_for_its_control_socket_resolves_nothing() {
        let dir = std::env::temp_dir().join(format!("braid-offline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, client_remote("braid-test.invalid:7000", None)).unwrap();
        let c = Config::load_offline(&file).unwrap();
        assert_eq!(c.paths[0].remote, "0.0.0.0:7000".parse().unwrap());
        assert_eq!(
            c.paths[0].remote_host,
            Some(("braid-test.invalid".to_owned(), 7000))
        );
        assert!(Config::load(&file).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_resolved_remote_keeps_its_address_and_version() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let found = [
            a("[2001:db8::1]:7000"),
            a("192.0.2.1:7000"),
            a("192.0.2.2:7000"),
        ];
        // IPv4 first when nothing says which.
        assert_eq!(pick_remote(None, &found, None), Some(a("192.0.2.1:7000")));
        assert_eq!(
            pick_remote(None, &found, Some(true)),
            Some(a("[2001:db8::1]:7000"))
        );
        // The address in use while it is still there (round-robin DNS does not move the path).
        assert_eq!(
            pick_remote(Some(a("192.0.2.2:7000")), &found, Some(false)),
            Some(a("192.0.2.2:7000"))
        );
        // Gone: the first of its version.
        assert_eq!(
            pick_remote(Some(a("192.0.2.9:7000")), &found, Some(false)),
            Some(a("192.0.2.1:7000"))
        );
        assert_eq!(pick_remote(None, &found[1..], Some(true)), None);
        assert_eq!(pick_remote(None, &[], None), None);
    }

    #[test]
    fn a_tcp_table_turns_acceleration_on() {
        assert_eq!(parse(&client("")).unwrap().tcp, None);
        let c = parse(&client("[tcp]\naccelerate = true")).unwrap();
        assert_eq!(
            c.tcp,
            Some(TcpConfig {
                listen_port: DEFAULT_TCP_LISTEN_PORT,
                congestion: braid_ptcp::CongestionAlgorithm::Bbr,
                transparent: true,
                memory_budget: 256 << 20,
                total_memory_budget: 1 << 30,
            })
        );
        let c = parse(&client("[tcp]\naccelerate = true\nmemory_mib = 32")).unwrap();
        assert_eq!(c.tcp.unwrap().memory_budget, 32 << 20);
        let e = parse(&client("[tcp]\naccelerate = true\nmemory_mib = 0")).unwrap_err();
        assert!(
            e.contains("memory_mib = 0") && e.contains("1-1048576"),
            "{e}"
        );
        let e = parse(&client("[tcp]\nmemory_mib = 32")).unwrap_err();
        assert!(e.contains("accelerate = true"), "{e}");
        // The total of all clients' is a server's.
        let e = parse(&client("[tcp]\naccelerate = true\ntotal_memory_mib = 64")).unwrap_err();
        assert!(e.contains("only a server shares"), "{e}");
        let server = |tcp: &str| {
            proxy(&format!(
                "{tcp}[[client]]\npublic_key = \"{KEY_A}\"\naddress = [\"10.77.0.2\"]\n"
            ))
        };
        let c = parse(&server("[tcp]\naccelerate = true\ntotal_memory_mib = 64\n")).unwrap();
        assert_eq!(c.tcp.unwrap().total_memory_budget, 64 << 20);
        let c = parse(&server("[tcp]\naccelerate = true\nmemory_mib = 2048\n")).unwrap();
        assert_eq!(c.tcp.unwrap().total_memory_budget, 2048 << 20);
        let e = parse(&server("[tcp]\naccelerate = true\ntotal_memory_mib = 0\n")).unwrap_err();
        assert!(
            e.contains("total_memory_mib = 0") && e.contains("1-1048576"),
            "{e}"
        );
        let e = parse(&server("[tcp]\ntotal_memory_mib = 64\n")).unwrap_err();
        assert!(e.contains("accelerate = true"), "{e}");
        // Transparency is the server's choice.
        let e = parse(&client("[tcp]\naccelerate = true\ntransparent = false")).unwrap_err();
        assert!(e.contains("only a server's [tcp]"), "{e}");
        let c = parse(&client("[tcp]\naccelerate = true\ncongestion = \"cubic\"")).unwrap();
        assert_eq!(
            c.tcp.unwrap().congestion,
            braid_ptcp::CongestionAlgorithm::Cubic
        );
        let e = parse(&client("[tcp]\naccelerate = true\ncongestion = \"vegas\"")).unwrap_err();
        assert!(
            e.contains("congestion = \"vegas\"") && e.contains("cubic"),
            "{e}"
        );
        let e = parse(&client("[tcp]\ncongestion = \"cubic\"")).unwrap_err();
        assert!(e.contains("accelerate = true"), "{e}");
        let c = parse(&client("[tcp]\naccelerate = true\nlisten_port = 9000")).unwrap();
        assert_eq!(c.tcp.unwrap().listen_port, 9000);
        let e = parse(&client("[tcp]\naccelerate = true\nlisten_port = 0")).unwrap_err();
        assert!(e.contains("listen_port = 0"), "{e}");
        let e = parse(&client("[tcp]\nlisten_port = 9000")).unwrap_err();
        assert!(e.contains("accelerate = true"), "{e}");
        let e = parse(&client("[tcp]\naccelerate = true\nport = 1")).unwrap_err();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn scheduler_pet_measures_the_rates_nobody_gave() {
        let no_rates = client("")
            .replace("rate_mbit = 20\n", "")
            .replace("rate_mbit = 5\n", "");
        let e = parse(&no_rates).unwrap_err();
        assert!(
            e.contains("path 0: rate_mbit is missing") && e.contains("scheduler = \"pet\""),
            "{e}"
        );
        let c = parse(&no_rates.replace("{extra}", "").replace(
            "[[path]]\nname = \"dsl\"",
            "[bond]\nscheduler = \"pet\"\n[[path]]\nname = \"dsl\"",
        ))
        .unwrap();
        let b = c.bond.unwrap();
        assert_eq!(b.scheduler, SchedulerKind::Pet);
        assert_eq!(b.rates_bps, vec![PET_PRIOR_RATE_BPS; 2]);
        assert!(c.paths.iter().all(|p| p.rate_bps == PET_PRIOR_RATE_BPS));
        // A path rate may still be given: PET starts from it.
        let c = parse(&client("[bond]\nscheduler = \"pet\"")).unwrap();
        assert_eq!(c.bond.unwrap().rates_bps, vec![20_000_000, 5_000_000]);
        // JoBS shapes at PET's estimates once it has them.
        let c = parse(&no_rates.replace(
            "[[path]]\nname = \"dsl\"",
            "[bond]\nscheduler = \"pet\"\n[qos]\n[[qos.class]]\nname = \"all\"\ndefault = true\n[[path]]\nname = \"dsl\"",
        ))
        .unwrap();
        assert!(c.qos.is_some());
        // PET needs the sequence numbers of mode sequence.
        let e = parse(&client(
            "[bond]\nscheduler = \"pet\"\nresequence = \"logical\"",
        ))
        .unwrap_err();
        assert!(e.contains("`pet` is not causal"), "{e}");
    }

    #[test]
    fn duplicate_dscp_is_a_mask_of_dscp_values() {
        let c = parse(&client("[bond]\nduplicate_dscp = [46, 34]")).unwrap();
        assert_eq!(c.duplicate_dscp, (1 << 46) | (1 << 34));
        assert_eq!(parse(&client("")).unwrap().duplicate_dscp, 0);
        assert_eq!(
            parse(&client("")).unwrap().release_pacing_pct,
            DEFAULT_RELEASE_PACING_PCT
        );
        let e = parse(&client("[bond]\nrelease_pacing_pct = 50")).unwrap_err();
        assert!(e.contains("release_pacing_pct = 50"), "{e}");
        let e = parse(&client("[bond]\nduplicate_dscp = [64]")).unwrap_err();
        assert!(e.contains("not a DSCP value"), "{e}");
        let e = parse(&client(
            "[bond]\nduplicate_dscp = [46]\nresequence = \"logical\"",
        ))
        .unwrap_err();
        assert!(e.contains("needs resequence"), "{e}");
    }

    #[test]
    fn a_client_config_parses_with_defaults() {
        let c = parse(&client("")).unwrap();
        assert_eq!(c.role, Role::Initiator);
        assert_eq!(c.paths.len(), 2);
        assert_eq!(c.paths[1].name, "path1");
        assert_eq!(c.paths[0].rate_bps, 20_000_000);
        // 1500 - 20 (IPv4) - 8 (UDP) - 16 - 16 - 12 (data header + seq).
        assert_eq!(c.mtu, Some(1428));
        let b = c.bond.unwrap();
        assert_eq!(b.max_packet, 1428);
        assert_eq!(b.resequence, ResequenceMode::Sequence);
        assert_eq!(c.control_socket, PathBuf::from("/run/braid/braid0.sock"));
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = parse(&client("mtu = \"big\"")).unwrap_err();
        assert!(e.contains("line 7"), "{e}");
        let e = parse(&client("colour = 3")).unwrap_err();
        assert!(
            e.contains("unknown field `colour`") && e.contains("line 7"),
            "{e}"
        );
        let e = parse(&client("").replace("rate_mbit = 5", "rate_mbit = 0")).unwrap_err();
        assert!(e.contains("path 1: rate_mbit"), "{e}");
        let e = parse(&client("").replace("198.51.100.7", "nowhere")).unwrap_err();
        assert!(e.contains("not an IP address") && e.contains("line"), "{e}");
        let e = parse(&client("").replace("10.77.0.2/30", "10.77.0.2")).unwrap_err();
        assert!(e.contains("prefix length"), "{e}");
        let e = parse(&client("").replace("role = \"client\"", "role = \"boss\"")).unwrap_err();
        assert!(e.contains("role `boss` is unknown"), "{e}");
        let e = parse(&client("").replace(CLIENT_KEY, "nope")).unwrap_err();
        assert!(
            e.contains("private_key") && e.contains("braid genkey"),
            "{e}"
        );
        let e = parse(&client("").replace("role = \"client\"", "role = \"server\"")).unwrap_err();
        assert!(e.contains("listen"), "{e}");
        let e = parse(&client("[bond]\nscheduler = \"fastest\"")).unwrap_err();
        assert!(e.contains("unknown scheduler `fastest`"), "{e}");
        // The BAG paper's WRR is GRR.
        let c = parse(&client("[bond]\nscheduler = \"wrr\"")).unwrap();
        assert_eq!(c.bond.unwrap().scheduler, SchedulerKind::Grr);
        let e = parse(&client("mtu = 1480")).unwrap_err();
        assert!(e.contains("larger than the paths allow (1428"), "{e}");
    }

    #[test]
    fn rate_mbit_names_its_range() {
        for bad in [
            "1000001",
            "1e12",
            "1e-9",
            "0",
            "-5",
            "nan",
            "inf",
            "99999999999999999999",
        ] {
            let e = parse(&client("").replace("rate_mbit = 5", &format!("rate_mbit = {bad}")))
                .unwrap_err();
            assert!(
                e.contains("path 1: rate_mbit = ")
                    && e.contains("from 0.001 (1 kbit/s) to 1000000 (1 Tbit/s)"),
                "{bad}: {e}"
            );
            assert!(!e.contains("i128"), "{e}");
        }
        for good in ["0.001", "1000000", "7"] {
            parse(&client("").replace("rate_mbit = 5", &format!("rate_mbit = {good}"))).unwrap();
        }
        let c = parse(&client("").replace("rate_mbit = 5", "rate_mbit = 0.001")).unwrap();
        assert_eq!(c.paths[1].rate_bps, 1000);
    }

    #[test]
    fn a_number_a_key_cannot_take_is_said_in_plain_words() {
        let bond = |line: &str| parse(&client(&format!("[bond]\n{line}"))).unwrap_err();
        let e = bond("hold_ms = -5");
        assert!(
            e.contains("hold_ms = -5: must be a whole number of milliseconds from 0 to 4294967295"),
            "{e}"
        );
        assert!(e.contains("line") && !e.contains("expected u32"), "{e}");
        let e = bond("hold_ms = 1.5");
        assert!(
            e.contains("hold_ms = 1.5: must be a whole number of milliseconds"),
            "{e}"
        );
        let e = bond("queue_kb = 99999999999");
        assert!(
            e.contains("whole number of KiB from 0 to 4294967295"),
            "{e}"
        );
        let e = parse(&client("[liveness]\nprobe_interval_ms = -1")).unwrap_err();
        assert!(
            e.contains("from 0 to 18446744073709551615") && e.contains("milliseconds"),
            "{e}"
        );
        // A number in quotes keeps its own hint.
        let e = bond("hold_ms = \"5\"");
        assert!(e.contains("without quotes"), "{e}");
    }

    #[test]
    fn values_that_can_never_work_are_refused() {
        for remote in ["192.0.2.1:0", "vpn.example.net:0"] {
            let e = parse(&client_remote(remote, None)).unwrap_err();
            assert!(
                e.contains(&format!("path 0: remote = \"{remote}\": port 0")),
                "{e}"
            );
        }
        let with_interface = |name: &str| {
            client("").replacen(
                "remote = \"192.0.2.1:7000\"",
                &format!("interface = \"{name}\"\nremote = \"192.0.2.1:7000\""),
                1,
            )
        };
        parse(&with_interface("fifteen-bytes-0")).unwrap();
        let e = parse(&with_interface("sixteen-bytes-00")).unwrap_err();
        assert!(
            e.contains("path 0: interface = \"sixteen-bytes-00\": 16 bytes")
                && e.contains("IFNAMSIZ"),
            "{e}"
        );
        for bad in ["", "a/b", "a b", ".."] {
            assert!(parse(&with_interface(bad)).is_err(), "{bad:?}");
        }
        let zero = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        let e = parse(&client("").replace(SERVER_PUB, zero)).unwrap_err();
        assert!(
            e.contains("peer_public_key is all zeros") && e.contains("braid pubkey"),
            "{e}"
        );
        let e = parse(&proxy(&format!(
            "[[client]]\nname = \"van\"\npublic_key = \"{zero}\"\naddress = [\"10.77.0.2\"]\n"
        )))
        .unwrap_err();
        assert!(e.contains("[[client]] van: public_key is all zeros"), "{e}");
    }

    #[test]
    fn a_server_listening_on_port_0_is_refused() {
        let text = proxy(&format!(
            "[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.2\"]\n"
        ));
        parse(&text)
            .unwrap()
            .check_listen_port(Path::new("braid.toml"))
            .unwrap();
        let text = text.replace("0.0.0.0:7000", "0.0.0.0:0");
        let e = parse(&text)
            .unwrap()
            .check_listen_port(Path::new("braid.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("listen = \"0.0.0.0:0\": port 0") && e.contains("\"0.0.0.0:7000\""),
            "{e}"
        );
    }

    #[test]
    fn a_state_dir_that_is_a_file_is_refused() {
        let e =
            parse(&client("").replace("[interface]", "state_dir = \"/etc/passwd\"\n[interface]"))
                .unwrap_err();
        assert!(
            e.contains("state_dir = \"/etc/passwd\": /etc/passwd is not a directory"),
            "{e}"
        );
        // A missing one is made at start.
        parse(&client("").replace(
            "[interface]",
            "state_dir = \"/nonexistent/braid\"\n[interface]",
        ))
        .unwrap();
    }

    #[test]
    fn a_private_key_others_may_read_is_noted() {
        use std::os::unix::fs::PermissionsExt;
        let f = std::env::temp_dir().join(format!("braid-exposed-{}.toml", std::process::id()));
        std::fs::write(&f, client("")).unwrap();
        for (mode, exposed) in [(0o644, true), (0o640, true), (0o600, false)] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let cfg = Config::load(&f).unwrap();
            assert_eq!(cfg.exposed_secrets == [f.clone()], exposed, "{mode:o}");
        }
        std::fs::remove_file(&f).unwrap();
    }

    #[test]
    fn a_config_path_that_is_a_directory_is_named() {
        let dir = std::env::temp_dir();
        let e = Config::load(&dir).unwrap_err().to_string();
        assert!(
            e.contains("it is a directory: give the config file itself with -c"),
            "{e}"
        );
    }

    #[test]
    fn a_qos_table_is_checked_with_the_bonds_rate() {
        let qos = r#"
[qos]
buffer_packets = 300
[[qos.class]]
name = "voice"
dscp = [46]
delay_bound_ms = 10.0
loss_bound_pct = 1.0
[[qos.class]]
name = "bulk"
default = true
"#;
        let c = parse(&client(qos)).unwrap();
        let q = c.qos.unwrap();
        assert_eq!(q.class_names(), vec!["voice", "bulk"]);
        // A minimum rate the bond (25 Mbit/s) cannot give, and a bad ratio, are refused by key.
        let e = parse(&client(&qos.replace(
            "loss_bound_pct = 1.0",
            "min_rate_mbit = 40.0\ndelay_ratio = 0.0",
        )))
        .unwrap_err();
        assert!(e.contains("qos.class"), "{e}");
        let e = parse(&client("[qos]\nclass = []")).unwrap_err();
        assert!(e.contains("[[qos.class]]"), "{e}");
    }

    #[test]
    fn a_server_config_parses() {
        let text = format!(
            r#"
role = "server"
private_key = "{CLIENT_KEY}"
peer_public_key = "{SERVER_PUB}"
listen = "0.0.0.0:7000"
[interface]
name = "bond0"
address = ["10.77.0.1/30", "fd77::1/64"]
routes = ["10.1.0.0/16"]
[control]
socket = "/tmp/b.sock"
prometheus = "127.0.0.1:9477"
"#
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.role, Role::Responder);
        assert!(c.bond.is_none() && c.paths.is_empty());
        assert_eq!(c.addresses.len(), 2);
        assert_eq!(c.routes[0].to_string(), "10.1.0.0/16");
        assert!(c.prometheus.is_some());
        assert_eq!(c.release_pacing_pct, DEFAULT_RELEASE_PACING_PCT);
        assert_eq!(c.shape_egress, None);
        // A server decides what it sends twice, how fast its receiver releases and whether it
        // shapes its egress; nothing else.
        let c = parse(&format!(
            "{text}[bond]\nrelease_pacing_pct = 200\nduplicate_dscp = [46]\nshape_egress = false\n"
        ))
        .unwrap();
        assert_eq!((c.release_pacing_pct, c.duplicate_dscp), (200, 1 << 46));
        assert_eq!(c.shape_egress, Some(false));
        assert!(c.bond.is_none());
        let c = parse(&format!("{text}[tcp]\naccelerate = true\n")).unwrap();
        assert!(c.tcp.as_ref().is_some_and(|t| t.transparent));
        let c = parse(&format!(
            "{text}[tcp]\naccelerate = true\ntransparent = false\n"
        ))
        .unwrap();
        assert!(c.tcp.is_some_and(|t| !t.transparent));
        let e = parse(&format!("{text}[tcp]\ntransparent = true\n")).unwrap_err();
        assert!(e.contains("without accelerate = true"), "{e}");
        let e = parse(&format!(
            "{text}[tcp]\naccelerate = true\nlisten_port = 7199\n"
        ))
        .unwrap_err();
        assert!(e.contains("only a client"), "{e}");
        let e = parse(&format!("{text}[bond]\nscheduler = \"pet\"\n")).unwrap_err();
        assert!(
            e.contains("may set only duplicate_dscp, release_pacing_pct and shape_egress"),
            "{e}"
        );
    }

    #[test]
    fn shape_egress_is_on_off_or_left_to_the_scheduler_and_never_off_with_qos() {
        assert_eq!(parse(&client("")).unwrap().shape_egress, None);
        let c = parse(&client("[bond]\nscheduler = \"pet\"\nshape_egress = false")).unwrap();
        assert_eq!(c.shape_egress, Some(false));
        let c = parse(&client("[bond]\nshape_egress = true")).unwrap();
        assert_eq!(c.shape_egress, Some(true));
        let qos = "[qos]\n[[qos.class]]\nname = \"all\"\ndefault = true";
        let e = parse(&client(&format!("[bond]\nshape_egress = false\n{qos}"))).unwrap_err();
        assert!(
            e.contains("shape_egress = false with a [qos] table") && e.contains("remove one"),
            "{e}"
        );
        let e = parse(&client("[bond]\nshape_egress = \"yes\"")).unwrap_err();
        assert!(e.contains("shape_egress"), "{e}");
    }

    /// A proxy server's config with the given `[[client]]` tables.
    fn proxy(clients: &str) -> String {
        format!(
            r#"
role = "server"
private_key = "{CLIENT_KEY}"
listen = "0.0.0.0:7000"
[interface]
address = ["10.77.0.1/24", "fd77::1/64"]
{clients}
"#
        )
    }

    const KEY_A: &str = "j2i3NRapy6PhI5sCicBlkSaMFd2zcc12kg7qHK+aHhs=";

    #[test]
    fn a_proxy_hands_each_client_its_address_and_routes_by_it() {
        let c = parse(&proxy(&format!(
            r#"
[[client]]
name = "home"
public_key = "{SERVER_PUB}"
address = ["10.77.0.2", "fd77::2"]
routes = ["192.168.50.0/24"]
[[client]]
public_key = "{KEY_A}"
address = ["10.77.0.3"]
"#
        )))
        .unwrap();
        assert_eq!(c.peers.len(), 2);
        let (home, other) = (&c.peers[0], &c.peers[1]);
        assert_eq!(home.name, "home");
        assert_eq!(other.name, "client1");
        assert_eq!(
            home.addresses
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>(),
            ["10.77.0.2/24", "fd77::2/64"],
            "each handed address takes the prefix of the server's own that holds it"
        );
        assert!(home.owns("192.168.50.9".parse().unwrap()));
        assert!(home.owns("10.77.0.2".parse().unwrap()));
        assert!(!home.owns("10.77.0.3".parse().unwrap()));
        assert!(other.owns("10.77.0.3".parse().unwrap()) && !other.catch_all);
    }

    #[test]
    fn proxy_mistakes_are_named() {
        let one = |extra: &str| {
            format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.2\"]\n{extra}")
        };
        let cases = [
            (proxy(""), "no client"),
            (
                proxy("[[client]]\npublic_key = \"xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=\"\n"),
                "give address",
            ),
            (
                proxy(&format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.9.0.2\"]\n")),
                "outside the server's interface.address",
            ),
            (
                proxy(&format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.1\"]\n")),
                "the server's own tunnel address",
            ),
            (
                proxy(&format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.3/24\"]\n")),
                "takes no prefix length (it gets that of the server's interface.address holding it): write \"10.77.0.3\"",
            ),
            (
                proxy(&format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.0\"]\n")),
                "10.77.0.0 is the network address of 10.77.0.0/24",
            ),
            (
                proxy(&format!("[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.255\"]\n")),
                "10.77.0.255 is the broadcast address of 10.77.0.0/24",
            ),
            (
                proxy(&one("routes = [\"192.168.60.1/24\"]")),
                "192.168.60.1/24 has bits set beyond its /24 prefix: write 192.168.60.0/24",
            ),
            (
                proxy(&format!(
                    "{}[[client]]\npublic_key = \"{KEY_A}\"\naddress = [\"10.77.0.2\"]\n",
                    one("")
                )),
                "is already client0's",
            ),
            (
                proxy(&format!(
                    "{}[[client]]\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.4\"]\n",
                    one("")
                )),
                "same public_key",
            ),
            (
                proxy(&one("")).replace(
                    "listen =",
                    &format!("peer_public_key = \"{KEY_A}\"\nlisten ="),
                ),
                "both peer_public_key and [[client]]",
            ),
            (
                client("").replace(
                    "[interface]",
                    &format!("[[client]]\npublic_key = \"{KEY_A}\"\naddress = [\"10.77.0.2\"]\n[interface]"),
                ),
                "both peer_public_key and [[client]]",
            ),
        ];
        for (text, want) in cases {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(want), "{want:?} not in {err:?}\n{text}");
        }
    }

    #[test]
    fn a_client_may_leave_its_address_to_the_server() {
        let text = client("").replace("address = [\"10.77.0.2/30\"]\n", "");
        assert!(!text.contains("10.77.0.2/30"), "{text}");
        let c = parse(&text).unwrap();
        assert!(c.addresses.is_empty());
    }

    #[test]
    fn a_route_with_host_bits_set_is_refused_with_the_prefix_meant() {
        let err = parse(&client("routes = [\"10.10.0.1/16\"]")).unwrap_err();
        assert!(err.contains("write 10.10.0.0/16"), "{err}");
        let c = parse(&client("routes = [\"10.10.0.0/16\", \"fd00:1::/64\"]")).unwrap();
        assert_eq!(c.routes.len(), 2);
    }

    #[test]
    fn a_backup_path_is_carried_in_the_bond_and_checked() {
        // The second path (the last table open) is the backup.
        let c = parse(&(client("") + "backup = true\n")).unwrap();
        assert!(!c.paths[0].backup && c.paths[1].backup);
        assert_eq!(c.bond.as_ref().unwrap().backup_paths, 0b10);
        let err = parse(
            &(client("[bond]\nresequence = \"logical\"\nscheduler = \"srr\"") + "backup = true\n"),
        )
        .unwrap_err();
        assert!(
            err.contains("backup = true needs [bond] resequence"),
            "{err}"
        );
        let both = client("").replace("rate_mbit = 20\n", "rate_mbit = 20\nbackup = true\n");
        let err = parse(&(both + "backup = true\n")).unwrap_err();
        assert!(
            err.contains("at least one path must not be a backup"),
            "{err}"
        );
        let err = parse(
            &(client("[[policy]]\nname = \"metered\"\ndscp = [8]\npaths = [\"path1\"]")
                + "backup = true\n"),
        )
        .unwrap_err();
        assert!(err.contains("every path it may use is a backup"), "{err}");
    }

    #[test]
    fn policies_name_paths_and_are_checked() {
        let c = parse(&client(
            r#"
[[policy]]
name = "voice"
dscp = [46, 34]
paths = ["dsl"]
striping = "flow"
[[policy]]
dscp = [10]
duplicate = true
"#,
        ))
        .unwrap();
        let p = &c.bond.unwrap().policies;
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].dscp, 1 << 46 | 1 << 34);
        assert_eq!(p[0].paths, 0b01);
        assert!(p[0].striping == braid_session::params::PolicyStriping::Flow && !p[0].duplicate);
        assert_eq!(p[1].paths, 0b11, "no paths: all of them");
        assert!(p[1].duplicate && p[1].striping == braid_session::params::PolicyStriping::Packet);
        for (extra, want) in [
            (
                "[[policy]]\ndscp = [46]\npaths = [\"lte\"]\n",
                "no [[path]] is named `lte`",
            ),
            ("[[policy]]\ndscp = []\n", "dscp is empty"),
            ("[[policy]]\ndscp = [64]\n", "not a DSCP value"),
            (
                "[[policy]]\ndscp = [46]\n[[policy]]\ndscp = [46]\n",
                "already in an earlier",
            ),
            (
                "[[policy]]\ndscp = [46]\nstriping = \"flow\"\nduplicate = true\n",
                "needs striping = \"packet\"",
            ),
            (
                "[[policy]]\ndscp = [46]\npaths = [\"dsl\"]\nduplicate = true\n",
                "at least two paths",
            ),
            (
                "[[policy]]\ndscp = [46]\nstriping = \"round\"\n",
                "unknown variant",
            ),
            (
                "[bond]\nresequence = \"logical\"\n[[policy]]\ndscp = [46]\n",
                "needs [bond] resequence",
            ),
        ] {
            let err = parse(&client(extra)).unwrap_err();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
    }

    #[test]
    fn the_backup_timer_is_a_multiple_of_the_rtt() {
        let c = parse(&client("[bond]\nbackup_rtt_multiple = 2\n")).unwrap();
        assert_eq!(c.bond.unwrap().backup_rtt_multiple, 2);
        let err = parse(&client("[bond]\nbackup_rtt_multiple = 17\n")).unwrap_err();
        assert!(err.contains("1 to 16 times"), "{err}");
    }

    #[test]
    fn adaptive_srr_needs_no_rates() {
        let text = client("[bond]\nadaptive = true\n").replace("rate_mbit = 20\n", "");
        let c = parse(&text).unwrap();
        let b = c.bond.unwrap();
        assert!(b.adaptive);
        assert_eq!(b.rates_bps, vec![PET_PRIOR_RATE_BPS, 5_000_000]);
        let err = parse(&client("[bond]\nadaptive = true\nscheduler = \"grr\"\n")).unwrap_err();
        assert!(err.contains("adaptive quanta need"), "{err}");
    }

    #[test]
    fn header_compression_is_on_unless_turned_off() {
        assert!(parse(&client("")).unwrap().bond.unwrap().compress_headers);
        let c = parse(&client("[bond]\ncompress_headers = false\n")).unwrap();
        assert!(!c.bond.unwrap().compress_headers);
        let err = parse(&client("[bond]\ncompress_headers = 1\n")).unwrap_err();
        assert!(err.contains("compress_headers"), "{err}");
    }

    #[test]
    fn a_client_route_may_not_cover_the_server_or_another_client() {
        let two = |routes: &str| {
            proxy(&format!(
                "[[client]]\nname = \"a\"\npublic_key = \"{SERVER_PUB}\"\naddress = [\"10.77.0.2\"]\nroutes = [{routes}]\n\
                 [[client]]\nname = \"b\"\npublic_key = \"{KEY_A}\"\naddress = [\"10.77.0.3\"]\n"
            ))
        };
        assert!(parse(&two("\"192.168.1.0/24\"")).is_ok());
        let err = parse(&two("\"0.0.0.0/0\"")).unwrap_err();
        assert!(err.contains("server's own address"), "{err}");
        let err = parse(&two("\"10.77.0.3/32\"")).unwrap_err();
        assert!(err.contains("holds b's address"), "{err}");
        for bad in ["my dsl", "dsl\\\"", "a,b"] {
            let err = parse(&client("").replace("name = \"dsl\"", &format!("name = \"{bad}\"")))
                .unwrap_err();
            assert!(err.contains("letters, digits"), "{bad}: {err}");
        }
    }
}

//! The testbed: a client and a server namespace joined by one path per link, each through
//! braid's emulator (or, in direct mode, a plain veth pair).
//!
//! ```text
//!  client ns (…-client)         emulator ns (…-emu<i>)           server ns (…-server)
//!  p<i> 10.100.<i>.1/24 ==veth== cli  [emulator]  srv ==veth== p<i> 10.100.<i>.2/24
//! ```
//!
//! Both ends of path i are on one L2 segment (the emulator forwards frames, it does not
//! route). Every resource lives inside a namespace, so deleting the namespaces removes
//! everything. Names are unique per run (`braidlab-<pid>-<n>-<rand>-…`); interface names are
//! only unique within their namespace, which is all the kernel asks.
//!
//! Cleanup: [`Testbed`]'s `Drop` (which also runs when a panic unwinds) stops the emulators and
//! deletes the namespaces; SIGINT and SIGTERM stop the processes in (the daemons) and delete the namespaces of every live testbed of
//! the process and exit; [`clean_stale`] removes what a killed process (SIGKILL) left.

use crate::emulator::model::DirectionConfig;
use crate::emulator::{PathCounters, PathEmulator};
use crate::error::LabError;
use crate::netns::{self, Netns};
use crate::sys;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

/// Prefix of every namespace the lab creates.
pub const NAMESPACE_PREFIX: &str = "braidlab-";
/// Policy-routing table of path i in the client is `ROUTE_TABLE_BASE + i`.
pub const ROUTE_TABLE_BASE: u32 = 100;
/// Suggested address of the braid tunnel's TUN device in the client namespace (a /24 with
/// [`TUNNEL_SERVER_ADDR`]): the braid variant runs its bulk TCP between the two.
pub const TUNNEL_CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// Suggested address of the braid tunnel's TUN device in the server namespace.
pub const TUNNEL_SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// Prefix length of the tunnel subnet.
pub const TUNNEL_PREFIX_LEN: u8 = 24;

/// Features switched off on every veth end of an emulated path, so that each frame the
/// emulator sees is one wire packet (no TSO/GSO super-frames, no GRO merging). Checksum
/// offload stays on: the emulator passes the checksum state through in the virtio-net header.
pub const OFFLOADS_OFF: &[&str] = &[
    "tx-tcp-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp6-segmentation",
    "tx-generic-segmentation",
    "tx-udp-segmentation",
    "tx-gso-list",
    "tx-gso-partial",
    "rx-gro",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
    "rx-gro-hw",
    "rx-lro",
];

/// Create a veth pair: `a` in namespace `ns_a`, its peer `b` in `ns_b`.
fn veth_pair(a: &str, ns_a: &str, b: &str, ns_b: &str) -> Result<(), LabError> {
    netns::ip(&[
        "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ])
    .map(|_| ())
}

/// Client address of path `i`: `10.100.i.1`.
pub fn client_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, path_octet(i), 1)
}

/// Server address of path `i`: `10.100.i.2`.
pub fn server_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, path_octet(i), 2)
}

fn path_octet(i: usize) -> u8 {
    u8::try_from(i).expect("path index fits a byte")
}

/// Name of path i's interface in the client and in the server namespace.
pub fn path_dev(i: usize) -> String {
    format!("p{i}")
}

/// How the paths are built.
#[derive(Clone, Debug)]
pub enum Links {
    /// Plain veth pairs, unshaped.
    Direct {
        /// Number of paths.
        paths: usize,
    },
    /// Through braid's emulator: per path, client-to-server and server-to-client settings.
    Emulated(Vec<(DirectionConfig, DirectionConfig)>),
}

impl Links {
    fn count(&self) -> usize {
        match self {
            Links::Direct { paths } => *paths,
            Links::Emulated(v) => v.len(),
        }
    }
}

/// One path of a testbed.
#[derive(Clone, Debug)]
pub struct PathInfo {
    /// Index, from 0.
    pub index: usize,
    /// Interface in the client namespace.
    pub client_dev: String,
    /// Interface in the server namespace.
    pub server_dev: String,
    /// Client address (`10.100.i.1`, /24).
    pub client_addr: Ipv4Addr,
    /// Server address (`10.100.i.2`, /24).
    pub server_addr: Ipv4Addr,
    /// The emulator's namespace (`None` in direct mode).
    pub emulator: Option<Netns>,
}

/// A client, a server and their paths, removed on drop.
pub struct Testbed {
    tag: String,
    client: Netns,
    server: Netns,
    paths: Vec<PathInfo>,
    emulators: Vec<PathEmulator>,
    namespaces: Vec<String>,
}

static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<String>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stop the processes in, and delete, the namespaces of every live testbed of this process
/// (what the signal handler does). Returns how many namespaces were deleted.
pub fn cleanup_all() -> usize {
    let names: Vec<String> = live().drain(..).collect();
    for name in &names {
        Netns::stop_processes(name);
    }
    let mut n = 0;
    for name in names {
        if Netns::delete(&name).is_ok() {
            n += 1;
        }
    }
    n
}

/// Install (once per process) a SIGINT/SIGTERM handler that deletes the namespaces of every
/// live testbed and exits with status 128 + signal. It uses `signal-hook`, which chains with
/// other handlers installed through it.
pub fn install_signal_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ]);
        match signals {
            Ok(mut signals) => {
                let spawned = std::thread::Builder::new()
                    .name("braid-lab-signals".into())
                    .spawn(move || {
                        if let Some(sig) = signals.forever().next() {
                            let n = cleanup_all();
                            eprintln!("braid lab: interrupted; removed {n} network namespaces");
                            std::process::exit(128 + sig);
                        }
                    });
                if let Err(e) = spawned {
                    eprintln!("braid lab: no cleanup on Ctrl-C: {e}");
                }
            }
            Err(e) => eprintln!("braid lab: no cleanup on Ctrl-C: {e}"),
        }
    });
}

/// Namespaces named by the lab whose process is gone (killed with SIGKILL, or a crash that did
/// not unwind). Deletes them and returns their names.
pub fn clean_stale() -> Result<Vec<String>, LabError> {
    let dir = match std::fs::read_dir(netns::NETNS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LabError::io("listing /run/netns", e)),
    };
    let mut removed = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NAMESPACE_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            Netns::stop_processes(&name);
            Netns::delete(&name)?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// The lab's namespaces that exist now (any process).
pub fn lab_namespaces() -> Vec<String> {
    std::fs::read_dir(netns::NETNS_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(NAMESPACE_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

fn unique_tag() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{n}-{:04x}",
        std::process::id(),
        (nanos ^ (nanos >> 16)) & 0xffff
    )
}

impl Testbed {
    /// Build a testbed. `seed` fixes the emulators' loss and jitter draws.
    ///
    /// On error everything created so far is removed.
    pub fn new(links: &Links, seed: u64) -> Result<Testbed, LabError> {
        if !netns::is_root() {
            return Err(LabError::NotRoot);
        }
        let n = links.count();
        if n == 0 || n > 250 {
            return Err(LabError::Emulator(format!("{n} paths: give 1 to 250")));
        }
        install_signal_handler();
        let tag = unique_tag();
        let mut tb = Testbed {
            client: Netns::existing(&format!("{NAMESPACE_PREFIX}{tag}-client")),
            server: Netns::existing(&format!("{NAMESPACE_PREFIX}{tag}-server")),
            tag,
            paths: Vec::new(),
            emulators: Vec::new(),
            namespaces: Vec::new(),
        };
        // On any error, `tb` drops here and removes what was made.
        tb.build(links, seed)?;
        Ok(tb)
    }

    fn create_ns(&mut self, name: &str) -> Result<Netns, LabError> {
        // Registered before it exists, so a signal during creation still removes it.
        live().push(name.to_string());
        self.namespaces.push(name.to_string());
        Netns::create(name)
    }

    fn build(&mut self, links: &Links, seed: u64) -> Result<(), LabError> {
        let client_name = self.client.name().to_string();
        let server_name = self.server.name().to_string();
        let client = self.create_ns(&client_name)?;
        let server = self.create_ns(&server_name)?;
        for ns in [&client, &server] {
            // Path i's replies and MPTCP subflows must not be refused by reverse-path filters;
            // the server answers ARP for its path-0 address on every path (MPTCP subflows).
            for key in [
                "net.ipv4.conf.all.rp_filter",
                "net.ipv4.conf.default.rp_filter",
                "net.ipv4.conf.all.arp_ignore",
                "net.ipv4.conf.default.arp_ignore",
            ] {
                ns.set_sysctl(key, "0")?;
            }
        }
        for i in 0..links.count() {
            let dev = path_dev(i);
            let emulator = match links {
                Links::Direct { .. } => {
                    veth_pair(&dev, &client_name, &dev, &server_name)?;
                    None
                }
                Links::Emulated(_) => {
                    let emu_name = format!("{NAMESPACE_PREFIX}{}-emu{i}", self.tag);
                    let emu = self.create_ns(&emu_name)?;
                    // The emulator is a wire: no IPv6 chatter of its own on the segment.
                    emu.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
                    emu.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
                    veth_pair(&dev, &client_name, "cli", &emu_name)?;
                    veth_pair(&dev, &server_name, "srv", &emu_name)?;
                    for end in ["cli", "srv"] {
                        disable_offloads(&emu, end)?;
                        emu.ip(&["link", "set", end, "up"])?;
                    }
                    disable_offloads(&client, &dev)?;
                    disable_offloads(&server, &dev)?;
                    Some(emu)
                }
            };
            let (ca, sa) = (client_addr(i), server_addr(i));
            client.ip(&["addr", "add", &format!("{ca}/24"), "dev", &dev])?;
            server.ip(&["addr", "add", &format!("{sa}/24"), "dev", &dev])?;
            client.ip(&["link", "set", &dev, "up"])?;
            server.ip(&["link", "set", &dev, "up"])?;
            // Source routing: a socket bound to path i's address leaves by path i, whatever
            // 10.100.x.x address it talks to (MPTCP subflows go to the server's path-0
            // address). The server needs no rule: its connected route to 10.100.i.0/24 sends
            // replies back over path i, also for subflows that reached its path-0 address.
            let table = (ROUTE_TABLE_BASE + i as u32).to_string();
            client.ip(&[
                "rule",
                "add",
                "from",
                &ca.to_string(),
                "table",
                &table,
                "pref",
                &table,
            ])?;
            client.ip(&[
                "route",
                "add",
                "10.100.0.0/16",
                "dev",
                &dev,
                "src",
                &ca.to_string(),
                "table",
                &table,
            ])?;
            self.paths.push(PathInfo {
                index: i,
                client_dev: dev.clone(),
                server_dev: dev,
                client_addr: ca,
                server_addr: sa,
                emulator,
            });
        }
        if let Links::Emulated(configs) = links {
            for (i, (fwd, rev)) in configs.iter().enumerate() {
                let Some(emu_ns) = self.paths[i].emulator.clone() else {
                    continue;
                };
                let ends = crate::emulator::Ends {
                    client_side: "cli".into(),
                    server_side: "srv".into(),
                };
                let path_seed = seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(i as u64 + 1);
                self.emulators.push(PathEmulator::start(
                    &emu_ns,
                    &ends,
                    fwd.clone(),
                    rev.clone(),
                    path_seed,
                )?);
            }
        }
        Ok(())
    }

    /// The client namespace.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The server namespace.
    pub fn server(&self) -> &Netns {
        &self.server
    }

    /// The paths.
    pub fn paths(&self) -> &[PathInfo] {
        &self.paths
    }

    /// Whether the paths go through the emulator.
    pub fn is_emulated(&self) -> bool {
        !self.emulators.is_empty()
    }

    /// Names of all namespaces of this testbed.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Start every emulator's schedule now (call as a transfer starts).
    pub fn restart_schedules(&self) {
        for e in &self.emulators {
            e.restart_schedule();
        }
    }

    /// Emulator counters of every path (empty in direct mode).
    pub fn counters(&self) -> Vec<PathCounters> {
        self.emulators.iter().map(|e| e.counters()).collect()
    }

    /// The first emulator failure (a direction thread that stopped on its own), if any.
    pub fn emulator_failure(&self) -> Option<String> {
        self.emulators
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.failure().map(|f| format!("path {i}: {f}")))
    }

    /// Bytes received so far by the server on each path (interface counters); works in both
    /// modes.
    pub fn server_rx_bytes(&self) -> Result<Vec<u64>, LabError> {
        self.paths
            .iter()
            .map(|p| self.server.dev_bytes(&p.server_dev).map(|(rx, _)| rx))
            .collect()
    }

    /// Stop the emulators and delete the namespaces, reporting the first error (drop does
    /// the same silently).
    pub fn close(mut self) -> Result<(), LabError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), LabError> {
        let mut first = Ok(());
        for mut e in self.emulators.drain(..) {
            let r = e.stop();
            if first.is_ok() {
                first = r;
            }
        }
        for name in self.namespaces.drain(..).rev() {
            let r = Netns::delete(&name);
            live().retain(|n| n != &name);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("braid lab: cleanup: {e}");
        }
    }
}

fn disable_offloads(ns: &Netns, dev: &str) -> Result<(), LabError> {
    let d = dev.to_string();
    let changes: Vec<(&str, bool)> = OFFLOADS_OFF.iter().map(|f| (*f, false)).collect();
    let features = ns
        .run(move || {
            sys::ethtool_set_features(&d, &changes)?;
            sys::ethtool_features(&d)
        })?
        .map_err(|e| LabError::io(format!("ethtool features of {dev} in {}", ns.name()), e))?;
    for must in ["tx-tcp-segmentation", "tx-generic-segmentation", "rx-gro"] {
        if features.iter().any(|(n, on)| n == must && *on) {
            return Err(LabError::Emulator(format!(
                "could not switch {must} off on {dev} in {}",
                ns.name()
            )));
        }
    }
    Ok(())
}

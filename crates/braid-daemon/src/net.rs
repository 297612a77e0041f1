//! The OS-facing part: the TUN device, addresses and routes, and the UDP sockets.

use crate::config::{Config, PathConfig};
use crate::{DaemonError, PRIVILEGE_HINT};
use braid_session::Role;
use mio::net::UdpSocket;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

/// Run `ip ARGS`, turning a failure into a message that quotes the command.
pub(crate) fn ip(args: &[&str], what: String) -> Result<(), DaemonError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| DaemonError::Ip {
            what: what.clone(),
            detail: format!("cannot run `ip` (iproute2): {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(DaemonError::Ip {
            what,
            detail: format!(
                "`ip {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// Packets per TUN batch: segments of one TSO super-packet read, and packets per write batch.
pub const TUN_BATCH: usize = tun_rs::IDEAL_BATCH_SIZE;

/// Room of one write buffer: the virtio header twice (tun-rs's rule) and a 64 KiB super-packet.
const GRO_ROOM: usize = 2 * tun_rs::VIRTIO_NET_HDR_LEN + 65_536;

/// The TUN device with batch buffers on both sides.
///
/// With offload (`IFF_VNET_HDR`, TSO and USO) the kernel hands over TCP and UDP super-packets
/// of up to 64 KiB, which [`Tun::read`] splits into MTU-sized segments (one system call for up
/// to [`TUN_BATCH`] packets), and [`Tun::write`] coalesces delivered segments of a flow back
/// into super-packets with a reused GRO table. Without offload the same calls move one packet
/// per system call (tun-rs handles both).
pub struct Tun {
    dev: tun_rs::SyncDevice,
    offload: bool,
    /// Raw read buffer: virtio header plus a super-packet.
    raw: Vec<u8>,
    /// Segments of the last read; `segs[next..count]` are not yet taken by the bond.
    segs: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    next: usize,
    count: usize,
    /// Packets waiting to be written, each after [`tun_rs::VIRTIO_NET_HDR_LEN`] bytes of room
    /// for the virtio header; `out[..queued]` are in use, the rest kept for their capacity.
    out: Vec<Vec<u8>>,
    queued: usize,
    gro: tun_rs::GROTable,
}

/// What [`Tun::write`] did.
pub struct Written {
    /// Packets handed to the kernel.
    pub packets: u64,
    /// Packets in batches the kernel refused at least in part.
    pub failed: u64,
}

impl Tun {
    /// Whether the kernel's offloads are on.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// The descriptor to poll.
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.dev.as_raw_fd()
    }

    /// Make room for packets of up to `mtu` bytes (the MTU may grow at run time).
    pub fn set_mtu(&mut self, mtu: u16) {
        let room = usize::from(mtu).max(1500);
        for s in &mut self.segs {
            if s.len() < room {
                s.resize(room, 0);
            }
        }
    }

    /// The next packet of the last read that the bond has not taken, if any.
    pub fn pending(&self) -> Option<&[u8]> {
        if self.next >= self.count {
            return None;
        }
        self.segs.get(self.next)?.get(..*self.sizes.get(self.next)?)
    }

    /// The bond took [`Tun::pending`]'s packet.
    pub fn advance(&mut self) {
        self.next = (self.next + 1).min(self.count);
    }

    /// Read one batch once everything pending is taken: the number of packets read. A
    /// super-packet that does not split (malformed, or more segments than [`TUN_BATCH`]) is an
    /// error of kind `InvalidInput` or `Other` and is dropped; `WouldBlock` means nothing is
    /// waiting.
    ///
    /// # Panics
    ///
    /// If packets of the previous batch are still pending.
    pub fn read(&mut self) -> io::Result<usize> {
        assert!(self.pending().is_none(), "Tun::read with packets pending");
        self.next = 0;
        self.count = 0;
        let n = self
            .dev
            .recv_multiple(&mut self.raw, &mut self.segs, &mut self.sizes, 0)?;
        self.count = n.min(self.segs.len());
        Ok(self.count)
    }

    /// A buffer to fill with the next packet for the kernel: `extend_from_slice` the packet
    /// onto it (it holds the virtio header's room already). `None` when the batch is full:
    /// [`Tun::write`] first.
    pub fn queue(&mut self) -> Option<&mut Vec<u8>> {
        let b = self.out.get_mut(self.queued)?;
        self.queued += 1;
        b.clear();
        b.resize(tun_rs::VIRTIO_NET_HDR_LEN, 0);
        Some(b)
    }

    /// Whether the write batch is full.
    pub fn queue_full(&self) -> bool {
        self.queued >= self.out.len()
    }

    /// Write the queued packets, coalescing them where offload allows.
    pub fn write(&mut self) -> Written {
        let n = std::mem::take(&mut self.queued);
        if n == 0 {
            return Written {
                packets: 0,
                failed: 0,
            };
        }
        let ok = self
            .dev
            .send_multiple(
                &mut self.gro,
                &mut self.out[..n],
                tun_rs::VIRTIO_NET_HDR_LEN,
            )
            .is_ok();
        let n = n as u64;
        if ok {
            Written {
                packets: n,
                failed: 0,
            }
        } else {
            Written {
                packets: 0,
                failed: n,
            }
        }
    }
}

/// Who holds a route of exactly `prefix` in the main table now (`ip route show exact`) at a
/// metric that `ip route replace` without one (IPv4 0, IPv6 1024) would replace (the same)
/// or that would win over braid's (a lower one): its device, or its type for a route without
/// one (`blackhole`, `unreachable`...), and its metric. A route of a higher metric lives
/// beside braid's and loses to it. None if `ip` cannot tell.
fn route_holders(prefix: &str) -> Vec<(String, u32)> {
    let v6 = prefix.contains(':');
    let Ok(out) = Command::new("ip")
        .args([
            if v6 { "-6" } else { "-4" },
            "route",
            "show",
            "exact",
            prefix,
        ])
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    route_holders_in(&String::from_utf8_lossy(&out.stdout), v6)
}

/// The metric `ip route replace` gives a route without one.
fn braid_metric(v6: bool) -> u32 {
    if v6 {
        1024
    } else {
        0
    }
}

/// [`route_holders`] from `ip route show`'s text: a route is a line that does not start
/// with white space, and the `nexthop` lines indented under it.
fn route_holders_in(text: &str, v6: bool) -> Vec<(String, u32)> {
    let ours = braid_metric(v6);
    let mut routes: Vec<String> = Vec::new();
    for line in text.lines() {
        match routes.last_mut() {
            Some(r) if line.starts_with(char::is_whitespace) => {
                r.push(' ');
                r.push_str(line.trim());
            }
            _ if !line.trim().is_empty() => routes.push(line.trim().to_owned()),
            _ => {}
        }
    }
    routes
        .iter()
        .filter_map(|r| {
            let words: Vec<&str> = r.split_whitespace().collect();
            let after = |key: &str| {
                words
                    .iter()
                    .position(|w| *w == key)
                    .and_then(|i| words.get(i + 1).copied())
            };
            let metric = after("metric").and_then(|m| m.parse().ok()).unwrap_or(ours);
            let holder = after("dev").unwrap_or(words.first().copied().unwrap_or("?"));
            (metric <= ours).then(|| (holder.to_owned(), metric))
        })
        .collect()
}

/// Route `routes` into the device `name` (`ip route replace`). A route of the same prefix
/// through another device is not taken over (it belongs to another braid, a VPN or the
/// host's own uplink, and the host would lose it when braid exits: the kernel drops a
/// device's routes with it), nor one that would win over braid's (a lower metric). Every
/// route that can be is installed; the error names those that cannot.
pub(crate) fn install_routes<'a>(
    name: &str,
    routes: impl IntoIterator<Item = &'a crate::config::Cidr>,
) -> Result<(), DaemonError> {
    let mut problems = Vec::new();
    for r in routes {
        let prefix = r.to_string();
        let v6 = !r.addr.is_ipv4();
        if let Some((other, metric)) = route_holders(&prefix).into_iter().find(|(d, _)| d != name) {
            let everything = match (r.prefix, v6) {
                (0, false) => "; to send everything through braid, route 0.0.0.0/1 and 128.0.0.0/1 instead, which win over the default route without replacing it",
                (0, true) => "; to send everything through braid, route ::/1 and 8000::/1 instead, which win over the default route without replacing it",
                _ => "",
            };
            let what = if metric == braid_metric(v6) {
                "which braid would take over (and the host would lose when braid exits)"
            } else {
                "at a lower metric than braid's, so it would win and nothing would enter the tunnel"
            };
            problems.push(format!(
                "the host already routes {r} through {other} (metric {metric}), {what}: if another braid or a VPN uses it, stop that one or take {r} out of this config's routes; if it is stale, remove it (`ip route del {r}`){everything}"
            ));
            continue;
        }
        if let Err(e) = ip(
            &["route", "replace", &prefix, "dev", name],
            format!("route {r} via {name}"),
        ) {
            problems.push(e.to_string());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(DaemonError::Ip {
            what: format!("routes via {name}"),
            detail: problems.join("; and "),
        })
    }
}

/// Why `name` cannot be braid's TUN device, if an interface of that name exists that is no
/// TUN device (a veth, the loopback, an Ethernet card): the kernel then refuses the TUN with a
/// bare "Invalid argument". TUN and TAP devices have `tun_flags` in sysfs.
pub fn taken_by_other_device(name: &str) -> Option<String> {
    let dir = std::path::Path::new("/sys/class/net").join(name);
    if !dir.exists() || dir.join("tun_flags").exists() {
        return None;
    }
    Some(format!(
        "an interface named {name} already exists and is no TUN device (`ip link show {name}`): \
         choose another interface.name"
    ))
}

/// Create the TUN device with its MTU, addresses and routes, up and non-blocking. With
/// `offload`, ask for the kernel's TSO/USO offloads; if the kernel refuses, say so once and
/// fall back to one packet per system call.
pub fn open_tun(cfg: &Config, mtu: u16) -> Result<Tun, DaemonError> {
    if let Some(why) = taken_by_other_device(&cfg.ifname) {
        return Err(DaemonError::TunNameTaken {
            name: cfg.ifname.clone(),
            why,
        });
    }
    let tun_err = |e: io::Error| {
        let hint = match e.kind() {
            io::ErrorKind::PermissionDenied => PRIVILEGE_HINT,
            io::ErrorKind::NotFound => " (is the tun module loaded? /dev/net/tun must exist)",
            _ if e.raw_os_error() == Some(libc::EBUSY) => {
                " (another process holds this interface name: stop it or choose another interface.name)"
            }
            _ if e.raw_os_error() == Some(libc::EPERM) => PRIVILEGE_HINT,
            _ => "",
        };
        DaemonError::Tun {
            name: cfg.ifname.clone(),
            err: e,
            hint,
        }
    };
    let build = |offload: bool| {
        tun_rs::DeviceBuilder::new()
            .name(&cfg.ifname)
            .mtu(mtu)
            .offload(offload)
            .build_sync()
    };
    let dev = if cfg.offload {
        match build(true) {
            Ok(d) => d,
            // EBUSY: another process holds the name, which the second try reports alone.
            Err(e)
                if e.kind() != io::ErrorKind::PermissionDenied
                    && e.raw_os_error() != Some(libc::EBUSY) =>
            {
                eprintln!(
                    "braid: TUN offload unavailable on {} ({e}): one packet per system call",
                    cfg.ifname
                );
                build(false).map_err(tun_err)?
            }
            Err(e) => return Err(tun_err(e)),
        }
    } else {
        build(false).map_err(tun_err)?
    };
    dev.set_nonblocking(true).map_err(tun_err)?;
    let offload = dev.tcp_gso();
    let name = &cfg.ifname;
    // A handed address replaced by another of the same prefix: the new one, added first as a
    // secondary, becomes the primary when the old goes, instead of going with it.
    let _ = std::fs::write(
        format!("/proc/sys/net/ipv4/conf/{name}/promote_secondaries"),
        "1",
    );
    for a in &cfg.addresses {
        ip(
            &["addr", "add", &a.to_string(), "dev", name],
            format!("address {a} on {name}"),
        )?;
    }
    ip(&["link", "set", "dev", name, "up"], format!("{name} up"))?;
    // The interface's routes, and a server's routes to the prefixes behind its clients.
    let client_routes = cfg.peers.iter().flat_map(|p| &p.routes);
    install_routes(name, cfg.routes.iter().chain(client_routes))?;
    let room = usize::from(mtu).max(1500);
    Ok(Tun {
        dev,
        offload,
        raw: vec![0u8; tun_rs::VIRTIO_NET_HDR_LEN + 65_536],
        segs: vec![vec![0u8; room]; TUN_BATCH],
        sizes: vec![0; TUN_BATCH],
        next: 0,
        count: 0,
        // tun-rs coalesces only into a buffer that has the room for the whole super-packet
        // already (it never reallocates); the pages are touched only as they fill.
        out: (0..TUN_BATCH)
            .map(|_| Vec::with_capacity(GRO_ROOM))
            .collect(),
        queued: 0,
        gro: tun_rs::GROTable::default(),
    })
}

/// CPU time this process has used so far: (user, system) seconds.
pub fn cpu_time_s() -> (f64, f64) {
    // SAFETY: an all-zero `rusage` is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a pointer to a live, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(usage.ru_utime), s(usage.ru_stime))
}

fn udp_socket(family_v6: bool) -> io::Result<Socket> {
    let domain = if family_v6 {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_nonblocking(true)?;
    grow_buffers(&s);
    Ok(s)
}

/// Socket buffer bytes asked for on each UDP socket: room for bursts at high rates.
const SOCKET_BUFFER: usize = 4 << 20;

/// Ask for [`SOCKET_BUFFER`] within `net.core.{r,w}mem_max`; if that caps it, past the cap
/// with `SO_{RCV,SND}BUFFORCE` (root or CAP_NET_ADMIN), and quietly keep what there is if that
/// is refused too.
fn grow_buffers(s: &Socket) {
    use std::os::fd::AsRawFd;
    let buffer = libc::c_int::try_from(SOCKET_BUFFER).unwrap_or(libc::c_int::MAX);
    // The kernel reports twice what was asked for (its bookkeeping), capped at twice the max.
    if s.set_recv_buffer_size(SOCKET_BUFFER).is_err()
        || s.recv_buffer_size().unwrap_or(0) < SOCKET_BUFFER
    {
        let _ = set_int_option(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            buffer,
        );
    }
    if s.set_send_buffer_size(SOCKET_BUFFER).is_err()
        || s.send_buffer_size().unwrap_or(0) < SOCKET_BUFFER
    {
        let _ = set_int_option(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            buffer,
        );
    }
}

/// The sockets (a client's may be missing: its interface or address is not there yet), the
/// peer address of each path, and the paths' names.
type Sockets = (Vec<Option<UdpSocket>>, Vec<Option<SocketAddr>>, Vec<String>);

/// Turn an OS error on `what` into a [`DaemonError`] with a hint.
fn sock_err(what: String) -> impl Fn(io::Error) -> DaemonError {
    move |e: io::Error| {
        let hint = match e.kind() {
            io::ErrorKind::PermissionDenied => PRIVILEGE_HINT,
            io::ErrorKind::AddrInUse => {
                " (the port is in use: stop the other process or change it)"
            }
            io::ErrorKind::AddrNotAvailable => {
                " (that address is not on this machine: check the path's local address)"
            }
            _ => "",
        };
        DaemonError::Socket {
            what: what.clone(),
            err: e,
            hint,
        }
    }
}

/// What a client's path without a socket waits for, for the log and `braid status`.
pub fn waiting_for(p: &PathConfig) -> String {
    let family = if p.remote.is_ipv6() { "IPv6" } else { "IPv4" };
    match (&p.interface, p.local) {
        (Some(d), None) => format!("interface {d} and an {family} address on it"),
        (Some(d), Some(a)) => format!("interface {d} and local address {a}"),
        (None, Some(a)) => format!("local address {a}"),
        (None, None) => "its socket".to_owned(),
    }
}

/// Whether `e` says a path's interface or local address is not there (now): the path waits for
/// it rather than the daemon failing.
pub fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENXIO | libc::EADDRNOTAVAIL)
    ) || e.kind() == io::ErrorKind::AddrNotAvailable
}

/// The unspecified address of IPv6 (`v6`) or IPv4.
pub(crate) fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

/// A client path's socket, bound to its local address and/or interface; on failure the OS
/// error and what was being opened.
pub fn open_path_socket(p: &PathConfig) -> Result<UdpSocket, (io::Error, String)> {
    if let (Some(dev), None) = (&p.interface, p.local) {
        let v6 = p.remote.is_ipv6();
        if interface_has_address(dev, v6) == Some(false) {
            let family = if v6 { "IPv6" } else { "IPv4" };
            return Err((
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("interface {dev} has no {family} address yet"),
                ),
                format!("path `{}` (interface {dev})", p.name),
            ));
        }
    }
    Ok(UdpSocket::from_std(bound_path_socket(p)?.into()))
}

/// A UDP socket bound as path `p`'s are: its interface, its local address, any port.
fn bound_path_socket(p: &PathConfig) -> Result<Socket, (io::Error, String)> {
    let what = format!("path `{}`", p.name);
    let with = |what: String| move |e: io::Error| (e, what.clone());
    let v6 = p.remote.is_ipv6();
    let s = udp_socket(v6).map_err(with(what.clone()))?;
    if let Some(dev) = &p.interface {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(with(format!("{what} (interface {dev})")))?;
    }
    let local = SocketAddr::new(p.local.unwrap_or(unspecified(v6)), 0);
    s.bind(&local.into()).map_err(with(what))?;
    Ok(s)
}

/// Client whose handshakes go unanswered: what becomes of a datagram to path `p`'s server
/// address `remote`, as far as the kernel hears. A fresh socket bound as the path's and
/// connected (so that ICMP errors reach it) sends one byte, which a server would drop as
/// malformed, and waits up to `wait` for an error: "port unreachable" (nothing listens on that
/// port there) or "host/network unreachable" from a router, or the send itself failing. `None`
/// if nothing comes back, as from a server that runs (and drops it) or a firewall that drops
/// it silently. Blocks for up to `wait`.
pub fn diagnose_path(p: &PathConfig, remote: SocketAddr, wait: Duration) -> Option<String> {
    let s = bound_path_socket(p).ok()?;
    s.set_nonblocking(false).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.connect(&remote.into()).ok()?;
    if let Err(e) = s.send(&[0]) {
        return Some(format!("sending to {remote} fails: {e}"));
    }
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    match s.recv(&mut buf) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Some(format!(
            "{remote} answers \"port unreachable\": nothing listens on port {} there; check the path's `remote` against the server's `listen`",
            remote.port()
        )),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN)
            ) =>
        {
            Some(format!("{remote} is unreachable, a router says ({e})"))
        }
        _ => None,
    }
}

/// Client: one socket per path, bound to its local address and/or interface, sending to the
/// path's remote; a path whose interface or address is not there yet gets `None` (and a note
/// on stderr), any other failure is an error. Server: one socket on `listen`; peers are
/// learned from authenticated packets.
pub fn open_sockets(cfg: &Config) -> Result<Sockets, DaemonError> {
    match cfg.role {
        Role::Responder => {
            let listen = cfg.listen.expect("checked by the config");
            let what = format!("listen address {listen}");
            let s = udp_socket(listen.is_ipv6()).map_err(sock_err(what.clone()))?;
            s.bind(&listen.into()).map_err(sock_err(what))?;
            let s = UdpSocket::from_std(s.into());
            Ok((vec![Some(s)], Vec::new(), Vec::new()))
        }
        Role::Initiator => {
            let mut sockets = Vec::new();
            for p in &cfg.paths {
                match open_path_socket(p) {
                    Ok(s) => sockets.push(Some(s)),
                    Err((e, _)) if is_absent(&e) => {
                        eprintln!(
                            "braid: path `{}`: waiting for {} ({e}; retried every second)",
                            p.name,
                            waiting_for(p)
                        );
                        sockets.push(None);
                    }
                    Err((e, what)) => return Err(sock_err(what)(e)),
                }
            }
            let peers = cfg.paths.iter().map(|p| Some(p.remote)).collect();
            let names = cfg.paths.iter().map(|p| p.name.clone()).collect();
            Ok((sockets, peers, names))
        }
    }
}

/// `SO_ORIGINAL_DST` (`linux/netfilter_ipv4.h`) and `IP6T_SO_ORIGINAL_DST`
/// (`linux/netfilter_ipv6/ip6_tables.h`): both 80, at `SOL_IP` and `SOL_IPV6`.
const SO_ORIGINAL_DST: libc::c_int = 80;

/// `getsockopt(fd, level, name)` into a `T` the kernel fills (a plain C struct).
///
/// # Safety
/// `T` must be valid for any bytes (plain integers and byte arrays), as the sockaddr types
/// are.
unsafe fn get_option<T>(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    // SAFETY: the caller promises all zeroes (and anything the kernel writes) is a valid `T`.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes, and the kernel writes at most `len`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where a TCP connection redirected by nftables (`redirect`, `dnat`) was going: the
/// conntrack entry's original destination. An error for a connection nothing redirected.
pub(crate) fn original_dst(fd: std::os::fd::RawFd, ipv6: bool) -> io::Result<SocketAddr> {
    if ipv6 {
        // SAFETY: sockaddr_in6 is plain integers and byte arrays.
        let a: libc::sockaddr_in6 = unsafe { get_option(fd, libc::SOL_IPV6, SO_ORIGINAL_DST)? };
        let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
        Ok(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
    } else {
        // SAFETY: sockaddr_in is plain integers and byte arrays.
        let a: libc::sockaddr_in = unsafe { get_option(fd, libc::SOL_IP, SO_ORIGINAL_DST)? };
        let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
        Ok(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
    }
}

/// A non-blocking TCP listener on `at`; an IPv6 one takes IPv6 only (an IPv4 listener on the
/// same port takes the rest).
pub(crate) fn tcp_listener(at: SocketAddr) -> io::Result<mio::net::TcpListener> {
    let s = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))?;
    if at.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.bind(&at.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(mio::net::TcpListener::from_std(s.into()))
}

/// A non-blocking TCP connect to `dst` from `src`, an address this host need not own
/// (`IP_TRANSPARENT`; root or `CAP_NET_ADMIN`), the socket carrying `SO_MARK` `mark`: the
/// server's transparent onward connection of accelerated TCP (`accel`). The source port is
/// `src`'s where it is free, else one the kernel picks.
pub fn connect_transparent(
    src: SocketAddr,
    dst: SocketAddr,
    mark: u32,
) -> io::Result<mio::net::TcpStream> {
    use std::os::fd::AsRawFd;
    let s = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))?;
    if dst.is_ipv4() {
        s.set_ip_transparent(true)?;
    } else {
        set_int_option(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_TRANSPARENT, 1)?;
    }
    s.set_mark(mark)?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    if let Err(e) = s.bind(&src.into()) {
        if e.kind() != io::ErrorKind::AddrInUse {
            return Err(e);
        }
        s.bind(&SocketAddr::new(src.ip(), 0).into())?;
    }
    match s.connect(&dst.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        // The 4-tuple is still taken (a connection of the same ports in TIME_WAIT): from
        // another port of the same address.
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) && src.port() != 0 => {
            return connect_transparent(SocketAddr::new(src.ip(), 0), dst, mark);
        }
        Err(e) => return Err(e),
    }
    Ok(mio::net::TcpStream::from_std(s.into()))
}

/// `setsockopt(fd, level, name, value)` for an integer option.
pub(crate) fn set_int_option(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a c_int option value of the size given; a bad fd only makes the call fail.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This host's addresses (in this network namespace), each with its interface's name, by
/// `getifaddrs`; `None` if they cannot be listed.
pub(crate) fn interface_addresses() -> Option<Vec<(String, IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            let addr = match family {
                libc::AF_INET => {
                    // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    // SAFETY: AF_INET6: the sockaddr is a sockaddr_in6.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    Some(IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            };
            if let Some(addr) = addr {
                // SAFETY: a non-null ifa_name is a NUL-terminated C string of the list.
                let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
                out.push((name.to_string_lossy().into_owned(), addr));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Some(out)
}

/// Whether `ip` is an address of one of this host's interfaces (in this network namespace),
/// by `getifaddrs`. `false` if they cannot be listed.
pub fn is_local_address(ip: IpAddr) -> bool {
    interface_addresses().is_some_and(|all| all.iter().any(|(_, a)| *a == ip))
}

/// Whether interface `dev` has an address of IPv6 (`v6`) or IPv4 to send from (not a
/// link-local one): without one, a socket bound to the interface sends with another
/// interface's address, which the far end takes for the path moving there. `None` if the
/// addresses cannot be listed.
pub fn interface_has_address(dev: &str, v6: bool) -> Option<bool> {
    Some(has_address(&interface_addresses()?, dev, v6))
}

/// [`interface_has_address`] in a list [`interface_addresses`] made.
pub(crate) fn has_address(all: &[(String, IpAddr)], dev: &str, v6: bool) -> bool {
    all.iter().any(|(name, a)| {
        name == dev
            && match a {
                IpAddr::V4(a) => !v6 && !a.is_link_local(),
                IpAddr::V6(a) => v6 && (a.segments()[0] & 0xffc0) != 0xfe80,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loopback is no TUN device: a TUN of its name is refused with a message naming it,
    /// not the kernel's bare "Invalid argument". A name nothing holds is free.
    #[test]
    fn a_tun_name_held_by_another_kind_of_device_is_named() {
        let why = taken_by_other_device("lo").expect("lo is no TUN device");
        assert!(
            why.contains("lo") && why.contains("interface.name"),
            "{why}"
        );
        assert_eq!(taken_by_other_device("braid-none-9"), None);
    }

    #[test]
    fn a_route_is_held_by_its_device_or_its_type_at_the_metric_braid_would_replace() {
        let held = |text: &str, v6: bool| -> Vec<String> {
            route_holders_in(text, v6)
                .into_iter()
                .map(|(d, m)| format!("{d} {m}"))
                .collect()
        };
        let v4 = "0.0.0.0/1 dev braid0 scope link \nblackhole 10.9.0.0/16 \n";
        assert_eq!(held(v4, false), ["braid0 0", "blackhole 0"]);
        // A DHCP default route at metric 100 lives beside braid's, which wins at metric 0.
        let dhcp = "default via 10.0.0.1 dev eth0 proto dhcp src 10.0.0.5 metric 100 \n";
        assert!(held(dhcp, false).is_empty());
        let static_default = "default via 10.0.0.1 dev eth0 \n";
        assert_eq!(held(static_default, false), ["eth0 0"]);
        let multipath = "default proto static \n\tnexthop via 10.0.0.1 dev eth0 weight 1 \n\tnexthop via 10.1.0.1 dev eth1 weight 1 \n";
        assert_eq!(held(multipath, false), ["eth0 0"]);
        // IPv6: braid's routes are at 1024, so a router advertisement's default at 100 or a
        // kernel prefix route at 256 would win over it; one at 2048 would not.
        let v6 = "default via fe80::1 dev eth0 proto ra metric 100 pref medium\nfd00::/64 dev eth1 proto kernel metric 256 pref medium\nfd01::/64 dev wg0 metric 2048 pref medium\n";
        assert_eq!(held(v6, true), ["eth0 100", "eth1 256"]);
        assert!(held("", true).is_empty());
    }

    #[test]
    fn loopback_is_local_and_a_documentation_address_is_not() {
        assert!(is_local_address(IpAddr::from([127, 0, 0, 1])));
        assert!(!is_local_address(IpAddr::from([192, 0, 2, 77])));
    }
}

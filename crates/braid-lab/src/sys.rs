//! The OS-facing module: every `unsafe` block of the crate lives here.
//!
//! Thin, checked wrappers over the Linux calls the lab needs and `std` does not offer:
//! `setns`, the thread's timer slack, `ppoll`, `AF_PACKET` sockets with virtio-net headers,
//! the `SIOCETHTOOL` feature ioctls, stream sockets of any protocol (`IPPROTO_MPTCP`),
//! `TCP_INFO` and MPTCP's `MPTCP_INFO` / `MPTCP_TCPINFO`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `IPPROTO_MPTCP` (linux/in.h).
pub const IPPROTO_MPTCP: libc::c_int = 262;
/// `SOL_MPTCP` (linux/socket.h).
const SOL_MPTCP: libc::c_int = 284;
/// `MPTCP_INFO` (linux/mptcp.h).
const MPTCP_INFO: libc::c_int = 1;
/// `MPTCP_TCPINFO` (linux/mptcp.h).
const MPTCP_TCPINFO: libc::c_int = 2;
/// `MPTCP_INFO_FLAG_FALLBACK` (linux/mptcp.h).
const MPTCP_INFO_FLAG_FALLBACK: u32 = 1;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_VNET_HDR` (linux/if_packet.h).
const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_QDISC_BYPASS` (linux/if_packet.h).
const PACKET_QDISC_BYPASS: libc::c_int = 20;

/// Length of the `struct virtio_net_hdr` that prefixes every frame on a packet socket with
/// `PACKET_VNET_HDR` set.
pub const VNET_HDR_LEN: usize = 10;

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// CPU time this process (all its threads) has used so far, user plus system.
pub fn process_cpu_time() -> io::Result<Duration> {
    // SAFETY: an all-zero `rusage` is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a pointer to a live, writable `rusage`.
    cvt(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) })?;
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// Send SIGTERM to process `pid`.
pub fn terminate(pid: libc::pid_t) -> io::Result<()> {
    // SAFETY: kill takes two integers and touches no memory of ours.
    cvt(unsafe { libc::kill(pid, libc::SIGTERM) }).map(drop)
}

/// Move the calling thread into the network namespace `ns` (an open `/run/netns/NAME`).
pub fn setns_net(ns: &File) -> io::Result<()> {
    // SAFETY: `ns` is an open file descriptor for the duration of the call; setns only reads it.
    cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Set the calling thread's timer slack, so that `ppoll` wakes up within microseconds of its
/// deadline instead of the default 50 us later.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(ns.max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    cvt(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) }).map(drop)
}

/// Give the calling thread the real-time policy `SCHED_FIFO` at `priority` (1-99), so that it
/// runs as soon as it wakes instead of waiting for a time slice behind ordinary threads.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the
    // calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }).map(drop)
}

/// Wait until `fd` is readable or `timeout` passes (`None`: forever). Returns whether it is
/// readable. An interrupted wait returns `Ok(false)`.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfd` and `ts` live on this stack frame for the call; one pollfd is passed.
    let ret = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(ret > 0 && pfd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` is a valid c_int for the duration of the call and its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// An `AF_PACKET` raw socket bound to one interface, with virtio-net headers: every frame read
/// starts with [`VNET_HDR_LEN`] bytes of `struct virtio_net_hdr` (checksum and segmentation
/// state), and every frame written must start with one. Passing the header through unchanged
/// forwards a frame whose checksum the sender left to offload without computing it.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// A socket that receives every frame arriving on interface `ifindex` (not the ones sent
    /// out of it), non-blocking.
    pub fn receiver(ifindex: u32, rcvbuf_bytes: usize) -> io::Result<PacketSocket> {
        let s = Self::open((libc::ETH_P_ALL as u16).to_be())?;
        let fd = s.fd.as_raw_fd();
        setsockopt_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1)?;
        setsockopt_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        let rcvbuf = libc::c_int::try_from(rcvbuf_bytes).unwrap_or(libc::c_int::MAX);
        // SO_RCVBUFFORCE works for root and ignores rmem_max; fall back to SO_RCVBUF.
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, rcvbuf).is_err() {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, rcvbuf)?;
        }
        s.bind((libc::ETH_P_ALL as u16).to_be(), ifindex)?;
        Ok(s)
    }

    /// A socket that sends frames out of interface `ifindex` and receives nothing.
    pub fn sender(ifindex: u32) -> io::Result<PacketSocket> {
        let s = Self::open(0)?;
        let fd = s.fd.as_raw_fd();
        setsockopt_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1)?;
        // Best effort: straight to the driver, no qdisc (veth has none anyway).
        let _ = setsockopt_int(fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        s.bind(0, ifindex)?;
        Ok(s)
    }

    fn open(protocol_be: u16) -> io::Result<PacketSocket> {
        // SAFETY: plain socket(2) call; the returned descriptor is checked and owned below.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(protocol_be),
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
        Ok(PacketSocket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn bind(&self, protocol_be: u16, ifindex: u32) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { MaybeUninit::zeroed().assume_init() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol_be;
        sll.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        cvt(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Read one frame (virtio-net header included) into `buf`. `Ok(None)` when nothing is
    /// waiting. The returned length is the frame's full length, which is larger than
    /// `buf.len()` if the frame was truncated.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        match cvt_size(n) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Send one frame (virtio-net header included).
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes for the duration of the call.
        cvt_size(unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        })
    }

    /// The raw descriptor, for [`wait_readable`].
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn ethtool(ifname: &str, data: *mut libc::c_void) -> io::Result<libc::c_int> {
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} is longer than 15 bytes"),
        ));
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `req` is a valid `struct ifreq` whose `ifr_data` points at a buffer the caller
    // sized for the ethtool command it holds; both outlive the call.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req as *mut IfReq) })
}

/// `struct ethtool_sset_info` with room for one count.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// The names of the ethtool feature bits of `ifname` (`ethtool -k` lists the same), in bit
/// order.
fn feature_names(ifname: &str) -> io::Result<Vec<String>> {
    let mut info = SsetInfo {
        cmd: ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: 1u64 << ETH_SS_FEATURES,
        data: [0],
    };
    ethtool(ifname, (&mut info as *mut SsetInfo).cast())?;
    if info.sset_mask & (1u64 << ETH_SS_FEATURES) == 0 {
        return Err(io::Error::other(
            "the driver has no ethtool feature strings",
        ));
    }
    let count = info.data[0] as usize;
    if count == 0 || count > 1024 {
        return Err(io::Error::other(format!(
            "implausible feature count {count}"
        )));
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let mut buf = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    buf[0] = ETHTOOL_GSTRINGS;
    buf[1] = ETH_SS_FEATURES;
    buf[2] = count as u32;
    ethtool(ifname, buf.as_mut_ptr().cast())?;
    let n = (buf[2] as usize).min(count);
    // SAFETY: `buf` holds 12 + count * 32 initialised bytes; we read them as bytes.
    let bytes: &[u8] =
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 4) };
    Ok((0..n)
        .map(|i| {
            let s = &bytes[12 + i * ETH_GSTRING_LEN..12 + (i + 1) * ETH_GSTRING_LEN];
            let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        })
        .collect())
}

/// The active ethtool features of `ifname` in the calling thread's namespace, by name.
pub fn ethtool_features(ifname: &str) -> io::Result<Vec<(String, bool)>> {
    let names = feature_names(ifname)?;
    let blocks = names.len().div_ceil(32);
    // struct ethtool_gfeatures { u32 cmd; u32 size; { u32 available, requested, active,
    // never_changed }[size] }
    let mut buf = vec![0u32; 2 + 4 * blocks];
    buf[0] = ETHTOOL_GFEATURES;
    buf[1] = blocks as u32;
    ethtool(ifname, buf.as_mut_ptr().cast())?;
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let active = buf[2 + 4 * (i / 32) + 2] & (1 << (i % 32)) != 0;
            (n, active)
        })
        .collect())
}

/// Switch the named ethtool features of `ifname` on or off (`ethtool -K`). Names the driver
/// does not have are ignored; a feature the driver cannot change is left as it is (check with
/// [`ethtool_features`]).
pub fn ethtool_set_features(ifname: &str, changes: &[(&str, bool)]) -> io::Result<()> {
    let names = feature_names(ifname)?;
    let blocks = names.len().div_ceil(32);
    // struct ethtool_sfeatures { u32 cmd; u32 size; { u32 valid, requested }[size] }
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[0] = ETHTOOL_SFEATURES;
    buf[1] = blocks as u32;
    for (name, on) in changes {
        if let Some(i) = names.iter().position(|n| n == name) {
            buf[2 + 2 * (i / 32)] |= 1 << (i % 32);
            if *on {
                buf[2 + 2 * (i / 32) + 1] |= 1 << (i % 32);
            }
        }
    }
    ethtool(ifname, buf.as_mut_ptr().cast()).map(drop)
}

/// Transport protocol of a stream socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamProto {
    /// Plain TCP.
    Tcp,
    /// Kernel multipath TCP (`IPPROTO_MPTCP`).
    Mptcp,
}

/// A new IPv4 stream socket of `proto` in the calling thread's namespace.
pub fn stream_socket(proto: StreamProto) -> io::Result<OwnedFd> {
    let p = match proto {
        StreamProto::Tcp => libc::IPPROTO_TCP,
        StreamProto::Mptcp => IPPROTO_MPTCP,
    };
    // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, p) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr_in(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// `bind(2)` to an IPv4 address.
pub fn bind_v4(fd: &OwnedFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr_in(addr);
    // SAFETY: `sa` is a valid sockaddr_in and its exact size is passed.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `listen(2)`.
pub fn listen(fd: &OwnedFd, backlog: i32) -> io::Result<()> {
    // SAFETY: plain listen(2) on a descriptor we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(drop)
}

/// A blocking `connect(2)` to an IPv4 address (the socket's send timeout bounds it).
pub fn connect_v4(fd: &OwnedFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr_in(addr);
    // SAFETY: `sa` is a valid sockaddr_in and its exact size is passed.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Set the IPv4 TOS byte (DSCP << 2) of a socket's packets.
pub fn set_tos(fd: RawFd, tos: u8) -> io::Result<()> {
    let v: libc::c_int = tos.into();
    // SAFETY: `v` is a valid c_int for the duration of the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_TOS,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `TCP_CONGESTION`: the socket's congestion control (works on MPTCP sockets too, for every
/// subflow). Root may choose any algorithm the kernel has, not only the allowed ones.
pub fn set_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: `name` is valid for reads of `name.len()` bytes for the duration of the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt(IPPROTO_TCP, option)` into `buf`; the bytes the kernel wrote.
fn tcp_option(fd: RawFd, option: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is valid for writes of `len` bytes; the kernel writes at most `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            option,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(buf.len()))
}

/// The socket's congestion control (`TCP_CONGESTION`).
pub fn congestion(fd: RawFd) -> io::Result<String> {
    let mut buf = [0u8; 16];
    let n = tcp_option(fd, libc::TCP_CONGESTION, &mut buf)?;
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `SO_REUSEADDR`.
pub fn set_reuseaddr(fd: &OwnedFd) -> io::Result<()> {
    setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

/// `SO_LINGER` with a zero timeout: `close` resets the connection and discards unsent data, so
/// nothing of one measurement is still in flight during the next.
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `l` is a valid struct linger and its exact size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `send(2)` with `MSG_NOSIGNAL`: a reset connection gives `EPIPE`, never `SIGPIPE`.
pub fn send_nosignal(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the duration of the call.
    cvt_size(unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) })
}

/// The kernel's `struct tcp_info` for a TCP socket (or, on an MPTCP socket, whatever the
/// kernel answers for `SOL_TCP`/`TCP_INFO`).
pub fn tcp_info(fd: RawFd) -> io::Result<libc::tcp_info> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a zeroed tcp_info of `len` bytes; the kernel writes at most `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    if (len as usize) < 104 {
        return Err(io::Error::other(format!(
            "TCP_INFO returned only {len} bytes"
        )));
    }
    // SAFETY: zero-initialised plain old data, partly overwritten by the kernel.
    Ok(unsafe { info.assume_init() })
}

/// Offset of `tcpi_dsack_dups` in the kernel's `struct tcp_info` (Linux 5.10 on; the libc
/// crate's struct stops at `tcpi_total_retrans`, 104 bytes).
const TCPI_DSACK_DUPS: usize = 216;

/// The kernel's `TcpExt` counters of the calling thread's network namespace
/// (`/proc/thread-self/net/netstat`): loss probes, RTOs, D-SACKs received and the like.
pub fn tcp_ext_counters() -> io::Result<std::collections::BTreeMap<String, u64>> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netstat")?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no TcpExt lines",
        ));
    };
    Ok(names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .filter_map(|(n, v)| Some((n.to_owned(), v.parse().ok()?)))
        .collect())
}

/// `tcpi_dsack_dups` of a TCP socket: D-SACK blocks the sender received, each a retransmission
/// the receiver already had (a spurious one). `None` on a kernel whose `tcp_info` is shorter.
pub fn tcp_dsack_dups(fd: RawFd) -> io::Result<Option<u32>> {
    let mut buf = [0u8; 256];
    let got = tcp_option(fd, libc::TCP_INFO, &mut buf)?;
    Ok(buf
        .get(TCPI_DSACK_DUPS..TCPI_DSACK_DUPS + 4)
        .filter(|_| got >= TCPI_DSACK_DUPS + 4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
}

/// What `MPTCP_INFO` says about an MPTCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MptcpInfo {
    /// Subflows beyond the first (`mptcpi_subflows`).
    pub extra_subflows: u8,
    /// The connection fell back to plain TCP.
    pub fallback: bool,
}

/// `getsockopt(SOL_MPTCP, MPTCP_INFO)`.
pub fn mptcp_info(fd: RawFd) -> io::Result<MptcpInfo> {
    // struct mptcp_info: u8 x6, u32 flags at offset 8 ... (at least 40 bytes)
    let mut buf = [0u64; 8];
    let mut len = size_of::<[u64; 8]>() as libc::socklen_t;
    // SAFETY: `buf` is 64 writable bytes and `len` says so.
    cvt(unsafe { libc::getsockopt(fd, SOL_MPTCP, MPTCP_INFO, buf.as_mut_ptr().cast(), &mut len) })?;
    if len < 12 {
        return Err(io::Error::other("MPTCP_INFO answered with no data"));
    }
    // SAFETY: `buf` is initialised; read it as bytes.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), 64) };
    let flags = u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    Ok(MptcpInfo {
        extra_subflows: bytes[0],
        fallback: flags & MPTCP_INFO_FLAG_FALLBACK != 0,
    })
}

/// `getsockopt(SOL_MPTCP, MPTCP_TCPINFO)`: the `tcp_info` of every subflow (at most 16).
pub fn mptcp_subflow_tcp_info(fd: RawFd) -> io::Result<Vec<libc::tcp_info>> {
    const MAX: usize = 16;
    const HDR: usize = 16; // struct mptcp_subflow_data, aligned(8)
    let elem = size_of::<libc::tcp_info>();
    let total = HDR + MAX * elem;
    let mut buf = vec![0u64; total.div_ceil(8)];
    {
        // SAFETY: `buf` holds at least 16 bytes, 8-aligned; we write the four u32 header words.
        let words = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u32>(), 4) };
        words[0] = HDR as u32; // size_subflow_data
        words[1] = 0; // num_subflows (set by the kernel)
        words[2] = 0; // size_kernel (set by the kernel)
        words[3] = elem as u32; // size_user
    }
    let mut len = total as libc::socklen_t;
    // SAFETY: `buf` is `total` writable bytes and `len` says so.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            SOL_MPTCP,
            MPTCP_TCPINFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: as above, reading the header back.
    let words = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u32>(), 4) };
    let n = (words[1] as usize).min(MAX);
    let copied = (words[3] as usize).min(elem);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
        // SAFETY: subflow `i`'s record starts at HDR + i * size_user inside `buf` (bounds
        // checked by `n <= MAX` and `copied <= elem`); `info` has room for `elem >= copied`
        // bytes; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf.as_ptr().cast::<u8>().add(HDR + i * words[3] as usize),
                info.as_mut_ptr().cast::<u8>(),
                copied,
            );
            out.push(info.assume_init());
        }
        if HDR + (i + 1) * words[3] as usize > total {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(ethtool("a-name-far-too-long", std::ptr::null_mut()).is_err());
        assert!(if_index("no-such-if-xyz").is_err());
    }

    #[test]
    fn loopback_features_are_listed() {
        // Needs no privilege: reading features is allowed to anyone.
        match ethtool_features("lo") {
            Ok(f) => assert!(f.iter().any(|(n, _)| n == "tx-generic-segmentation")),
            Err(e) => eprintln!("ethtool on lo not available here: {e}"),
        }
    }

    #[test]
    fn the_tos_byte_is_set() {
        let fd = stream_socket(StreamProto::Tcp).unwrap();
        set_tos(fd.as_raw_fd(), 46 << 2).unwrap();
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes for the duration of the call.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_TOS,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        assert_eq!(v, 46 << 2);
    }

    #[test]
    fn the_tcp_ext_counters_are_read() {
        let c = tcp_ext_counters().unwrap();
        for k in crate::traffic::SENDER_TCP_EXT {
            assert!(c.contains_key(k), "{k} missing from {c:?}");
        }
    }

    #[test]
    fn tcp_info_on_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let info = tcp_info(c.as_raw_fd()).unwrap();
        assert_eq!(info.tcpi_state, 1, "ESTABLISHED");
        assert_eq!(info.tcpi_total_retrans, 0);
        // Nothing was resent, so nothing was resent spuriously (None: a kernel before 5.10).
        let dups = tcp_dsack_dups(c.as_raw_fd()).unwrap();
        assert!(matches!(dups, None | Some(0)), "{dups:?}");
    }
}

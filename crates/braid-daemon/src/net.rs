//! The OS-facing part: the TUN device, addresses and routes, and the UDP sockets.

use crate::config::Config;
use crate::{DaemonError, PRIVILEGE_HINT};
use braid_session::Role;
use mio::net::UdpSocket;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;

/// Run `ip ARGS`, turning a failure into a message that quotes the command.
fn ip(args: &[&str], what: String) -> Result<(), DaemonError> {
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

/// Create the TUN device with its MTU, addresses and routes, up and non-blocking.
pub fn open_tun(cfg: &Config, mtu: u16) -> Result<tun_rs::SyncDevice, DaemonError> {
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
    let dev = tun_rs::DeviceBuilder::new()
        .name(&cfg.ifname)
        .mtu(mtu)
        .build_sync()
        .map_err(tun_err)?;
    dev.set_nonblocking(true).map_err(tun_err)?;
    let name = &cfg.ifname;
    for a in &cfg.addresses {
        ip(
            &["addr", "add", &a.to_string(), "dev", name],
            format!("address {a} on {name}"),
        )?;
    }
    ip(&["link", "set", "dev", name, "up"], format!("{name} up"))?;
    for r in &cfg.routes {
        ip(
            &["route", "replace", &r.to_string(), "dev", name],
            format!("route {r} via {name}"),
        )?;
    }
    Ok(dev)
}

fn udp_socket(family_v6: bool) -> io::Result<Socket> {
    let domain = if family_v6 {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_nonblocking(true)?;
    // Room for bursts at high rates; the kernel caps these at net.core.*mem_max.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s)
}

type Sockets = (Vec<UdpSocket>, Vec<Option<SocketAddr>>, Vec<String>);

/// Client: one socket per path, bound to its local address and/or interface, sending to the
/// path's remote. Server: one socket on `listen`; peers are learned from authenticated packets.
pub fn open_sockets(cfg: &Config) -> Result<Sockets, DaemonError> {
    let sock_err = |what: String| {
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
    };
    match cfg.role {
        Role::Responder => {
            let listen = cfg.listen.expect("checked by the config");
            let what = format!("listen address {listen}");
            let s = udp_socket(listen.is_ipv6()).map_err(sock_err(what.clone()))?;
            s.bind(&listen.into()).map_err(sock_err(what))?;
            let s = UdpSocket::from_std(s.into());
            Ok((vec![s], Vec::new(), Vec::new()))
        }
        Role::Initiator => {
            let mut sockets = Vec::new();
            for p in &cfg.paths {
                let what = format!("path `{}`", p.name);
                let v6 = p.remote.is_ipv6();
                let s = udp_socket(v6).map_err(sock_err(what.clone()))?;
                if let Some(dev) = &p.interface {
                    s.bind_device(Some(dev.as_bytes()))
                        .map_err(sock_err(format!("{what} (interface {dev})")))?;
                }
                let unspecified = if v6 {
                    IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                } else {
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                };
                let local = SocketAddr::new(p.local.unwrap_or(unspecified), 0);
                s.bind(&local.into()).map_err(sock_err(what))?;
                sockets.push(UdpSocket::from_std(s.into()));
            }
            let peers = cfg.paths.iter().map(|p| Some(p.remote)).collect();
            let names = cfg.paths.iter().map(|p| p.name.clone()).collect();
            Ok((sockets, peers, names))
        }
    }
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

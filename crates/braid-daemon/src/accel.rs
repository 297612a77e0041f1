//! TCP acceleration in `braid up` (`[tcp] accelerate = true`): TCP routed into the tunnel
//! rides pTCP inside the daemon's own session instead of the striped tunnel, one
//! congestion-controlled micro-flow per path (`docs/ptcp.md`, "Uses: pTCP inside the secure
//! session").
//!
//! The client's kernel redirects such TCP (nftables `redirect`, [`nft_ruleset`]) to a local
//! listener; for each connection the daemon reads the original destination
//! (`SO_ORIGINAL_DST`), opens a pTCP connection and sends a [`Header`] naming the destination
//! before the connection's bytes. The server reads the header, connects onward only where
//! [`onward_allowed`] says the tunnel would have carried the packets, and copies both ways
//! ([`crate::tcp_pair::Pair`], as `braid forward` does).
//!
//! This module holds the sans-IO pieces: the header's wire format, the server's check and
//! the client's ruleset. The daemon's event loop does the I/O.

use crate::config::{Cidr, Config};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first bytes of an accelerated connection.
pub const MAGIC: [u8; 4] = *b"BRTA";
/// The header's version.
pub const VERSION: u8 = 1;

/// What an accelerated connection carries before its bytes: where the client's TCP was going.
///
/// ```text
/// magic "BRTA" (4) | version 1 (1) | family 4 or 6 (1) | port (2, big endian) | address (4 or 16)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The original destination.
    pub dst: SocketAddr,
}

/// Why a header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The connection does not start with [`MAGIC`].
    #[error("not an accelerated connection (no BRTA magic)")]
    Magic,
    /// A version this end does not speak.
    #[error("header version {0}, this end speaks {VERSION}")]
    Version(u8),
    /// An address family other than 4 or 6.
    #[error("address family {0}, not 4 or 6")]
    Family(u8),
}

impl Header {
    /// The longest header (IPv6).
    pub const MAX_LEN: usize = 8 + 16;

    /// Bytes on the wire.
    pub fn buffer_len(&self) -> usize {
        8 + if self.dst.is_ipv4() { 4 } else { 16 }
    }

    /// Appends the header to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(if self.dst.is_ipv4() { 4 } else { 6 });
        out.extend_from_slice(&self.dst.port().to_be_bytes());
        match self.dst.ip() {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
        }
    }

    /// The header at the start of `b` and its length; `Ok(None)` while `b` is too short to
    /// tell. Never panics.
    pub fn parse(b: &[u8]) -> Result<Option<(Header, usize)>, HeaderError> {
        let n = b.len().min(4);
        if b[..n] != MAGIC[..n] {
            return Err(HeaderError::Magic);
        }
        let Some(&version) = b.get(4) else {
            return Ok(None);
        };
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let Some(&family) = b.get(5) else {
            return Ok(None);
        };
        let len = match family {
            4 => 12,
            6 => 24,
            f => return Err(HeaderError::Family(f)),
        };
        let Some(h) = b.get(..len) else {
            return Ok(None);
        };
        let port = u16::from_be_bytes([h[6], h[7]]);
        let ip = match family {
            4 => IpAddr::from(Ipv4Addr::new(h[8], h[9], h[10], h[11])),
            _ => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&h[8..24]);
                IpAddr::from(Ipv6Addr::from(a))
            }
        };
        Ok(Some((
            Header {
                dst: SocketAddr::new(ip, port),
            },
            len,
        )))
    }
}

/// Server: whether a client's accelerated connection to `dst` may be connected onward. The
/// tunnel carries a client's packets to destinations on the server's side, so acceleration
/// does too: the server's own tunnel addresses and anything it reaches outside the tunnel.
/// Refused: what the server would route back into the tunnel (its interface prefixes other
/// than its own addresses, its `[interface] routes`, any `[[client]]`'s addresses and
/// routes), loopback (the tunnel never delivers to it: the server's local-only services stay
/// local), unspecified, multicast and broadcast addresses, and port 0.
pub fn onward_allowed(cfg: &Config, dst: SocketAddr) -> bool {
    let ip = dst.ip();
    if dst.port() == 0 || ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    if let IpAddr::V4(a) = ip {
        if a.is_broadcast() {
            return false;
        }
    }
    if let IpAddr::V6(a) = ip {
        // An IPv4-mapped address would sidestep the IPv4 checks.
        if a.to_ipv4_mapped().is_some() {
            return false;
        }
    }
    if cfg.addresses.iter().any(|a| a.addr == ip) {
        return true;
    }
    let back_into_tunnel = cfg.addresses.iter().any(|a| a.contains(ip))
        || cfg.routes.iter().any(|r| r.contains(ip))
        || cfg.peers.iter().any(|p| !p.catch_all && p.owns(ip));
    !back_into_tunnel
}

/// The name of the nftables table of a daemon's TUN device `ifname`.
pub fn nft_table(ifname: &str) -> String {
    format!("braid_{ifname}")
}

/// Client: an `nft -f` script that (re)creates table `inet <table>` redirecting TCP to the
/// `prefixes` routed into the tunnel (but not to this end's `own` addresses) to local port
/// `port`: locally generated TCP in the `output` hook, forwarded TCP in `prerouting`. The
/// script first creates and deletes the table so that it replaces an old one atomically.
pub fn nft_ruleset(table: &str, prefixes: &[Cidr], own: &[IpAddr], port: u16) -> String {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for p in prefixes {
        let n = p.network().to_string();
        let list = if p.addr.is_ipv4() { &mut v4 } else { &mut v6 };
        if !list.contains(&n) {
            list.push(n);
        }
    }
    let mut s = format!("table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n");
    for (chain, hook) in [("output", "output"), ("prerouting", "prerouting")] {
        let _ = writeln!(
            s,
            "  chain {chain} {{\n    type nat hook {hook} priority -100; policy accept;"
        );
        for a in own {
            let fam = if a.is_ipv4() { "ip" } else { "ip6" };
            let _ = writeln!(s, "    meta l4proto tcp {fam} daddr {a} return");
        }
        for (fam, list) in [("ip", &v4), ("ip6", &v6)] {
            if !list.is_empty() {
                let _ = writeln!(
                    s,
                    "    meta l4proto tcp {fam} daddr {{ {} }} redirect to :{port}",
                    list.join(", ")
                );
            }
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_header_round_trips_and_never_panics() {
        for dst in ["10.77.0.1:5001", "[fd77::1]:443"] {
            let h = Header {
                dst: dst.parse().unwrap(),
            };
            let mut b = Vec::new();
            h.emit(&mut b);
            assert_eq!(b.len(), h.buffer_len());
            b.extend_from_slice(b"payload");
            assert_eq!(Header::parse(&b), Ok(Some((h, h.buffer_len()))));
            // Every prefix is "not yet".
            for n in 0..h.buffer_len() {
                assert_eq!(Header::parse(&b[..n]), Ok(None), "{n}");
            }
        }
        assert_eq!(Header::parse(b"GET / HTTP/1.1"), Err(HeaderError::Magic));
        assert_eq!(Header::parse(b"BRTA\x02"), Err(HeaderError::Version(2)));
        assert_eq!(Header::parse(b"BRTA\x01\x05"), Err(HeaderError::Family(5)));
        // Any bytes: an answer, never a panic.
        let mut x = 0x9e37_79b9_u32;
        for len in 0..64 {
            let mut b = MAGIC.to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                b.push(x as u8);
            }
            let _ = Header::parse(&b);
            let _ = Header::parse(&b[4..]);
        }
    }

    fn server(extra: &str) -> Config {
        let text = format!(
            r#"
role = "server"
private_key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
peer_public_key = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
listen = "0.0.0.0:7000"
[interface]
address = ["10.77.0.1/30"]
routes = ["10.1.0.0/16"]
{extra}
"#
        );
        Config::parse(&text, Path::new("s.toml")).unwrap()
    }

    #[test]
    fn the_server_connects_onward_only_where_the_tunnel_goes() {
        let c = server("[tcp]\naccelerate = true");
        let ok = |s: &str| onward_allowed(&c, s.parse().unwrap());
        // Its own tunnel address and the world beyond it.
        assert!(ok("10.77.0.1:5001"));
        assert!(ok("192.0.2.9:80"));
        assert!(ok("[2001:db8::1]:80"));
        // Back into the tunnel, or local-only, or nonsense.
        assert!(!ok("10.77.0.2:22"));
        assert!(!ok("10.1.2.3:80"));
        assert!(!ok("127.0.0.1:22"));
        assert!(!ok("[::1]:22"));
        assert!(!ok("[::ffff:127.0.0.1]:22"));
        assert!(!ok("0.0.0.0:80"));
        assert!(!ok("224.0.0.1:80"));
        assert!(!ok("255.255.255.255:80"));
        assert!(!ok("10.77.0.1:0"));
    }

    #[test]
    fn the_ruleset_redirects_the_tunnels_prefixes() {
        let p: Vec<Cidr> = ["10.77.0.2/30", "10.1.0.0/16", "fd77::2/64"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let own: Vec<IpAddr> = vec!["10.77.0.2".parse().unwrap()];
        let s = nft_ruleset("braid_braid0", &p, &own, 7199);
        assert!(s.starts_with("table inet braid_braid0\ndelete table inet braid_braid0\n"));
        assert!(s.contains("meta l4proto tcp ip daddr 10.77.0.2 return"));
        assert!(s.contains("ip daddr { 10.77.0.0/30, 10.1.0.0/16 } redirect to :7199"));
        assert!(s.contains("ip6 daddr { fd77::/64 } redirect to :7199"));
        assert!(s.contains("hook output") && s.contains("hook prerouting"));
    }
}

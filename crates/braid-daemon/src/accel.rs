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
//! **Transparent** (`[tcp] transparent`, on by default at the server): the header also names
//! the connection's source, and the server connects onward *from* it (`IP_TRANSPARENT`), so
//! the destination sees the client's address as it would through the striped tunnel. The
//! onward socket carries [`SOCKET_MARK`]; [`nft_transparent_ruleset`] sets [`CONNTRACK_BIT`]
//! in the connection's conntrack mark and [`REPLY_BIT`] in the mark of the packets that come
//! back, which an `ip rule` ([`ip_rule_commands`]) routes to the local table, so they reach the socket instead
//! of following the route to the source into the tunnel. A source the client does not own
//! (`[[client]]` addresses and routes) is refused, as the tunnel drops such packets.
//!
//! This module holds the sans-IO pieces: the header's wire format, the server's checks and
//! the rulesets. The daemon's event loop does the I/O.

use crate::config::{Cidr, Config};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first bytes of an accelerated connection.
pub const MAGIC: [u8; 4] = *b"BRTA";
/// The header's version: 2 names the source too; 1 (the destination only) is still read.
pub const VERSION: u8 = 2;

/// The mark of a transparent onward socket (`SO_MARK`, the whole mark: the socket is
/// braid's own): the nftables rules set [`CONNTRACK_BIT`] in its connection's conntrack mark.
pub const SOCKET_MARK: u32 = 0x6272_0001;
/// The one bit of the conntrack mark that says "a transparent onward connection"; the rest of
/// the conntrack mark is left as other tools set it. [`SOCKET_MARK`] has it too, so a
/// multi-WAN setup that saves whole packet marks into the conntrack mark (`ct mark set meta
/// mark`, iptables' `CONNMARK --save-mark`) keeps it.
pub const CONNTRACK_BIT: u32 = 0x0200_0000;
/// The one bit of the packet mark set on what comes back to a transparent onward socket,
/// routed by the local table ([`REPLY_TABLE`]); the rest of the mark is left as it was.
pub const REPLY_BIT: u32 = 0x0800_0000;
/// The routing table (and the `ip rule` preference) that delivers [`REPLY_BIT`] locally.
pub const REPLY_TABLE: u32 = 25202;

/// What an accelerated connection carries before its bytes: where the client's TCP was going,
/// and where it came from.
///
/// ```text
/// version 1: magic "BRTA" (4) | 1 (1) | family 4 or 6 (1) | dst port (2) | dst address (4 or 16)
/// version 2: magic "BRTA" (4) | 2 (1) | family 4 or 6 (1) | dst port (2) | src port (2)
///            | dst address (4 or 16) | src address (4 or 16)
/// ```
///
/// Ports are big endian. A source of the other family than the destination is not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The original destination.
    pub dst: SocketAddr,
    /// The original source (version 2), for a transparent onward connection.
    pub src: Option<SocketAddr>,
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
    /// The longest header (version 2, IPv6).
    pub const MAX_LEN: usize = 10 + 2 * 16;

    /// The source that goes on the wire: one of the destination's family.
    fn wire_src(&self) -> Option<SocketAddr> {
        self.src.filter(|s| s.is_ipv4() == self.dst.is_ipv4())
    }

    /// Bytes on the wire.
    pub fn buffer_len(&self) -> usize {
        let a = if self.dst.is_ipv4() { 4 } else { 16 };
        match self.wire_src() {
            Some(_) => 10 + 2 * a,
            None => 8 + a,
        }
    }

    /// Appends the header to `out`: version 2 with a source, else version 1.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let octets = |ip: IpAddr, out: &mut Vec<u8>| match ip {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
        };
        out.extend_from_slice(&MAGIC);
        let src = self.wire_src();
        out.push(if src.is_some() { 2 } else { 1 });
        out.push(if self.dst.is_ipv4() { 4 } else { 6 });
        out.extend_from_slice(&self.dst.port().to_be_bytes());
        if let Some(s) = src {
            out.extend_from_slice(&s.port().to_be_bytes());
        }
        octets(self.dst.ip(), out);
        if let Some(s) = src {
            octets(s.ip(), out);
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
        if version != 1 && version != 2 {
            return Err(HeaderError::Version(version));
        }
        let Some(&family) = b.get(5) else {
            return Ok(None);
        };
        let a = match family {
            4 => 4,
            6 => 16,
            f => return Err(HeaderError::Family(f)),
        };
        // Version 2 has the source's port after the destination's, and its address last.
        let ports = if version == 2 { 4 } else { 2 };
        let addrs = if version == 2 { 2 * a } else { a };
        let len = 6 + ports + addrs;
        let Some(h) = b.get(..len) else {
            return Ok(None);
        };
        let ip = |at: usize| -> IpAddr {
            if a == 4 {
                IpAddr::from(Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]))
            } else {
                let mut o = [0u8; 16];
                o.copy_from_slice(&h[at..at + 16]);
                IpAddr::from(Ipv6Addr::from(o))
            }
        };
        let dst = SocketAddr::new(ip(6 + ports), u16::from_be_bytes([h[6], h[7]]));
        let src = (version == 2)
            .then(|| SocketAddr::new(ip(6 + ports + a), u16::from_be_bytes([h[8], h[9]])));
        Ok(Some((Header { dst, src }, len)))
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

/// Server: whether `src`, the source a client names, is an address a transparent onward
/// connection may come from at all: not loopback, unspecified, multicast, broadcast, link-local,
/// "this network" (0.0.0.0/8), reserved (240.0.0.0/4) or IPv4-mapped, and not port 0. Whose
/// address it is (the tunnel's own rule for a client's sources) and whether it is this host's,
/// the daemon checks (`Daemon::source_allowed`).
pub fn transparent_source_plausible(src: SocketAddr) -> bool {
    let ip = src.ip();
    let odd = match ip {
        IpAddr::V4(a) => {
            a.is_broadcast() || a.is_link_local() || a.octets()[0] == 0 || a.octets()[0] >= 240
        }
        IpAddr::V6(a) => a.to_ipv4_mapped().is_some() || (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    src.port() != 0 && !odd && !ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast()
}

/// Server, `[tcp] transparent`: an `nft -f` script that (re)creates table `inet <table>`
/// marking what comes back to a transparent onward socket: a packet of the socket's
/// [`SOCKET_MARK`] sets [`CONNTRACK_BIT`] in its connection's conntrack mark (hook `output`),
/// and packets of such a connection in the reply direction get [`REPLY_BIT`], whether they
/// arrive from outside (`prerouting`; at mangle priority, before any masquerade is undone,
/// which does not matter: the match is on the connection's mark) or come from a local server
/// (`output`, a `route` chain, so the kernel routes them again by the new mark). Only those
/// bits are set and tested: marks other tools (a firewall manager, a container network, a
/// multi-WAN setup) put on the same packets and connections stay.
pub fn nft_transparent_ruleset(table: &str) -> String {
    format!(
        "table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n\
         \x20 chain output {{\n\
         \x20   type route hook output priority mangle; policy accept;\n\
         \x20   meta mark {SOCKET_MARK:#x} ct mark set ct mark or {CONNTRACK_BIT:#x}\n\
         \x20   {reply}\n\
         \x20 }}\n\
         \x20 chain prerouting {{\n\
         \x20   type filter hook prerouting priority mangle; policy accept;\n\
         \x20   {reply}\n\
         \x20 }}\n\
         }}\n",
        reply = reply_rule()
    )
}

/// The rule that marks a transparent onward connection's replies.
fn reply_rule() -> String {
    format!(
        "ct direction reply ct mark and {CONNTRACK_BIT:#x} == {CONNTRACK_BIT:#x} meta mark set meta mark or {REPLY_BIT:#x}"
    )
}

/// `ip`'s arguments as owned strings.
fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|x| (*x).to_owned()).collect()
}

/// Server, `[tcp] transparent`: whether `ruleset` (`nft list ruleset`, after this daemon
/// deleted its own table) still holds another server's transparent table (the rule that
/// marks the connections of [`SOCKET_MARK`]): a second `braid up` in the same network
/// namespace, which still needs the shared `ip` rules ([`ip_rule_commands`]).
pub fn another_transparent_table(ruleset: &str) -> bool {
    let socket = format!("meta mark {SOCKET_MARK:#x} ");
    ruleset
        .lines()
        .any(|l| l.trim().starts_with(&socket) && l.contains("ct mark set"))
}

/// Server, `[tcp] transparent`: the `ip` commands that deliver [`REPLY_BIT`] locally (`add`)
/// or undo that (`add = false`), for IPv4 and IPv6: a rule sending packets with the bit (under
/// its mask) to [`REPLY_TABLE`], whose one route makes every address local.
///
/// Adding is idempotent, as a second server in the namespace needs: the route is replaced, and
/// a rule that is already there ("File exists") counts as added ([`already_there`]).
pub fn ip_rule_commands(add: bool) -> Vec<Vec<String>> {
    let (rule_verb, route_verb) = if add {
        ("add", "replace")
    } else {
        ("del", "del")
    };
    let mut out = Vec::new();
    for (fam, any) in [("-4", "0.0.0.0/0"), ("-6", "::/0")] {
        let mark = reply_fwmark();
        let table = REPLY_TABLE.to_string();
        out.push(words(&[
            fam, "rule", rule_verb, "fwmark", &mark, "lookup", &table, "pref", &table,
        ]));
        out.push(words(&[
            fam, "route", route_verb, "local", any, "dev", "lo", "table", &table,
        ]));
    }
    out
}

/// The `fwmark` of the `ip` rule that delivers [`REPLY_BIT`] locally: the bit under its mask.
pub fn reply_fwmark() -> String {
    format!("{REPLY_BIT:#x}/{REPLY_BIT:#x}")
}

/// Whether `ip`'s complaint `detail` says the rule it was to add is there already.
pub fn already_there(detail: &str) -> bool {
    detail.contains("File exists")
}

/// The `ip rule del` commands for the rule of braid's previous transparent rules, which set
/// the packet mark whole (`fwmark 0x62720002`): a server removes one a daemon of that version
/// left behind.
pub fn legacy_rule_commands() -> Vec<Vec<String>> {
    let table = REPLY_TABLE.to_string();
    ["-4", "-6"]
        .iter()
        .map(|fam| {
            words(&[
                fam,
                "rule",
                "del",
                "fwmark",
                "0x62720002",
                "lookup",
                &table,
                "pref",
                &table,
            ])
        })
        .collect()
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
        // A transparent server's onward connections (the same namespace as a client of
        // its own, in a test) are never redirected back into acceleration.
        let _ = writeln!(s, "    meta mark {SOCKET_MARK:#x} return");
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
    fn another_servers_transparent_table_is_found_in_the_ruleset() {
        // As `nft list ruleset` prints a table of nft_transparent_ruleset.
        let other = "table inet braid_b1 {\n\tchain output {\n\t\ttype route hook output priority mangle; policy accept;\n\t\tmeta mark 0x62720001 ct mark set ct mark | 0x02000000\n\t}\n}\n";
        assert!(another_transparent_table(other));
        // A client's redirect table, or nothing, is not one.
        let client = nft_ruleset("braid_c0", &[], &[], 7070);
        assert!(!another_transparent_table(&client));
        assert!(!another_transparent_table(""));
        // Our own script has the rule in the form nft prints it.
        assert!(another_transparent_table(&nft_transparent_ruleset(
            "braid_x"
        )));
    }

    #[test]
    fn a_header_round_trips_and_never_panics() {
        for dst in ["10.77.0.1:5001", "[fd77::1]:443"] {
            for src in [None, Some("10.77.0.2:40000"), Some("[fd77::2]:40001")] {
                let dst: SocketAddr = dst.parse().unwrap();
                let src: Option<SocketAddr> = src.map(|s| s.parse().unwrap());
                let h = Header { dst, src };
                let mut b = Vec::new();
                h.emit(&mut b);
                assert_eq!(b.len(), h.buffer_len());
                b.extend_from_slice(b"payload");
                // A source of the other family is not sent.
                let sent = Header {
                    dst,
                    src: src.filter(|s| s.is_ipv4() == dst.is_ipv4()),
                };
                assert_eq!(Header::parse(&b), Ok(Some((sent, h.buffer_len()))));
                assert_eq!(b[4], if sent.src.is_some() { 2 } else { 1 });
                // Every prefix is "not yet".
                for n in 0..h.buffer_len() {
                    assert_eq!(Header::parse(&b[..n]), Ok(None), "{n}");
                }
            }
        }
        // Version 1 as an older client sends it: 10.77.0.1:5001.
        assert_eq!(
            Header::parse(b"BRTA\x01\x04\x13\x89\x0a\x4d\x00\x01"),
            Ok(Some((
                Header {
                    dst: "10.77.0.1:5001".parse().unwrap(),
                    src: None
                },
                12
            )))
        );
        assert_eq!(Header::parse(b"GET / HTTP/1.1"), Err(HeaderError::Magic));
        assert_eq!(Header::parse(b"BRTA\x03"), Err(HeaderError::Version(3)));
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
    fn a_transparent_source_must_be_a_plausible_host() {
        let ok = |s: &str| transparent_source_plausible(s.parse().unwrap());
        assert!(ok("10.77.0.2:40000"));
        assert!(ok("192.168.1.20:40000"));
        assert!(ok("[fd77::2]:40000"));
        for bad in [
            "127.0.0.1:40000",
            "0.0.0.0:40000",
            "0.1.2.3:40000",
            "10.77.0.2:0",
            "[::ffff:10.77.0.2]:40000",
            "224.0.0.1:40000",
            "255.255.255.255:40000",
            "240.0.0.1:40000",
            "169.254.1.1:40000",
            "[fe80::1]:40000",
            "[::1]:40000",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn the_transparent_rules_mark_the_replies() {
        let s = nft_transparent_ruleset("braid_braid0");
        assert!(s.starts_with("table inet braid_braid0\ndelete table inet braid_braid0\n"));
        assert!(s.contains("type route hook output priority mangle"));
        assert!(s.contains("meta mark 0x62720001 ct mark set ct mark or 0x2000000"));
        assert_eq!(
            s.matches(
                "ct direction reply ct mark and 0x2000000 == 0x2000000 meta mark set meta mark or 0x8000000"
            )
            .count(),
            2
        );
        // The rule is spelled with the constants' bits.
        assert!(reply_rule().contains(&format!("{CONNTRACK_BIT:#x} == {CONNTRACK_BIT:#x}")));
        assert!(reply_rule().ends_with(&format!("or {REPLY_BIT:#x}")));
        // The socket's own mark carries the conntrack bit (a whole-mark save keeps it), not
        // the reply bit: its packets are not taken for replies.
        assert_eq!(SOCKET_MARK & CONNTRACK_BIT, CONNTRACK_BIT);
        assert_eq!(SOCKET_MARK & REPLY_BIT, 0);
        let add = ip_rule_commands(true);
        assert_eq!(
            add[0].join(" "),
            "-4 rule add fwmark 0x8000000/0x8000000 lookup 25202 pref 25202"
        );
        assert_eq!(
            add[3].join(" "),
            "-6 route replace local ::/0 dev lo table 25202"
        );
        assert!(already_there("RTNETLINK answers: File exists"));
        assert!(!already_there("RTNETLINK answers: Operation not permitted"));
        assert_eq!(
            legacy_rule_commands()[0].join(" "),
            "-4 rule del fwmark 0x62720002 lookup 25202 pref 25202"
        );
        assert_eq!(
            ip_rule_commands(false)[1].join(" "),
            "-4 route del local 0.0.0.0/0 dev lo table 25202"
        );
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

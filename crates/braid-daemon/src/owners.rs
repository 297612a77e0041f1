//! Which of a server's clients a tunnel address belongs to: the client it was handed to, or the
//! client whose `routes` hold it, the longest prefix winning (ties: the client listed first).
//!
//! The server asks for every packet it reads from its TUN device (where to send it) and for
//! every packet a client delivers (whether that client may send from its source), so the
//! answer must not cost a look at every client: a proxy may serve thousands. Handed addresses
//! are one hash lookup; routes one lookup per distinct prefix length among them, longest first.

use crate::config::{Cidr, PeerConfig};
use std::collections::HashMap;
use std::net::IpAddr;

/// The owners of the clients' addresses and routes. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    /// Each handed address, and its client.
    addresses: HashMap<IpAddr, usize>,
    /// Per distinct prefix length of the routes, longest first: each route's network (host
    /// bits cleared), and the first client listed with it.
    routes: Vec<(u8, HashMap<IpAddr, usize>)>,
}

impl Owners {
    /// The owners of `peers`' addresses and routes (a peer's index is its place in `peers`).
    pub(crate) fn new(peers: &[PeerConfig]) -> Owners {
        let mut addresses = HashMap::new();
        let mut by_len: HashMap<u8, HashMap<IpAddr, usize>> = HashMap::new();
        for (k, p) in peers.iter().enumerate() {
            for a in &p.addresses {
                addresses.entry(a.addr).or_insert(k);
            }
            for r in &p.routes {
                let net = r.network();
                by_len
                    .entry(net.prefix)
                    .or_default()
                    .entry(net.addr)
                    .or_insert(k);
            }
        }
        let mut routes: Vec<(u8, HashMap<IpAddr, usize>)> = by_len.into_iter().collect();
        routes.sort_by_key(|r| std::cmp::Reverse(r.0));
        Owners { addresses, routes }
    }

    /// The client `ip` belongs to: the one it was handed to, or the one whose route holds it
    /// with the longest prefix (a route as long as the address, of a client listed before
    /// the address's, wins as it would in a look at the clients in order).
    pub(crate) fn owner(&self, ip: IpAddr) -> Option<usize> {
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let handed = self.addresses.get(&ip).copied();
        // An IPv6 route's length may exceed 32: no IPv4 address is in it.
        let routed = self
            .routes
            .iter()
            .filter(|(len, _)| *len <= full)
            .find_map(|(len, nets)| {
                let net = Cidr {
                    addr: ip,
                    prefix: *len,
                }
                .network();
                nets.get(&net.addr).map(|&k| (*len, k))
            });
        match (handed, routed) {
            (Some(h), Some((len, r))) if len == full && r < h => Some(r),
            (Some(h), _) => Some(h),
            (None, r) => r.map(|(_, k)| k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(addresses: &[&str], routes: &[&str]) -> PeerConfig {
        let cidr = |s: &&str| {
            if s.contains('/') {
                s.parse::<Cidr>().unwrap()
            } else {
                let addr: IpAddr = s.parse().unwrap();
                Cidr {
                    addr,
                    prefix: if addr.is_ipv4() { 24 } else { 64 },
                }
            }
        };
        PeerConfig {
            name: "c".into(),
            public_key: braid_session::PublicKey([7; 32]),
            addresses: addresses.iter().map(cidr).collect(),
            routes: routes.iter().map(cidr).collect(),
            catch_all: false,
        }
    }

    /// The old look at every client in order, which [`Owners`] must agree with.
    fn in_order(peers: &[PeerConfig], dst: IpAddr) -> Option<usize> {
        let mut best: Option<(u8, usize)> = None;
        for (i, p) in peers.iter().enumerate() {
            let len = if p.addresses.iter().any(|c| c.addr == dst) {
                Some(if dst.is_ipv4() { 32 } else { 128 })
            } else {
                p.routes
                    .iter()
                    .filter(|r| r.contains(dst))
                    .map(|r| r.prefix)
                    .max()
            };
            if let Some(len) = len {
                if best.is_none_or(|(b, _)| len > b) {
                    best = Some((len, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    #[test]
    fn the_owner_is_the_handed_address_or_the_longest_route_as_a_look_in_order_finds() {
        let peers = vec![
            peer(
                &["10.77.0.2"],
                &["192.168.60.0/24", "10.0.0.0/8", "10.77.0.6/32"],
            ),
            peer(
                &["10.77.0.3", "fd77::3"],
                &["192.168.60.128/25", "fd00:60::/48"],
            ),
            peer(&["10.77.0.4"], &["10.77.0.3/32", "0.0.0.0/0"]),
            peer(&["10.77.0.5"], &["192.168.60.0/24", "::/0"]),
            peer(&["10.77.0.6"], &["10.77.0.5/32"]),
        ];
        let owners = Owners::new(&peers);
        for dst in [
            "10.77.0.2",
            "10.77.0.3",
            "10.77.0.4",
            "10.77.0.5",
            "10.77.0.6",
            "10.77.0.9",
            "192.168.60.1",
            "192.168.60.200",
            "10.1.2.3",
            "8.8.8.8",
            "fd77::3",
            "fd00:60::1",
            "fd00:61::1",
            "2001:db8::1",
        ] {
            let ip: IpAddr = dst.parse().unwrap();
            assert_eq!(owners.owner(ip), in_order(&peers, ip), "{dst}");
        }
        // The cases above that matter: a longer route wins, a client's own address beats a
        // shorter route, and a full-length route of a client listed first beats a handed
        // address (as the look in order had it).
        assert_eq!(owners.owner("192.168.60.200".parse().unwrap()), Some(1));
        assert_eq!(owners.owner("10.77.0.2".parse().unwrap()), Some(0));
        assert_eq!(owners.owner("10.77.0.3".parse().unwrap()), Some(1));
        assert_eq!(owners.owner("10.77.0.6".parse().unwrap()), Some(0));
        assert_eq!(owners.owner("10.77.0.5".parse().unwrap()), Some(3));
        assert_eq!(owners.owner("8.8.8.8".parse().unwrap()), Some(2));
        assert_eq!(owners.owner("2001:db8::1".parse().unwrap()), Some(3));
    }

    #[test]
    fn many_clients_without_routes_own_their_addresses_and_nothing_else() {
        let addrs: Vec<String> = (0..2000)
            .map(|i| format!("10.77.{}.{}", 1 + i / 250, 1 + i % 250))
            .collect();
        let peers: Vec<PeerConfig> = addrs.iter().map(|a| peer(&[a], &[])).collect();
        let owners = Owners::new(&peers);
        for (k, a) in addrs.iter().enumerate() {
            assert_eq!(owners.owner(a.parse().unwrap()), Some(k));
        }
        assert_eq!(owners.owner("10.77.0.1".parse().unwrap()), None);
        assert_eq!(owners.owner("fd77::1".parse().unwrap()), None);
    }
}

//! The classifier: raw IP packets to classes (QoSbox paper section 2.1, Figure 1 lines (6)-(9),
//! and section 3.1).
//!
//! A packet is matched, in this order, against
//! 1. the 5-tuple [`Filter`]s, in the order they were added: the first match wins;
//! 2. its DSCP: the upper six bits of the IPv4 Type of Service octet, or of the IPv6 Traffic
//!    Class octet (RFC 2474; the paper's "In the case of IPv6, the DSCP corresponds to the IPv6
//!    Traffic Class octet");
//! 3. the default class.
//!
//! A packet that is not IPv4 or IPv6, or too short for its header, goes to the default class;
//! [`headers`] returns `None` for it so a caller can count it. Nothing here panics, whatever the
//! bytes.

use crate::ClassId;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An inclusive range of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (>= `first`).
    pub last: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    pub fn contains(self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

/// A 5-tuple filter; every field that is set must match. A port filter never matches a packet
/// without ports (not TCP, UDP, SCTP or UDP-Lite, or a fragment after the first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// IP protocol (IPv4) or the final next header (IPv6): 6 TCP, 17 UDP, ...
    pub proto: Option<u8>,
    /// Source prefix.
    pub src: Option<IpNet>,
    /// Destination prefix.
    pub dst: Option<IpNet>,
    /// Source ports.
    pub src_port: Option<PortRange>,
    /// Destination ports.
    pub dst_port: Option<PortRange>,
    /// DSCP (ALTQ's `tos` on a filter line).
    pub dscp: Option<u8>,
}

impl Filter {
    /// Whether the packet's headers match.
    pub fn matches(&self, h: &Headers) -> bool {
        let port = |range: Option<PortRange>, port: Option<u16>| {
            range.is_none_or(|r| port.is_some_and(|p| r.contains(p)))
        };
        self.proto.is_none_or(|p| p == h.proto)
            && self.src.is_none_or(|n| n.contains(&h.src))
            && self.dst.is_none_or(|n| n.contains(&h.dst))
            && port(self.src_port, h.src_port)
            && port(self.dst_port, h.dst_port)
            && self.dscp.is_none_or(|d| d == h.dscp)
    }
}

/// What the classifier reads from a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// The DSCP, 0..=63.
    pub dscp: u8,
    /// Transport protocol.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port, if the packet has one.
    pub src_port: Option<u16>,
    /// Destination port, if the packet has one.
    pub dst_port: Option<u16>,
}

/// Protocols whose first four bytes are the source and destination ports.
fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132 | 136)
}

fn ports(packet: &[u8], offset: usize, proto: u8) -> (Option<u16>, Option<u16>) {
    match packet.get(offset..offset.saturating_add(4)) {
        Some(p) if has_ports(proto) => (
            Some(u16::from_be_bytes([p[0], p[1]])),
            Some(u16::from_be_bytes([p[2], p[3]])),
        ),
        _ => (None, None),
    }
}

/// IPv6 extension headers followed to find the transport protocol, at most.
const MAX_EXTENSION_HEADERS: usize = 8;

/// The DSCP of an IPv4 packet's TOS byte or an IPv6 packet's Traffic Class, without parsing
/// addresses and ports; `None` for the packets [`headers`] refuses for their IP header.
pub fn dscp(packet: &[u8]) -> Option<u8> {
    match packet {
        [b0, b1, ..] if b0 >> 4 == 4 => {
            let ihl = usize::from(b0 & 0x0f) * 4;
            (ihl >= 20 && packet.len() >= ihl).then_some(b1 >> 2)
        }
        [b0, b1, ..] if b0 >> 4 == 6 && packet.len() >= 40 => Some(((b0 << 4) | (b1 >> 4)) >> 2),
        _ => None,
    }
}

/// The headers of an IPv4 or IPv6 packet, or `None` if the bytes are not one.
pub fn headers(packet: &[u8]) -> Option<Headers> {
    match packet.first()? >> 4 {
        4 => {
            let h = packet.get(..20)?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            if ihl < 20 || packet.len() < ihl {
                return None;
            }
            let proto = h[9];
            let first_fragment = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
            let (src_port, dst_port) = if first_fragment {
                ports(packet, ihl, proto)
            } else {
                (None, None)
            };
            Some(Headers {
                dscp: h[1] >> 2,
                proto,
                src: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
                dst: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
                src_port,
                dst_port,
            })
        }
        6 => {
            let h = packet.get(..40)?;
            let traffic_class = (h[0] << 4) | (h[1] >> 4);
            let addr = |b: &[u8]| {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            let (mut proto, mut offset) = (h[6], 40usize);
            let mut ports_ok = true;
            for _ in 0..MAX_EXTENSION_HEADERS {
                match proto {
                    // Hop-by-hop, routing, destination options: length in 8-byte units.
                    0 | 43 | 60 => {
                        let ext = packet.get(offset..offset.saturating_add(2))?;
                        proto = ext[0];
                        offset = offset.saturating_add((usize::from(ext[1]) + 1) * 8);
                    }
                    // Fragment: fixed 8 bytes; ports only in the first fragment.
                    44 => {
                        let ext = packet.get(offset..offset.saturating_add(4))?;
                        proto = ext[0];
                        ports_ok = u16::from_be_bytes([ext[2], ext[3]]) & 0xfff8 == 0;
                        offset = offset.saturating_add(8);
                    }
                    _ => break,
                }
            }
            let (src_port, dst_port) = if ports_ok {
                ports(packet, offset, proto)
            } else {
                (None, None)
            };
            Some(Headers {
                dscp: traffic_class >> 2,
                proto,
                src: addr(&h[8..24]),
                dst: addr(&h[24..40]),
                src_port,
                dst_port,
            })
        }
        _ => None,
    }
}

/// Packets to classes: filters, then DSCP, then the default class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classifier {
    dscp: [Option<ClassId>; 64],
    filters: Vec<(Filter, ClassId)>,
    default: ClassId,
}

impl Classifier {
    /// Everything to `default` until DSCPs and filters are added.
    pub fn new(default: ClassId) -> Self {
        Classifier {
            dscp: [None; 64],
            filters: Vec::new(),
            default,
        }
    }

    /// Packets with DSCP `dscp` (masked to six bits) go to `class`, unless a filter says
    /// otherwise. A later call for the same DSCP replaces the earlier one.
    pub fn map_dscp(&mut self, dscp: u8, class: ClassId) {
        self.dscp[usize::from(dscp & 0x3f)] = Some(class);
    }

    /// Packets matching `filter` go to `class`; filters are tried in the order added.
    pub fn add_filter(&mut self, filter: Filter, class: ClassId) {
        self.filters.push((filter, class));
    }

    /// The default class.
    pub fn default_class(&self) -> ClassId {
        self.default
    }

    /// The class of a raw IP packet (from the TUN device).
    pub fn classify(&self, packet: &[u8]) -> ClassId {
        if self.filters.is_empty() {
            // Only the DSCP matters: no need to parse addresses and ports.
            return dscp(packet)
                .and_then(|d| self.dscp[usize::from(d)])
                .unwrap_or(self.default);
        }
        match headers(packet) {
            None => self.default,
            Some(h) => self.classify_headers(&h),
        }
    }

    /// The class of a packet whose headers are already parsed.
    pub fn classify_headers(&self, h: &Headers) -> ClassId {
        self.filters
            .iter()
            .find(|(f, _)| f.matches(h))
            .map(|&(_, c)| c)
            .or(self.dscp[usize::from(h.dscp & 0x3f)])
            .unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 UDP packet 10.0.0.1:5000 -> 10.0.0.2:53 with the given DSCP.
    pub(crate) fn ipv4_udp(dscp: u8) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = dscp << 2;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&53u16.to_be_bytes());
        p
    }

    /// An IPv6 TCP packet fd00::1:4000 -> fd00::2:443 with a fragment header (first fragment)
    /// and the given traffic class.
    fn ipv6_tcp(tclass: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40 + 8 + 20];
        p[0] = 0x60 | (tclass >> 4);
        p[1] = tclass << 4;
        p[6] = 44;
        p[8..24].copy_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        p[40] = 6;
        p[48..50].copy_from_slice(&4000u16.to_be_bytes());
        p[50..52].copy_from_slice(&443u16.to_be_bytes());
        p
    }

    #[test]
    fn figure1_dscp_map() {
        // Figure 1 lines (6)-(9): DSCP 1..4 to the four classes, class 4 the default.
        let mut c = Classifier::new(ClassId(3));
        for (dscp, class) in [(1, 0), (2, 1), (3, 2), (4, 3)] {
            c.map_dscp(dscp, ClassId(class));
        }
        assert_eq!(c.classify(&ipv4_udp(3)), ClassId(2));
        assert_eq!(c.classify(&ipv4_udp(1)), ClassId(0));
        assert_eq!(c.classify(&ipv4_udp(46)), ClassId(3));
        assert_eq!(c.classify(&ipv6_tcp(2 << 2)), ClassId(1));
        assert_eq!(c.classify(&[]), ClassId(3));
        assert_eq!(c.classify(&[0x45]), ClassId(3));
    }

    #[test]
    fn filters_before_dscp() {
        let mut c = Classifier::new(ClassId(0));
        c.map_dscp(46, ClassId(1));
        c.add_filter(
            Filter {
                proto: Some(17),
                dst: Some("10.0.0.0/24".parse().unwrap()),
                dst_port: Some(PortRange {
                    first: 53,
                    last: 53,
                }),
                ..Filter::default()
            },
            ClassId(2),
        );
        c.add_filter(
            Filter {
                src: Some("fd00::/64".parse().unwrap()),
                src_port: Some(PortRange {
                    first: 4000,
                    last: 4010,
                }),
                ..Filter::default()
            },
            ClassId(3),
        );
        assert_eq!(c.classify(&ipv4_udp(46)), ClassId(2));
        assert_eq!(c.classify(&ipv6_tcp(46 << 2)), ClassId(3));
        let mut tcp = ipv4_udp(46);
        tcp[9] = 6;
        assert_eq!(c.classify(&tcp), ClassId(1));
    }

    #[test]
    fn headers_of_ipv4_and_ipv6() {
        let h = headers(&ipv4_udp(10)).unwrap();
        assert_eq!(
            (h.dscp, h.proto, h.src_port, h.dst_port),
            (10, 17, Some(5000), Some(53))
        );
        let h = headers(&ipv6_tcp(0xb8)).unwrap();
        assert_eq!((h.dscp, h.proto, h.dst_port), (46, 6, Some(443)));
        // A later IPv4 fragment has no ports; a short one neither.
        let mut frag = ipv4_udp(0);
        frag[7] = 1;
        assert_eq!(headers(&frag).unwrap().src_port, None);
        assert_eq!(headers(&ipv4_udp(0)[..22]).unwrap().src_port, None);
        assert_eq!(headers(&[0x46; 20]), None, "IHL 6 needs 24 bytes");
        assert_eq!(headers(&[0x70; 60]), None);
    }
}

//! Packets larger than the bond carries: what a router does with them.
//!
//! The bond's largest packet is the client's TUN MTU (sent in the handshake, [`BondParams`]'s
//! `max_packet`). A TUN device whose MTU is larger (a server's configured `interface.mtu`, or a
//! proxy whose clients' MTUs differ) can hand the daemon a packet the bond cannot take. Dropping
//! it silently would be a black hole for path MTU discovery, so the daemon answers as a router
//! on the path would:
//!
//! - **IPv4 with DF set, IPv6**: an ICMP "fragmentation needed" (RFC 792, with the next-hop MTU
//!   of RFC 1191) or ICMPv6 "packet too big" (RFC 4443 section 3.2) back to the sender, which
//!   lowers its path MTU for that destination (RFC 1191, RFC 8201) and sends smaller packets.
//! - **IPv4 without DF**: the packet is fragmented (RFC 791 section 3.2) to fit, and the far
//!   end's kernel reassembles it.
//!
//! No answer is made to what RFC 1812 section 4.3.2.7 and RFC 4443 section 2.4 exempt: ICMP
//! error messages, non-initial fragments, and packets whose source is not a unicast address.
//! The answer's source is the packet's own destination: an address on the far side of the
//! tunnel, so the sender's kernel takes it as coming from the path (its own address would be a
//! martian source on the TUN device). The quote is as much of the packet as RFC 1812 (576 bytes
//! in all) and RFC 4443 (1,280) allow.
//!
//! [`BondParams`]: crate::BondParams

use std::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{icmpv4::DestUnreachableHeader, Icmpv4Type, Icmpv6Type, PacketBuilder};

/// What to do with a packet larger than the bond carries, from [`too_big`].
#[derive(Debug, PartialEq, Eq)]
pub enum TooBig {
    /// Write this ICMP or ICMPv6 error back into the TUN device, to the packet's sender.
    Answer(Vec<u8>),
    /// Send these IPv4 fragments in the packet's place, each at most the bond's largest packet.
    Fragments(Vec<Vec<u8>>),
    /// Drop it without an answer: malformed (its own length fits, or is past its end), exempt
    /// from ICMP errors, or an IPv4 packet with options that would need fragmenting (rare, and
    /// filtered on most of the Internet).
    Drop,
}

/// Hop limit of the answers.
const TTL: u8 = 64;
/// The largest ICMPv4 error: RFC 1812 section 4.3.2.3.
const ICMPV4_MAX: usize = 576;
/// The largest ICMPv6 error: the IPv6 minimum MTU, RFC 4443 section 2.4 (c).
const ICMPV6_MAX: usize = 1280;
/// IPv4 and ICMP header lengths.
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const ICMP_HEADER: usize = 8;
/// IPv4 flags and fragment offset (bytes 6-7).
const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// What to do with `packet`, an IP packet from the TUN device longer than `max`, the bond's
/// largest packet.
pub fn too_big(packet: &[u8], max: usize) -> TooBig {
    match packet.first().map(|b| b >> 4) {
        Some(4) => ipv4(packet, max),
        Some(6) => ipv6(packet, max),
        _ => TooBig::Drop,
    }
}

fn ipv4(packet: &[u8], max: usize) -> TooBig {
    if packet.len() < IPV4_HEADER {
        return TooBig::Drop;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    if ihl < IPV4_HEADER || total < ihl || total > packet.len() || total <= max {
        return TooBig::Drop;
    }
    let packet = &packet[..total];
    let flags = u16::from_be_bytes([packet[6], packet[7]]);
    if flags & DF == 0 {
        return fragment(packet, ihl, max);
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    let exempt = flags & OFFSET_MASK != 0
        || !unicast_v4(src)
        || !unicast_v4(dst)
        || (packet[9] == 1 && is_icmpv4_error(packet.get(ihl).copied()));
    let Ok(next_hop_mtu) = u16::try_from(max) else {
        return TooBig::Drop;
    };
    if exempt {
        return TooBig::Drop;
    }
    let quote = &packet[..packet.len().min(ICMPV4_MAX - IPV4_HEADER - ICMP_HEADER)];
    let builder = PacketBuilder::ipv4(dst.octets(), src.octets(), TTL).icmpv4(
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu,
        }),
    );
    let mut out = Vec::with_capacity(builder.size(quote.len()));
    match builder.write(&mut out, quote) {
        Ok(()) => TooBig::Answer(out),
        Err(_) => TooBig::Drop,
    }
}

/// RFC 791 section 3.2: split the payload at multiples of 8 bytes, each piece behind a copy of
/// the header with its offset and "more fragments" set. A packet that is itself a fragment keeps
/// its offset and its own MF on the last piece.
fn fragment(packet: &[u8], ihl: usize, max: usize) -> TooBig {
    if ihl != IPV4_HEADER {
        return TooBig::Drop;
    }
    let room = max.saturating_sub(IPV4_HEADER) / 8 * 8;
    if room == 0 {
        return TooBig::Drop;
    }
    let flags = u16::from_be_bytes([packet[6], packet[7]]);
    let base = flags & OFFSET_MASK;
    let payload = &packet[IPV4_HEADER..];
    if usize::from(base) + payload.len() / 8 > usize::from(OFFSET_MASK) {
        return TooBig::Drop;
    }
    let count = payload.len().div_ceil(room);
    let mut out = Vec::with_capacity(count);
    for (k, piece) in payload.chunks(room).enumerate() {
        let last = k + 1 == count;
        // Checked above: every offset (in 8-byte units) fits 13 bits.
        let offset = base + ((k * room / 8) as u16);
        let mf = if last { flags & MF } else { MF };
        let mut f = Vec::with_capacity(IPV4_HEADER + piece.len());
        f.extend_from_slice(&packet[..IPV4_HEADER]);
        f.extend_from_slice(piece);
        f[2..4].copy_from_slice(&((IPV4_HEADER + piece.len()) as u16).to_be_bytes());
        f[6..8].copy_from_slice(&((flags & !(MF | OFFSET_MASK)) | mf | offset).to_be_bytes());
        f[10..12].copy_from_slice(&[0, 0]);
        let sum = checksum(&f[..IPV4_HEADER]);
        f[10..12].copy_from_slice(&sum.to_be_bytes());
        out.push(f);
    }
    TooBig::Fragments(out)
}

/// The Internet checksum (RFC 1071): of an IPv4 header, or (in the tests) an ICMP message.
pub(crate) fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Neither "this network" (0/8), loopback (127/8), multicast (224/4) nor reserved (240/4,
/// with the broadcast address): an address an ICMP error may come from or go to.
fn unicast_v4(a: Ipv4Addr) -> bool {
    !matches!(a.octets()[0], 0 | 127 | 224..=255)
}

/// ICMP types that are errors (RFC 1812 section 4.3.2.7): no error answers them.
fn is_icmpv4_error(kind: Option<u8>) -> bool {
    matches!(kind, Some(3 | 4 | 5 | 11 | 12) | None)
}

fn ipv6(packet: &[u8], max: usize) -> TooBig {
    if packet.len() < IPV6_HEADER {
        return TooBig::Drop;
    }
    let octets = |at: usize| -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&packet[at..at + 16]);
        a
    };
    let (src, dst) = (Ipv6Addr::from(octets(8)), Ipv6Addr::from(octets(24)));
    let total = IPV6_HEADER + usize::from(u16::from_be_bytes([packet[4], packet[5]]));
    if total > packet.len() || total <= max {
        return TooBig::Drop;
    }
    let packet = &packet[..total];
    // An ICMPv6 error (types below 128) right behind the fixed header is not answered; one
    // behind extension headers would be answered once, and its answer is not.
    let icmp_error = packet[6] == 58 && packet.get(IPV6_HEADER).is_none_or(|&t| t < 128);
    // The answer comes from the destination, so it must be unicast too (RFC 4443 asks for a
    // "packet too big" to a multicast group as well, from a unicast address this end lacks).
    let unicast = |a: Ipv6Addr| !(a.is_unspecified() || a.is_multicast() || a.is_loopback());
    if icmp_error || !unicast(src) || !unicast(dst) {
        return TooBig::Drop;
    }
    let Ok(mtu) = u32::try_from(max) else {
        return TooBig::Drop;
    };
    let quote = &packet[..packet.len().min(ICMPV6_MAX - IPV6_HEADER - ICMP_HEADER)];
    let builder = PacketBuilder::ipv6(dst.octets(), src.octets(), TTL)
        .icmpv6(Icmpv6Type::PacketTooBig { mtu });
    let mut out = Vec::with_capacity(builder.size(quote.len()));
    match builder.write(&mut out, quote) {
        Ok(()) => TooBig::Answer(out),
        Err(_) => TooBig::Drop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{Icmpv4Slice, Icmpv6Slice, IpNumber, Ipv4Slice, Ipv6Slice};
    use proptest::prelude::*;

    /// A UDP packet of `len` bytes from 10.0.0.1 to 10.0.0.2 with `flags` (DF, MF, offset).
    fn v4(len: usize, flags: u16) -> Vec<u8> {
        let payload: Vec<u8> = (0..len - 28).map(|i| i as u8).collect();
        let mut p = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 60)
            .udp(4000, 5000)
            .write(&mut p, &payload)
            .unwrap();
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6..8].copy_from_slice(&flags.to_be_bytes());
        p[10..12].copy_from_slice(&[0, 0]);
        let sum = checksum(&p[..20]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p
    }

    fn v6(len: usize) -> Vec<u8> {
        let payload = vec![7u8; len - 48];
        let mut p = Vec::new();
        let a = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
        let b = "fd00::2".parse::<Ipv6Addr>().unwrap().octets();
        PacketBuilder::ipv6(a, b, 60)
            .udp(4000, 5000)
            .write(&mut p, &payload)
            .unwrap();
        p
    }

    #[test]
    fn a_df_packet_gets_fragmentation_needed_from_its_destination() {
        let p = v4(1500, DF);
        let TooBig::Answer(a) = too_big(&p, 1428) else {
            panic!("no answer");
        };
        let ip = Ipv4Slice::from_slice(&a).unwrap();
        assert_eq!(ip.header().source_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(ip.header().destination_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(ip.payload().ip_number, IpNumber::ICMP);
        assert_eq!(a.len(), ICMPV4_MAX);
        let icmp = Icmpv4Slice::from_slice(ip.payload().payload).unwrap();
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: 1428
            })
        );
        assert_eq!(checksum(ip.payload().payload), 0, "the ICMP checksum");
        // The quote starts with the packet's own header, so the sender finds its socket.
        assert_eq!(&icmp.payload()[..28], &p[..28]);
        assert_eq!(checksum(&a[..20]), 0, "the answer's header checksum");
    }

    #[test]
    fn an_ipv6_packet_gets_packet_too_big() {
        let p = v6(1500);
        let TooBig::Answer(a) = too_big(&p, 1428) else {
            panic!("no answer");
        };
        assert_eq!(a.len(), ICMPV6_MAX);
        let ip = Ipv6Slice::from_slice(&a).unwrap();
        assert_eq!(
            ip.header().source_addr(),
            "fd00::2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            ip.header().destination_addr(),
            "fd00::1".parse::<Ipv6Addr>().unwrap()
        );
        let icmp = Icmpv6Slice::from_slice(ip.payload().payload).unwrap();
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1428 });
        let (s, d) = (ip.header().source(), ip.header().destination());
        assert!(icmp.is_checksum_valid(s, d));
        assert_eq!(&icmp.payload()[..48], &p[..48]);
    }

    #[test]
    fn errors_fragments_and_strange_sources_get_no_answer() {
        // A non-initial fragment with DF (odd, but not to be answered).
        assert_eq!(too_big(&v4(1500, DF | 10), 1428), TooBig::Drop);
        // From 0.0.0.0.
        let mut p = v4(1500, DF);
        p[12..16].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        // An ICMP error itself (protocol 1, type 3).
        let mut p = v4(1500, DF);
        p[9] = 1;
        p[20] = 3;
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        // An ICMP echo request is answered.
        p[20] = 8;
        assert!(matches!(too_big(&p, 1428), TooBig::Answer(_)));
        // An ICMPv6 error.
        let mut p = v6(1500);
        p[6] = 58;
        p[40] = 2;
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        // To a multicast group, from or to class E (240/4), to loopback.
        for (at, addr) in [
            (16, [224, 0, 0, 1]),
            (12, [240, 0, 0, 1]),
            (16, [240, 0, 0, 1]),
            (16, [127, 0, 0, 1]),
        ] {
            let mut p = v4(1500, DF);
            p[at..at + 4].copy_from_slice(&addr);
            assert_eq!(too_big(&p, 1428), TooBig::Drop, "{addr:?}");
        }
        let mut p = v6(1500);
        p[24] = 0xff;
        assert_eq!(
            too_big(&p, 1428),
            TooBig::Drop,
            "to an IPv6 multicast group"
        );
        // Malformed: a length field past the end, or one that fits (trailing bytes), a
        // version 5, an empty packet.
        let mut p = v4(1500, DF);
        p[2..4].copy_from_slice(&1600u16.to_be_bytes());
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        p[2..4].copy_from_slice(&1400u16.to_be_bytes());
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        let mut p = v6(1500);
        p[4..6].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(too_big(&p, 1428), TooBig::Drop);
        assert_eq!(too_big(&[0x50; 60], 40), TooBig::Drop);
        assert_eq!(too_big(&[], 40), TooBig::Drop);
    }

    /// Put fragments back together as the receiving kernel would: the payload, in order.
    fn reassemble(frags: &[Vec<u8>], max: usize, id: u16) -> (Vec<u8>, u16) {
        let mut payload = Vec::new();
        let mut last_flags = 0;
        for f in frags {
            assert!(f.len() <= max, "a fragment of {} > {max}", f.len());
            assert_eq!(checksum(&f[..20]), 0, "fragment header checksum");
            let h = Ipv4Slice::from_slice(f).unwrap();
            let flags = u16::from_be_bytes([f[6], f[7]]);
            assert_eq!(
                usize::from(flags & OFFSET_MASK) * 8,
                payload.len(),
                "offsets follow on"
            );
            assert_eq!(
                h.header().identification(),
                id,
                "the packet's identification"
            );
            payload.extend_from_slice(&f[20..]);
            last_flags = flags;
        }
        (payload, last_flags)
    }

    #[test]
    fn a_packet_without_df_is_fragmented_to_fit() {
        let p = v4(1500, 0);
        let TooBig::Fragments(f) = too_big(&p, 1428) else {
            panic!("not fragmented");
        };
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].len(), 20 + 1408);
        let (payload, last) = reassemble(&f, 1428, 0x1234);
        assert_eq!(payload, &p[20..]);
        assert_eq!(last & MF, 0, "the last fragment ends the packet");
        assert_ne!(u16::from_be_bytes([f[0][6], f[0][7]]) & MF, 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Any length and bond size: the fragments fit, and put back together they are the
        /// packet's payload; a first fragment of a larger packet (MF set) keeps MF on its last
        /// piece.
        #[test]
        fn fragments_fit_and_reassemble(len in 29usize..9000, max in 576usize..1500, more in any::<bool>()) {
            prop_assume!(len > max);
            let p = v4(len, if more { MF } else { 0 });
            let TooBig::Fragments(f) = too_big(&p, max) else {
                panic!("not fragmented");
            };
            let (payload, last) = reassemble(&f, max, 0x1234);
            prop_assert_eq!(&payload[..], &p[20..]);
            prop_assert_eq!(last & MF != 0, more);
        }

        /// Nothing panics, whatever the bytes.
        #[test]
        fn any_bytes_are_safe(bytes in proptest::collection::vec(any::<u8>(), 0..1600), max in 0usize..70_000) {
            let _ = too_big(&bytes, max);
        }
    }
}

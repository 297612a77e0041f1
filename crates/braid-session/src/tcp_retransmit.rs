//! Telling TCP retransmissions apart, so that PET does not pair them (BAG paper, section V-A:
//! "retransmitted packets are not paired").
//!
//! A pair's second packet follows the first to its path whatever EDPF says, and the pair's
//! dispersion is a bandwidth sample. A retransmission is late already and should go on the
//! path that delivers it first; and it is sent at TCP's timing (a fast retransmit, a timeout),
//! not back to back with its neighbour, so its spacing says little about the path. The BAG
//! proxy sees the TCP headers; so does braid, which reads every IP packet it stripes.
//!
//! [`TcpRetransmits`] keeps, per TCP flow, the highest sequence number that has ended a data
//! segment so far; a data segment that ends at or below it carries nothing new and is a
//! retransmission (TCP's own definition: it covers bytes already sent). Sequence numbers are
//! compared modulo 2^32 (RFC 9293 section 3.4). A SYN or a RST forgets the flow: a new
//! connection on the same ports starts from a new initial sequence number. The table holds
//! [`MAX_FLOWS`] flows; when full it forgets the flow least recently sent on, near enough (the
//! CLOCK algorithm: the oldest flow goes unless it sent since it was last passed over, in which
//! case it gets a second chance), so a long transfer outlives thousands of short connections
//! beside it. A forgotten flow's next segment just counts as new. Forgetting a flow is O(1),
//! and nothing here allocates per packet once a flow is known.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Flows remembered at most.
pub const MAX_FLOWS: usize = 4096;

/// A TCP flow, one direction: source, destination, ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
}

/// A TCP data segment: its flow and the sequence number after its last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The flow.
    pub flow: FlowKey,
    /// Sequence number + payload length (+ 1 for a FIN), modulo 2^32.
    pub end: u32,
}

/// The highest end of data seen per TCP flow.
#[derive(Debug, Default)]
pub struct TcpRetransmits {
    highest: HashMap<FlowKey, Entry>,
    /// Flows in the order they were queued for eviction, each with the generation it was
    /// queued under: an entry whose flow was forgotten (or forgotten and seen again, under a
    /// new generation) is stale and skipped.
    order: VecDeque<(FlowKey, u64)>,
    generation: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The highest end of data sent.
    end: u32,
    /// The generation of the flow's entry in `order`.
    generation: u64,
    /// Sent on since the eviction hand last passed it (CLOCK's reference bit).
    recent: bool,
}

/// What a TCP packet means to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpPacket {
    /// Data (or a FIN): new, or a retransmission.
    Data(Segment),
    /// A SYN or a RST: the flow's sequence numbers start again.
    Restart(FlowKey),
}

/// What the TCP packet in `packet` (an IPv4 or IPv6 packet) is, if it is one that matters:
/// data or a FIN, or a SYN or RST. Pure ACKs do not (they carry nothing to resend), nor do
/// fragments after the first.
pub fn classify(packet: &[u8]) -> Option<TcpPacket> {
    use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
    // Lax: a length field past the bytes given uses the bytes (as the rest of braid's packet
    // reading does); the transport of a fragment is not parsed.
    let p = LaxSlicedPacket::from_ip(packet).ok()?;
    let (Some(net), Some(TransportSlice::Tcp(tcp))) = (&p.net, &p.transport) else {
        return None;
    };
    let (src, dst) = match net {
        LaxNetSlice::Ipv4(ip) => (
            IpAddr::V4(ip.header().source_addr()),
            IpAddr::V4(ip.header().destination_addr()),
        ),
        LaxNetSlice::Ipv6(ip) => (
            IpAddr::V6(ip.header().source_addr()),
            IpAddr::V6(ip.header().destination_addr()),
        ),
        LaxNetSlice::Arp(_) => return None,
    };
    let flow = FlowKey {
        src,
        dst,
        src_port: tcp.source_port(),
        dst_port: tcp.destination_port(),
    };
    if tcp.syn() || tcp.rst() {
        return Some(TcpPacket::Restart(flow));
    }
    let payload = tcp.payload().len();
    if payload == 0 && !tcp.fin() {
        return None;
    }
    let len = u32::try_from(payload)
        .ok()?
        .wrapping_add(u32::from(tcp.fin()));
    Some(TcpPacket::Data(Segment {
        flow,
        end: tcp.sequence_number().wrapping_add(len),
    }))
}

/// The TCP data segment in `packet`, if it is one ([`classify`]'s [`TcpPacket::Data`]).
pub fn data_segment(packet: &[u8]) -> Option<Segment> {
    match classify(packet)? {
        TcpPacket::Data(s) => Some(s),
        TcpPacket::Restart(_) => None,
    }
}

impl TcpRetransmits {
    /// An empty table.
    pub fn new() -> Self {
        TcpRetransmits::default()
    }

    /// Whether `seg` covers nothing its flow has not sent before. Does not record it: call
    /// [`record`](Self::record) once the segment is really sent (a packet the bond refuses
    /// comes again and must not then count as its own retransmission).
    pub fn is_retransmission(&self, seg: &Segment) -> bool {
        self.highest
            .get(&seg.flow)
            .is_some_and(|e| !after(seg.end, e.end))
    }

    /// `seg` was sent: its end is the flow's highest if it is past the one before.
    pub fn record(&mut self, seg: &Segment) {
        if let Some(e) = self.highest.get_mut(&seg.flow) {
            if after(seg.end, e.end) {
                e.end = seg.end;
            }
            e.recent = true;
            return;
        }
        if self.highest.len() >= MAX_FLOWS {
            self.evict();
        }
        self.generation += 1;
        self.order.push_back((seg.flow, self.generation));
        self.highest.insert(
            seg.flow,
            Entry {
                end: seg.end,
                generation: self.generation,
                recent: false,
            },
        );
        // Stale entries (flows forgotten by a SYN or RST) never outnumber the live ones.
        if self.order.len() > 2 * MAX_FLOWS {
            let highest = &self.highest;
            self.order
                .retain(|(f, g)| highest.get(f).is_some_and(|e| e.generation == *g));
        }
    }

    /// Forgets one flow: the oldest in the queue that has not sent since it was last passed
    /// over. One pass over at most every flow, each passed over at most once.
    fn evict(&mut self) {
        while let Some((flow, g)) = self.order.pop_front() {
            let Some(e) = self.highest.get_mut(&flow).filter(|e| e.generation == g) else {
                continue;
            };
            if e.recent {
                e.recent = false;
                self.order.push_back((flow, g));
            } else {
                self.highest.remove(&flow);
                return;
            }
        }
    }

    /// A SYN or RST of `flow` was sent: forget its sequence numbers.
    pub fn forget(&mut self, flow: &FlowKey) {
        // Its entry in `order` goes stale.
        self.highest.remove(flow);
    }

    /// Flows remembered now.
    pub fn flows(&self) -> usize {
        self.highest.len()
    }
}

/// `a` is after `b` in sequence space (RFC 9293's `SEQ_GT`).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP packet from 10.0.0.1:`sport` to 10.0.0.2:80 with `seq`, `payload` bytes
    /// and the given flags byte.
    fn v4(sport: u16, seq: u32, payload: usize, flags: u8) -> Vec<u8> {
        crate::test_packets::tcp_ipv4(sport, 80, seq, flags, &vec![0; payload])
    }

    fn v6(seq: u32, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + 20 + payload];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[23] = 1;
        p[39] = 2;
        p[40..42].copy_from_slice(&5000u16.to_be_bytes());
        p[42..44].copy_from_slice(&80u16.to_be_bytes());
        p[44..48].copy_from_slice(&seq.to_be_bytes());
        p[52] = 5 << 4;
        p[53] = 0x10;
        p
    }

    /// Whether `packet` is a retransmission, recording it as sent.
    fn sent(t: &mut TcpRetransmits, packet: &[u8]) -> Option<bool> {
        let seg = data_segment(packet)?;
        let r = t.is_retransmission(&seg);
        t.record(&seg);
        Some(r)
    }

    #[test]
    fn a_segment_that_covers_nothing_new_is_a_retransmission() {
        let mut t = TcpRetransmits::new();
        assert_eq!(sent(&mut t, &v4(5000, 1000, 1000, 0x10)), Some(false));
        assert_eq!(sent(&mut t, &v4(5000, 2000, 1000, 0x10)), Some(false));
        // The first again (a fast retransmit), and it again (a timeout).
        assert_eq!(sent(&mut t, &v4(5000, 1000, 1000, 0x10)), Some(true));
        assert_eq!(sent(&mut t, &v4(5000, 1000, 1000, 0x10)), Some(true));
        // A repacketised resend that reaches past the highest (3000) is new; so is what follows.
        assert_eq!(sent(&mut t, &v4(5000, 2500, 1000, 0x10)), Some(false));
        assert_eq!(sent(&mut t, &v4(5000, 3500, 1000, 0x10)), Some(false));
        // Another flow is another story; pure ACKs and SYNs are no data.
        assert_eq!(sent(&mut t, &v4(5001, 1000, 1000, 0x10)), Some(false));
        assert_eq!(sent(&mut t, &v4(5000, 9000, 0, 0x10)), None);
        assert_eq!(sent(&mut t, &v4(5000, 9000, 0, 0x02)), None);
        // A FIN takes one sequence number: sent twice, the second is a retransmission.
        assert_eq!(sent(&mut t, &v4(5000, 4500, 0, 0x11)), Some(false));
        assert_eq!(sent(&mut t, &v4(5000, 4500, 0, 0x11)), Some(true));
        // IPv6 too.
        assert_eq!(sent(&mut t, &v6(7, 100)), Some(false));
        assert_eq!(sent(&mut t, &v6(7, 100)), Some(true));
        assert_eq!(t.flows(), 3);
    }

    #[test]
    fn a_new_connection_on_the_same_ports_starts_afresh() {
        let mut t = TcpRetransmits::new();
        assert_eq!(sent(&mut t, &v4(5000, 900_000, 1000, 0x10)), Some(false));
        // The connection ends, a new one on the same ports starts from a lower ISN.
        let Some(TcpPacket::Restart(flow)) = classify(&v4(5000, 7, 0, 0x02)) else {
            panic!("a SYN restarts the flow");
        };
        t.forget(&flow);
        assert_eq!(t.flows(), 0);
        assert_eq!(sent(&mut t, &v4(5000, 8, 1000, 0x10)), Some(false));
        assert!(matches!(
            classify(&v4(5000, 9, 0, 0x14)),
            Some(TcpPacket::Restart(_))
        ));
        assert_eq!(classify(&v4(5000, 9, 0, 0x10)), None);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut t = TcpRetransmits::new();
        assert_eq!(
            sent(&mut t, &v4(5000, u32::MAX - 499, 1000, 0x10)),
            Some(false)
        );
        assert_eq!(sent(&mut t, &v4(5000, 500, 1000, 0x10)), Some(false));
        assert_eq!(
            sent(&mut t, &v4(5000, u32::MAX - 499, 1000, 0x10)),
            Some(true)
        );
    }

    #[test]
    fn a_refused_segment_is_not_its_own_retransmission() {
        let mut t = TcpRetransmits::new();
        let seg = data_segment(&v4(5000, 1000, 1000, 0x10)).unwrap();
        assert!(!t.is_retransmission(&seg));
        // Refused by the bond, offered again: still new until recorded.
        assert!(!t.is_retransmission(&seg));
        t.record(&seg);
        assert!(t.is_retransmission(&seg));
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_oldest() {
        let mut t = TcpRetransmits::new();
        for port in 0..(MAX_FLOWS as u16 + 10) {
            sent(&mut t, &v4(port, 1, 100, 0x10));
        }
        assert_eq!(t.flows(), MAX_FLOWS);
        // Port 0 was forgotten (counts as new), the newest is known.
        assert_eq!(sent(&mut t, &v4(0, 1, 100, 0x10)), Some(false));
        assert_eq!(
            sent(&mut t, &v4(MAX_FLOWS as u16 + 9, 1, 100, 0x10)),
            Some(true)
        );
    }

    #[test]
    fn a_flow_that_keeps_sending_outlives_new_ones_and_forgetting_leaves_no_trace() {
        let mut t = TcpRetransmits::new();
        // A long transfer on port 1, then thousands of short connections, the transfer
        // sending between them.
        sent(&mut t, &v4(1, 1, 100, 0x10));
        for port in 2..(3 * MAX_FLOWS as u16) {
            sent(&mut t, &v4(port, 1, 100, 0x10));
            if port % 512 == 0 {
                sent(&mut t, &v4(1, u32::from(port) * 100, 100, 0x10));
            }
        }
        assert_eq!(t.flows(), MAX_FLOWS);
        assert_eq!(
            sent(&mut t, &v4(1, 1, 100, 0x10)),
            Some(true),
            "the transfer is known"
        );
        // A flood of connections opened and reset leaves the queue no longer than twice the
        // table.
        for round in 0..10u32 {
            for port in 20_000..(20_000 + MAX_FLOWS as u16) {
                sent(&mut t, &v4(port, round * 1000 + 1, 100, 0x10));
                let Some(TcpPacket::Restart(flow)) = classify(&v4(port, 0, 0, 0x04)) else {
                    panic!("a RST restarts its flow");
                };
                t.forget(&flow);
            }
        }
        // Each reset flow took one place and gave it back: one flow was evicted in all.
        assert!(t.order.len() <= 2 * MAX_FLOWS);
        assert_eq!(t.flows(), MAX_FLOWS - 1);
        assert_eq!(
            sent(&mut t, &v4(1, 1, 100, 0x10)),
            Some(true),
            "the transfer is known"
        );
    }

    #[test]
    fn garbage_is_no_segment() {
        for len in 0..80 {
            let mut p = v4(5000, 1, 20, 0x10);
            p.truncate(len);
            let _ = data_segment(&p);
        }
        // A data offset past the packet's end, a length field past the bytes.
        let mut p = v4(5000, 1, 0, 0x10);
        p[32] = 15 << 4;
        assert_eq!(data_segment(&p), None);
        let mut p = v4(5000, 1, 10, 0x10);
        p[2..4].copy_from_slice(&9000u16.to_be_bytes());
        assert!(data_segment(&p).is_some_and(|s| s.end == 11));
        // Not TCP.
        let mut p = v4(5000, 1, 10, 0x10);
        p[9] = 17;
        assert_eq!(data_segment(&p), None);
    }
}

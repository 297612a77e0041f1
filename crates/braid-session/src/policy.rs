//! Per-class path policies: which paths a class of packets may use, and whether it is striped
//! per packet or per flow (the BAG paper's per-class services, section IV: "the proxy can
//! provide differentiated services to different classes of traffic"; the paper names the
//! reliability service, sending a class twice, which is `duplicate`).
//!
//! A class is a set of DSCP values ([`PathPolicy::dscp`]); the first policy that holds a
//! packet's DSCP applies, and a packet no policy holds is striped over every path as usual.
//!
//! - **Per packet** on a subset of the paths: each packet goes to the class's path whose
//!   transmit queue drains first at the path's rate ([`least_loaded`]), and is resequenced with
//!   everything else.
//! - **Per flow**: every packet of a flow (addresses, protocol, ports) goes to one of the
//!   class's paths, chosen by weighted rendezvous hashing ([`flow_path`]): each path gets
//!   flows in proportion to its configured rate (not PET's moving estimates), and a flow moves
//!   only when its path leaves the rotation.
//!   Its packets travel without a sequence number and are delivered as they arrive: a path is
//!   FIFO, so the flow keeps its order without waiting for the other paths (no resequencing
//!   delay, no delay equalisation: the class sees its path's own delay).

use crate::params::PathPolicy;

/// The index of the policy for a packet with DSCP `dscp`, if any.
pub fn policy_for(policies: &[PathPolicy], dscp: Option<u8>) -> Option<usize> {
    let d = dscp?;
    policies.iter().position(|p| p.dscp & (1 << d) != 0)
}

/// A hash of the packet's flow: addresses, protocol and ports (ports only where the packet
/// has them). Symmetric: a packet and its reply (source and destination swapped) hash alike,
/// so both ends put the two directions of a flow on the same path and it sees that path's
/// round trip. `None` for bytes that are not an IP packet.
pub fn flow_key(packet: &[u8]) -> Option<u64> {
    let h = braid_qos::classifier::headers(packet)?;
    let end = |a: std::net::IpAddr, port: Option<u16>| {
        let mut v = match a {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        v.extend(port.unwrap_or(0).to_be_bytes());
        v
    };
    let (a, b) = (end(h.src, h.src_port), end(h.dst, h.dst_port));
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut x = Fnv::default();
    x.write(&lo);
    x.write(&hi);
    x.write(&[h.proto]);
    Some(x.finish())
}

/// FNV-1a, 64 bit, finished with a SplitMix64 round so that nearby keys spread: stable across
/// runs and machines (a flow's path must not depend on a process's random hash keys).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(self) -> u64 {
        mix(self.0)
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Weighted rendezvous hashing: among the paths in `allowed` (bit `i` for path `i`), the one
/// for flow `key`, each path weighted by `rate(i)`. Path `i` wins a flow with probability
/// `rate(i) / sum of rates`, and removing a path moves only the flows it had.
pub fn flow_path(key: u64, allowed: u64, rate: impl Fn(usize) -> u64) -> Option<usize> {
    (0..64)
        .filter(|&i| allowed & (1 << i) != 0)
        .map(|i| {
            // A uniform draw in (0, 1) per (flow, path); the score -ln(u) / w is exponential
            // with rate w, and the smallest of independent exponentials is path i with
            // probability w_i / sum w.
            let u = ((mix(key ^ mix(i as u64)) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let w = rate(i).max(1) as f64;
            (i, -u.ln() / w)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

/// Among the paths in `allowed` that `has_room`, the one whose transmit queue (`queued(i)`
/// bytes, plus this packet's `len`) drains first at `rate(i)` bit/s.
pub fn least_loaded(
    allowed: u64,
    len: u32,
    queued: impl Fn(usize) -> u64,
    rate: impl Fn(usize) -> u64,
    has_room: impl Fn(usize) -> bool,
) -> Option<usize> {
    (0..64)
        .filter(|&i| allowed & (1 << i) != 0 && has_room(i))
        .min_by_key(|&i| {
            let bits = (queued(i) + u64::from(len)) as u128 * 8 * 1_000_000_000;
            bits / u128::from(rate(i).max(1))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(src_port: u16, dscp: u8) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = dscp << 2;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&src_port.to_be_bytes());
        p[22..24].copy_from_slice(&5060u16.to_be_bytes());
        p
    }

    #[test]
    fn the_first_policy_holding_the_dscp_applies() {
        let pol = |dscp: u64| PathPolicy {
            dscp,
            paths: 1,
            striping: crate::params::PolicyStriping::Packet,
            duplicate: false,
        };
        let policies = [pol(1 << 46), pol(1 << 10 | 1 << 46)];
        assert_eq!(policy_for(&policies, Some(46)), Some(0));
        assert_eq!(policy_for(&policies, Some(10)), Some(1));
        assert_eq!(policy_for(&policies, Some(0)), None);
        assert_eq!(policy_for(&policies, None), None);
    }

    #[test]
    fn a_flow_keeps_its_path_and_flows_spread_by_rate() {
        let rates = [30_000_000u64, 10_000_000];
        let mut count = [0u32; 2];
        for port in 0..4000 {
            let key = flow_key(&udp(port, 46)).unwrap();
            assert_eq!(key, flow_key(&udp(port, 46)).unwrap(), "stable");
            let p = flow_path(key, 0b11, |i| rates[i]).unwrap();
            count[p] += 1;
            // With path 1 gone, path 0's flows stay where they were.
            if p == 0 {
                assert_eq!(flow_path(key, 0b01, |i| rates[i]), Some(0));
            }
        }
        let share = f64::from(count[0]) / 4000.0;
        // A reply hashes like its request.
        let mut reply = udp(7, 46);
        let (src, dst) = (reply[12..16].to_vec(), reply[16..20].to_vec());
        reply[12..16].copy_from_slice(&dst);
        reply[16..20].copy_from_slice(&src);
        let (sp, dp) = (reply[20..22].to_vec(), reply[22..24].to_vec());
        reply[20..22].copy_from_slice(&dp);
        reply[22..24].copy_from_slice(&sp);
        assert_eq!(flow_key(&reply), flow_key(&udp(7, 46)));
        assert!((0.72..0.78).contains(&share), "{count:?}");
        assert_eq!(flow_key(&[0x45, 0, 0]), None);
        assert_eq!(flow_path(1, 0, |_| 1), None);
    }

    #[test]
    fn per_packet_goes_where_the_queue_drains_first() {
        let queued = [30_000u64, 5_000, 0];
        let rates = [100_000_000u64, 1_000_000, 1_000_000];
        let pick = |allowed, room: [bool; 3]| {
            least_loaded(allowed, 1000, |i| queued[i], |i| rates[i], |i| room[i])
        };
        // 31 kB at 100 Mbit/s (2.5 ms) beats 6 kB at 1 Mbit/s (48 ms) and 1 kB at 1 Mbit/s
        // (8 ms); without path 0, path 2's empty queue wins.
        assert_eq!(pick(0b011, [true; 3]), Some(0));
        assert_eq!(pick(0b111, [true; 3]), Some(0));
        assert_eq!(pick(0b110, [true; 3]), Some(2));
        assert_eq!(pick(0b011, [false, true, true]), Some(1));
        assert_eq!(pick(0b001, [false, true, true]), None);
    }
}

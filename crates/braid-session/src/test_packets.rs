//! IP packets for the unit tests (checksums left zero: nothing here checks them).

/// An IPv4 TCP segment from 10.0.0.1:`sport` to 10.0.0.2:`dport` with `seq`, the flags byte
/// `flags` and `payload`.
pub fn tcp_ipv4(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let total = 40 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = flags;
    p[40..].copy_from_slice(payload);
    p
}

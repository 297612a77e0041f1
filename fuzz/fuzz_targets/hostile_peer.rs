//! A hostile peer: authenticated, but lying (`braid_session::hostile`). The input's first two
//! bytes choose the bond's shape and which end lies, the next ones the bond parameters the
//! client proposes; the rest is a list of steps. Each step's first byte chooses: a forged
//! frame (a wire path, a two-byte length, and that many inner bytes, sealed under the liar's
//! real keys), honest traffic both ways, or time passing. Nothing may panic, and neither end
//! may hold more than its bounds.

#![no_main]

use braid_proto::time::Duration;
use braid_proto::PathId;
use braid_session::hostile::{held_bound, Pair, Shape, PATHS};
use braid_session::BondParams;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((shape, mut rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let shape = Shape::from_bytes(*shape);
    // Then a length byte and that many bytes of bond parameters the client proposes
    // (`BondParams::decode`, as a server reads them); the shape's if they make no valid bond.
    let Some((&n, tail)) = rest.split_first() else {
        return;
    };
    let n = usize::from(n).min(tail.len());
    let params = BondParams::decode(&tail[..n])
        .ok()
        .filter(|p| p.rates_bps.len() == PATHS && p.validate().is_ok())
        .unwrap_or_else(|| shape.params());
    rest = &tail[n..];
    let bound = held_bound(&params);
    let mut pair = Pair::established_with(&shape, params)
        .expect("a handshake with valid parameters completes");
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0..=5 => {
                let Some((&[wire, hi, lo], tail)) = rest.split_first_chunk::<3>() else {
                    break;
                };
                let n = usize::from(u16::from_be_bytes([hi, lo])).min(tail.len());
                pair.forge(PathId(wire % 4), &tail[..n]);
                rest = &tail[n..];
            }
            6 => pair.honest(u32::from(op / 8 % 16 + 1)),
            _ => pair.step(Duration::from_micros(u64::from(op) * 2_000)),
        }
        assert!(pair.held_bytes() <= bound);
    }
    pair.step(Duration::from_secs(2));
    pair.honest(2);
});

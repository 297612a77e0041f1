//! Header compression on arbitrary bytes. The first byte splits the input: the rest is a
//! packet the compressor sees (it must come out of the decompressor exactly as it went in, or
//! go whole, unchanged), then a context install and a compressed payload the decompressor
//! sees as a lying peer would send them (nothing may panic, and what rebuilds must be an IP
//! packet of a form the compressor takes).

#![no_main]

use braid_proto::time::Instant;
use braid_session::compress::{exchange_contexts, is_compressed, Compressor, Decompressor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (packet, forged) = rest.split_at(at);
    let (mut c, mut d) = (Compressor::new(), Decompressor::new());
    let mut p = packet.to_vec();
    if !c.compress(Instant::ZERO, &mut p) {
        assert_eq!(p, packet);
        exchange_contexts(&mut c, &mut d);
        p = packet.to_vec();
        if c.compress(Instant::ZERO, &mut p) {
            let mut out = Vec::new();
            assert!(d.decompress(&p, &mut out));
            assert_eq!(out, packet);
        } else {
            assert_eq!(p, packet);
        }
    }
    // What a lying peer sends: an install from the first half, a payload from the second.
    let (install, payload) = forged.split_at(forged.len() / 2);
    if let [cid, generation, template @ ..] = install {
        d.handle_install(*cid, *generation, template);
    }
    let mut out = Vec::new();
    if is_compressed(payload) && d.decompress(payload, &mut out) {
        assert!(matches!(out[0] >> 4, 4 | 6));
    }
});

//! Per-packet cost of the transport AEAD: ChaCha20-Poly1305 sealing and opening a 1400-byte
//! packet, with ring's implementation (what the session uses) beside snow's pure-Rust one.
//!
//! One packet per iteration, reported as `Throughput::Bytes(1400)`. Run with
//! `cargo bench -p braid-session --bench aead [-- FILTER]`; figures are in
//! `docs/benchmarks.md`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use snow::params::CipherChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver, RingResolver};
use std::time::Duration;

const LEN: usize = 1400;

fn aead(c: &mut Criterion) {
    let mut g = c.benchmark_group("chachapoly_1400");
    g.throughput(Throughput::Bytes(LEN as u64))
        .measurement_time(Duration::from_secs(3));
    let resolvers: [(&str, &dyn CryptoResolver); 2] =
        [("ring", &RingResolver), ("rustcrypto", &DefaultResolver)];
    for (name, resolver) in resolvers {
        let mut cipher = resolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .expect("ChaChaPoly");
        cipher.set(&[7u8; 32]);
        let plain = [0xa5u8; LEN];
        let mut sealed = [0u8; LEN + 16];
        let mut opened = [0u8; LEN + 16];
        let mut nonce = 0u64;
        g.bench_function(format!("seal/{name}"), |b| {
            b.iter(|| {
                nonce += 1;
                black_box(cipher.encrypt(nonce, &[], black_box(&plain), &mut sealed))
            })
        });
        let n = cipher.encrypt(1, &[], &plain, &mut sealed);
        g.bench_function(format!("open/{name}"), |b| {
            b.iter(|| black_box(cipher.decrypt(1, &[], black_box(&sealed[..n]), &mut opened)))
        });
    }
    g.finish();
}

criterion_group!(benches, aead);
criterion_main!(benches);

//! Noise plumbing: the protocol name, and a crypto resolver whose randomness is injected so the
//! session core never asks the OS for entropy (the daemon seeds it from the OS, tests with a
//! constant). The AEAD is ring's ChaCha20-Poly1305 (assembly, with the CPU's vector units
//! detected at run time): the same cipher on the wire as snow's pure-Rust one, and about three
//! times faster per packet on the lab's machine (`benches/aead.rs`); the rest is snow's
//! default primitives.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver, RingResolver};
use snow::types::{Cipher, Dh, Hash, Random};

/// The handshake: IK (the initiator knows the responder's static key and sends its own,
/// encrypted, in the first message), X25519, ChaCha20-Poly1305, BLAKE2s.
pub const PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// Mixed into every handshake, so a braid handshake cannot be confused with another protocol's,
/// nor with another version of braid's: peers whose wire formats differ (v2: 20-byte probes
/// with the sender's rate, pTCP segment version 2; v3: the handshake response's feature
/// flags, which say whether the responder takes accelerated TCP; v4: accelerated TCP's header
/// version 2, which names the source for a transparent onward connection and which a v3
/// server refuses) fail the handshake (`bad_handshake`) rather than establish a session in
/// which every probe, or every accelerated connection, would be dropped. v5: an initiation ends
/// in the cookie MACs (`crate::cookie`); a v4 initiation fails the v5 server's `mac1` check
/// (`bad_mac`) before any of this.
pub const PROLOGUE: &[u8] = b"braid v5";

struct SeededRng(ChaCha20Rng);

impl Random for SeededRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// snow's default primitives with ring's AEAD, and a ChaCha20 generator seeded by the caller.
pub struct SeededResolver {
    seed: [u8; 32],
}

impl SeededResolver {
    /// A resolver whose generator starts from `seed` (use a fresh seed per handshake).
    pub fn new(seed: [u8; 32]) -> Self {
        SeededResolver { seed }
    }
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRng(ChaCha20Rng::from_seed(self.seed))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        RingResolver
            .resolve_cipher(choice)
            .or_else(|| DefaultResolver.resolve_cipher(choice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ring's ChaCha20-Poly1305 and snow's pure-Rust one are the same cipher on the wire: what
    /// one seals, the other opens, so ends built either way interoperate.
    #[test]
    fn ring_and_pure_rust_ciphers_agree() {
        let mut ring = RingResolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .unwrap();
        let mut rust = DefaultResolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .unwrap();
        let key: Vec<u8> = (0u8..32).collect();
        ring.set(&key.clone().try_into().unwrap());
        rust.set(&key.try_into().unwrap());
        let plain: Vec<u8> = (0..1400u32).map(|i| (i * 7) as u8).collect();
        let (mut a, mut b) = (vec![0u8; 1416], vec![0u8; 1416]);
        for nonce in [0u64, 1, 1 << 40] {
            let n = ring.encrypt(nonce, b"ad", &plain, &mut a);
            assert_eq!(n, rust.encrypt(nonce, b"ad", &plain, &mut b));
            assert_eq!(a, b);
            let mut out = vec![0u8; 1416];
            assert_eq!(rust.decrypt(nonce, b"ad", &a[..n], &mut out).unwrap(), 1400);
            assert_eq!(&out[..1400], &plain[..]);
            assert_eq!(ring.decrypt(nonce, b"ad", &b[..n], &mut out).unwrap(), 1400);
            a[5] ^= 1;
            assert!(ring.decrypt(nonce, b"ad", &a[..n], &mut out).is_err());
        }
    }
}

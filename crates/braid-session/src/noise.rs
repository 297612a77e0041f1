//! Noise plumbing: the protocol name, and a crypto resolver whose randomness is injected so the
//! session core never asks the OS for entropy (the daemon seeds it from the OS, tests with a
//! constant).

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

/// The handshake: IK (the initiator knows the responder's static key and sends its own,
/// encrypted, in the first message), X25519, ChaCha20-Poly1305, BLAKE2s.
pub const PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// Mixed into every handshake, so a braid handshake cannot be confused with another protocol's.
pub const PROLOGUE: &[u8] = b"braid v1";

struct SeededRng(ChaCha20Rng);

impl Random for SeededRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// The default primitives, with a ChaCha20 generator seeded by the caller.
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
        DefaultResolver.resolve_cipher(choice)
    }
}

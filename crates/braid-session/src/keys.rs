//! Static X25519 keys, as base64 text (the format of `braid genkey` / `braid pubkey`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use core::fmt;
use x25519_dalek::{PublicKey as DalekPublic, StaticSecret};

/// A private X25519 key.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey(pub [u8; 32]);

/// A public X25519 key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; 32]);

/// A key that is not 32 bytes of base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a braid key: expected 44 characters of base64 (32 bytes), as `braid genkey` prints")]
pub struct KeyError;

fn decode(text: &str) -> Result<[u8; 32], KeyError> {
    let bytes = STANDARD.decode(text.trim()).map_err(|_| KeyError)?;
    bytes.try_into().map_err(|_| KeyError)
}

impl PrivateKey {
    /// A private key from 32 random bytes (the caller supplies the randomness).
    pub fn from_random(bytes: [u8; 32]) -> Self {
        // Clamp as X25519 does, so the stored key is canonical.
        let mut k = bytes;
        k[0] &= 248;
        k[31] &= 127;
        k[31] |= 64;
        PrivateKey(k)
    }

    /// Parse base64.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        decode(text).map(PrivateKey)
    }

    /// As base64.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        let secret = StaticSecret::from(self.0);
        PublicKey(DalekPublic::from(&secret).to_bytes())
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(..)")
    }
}

impl PublicKey {
    /// Parse base64.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        decode(text).map(PublicKey)
    }

    /// As base64.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7748_public_key() {
        // RFC 7748 section 6.1: Alice's private and public keys.
        let private = hex32("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public = hex32("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(PrivateKey(private).public_key(), PublicKey(public));
    }

    #[test]
    fn base64_round_trip_and_errors() {
        let k = PrivateKey::from_random([7; 32]);
        assert_eq!(PrivateKey::from_base64(&k.to_base64()).unwrap(), k);
        let p = k.public_key();
        assert_eq!(PublicKey::from_base64(&format!(" {p}\n")).unwrap(), p);
        assert_eq!(PublicKey::from_base64("abc"), Err(KeyError));
        assert_eq!(
            PublicKey::from_base64(&format!("{}=", "A".repeat(43))).unwrap(),
            PublicKey([0; 32])
        );
        assert!(format!("{k:?}").contains(".."));
    }

    fn hex32(s: &str) -> [u8; 32] {
        let v: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        v.try_into().unwrap()
    }
}

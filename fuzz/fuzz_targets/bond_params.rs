//! Decodes arbitrary bytes as the bond parameters of a handshake payload. Decoding must never
//! panic; whatever decodes is a valid bond and re-encodes to the same bytes.

#![no_main]

use braid_session::BondParams;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = BondParams::decode(data) {
        assert!(p.validate().is_ok());
        assert_eq!(p.encode(), data);
    }
});

//! Parses arbitrary bytes as a braid packet. Parsing must never panic, and whatever parses must
//! re-emit to exactly the same bytes (the encoding is canonical).

#![no_main]

use braid_wire::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let checked = Packet::new_checked(data);
    if let Ok(repr) = Repr::parse_bytes(data) {
        assert!(checked.is_ok(), "parsed but failed new_checked");
        assert_eq!(repr.buffer_len(), data.len());
        let emitted = repr.emit_to_vec().expect("a parsed repr must emit");
        assert_eq!(emitted, data);
    }
});

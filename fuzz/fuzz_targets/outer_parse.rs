//! Parses arbitrary bytes as an outer datagram (handshake or transport framing). Parsing must
//! never panic, and whatever parses must re-emit to exactly the same bytes.

#![no_main]

use braid_wire::outer::Outer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(outer) = Outer::parse(data) {
        let mut buf = vec![0u8; outer.buffer_len()];
        let n = outer
            .emit_into(&mut buf)
            .expect("a parsed datagram must emit");
        assert_eq!(&buf[..n], data);
    }
});

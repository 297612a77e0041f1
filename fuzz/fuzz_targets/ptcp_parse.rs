//! Parses arbitrary bytes as a pTCP segment. Parsing must never panic, and whatever parses must
//! re-emit to exactly the same bytes (the encoding is canonical).

#![no_main]

use braid_ptcp::wire::{Segment, SegmentView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let checked = SegmentView::new_checked(data);
    if let Ok(seg) = Segment::parse_bytes(data) {
        assert!(checked.is_ok(), "parsed but failed new_checked");
        assert_eq!(seg.buffer_len(), data.len());
        assert_eq!(seg.to_vec(), data);
    }
});

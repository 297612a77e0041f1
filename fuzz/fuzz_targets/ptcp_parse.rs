//! Parses arbitrary bytes as a pTCP segment. Parsing must never panic, and whatever parses must
//! re-emit to exactly the same bytes (the encoding is canonical). The truncated numbers expand
//! against any expectation without panicking, to a value with the same low 32 bits.

#![no_main]

use braid_ptcp::wire::{expand, truncate, Segment, SegmentView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let checked = SegmentView::new_checked(data);
    if let Ok(seg) = Segment::parse_bytes(data) {
        assert!(checked.is_ok(), "parsed but failed new_checked");
        assert_eq!(seg.buffer_len(), data.len());
        assert_eq!(seg.to_vec(), data);
        let expected = data
            .get(data.len().saturating_sub(8)..)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_be_bytes);
        for t in [
            truncate(seg.vseq.0),
            truncate(seg.offset),
            truncate(seg.data_ack),
        ] {
            assert_eq!(truncate(expand(t, expected)), t);
        }
    }
});

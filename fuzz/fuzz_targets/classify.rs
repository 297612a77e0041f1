//! Classifies arbitrary bytes as a packet from the TUN device. Classification must never panic,
//! and a packet whose headers parse is classified as its headers say.

#![no_main]

use braid_qos::classifier::headers;
use braid_qos::{ClassId, Classifier, Filter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut c = Classifier::new(ClassId(2));
    c.map_dscp(46, ClassId(0));
    c.add_filter(
        Filter {
            proto: Some(17),
            ..Filter::default()
        },
        ClassId(1),
    );
    let class = c.classify(data);
    match headers(data) {
        Some(h) => assert_eq!(class, c.classify_headers(&h)),
        None => assert_eq!(class, ClassId(2)),
    }
});

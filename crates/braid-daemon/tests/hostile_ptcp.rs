//! A server's pTCP connections under a lying client (`braid_daemon::hostile_ptcp`, feature
//! `fuzzing`, which the fuzz target `fuzz/fuzz_targets/hostile_ptcp.rs` drives with raw bytes
//! too): the client's own connections open, write and close while it forges segments of any
//! connection (any bytes, its real segments with a field moved, old ones again), the server's
//! application reads quickly, slowly or not at all, and time passes. Nothing may panic, and the
//! table may hold no more connections, commitments and buffered bytes than its bounds.

use braid_daemon::hostile_ptcp::{run, Bed};
use braid_session::hostile::Shape;
use proptest::prelude::*;

/// A step: an op byte and its arguments, as [`run`] reads them.
fn step() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // The client opens, writes, closes; the server's application.
        (0u8..5, any::<[u8; 2]>()).prop_map(|(op, a)| vec![op, a[0], a[1]]),
        // Forged bytes, with a length of up to 64.
        (any::<[u8; 3]>(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(a, b)| {
            let mut v = vec![5, a[0] % 2, a[1] % 20, a[2], b.len() as u8];
            v.extend(b);
            v
        }),
        // A real segment altered, or replayed.
        (any::<[u8; 7]>()).prop_map(|a| [&[6][..], &a[..]].concat()),
        (any::<[u8; 4]>()).prop_map(|a| [&[7][..], &a[..]].concat()),
        // Honest packets, the client reading, time passing.
        (8u8..10, any::<u8>()).prop_map(|(op, a)| vec![op, a]),
        (10u8..16, 0u8..40).prop_map(|(op, a)| vec![op, a]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_lying_client_crashes_nothing_and_bloats_no_ptcp_table(
        head in any::<[u8; 4]>(),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut data = head.to_vec();
        for s in steps {
            data.extend(s);
        }
        run(&data);
    }
}

/// Many connections, each written into and never read, against a small budget: the windows
/// the table offers stay within the budget and a floor each (the check inside `play`), and
/// the client's bytes still arrive once the server reads.
#[test]
fn connections_never_read_stay_within_the_budget() {
    let shape = Shape::from_bytes([0, 0]);
    let mut params = shape.params();
    for r in &mut params.rates_bps {
        *r = 1_000_000_000;
    }
    let mut bed = Bed::new(&shape, params, 256 << 10).unwrap();
    let mut steps = vec![3, 0];
    for id in 0..16 {
        steps.extend([0, id, 1, id, 255, 1, id, 255]);
    }
    steps.extend([15, 200, 15, 200]);
    bed.play(&steps);
    assert_eq!(bed.table().len(), 16);
    let (_, offered) = bed.table().committed_bytes();
    assert!(
        offered > 256 << 10,
        "the windows filled the budget: {offered}"
    );
}

/// The bed carries honest traffic: what the client's connections write, the server reads,
/// exactly, beside replays of its own segments (on other paths too) and junk for connections
/// the server does not hold. (An altered segment is a lie about the stream's bytes, which its
/// sender may tell: the server then reads what it was told.)
#[test]
fn an_honest_clients_bytes_arrive_beside_its_lies() {
    let mut steps = Vec::new();
    for id in 0..4 {
        steps.extend([0, id, 1, id, 100]);
    }
    for id in 0..4u8 {
        // Replayed segments, junk for a connection the server does not hold.
        steps.extend([7, id, 3, 1, 255, 7, id, 0, 2, 255, 5, 1, id, 1, 3, 1, 2, 3]);
        steps.extend([15, 50]);
    }
    steps.extend([15, 250, 15, 250]);
    let shape = Shape::from_bytes([0, 0]);
    let mut bed = Bed::new(&shape, shape.params(), 4 << 20).unwrap();
    bed.play(&steps);
    assert_eq!(bed.server_read(), 4 * 100 * 512);
}

/// A review's input: an altered segment whose SACK block came out empty made the harness
/// itself panic (an empty block does not encode), not the code under test.
#[test]
fn a_short_input_altering_a_sack_block_runs() {
    run(&[0, 0, 0, 0, 0, 0, 6, 0, 0, 7]);
}

//! A lying client of a server's pTCP connections (`braid_daemon::hostile_ptcp`): the input's
//! first bytes choose the bond's shape, the server's memory budget and the path rates the
//! client declares; the rest is a list of steps (the client's own connections, forged, altered
//! and replayed segments, the server's application reading slowly or not at all, time
//! passing). Nothing may panic, and the server's table may hold no more connections,
//! commitments and buffered bytes than its bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    braid_daemon::hostile_ptcp::run(data);
});

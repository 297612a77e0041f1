//! The mobile host's half of PET: report when each data packet arrived, in batched SIG-ACKs
//! (BAG paper section V-A: "Signaling-ACKs sent from the MH to the proxy for each TCP packet
//! received ... The MH reports the packet arrival times").
//!
//! The paper sends one SIG-ACK per packet and notes in section VII-B that this doubles the
//! packet rate upstream; here arrivals are batched: a SIG-ACK goes out when `batch` arrivals
//! wait, or `max_delay` after the oldest of them arrived, whichever comes first. The batching
//! delay does not disturb the estimates, since every entry carries its own arrival time.

use super::SigAckEntry;
use crate::path::PathId;
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

/// The most entries one SIG-ACK carries (so it fits one small datagram; see `braid-wire`).
pub const MAX_SIGACK_ENTRIES: usize = 64;

/// Receiver settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PetReceiverConfig {
    /// Send a SIG-ACK once this many arrivals wait (1 to [`MAX_SIGACK_ENTRIES`]).
    pub batch: usize,
    /// Send one at the latest this long after the oldest waiting arrival.
    pub max_delay: Duration,
}

impl Default for PetReceiverConfig {
    /// Batches of 8, at most 10 ms late.
    fn default() -> Self {
        PetReceiverConfig {
            batch: 8,
            max_delay: Duration::from_millis(10),
        }
    }
}

/// The receiver side of PET: arrivals in, SIG-ACKs out.
///
/// # Polling
/// Call [`handle_data`](Self::handle_data) for every data packet the peer's PET may have placed
/// (braid's endpoint leaves out packets of at most `SMALL_PACKET_BYTES`) and every padding
/// packet, as it arrives (before resequencing: the arrival time is what counts), then [`poll_transmit`](Self::poll_transmit)
/// until it returns `None`; call `poll_transmit` again at [`poll_timeout`](Self::poll_timeout).
/// The `now` of `poll_transmit` must never go backwards. The pending list is bounded: past four
/// batches, the oldest arrival is dropped and counted.
#[derive(Clone, Debug)]
pub struct PetReceiver {
    config: PetReceiverConfig,
    pending: VecDeque<SigAckEntry>,
    dropped: u64,
    sent: u64,
}

impl PetReceiver {
    /// A receiver; `batch` is clamped to `1..=MAX_SIGACK_ENTRIES`.
    pub fn new(mut config: PetReceiverConfig) -> Self {
        config.batch = config.batch.clamp(1, MAX_SIGACK_ENTRIES);
        PetReceiver {
            config,
            pending: VecDeque::new(),
            dropped: 0,
            sent: 0,
        }
    }

    /// A data packet with sequence number `seq` arrived on `path` at `arrival`: when it reached
    /// the host (a kernel receive timestamp), which may be a little before the driver read it,
    /// and before other packets' arrivals already handed in (they came in on another socket).
    /// The entries go out in the order they were handed in, each with its own time.
    pub fn handle_data(&mut self, arrival: Instant, path: PathId, seq: u64) {
        if self.pending.len() >= 4 * self.config.batch {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(SigAckEntry { path, seq, arrival });
    }

    /// The next SIG-ACK to send, if one is due: at most `batch` entries, in the order they
    /// were handed in.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<SigAckEntry>> {
        let oldest = self.oldest()?;
        if self.pending.len() < self.config.batch && now < oldest + self.config.max_delay {
            return None;
        }
        let n = self.pending.len().min(self.config.batch);
        self.sent += 1;
        Some(self.pending.drain(..n).collect())
    }

    /// When the oldest waiting arrival must be reported.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.oldest().map(|a| a + self.config.max_delay)
    }

    /// The earliest arrival waiting: not always the first handed in, since arrivals read from
    /// different sockets come in out of order (at most `4 x batch` entries to look at).
    fn oldest(&self) -> Option<Instant> {
        self.pending.iter().map(|e| e.arrival).min()
    }

    /// SIG-ACKs sent.
    pub fn sig_acks_sent(&self) -> u64 {
        self.sent
    }

    /// Arrivals dropped unreported because the pending list was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Arrivals handed in late, and out of order across paths (kernel timestamps of packets
    /// read from two sockets), keep their own times; a batch overdue by its oldest arrival goes
    /// at once.
    #[test]
    fn arrivals_keep_the_times_they_were_handed_in_with() {
        let ms = |m: u64| Instant::ZERO + Duration::from_millis(m);
        let mut r = PetReceiver::new(PetReceiverConfig {
            batch: 8,
            max_delay: Duration::from_millis(10),
        });
        r.handle_data(ms(100), PathId(0), 7);
        r.handle_data(ms(97), PathId(1), 8);
        // Due by the earlier arrival, though it was handed in second.
        assert_eq!(r.poll_timeout(), Some(ms(107)));
        assert!(r.poll_transmit(ms(101)).is_none());
        let b = r.poll_transmit(ms(107)).unwrap();
        let got: Vec<(u64, Instant)> = b.iter().map(|e| (e.seq, e.arrival)).collect();
        assert_eq!(got, [(7, ms(100)), (8, ms(97))]);
        // Read 30 ms after it came in: its SIG-ACK is due already.
        r.handle_data(ms(120), PathId(0), 9);
        assert!(r.poll_transmit(ms(150)).is_some());
    }

    proptest! {
        /// Every arrival is reported once, in order, in batches of at most `batch`, and no
        /// later than `max_delay` after it arrived when the driver polls at the timeouts.
        #[test]
        fn every_arrival_is_reported_once_and_in_time(
            gaps in proptest::collection::vec(0u64..20_000_000, 1..200),
            batch in 1usize..20,
        ) {
            let config = PetReceiverConfig { batch, max_delay: Duration::from_millis(10) };
            let mut r = PetReceiver::new(config);
            let mut now = Instant::ZERO;
            let mut reported = Vec::new();
            let drain = |r: &mut PetReceiver, now: Instant, reported: &mut Vec<SigAckEntry>| {
                while let Some(b) = r.poll_transmit(now) {
                    prop_assert!(!b.is_empty() && b.len() <= batch);
                    for e in &b {
                        prop_assert!(now <= e.arrival + config.max_delay);
                    }
                    reported.extend(b);
                }
                Ok(())
            };
            for (i, g) in gaps.iter().enumerate() {
                let next = now + Duration::from_nanos(*g);
                while let Some(t) = r.poll_timeout().filter(|&t| t <= next) {
                    drain(&mut r, t, &mut reported)?;
                }
                now = next;
                // Handed in up to 4 ms after it arrived (a kernel timestamp, read late), so
                // arrivals are not always in the order they are handed in.
                let late = Duration::from_nanos(g % 4_000_000);
                let arrival = Instant::from_nanos(now.as_nanos().saturating_sub(late.as_nanos() as u64));
                r.handle_data(arrival, PathId((i % 3) as u8), i as u64);
                drain(&mut r, now, &mut reported)?;
            }
            while let Some(t) = r.poll_timeout() {
                drain(&mut r, t, &mut reported)?;
            }
            let seqs: Vec<u64> = reported.iter().map(|e| e.seq).collect();
            prop_assert_eq!(seqs, (0..gaps.len() as u64).collect::<Vec<_>>());
        }
    }
}

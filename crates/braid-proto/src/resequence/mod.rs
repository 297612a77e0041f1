//! Receivers that put striped packets back in order (stripe paper sections 4 and 5).
//!
//! Three modes:
//! - [`LogicalReceiver`] (`logical`): no per-packet sequence number. The receiver runs the
//!   sender's causal scheduler over per-path queues (logical reception, section 4) and
//!   resynchronises with markers (section 5, Appendix A `ProcessMarker` / `Skipline`).
//!   Quasi-FIFO: FIFO except for a while after loss.
//! - [`SequenceReceiver`] (`sequence`): a sequence number on every packet; guaranteed FIFO,
//!   but for packets handed in as not to be held (TCP's pure ACKs), which go as they come.
//!   Logical reception predicts the path of the next packet (the fast path); a bounded reorder
//!   buffer covers the rest and declares a packet lost when every path has delivered something
//!   later, or when the hold timer expires.
//! - [`Passthrough`] (`none`): deliver on arrival.
//!
//! [`Resequencer`] dispatches over them.

pub mod equalize;
mod logical;
mod none;
mod sequence;

pub use equalize::DelayEqualizer;
pub use logical::LogicalReceiver;
pub use none::Passthrough;
pub use sequence::{
    PathHolds, SequenceReceiver, Stall, HOLD_COUNTED, MAX_ABANDONED, MIN_RELEASE_BURST, STALL_NEAR,
};
// BMP's options live beside the config below: `BackupTimer`, `Pacing`.

use crate::path::{Marker, PathId};
use crate::scheduler::{ConfigError, SchedulerConfig};
use crate::time::{Duration, Instant};
use core::str::FromStr;

/// Resequencing mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResequenceMode {
    /// Logical reception with markers; no sequence numbers on the wire.
    Logical,
    /// Sequence numbers, logical reception as the fast path, bounded reorder buffer.
    Sequence,
    /// Deliver on arrival.
    None,
}

impl ResequenceMode {
    /// Name used in configs and result files.
    pub fn name(self) -> &'static str {
        match self {
            ResequenceMode::Logical => "logical",
            ResequenceMode::Sequence => "sequence",
            ResequenceMode::None => "none",
        }
    }
}

impl FromStr for ResequenceMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "logical" => Ok(ResequenceMode::Logical),
            "sequence" => Ok(ResequenceMode::Sequence),
            "none" => Ok(ResequenceMode::None),
            other => Err(format!(
                "unknown resequencing mode `{other}`: use logical, sequence or none"
            )),
        }
    }
}

/// Receiver settings.
#[derive(Clone, Debug)]
pub struct ResequencerConfig {
    /// The mode.
    pub mode: ResequenceMode,
    /// The sender's scheduler config (the receiver simulates it).
    pub scheduler: SchedulerConfig,
    /// `logical`: how long to wait on an empty path while other paths hold data before skipping
    /// it; `sequence`: how long a gap may stay open before it is declared lost. `None` waits
    /// for markers (logical) or for every path to move past the gap (sequence).
    pub hold: Option<Duration>,
    /// Limit on buffered payload bytes. When reached, the receiver stops waiting for the
    /// missing packet; arrivals past twice the limit are dropped.
    pub buffer_limit_bytes: u64,
    /// `sequence`: hold arrivals on fast paths so every packet sees the delay of the slowest
    /// path in use ([`equalize`]). The gap hold timer is extended by the paths' delay skew
    /// either way.
    pub equalize_delay: bool,
    /// `sequence`: BMP's backup timer from the paths' RTTs instead of the fixed `hold` (once
    /// every path in the rotation has one, [`Resequencer::set_path_rtt`]).
    pub backup: Option<BackupTimer>,
    /// `sequence`: pace the release (BMP, design criterion 5 of the BAG paper).
    pub pacing: Option<Pacing>,
}

/// BMP's backup timer (BAG paper section V-B): comparison-based loss detection misses a gap
/// when a path carries nothing after it, so a timer backs it up. The paper fixed it at 0.5 s;
/// here it is `rtt_multiple` times the largest RTT among the paths in the rotation (a packet
/// still on its way is at most about one RTT behind what revealed the gap), at least `min`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupTimer {
    /// Multiple of the largest path RTT.
    pub rtt_multiple: u32,
    /// The timer is never shorter than this.
    pub min: Duration,
}

impl Default for BackupTimer {
    /// Twice the largest RTT, at least 50 ms.
    fn default() -> Self {
        BackupTimer {
            rtt_multiple: 2,
            min: Duration::from_millis(50),
        }
    }
}

/// Release pacing (BAG paper section IV, criterion 5, and V-B): packets released from the
/// buffer leave no faster than `rate_bps`, with bursts of at most `burst_bytes`, so a hole
/// that fills does not hand TCP its whole backlog at once (which would come back as a burst
/// of ACKs and then of data). The paper paced the ACKs; pacing the release does the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Release rate in bit/s (e.g. the sum of the path rates); zero turns pacing off.
    pub rate_bps: u64,
    /// Bytes that may leave back to back (never less than
    /// [`MIN_RELEASE_BURST`] of release time).
    pub burst_bytes: u64,
}

impl ResequencerConfig {
    /// Defaults: 100 ms hold, 4 MiB buffer, no delay equalisation (the papers' receiver; the
    /// daemon turns it on).
    pub fn new(mode: ResequenceMode, scheduler: SchedulerConfig) -> Self {
        ResequencerConfig {
            mode,
            scheduler,
            hold: Some(Duration::from_millis(100)),
            buffer_limit_bytes: 4 << 20,
            equalize_delay: false,
            backup: None,
            pacing: None,
        }
    }
}

/// A packet handed to the application, in delivery order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery<P> {
    /// The path it arrived on.
    pub path: PathId,
    /// Its sequence number, in mode `sequence`.
    pub seq: Option<u64>,
    /// Payload length.
    pub len: u32,
    /// The payload.
    pub payload: P,
}

/// Receiver counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResequencerStats {
    /// Packets delivered.
    pub delivered: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Markers processed.
    pub markers: u64,
    /// Paths skipped because a marker showed the receiver was early (`Skipline`).
    pub marker_skips: u64,
    /// Markers so far out of step that the receiver reset the path to them instead of skipping.
    pub marker_resets: u64,
    /// Paths skipped because the hold timer expired while blocked.
    pub hold_skips: u64,
    /// Paths skipped, or gaps abandoned, because the buffer limit was reached.
    pub forced_skips: u64,
    /// Packets delivered out of turn: `logical`, to catch up after the receiver got ahead of
    /// a path; `sequence`, packets declared lost that came after all (a resend or a
    /// reinjected copy behind its time), no longer counted in `lost`.
    pub late_deliveries: u64,
    /// `sequence`: packets declared lost.
    pub lost: u64,
    /// `sequence`: of those, declared lost at once because the sender abandoned them.
    pub abandoned: u64,
    /// `sequence`: arrivals older than what was already delivered (late or duplicate), dropped.
    pub stale_dropped: u64,
    /// Arrivals dropped because the buffer was over twice its limit.
    pub overflow_dropped: u64,
    /// `sequence`: packets delivered ahead of their turn because nothing at this end times
    /// them ([`Resequencer::handle_data_unheld`]: TCP's pure ACKs and opening SYNs).
    pub delivered_early: u64,
    /// Messages for a path that does not exist, or markers that make no sense, dropped.
    pub invalid_dropped: u64,
}

/// What the receivers charge a held packet of `len` bytes against their limits: its bytes, its
/// entry `T` in a queue and the header of its buffer's allocation. With bytes alone, a flood of
/// empty or one-byte packets (a lying peer's: the wire allows them) could fill millions of
/// entries within the limit, about 0.8 GB for a sequence receiver's 2^24-packet window; charged
/// this way a receiver holds at most twice its limit in memory, whatever the packets' sizes.
/// Markers, which carry no bytes, are charged their entry.
pub(crate) fn charge<T>(len: u32) -> u64 {
    u64::from(len) + std::mem::size_of::<T>() as u64 + ALLOCATION_HEADER
}

/// A heap allocation's bookkeeping beyond its bytes, about glibc malloc's.
const ALLOCATION_HEADER: u64 = 16;

/// The receiver of any mode.
///
/// # Polling
/// Feed arrivals with [`handle_data`](Self::handle_data) and
/// [`handle_marker`](Self::handle_marker); then call [`poll_deliver`](Self::poll_deliver) until
/// it returns `None`. If [`poll_timeout`](Self::poll_timeout) returns an instant, call
/// `poll_deliver` again once that time is reached. `now` must never go backwards.
// One per bond direction, built once: the variants' sizes do not matter, and boxing would add
// an indirection to every arrival.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Resequencer<P> {
    /// `logical`.
    Logical(LogicalReceiver<P>),
    /// `sequence`.
    Sequence(SequenceReceiver<P>),
    /// `none`.
    None(Passthrough<P>),
}

macro_rules! dispatch {
    ($self:ident, $r:ident => $e:expr) => {
        match $self {
            Resequencer::Logical($r) => $e,
            Resequencer::Sequence($r) => $e,
            Resequencer::None($r) => $e,
        }
    };
}

impl<P> Resequencer<P> {
    /// A receiver for `config`.
    pub fn new(config: &ResequencerConfig) -> Result<Self, ConfigError> {
        Ok(match config.mode {
            ResequenceMode::Logical => Resequencer::Logical(LogicalReceiver::new(config)?),
            ResequenceMode::Sequence => Resequencer::Sequence(SequenceReceiver::new(config)?),
            ResequenceMode::None => Resequencer::None(Passthrough::new(config)?),
        })
    }

    /// The mode.
    pub fn mode(&self) -> ResequenceMode {
        match self {
            Resequencer::Logical(_) => ResequenceMode::Logical,
            Resequencer::Sequence(_) => ResequenceMode::Sequence,
            Resequencer::None(_) => ResequenceMode::None,
        }
    }

    /// A data packet arrived on `path`.
    pub fn handle_data(
        &mut self,
        now: Instant,
        path: PathId,
        seq: Option<u64>,
        len: u32,
        payload: P,
    ) {
        dispatch!(self, r => r.handle_data(now, path, seq, len, payload))
    }

    /// A data packet that delay equalisation must not hold (a pure TCP acknowledgement: no
    /// RTT sample is taken from it); in modes other than `sequence` the same as
    /// [`handle_data`](Self::handle_data).
    pub fn handle_data_unheld(
        &mut self,
        now: Instant,
        path: PathId,
        seq: Option<u64>,
        len: u32,
        payload: P,
    ) {
        match self {
            Resequencer::Sequence(r) => r.arrive(now, path, seq, len, payload, false),
            _ => self.handle_data(now, path, seq, len, payload),
        }
    }

    /// A marker arrived on `path`.
    pub fn handle_marker(&mut self, now: Instant, path: PathId, marker: Marker) {
        dispatch!(self, r => r.handle_marker(now, path, marker))
    }

    /// Take `path` out of the rotation (it went dark) or put it back.
    pub fn set_path_active(&mut self, path: PathId, active: bool) {
        dispatch!(self, r => r.set_path_active(path, active))
    }

    /// The base (uncongested) one-way delay of `path`, for delay equalisation and the gap
    /// timer (`sequence` mode; ignored by the others).
    pub fn set_path_delay(&mut self, path: PathId, delay: Option<Duration>) {
        if let Resequencer::Sequence(r) = self {
            r.set_path_delay(path, delay);
        }
    }

    /// The RTT of `path` (e.g. from probes), for the backup timer of `sequence` mode;
    /// ignored by the other modes.
    pub fn set_path_rtt(&mut self, path: PathId, rtt: Option<Duration>) {
        if let Resequencer::Sequence(r) = self {
            r.set_path_rtt(path, rtt);
        }
    }

    /// Change the release rate of `sequence` mode's pacing (e.g. to the sum of the current
    /// bandwidth estimates); ignored without pacing or in the other modes.
    pub fn set_release_rate(&mut self, rate_bps: u64) {
        if let Resequencer::Sequence(r) = self {
            r.set_release_rate(rate_bps);
        }
    }

    /// How long a `sequence` receiver waits for a resend once a gap's loss is certain (see
    /// [`SequenceReceiver::set_retransmit_grace`]; ignored by the other modes).
    pub fn set_retransmit_grace(&mut self, grace: Option<Duration>) {
        if let Resequencer::Sequence(r) = self {
            r.set_retransmit_grace(grace);
        }
    }

    /// The sender gave up on sequence numbers `first..first + count` (see
    /// [`SequenceReceiver::abandon`]; ignored by the other modes).
    pub fn abandon(&mut self, first: u64, count: u32) {
        if let Resequencer::Sequence(r) = self {
            r.abandon(first, count);
        }
    }

    /// The next packet to deliver, if any.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Delivery<P>> {
        dispatch!(self, r => r.poll_deliver(now))
    }

    /// When `poll_deliver` should be called again even without arrivals.
    pub fn poll_timeout(&self) -> Option<Instant> {
        dispatch!(self, r => r.poll_timeout())
    }

    /// Payload bytes buffered for `path`.
    pub fn buffered_bytes(&self, path: PathId) -> u64 {
        dispatch!(self, r => r.buffered_bytes(path))
    }

    /// Mode `sequence`: how long packets of other paths waited behind `path`'s
    /// ([`PathHolds`]); `None` in the other modes.
    pub fn path_holds(&self, path: PathId) -> Option<PathHolds> {
        match self {
            Resequencer::Sequence(r) => Some(r.path_holds(path)),
            _ => None,
        }
    }

    /// Mode `sequence`: a gap whose hold timer ran out, with a path that had not passed it
    /// ([`Stall`]), not taken yet; `None` in the other modes.
    pub fn take_stall(&mut self) -> Option<Stall> {
        match self {
            Resequencer::Sequence(r) => r.take_stall(),
            _ => None,
        }
    }

    /// Mode `sequence`: the next sequence number it waits for (everything below delivered or
    /// given up on); `None` in the other modes.
    pub fn next_seq(&self) -> Option<u64> {
        match self {
            Resequencer::Sequence(r) => Some(r.next_seq()),
            _ => None,
        }
    }

    /// Payload bytes buffered in all.
    pub fn total_buffered_bytes(&self) -> u64 {
        dispatch!(self, r => r.total_buffered_bytes())
    }

    /// What everything held costs: payload bytes plus each entry's own size ([`charge`]). It
    /// never exceeds twice the buffer limit: arrivals past that are dropped.
    pub fn held_charge(&self) -> u64 {
        dispatch!(self, r => r.held_charge())
    }

    /// Counters.
    pub fn stats(&self) -> &ResequencerStats {
        dispatch!(self, r => r.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{SchedulerConfig, SchedulerKind};

    /// A lying peer's flood of empty packets and markers, which cost no bytes, fills no receiver
    /// past twice its limit, and what it held is all given back.
    #[test]
    fn empty_packets_and_markers_are_charged_their_entries() {
        for mode in [
            ResequenceMode::Logical,
            ResequenceMode::Sequence,
            ResequenceMode::None,
        ] {
            let sched = SchedulerConfig::new(SchedulerKind::Rr, vec![1, 1]);
            let mut c = ResequencerConfig::new(mode, sched);
            c.buffer_limit_bytes = 64 << 10;
            c.hold = Some(Duration::from_millis(1));
            let mut r: Resequencer<Vec<u8>> = Resequencer::new(&c).unwrap();
            let t = Instant::ZERO;
            // Path 0 never brings its first packet, so the logical and sequence receivers
            // hold everything path 1 brings until they give up on it.
            for k in 1..100_000u64 {
                r.handle_data(t, PathId(1), Some(k), 0, Vec::new());
                let number = crate::path::PacketNumber {
                    round: k,
                    deficit: 0,
                };
                let m = Marker {
                    path: PathId(1),
                    number,
                    tx_bytes: 0,
                };
                r.handle_marker(t, PathId(1), m);
            }
            let limit = 2 * c.buffer_limit_bytes;
            assert!(r.held_charge() <= limit, "{mode:?}: {}", r.held_charge());
            assert!(r.held_charge() > limit / 2, "{mode:?}: {}", r.held_charge());
            assert!(r.stats().overflow_dropped > 90_000, "{mode:?}");
            assert_eq!(r.total_buffered_bytes(), 0, "{mode:?}");
            // Past the hold everything held goes, and its charge with it.
            let mut now = t + Duration::from_secs(10);
            for _ in 0..1_000_000 {
                while r.poll_deliver(now).is_some() {}
                match r.poll_timeout() {
                    Some(at) => now = now.max(at),
                    None => break,
                }
            }
            // (The logical receiver's last marker waits for its path's turn.)
            assert!(r.held_charge() < 100, "{mode:?}: {}", r.held_charge());
        }
    }
}

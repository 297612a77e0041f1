//! Resequencing mode `none`: deliver on arrival.

use super::{Delivery, ResequencerConfig, ResequencerStats};
use crate::path::{Marker, PathId};
use crate::scheduler::{CausalScheduler, ConfigError};
use crate::time::Instant;
use std::collections::VecDeque;

/// Delivers every data packet as it arrives; markers are counted and dropped.
#[derive(Clone, Debug)]
pub struct Passthrough<P> {
    paths: usize,
    out: VecDeque<Delivery<P>>,
    buffered: u64,
    /// What `out` costs ([`super::charge`]), against the limit.
    held: u64,
    limit: u64,
    stats: ResequencerStats,
}

impl<P> Passthrough<P> {
    /// A passthrough receiver.
    pub fn new(config: &ResequencerConfig) -> Result<Self, ConfigError> {
        let paths = config.scheduler.build()?.paths();
        Ok(Passthrough {
            paths,
            out: VecDeque::new(),
            buffered: 0,
            held: 0,
            limit: config.buffer_limit_bytes,
            stats: ResequencerStats::default(),
        })
    }

    /// A data packet arrived.
    pub fn handle_data(
        &mut self,
        _now: Instant,
        path: PathId,
        seq: Option<u64>,
        len: u32,
        payload: P,
    ) {
        if path.index() >= self.paths {
            self.stats.invalid_dropped += 1;
            return;
        }
        let charge = super::charge::<Delivery<P>>(len);
        if self.held + charge > self.limit.saturating_mul(2) {
            self.stats.overflow_dropped += 1;
            return;
        }
        self.held += charge;
        self.buffered += u64::from(len);
        self.out.push_back(Delivery {
            path,
            seq,
            len,
            payload,
        });
    }

    /// A marker arrived: nothing to resynchronise.
    pub fn handle_marker(&mut self, _now: Instant, _path: PathId, _marker: Marker) {
        self.stats.markers += 1;
    }

    /// The next packet.
    pub fn poll_deliver(&mut self, _now: Instant) -> Option<Delivery<P>> {
        let d = self.out.pop_front()?;
        self.buffered -= u64::from(d.len);
        self.held -= super::charge::<Delivery<P>>(d.len);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += u64::from(d.len);
        Some(d)
    }

    /// Nothing to do: arrivals are delivered whatever their path.
    pub fn set_path_active(&mut self, _path: PathId, _active: bool) {}

    /// No timers.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Bytes of `path` not yet polled.
    pub fn buffered_bytes(&self, path: PathId) -> u64 {
        self.out
            .iter()
            .filter(|d| d.path == path)
            .map(|d| u64::from(d.len))
            .sum()
    }

    /// What the packets not yet polled cost ([`super::charge`]).
    pub fn held_charge(&self) -> u64 {
        self.held
    }

    /// Bytes not yet polled.
    pub fn total_buffered_bytes(&self) -> u64 {
        self.buffered
    }

    /// Counters.
    pub fn stats(&self) -> &ResequencerStats {
        &self.stats
    }
}

//! Credit-based flow control (stripe paper section 6.3.1, after Kung and Chapman's credit
//! scheme): the receiver grants each path credit from its free buffer; the sender never
//! transmits data beyond the grant ([`crate::striper::Striper::handle_credit`]).
//!
//! Grants are cumulative byte limits, so a lost or duplicated grant does no harm: the next one
//! supersedes it. Bytes lost in transit would otherwise eat credit forever; markers carry the
//! sender's cumulative bytes on their path (`tx_bytes`) and the grantor counts the difference as
//! received, which is the credit resynchronisation of the scheme.

use crate::path::{Credit, Marker, PathId};
use crate::time::{Duration, Instant};

/// Credit settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreditConfig {
    /// Receive buffer reserved for each path, in bytes; also the sender's initial grant.
    pub share_bytes: Vec<u64>,
    /// Send fresh grants at least this often while data flows (covers lost grants).
    pub refresh: Duration,
}

impl CreditConfig {
    /// Split `buffer_bytes` across paths in proportion to `weights` (usually the quanta).
    pub fn proportional(buffer_bytes: u64, weights: &[u64], refresh: Duration) -> Self {
        let total: u128 = weights.iter().map(|&w| u128::from(w)).sum::<u128>().max(1);
        let share_bytes = weights
            .iter()
            .map(|&w| (u128::from(buffer_bytes) * u128::from(w) / total) as u64)
            .collect();
        CreditConfig {
            share_bytes,
            refresh,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Grant {
    share: u64,
    /// Data bytes received on the path, plus bytes markers showed were lost.
    rx_bytes: u64,
    /// The last limit sent.
    sent_limit: u64,
}

/// The receiver's credit grantor.
///
/// # Polling
/// Report every data arrival with [`on_data`](Self::on_data) and every marker with
/// [`on_marker`](Self::on_marker); after deliveries, call [`poll_credits`](Self::poll_credits)
/// with the bytes still buffered per path; call it again at [`poll_timeout`](Self::poll_timeout).
#[derive(Clone, Debug)]
pub struct CreditGrantor {
    grants: Vec<Grant>,
    refresh: Duration,
    last_sent: Instant,
    dirty: bool,
    lost_bytes: u64,
}

impl CreditGrantor {
    /// A grantor; the sender must start with `share_bytes` as its initial grant.
    pub fn new(config: &CreditConfig) -> Self {
        CreditGrantor {
            grants: config
                .share_bytes
                .iter()
                .map(|&share| Grant {
                    share,
                    rx_bytes: 0,
                    sent_limit: share,
                })
                .collect(),
            refresh: config.refresh,
            last_sent: Instant::ZERO,
            dirty: false,
            lost_bytes: 0,
        }
    }

    /// A data packet of `len` bytes arrived on `path`.
    pub fn on_data(&mut self, path: PathId, len: u32) {
        if let Some(g) = self.grants.get_mut(path.index()) {
            g.rx_bytes = g.rx_bytes.saturating_add(u64::from(len));
            self.dirty = true;
        }
    }

    /// A marker arrived: every byte sent before it that has not arrived was lost.
    pub fn on_marker(&mut self, marker: &Marker) {
        if let Some(g) = self.grants.get_mut(marker.path.index()) {
            // A marker may not claim more than the path could have sent under its grant.
            let claimed = marker.tx_bytes.min(g.sent_limit);
            if claimed > g.rx_bytes {
                self.lost_bytes = self.lost_bytes.saturating_add(claimed - g.rx_bytes);
                g.rx_bytes = claimed;
                self.dirty = true;
            }
        }
    }

    /// Bytes markers showed were lost in transit.
    pub fn lost_bytes(&self) -> u64 {
        self.lost_bytes
    }

    /// The limit `path` would be granted now with `buffered` bytes of it still held.
    pub fn limit(&self, path: PathId, buffered: u64) -> u64 {
        self.grants.get(path.index()).map_or(0, |g| {
            g.rx_bytes.saturating_sub(buffered).saturating_add(g.share)
        })
    }

    /// Fresh grants, if any limit moved by a quarter of its share or the refresh interval has
    /// passed since the last grant while data flowed. `buffered(path)` is the receiver's
    /// occupancy per path.
    pub fn poll_credits(
        &mut self,
        now: Instant,
        buffered: impl Fn(PathId) -> u64,
        out: &mut Vec<Credit>,
    ) -> bool {
        let mut due = self.dirty && now >= self.last_sent + self.refresh;
        for (i, g) in self.grants.iter().enumerate() {
            let limit = g
                .rx_bytes
                .saturating_sub(buffered(PathId(i as u8)))
                .saturating_add(g.share);
            if limit >= g.sent_limit.saturating_add(g.share.div_ceil(4).max(1)) {
                due = true;
            }
        }
        if !due {
            return false;
        }
        out.clear();
        for (i, g) in self.grants.iter_mut().enumerate() {
            let path = PathId(i as u8);
            let limit = (g
                .rx_bytes
                .saturating_sub(buffered(path))
                .saturating_add(g.share))
            .max(g.sent_limit);
            g.sent_limit = limit;
            out.push(Credit {
                path,
                limit_bytes: limit,
            });
        }
        self.last_sent = now;
        self.dirty = false;
        true
    }

    /// When a refresh grant is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.dirty.then(|| self.last_sent + self.refresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PacketNumber;

    /// A share near the top of u64 (a peer's bond parameters set it) saturates instead of
    /// overflowing: it once panicked a debug build (found by the hostile-peer test).
    #[test]
    fn huge_shares_saturate() {
        let cfg = CreditConfig::proportional(u64::MAX - 1, &[3, 1, 1], Duration::from_millis(20));
        let mut g = CreditGrantor::new(&cfg);
        let mut out = Vec::new();
        for i in 0..3 {
            g.on_data(PathId(i), u32::MAX);
            g.on_data(PathId(i), u32::MAX);
        }
        g.on_marker(&Marker {
            path: PathId(0),
            number: PacketNumber {
                round: 1,
                deficit: 0,
            },
            tx_bytes: u64::MAX,
        });
        let _ = g.poll_credits(Instant::ZERO + Duration::from_secs(1), |_| 0, &mut out);
        assert!(out
            .iter()
            .all(|c| c.limit_bytes >= cfg.share_bytes[c.path.index()]));
        assert!(g.limit(PathId(0), 0) >= cfg.share_bytes[0]);
    }

    #[test]
    fn grants_follow_consumption() {
        let mut g = CreditGrantor::new(&CreditConfig {
            share_bytes: vec![1000, 1000],
            refresh: Duration::from_secs(1),
        });
        let mut out = Vec::new();
        g.on_data(PathId(0), 300);
        // Still buffered: no new grant.
        assert!(!g.poll_credits(Instant::ZERO, |_| 300, &mut out));
        // Consumed: limit = 300 + 1000 moved by >= 250.
        assert!(g.poll_credits(Instant::ZERO, |_| 0, &mut out));
        assert_eq!(out[0].limit_bytes, 1300);
        assert_eq!(out[1].limit_bytes, 1000);
    }

    #[test]
    fn markers_account_for_lost_bytes() {
        let mut g = CreditGrantor::new(&CreditConfig {
            share_bytes: vec![1000],
            refresh: Duration::from_secs(1),
        });
        g.on_data(PathId(0), 100);
        g.on_marker(&Marker {
            path: PathId(0),
            number: PacketNumber::default(),
            tx_bytes: 700,
        });
        assert_eq!(g.lost_bytes(), 600);
        assert_eq!(g.limit(PathId(0), 0), 1700);
        // A marker cannot claim more than was granted.
        g.on_marker(&Marker {
            path: PathId(0),
            number: PacketNumber::default(),
            tx_bytes: 1 << 40,
        });
        assert_eq!(g.limit(PathId(0), 0), 2000);
    }

    #[test]
    fn refresh_resends_after_interval() {
        let mut g = CreditGrantor::new(&CreditConfig {
            share_bytes: vec![1000],
            refresh: Duration::from_millis(10),
        });
        let mut out = Vec::new();
        g.on_data(PathId(0), 10);
        assert!(!g.poll_credits(Instant::from_nanos(1), |_| 0, &mut out));
        let t = g.poll_timeout().unwrap();
        assert!(g.poll_credits(t, |_| 0, &mut out));
        assert_eq!(out[0].limit_bytes, 1010);
    }
}

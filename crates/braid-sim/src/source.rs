//! Traffic sources: packet size distributions and arrival processes.

use braid_proto::time::{Duration, Instant};
use rand::Rng;
use rand_distr::{Distribution, Exp};
use rand_xoshiro::Xoshiro256PlusPlus;

use std::path::Path;

/// Packet sizes, in payload bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum SizeDist {
    /// Every packet the same size.
    Fixed(u32),
    /// Uniform in `[min, max]`.
    Uniform {
        /// Smallest.
        min: u32,
        /// Largest.
        max: u32,
    },
    /// `large` with probability `p_large`, else `small`.
    Bimodal {
        /// Small size.
        small: u32,
        /// Large size.
        large: u32,
        /// Probability of a large packet.
        p_large: f64,
    },
    /// Cycle through the sizes in order (e.g. the alternating 1000/200 bytes of section 6.2).
    Cycle(Vec<u32>),
}

impl SizeDist {
    /// The alternating 1000/200-byte pattern of the stripe paper's GRR worst case.
    pub fn alternating() -> Self {
        SizeDist::Cycle(vec![1000, 200])
    }

    /// Sizes from a trace file: one decimal size per line; blank lines and `#` comments skipped.
    pub fn from_trace(path: &Path) -> Result<Self, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|e| TraceError::Read {
            path: path.display().to_string(),
            source: e,
        })?;
        let mut sizes = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let size: u32 = line.parse().map_err(|_| TraceError::Parse {
                path: path.display().to_string(),
                line: n + 1,
                text: line.to_owned(),
            })?;
            if size == 0 {
                return Err(TraceError::Parse {
                    path: path.display().to_string(),
                    line: n + 1,
                    text: line.to_owned(),
                });
            }
            sizes.push(size);
        }
        if sizes.is_empty() {
            return Err(TraceError::Empty(path.display().to_string()));
        }
        Ok(SizeDist::Cycle(sizes))
    }

    /// The largest size this distribution produces.
    pub fn max(&self) -> u32 {
        match self {
            SizeDist::Fixed(s) => *s,
            SizeDist::Uniform { max, .. } => *max,
            SizeDist::Bimodal { small, large, .. } => (*small).max(*large),
            SizeDist::Cycle(v) => v.iter().copied().max().unwrap_or(0),
        }
    }
}

/// A trace file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Unreadable.
    #[error("cannot read trace file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line that is not a positive size.
    #[error(
        "{path}:{line}: `{text}` is not a packet size: write one positive number of bytes per line"
    )]
    Parse {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// No sizes.
    #[error("trace file {0} holds no packet sizes")]
    Empty(String),
}

/// When packets are offered.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    /// Always a packet waiting: the striper is kept full.
    Backlogged,
    /// Poisson arrivals at this mean rate (packets per second); packets the striper cannot take
    /// are dropped at the source and counted.
    Poisson {
        /// Mean packets per second.
        rate_pps: f64,
    },
}

/// A traffic source: sizes plus arrivals.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceConfig {
    /// Sizes.
    pub sizes: SizeDist,
    /// Arrivals.
    pub arrivals: Arrivals,
}

/// Source state during a run.
#[derive(Clone, Debug)]
pub struct Source {
    config: SourceConfig,
    cycle_at: usize,
    next_len: u32,
    next_id: u64,
}

impl Source {
    /// A source; the first size is drawn from `rng`.
    pub fn new(config: SourceConfig, rng: &mut Xoshiro256PlusPlus) -> Self {
        let mut s = Source {
            config,
            cycle_at: 0,
            next_len: 0,
            next_id: 0,
        };
        s.next_len = s.draw(rng);
        s
    }

    /// The configuration.
    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    fn draw(&mut self, rng: &mut Xoshiro256PlusPlus) -> u32 {
        match &self.config.sizes {
            SizeDist::Fixed(s) => *s,
            SizeDist::Uniform { min, max } => rng.random_range(*min..=*max),
            SizeDist::Bimodal {
                small,
                large,
                p_large,
            } => {
                if rng.random::<f64>() < *p_large {
                    *large
                } else {
                    *small
                }
            }
            SizeDist::Cycle(v) => {
                let s = v[self.cycle_at % v.len()];
                self.cycle_at += 1;
                s
            }
        }
    }

    /// Size of the next packet.
    pub fn peek_len(&self) -> u32 {
        self.next_len
    }

    /// Take the next packet: its id (its position in the source's FIFO order) and size.
    pub fn take(&mut self, rng: &mut Xoshiro256PlusPlus) -> (u64, u32) {
        let out = (self.next_id, self.next_len);
        self.next_id += 1;
        self.next_len = self.draw(rng);
        out
    }

    /// Packets taken so far.
    pub fn taken(&self) -> u64 {
        self.next_id
    }

    /// For Poisson arrivals, the time of the next arrival after `now`.
    pub fn next_arrival(&self, now: Instant, rng: &mut Xoshiro256PlusPlus) -> Option<Instant> {
        match self.config.arrivals {
            Arrivals::Backlogged => None,
            Arrivals::Poisson { rate_pps } => {
                let exp = Exp::new(rate_pps).ok()?;
                let gap: f64 = exp.sample(rng);
                Some(now + Duration::from_nanos((gap * 1e9) as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn alternating_and_trace_sizes() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut s = Source::new(
            SourceConfig {
                sizes: SizeDist::alternating(),
                arrivals: Arrivals::Backlogged,
            },
            &mut rng,
        );
        let sizes: Vec<u32> = (0..4).map(|_| s.take(&mut rng).1).collect();
        assert_eq!(sizes, vec![1000, 200, 1000, 200]);

        let dir = std::env::temp_dir().join(format!("braid-trace-{}", std::process::id()));
        std::fs::write(&dir, "# sizes\n40\n1500 # big\n\n576\n").unwrap();
        assert_eq!(
            SizeDist::from_trace(&dir).unwrap(),
            SizeDist::Cycle(vec![40, 1500, 576])
        );
        std::fs::write(&dir, "40\nlots\n").unwrap();
        let err = SizeDist::from_trace(&dir).unwrap_err().to_string();
        assert!(err.contains(":2:"), "{err}");
        std::fs::remove_file(&dir).ok();
    }

    #[test]
    fn uniform_and_bimodal_stay_in_range() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
        for sizes in [
            SizeDist::Uniform { min: 64, max: 1500 },
            SizeDist::Bimodal {
                small: 64,
                large: 1500,
                p_large: 0.5,
            },
        ] {
            let mut s = Source::new(
                SourceConfig {
                    sizes,
                    arrivals: Arrivals::Backlogged,
                },
                &mut rng,
            );
            for _ in 0..1000 {
                let (_, len) = s.take(&mut rng);
                assert!((64..=1500).contains(&len));
            }
        }
    }

    #[test]
    fn poisson_mean_gap() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let s = Source::new(
            SourceConfig {
                sizes: SizeDist::Fixed(100),
                arrivals: Arrivals::Poisson { rate_pps: 1000.0 },
            },
            &mut rng,
        );
        let mut now = Instant::ZERO;
        for _ in 0..10_000 {
            now = s.next_arrival(now, &mut rng).unwrap();
        }
        let mean_ms = now.as_secs_f64() / 10.0;
        assert!((mean_ms - 1.0).abs() < 0.05, "{mean_ms}");
    }
}

//! The papers' experiments, each a function from a seed to a [`Report`] and plots.
//!
//! | name | paper | what it shows |
//! |---|---|---|
//! | `stripe-throughput` | Table I, Fig. 15 | goodput of SRR, GRR, RR, RFQ with and without logical reception over a 10 Mbit/s link and one swept from 4 to 26 Mbit/s |
//! | `grr-worst-case` | section 6.2 | alternating 1000/200-byte packets on two equal links: SRR keeps the sum, GRR does not |
//! | `fairness` | Lemma 3.4 | `max |bytes_i - K q_i|` against the largest packet, for SRR and RFQ |
//! | `resync` | Theorem 5.1, conference paper 6.3 | time to FIFO after loss stops, against the bound; misordering against marker interval and position |
//! | `qosbox` | QoSbox paper Table 1, Figs. 8-9 | JoBS on a 100 Mbit/s bottleneck: delay and loss ratios, class-1 delay and loss bounds, class-2 minimum rate |
//! | `bag` | BAG paper Table I | TCP over three paths with MTCP, ASI, EDPF, WRR, WRR with a buffer and PET-BMP; cross traffic, loss, a halved path |
//! | `tcp-check` | issue 5 item 6 | the TCP model ([`crate::tcp`], set up like Linux) over each path of a lab scenario, beside kernel TCP's figures from `braid lab run --json` (takes a scenario, so not in [`NAMES`]) |
//! | `ptcp-fig4` | pTCP paper Fig. 4 | pTCP, striping over multiple sockets and the sum of independent flows: a 500 kbit/s 400 ms path and a 100 ms path of 1-10x its rate; 2-5 paths; 2-5 fluctuating paths |
//! | `ptcp-cc` | issue 6, pTCP section 3.2 | pTCP's micro-flow controllers (NewReno, CUBIC, BBR) on a 4 Mbit/s 80 ms path with 1% random loss, the same without loss, and two paths of 40 and 200 ms |
//! | `ptcp-weights` | pTCP paper Fig. 6(a) | one connection of weight 1-100 (w micro-flows on one path) against 9 regular ones at a RED bottleneck of (w + 9) x 1 Mbit/s |

pub mod bag;
pub mod fairness;
pub mod grr_worst_case;
pub mod ptcp;
pub mod ptcp_cc;
pub mod ptcp_weights;
pub mod qosbox;
pub mod resync;
pub mod stripe_throughput;
pub mod tcp_check;

use crate::report::{Plot, Report};
use braid_proto::resequence::{ResequenceMode, ResequencerConfig};
use braid_proto::scheduler::{SchedulerConfig, SchedulerKind};
use braid_proto::striper::StriperConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What an experiment produces.
pub struct Output {
    /// The rows, for `results.json` and `results.csv`.
    pub report: Report,
    /// Plots, with their file names.
    pub plots: Vec<(String, Plot)>,
    /// Columns to print in the summary table.
    pub columns: Vec<&'static str>,
    /// Checks of the paper's claims: (claim, held).
    pub checks: Vec<(String, bool)>,
}

/// Progress callback: `(done, total)` runs.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// The experiment names.
pub const NAMES: [&str; 9] = [
    "stripe-throughput",
    "grr-worst-case",
    "fairness",
    "resync",
    "qosbox",
    "bag",
    "ptcp-fig4",
    "ptcp-weights",
    "ptcp-cc",
];

/// Run an experiment by name.
pub fn run(name: &str, seed: u64, progress: Progress<'_>) -> Option<Output> {
    Some(match name {
        "stripe-throughput" => stripe_throughput::run(seed, progress),
        "grr-worst-case" => grr_worst_case::run(seed, progress),
        "fairness" => fairness::run(seed, progress),
        "resync" => resync::run(seed, progress),
        "qosbox" => qosbox::run(seed, progress),
        "bag" => bag::run(seed, progress),
        "ptcp-fig4" => ptcp::run(seed, progress),
        "ptcp-weights" => ptcp_weights::run(seed, progress),
        "ptcp-cc" => ptcp_cc::run(seed, progress),
        _ => return None,
    })
}

/// A per-run seed derived from the experiment seed and the run's index (SplitMix64 finaliser),
/// so every run is reproducible on its own.
pub fn derive_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Map `f` over `items` on all cores, keeping order; reports progress as items finish.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(usize, &T) -> R + Sync,
    progress: Progress<'_>,
) -> Vec<R> {
    let total = items.len() as u64;
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len().max(1));
    progress(0, total);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= items.len() {
                    break;
                }
                let r = f(i, &items[i]);
                results.lock().expect("no panics while holding the lock")[i] = Some(r);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(d, total);
            });
        }
    });
    results
        .into_inner()
        .expect("no panics while holding the lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// Sender and receiver configs for a scheme over links of the given rates.
pub(crate) fn endpoints(
    kind: SchedulerKind,
    rates_bps: &[u64],
    mode: ResequenceMode,
    seed: u64,
) -> (StriperConfig, ResequencerConfig) {
    let mut sched = SchedulerConfig::new(kind, rates_bps.to_vec());
    sched.seed = seed;
    let mut striper = StriperConfig::new(sched.clone());
    striper.sequence_numbers = mode == ResequenceMode::Sequence;
    striper.queue_limit_bytes = 16 * 1024;
    let receiver = ResequencerConfig::new(mode, sched);
    (striper, receiver)
}

/// Round to `digits` decimals for reports.
pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

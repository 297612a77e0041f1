//! pTCP's micro-flow congestion controllers side by side (issue 6): NewReno, CUBIC and BBR on
//! one path with random loss, on the same path without loss, and over two paths of different
//! round-trip times striped by one connection.
//!
//! The lossy path is the lab's: 4 Mbit/s, 40 ms each way, a drop-tail queue of 64 KB and 1%
//! random loss each way (a radio link, not congestion). A loss-based controller halves its
//! window on every such loss; BBR (`braid_ptcp::congestion::Bbr`) keeps its bandwidth
//! estimate. Goodput is what the receiving application read between [`WARMUP`] and [`END`]
//! of virtual time; the RTT is each flow's latest sample, averaged over a 10 ms grid in the
//! same window (so a controller that fills the queue shows it).

use braid_proto::time::{Duration, Instant};
use braid_proto::PathId;
use braid_ptcp::{Config, CongestionAlgorithm, StripedConnection};

use super::ptcp::{drain, fill, loaded, Link, Net, PathSpec};

/// Measurement window.
pub const WARMUP: Duration = Duration::from_secs(10);
/// End of a run.
pub const END: Duration = Duration::from_secs(60);
/// The lab's lossy path: 4 Mbit/s, 80 ms round trip.
pub const LOSSY_PATH: PathSpec = PathSpec::steady(4_000_000, 80);
/// Its drop-tail queue.
pub const LOSSY_QUEUE_BYTES: u64 = 64 << 10;
/// Its random loss, each way.
pub const LOSS: f64 = 0.01;
/// The two paths of the two-flow run: 4 Mbit/s at 40 ms and 2 Mbit/s at 200 ms.
pub const TWO_PATHS: [PathSpec; 2] = [
    PathSpec::steady(4_000_000, 40),
    PathSpec::steady(2_000_000, 200),
];

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct CcRun {
    /// Goodput, bit/s.
    pub goodput_bps: f64,
    /// Each flow's mean RTT over the window.
    pub rtt_mean: Vec<Duration>,
    /// Each flow's smallest RTT sample.
    pub rtt_min: Vec<Duration>,
    /// Datagrams the links dropped (queue full or random loss), both ways.
    pub dropped: u64,
}

/// One bulk connection of `algorithm` over `links` (its `PathId(i)` is `links[i]`), with a
/// receive buffer of twice the paper's rule at the RTTs under load of `specs`.
fn run_links(links: Vec<[Link; 2]>, specs: &[PathSpec], algorithm: CongestionAlgorithm) -> CcRun {
    let mut config = Config {
        receive_buffer_bytes: 2 * Config::receive_buffer_for(&loaded(specs, false)),
        ..Config::default()
    };
    config.flow.congestion.algorithm = algorithm;
    let paths: Vec<usize> = (0..links.len()).collect();
    let ids: Vec<PathId> = (0..links.len()).map(|i| PathId(i as u8)).collect();
    let mut net = Net::with_links(links);
    let client = StripedConnection::connect(config, net.now, &ids);
    net.add(client, config, &paths);
    let (warm, end) = (Instant::ZERO + WARMUP, Instant::ZERO + END);
    let tick = Duration::from_millis(10);
    let chunk = vec![0x5a; 64 << 10];
    let mut buf = vec![0; 256 << 10];
    let (mut read, mut at_warm) = (0, None);
    let mut next_tick = warm;
    let mut rtt_sum = vec![Duration::ZERO; paths.len()];
    let mut ticks = 0u32;
    loop {
        let c = &mut net.conns[0];
        fill(&mut c.client, &chunk);
        read += drain(&mut c.server, &mut buf);
        if at_warm.is_none() && net.now >= warm {
            at_warm = Some(read);
        }
        while net.now >= next_tick && next_tick < end {
            for (sum, f) in rtt_sum.iter_mut().zip(c.client.flows()) {
                *sum += f.rtt().latest();
            }
            ticks += 1;
            next_tick = next_tick + tick;
        }
        if !net.step(end) {
            break;
        }
    }
    let flows = net.conns[0].client.flows();
    CcRun {
        goodput_bps: (read - at_warm.unwrap_or(0)) as f64 * 8.0 / (END - WARMUP).as_secs_f64(),
        rtt_mean: rtt_sum.iter().map(|&s| s / ticks.max(1)).collect(),
        rtt_min: flows.iter().map(|f| f.rtt().min()).collect(),
        dropped: net
            .links
            .iter()
            .map(|l| l[0].dropped() + l[1].dropped())
            .sum(),
    }
}

/// [`LOSSY_PATH`] with its queue and `loss` each way, drawn from `seed`.
pub fn run_lossy(algorithm: CongestionAlgorithm, loss: f64, seed: u64) -> CcRun {
    let link = |s| Link::lossy(LOSSY_PATH, LOSSY_QUEUE_BYTES, loss, s);
    let links = vec![[link(seed), link(seed ^ 0x5555)]];
    run_links(links, &[LOSSY_PATH], algorithm)
}

/// [`TWO_PATHS`] (drop-tail queues of one bandwidth-delay product, no random loss).
pub fn run_two_paths(algorithm: CongestionAlgorithm) -> CcRun {
    let links = TWO_PATHS
        .iter()
        .map(|&p| [Link::new(p), Link::new(p)])
        .collect();
    run_links(links, &TWO_PATHS, algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(what: &str, r: &CcRun) {
        println!(
            "{what}: goodput {:.3} Mbit/s, mean RTT {:?}, min RTT {:?}, dropped {}",
            r.goodput_bps / 1e6,
            r.rtt_mean,
            r.rtt_min,
            r.dropped
        );
    }

    #[test]
    fn bbr_keeps_its_rate_under_random_loss_where_cubic_does_not() {
        let bbr = run_lossy(CongestionAlgorithm::Bbr, LOSS, 1);
        let cubic = run_lossy(CongestionAlgorithm::Cubic, LOSS, 1);
        show("bbr 1% loss", &bbr);
        show("cubic 1% loss", &cubic);
        let rate = LOSSY_PATH.rate_bps as f64;
        assert!(bbr.goodput_bps >= 0.8 * rate, "{bbr:?}");
        assert!(cubic.goodput_bps < 0.6 * rate, "{cubic:?}");
    }

    #[test]
    fn bbr_fills_a_lossless_path_without_filling_its_queue() {
        let bbr = run_lossy(CongestionAlgorithm::Bbr, 0.0, 1);
        let cubic = run_lossy(CongestionAlgorithm::Cubic, 0.0, 1);
        show("bbr lossless", &bbr);
        show("cubic lossless", &cubic);
        let rate = LOSSY_PATH.rate_bps as f64;
        assert!(bbr.goodput_bps >= 0.85 * rate, "{bbr:?}");
        assert!(bbr.rtt_mean[0] <= 2 * LOSSY_PATH.rtt, "{bbr:?}");
        assert!(bbr.rtt_mean[0] < cubic.rtt_mean[0], "{bbr:?} {cubic:?}");
    }

    #[test]
    fn bbr_flows_of_different_rtts_fill_both_paths() {
        let bbr = run_two_paths(CongestionAlgorithm::Bbr);
        let newreno = run_two_paths(CongestionAlgorithm::NewReno);
        show("bbr two paths", &bbr);
        show("newreno two paths", &newreno);
        let sum: u64 = TWO_PATHS.iter().map(|p| p.rate_bps).sum();
        assert!(bbr.goodput_bps >= 0.85 * sum as f64, "{bbr:?}");
        for (rtt, p) in bbr.rtt_mean.iter().zip(TWO_PATHS) {
            assert!(*rtt <= 2 * p.rtt, "{bbr:?}");
        }
    }
}

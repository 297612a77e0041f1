//! A latency probe that runs beside a transfer: small UDP packets marked with a DSCP, sent from
//! the client namespace at a fixed interval and echoed by the server namespace, each timed on
//! its round trip. It shows what a voice or game flow sees while the bulk transfer loads the
//! paths (scenario key `[probe]`, see `docs/lab.md`).

use crate::{sys, LabError, Netns};
use serde::Serialize;
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The UDP port the echo listens on, at the transfer's server address.
pub const PROBE_PORT: u16 = 5999;

/// What to send.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSpec {
    /// DSCP of the probes and their echoes (46: EF, voice).
    pub dscp: u8,
    /// One probe every this long.
    pub interval: Duration,
    /// UDP payload bytes of a probe (at least 12: a counter and a timestamp).
    pub bytes: usize,
}

/// Round trips seen, in ms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeResult {
    /// The DSCP the probes carried.
    pub dscp: u8,
    /// Probes sent.
    pub sent: u64,
    /// Echoes received while the probe ran (those still on their way when it stopped are not
    /// counted).
    pub received: u64,
    /// Median round trip.
    pub rtt_ms_p50: Option<f64>,
    /// 95th percentile.
    pub rtt_ms_p95: Option<f64>,
    /// 99th percentile.
    pub rtt_ms_p99: Option<f64>,
    /// Largest.
    pub rtt_ms_max: Option<f64>,
    /// When the probe with the largest round trip was sent, in seconds after the probe started.
    pub rtt_max_at_s: Option<f64>,
    /// The largest round trip of the probes sent in each second of the run (`None` for a second
    /// whose probes were all lost): where in the run the slow ones were.
    pub rtt_ms_max_per_s: Vec<Option<f64>>,
}

/// A running probe; [`Probe::finish`] stops it and reports.
pub struct Probe {
    spec: ProbeSpec,
    stop: Arc<AtomicBool>,
    echo: JoinHandle<()>,
    sender: JoinHandle<u64>,
    receiver: JoinHandle<()>,
    /// Each echo's send time (s after start) and round trip (ms).
    rtts: Arc<Mutex<Vec<(f64, f64)>>>,
}

impl Probe {
    /// Start echoing at `server`'s address (port [`PROBE_PORT`]) in the server namespace and
    /// probing it from the client namespace, from `bind` if given (to pick a path).
    pub fn start(
        client: &Netns,
        server_ns: &Netns,
        server: SocketAddrV4,
        bind: Option<SocketAddrV4>,
        spec: &ProbeSpec,
    ) -> Result<Probe, LabError> {
        let target = SocketAddrV4::new(*server.ip(), PROBE_PORT);
        let tos = spec.dscp << 2;
        let echo_sock = server_ns
            .run(|| -> std::io::Result<UdpSocket> {
                let s = UdpSocket::bind(target)?;
                sys::set_tos(s.as_raw_fd(), tos)?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            })?
            .map_err(|e| LabError::io("opening the probe's echo in the server namespace", e))?;
        let probe_sock = client
            .run(|| -> std::io::Result<UdpSocket> {
                let s = UdpSocket::bind(bind.map_or_else(
                    || SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                    |b| SocketAddrV4::new(*b.ip(), 0),
                ))?;
                sys::set_tos(s.as_raw_fd(), tos)?;
                s.connect(target)?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            })?
            .map_err(|e| LabError::io("opening the probe in the client namespace", e))?;
        let recv_sock = probe_sock
            .try_clone()
            .map_err(|e| LabError::io("cloning the probe socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let rtts = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let echo = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("lab-probe-echo".into())
                .spawn(move || {
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((n, from)) = echo_sock.recv_from(&mut buf) {
                            let _ = echo_sock.send_to(&buf[..n], from);
                        }
                    }
                })
                .map_err(|e| LabError::io("spawning the probe echo", e))?
        };
        let sender = {
            let (stop, interval, bytes) = (stop.clone(), spec.interval, spec.bytes.max(12));
            std::thread::Builder::new()
                .name("lab-probe-send".into())
                .spawn(move || {
                    let mut buf = vec![0u8; bytes];
                    let mut sent = 0u64;
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let at = t0.elapsed().as_nanos() as u64;
                        buf[..4].copy_from_slice(&(sent as u32).to_be_bytes());
                        buf[4..12].copy_from_slice(&at.to_be_bytes());
                        if probe_sock.send(&buf).is_ok() {
                            sent += 1;
                        }
                        next += interval;
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                    sent
                })
                .map_err(|e| LabError::io("spawning the probe sender", e))?
        };
        let receiver = {
            let (stop, rtts) = (stop.clone(), rtts.clone());
            std::thread::Builder::new()
                .name("lab-probe-recv".into())
                .spawn(move || {
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(n) = recv_sock.recv(&mut buf) else {
                            continue;
                        };
                        let Some(at) = buf.get(4..12).filter(|_| n >= 12) else {
                            continue;
                        };
                        let sent_at = u64::from_be_bytes(at.try_into().expect("8 bytes"));
                        let now = t0.elapsed().as_nanos() as u64;
                        if sent_at > now {
                            // Not one of ours (a probe from the future).
                            continue;
                        }
                        if let Ok(mut r) = rtts.lock() {
                            let rtt = now.saturating_sub(sent_at) as f64 / 1e6;
                            r.push((sent_at as f64 / 1e9, rtt));
                        }
                    }
                })
                .map_err(|e| LabError::io("spawning the probe receiver", e))?
        };
        Ok(Probe {
            spec: spec.clone(),
            stop,
            echo,
            sender,
            receiver,
            rtts,
        })
    }

    /// Stop probing and report.
    pub fn finish(self) -> ProbeResult {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.join().unwrap_or(0);
        let _ = self.receiver.join();
        let _ = self.echo.join();
        let timed = self.rtts.lock().map(|r| r.clone()).unwrap_or_default();
        let seconds = (sent as f64 * self.spec.interval.as_secs_f64()).ceil() as usize;
        summarize(self.spec.dscp, sent, seconds, &timed)
    }
}

/// Percentiles of the round trips (nearest rank), and where the slow ones were, over a probe
/// that sent for `seconds`; `timed` holds each echo's send time (s) and round trip (ms).
fn summarize(dscp: u8, sent: u64, seconds: usize, timed: &[(f64, f64)]) -> ProbeResult {
    let mut sorted: Vec<f64> = timed.iter().map(|&(_, rtt)| rtt).collect();
    sorted.sort_by(f64::total_cmp);
    let slowest = timed.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let seconds = timed
        .iter()
        .map(|&(at, _)| at as usize + 1)
        .max()
        .unwrap_or(0)
        .max(seconds);
    let mut per_s: Vec<Option<f64>> = vec![None; seconds];
    for &(at, rtt) in timed {
        let m = &mut per_s[at as usize];
        *m = Some(m.map_or(rtt, |m: f64| m.max(rtt)));
    }
    let pct = |p: f64| -> Option<f64> {
        if sorted.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        Some(sorted[rank.clamp(1, sorted.len()) - 1])
    };
    ProbeResult {
        dscp,
        sent,
        received: sorted.len() as u64,
        rtt_ms_p50: pct(50.0),
        rtt_ms_p95: pct(95.0),
        rtt_ms_p99: pct(99.0),
        rtt_ms_max: sorted.last().copied(),
        rtt_max_at_s: slowest.map(|&(at, _)| at),
        rtt_ms_max_per_s: per_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        // Round trips 1..=100 ms, sent 0.02 s apart, in a shuffled order.
        let v: Vec<(f64, f64)> = (1..=100)
            .map(|i| ((i * 37 % 100) as f64 * 0.02, f64::from(i)))
            .collect();
        let r = summarize(46, 120, 2, &v);
        assert_eq!(r.received, 100);
        assert_eq!(r.rtt_ms_p50, Some(50.0));
        assert_eq!(r.rtt_ms_p95, Some(95.0));
        assert_eq!(r.rtt_ms_p99, Some(99.0));
        assert_eq!(r.rtt_ms_max, Some(100.0));
        assert_eq!(r.rtt_max_at_s, Some(0.0));
        assert_eq!(summarize(0, 3, 0, &[]).rtt_ms_p50, None);
        assert_eq!(summarize(0, 3, 0, &[]).rtt_ms_max_per_s, Vec::new());
        assert_eq!(summarize(0, 1, 1, &[(0.5, 7.0)]).rtt_ms_p95, Some(7.0));
    }

    #[test]
    fn the_slowest_probe_of_each_second() {
        // Five seconds of probing; the last two lost everything.
        let r = summarize(
            46,
            5,
            5,
            &[(0.1, 20.0), (0.9, 25.0), (2.5, 71.0), (2.7, 30.0)],
        );
        assert_eq!(
            r.rtt_ms_max_per_s,
            vec![Some(25.0), None, Some(71.0), None, None]
        );
        assert_eq!(r.rtt_max_at_s, Some(2.5));
    }
}

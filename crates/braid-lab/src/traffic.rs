//! The built-in bulk transfer: TCP (or MPTCP) senders in the client namespace writing as fast
//! as they can for a fixed time, receivers in the server namespace counting what arrives.
//!
//! Measurement window: from the moment the senders are released (`t0`) for `duration`. The
//! receivers count payload bytes read inside the window in bins of [`INTERVAL`], and the
//! longest stall: the largest gap between two reads that returned data (after the first byte),
//! or between the last one and the end of the window. At the end of the window the senders
//! read `TCP_INFO` (on MPTCP, `MPTCP_TCPINFO` for every subflow), then every connection is
//! reset (`SO_LINGER` 0), so nothing of this transfer is still queued during the next.

use crate::error::LabError;
use crate::netns::Netns;
use crate::sys::{self, StreamProto};
use serde::Serialize;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Width of one goodput bin.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Longest a sender waits for its connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes per write.
const WRITE_BYTES: usize = 128 * 1024;
/// Bytes per read.
const READ_BYTES: usize = 256 * 1024;

/// One connection of a transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    /// TCP or MPTCP (both ends).
    pub proto: StreamProto,
    /// Client address to bind (selects the path through the source-routing rules).
    pub bind: Option<SocketAddrV4>,
    /// Server address to listen on and connect to.
    pub server: SocketAddrV4,
    /// Congestion control of both ends (`None`: the namespace's default).
    pub congestion: Option<String>,
    /// DSCP to mark the sender's packets with (`None`: unmarked).
    pub dscp: Option<u8>,
}

/// What a sender's socket said at the end of the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TcpStats {
    /// `tcpi_total_retrans`, summed over subflows for MPTCP.
    pub retransmits: u64,
    /// `tcpi_reordering` (the largest over subflows for MPTCP).
    pub reordering: u32,
    /// `tcpi_dsack_dups`: retransmissions the receiver reported as duplicates (D-SACK), that
    /// is spurious ones; plain TCP only (absent for MPTCP, or on an older kernel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spurious_retransmits: Option<u64>,
    /// Smoothed RTT, ms (of the first subflow for MPTCP).
    pub rtt_ms: f64,
    /// Congestion window, segments (summed over subflows for MPTCP).
    pub snd_cwnd: u32,
    /// The sender's congestion control.
    pub congestion_control: String,
    /// MPTCP: subflows that were open at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subflows: Option<u32>,
    /// MPTCP: the connection fell back to plain TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<bool>,
    /// Where the figures come from and what they leave out.
    pub source: String,
}

/// One connection's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowResult {
    /// Payload bytes received in the window.
    pub bytes: u64,
    /// `bytes` over the window, Mbit/s.
    pub goodput_mbit: f64,
    /// Longest stall, ms.
    pub max_stall_ms: f64,
    /// When the first byte arrived, ms after `t0`.
    pub first_byte_ms: Option<f64>,
    /// Goodput per [`INTERVAL`], Mbit/s.
    pub series_mbit: Vec<f64>,
    /// The sender's TCP statistics, or why there are none.
    pub tcp: Result<TcpStats, String>,
}

/// A transfer's results.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkResult {
    /// The window.
    pub duration: Duration,
    /// Every connection, in the order given.
    pub flows: Vec<FlowResult>,
    /// Sum of the flows' goodput, Mbit/s.
    pub goodput_mbit: f64,
    /// Longest time no connection received anything, ms.
    pub max_stall_ms: f64,
    /// Sum of the flows' series.
    pub series_mbit: Vec<f64>,
    /// CPU use over the window, if it could be read.
    pub cpu: Option<CpuUse>,
    /// The latency probe beside the transfer, if the scenario has one.
    pub probe: Option<crate::probe::ProbeResult>,
    /// The client (sending) namespace's [`SENDER_TCP_EXT`] counters over the transfer: every
    /// TCP connection there counts (all the variant's flows and subflows, and for an
    /// accelerated tunnel its local hop into the daemon). Empty if they could not be read.
    pub sender_tcp_ext: std::collections::BTreeMap<String, u64>,
}

/// The `TcpExt` counters a transfer reports for its sending namespace: how the senders
/// recovered (fast retransmits, loss probes, RTOs and the spurious ones) and what the
/// receivers reported back (D-SACKs: retransmissions they already had).
pub const SENDER_TCP_EXT: [&str; 9] = [
    "TCPFastRetrans",
    "TCPLossProbes",
    "TCPLossProbeRecovery",
    "TCPTimeouts",
    "TCPSpuriousRTOs",
    "TCPDSACKRecv",
    "TCPDSACKRecvSegs",
    "TCPSACKReorder",
    "TCPLostRetransmit",
];

/// [`SENDER_TCP_EXT`] of the namespace `ns` now (empty if unreadable).
fn sender_tcp_ext(ns: &Netns) -> std::collections::BTreeMap<String, u64> {
    let all = ns
        .run(sys::tcp_ext_counters)
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    SENDER_TCP_EXT
        .iter()
        .filter_map(|&k| Some((k.to_owned(), *all.get(k)?)))
        .collect()
}

/// CPU use over a transfer's window, in cores (CPU-seconds per second): 1.0 is one core busy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuUse {
    /// The lab's own process: the TCP senders and receivers (and the kernel work done in their
    /// system calls), plus the link emulator in emulated mode.
    pub lab_cores: f64,
    /// The whole machine (`/proc/stat`): every process and interrupt, other work included.
    pub machine_cores: f64,
}

/// Busy and total jiffies of all CPUs together, from `/proc/stat`'s `cpu` line.
fn machine_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// A CPU reading at the start of a window.
pub(crate) struct CpuMeter {
    at: Instant,
    process: Option<Duration>,
    machine: Option<(u64, u64)>,
}

impl CpuMeter {
    pub(crate) fn start() -> Self {
        CpuMeter {
            at: Instant::now(),
            process: sys::process_cpu_time().ok(),
            machine: machine_jiffies(),
        }
    }

    pub(crate) fn finish(&self) -> Option<CpuUse> {
        let wall = self.at.elapsed().as_secs_f64();
        let process = sys::process_cpu_time().ok()?.checked_sub(self.process?)?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let (busy0, total0) = self.machine?;
        let (busy1, total1) = machine_jiffies()?;
        let total = total1.checked_sub(total0)?;
        (wall > 0.0 && total > 0).then(|| CpuUse {
            lab_cores: process.as_secs_f64() / wall,
            machine_cores: busy1.saturating_sub(busy0) as f64 / total as f64 * cpus,
        })
    }
}

#[derive(Default)]
struct StallClock {
    last: Option<Instant>,
    max_gap: Duration,
}

impl StallClock {
    fn data_at(&mut self, t: Instant) {
        if let Some(l) = self.last {
            self.max_gap = self.max_gap.max(t.saturating_duration_since(l));
        }
        self.last = Some(self.last.map_or(t, |l| l.max(t)));
    }

    fn finish(&self, end: Instant, window: Duration) -> f64 {
        match self.last {
            None => window.as_secs_f64() * 1e3,
            Some(l) => {
                self.max_gap
                    .max(end.saturating_duration_since(l))
                    .as_secs_f64()
                    * 1e3
            }
        }
    }
}

/// One stream's reads counted as [`receive`] counts a TCP socket's: bytes in the window, per
/// [`INTERVAL`] bin, the first byte and the longest stall. For receivers that are not kernel
/// sockets (the `ptcp` variant).
pub(crate) struct StreamMeter {
    t0: Instant,
    end: Instant,
    bytes: u64,
    bins: Vec<u64>,
    first: Option<Instant>,
    stall: StallClock,
}

impl StreamMeter {
    pub(crate) fn new(t0: Instant, duration: Duration) -> Self {
        let n_bins = duration.as_nanos().div_ceil(INTERVAL.as_nanos()).max(1) as usize;
        StreamMeter {
            t0,
            end: t0 + duration,
            bytes: 0,
            bins: vec![0; n_bins],
            first: None,
            stall: StallClock::default(),
        }
    }

    /// `n` bytes were read at `t` (ignored outside the window).
    pub(crate) fn data_at(&mut self, t: Instant, n: u64) {
        if t > self.end || t < self.t0 || n == 0 {
            return;
        }
        let last = self.bins.len() - 1;
        let bin = (((t - self.t0).as_nanos() / INTERVAL.as_nanos()) as usize).min(last);
        self.bins[bin] += n;
        self.bytes += n;
        self.first.get_or_insert(t);
        self.stall.data_at(t);
    }

    /// The stream's figures, as a TCP flow's (with `tcp` saying why there is no `TCP_INFO`).
    pub(crate) fn result(&self, tcp: Result<TcpStats, String>) -> FlowResult {
        let duration = self.end - self.t0;
        FlowResult {
            bytes: self.bytes,
            goodput_mbit: mbit(self.bytes, duration),
            max_stall_ms: self.stall.finish(self.end, duration),
            first_byte_ms: self.first.map(|f| (f - self.t0).as_secs_f64() * 1e3),
            series_mbit: self.bins.iter().map(|&b| mbit(b, INTERVAL)).collect(),
            tcp,
        }
    }
}

struct Received {
    bytes: u64,
    bins: Vec<u64>,
    first: Option<Instant>,
    stall: StallClock,
    stream: Option<TcpStream>,
}

struct Sent {
    tcp: Result<TcpStats, String>,
    stream: Option<TcpStream>,
    error: Option<String>,
}

/// Run one transfer: every flow at once for `duration`. `tick` is called about every
/// [`INTERVAL`] with the time since `t0` and the bytes received so far by all flows.
pub fn run_bulk(
    client: &Netns,
    server: &Netns,
    flows: &[FlowSpec],
    duration: Duration,
    tick: &mut dyn FnMut(Duration, u64),
) -> Result<BulkResult, LabError> {
    if flows.is_empty() {
        return Err(LabError::Traffic("no flows".into()));
    }
    let listeners: Vec<TcpListener> = server
        .run(|| {
            flows
                .iter()
                .map(|f| -> std::io::Result<TcpListener> {
                    let fd = sys::stream_socket(f.proto)?;
                    if let Some(cc) = &f.congestion {
                        sys::set_congestion(fd.as_raw_fd(), cc)?;
                    }
                    sys::set_reuseaddr(&fd)?;
                    sys::bind_v4(&fd, f.server)?;
                    sys::listen(&fd, 16)?;
                    Ok(TcpListener::from(fd))
                })
                .collect::<std::io::Result<Vec<_>>>()
        })?
        .map_err(|e| proto_error("listening in the server namespace", flows[0].proto, e))?;
    let ext_before = sender_tcp_ext(client);
    let sockets = client
        .run(|| {
            flows
                .iter()
                .map(|f| -> std::io::Result<TcpStream> {
                    let fd = sys::stream_socket(f.proto)?;
                    if let Some(cc) = &f.congestion {
                        sys::set_congestion(fd.as_raw_fd(), cc)?;
                    }
                    if let Some(b) = f.bind {
                        sys::bind_v4(&fd, b)?;
                    }
                    if let Some(d) = f.dscp {
                        sys::set_tos(fd.as_raw_fd(), d << 2)?;
                    }
                    Ok(TcpStream::from(fd))
                })
                .collect::<std::io::Result<Vec<_>>>()
        })?
        .map_err(|e| proto_error("opening sockets in the client namespace", flows[0].proto, e))?;

    let n_bins = duration.as_nanos().div_ceil(INTERVAL.as_nanos()) as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let stall = Arc::new(Mutex::new(StallClock::default()));
    let t0 = Instant::now();
    let end = t0 + duration;

    let mut receivers: Vec<JoinHandle<Result<Received, String>>> = Vec::new();
    for l in listeners {
        let (total, stall) = (total.clone(), stall.clone());
        receivers.push(
            std::thread::Builder::new()
                .name("lab-recv".into())
                .spawn(move || receive(l, t0, end, n_bins, &total, &stall))
                .map_err(|e| LabError::io("spawning a receiver", e))?,
        );
    }
    let mut senders: Vec<JoinHandle<Sent>> = Vec::new();
    for (s, f) in sockets.into_iter().zip(flows) {
        let (stop, f) = (stop.clone(), f.clone());
        senders.push(
            std::thread::Builder::new()
                .name("lab-send".into())
                .spawn(move || send(s, f, end, &stop))
                .map_err(|e| LabError::io("spawning a sender", e))?,
        );
    }

    let meter = CpuMeter::start();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(INTERVAL.min(end - now));
        tick(t0.elapsed().min(duration), total.load(Ordering::Relaxed));
    }
    let cpu = meter.finish();
    stop.store(true, Ordering::Relaxed);

    let received: Vec<Result<Received, String>> = receivers
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("receiver panicked".into())))
        .collect();
    let sent: Vec<Sent> = senders
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| Sent {
                tcp: Err("sender panicked".into()),
                stream: None,
                error: Some("sender panicked".into()),
            })
        })
        .collect();
    let ext_after = sender_tcp_ext(client);
    let sender_tcp_ext = ext_after
        .iter()
        .filter_map(|(k, &v)| Some((k.clone(), v.saturating_sub(*ext_before.get(k)?))))
        .collect();
    // Reset every connection now that the statistics are read.
    let mut errors = Vec::new();
    let mut results = Vec::new();
    for (i, (r, mut s)) in received.into_iter().zip(sent).enumerate() {
        if let Some(st) = s.stream.take() {
            let _ = sys::set_linger_zero(st.as_raw_fd());
        }
        if let Some(e) = s.error {
            errors.push(format!("flow {i} sender: {e}"));
        }
        match r {
            Ok(mut r) => {
                if let Some(st) = r.stream.take() {
                    let _ = sys::set_linger_zero(st.as_raw_fd());
                }
                results.push(FlowResult {
                    bytes: r.bytes,
                    goodput_mbit: mbit(r.bytes, duration),
                    max_stall_ms: r.stall.finish(end, duration),
                    first_byte_ms: r.first.map(|f| (f - t0).as_secs_f64() * 1e3),
                    series_mbit: r.bins.iter().map(|&b| mbit(b, INTERVAL)).collect(),
                    tcp: s.tcp,
                });
            }
            Err(e) => errors.push(format!("flow {i} receiver: {e}")),
        }
    }
    if results.len() < flows.len() || results.iter().all(|r| r.bytes == 0) {
        if errors.is_empty() {
            errors.push("no data arrived".into());
        }
        return Err(LabError::Traffic(errors.join("; ")));
    }
    let mut series = vec![0.0; n_bins];
    for r in &results {
        for (a, b) in series.iter_mut().zip(&r.series_mbit) {
            *a += b;
        }
    }
    let max_stall_ms = stall
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .finish(end, duration);
    Ok(BulkResult {
        duration,
        goodput_mbit: results.iter().map(|r| r.goodput_mbit).sum(),
        flows: results,
        max_stall_ms,
        series_mbit: series,
        cpu,
        probe: None,
        sender_tcp_ext,
    })
}

fn proto_error(what: &str, proto: StreamProto, e: std::io::Error) -> LabError {
    if proto == StreamProto::Mptcp
        && matches!(
            e.raw_os_error(),
            Some(libc::EPROTONOSUPPORT) | Some(libc::ENOPROTOOPT) | Some(libc::EINVAL)
        )
    {
        return LabError::io(
            format!(
                "{what}: this kernel refuses IPPROTO_MPTCP sockets (is net.mptcp.enabled = 1?)"
            ),
            e,
        );
    }
    LabError::io(what, e)
}

fn mbit(bytes: u64, over: Duration) -> f64 {
    bytes as f64 * 8.0 / over.as_secs_f64().max(1e-9) / 1e6
}

fn receive(
    listener: TcpListener,
    t0: Instant,
    end: Instant,
    n_bins: usize,
    total: &AtomicU64,
    stall: &Mutex<StallClock>,
) -> Result<Received, String> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listener: {e}"))?;
    let accept_by = end.max(t0 + CONNECT_TIMEOUT);
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= accept_by {
                    return Err("no connection arrived".into());
                }
                let _ = sys::wait_readable(listener.as_raw_fd(), Some(Duration::from_millis(20)));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    let setup = stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(Duration::from_millis(20))));
    setup.map_err(|e| format!("socket options: {e}"))?;
    let mut r = Received {
        bytes: 0,
        bins: vec![0; n_bins],
        first: None,
        stall: StallClock::default(),
        stream: None,
    };
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let t = Instant::now();
                if t > end {
                    break;
                }
                let bin = (((t - t0).as_nanos() / INTERVAL.as_nanos()) as usize).min(n_bins - 1);
                r.bins[bin] += n as u64;
                r.bytes += n as u64;
                r.first.get_or_insert(t);
                r.stall.data_at(t);
                stall.lock().unwrap_or_else(|p| p.into_inner()).data_at(t);
                total.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if Instant::now() >= end {
                    break;
                }
            }
            Err(e) => {
                if Instant::now() < end {
                    return Err(format!("read: {e}"));
                }
                break;
            }
        }
    }
    r.stream = Some(stream);
    Ok(r)
}

fn send(stream: TcpStream, flow: FlowSpec, end: Instant, stop: &AtomicBool) -> Sent {
    let fail = |e: String| Sent {
        tcp: Err(e.clone()),
        stream: None,
        error: Some(e),
    };
    if let Err(e) = stream.set_write_timeout(Some(CONNECT_TIMEOUT)) {
        return fail(format!("socket options: {e}"));
    }
    let fd = std::os::fd::OwnedFd::from(stream);
    if let Err(e) = sys::connect_v4(&fd, flow.server) {
        return fail(format!("connect to {}: {e}", flow.server));
    }
    let stream = TcpStream::from(fd);
    if let Err(e) = stream.set_write_timeout(Some(Duration::from_millis(50))) {
        return fail(format!("socket options: {e}"));
    }
    let buf: Vec<u8> = (0..WRITE_BYTES).map(|i| (i % 251) as u8).collect();
    let mut error = None;
    let hard_stop = end + Duration::from_secs(10);
    while !stop.load(Ordering::Relaxed) && Instant::now() < hard_stop {
        match sys::send_nosignal(stream.as_raw_fd(), &buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                if Instant::now() < end {
                    error = Some(format!("write: {e}"));
                }
                break;
            }
        }
    }
    let tcp = stats(&stream, flow.proto).map(|mut t| {
        t.congestion_control = sys::congestion(stream.as_raw_fd()).unwrap_or_default();
        t
    });
    Sent {
        tcp,
        stream: Some(stream),
        error,
    }
}

fn stats(stream: &TcpStream, proto: StreamProto) -> Result<TcpStats, String> {
    let fd = stream.as_raw_fd();
    match proto {
        StreamProto::Tcp => {
            let i = sys::tcp_info(fd).map_err(|e| format!("TCP_INFO: {e}"))?;
            Ok(TcpStats {
                retransmits: u64::from(i.tcpi_total_retrans),
                reordering: i.tcpi_reordering,
                spurious_retransmits: sys::tcp_dsack_dups(fd).ok().flatten().map(u64::from),
                rtt_ms: f64::from(i.tcpi_rtt) / 1e3,
                snd_cwnd: i.tcpi_snd_cwnd,
                congestion_control: String::new(),
                subflows: None,
                fallback: None,
                source: "TCP_INFO".into(),
            })
        }
        StreamProto::Mptcp => {
            let info = sys::mptcp_info(fd).ok();
            let subs =
                sys::mptcp_subflow_tcp_info(fd).map_err(|e| format!("MPTCP_TCPINFO: {e}"))?;
            if subs.is_empty() {
                return Err("MPTCP_TCPINFO listed no subflow".into());
            }
            Ok(TcpStats {
                retransmits: subs.iter().map(|i| u64::from(i.tcpi_total_retrans)).sum(),
                reordering: subs.iter().map(|i| i.tcpi_reordering).max().unwrap_or(0),
                spurious_retransmits: None,
                rtt_ms: f64::from(subs[0].tcpi_rtt) / 1e3,
                snd_cwnd: subs.iter().map(|i| i.tcpi_snd_cwnd).sum(),
                congestion_control: String::new(),
                subflows: Some(subs.len() as u32),
                fallback: info.map(|i| i.fallback),
                source: "MPTCP_TCPINFO: subflow-level retransmissions summed over subflows; \
                         MPTCP-level reinjections are not counted"
                    .into(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_clock_takes_gaps_and_the_tail() {
        let t0 = Instant::now();
        let ms = |x| t0 + Duration::from_millis(x);
        let mut s = StallClock::default();
        assert_eq!(s.finish(ms(1000), Duration::from_secs(1)), 1000.0);
        s.data_at(ms(100));
        s.data_at(ms(150));
        s.data_at(ms(400));
        s.data_at(ms(420));
        assert_eq!(s.finish(ms(500), Duration::from_secs(1)), 250.0);
        assert_eq!(s.finish(ms(800), Duration::from_secs(1)), 380.0);
        // Out-of-order reports from two flows do not move `last` back.
        s.data_at(ms(410));
        assert_eq!(s.last, Some(ms(420)));
    }
}

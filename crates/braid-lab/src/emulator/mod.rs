//! braid's userspace link emulator (this kernel has no netem).
//!
//! One [`PathEmulator`] per path runs in the path's emulator namespace, between two veth ends:
//! `cli` (facing the client) and `srv` (facing the server). Each direction is a thread that
//! reads Ethernet frames from one end with an `AF_PACKET` socket, asks the sans-IO
//! [`model::LinkModel`] what becomes of each, holds the frames it delivers in a FIFO delay
//! line, and writes them out of the other end at their delivery instant. The emulator is a
//! wire, not a router: it forwards every frame (ARP included) unchanged, with the
//! virtio-net header that carries the sender's checksum-offload state.
//!
//! Timing: the thread sleeps in `ppoll` until the next delivery or the next arrival, with its
//! timer slack set to 1 ns so it wakes within microseconds. Delivery instants come from the
//! model's clock, not from when the thread happened to run, so lateness never accumulates;
//! how late each frame went out is counted (`late_us_mean`, `late_us_max`).

pub mod model;

use crate::error::LabError;
use crate::netns::Netns;
use crate::sys::{self, PacketSocket, VNET_HDR_LEN};
use braid_proto::time::{Duration, Instant};
use model::{DirectionConfig, LinkModel, Verdict};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;

/// Largest number of frames one direction holds in its delay line; more are dropped and
/// counted in `overflow_drops`.
pub const MAX_DELAY_LINE_FRAMES: usize = 65_536;
/// Longest a direction thread sleeps before it looks at its stop flag again.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// How long before a delivery the thread stops sleeping and spins: timer wake-ups on a VM are
/// tens of microseconds late even with a 1 ns timer slack.
const SPIN: Duration = Duration::from_micros(50);
/// `SCHED_FIFO` priority of the direction threads.
const REALTIME_PRIORITY: i32 = 10;
/// Frames read in one go before the thread looks at its delay line again.
const READ_BATCH: usize = 256;
/// Receive buffer of each `AF_PACKET` socket.
const RCVBUF_BYTES: usize = 8 << 20;
/// Spare frame buffers kept for reuse.
const POOL_LIMIT: usize = 4096;

/// The emulator's monotonic clock, as a core [`Instant`] (nanoseconds since the first call in
/// this process).
pub fn now() -> Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    let base = *BASE.get_or_init(std::time::Instant::now);
    Instant::from_nanos(u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

#[derive(Debug, Default)]
struct Counters {
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    queue_drops: AtomicU64,
    loss_drops: AtomicU64,
    down_drops: AtomicU64,
    overflow_drops: AtomicU64,
    truncated: AtomicU64,
    gso_frames: AtomicU64,
    tx_errors: AtomicU64,
    late_ns_sum: AtomicU64,
    late_ns_max: AtomicU64,
    late_over_1ms: AtomicU64,
}

/// Counters of one direction of a path, since the emulator started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DirectionCounters {
    /// Frames read from the incoming end.
    pub frames_in: u64,
    /// Their bytes (Ethernet header included).
    pub bytes_in: u64,
    /// Frames written to the outgoing end.
    pub frames_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Dropped by the drop-tail queue.
    pub queue_drops: u64,
    /// Dropped by the loss model.
    pub loss_drops: u64,
    /// Dropped because the link was down (schedule).
    pub down_drops: u64,
    /// Dropped because the delay line held [`MAX_DELAY_LINE_FRAMES`].
    pub overflow_drops: u64,
    /// Frames longer than the read buffer (dropped).
    pub truncated: u64,
    /// Frames that arrived as a segmentation-offload super-frame (offloads were not off; the
    /// model counted each as one frame).
    pub gso_frames: u64,
    /// Writes the kernel refused.
    pub tx_errors: u64,
    /// Mean lateness of a write behind its delivery instant, microseconds.
    pub late_us_mean: f64,
    /// Largest lateness since the emulator started, microseconds.
    pub late_us_max: f64,
    /// Writes more than 1 ms late.
    pub late_over_1ms: u64,
    /// Sum of the lateness of every write, ns (to compute means over an interval).
    #[serde(skip)]
    pub late_ns_total: u64,
}

impl DirectionCounters {
    /// `self - earlier`, for counting one measurement (`late_us_max` stays the maximum since
    /// the start).
    pub fn since(&self, earlier: &DirectionCounters) -> DirectionCounters {
        let frames_out = self.frames_out - earlier.frames_out;
        let late_ns_total = self.late_ns_total - earlier.late_ns_total;
        DirectionCounters {
            frames_in: self.frames_in - earlier.frames_in,
            bytes_in: self.bytes_in - earlier.bytes_in,
            frames_out,
            bytes_out: self.bytes_out - earlier.bytes_out,
            queue_drops: self.queue_drops - earlier.queue_drops,
            loss_drops: self.loss_drops - earlier.loss_drops,
            down_drops: self.down_drops - earlier.down_drops,
            overflow_drops: self.overflow_drops - earlier.overflow_drops,
            truncated: self.truncated - earlier.truncated,
            gso_frames: self.gso_frames - earlier.gso_frames,
            tx_errors: self.tx_errors - earlier.tx_errors,
            late_us_mean: if frames_out == 0 {
                0.0
            } else {
                late_ns_total as f64 / frames_out as f64 / 1e3
            },
            late_us_max: self.late_us_max,
            late_over_1ms: self.late_over_1ms - earlier.late_over_1ms,
            late_ns_total,
        }
    }
}

impl Counters {
    fn snapshot(&self) -> DirectionCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let out = g(&self.frames_out);
        DirectionCounters {
            frames_in: g(&self.frames_in),
            bytes_in: g(&self.bytes_in),
            frames_out: out,
            bytes_out: g(&self.bytes_out),
            queue_drops: g(&self.queue_drops),
            loss_drops: g(&self.loss_drops),
            down_drops: g(&self.down_drops),
            overflow_drops: g(&self.overflow_drops),
            truncated: g(&self.truncated),
            gso_frames: g(&self.gso_frames),
            tx_errors: g(&self.tx_errors),
            late_us_mean: if out == 0 {
                0.0
            } else {
                g(&self.late_ns_sum) as f64 / out as f64 / 1e3
            },
            late_us_max: g(&self.late_ns_max) as f64 / 1e3,
            late_over_1ms: g(&self.late_over_1ms),
            late_ns_total: g(&self.late_ns_sum),
        }
    }
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// Counters of both directions of a path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PathCounters {
    /// Client to server.
    pub forward: DirectionCounters,
    /// Server to client.
    pub reverse: DirectionCounters,
}

impl PathCounters {
    /// `self - earlier`.
    pub fn since(&self, earlier: &PathCounters) -> PathCounters {
        PathCounters {
            forward: self.forward.since(&earlier.forward),
            reverse: self.reverse.since(&earlier.reverse),
        }
    }
}

struct Direction {
    counters: Arc<Counters>,
    failure: Arc<std::sync::Mutex<Option<String>>>,
    thread: Option<JoinHandle<Result<(), LabError>>>,
}

/// The emulator of one path: two direction threads in the path's emulator namespace.
pub struct PathEmulator {
    stop: Arc<AtomicBool>,
    epoch_ns: Arc<AtomicU64>,
    directions: Vec<Direction>,
}

/// Which veth ends of the emulator namespace a direction reads and writes.
#[derive(Clone, Debug)]
pub struct Ends {
    /// The end facing the client.
    pub client_side: String,
    /// The end facing the server.
    pub server_side: String,
}

impl PathEmulator {
    /// Start both directions in `ns`. Returns once both have their sockets open, so no frame
    /// sent afterwards is missed.
    pub fn start(
        ns: &Netns,
        ends: &Ends,
        forward: DirectionConfig,
        reverse: DirectionConfig,
        seed: u64,
    ) -> Result<PathEmulator, LabError> {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch_ns = Arc::new(AtomicU64::new(u64::MAX));
        let mut emu = PathEmulator {
            stop: stop.clone(),
            epoch_ns: epoch_ns.clone(),
            directions: Vec::new(),
        };
        let plan = [
            ("fwd", &ends.client_side, &ends.server_side, forward, seed),
            (
                "rev",
                &ends.server_side,
                &ends.client_side,
                reverse,
                seed ^ 0x9e37_79b9_7f4a_7c15,
            ),
        ];
        for (label, rx_dev, tx_dev, cfg, seed) in plan {
            let counters = Arc::new(Counters::default());
            let failure = Arc::new(std::sync::Mutex::new(None));
            let (ready_tx, ready_rx) = mpsc::channel();
            let (rx_dev, tx_dev) = (rx_dev.clone(), tx_dev.clone());
            let (c, s, e, f) = (
                counters.clone(),
                stop.clone(),
                epoch_ns.clone(),
                failure.clone(),
            );
            let thread = ns.spawn(&format!("emu-{label}"), move || {
                let r = run_direction(&rx_dev, &tx_dev, cfg, seed, &c, &s, &e, ready_tx);
                if let Err(err) = &r {
                    *f.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("{label} ({rx_dev} -> {tx_dev}): {err}"));
                }
                r
            })?;
            emu.directions.push(Direction {
                counters,
                failure,
                thread: Some(thread),
            });
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    let d = emu.directions.last_mut().and_then(|d| d.thread.take());
                    return Err(match d.map(|t| t.join()) {
                        Some(Ok(Err(e))) => e,
                        _ => LabError::Emulator(format!("the {label} thread died at start")),
                    });
                }
            }
        }
        Ok(emu)
    }

    /// Start the schedules of both directions now.
    pub fn restart_schedule(&self) {
        self.epoch_ns.store(now().as_nanos(), Ordering::Release);
    }

    /// Counters of both directions.
    pub fn counters(&self) -> PathCounters {
        PathCounters {
            forward: self.directions[0].counters.snapshot(),
            reverse: self.directions[1].counters.snapshot(),
        }
    }

    /// Why a direction thread stopped on its own, if one did (it then forwards nothing).
    pub fn failure(&self) -> Option<String> {
        self.directions
            .iter()
            .find_map(|d| d.failure.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Stop both threads and wait for them; returns the first error a thread ended with.
    pub fn stop(&mut self) -> Result<(), LabError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for d in &mut self.directions {
            if let Some(t) = d.thread.take() {
                let r = match t.join() {
                    Ok(r) => r,
                    Err(_) => Err(LabError::Emulator("a direction thread panicked".into())),
                };
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }
}

impl Drop for PathEmulator {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[allow(clippy::too_many_arguments)]
fn run_direction(
    rx_dev: &str,
    tx_dev: &str,
    config: DirectionConfig,
    seed: u64,
    counters: &Counters,
    stop: &AtomicBool,
    epoch_ns: &AtomicU64,
    ready: mpsc::Sender<Result<(), LabError>>,
) -> Result<(), LabError> {
    let open = || -> Result<(PacketSocket, PacketSocket), LabError> {
        // Best effort: without these, wake-ups are up to 50 us late, and several ms late when
        // the transfer's own threads keep both CPUs busy.
        let _ = sys::set_timer_slack(1);
        let _ = sys::set_realtime(REALTIME_PRIORITY);
        let rx_idx =
            sys::if_index(rx_dev).map_err(|e| LabError::io(format!("interface {rx_dev}"), e))?;
        let tx_idx =
            sys::if_index(tx_dev).map_err(|e| LabError::io(format!("interface {tx_dev}"), e))?;
        let rx = PacketSocket::receiver(rx_idx, RCVBUF_BYTES)
            .map_err(|e| LabError::io(format!("packet socket on {rx_dev}"), e))?;
        let tx = PacketSocket::sender(tx_idx)
            .map_err(|e| LabError::io(format!("packet socket on {tx_dev}"), e))?;
        Ok((rx, tx))
    };
    let (rx, tx) = match open() {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let msg = e.to_string();
            let _ = ready.send(Err(e));
            return Err(LabError::Emulator(msg));
        }
    };
    let mut model = LinkModel::new(config, seed);
    let mut line: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut scratch = vec![0u8; VNET_HDR_LEN + 65_536];
    let mut applied_epoch = u64::MAX;
    while !stop.load(Ordering::Relaxed) {
        let epoch = epoch_ns.load(Ordering::Acquire);
        if epoch != applied_epoch {
            applied_epoch = epoch;
            model.restart_schedule(Instant::from_nanos(epoch));
        }
        // Deliver what is due.
        let t = now();
        while line.front().is_some_and(|(at, _)| *at <= t) {
            let Some((at, buf)) = line.pop_front() else {
                break;
            };
            match tx.send(&buf) {
                Ok(_) => {
                    bump(&counters.frames_out, 1);
                    bump(&counters.bytes_out, (buf.len() - VNET_HDR_LEN) as u64);
                    let late = u64::try_from((now() - at).as_nanos()).unwrap_or(u64::MAX);
                    bump(&counters.late_ns_sum, late);
                    counters.late_ns_max.fetch_max(late, Ordering::Relaxed);
                    if late > 1_000_000 {
                        bump(&counters.late_over_1ms, 1);
                    }
                }
                Err(_) => bump(&counters.tx_errors, 1),
            }
            if pool.len() < POOL_LIMIT {
                pool.push(buf);
            }
        }
        // Sleep until the next delivery or an arrival.
        let wait = match line.front() {
            Some((at, _)) => (*at - now()).min(MAX_WAIT),
            None => MAX_WAIT,
        };
        if wait > SPIN {
            sys::wait_readable(rx.raw_fd(), Some(wait - SPIN))
                .map_err(|e| LabError::io(format!("ppoll on {rx_dev}"), e))?;
        }
        // Take in what arrived.
        for _ in 0..READ_BATCH {
            let n = match rx.recv(&mut scratch) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => return Err(LabError::io(format!("reading {rx_dev}"), e)),
            };
            let t = now();
            if n > scratch.len() {
                bump(&counters.truncated, 1);
                continue;
            }
            if n <= VNET_HDR_LEN {
                continue;
            }
            let wire = (n - VNET_HDR_LEN) as u64;
            bump(&counters.frames_in, 1);
            bump(&counters.bytes_in, wire);
            // virtio_net_hdr.gso_type is byte 1; 0 is VIRTIO_NET_HDR_GSO_NONE.
            if scratch[1] != 0 {
                bump(&counters.gso_frames, 1);
            }
            match model.on_frame(t, wire) {
                Verdict::Deliver { at } => {
                    if line.len() >= MAX_DELAY_LINE_FRAMES {
                        bump(&counters.overflow_drops, 1);
                        continue;
                    }
                    let mut buf = pool.pop().unwrap_or_else(|| Vec::with_capacity(2048));
                    buf.clear();
                    buf.extend_from_slice(&scratch[..n]);
                    line.push_back((at, buf));
                }
                Verdict::QueueFull => bump(&counters.queue_drops, 1),
                Verdict::Lost => bump(&counters.loss_drops, 1),
                Verdict::Down => bump(&counters.down_drops, 1),
            }
        }
    }
    Ok(())
}

//! The lab's `ptcp` variant: pTCP inside braid's secure session, one micro-flow per emulated
//! path, run in-process in the testbed's namespaces with the code of `braid send`/`braid recv`
//! (`braid_daemon::ptcp_node`). The configs are the lab tunnel's (fresh keys, the client's
//! paths bound to the testbed's path addresses with the scenario's rates), parsed in memory.
//!
//! Congestion control: the scenario's (or `--congestion-control`) when pTCP has it (`cubic`,
//! `reno`, `bbr`), else BBR with a note. When the scenario sets none the kernel variants run
//! the namespaces' default, BBR in the lab, so the micro-flows run BBR too (and a note says
//! so): comparing pTCP-with-CUBIC against MPTCP-with-BBR on a lossy path measured the
//! controllers, not the transports.

use braid_daemon::config::Config;
use braid_daemon::ptcp_node::{NodeOptions, PtcpNode};
use braid_lab::runner::DataSink;
use braid_lab::testbed::{client_addr, server_addr};
use braid_lab::{LabError, PtcpLauncher, PtcpOutcome, PtcpTransfer, Scenario, Testbed};
use braid_ptcp::{CongestionAlgorithm, State};
use braid_session::PrivateKey;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// UDP port of the server end (not the tunnel variant's 7000).
const PORT: u16 = 7001;
/// One node turn waits at most this long.
const TURN: Duration = Duration::from_millis(5);
/// The session and the connection must be up within this long.
const SETUP: Duration = Duration::from_secs(15);

/// Starts the `ptcp` variant's two ends.
pub struct Launcher;

#[derive(Default)]
struct Shared {
    /// The client's connection is open.
    ready: AtomicBool,
    /// Stop both ends.
    stop: AtomicBool,
    /// Set by `go`: the end of the window and where the receiver reports its reads.
    go: Mutex<Option<(Instant, DataSink)>>,
}

struct Run {
    shared: Arc<Shared>,
    client: Option<JoinHandle<Result<ClientEnd, LabError>>>,
    server: Option<JoinHandle<Result<serde_json::Value, LabError>>>,
    notes: Vec<String>,
    /// The client's state directory (its handshake clock floor), removed with the run.
    state: std::path::PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        // Both ends are stopped first: the client may still write its clock floor there.
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.client.take() {
            let _ = h.join();
        }
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

struct ClientEnd {
    retransmits: u64,
    notes: Vec<String>,
    status: serde_json::Value,
}

fn key() -> Result<(String, String), LabError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| LabError::Traffic(format!("no randomness: {e}")))?;
    let k = PrivateKey::from_random(bytes);
    Ok((k.to_base64(), k.public_key().to_base64()))
}

fn parse(text: &str, name: &str) -> Result<Config, LabError> {
    Config::parse(text, Path::new(name)).map_err(|e| LabError::Traffic(e.to_string()))
}

/// The micro-flows' congestion control for the scenario's name, and a note if it had to
/// differ.
fn congestion(wanted: Option<&str>) -> (CongestionAlgorithm, Option<String>) {
    match wanted {
        None => (
            CongestionAlgorithm::Bbr,
            Some(
                "no congestion control in the scenario: the micro-flows ran bbr, the \
                 namespaces' default that the kernel variants run"
                    .into(),
            ),
        ),
        Some(name) => match name.parse() {
            Ok(a) => (a, None),
            Err(_) => (
                CongestionAlgorithm::Bbr,
                Some(format!(
                    "pTCP's micro-flows have cubic, reno and bbr, not {name}: they ran bbr"
                )),
            ),
        },
    }
}

fn traffic(what: impl std::fmt::Display) -> LabError {
    LabError::Traffic(what.to_string())
}

impl PtcpLauncher for Launcher {
    fn start(
        &self,
        testbed: &Testbed,
        scenario: &Scenario,
    ) -> Result<Box<dyn PtcpTransfer>, LabError> {
        let (ck, cp) = key()?;
        let (sk, sp) = key()?;
        let server = format!(
            "role = \"server\"\nprivate_key = \"{sk}\"\npeer_public_key = \"{cp}\"\nlisten = \"0.0.0.0:{PORT}\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"10.99.0.1/30\"]\n"
        );
        // The client's handshake clock floor goes to a directory of the run's own, not to
        // the machine's /var/lib/braid (fresh keys each run: a new file each time).
        let state = std::env::temp_dir().join(format!("braid-lab-ptcp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        let mut client = format!(
            "role = \"client\"\nprivate_key = \"{ck}\"\npeer_public_key = \"{sp}\"\nstate_dir = \"{}\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"10.99.0.2/30\"]\n",
            state.display()
        );
        for (i, p) in scenario.paths.iter().enumerate() {
            let rate = p.forward.as_ref().map_or(1000.0, |f| f.rate_mbit);
            client.push_str(&format!(
                "[[path]]\nname = \"path{i}\"\nlocal = \"{}\"\nremote = \"{}:{PORT}\"\nrate_mbit = {rate}\n",
                client_addr(i),
                server_addr(i)
            ));
        }
        let server = parse(&server, "ptcp-server.toml")?;
        let client = parse(&client, "ptcp-client.toml")?;
        let (algorithm, note) = congestion(scenario.congestion_control.as_deref());
        let cc_note = format!("micro-flows' congestion control: {algorithm:?}");
        let options = NodeOptions {
            congestion: algorithm,
            ..NodeOptions::default()
        };
        let shared = Arc::new(Shared::default());
        let (s2, o2) = (shared.clone(), options.clone());
        let server = testbed
            .server()
            .spawn("ptcp-recv", move || server_end(&server, o2, &s2))?;
        let s3 = shared.clone();
        let client = testbed
            .client()
            .spawn("ptcp-send", move || client_end(&client, options, &s3))?;
        let run = Run {
            shared,
            client: Some(client),
            server: Some(server),
            notes: note.into_iter().chain([cc_note]).collect(),
            state,
        };
        let deadline = Instant::now() + SETUP;
        while !run.shared.ready.load(Ordering::Relaxed) {
            let finished = run.client.as_ref().is_some_and(JoinHandle::is_finished)
                || run.server.as_ref().is_some_and(JoinHandle::is_finished);
            if finished || Instant::now() > deadline {
                let outcome = run.finish_inner();
                return Err(traffic(format!(
                    "pTCP did not open within {} s: {}",
                    SETUP.as_secs(),
                    outcome.map_or_else(|e| e.to_string(), |o| o.notes.join("; "))
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Box::new(run))
    }
}

impl Run {
    fn finish_inner(mut self) -> Result<PtcpOutcome, LabError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let client = self.client.take().map(join);
        let server = self.server.take().map(join);
        let mut notes = std::mem::take(&mut self.notes);
        let client = match client {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(traffic(format!("pTCP sender: {e}"))),
            None => return Err(traffic("pTCP sender missing")),
        };
        let server = match server {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                notes.push(format!("receiver: {e}"));
                serde_json::Value::Null
            }
            None => serde_json::Value::Null,
        };
        notes.extend(client.notes);
        Ok(PtcpOutcome {
            retransmits: client.retransmits,
            notes,
            status: Some(serde_json::json!({ "client": client.status, "server": server })),
        })
    }
}

impl PtcpTransfer for Run {
    fn go(&mut self, end: Instant, on_data: DataSink) -> Result<(), LabError> {
        *self.shared.go.lock().unwrap_or_else(|p| p.into_inner()) = Some((end, on_data));
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<PtcpOutcome, LabError> {
        (*self).finish_inner()
    }
}

fn join<T>(h: JoinHandle<Result<T, LabError>>) -> Result<T, LabError> {
    h.join()
        .unwrap_or_else(|_| Err(traffic("a pTCP end panicked")))
}

fn io(e: std::io::Error) -> LabError {
    LabError::io("pTCP event loop", e)
}

/// The receiver: accept the connection, read everything, report reads once the window opened.
fn server_end(
    cfg: &Config,
    options: NodeOptions,
    shared: &Shared,
) -> Result<serde_json::Value, LabError> {
    let mut node = PtcpNode::new(cfg, options).map_err(traffic)?;
    let mut id = None;
    let mut buf = vec![0u8; 256 * 1024];
    let mut sink: Option<DataSink> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        node.turn(TURN).map_err(io)?;
        if id.is_none() {
            id = node.accept();
        }
        if sink.is_none() {
            sink = shared
                .go
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|(_, s)| s.clone());
        }
        let Some(c) = id.and_then(|i| node.conn_mut(i)) else {
            continue;
        };
        loop {
            let n = c.read(&mut buf);
            if n == 0 {
                break;
            }
            if let Some(s) = &sink {
                s(Instant::now(), n as u64);
            }
        }
    }
    let mut status = serde_json::to_value(node.status()).unwrap_or_default();
    if let Some(c) = id.and_then(|i| node.conn(i)) {
        status["ptcp_connection"] = serde_json::json!({
            "receive_buffer_bytes": c.receive_buffer_capacity(),
            "stats": format!("{:?}", c.stats()),
        });
    }
    Ok(status)
}

/// The sender: handshake, measure the paths, open the connection, then write until the end of
/// the window.
fn client_end(cfg: &Config, options: NodeOptions, shared: &Shared) -> Result<ClientEnd, LabError> {
    let mut node = PtcpNode::new(cfg, options).map_err(traffic)?;
    let stopped = || shared.stop.load(Ordering::Relaxed);
    while !node.is_established() {
        if stopped() {
            return Err(traffic("no handshake: the server never answered"));
        }
        node.turn(TURN).map_err(io)?;
    }
    // Every path's first RTT, for the receive-buffer rule (as the tunnel variant waits).
    let measured_by = Instant::now() + Duration::from_secs(3);
    while Instant::now() < measured_by && node.status().paths.iter().any(|p| p.rtt_ms.is_none()) {
        node.turn(TURN).map_err(io)?;
    }
    let id = node
        .connect()
        .ok_or_else(|| traffic("the session has no paths"))?;
    while node.conn(id).is_some_and(|c| c.state() == State::Opening) {
        if stopped() {
            return Err(traffic("the pTCP connection never opened"));
        }
        node.turn(TURN).map_err(io)?;
    }
    shared.ready.store(true, Ordering::Relaxed);
    let end = loop {
        if let Some((end, _)) = shared.go.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            break *end;
        }
        if stopped() {
            return Err(traffic("stopped before the transfer"));
        }
        node.turn(TURN).map_err(io)?;
    };
    let pattern: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    while Instant::now() < end && !stopped() {
        if let Some(c) = node.conn_mut(id) {
            while c.write(&pattern) > 0 {}
        }
        node.turn(TURN).map_err(io)?;
    }
    let c = node
        .conn(id)
        .ok_or_else(|| traffic("the connection vanished"))?;
    let flows = c.flow_stats();
    let retransmits = flows.iter().map(|(_, _, f)| f.retransmits).sum();
    let mut notes: Vec<String> = flows
        .iter()
        .map(|(f, p, s)| {
            format!(
                "flow {} on path {}: {} packets, {} resent, {} timeouts",
                f.0, p.0, s.packets_sent, s.retransmits, s.timeouts
            )
        })
        .collect();
    let s = c.stats();
    notes.push(format!(
        "re-striped {} bytes, copied {} bytes to another flow; receive buffer {} KiB",
        s.restriped_bytes,
        s.redundant_bytes,
        node.connection_config().receive_buffer_bytes / 1024
    ));
    let mut status = serde_json::to_value(node.status()).unwrap_or_default();
    status["ptcp_connection"] = serde_json::json!({ "stats": format!("{s:?}") });
    Ok(ClientEnd {
        retransmits,
        notes,
        status,
    })
}

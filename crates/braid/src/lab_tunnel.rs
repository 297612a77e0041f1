//! The lab's `braid` variant: `braid up` at both ends of a testbed, one path per emulated link.
//!
//! The two daemons run as processes (`ip netns exec NS braid up -c FILE`) with configs written
//! to a temporary directory: keys made fresh, the client's paths bound to the testbed's path
//! addresses with the scenario's rates, the scenario's `[braid]` table as the client's `[bond]`
//! (but for `tcp_accelerate = true`, which gives both ends `[tcp] accelerate = true`).

use braid_lab::testbed::{
    client_addr, server_addr, TUNNEL_CLIENT_ADDR, TUNNEL_PREFIX_LEN, TUNNEL_SERVER_ADDR,
};
use braid_lab::{LabError, Scenario, StatusSampler, Testbed, Tunnel, TunnelLauncher};
use braid_session::PrivateKey;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// UDP port of the server end.
const PORT: u16 = 7000;

/// Starts `braid up` at both ends.
pub struct DaemonLauncher;

struct DaemonTunnel {
    dir: PathBuf,
    children: Vec<Child>,
}

fn key() -> Result<(String, String), LabError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| LabError::Traffic(format!("no randomness: {e}")))?;
    let k = PrivateKey::from_random(bytes);
    Ok((k.to_base64(), k.public_key().to_base64()))
}

fn io(what: &str) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |e| LabError::Traffic(format!("{what}: {e}"))
}

impl TunnelLauncher for DaemonLauncher {
    fn start(&self, testbed: &Testbed, scenario: &Scenario) -> Result<Box<dyn Tunnel>, LabError> {
        let dir = std::env::temp_dir().join(format!(
            "braidlab-tunnel-{}-{}",
            std::process::id(),
            testbed.namespaces().first().map_or("x", |s| s.as_str())
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(io("creating the tunnel's directory"))?;
        let (ck, cp) = key()?;
        let (sk, sp) = key()?;
        let server = format!(
            "role = \"server\"\nprivate_key = \"{sk}\"\npeer_public_key = \"{cp}\"\nlisten = \"0.0.0.0:{PORT}\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"{TUNNEL_SERVER_ADDR}/{TUNNEL_PREFIX_LEN}\"]\n\
             [control]\nsocket = \"{}\"\n",
            dir.join("server.sock").display()
        );
        // `tcp_accelerate = true` (or `--bond tcp_accelerate=true`): both ends get `[tcp]
        // accelerate = true`, and the lab's TCP to the server's tunnel address rides pTCP.
        let mut braid = scenario.braid.clone();
        let accelerate = match braid.remove("tcp_accelerate") {
            None => false,
            Some(toml::Value::Boolean(b)) => b,
            Some(v) => {
                return Err(LabError::Traffic(format!(
                    "[braid] tcp_accelerate = {v}: give true or false"
                )))
            }
        };
        if accelerate
            && std::process::Command::new("nft")
                .arg("--version")
                .output()
                .is_err()
        {
            // Without nft the client cannot redirect TCP, and the flow would ride the striped
            // tunnel under the accelerated variant's name.
            return Err(LabError::Traffic(
                "tcp_accelerate needs nft, the nftables command: install it (apt-get install nftables)"
                    .into(),
            ));
        }
        let bond = toml::to_string(&braid).map_err(|e| LabError::Traffic(e.to_string()))?;
        // What each end decides for itself (its receiver's release, what it sends twice,
        // whether it shapes its egress) goes to the server too; the client sends it the rest in
        // the handshake.
        let local: toml::Table = scenario
            .braid
            .iter()
            .filter(|(k, _)| braid_daemon::config::SERVER_BOND_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut server = server;
        if !local.is_empty() {
            server.push_str(&section("bond", toml::Value::Table(local))?);
        }
        let mut client = format!(
            "role = \"client\"\nprivate_key = \"{ck}\"\npeer_public_key = \"{sp}\"\nstate_dir = \"{}\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"{TUNNEL_CLIENT_ADDR}/{TUNNEL_PREFIX_LEN}\"]\n\
             [control]\nsocket = \"{}\"\n[bond]\n{bond}\n",
            dir.display(),
            dir.join("client.sock").display()
        );
        // PET (and adaptive SRR) measures the paths' rates: the braid variant is then told
        // none, as a user who does not know them would not.
        let pet = scenario.braid.get("scheduler").and_then(|s| s.as_str()) == Some("pet")
            || scenario.braid.get("adaptive").and_then(|a| a.as_bool()) == Some(true);
        for (i, p) in scenario.paths.iter().enumerate() {
            client.push_str(&format!(
                "[[path]]\nname = \"path{i}\"\nlocal = \"{}\"\nremote = \"{}:{PORT}\"\n",
                client_addr(i),
                server_addr(i)
            ));
            if !pet {
                // Direct (unshaped) paths have no rate: give them equal shares.
                let rate = p.forward.as_ref().map_or(1000.0, |f| f.rate_mbit);
                client.push_str(&format!("rate_mbit = {rate}\n"));
            }
            if p.backup {
                client.push_str("backup = true\n");
            }
        }
        // The client's path policies (it sends them in the handshake).
        if !scenario.policy.is_empty() {
            let policies = scenario.policy.iter().cloned().map(toml::Value::Table);
            client.push_str(&section("policy", toml::Value::Array(policies.collect()))?);
        }
        // Both ends shape their egress with the scenario's [qos], if any.
        if let Some(q) = &scenario.qos {
            let qos = section("qos", toml::Value::Table(q.clone()))?;
            server.push_str(&qos);
            client.push_str(&qos);
        }
        if accelerate {
            // The micro-flows run the scenario's congestion control where pTCP has it (cubic,
            // reno, bbr), as the lab's `ptcp` variant does; otherwise the daemon's default, BBR.
            let cc = scenario
                .congestion_control
                .as_deref()
                .and_then(|c| c.parse::<braid_ptcp::CongestionAlgorithm>().ok())
                .map(|c| format!("congestion = \"{}\"\n", format!("{c:?}").to_lowercase()))
                .unwrap_or_default();
            server.push_str(&format!("[tcp]\naccelerate = true\n{cc}"));
            client.push_str(&format!("[tcp]\naccelerate = true\n{cc}"));
        }
        std::fs::write(dir.join("server.toml"), server).map_err(io("writing server.toml"))?;
        std::fs::write(dir.join("client.toml"), client).map_err(io("writing client.toml"))?;
        // They hold private keys: the owner's alone, or `braid up` warns.
        for f in ["server.toml", "client.toml"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600))
                .map_err(io("restricting a config's permissions"))?;
        }
        let exe = std::env::current_exe().map_err(io("finding the braid binary"))?;
        let exe = exe.to_string_lossy().into_owned();
        let mut tunnel = DaemonTunnel {
            dir: dir.clone(),
            children: Vec::new(),
        };
        for (ns, name) in [(testbed.server(), "server"), (testbed.client(), "client")] {
            let log = std::fs::File::create(dir.join(format!("{name}.log")))
                .map_err(io("creating a log"))?;
            let err = log.try_clone().map_err(io("creating a log"))?;
            let child = ns
                .command(&exe)
                .arg("up")
                .arg("-c")
                .arg(dir.join(format!("{name}.toml")))
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(io("starting braid up"))?;
            tunnel.children.push(child);
            std::thread::sleep(Duration::from_millis(150));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if established(&dir.join("client.sock")) {
                // Give every path its first RTT sample (a long path's takes its RTT), as a
                // tunnel that has been up a moment would have: the transfer should measure the
                // bond, not its first second.
                let measured_by = Instant::now() + Duration::from_secs(3);
                while Instant::now() < measured_by
                    && ![dir.join("client.sock"), dir.join("server.sock")]
                        .iter()
                        .all(|s| all_paths_measured(s))
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                return Ok(Box::new(tunnel));
            }
            for c in &mut tunnel.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(LabError::Traffic(format!(
                        "braid up exited ({status}): {}",
                        logs(&dir)
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(LabError::Traffic(format!(
                    "the braid tunnel did not come up within 10 s: {}",
                    logs(&dir)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `value` as the TOML of a config file's `key` (a table or an array of tables).
fn section(key: &str, value: toml::Value) -> Result<String, LabError> {
    let mut t = toml::Table::new();
    t.insert(key.into(), value);
    toml::to_string(&t).map_err(|e| LabError::Traffic(e.to_string()))
}

fn status(socket: &Path) -> Option<serde_json::Value> {
    braid_daemon::control::query_status(socket)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
}

fn all_paths_measured(socket: &Path) -> bool {
    status(socket).is_some_and(|v| {
        v["peers"][0]["session"]["paths"]
            .as_array()
            .is_some_and(|p| !p.is_empty() && p.iter().all(|p| p["rtt_ms"].is_number()))
    })
}

fn established(socket: &Path) -> bool {
    status(socket).is_some_and(|v| v["peers"][0]["session"]["established"] == true)
}

fn logs(dir: &Path) -> String {
    ["server", "client"]
        .iter()
        .map(|n| {
            format!(
                "[{n}] {}",
                std::fs::read_to_string(dir.join(format!("{n}.log")))
                    .unwrap_or_default()
                    .trim()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Tunnel for DaemonTunnel {
    fn client_addr(&self) -> Ipv4Addr {
        TUNNEL_CLIENT_ADDR
    }

    fn server_addr(&self) -> Ipv4Addr {
        TUNNEL_SERVER_ADDR
    }

    fn status(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "client": status(&self.dir.join("client.sock")),
            "server": status(&self.dir.join("server.sock")),
        }))
    }

    fn status_sampler(&self) -> Option<StatusSampler> {
        let socket = self.dir.join("client.sock");
        Some(Box::new(move || status(&socket)))
    }

    fn stop(mut self: Box<Self>) -> Result<(), LabError> {
        self.shutdown();
        Ok(())
    }
}

impl DaemonTunnel {
    fn shutdown(&mut self) {
        for c in &mut self.children {
            // SAFETY: sending SIGTERM to our own child's pid (`ip netns exec` execs braid).
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for c in &mut self.children {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for DaemonTunnel {
    fn drop(&mut self) {
        self.shutdown();
    }
}

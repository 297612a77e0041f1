//! Real-kernel tests of `braid send` / `braid recv` (pTCP inside the secure session) in network
//! namespaces: two namespaces joined by two veth paths, one of them through a UDP relay that
//! drops or blacks out, files compared byte for byte.
//!
//! They need root (network namespaces); without it they print a skip message and pass. Each
//! test uses its own namespace names and cleans up, even on panic.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{in_ns, key, need_root, relay, sh, RelayFaults, BRAID};

/// Two namespaces joined by veth paths 10.8T.1.0/24 and 10.8T.2.0/24; path 2 reaches the
/// server through a relay on the server side (port 7100) that can drop or black out.
struct Bed {
    tag: String,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    children: Vec<Child>,
    /// The client's path one `remote`: the server's address, or a host name in the client
    /// namespace's own hosts file (`/etc/netns/NS/hosts`, which `ip netns exec` mounts).
    path_one_remote: String,
}

impl Bed {
    fn ns(&self, side: &str) -> String {
        format!("pt{}{}", self.tag, side)
    }

    fn new(tag: u8) -> Bed {
        let tag = format!("{}{}", std::process::id() % 10_000, tag);
        let dir = std::env::temp_dir().join(format!("braid-ptcp-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bed = Bed {
            tag,
            dir,
            stop: Arc::new(AtomicBool::new(false)),
            children: Vec::new(),
            path_one_remote: "10.91.1.2:7000".into(),
        };
        let (c, s) = (bed.ns("c"), bed.ns("s"));
        sh(&["ip", "netns", "add", &c]);
        sh(&["ip", "netns", "add", &s]);
        for i in 1..=2 {
            let (a, b) = (format!("pc{}{i}", bed.tag), format!("ps{}{i}", bed.tag));
            let (addr_a, addr_b) = (format!("10.9{i}.{i}.1/24"), format!("10.9{i}.{i}.2/24"));
            common::veth(&c, &a, &addr_a, &s, &b, &addr_b);
        }
        sh(&["ip", "-n", &c, "link", "set", "lo", "up"]);
        sh(&["ip", "-n", &s, "link", "set", "lo", "up"]);
        bed
    }

    /// The daemon's config files for both ends (the client's path 2 through the relay). Path
    /// one is slowed to 20 Mbit/s each way (`tc tbf`), so that both paths carry the transfer.
    fn configs(&self) {
        self.configs_with(true);
    }

    /// [`Bed::configs`], or (`two_paths = false`) a client of path one alone, unshaped: a
    /// plain veth at full speed, where the kernel coalesces back-to-back datagrams.
    fn configs_with(&self, two_paths: bool) {
        for (side, dev) in [
            ("c", format!("pc{}1", self.tag)),
            ("s", format!("ps{}1", self.tag)),
        ] {
            if !two_paths {
                break;
            }
            sh(&[
                "ip",
                "netns",
                "exec",
                &self.ns(side),
                "tc",
                "qdisc",
                "add",
                "dev",
                &dev,
                "root",
                "tbf",
                "rate",
                "20mbit",
                "burst",
                "32kb",
                "latency",
                "50ms",
            ]);
        }
        let (ck, cp) = key();
        let (sk, sp) = key();
        let dir = self.dir.display();
        let server = format!(
            "role = \"server\"\nprivate_key = \"{sk}\"\npeer_public_key = \"{cp}\"\nlisten = \"0.0.0.0:7000\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"10.77.0.1/30\"]\n[control]\nsocket = \"{}/s.sock\"\n",
            self.dir.display()
        );
        let client = format!(
            "role = \"client\"\nprivate_key = \"{ck}\"\npeer_public_key = \"{sp}\"\nstate_dir = \"{dir}\"\n\
             [interface]\nname = \"braid0\"\naddress = [\"10.77.0.2/30\"]\n[control]\nsocket = \"{dir}/c.sock\"\n\
             [liveness]\nprobe_interval_ms = 50\ndead_after_ms = 250\n\
             [[path]]\nname = \"one\"\nlocal = \"10.91.1.1\"\nremote = \"{}\"\nrate_mbit = 20\n{}",
            self.path_one_remote,
            if two_paths {
                "[[path]]\nname = \"two\"\nlocal = \"10.92.2.1\"\nremote = \"10.92.2.2:7100\"\nrate_mbit = 20\n"
            } else {
                ""
            }
        );
        std::fs::write(self.dir.join("s.toml"), server).unwrap();
        std::fs::write(self.dir.join("c.toml"), client).unwrap();
    }

    /// A file of `len` deterministic bytes to send.
    fn file(&self, len: usize) -> PathBuf {
        let mut z = 0x1234_5678_9abc_def0u64;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                z as u8
            })
            .collect();
        let p = self.dir.join("payload.bin");
        std::fs::write(&p, data).unwrap();
        p
    }

    /// Path 2's relay, on the server side: port 7100 to the server's 7000.
    fn relay(&self, faults: RelayFaults) -> common::Relayed {
        relay(
            self.stop.clone(),
            &self.ns("s"),
            "10.92.2.2:7100".parse().unwrap(),
            "10.92.2.2:7000".parse().unwrap(),
            faults,
        )
    }

    /// Start `braid recv` on the server and, once it listens, `braid send` of a file of `len`
    /// bytes on the client: (the file, where it is received, the receiver's and the sender's
    /// child numbers for [`Bed::wait`]).
    fn send_file(&mut self, len: usize) -> (PathBuf, PathBuf, usize, usize) {
        let file = self.file(len);
        let out = self.dir.join("received.bin");
        let (s, c) = (self.dir.join("s.toml"), self.dir.join("c.toml"));
        let rx = self.start(
            "s",
            &[
                "recv",
                "-c",
                s.to_str().unwrap(),
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        std::thread::sleep(Duration::from_millis(200));
        let tx = self.start(
            "c",
            &["send", file.to_str().unwrap(), "-c", c.to_str().unwrap()],
        );
        (file, out, rx, tx)
    }

    fn start(&mut self, side: &str, args: &[&str]) -> usize {
        let log = std::fs::File::create(self.dir.join(format!("{side}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(side), BRAID])
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    fn log(&self, side: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{side}.log"))).unwrap_or_default()
    }

    /// Waits for child `k`; panics with the logs if it fails or takes longer than `limit`.
    /// Waits (at most 20 s) until `out` holds at least `bytes`.
    fn wait_received(&self, out: &Path, bytes: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(out).map_or(0, |m| m.len()) < bytes {
            assert!(Instant::now() < deadline, "no progress: {}", self.log("c"));
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for [`Bed::send_file`]'s sender `tx` and receiver `rx` to exit successfully and
    /// compares what arrived in `out` with `file`.
    fn finish_transfer(&mut self, tx: usize, rx: usize, file: &Path, out: &Path) {
        self.wait(tx, Duration::from_secs(25));
        self.wait(rx, Duration::from_secs(5));
        assert!(
            std::fs::read(out).unwrap() == std::fs::read(file).unwrap(),
            "the received file differs"
        );
    }

    /// Waits for child `k` to exit within `limit`, and says whether it succeeded.
    fn wait_exit(&mut self, k: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.children[k].try_wait().unwrap() {
                return st.success();
            }
            assert!(
                Instant::now() < deadline,
                "still running after {limit:?}; client: {} server: {}",
                self.log("c"),
                self.log("s")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait(&mut self, k: usize, limit: Duration) {
        let ok = self.wait_exit(k, limit);
        assert!(
            ok,
            "exit with an error; client: {} server: {}",
            self.log("c"),
            self.log("s")
        );
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for side in ["c", "s"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(side)])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.ns("c")));
    }
}

#[test]
fn a_file_arrives_byte_identical_over_two_paths_with_loss_on_one() {
    need_root!();
    let mut bed = Bed::new(1);
    bed.configs();
    let dropped = bed
        .relay(RelayFaults {
            drop_one_in: 20,
            ..RelayFaults::default()
        })
        .dropped;
    let (file, out, rx, tx) = bed.send_file(8 << 20);
    bed.finish_transfer(tx, rx, &file, &out);
    assert!(
        dropped.load(Ordering::Relaxed) > 0,
        "the relay dropped some"
    );
    let summary = bed.log("c");
    assert!(summary.contains("verified"), "{summary}");
    eprintln!("{summary}");
}

#[test]
fn a_file_crosses_a_plain_veth_at_full_speed() {
    // No shaping, no relay: the kernel coalesces back-to-back datagrams (GRO) here, which a
    // reader of one datagram per call must not let it do (the handshake response once came
    // glued to a probe, and the sender never heard the server).
    need_root!();
    let mut bed = Bed::new(5);
    bed.configs_with(false);
    let (file, out, rx, tx) = bed.send_file(32 << 20);
    bed.finish_transfer(tx, rx, &file, &out);
    let summary = bed.log("c");
    assert!(summary.contains("verified"), "{summary}");
}

#[test]
fn a_path_blacked_out_mid_transfer_loses_nothing() {
    need_root!();
    let mut bed = Bed::new(2);
    bed.configs();
    let blackout = Arc::new(AtomicBool::new(false));
    bed.relay(RelayFaults {
        blackout: Some(blackout.clone()),
        ..RelayFaults::default()
    });
    let len = 16 << 20;
    let (file, out, rx, tx) = bed.send_file(len);
    // Black path two out for 2 s once a quarter of the file is written.
    bed.wait_received(&out, (len / 4) as u64);
    blackout.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    blackout.store(false, Ordering::Relaxed);
    bed.finish_transfer(tx, rx, &file, &out);
    eprintln!("{}", bed.log("c"));
}

/// An interrupted `braid send` or `braid recv` (SIGINT) resets its connection: the other end
/// stops at once with the reason. Before, the sender died with its connection open and the
/// receiver waited out its 30 s stall timeout (the sender too, for a receiver interrupted).
#[test]
fn an_interrupted_transfer_stops_the_other_end_at_once() {
    need_root!();
    let mut bed = Bed::new(8);
    bed.configs();
    for (victim, other, said) in [
        ("c", "s", "the sender reset the connection"),
        ("s", "c", "the receiver reset the connection"),
    ] {
        // The first round's partial file.
        let _ = std::fs::remove_file(bed.dir.join("received.bin"));
        let (_file, out, rx, tx) = bed.send_file(64 << 20);
        bed.wait_received(&out, 1 << 20);
        let (k, j) = if victim == "c" { (tx, rx) } else { (rx, tx) };
        // SAFETY: kill(2) on a child of this process that has not been waited for.
        unsafe {
            libc::kill(bed.children[k].id() as i32, libc::SIGINT);
        }
        let at = Instant::now();
        assert!(
            !bed.wait_exit(k, Duration::from_secs(5)),
            "{victim} exits with an error"
        );
        assert!(
            !bed.wait_exit(j, Duration::from_secs(5)),
            "{other} exits with an error"
        );
        let waited = at.elapsed();
        let (victim_log, other_log) = (bed.log(victim), bed.log(other));
        assert!(victim_log.contains("interrupted after"), "{victim_log}");
        assert!(other_log.contains(said), "{other_log}");
        eprintln!("{victim} interrupted: {other} stopped within {waited:?}: {other_log}");
    }
}

/// `braid send` follows its server's host name, as `braid up` does: path one's `remote` is a
/// name in the client namespace's hosts file, path two is blacked out throughout, and a
/// quarter into the transfer the server's address on path one changes (and the name with
/// it). Path one goes down, the name is looked up again, and the rest of the file crosses to
/// the new address. Without the lookup nothing could carry it. The client also keeps its
/// handshake clock floor in its `state_dir`, as `braid up` does.
#[test]
fn a_sending_client_follows_its_servers_host_name() {
    need_root!();
    let mut bed = Bed::new(6);
    let Some(hosts) = common::NetnsHosts::new(&bed.ns("c"), "10.91.1.2") else {
        return;
    };
    bed.path_one_remote = "braid-server.test:7000".into();
    bed.configs();
    bed.relay(RelayFaults {
        blackout: Some(Arc::new(AtomicBool::new(true))),
        ..RelayFaults::default()
    });
    let len = 12 << 20;
    let (file, out, rx, tx) = bed.send_file(len);
    bed.wait_received(&out, (len / 4) as u64);
    // Path one's server address moves. (The old address goes first: deleting a primary
    // address deletes its secondaries too.)
    let (s, dev) = (bed.ns("s"), format!("ps{}1", bed.tag));
    hosts.point("10.91.1.3");
    sh(&["ip", "-n", &s, "addr", "del", "10.91.1.2/24", "dev", &dev]);
    sh(&["ip", "-n", &s, "addr", "add", "10.91.1.3/24", "dev", &dev]);
    bed.finish_transfer(tx, rx, &file, &out);
    let log = bed.log("c");
    assert!(
        log.contains("braid-server.test now resolves to 10.91.1.3:7000"),
        "{log}"
    );
    // A clean exit leaves the floor file (the exact floor, a timestamp in ns), beside its lock.
    let floors: Vec<_> = std::fs::read_dir(&bed.dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".clock"))
        .collect();
    assert_eq!(floors.len(), 1, "{floors:?}");
    let floor: u64 = std::fs::read_to_string(floors[0].path())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Just above the last timestamp sent: not the running reservation, two minutes ahead.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(
        floor > now - 120_000_000_000 && floor <= now,
        "floor {floor}, clock {now}"
    );
}

#[test]
fn tcp_connections_are_forwarded_both_ways_over_ptcp() {
    use std::io::Read;
    use std::net::{Shutdown, TcpListener, TcpStream};
    need_root!();
    let mut bed = Bed::new(3);
    bed.configs();
    bed.relay(RelayFaults::default());
    // The target: an echo server in the server's namespace. Its third connection is held
    // open by the client's application while the client's forwarder stops: how its read of
    // that one ended goes to `ended`.
    let (tx, rx) = std::sync::mpsc::channel();
    let (ended_tx, ended) = std::sync::mpsc::channel();
    in_ns(&bed.ns("s"), move || {
        let l = TcpListener::bind("127.0.0.1:9000").unwrap();
        tx.send(()).unwrap();
        for c in l.incoming().take(2) {
            let mut c = c.unwrap();
            std::thread::spawn(move || {
                let mut w = c.try_clone().unwrap();
                std::io::copy(&mut c, &mut w).unwrap();
                w.shutdown(Shutdown::Write).unwrap();
            });
        }
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 4096];
        let how = loop {
            match c.read(&mut b) {
                Ok(0) => break "end of file".to_string(),
                Ok(n) => c.write_all(&b[..n]).unwrap(),
                Err(e) => break format!("{:?}", e.kind()),
            }
        };
        ended_tx.send(how).unwrap();
    });
    rx.recv().unwrap();
    let (s, c) = (bed.dir.join("s.toml"), bed.dir.join("c.toml"));
    bed.start(
        "s",
        &[
            "forward",
            "-c",
            s.to_str().unwrap(),
            "--target",
            "127.0.0.1:9000",
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    bed.start(
        "c",
        &[
            "forward",
            "-c",
            c.to_str().unwrap(),
            "--listen",
            "127.0.0.1:8080",
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    // Two connections at once, 3 MiB each way, each its own pTCP connection.
    let clients: Vec<_> = (0..2u8)
        .map(|k| {
            in_ns(&bed.ns("c"), move || {
                let data: Vec<u8> = (0..3u32 << 20)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ k)
                    .collect();
                let mut s = TcpStream::connect("127.0.0.1:8080").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut w = s.try_clone().unwrap();
                let sent = data.clone();
                let writer = std::thread::spawn(move || {
                    w.write_all(&sent).unwrap();
                    w.shutdown(Shutdown::Write).unwrap();
                });
                let mut back = Vec::new();
                s.read_to_end(&mut back).unwrap();
                writer.join().unwrap();
                back == data
            })
        })
        .collect();
    for (k, c) in clients.into_iter().enumerate() {
        assert!(
            c.join().unwrap(),
            "connection {k}: the echo differs; client: {} server: {}",
            bed.log("c"),
            bed.log("s")
        );
    }
    // `braid status` sees both forwarders, as it sees `braid up`, and `braid path` takes a
    // client's path out of use.
    for (side, config) in [("c", &c), ("s", &s)] {
        let out = Command::new(BRAID)
            .args(["status", "--json", "-c"])
            .arg(config)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{side}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let session = &v["peers"][0]["session"];
        assert_eq!(session["established"], true, "{side}: {v}");
        assert_eq!(session["paths"].as_array().unwrap().len(), 2, "{side}: {v}");
        assert!(v["program"].as_str().unwrap().contains("pTCP"), "{v}");
    }
    let (ok, err) = braid(&["path", "down", "two", "-c", c.to_str().unwrap()]);
    assert!(ok, "{err}");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut text = String::new();
    while Instant::now() < deadline {
        let out = Command::new(BRAID)
            .args(["status", "-c"])
            .arg(&c)
            .output()
            .unwrap();
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("disabled") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        text.contains("pTCP node") && text.contains("disabled"),
        "{text}"
    );
    // The client's forwarder stops while it carries a connection: both applications are
    // told their stream broke (a reset), neither gets a clean end of file (a truncated
    // stream taken for whole) or silence.
    let mut held = in_ns(&bed.ns("c"), || {
        TcpStream::connect("127.0.0.1:8080").unwrap()
    })
    .join()
    .unwrap();
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    held.write_all(b"hello").unwrap();
    let mut echo = [0u8; 5];
    held.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"hello");
    let client = bed.children.pop().unwrap();
    // SAFETY: SIGTERM to our own child.
    unsafe {
        libc::kill(client.id() as i32, libc::SIGTERM);
    }
    let mut client = client;
    client.wait().unwrap();
    let mut b = [0u8; 16];
    let how = match held.read(&mut b) {
        Ok(0) => "end of file".to_string(),
        Ok(_) => "data".to_string(),
        Err(e) => format!("{:?}", e.kind()),
    };
    assert_eq!(how, "ConnectionReset", "client: {}", bed.log("c"));
    assert_eq!(
        ended.recv_timeout(Duration::from_secs(10)).unwrap(),
        "ConnectionReset",
        "server: {}",
        bed.log("s")
    );
    assert!(
        bed.log("c")
            .contains("stopping: 1 connection(s) reset at both ends"),
        "{}",
        bed.log("c")
    );
}

/// Runs `braid ARGS` and returns (exit success, stderr).
fn braid(args: &[&str]) -> (bool, String) {
    let out = Command::new(BRAID).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn misuse_is_refused_with_the_problem_and_the_fix() {
    // No root needed: the checks come before any socket.
    let dir = std::env::temp_dir().join(format!("braid-ptcp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (server, client) = (dir.join("s.toml"), dir.join("c.toml"));
    std::fs::write(
        &server,
        "role = \"server\"\nprivate_key = \"MNvmxTAMIs+phNkwgH3kk3xpt83tadL6qLRmwXKK70s=\"\n\
         peer_public_key = \"j2i3NRapy6PhI5sCicBlkSaMFd2zcc12kg7qHK+aHhs=\"\nlisten = \"127.0.0.1:0\"\n\
         [interface]\naddress = [\"10.77.0.1/30\"]\n",
    )
    .unwrap();
    std::fs::write(
        &client,
        format!(
            "role = \"client\"\nprivate_key = \"qKepv4YZTRipn+Xj6jqd5z4nStDtKQ+OYE0yaL3oalg=\"\n\
             peer_public_key = \"l89yN2l4VzVPvhoUd8JRY9AMbb3L0ba2qA/HpnwoFT4=\"\nstate_dir = \"{}\"\n\
             [interface]\naddress = [\"10.77.0.2/30\"]\n[[path]]\nremote = \"127.0.0.1:9\"\nrate_mbit = 10\n",
            dir.display()
        ),
    )
    .unwrap();
    let (s, c) = (server.to_str().unwrap(), client.to_str().unwrap());
    let (ok, err) = braid(&["send", c, "-c", s]);
    assert!(!ok && err.contains("role = \"client\""), "{err}");
    let (ok, err) = braid(&["recv", "-c", c]);
    assert!(!ok && err.contains("role = \"server\""), "{err}");
    let (ok, err) = braid(&["send", "/nonexistent/file", "-c", c]);
    assert!(
        !ok && err.contains("cannot open /nonexistent/file"),
        "{err}"
    );
    let (ok, err) = braid(&["send", c, "-c", c, "--congestion-control", "vegas"]);
    assert!(
        !ok && err.contains("cubic, reno (newreno) and bbr"),
        "{err}"
    );
    let (ok, err) = braid(&["forward", "-c", c, "--target", "127.0.0.1:80"]);
    assert!(!ok && err.contains("give --listen"), "{err}");
    let (ok, err) = braid(&["forward", "-c", s, "--listen", "127.0.0.1:80"]);
    assert!(!ok && err.contains("give --target"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_path_that_moves_to_a_new_address_keeps_carrying_the_transfer() {
    need_root!();
    let mut bed = Bed::new(4);
    bed.configs();
    let rebind = Arc::new(AtomicBool::new(false));
    bed.relay(RelayFaults {
        rebind: Some(rebind.clone()),
        ..RelayFaults::default()
    });
    let len = 16 << 20;
    let (file, out, rx, tx) = bed.send_file(len);
    // Path two's source address (as the server sees it) changes at a quarter and at half of
    // the file: the server follows it from the authenticated packets.
    for part in [4, 2] {
        bed.wait_received(&out, (len / part) as u64);
        rebind.store(true, Ordering::Relaxed);
    }
    bed.finish_transfer(tx, rx, &file, &out);
    // Path two is unshaped and path one held to 20 Mbit/s: had the server not followed path
    // two's new address, its acknowledgements would have gone to the old one, path two would
    // have stalled after the first move and carried at most about a quarter.
    let summary = bed.log("c");
    let share: f64 = summary
        .split("two ")
        .nth(1)
        .and_then(|r| r.split('%').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no share of path two in {summary}"));
    assert!(share > 50.0, "{summary}");
}

#[test]
fn a_sender_without_a_receiver_gives_up_with_the_reason() {
    // No root needed: a loopback socket with nobody behind it. Takes the 10 s handshake wait.
    let dir = std::env::temp_dir().join(format!("braid-ptcp-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let client = dir.join("c.toml");
    std::fs::write(
        &client,
        format!(
            "role = \"client\"\nprivate_key = \"qKepv4YZTRipn+Xj6jqd5z4nStDtKQ+OYE0yaL3oalg=\"\n\
             peer_public_key = \"l89yN2l4VzVPvhoUd8JRY9AMbb3L0ba2qA/HpnwoFT4=\"\nstate_dir = \"{}\"\n\
             [interface]\naddress = [\"10.77.0.2/30\"]\n[[path]]\nremote = \"127.0.0.1:9\"\nrate_mbit = 10\n",
            dir.display()
        ),
    )
    .unwrap();
    let c = client.to_str().unwrap();
    let (ok, err) = braid(&["send", c, "-c", c, "--quiet"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("no answer from the server at 127.0.0.1:9") && err.contains("braid recv"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! What the namespace tests share: the root check, shell commands, running code inside a
//! namespace, veth paths between namespaces, key pairs, and a UDP relay that drops, blacks out
//! or moves its address.

// Each test file uses part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const BRAID: &str = env!("CARGO_BIN_EXE_braid");

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Return from the test, with a message, unless it runs as root.
macro_rules! need_root {
    () => {
        if !common::is_root() {
            eprintln!("skipping: needs root for network namespaces and TUN devices");
            return;
        }
    };
}
pub(crate) use need_root;

/// Run a command; panic with its stderr if it fails.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run command");
    assert!(
        out.status.success(),
        "`{}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `f` on a thread inside network namespace `ns`.
pub fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd only changes this thread's network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        f()
    })
}

/// A veth pair `a` (in namespace `ns_a`, address `addr_a`) to `b` (in `ns_b`, `addr_b`), both up.
pub fn veth(ns_a: &str, a: &str, addr_a: &str, ns_b: &str, b: &str, addr_b: &str) {
    sh(&[
        "ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ]);
    sh(&["ip", "-n", ns_a, "addr", "add", addr_a, "dev", a]);
    sh(&["ip", "-n", ns_b, "addr", "add", addr_b, "dev", b]);
    sh(&["ip", "-n", ns_a, "link", "set", a, "up"]);
    sh(&["ip", "-n", ns_b, "link", "set", b, "up"]);
}

/// A new key pair from `braid genkey` / `braid pubkey`: (private, public).
pub fn key() -> (String, String) {
    let out = Command::new(BRAID).arg("genkey").output().unwrap();
    let private = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let mut p = Command::new(BRAID)
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin
        .take()
        .unwrap()
        .write_all(private.as_bytes())
        .unwrap();
    let public = String::from_utf8(p.wait_with_output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    (private, public)
}

/// How a [`relay`] mistreats what it forwards.
#[derive(Default)]
pub struct RelayFaults {
    /// Drop one datagram in this many, counted over both directions (0: none).
    pub drop_one_in: u64,
    /// Drop every datagram while set.
    pub blackout: Option<Arc<AtomicBool>>,
    /// Move the server-facing side to a new port (as a NAT that rebinds, or a client that
    /// moved to another network) each time this is set, and clear it.
    pub rebind: Option<Arc<AtomicBool>>,
}

/// What a [`relay`] did.
#[derive(Clone, Default)]
pub struct Relayed {
    /// Datagrams forwarded from the client side to `target`.
    pub forwarded: Arc<AtomicU64>,
    /// Datagrams dropped (either way).
    pub dropped: Arc<AtomicU64>,
}

/// A UDP relay in namespace `ns` on `listen`, forwarding to `target` and back to the last
/// client address it heard from, until `stop` is set.
pub fn relay(
    stop: Arc<AtomicBool>,
    ns: &str,
    listen: SocketAddr,
    target: SocketAddr,
    faults: RelayFaults,
) -> Relayed {
    let relayed = Relayed::default();
    let r = relayed.clone();
    in_ns(ns, move || {
        let front = UdpSocket::bind(listen).unwrap();
        let mut back = UdpSocket::bind("0.0.0.0:0").unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        let mut client: Option<SocketAddr> = None;
        let mut buf = [0u8; 2048];
        let mut seen = 0u64;
        let pass = |seen: &mut u64| {
            *seen += 1;
            let dark = faults
                .blackout
                .as_ref()
                .is_some_and(|b| b.load(Ordering::Relaxed));
            let ok =
                !dark && (faults.drop_one_in == 0 || !(*seen).is_multiple_of(faults.drop_one_in));
            if !ok {
                r.dropped.fetch_add(1, Ordering::Relaxed);
            }
            ok
        };
        while !stop.load(Ordering::Relaxed) {
            if faults
                .rebind
                .as_ref()
                .is_some_and(|r| r.swap(false, Ordering::Relaxed))
            {
                back = UdpSocket::bind("0.0.0.0:0").unwrap();
                back.set_nonblocking(true).unwrap();
            }
            let mut idle = true;
            while let Ok((n, from)) = front.recv_from(&mut buf) {
                idle = false;
                client = Some(from);
                if pass(&mut seen) {
                    let _ = back.send_to(&buf[..n], target);
                    r.forwarded.fetch_add(1, Ordering::Relaxed);
                }
            }
            while let Ok((n, _)) = back.recv_from(&mut buf) {
                idle = false;
                if let (Some(c), true) = (client, pass(&mut seen)) {
                    let _ = front.send_to(&buf[..n], c);
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    });
    relayed
}

/// The host name `braid-server.test` in namespace `ns`'s own hosts file
/// (`/etc/netns/NS/hosts`, which `ip netns exec` mounts over `/etc/hosts`): a stand-in for
/// dynamic DNS. The test's bed removes the directory.
pub struct NetnsHosts {
    dir: String,
}

impl NetnsHosts {
    /// The hosts file of `ns`, naming `braid-server.test` at `addr`; `None` (said) if its
    /// directory cannot be made, and the test should skip.
    pub fn new(ns: &str, addr: &str) -> Option<NetnsHosts> {
        let dir = format!("/etc/netns/{ns}");
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("skipping: cannot make {dir} for the namespace's hosts file: {e}");
            return None;
        }
        let hosts = NetnsHosts { dir };
        hosts.point(addr);
        Some(hosts)
    }

    /// `braid-server.test` now resolves to `addr`.
    pub fn point(&self, addr: &str) {
        std::fs::write(
            format!("{}/hosts", self.dir),
            format!("127.0.0.1 localhost\n{addr} braid-server.test\n"),
        )
        .unwrap();
    }
}

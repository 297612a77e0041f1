//! Real-kernel tests of the lab: namespaces, the emulator, the bulk transfer, cleanup.
//!
//! They need root (network namespaces); without it each prints a skip message and passes.
//! The rate checks are functional checks of the emulator with generous margins, not
//! measurements of our own code's speed.

use braid_lab::emulator::model::{Change, DirectionConfig, ScheduleEntry};
use braid_lab::sys::StreamProto;
use braid_lab::testbed::{self, Links, Testbed};
use braid_lab::traffic::{self, FlowSpec};
use braid_lab::{is_root, Scenario};
use braid_proto::time::Duration as CoreDuration;
use braid_sim::link::LossModel;
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Root, and one lab test at a time: the rate and delay checks should not share two CPUs
/// with another test's transfer.
fn root() -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if is_root() {
        Some(ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner()))
    } else {
        eprintln!("skipping: needs root for network namespaces");
        None
    }
}

fn link(rate_mbit: u64, delay_ms: u64) -> DirectionConfig {
    DirectionConfig::new(
        rate_mbit * 1_000_000,
        CoreDuration::from_millis(delay_ms),
        64 * 1024,
    )
}

fn ns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// One TCP handshake through path `i`: the time `connect` takes is one round trip.
fn connect_rtt(tb: &Testbed, i: usize, port: u16) -> Duration {
    let p = tb.paths()[i].clone();
    let listener = tb
        .server()
        .run(move || TcpListener::bind(SocketAddrV4::new(p.server_addr, port)))
        .unwrap()
        .unwrap();
    let p = tb.paths()[i].clone();
    tb.client()
        .run(move || {
            // Warm the ARP caches first, so the measured connect is one round trip.
            let _ = TcpStream::connect_timeout(
                &SocketAddrV4::new(p.server_addr, port).into(),
                Duration::from_secs(3),
            );
            let _ = listener.accept();
            let start = Instant::now();
            let s = TcpStream::connect_timeout(
                &SocketAddrV4::new(p.server_addr, port).into(),
                Duration::from_secs(3),
            )
            .expect("connect through the emulator");
            let rtt = start.elapsed();
            drop(s);
            rtt
        })
        .unwrap()
}

#[test]
fn testbed_builds_routes_and_cleans_up() {
    let Some(_one) = root() else {
        return;
    };
    let tb = Testbed::new(
        &Links::Emulated(vec![(link(50, 5), link(50, 5)), (link(50, 5), link(50, 5))]),
        1,
    )
    .unwrap();
    let names = tb.namespaces().to_vec();
    assert_eq!(names.len(), 4, "client, server, two emulators: {names:?}");
    assert!(names.iter().all(|n| ns_exists(n)));
    // Offloads are off on the shaped veths.
    let f = tb
        .client()
        .run(|| braid_lab::sys::ethtool_features("p1"))
        .unwrap()
        .unwrap();
    for off in ["tx-tcp-segmentation", "tx-generic-segmentation", "rx-gro"] {
        assert!(f.iter().any(|(n, on)| n == off && !on), "{off} still on");
    }
    // Source routing: path 1's address reaches the server's path-0 address over path 1.
    let route = tb
        .client()
        .ip(&["route", "get", "10.100.0.2", "from", "10.100.1.1"])
        .unwrap();
    assert!(route.contains("dev p1"), "{route}");
    for i in 0..2 {
        let rtt = connect_rtt(&tb, i, 7000);
        assert!(rtt >= Duration::from_millis(10), "path {i}: rtt {rtt:?}");
    }
    drop(tb);
    assert!(
        names.iter().all(|n| !ns_exists(n)),
        "left behind: {names:?}"
    );
}

#[test]
fn emulator_shapes_rate_and_adds_delay() {
    let Some(_one) = root() else {
        return;
    };
    let tb = Testbed::new(&Links::Emulated(vec![(link(10, 20), link(10, 20))]), 1).unwrap();
    // Round trip = 2 x 20 ms plus serialisation of two small frames.
    let rtt = connect_rtt(&tb, 0, 7001);
    assert!(
        rtt >= Duration::from_millis(39) && rtt <= Duration::from_millis(80),
        "rtt {rtt:?}, configured 40 ms"
    );
    let p = tb.paths()[0].clone();
    let flow = FlowSpec {
        proto: StreamProto::Tcp,
        bind: Some(SocketAddrV4::new(p.client_addr, 0)),
        server: SocketAddrV4::new(p.server_addr, 7002),
        congestion: Some("cubic".into()),
        dscp: None,
    };
    let r = traffic::run_bulk(
        tb.client(),
        tb.server(),
        &[flow],
        Duration::from_secs(4),
        &mut |_, _| {},
    )
    .unwrap();
    // 10 Mbit/s of frames carry at most 9.56 Mbit/s of TCP payload; slow start costs a bit.
    assert!(
        (8.0..=10.5).contains(&r.goodput_mbit),
        "goodput {} Mbit/s on a 10 Mbit/s link",
        r.goodput_mbit
    );
    let c = tb.counters()[0];
    assert!(c.forward.frames_out > 1000, "{c:?}");
    assert_eq!(
        c.forward.gso_frames, 0,
        "offloads leaked super-frames: {c:?}"
    );
    let tcp = r.flows[0].tcp.as_ref().unwrap();
    assert!(tcp.rtt_ms >= 40.0, "srtt {} ms", tcp.rtt_ms);
    assert_eq!(tcp.congestion_control, "cubic");
    tb.close().unwrap();
}

#[test]
fn loss_and_outage_reach_tcp() {
    let Some(_one) = root() else {
        return;
    };
    let mut lossy = link(20, 5);
    lossy.loss = LossModel::Bernoulli(0.03);
    let mut outage = link(20, 5);
    outage.schedule = vec![ScheduleEntry {
        at: CoreDuration::from_millis(800),
        change: Change::Down {
            duration: CoreDuration::from_millis(1200),
        },
    }];
    let tb = Testbed::new(
        &Links::Emulated(vec![(lossy, link(20, 5)), (outage.clone(), outage)]),
        3,
    )
    .unwrap();
    let flows: Vec<FlowSpec> = (0..2)
        .map(|i| {
            let p = &tb.paths()[i];
            FlowSpec {
                proto: StreamProto::Tcp,
                bind: Some(SocketAddrV4::new(p.client_addr, 0)),
                server: SocketAddrV4::new(p.server_addr, 7010 + i as u16),
                congestion: None,
                dscp: None,
            }
        })
        .collect();
    tb.restart_schedules();
    let r = traffic::run_bulk(
        tb.client(),
        tb.server(),
        &flows,
        Duration::from_secs(3),
        &mut |_, _| {},
    )
    .unwrap();
    let c = tb.counters();
    // The loss model dropped about 3% of the frames, and TCP saw it.
    let lost = c[0].forward.loss_drops as f64 / c[0].forward.frames_in as f64;
    assert!((0.015..0.05).contains(&lost), "loss {lost} {:?}", c[0]);
    assert!(r.flows[0].tcp.as_ref().unwrap().retransmits > 0);
    // The outage stalled the second flow for at least its length, and frames were dropped.
    assert!(c[1].forward.down_drops > 0, "{:?}", c[1]);
    assert!(
        r.flows[1].max_stall_ms >= 1100.0,
        "stall {} ms",
        r.flows[1].max_stall_ms
    );
    // ...while the aggregate kept receiving on the other path.
    assert!(
        r.max_stall_ms < 1000.0,
        "aggregate stall {} ms",
        r.max_stall_ms
    );
    tb.close().unwrap();
}

#[test]
fn mptcp_uses_every_path() {
    let Some(_one) = root() else {
        return;
    };
    let text = "duration_s = 3\nvariants = [\"mptcp\"]\n[[path]]\nrate_mbit = 10\ndelay_ms = 5\n[[path]]\nrate_mbit = 5\ndelay_ms = 20\n";
    let s = Scenario::parse(text).unwrap();
    let report = braid_lab::run(&s, &Default::default(), &mut braid_lab::runner::Silent).unwrap();
    let m = report.variant("mptcp").unwrap();
    assert!(m.error.is_none(), "{:?}", m.error);
    assert!(m.goodput_mbit.unwrap() > 0.0);
    // Both paths carried data: MPTCP opened its second subflow.
    for (i, c) in m.emulator.iter().enumerate() {
        assert!(c.forward.bytes_out > 100_000, "path {i} idle: {c:?}");
    }
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["variants"]["mptcp"]["goodput_mbit"].is_number());
    assert!(json["variants"]["mptcp"]["retransmits"].is_number());
    assert!(json["variants"]["mptcp"]["max_stall_ms"].is_number());
    assert_eq!(json["capacity_mbit"], 15.0);
}

#[test]
fn direct_mode_and_the_braid_variant_without_daemon() {
    let Some(_one) = root() else {
        return;
    };
    let s = Scenario::parse(
        "mode = \"direct\"\nduration_s = 1\nvariants = [\"braid\", \"sum\"]\n[[path]]\n[[path]]\n",
    )
    .unwrap();
    let report = braid_lab::run(&s, &Default::default(), &mut braid_lab::runner::Silent).unwrap();
    let b = report.variant("braid").unwrap();
    assert_eq!(
        b.error.as_deref(),
        Some("the braid variant needs the daemon (braid up), not built yet")
    );
    assert!(b.goodput_mbit.is_none());
    let sum = report.variant("sum").unwrap();
    assert!(sum.error.is_none(), "{:?}", sum.error);
    assert_eq!(sum.flows.len(), 2);
    assert!(sum.flows.iter().all(|f| f.goodput_mbit > 0.0));
    assert!(report.capacity_mbit.is_none());
}

#[test]
fn cleanup_after_a_panic() {
    let Some(_one) = root() else {
        return;
    };
    let names = std::sync::Mutex::new(Vec::new());
    let r = std::panic::catch_unwind(|| {
        let tb = Testbed::new(&Links::Emulated(vec![(link(10, 1), link(10, 1))]), 1).unwrap();
        names
            .lock()
            .unwrap()
            .extend(tb.namespaces().iter().cloned());
        panic!("a test failing while the testbed is up");
    });
    assert!(r.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 3);
    assert!(
        names.iter().all(|n| !ns_exists(n)),
        "left behind: {names:?}"
    );
}

#[test]
fn two_testbeds_at_once_do_not_collide() {
    let Some(_one) = root() else {
        return;
    };
    let a = Testbed::new(&Links::Direct { paths: 1 }, 1).unwrap();
    let b = Testbed::new(&Links::Direct { paths: 1 }, 1).unwrap();
    assert!(a.namespaces().iter().all(|n| !b.namespaces().contains(n)));
    assert!(a
        .namespaces()
        .iter()
        .all(|n| n.starts_with(testbed::NAMESPACE_PREFIX)));
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn bad_scenario_files_name_the_problem() {
    let dir = std::env::temp_dir().join(format!("braid-lab-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "duration_s = 10\n[[path]]\nrate_mbit = 10\nqueue_kb = 0\n",
    )
    .unwrap();
    let e = Scenario::from_file(&file).unwrap_err().to_string();
    assert!(e.contains("bad.toml:4:"), "{e}");
    assert!(e.contains("queue_kb = 0"), "{e}");
    std::fs::write(
        &file,
        "[[path]]\nrate_mbit = 10\nschedule = [{ at_s = 1 }]\n",
    )
    .unwrap();
    let e = Scenario::from_file(&file).unwrap_err().to_string();
    assert!(e.contains("neither rate_mbit nor down_s"), "{e}");
    let e = Scenario::from_file(&dir.join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read the scenario"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_probe_times_round_trips_beside_the_transfer() {
    let Some(_one) = root() else {
        return;
    };
    // One 10 Mbit/s path of 20 ms one way: every echo takes at least the 40 ms round trip.
    let text = "duration_s = 2\nvariants = [\"sum\"]\n[probe]\ninterval_ms = 10\n[[path]]\nrate_mbit = 10\ndelay_ms = 20\n";
    let s = Scenario::parse(text).unwrap();
    let report = braid_lab::run(&s, &Default::default(), &mut braid_lab::runner::Silent).unwrap();
    let v = report.variant("sum").unwrap();
    let p = v.probe.as_ref().expect("a probe result");
    assert_eq!(p.dscp, 46);
    assert!(p.sent >= 100, "{p:?}");
    assert!(
        p.received * 10 >= p.sent * 9,
        "most echoes come back: {p:?}"
    );
    assert!(p.rtt_ms_p50.unwrap() >= 40.0, "{p:?}");
    assert!(p.rtt_ms_max.unwrap() >= p.rtt_ms_p95.unwrap());
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["variants"]["sum"]["probe"]["rtt_ms_p95"].is_number());
}

/// Every scenario shipped in `examples/lab` parses (the commands in their comments and in the
/// docs run them).
#[test]
fn every_example_scenario_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lab");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            braid_lab::Scenario::from_file(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 10, "{n} scenarios in {}", dir.display());
}

//! Prometheus exposition of the status (OpenMetrics text via `prometheus-client`).

use crate::Status;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    peer: String,
    path: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    peer: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    peer: String,
    reason: String,
}

type F64Gauge = Gauge<f64, AtomicU64>;

/// Render the status as OpenMetrics text. Every series has a `peer` label: the peer's name
/// (`server` on a client; `client` or the `[[client]]` names on a server).
pub fn render(st: &Status) -> String {
    let mut reg = Registry::with_prefix("braid");
    let per_path = |reg: &mut Registry,
                    name: &str,
                    help: &str,
                    value: &dyn Fn(&braid_session::PathStatus) -> f64| {
        let fam = Family::<PathLabels, F64Gauge>::default();
        for peer in &st.peers {
            for (i, p) in peer.session.paths.iter().enumerate() {
                fam.get_or_create(&PathLabels {
                    peer: peer.name.clone(),
                    path: i.to_string(),
                    name: peer
                        .paths
                        .get(i)
                        .map_or_else(|| format!("path{i}"), |x| x.name.clone()),
                })
                .set(value(p));
            }
        }
        reg.register(name, help, fam);
    };
    per_path(
        &mut reg,
        "path_up",
        "1 if the path is in the rotation",
        &|p| f64::from(u8::from(p.state == "up")),
    );
    per_path(
        &mut reg,
        "path_standby",
        "1 if the path is a backup in standby: up, carrying nothing while another path is up",
        &|p| f64::from(u8::from(p.state == "standby")),
    );
    per_path(
        &mut reg,
        "path_rtt_seconds",
        "Smoothed probe round-trip time",
        &|p| p.rtt_ms.unwrap_or(0.0) / 1e3,
    );
    per_path(&mut reg, "path_loss_ratio", "Estimated probe loss", &|p| {
        p.loss_pct / 100.0
    });
    per_path(&mut reg, "path_tx_bits_per_second", "Transmit rate", &|p| {
        p.tx_bps
    });
    per_path(&mut reg, "path_rx_bits_per_second", "Receive rate", &|p| {
        p.rx_bps
    });
    per_path(&mut reg, "path_tx_bytes", "Bytes sent", &|p| {
        p.tx_bytes as f64
    });
    per_path(&mut reg, "path_rx_bytes", "Bytes received", &|p| {
        p.rx_bytes as f64
    });
    per_path(
        &mut reg,
        "path_reorder_buffer_bytes",
        "Bytes waiting in the receive buffer",
        &|p| p.reorder_buffer_bytes as f64,
    );
    per_path(
        &mut reg,
        "path_holds",
        "Times packets of other paths waited 20 ms or more behind one of this path's (mode sequence)",
        &|p| p.holds.unwrap_or(0) as f64,
    );
    per_path(
        &mut reg,
        "path_down_events",
        "Times the path went down",
        &|p| p.down_events as f64,
    );
    per_path(
        &mut reg,
        "path_stalls",
        "Of those, times this end found the path dark from the data it waited for (mode sequence)",
        &|p| p.stalls as f64,
    );
    let drops = Family::<ReasonLabels, F64Gauge>::default();
    for peer in &st.peers {
        for (reason, n) in &peer.session.dropped {
            let reason = serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            drops
                .get_or_create(&ReasonLabels {
                    peer: peer.name.clone(),
                    reason,
                })
                .set(*n as f64);
        }
    }
    reg.register("dropped_datagrams", "Datagrams dropped, by reason", drops);
    let per_peer =
        |reg: &mut Registry, name: &str, help: &str, value: &dyn Fn(&crate::PeerStatus) -> f64| {
            let fam = Family::<PeerLabels, F64Gauge>::default();
            for peer in &st.peers {
                fam.get_or_create(&PeerLabels {
                    peer: peer.name.clone(),
                })
                .set(value(peer));
            }
            reg.register(name, help, fam);
        };
    let peer_gauges: [PeerGauge; 16] = [
        ("established", "1 once keys are established", |p| {
            f64::from(u8::from(p.session.established))
        }),
        ("handshakes", "Handshakes completed", |p| {
            p.session.handshakes as f64
        }),
        (
            "peer_restarts",
            "Handshakes from a peer that had restarted (the bond started afresh)",
            |p| p.session.peer_restarts as f64,
        ),
        (
            "cookie_replies",
            "Cookie replies received: the server was under handshake load",
            |p| p.session.cookie_replies as f64,
        ),
        ("delivered_packets", "Packets delivered to the TUN", |p| {
            p.session.delivered_packets as f64
        }),
        (
            "delivered_early_packets",
            "Packets delivered ahead of their turn (pure ACKs, opening SYNs)",
            |p| p.session.delivered_early as f64,
        ),
        ("lost_packets", "Packets the receiver declared lost", |p| {
            p.session.lost_packets as f64
        }),
        (
            "send_dropped_packets",
            "Packets from the TUN the bond could not take",
            |p| p.session.send_dropped as f64,
        ),
        (
            "nacks_sent",
            "NACKs sent for gaps in the peer's per-path counters",
            |p| p.session.nacks_sent as f64,
        ),
        (
            "retransmitted_packets",
            "Data packets resent on the peer's NACKs",
            |p| p.session.retransmitted_packets as f64,
        ),
        (
            "reinjected_packets",
            "Data packets resent on the other paths after the peer found their path dark",
            |p| p.session.reinjected_packets as f64,
        ),
        (
            "spoofed_packets",
            "Packets from a client with a source address not its own (dropped)",
            |p| p.spoofed_packets as f64,
        ),
        (
            "link_local_packets",
            "Link-scoped packets from a client (its kernel's IPv6 router solicitations, MLD reports), not forwarded",
            |p| p.link_local_packets as f64,
        ),
        (
            "compressed_packets",
            "Packets sent with their TCP/IP headers compressed (compress_headers)",
            |p| p.session.compression.map_or(0.0, |c| c.compressed as f64),
        ),
        (
            "compression_saved_bytes",
            "Header bytes header compression kept off the wire",
            |p| p.session.compression.map_or(0.0, |c| c.bytes_saved as f64),
        ),
        (
            "undecodable_packets",
            "Compressed packets received that did not rebuild (dropped)",
            |p| p.session.compression.map_or(0.0, |c| c.undecodable as f64),
        ),
    ];
    for (name, help, value) in peer_gauges {
        per_peer(&mut reg, name, help, &value);
    }
    let scalar = |reg: &mut Registry, name: &str, help: &str, v: f64| {
        let g = F64Gauge::default();
        g.set(v);
        reg.register(name, help, g);
    };
    scalar(
        &mut reg,
        "unrouted_packets",
        "TUN packets to an address no client owns (dropped)",
        st.unrouted_packets as f64,
    );
    scalar(
        &mut reg,
        "tun_link_local_packets",
        "Link-scoped packets of this host's kernel read from the TUN device, which no client is for (not forwarded)",
        st.link_local_packets as f64,
    );
    scalar(
        &mut reg,
        "looped_packets",
        "This end's own path datagrams that came back in through the TUN device: a routing loop (dropped)",
        st.looped_packets as f64,
    );
    scalar(
        &mut reg,
        "loop_late_wakeups",
        "Event-loop wake-ups more than 10 ms after the poll's timeout",
        st.event_loop.late_wakeups as f64,
    );
    scalar(
        &mut reg,
        "loop_slow_turns",
        "Event-loop turns longer than 10 ms",
        st.event_loop.slow_turns as f64,
    );
    scalar(
        &mut reg,
        "unclaimed_datagrams",
        "Datagrams no client's session claimed (dropped)",
        st.unclaimed_datagrams as f64,
    );
    for (name, help, v) in [
        (
            "too_big_packets",
            "TUN packets larger than the bond carries",
            st.too_big.packets,
        ),
        (
            "too_big_answered",
            "Of them, answered with ICMP fragmentation needed / packet too big",
            st.too_big.answered,
        ),
        (
            "too_big_rate_limited",
            "Of them, not answered: over the ICMP rate limit",
            st.too_big.rate_limited,
        ),
        (
            "too_big_fragmented",
            "Of them, IPv4 without DF, sent in fragments",
            st.too_big.fragmented,
        ),
        (
            "too_big_fragments_dropped",
            "Of them, IPv4 without DF whose fragments the bond did not all take",
            st.too_big.fragments_dropped,
        ),
        (
            "too_big_dropped",
            "Of them, dropped unanswered (exempt from ICMP errors, IPv4 options, malformed)",
            st.too_big.dropped,
        ),
    ] {
        scalar(&mut reg, name, help, v as f64);
    }
    if let Some(g) = &st.handshake_guard {
        let c = &g.counters;
        for (name, help, v) in [
            (
                "handshake_bad_mac",
                "Handshake initiations dropped for a wrong mac1, before any Diffie-Hellman work",
                c.bad_mac,
            ),
            (
                "handshake_cookies_sent",
                "Cookie replies sent instead of handshakes, under load",
                c.cookies_sent,
            ),
            (
                "handshake_rate_limited",
                "Initiations with a good cookie dropped because their source was over its rate",
                c.rate_limited,
            ),
            (
                "handshake_passed",
                "Initiations the guard handed on to the handshake",
                c.passed,
            ),
            (
                "handshake_load_events",
                "Times the server came under handshake load",
                c.load_events,
            ),
        ] {
            scalar(&mut reg, name, help, v as f64);
        }
        scalar(
            &mut reg,
            "handshake_under_load",
            "1 while handshake initiations need a cookie",
            f64::from(u8::from(g.under_load)),
        );
    }
    per_peer(
        &mut reg,
        "ptcp_connections",
        "pTCP connections held (TCP acceleration)",
        &|p| p.ptcp_connections as f64,
    );
    per_peer(
        &mut reg,
        "ptcp_unacked_bytes",
        "Bytes the pTCP connections sent and have not had acknowledged (bounded by [tcp] memory_mib)",
        &|p| p.ptcp_unacked_bytes as f64,
    );
    per_peer(
        &mut reg,
        "ptcp_window_bytes",
        "Receive windows the pTCP connections offered: what the peer may make this end hold (bounded by [tcp] memory_mib)",
        &|p| p.ptcp_window_bytes as f64,
    );
    if let Some(t) = &st.tcp {
        scalar(
            &mut reg,
            "tcp_accelerated_connections",
            "TCP connections carried over pTCP since start",
            t.connections as f64,
        );
        scalar(
            &mut reg,
            "tcp_accelerated_active",
            "TCP connections carried over pTCP now",
            t.active as f64,
        );
        scalar(
            &mut reg,
            "tcp_accelerated_refused",
            "Accelerated connections turned away",
            t.refused as f64,
        );
    }
    // Per-class service (JoBS), when [qos] is on.
    let per_class = |reg: &mut Registry,
                     name: &str,
                     help: &str,
                     value: &dyn Fn(&braid_session::qos::ClassReport) -> f64| {
        if st.peers.iter().all(|p| p.session.classes.is_empty()) {
            return;
        }
        let fam = Family::<ClassLabels, F64Gauge>::default();
        for peer in &st.peers {
            for c in &peer.session.classes {
                fam.get_or_create(&ClassLabels {
                    peer: peer.name.clone(),
                    class: c.name.clone(),
                })
                .set(value(c));
            }
        }
        reg.register(name, help, fam);
    };
    per_class(
        &mut reg,
        "class_arrivals",
        "Packets offered to the class",
        &|c| c.arrivals as f64,
    );
    per_class(
        &mut reg,
        "class_drops",
        "Packets the class lost in JoBS",
        &|c| c.drops as f64,
    );
    per_class(
        &mut reg,
        "class_loss_ratio",
        "Dropped over offered bytes since start",
        &|c| c.loss_pct / 100.0,
    );
    per_class(
        &mut reg,
        "class_delay_mean_seconds",
        "Mean queueing delay in JoBS",
        &|c| c.delay_ms_mean / 1e3,
    );
    per_class(
        &mut reg,
        "class_service_rate_bits_per_second",
        "Service rate of the current busy period",
        &|c| c.service_rate_mbit * 1e6,
    );
    per_class(
        &mut reg,
        "class_delay_bound_violations",
        "Packets sent later than the delay bound",
        &|c| c.delay_bound_violations as f64,
    );
    per_class(
        &mut reg,
        "class_loss_bound_violations",
        "Drops that broke the loss bound",
        &|c| c.loss_bound_violations as f64,
    );
    per_class(
        &mut reg,
        "class_rate_bound_violations",
        "Times the minimum rate could not be given",
        &|c| c.rate_bound_violations as f64,
    );
    per_class(
        &mut reg,
        "class_busy_loss_ratio",
        "Loss rate of the current busy period",
        &|c| c.busy_loss_pct / 100.0,
    );
    let mut out = String::new();
    let _ = encode(&mut out, &reg);
    out
}

/// A per-peer gauge: its name, its help text and its value.
type PeerGauge = (&'static str, &'static str, fn(&crate::PeerStatus) -> f64);

/// Serve the metrics over HTTP from a thread (any request gets them), fresh from the event
/// loop ([`crate::control::Board::fresh`]).
pub(crate) fn serve(listener: std::net::TcpListener, board: std::sync::Arc<crate::control::Board>) {
    use std::io::{Read, Write};
    std::thread::Builder::new()
        .name("braid-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                s.set_read_timeout(Some(std::time::Duration::from_secs(1))).ok();
                s.set_write_timeout(Some(std::time::Duration::from_secs(1))).ok();
                let mut req = [0u8; 1024];
                let _ = s.read(&mut req);
                let body = board.fresh(|p| p.metrics.clone());
                let _ = write!(
                    s,
                    "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{}",
                    body.len(),
                    body
                );
            }
        })
        .ok();
}

//! The example configurations in `examples/` parse, and say what `docs/config.md` says they do.

use braid_daemon::config::{overhead, Config};
use braid_proto::resequence::ResequenceMode;
use braid_session::Role;
use std::path::PathBuf;

fn load(name: &str) -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_example_client_parses() {
    let c = load("client.toml");
    assert_eq!(c.role, Role::Initiator);
    assert!(c.listen.is_none());
    assert_eq!(c.ifname, "braid0");
    assert_eq!(c.paths.len(), 2);
    assert_eq!(c.paths[0].name, "dsl");
    assert_eq!(c.paths[0].rate_bps, 20_000_000);
    assert_eq!(c.paths[1].interface.as_deref(), Some("wwan0"));
    assert_eq!(c.paths[1].rate_bps, 5_000_000);
    // The smallest path MTU (the DSL line's 1492) minus IPv4 20 + UDP 8 + transport header 16
    // + tag 16 + data header 4 + sequence number 8.
    assert_eq!(overhead(false, true), 72);
    assert_eq!(c.mtu, Some(1492 - 72));
    let bond = c.bond.expect("a client has bond parameters");
    assert_eq!(bond.max_packet, 1420);
    assert_eq!(bond.rates_bps, vec![20_000_000, 5_000_000]);
    assert_eq!(bond.resequence, ResequenceMode::Sequence);
    assert_eq!(bond.queue_limit_bytes, 64 * 1024);
    assert_eq!(c.rekey_after.as_secs(), 120);
    assert!(c.prometheus.is_some_and(|a| a.ip().is_loopback()));
}

#[test]
fn the_example_server_parses_and_matches_the_client() {
    let s = load("server.toml");
    let c = load("client.toml");
    assert_eq!(s.role, Role::Responder);
    assert!(s.paths.is_empty() && s.bond.is_none());
    assert_eq!(s.listen.map(|a| a.port()), Some(7000));
    assert!(c.paths.iter().all(|p| p.remote.port() == 7000));
    // Each end names the other's key.
    assert_eq!(s.peers.len(), 1);
    assert_eq!(c.peers.len(), 1);
    assert_eq!(s.peers[0].public_key, c.private_key.public_key());
    assert_eq!(c.peers[0].public_key, s.private_key.public_key());
    // The server's TUN MTU is left to follow the client's (from the handshake).
    assert!(!s.mtu_configured, "server mtu {:?}", s.mtu);
    assert_eq!(c.mtu, Some(1420));
}

#[test]
fn the_example_proxy_parses_and_hands_the_example_client_its_address() {
    let p = load("proxy.toml");
    let c = load("client.toml");
    assert_eq!(p.role, Role::Responder);
    assert_eq!(p.peers.len(), 2);
    let van = &p.peers[0];
    assert_eq!(van.public_key, c.private_key.public_key());
    assert_eq!(
        van.addresses
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>(),
        ["10.77.0.2/24", "fd77::2/64"]
    );
    assert!(p.peers[1].owns("192.168.60.7".parse().unwrap()));
    assert_eq!(c.peers[0].public_key, p.private_key.public_key());
}

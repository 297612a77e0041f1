//! `braid sim tcp-check` reads a lab scenario and a lab report, writes the path-by-path
//! comparison, and refuses what it cannot use with a message. No figure is compared with a
//! threshold here (that is the experiment's unit tests' job, in braid-sim).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BRAID: &str = env!("CARGO_BIN_EXE_braid");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-tcp-check-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `braid sim tcp-check --scenario SCENARIO [--lab LAB] --out OUT`.
fn tcp_check(scenario: &Path, lab: Option<&Path>, out: &Path) -> Output {
    let mut c = Command::new(BRAID);
    c.args(["sim", "tcp-check", "--scenario"]).arg(scenario);
    if let Some(lab) = lab {
        c.arg("--lab").arg(lab);
    }
    c.arg("--out").arg(out).output().expect("braid runs")
}

fn workspace_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

#[test]
fn tcp_check_compares_path_by_path() {
    let dir = scratch("ok");
    let lab = dir.join("lab.json");
    let report = serde_json::json!({
        "congestion_control": "reno",
        "duration_s": 20.0,
        "interval_ms": 100,
        "paths": [{"path": 0}, {"path": 1}],
        "variants": {"sum": {"flows": [
            {"path": 0, "goodput_mbit": 18.9, "retransmits": 111, "series_mbit": [1.0, 2.0]},
            {"path": 1, "goodput_mbit": 4.6, "retransmits": 93, "series_mbit": [1.0, 2.0]}
        ]}}
    });
    std::fs::write(&lab, report.to_string()).expect("write lab report");
    let out = dir.join("out");
    let run = tcp_check(
        &workspace_file("examples/lab/two-path.toml"),
        Some(&lab),
        &out,
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("sim_over_lab"), "{stdout}");
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let header = csv.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("scenario,path,source,variant"),
        "{header}"
    );
    assert!(
        header.contains("goodput_mbit") && header.contains("retransmits"),
        "{header}"
    );
    // Two paths, each a sim row and a lab row.
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    assert_eq!(
        csv.lines().filter(|l| l.contains(",sim,")).count(),
        2,
        "{csv}"
    );
    assert_eq!(
        csv.lines().filter(|l| l.contains(",lab,sum,")).count(),
        2,
        "{csv}"
    );
    for svg in ["tcp-check-goodput.svg", "tcp-check-series.svg"] {
        assert!(out.join(svg).is_file(), "{svg}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tcp_check_refuses_what_it_cannot_use() {
    let dir = scratch("bad");
    let direct = dir.join("direct.toml");
    std::fs::write(&direct, "mode = \"direct\"\n[[path]]\n").expect("write scenario");
    let run = tcp_check(&direct, None, &dir.join("out"));
    assert!(!run.status.success());
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("no emulated links to simulate"),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let lab = dir.join("lab.json");
    std::fs::write(&lab, r#"{"duration_s": 20, "variants": {"mptcp": {}}}"#).expect("write");
    let run = tcp_check(
        &workspace_file("examples/lab/two-path.toml"),
        Some(&lab),
        &dir.join("out"),
    );
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("--variants sum,best_single"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

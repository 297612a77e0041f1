//! `braid bench jobs` writes the JSON the issue asks for, and refuses bad arguments with a
//! message. No figure is checked: speed lives in benchmarks, not tests.

use std::process::Command;

const BRAID: &str = env!("CARGO_BIN_EXE_braid");

#[test]
fn bench_jobs_writes_json() {
    let out = std::env::temp_dir().join(format!("braid-bench-jobs-{}.json", std::process::id()));
    let status = Command::new(BRAID)
        .args([
            "bench",
            "jobs",
            "--classes",
            "3",
            "--constraints",
            "2",
            "--time",
            "20ms",
        ])
        .arg("--json")
        .arg(&out)
        .status()
        .expect("braid runs");
    assert!(status.success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("written")).expect("JSON");
    assert_eq!(v["classes"], 3);
    assert_eq!(v["constraints"], 2);
    assert!(v["enqueue_ns"].as_f64().is_some_and(|x| x > 0.0));
    assert!(v["dequeue_ns"].as_f64().is_some_and(|x| x > 0.0));
    std::fs::remove_file(&out).ok();
    let bad = Command::new(BRAID)
        .args(["bench", "jobs", "--constraints", "5"])
        .output()
        .expect("braid runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--constraints 5"));
}

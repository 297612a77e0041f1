//! `braid qos import`: the QoSbox paper's Figure 1 in ALTQ syntax becomes a `[qos]` table that
//! braid reads back.

use std::process::Command;

#[test]
fn figure_1_imports_into_a_valid_qos_table() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["qos", "import", "examples/qos/figure1.altq"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut table: toml::Table = toml::from_str(&text).unwrap();
    let qos: braid_qos::QosConfig = table.remove("qos").unwrap().try_into().unwrap();
    qos.validate().unwrap();
    assert_eq!(
        qos.class_names(),
        ["high_class", "med2_class", "med1_class", "low_class"]
    );
    assert_eq!(qos.classes[0].delay_bound_ms, Some(2.0));
    assert_eq!(qos.classes[0].min_rate_mbit, Some(10.0));

    // A file that is not ALTQ gets an error naming the file, and no table.
    let bad = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["qos", "import", "Cargo.toml"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Cargo.toml"));
}

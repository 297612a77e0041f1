//! `braid bench`: per-packet costs measured on this machine, written as JSON.
//!
//! `braid bench jobs` times JoBS `enqueue` and `dequeue` (the QoSbox paper's section 4.4) on the
//! loaded-link workload of `braid_qos::workload`, the same one the criterion benchmarks
//! (`cargo bench -p braid-qos --bench jobs`) use.

use anyhow::{bail, Context, Result};
use braid_qos::workload::{Workload, DEQUEUE_BATCH, ENQUEUE_BATCH};
use braid_qos::MAX_CLASSES;
use clap::{Parser, Subcommand};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Nanoseconds per JoBS enqueue and dequeue on a loaded 100 Mbit/s link with a full
    /// 200-packet buffer.
    Jobs(JobsArgs),
}

#[derive(Parser, Debug)]
pub struct JobsArgs {
    /// Number of classes (1-64).
    #[arg(long, default_value_t = 4)]
    classes: usize,
    /// The paper's constraint set: 1 Table 1, 2 proportional only, 3 absolute only, 4 none.
    #[arg(long, default_value_t = 1)]
    constraints: u8,
    /// Measure for this long (after a warm-up of a fifth of it), e.g. 2s or 500ms.
    #[arg(long, default_value = "2s")]
    time: String,
    /// Write {"classes", "constraints", "enqueue_ns", "dequeue_ns", ...} to this file.
    #[arg(long, value_name = "OUT.json")]
    json: Option<PathBuf>,
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Jobs(args) => jobs(&args),
    }
}

/// Enqueue and dequeue time over `batches` rounds of the workload.
fn measure(w: &mut Workload, batches: u64) -> (Duration, Duration) {
    let (mut enq, mut deq) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..batches {
        let t = Instant::now();
        black_box(w.enqueue_batch());
        let u = Instant::now();
        black_box(w.dequeue_batch());
        deq += u.elapsed();
        enq += u - t;
    }
    (enq, deq)
}

fn jobs(args: &JobsArgs) -> Result<()> {
    if !(1..=MAX_CLASSES).contains(&args.classes) {
        bail!("--classes {}: give 1 to {MAX_CLASSES}", args.classes);
    }
    if !(1..=4).contains(&args.constraints) {
        bail!(
            "--constraints {}: give 1 (Table 1), 2 (proportional only), 3 (absolute only) or 4 (none)",
            args.constraints
        );
    }
    let budget = crate::spec::duration(&args.time).context("in --time")?;
    let mut w = Workload::new(args.classes, args.constraints, 1)?;
    // Warm up, and find how many batches fill the budget.
    let warm = Instant::now();
    let mut batches = 0u64;
    while warm.elapsed() < budget / 5 {
        measure(&mut w, 100);
        batches += 100;
    }
    let batches = (batches * 5).max(100);
    let (enq, deq) = measure(&mut w, batches);
    let enqueue_ns = enq.as_nanos() as f64 / (batches * ENQUEUE_BATCH as u64) as f64;
    let dequeue_ns = deq.as_nanos() as f64 / (batches * DEQUEUE_BATCH as u64) as f64;
    let stats = w.jobs().stats();
    let result = serde_json::json!({
        "classes": args.classes,
        "constraints": args.constraints,
        "enqueue_ns": (enqueue_ns * 10.0).round() / 10.0,
        "dequeue_ns": (dequeue_ns * 10.0).round() / 10.0,
        "per_packet_ns": ((enqueue_ns + dequeue_ns) * 10.0).round() / 10.0,
        "enqueues": batches * ENQUEUE_BATCH as u64,
        "dequeues": batches * DEQUEUE_BATCH as u64,
        "rate_resets": stats.rate_resets,
        "adjustments": stats.adjustments,
    });
    println!(
        "jobs: {} classes, constraint set {}: enqueue {:.1} ns, dequeue {:.1} ns, {:.1} ns per packet ({} packets)",
        args.classes,
        args.constraints,
        enqueue_ns,
        dequeue_ns,
        enqueue_ns + dequeue_ns,
        batches * DEQUEUE_BATCH as u64
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&result)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

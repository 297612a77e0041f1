//! The `braid` command.

use anyhow::{bail, Context, Result};
use braid_sim::experiments::{self, Output};
use clap::{Parser, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// braid: bond several links into one (strIPe striping with logical reception).
#[derive(Parser, Debug)]
#[command(name = "braid", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one of the stripe paper's experiments in the deterministic simulator.
    ///
    /// Writes DIR/results.json, DIR/results.csv and SVG plots, and prints a summary table.
    Sim(SimArgs),
}

#[derive(Parser, Debug)]
struct SimArgs {
    /// Experiment: stripe-throughput, grr-worst-case, fairness, resync, or `all`.
    /// `list` prints them.
    experiment: String,
    /// Output directory (for `all`, one subdirectory per experiment).
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Seed: a run is fixed by the commit, the experiment and the seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim(&args),
    };
    if let Err(e) = result {
        eprintln!("braid: error: {e:#}");
        std::process::exit(1);
    }
}

fn sim(args: &SimArgs) -> Result<()> {
    match args.experiment.as_str() {
        "list" => {
            for name in experiments::NAMES {
                println!("{name}");
            }
            Ok(())
        }
        "all" => {
            let mut failed = Vec::new();
            for name in experiments::NAMES {
                if !run_one(name, &args.out.join(name), args)? {
                    failed.push(name);
                }
            }
            if !failed.is_empty() {
                bail!("claims did not hold in: {}", failed.join(", "));
            }
            Ok(())
        }
        name => {
            if !experiments::NAMES.contains(&name) {
                bail!(
                    "unknown experiment `{name}`: choose one of {} or `all` (`braid sim list` lists them)",
                    experiments::NAMES.join(", ")
                );
            }
            if run_one(name, &args.out, args)? {
                Ok(())
            } else {
                bail!("some of the paper's claims did not hold; see the checks above")
            }
        }
    }
}

/// Run one experiment; returns whether all its checks held.
fn run_one(name: &str, dir: &Path, args: &SimArgs) -> Result<bool> {
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>18} [{bar:30}] {pos}/{len} runs {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(name.to_owned());
    let started = Instant::now();
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let output = experiments::run(name, args.seed, &progress).expect("name checked");
    bar.finish_and_clear();
    output
        .report
        .write(dir)
        .with_context(|| format!("cannot write results to {}", dir.display()))?;
    for (file, plot) in &output.plots {
        plot.write_svg(&dir.join(file))
            .with_context(|| format!("cannot write plot {}", dir.join(file).display()))?;
    }
    print_summary(name, &output, dir, started.elapsed().as_secs_f64());
    Ok(output.checks.iter().all(|c| c.1))
}

fn print_summary(name: &str, output: &Output, dir: &Path, secs: f64) {
    println!("\n{name} (seed {}), {secs:.1} s", output.report.seed);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(output.columns.iter().copied());
    for row in &output.report.rows {
        let value = serde_json::to_value(row).unwrap_or_default();
        table.add_row(output.columns.iter().map(|c| {
            match value.get(*c) {
                None | Some(serde_json::Value::Null) => String::new(),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("+"),
                Some(v) => v.to_string(),
            }
        }));
    }
    println!("{table}");
    for (claim, held) in &output.checks {
        println!("  [{}] {claim}", if *held { "ok" } else { "FAILED" });
    }
    let mut files = vec!["results.json".to_owned(), "results.csv".to_owned()];
    files.extend(output.plots.iter().map(|p| p.0.clone()));
    println!("  wrote {} in {}", files.join(", "), dir.display());
}

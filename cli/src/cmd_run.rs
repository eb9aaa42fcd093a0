//! `ggplan run`: execute a plan with the fast CPU runtime, optionally checking
//! it against the reference evaluator.

use crate::check_run::{CheckMode, check_outputs, check_steps};
use crate::cmd_eval::file_stem;
use crate::plan_load::LoadArgs;
use crate::{npy_values, summary};
use anyhow::{Context, Result};
use clap::Args;
use ir::Role;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan run`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan run llama2l.plan.ron --random-weights 7 --check=all\n  \
    ggplan run plan.ron --weights model.gguf --input tokens=tokens.npy --save out/"
)]
pub struct RunArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Write every output as DIR/<name>.npy (float32, or int32 for i32 tensors).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// Compare with the reference evaluator: every output (`--check`), or every
    /// step in isolation (`--check=all`); exits 1 over DESIGN.md's NMSE thresholds.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "outputs")]
    check: Option<CheckMode>,
    /// Write a Chrome trace of the run (Perfetto, chrome://tracing): one track
    /// per device stream, every step, copy and event wait.
    #[arg(long, value_name = "FILE.json", conflicts_with = "check")]
    trace: Option<PathBuf>,
}

/// Runs `ggplan run`.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let (plan, weights, mut rt) = args.load.load()?;
    let inputs = args
        .load
        .set_inputs(&mut rt, args.load.source.random_weights)?;
    let mut worst_ok = true;
    if args.check == Some(CheckMode::All) {
        worst_ok &= check_steps(&mut rt)?;
    } else if let Some(path) = &args.trace {
        let trace = rt.run_traced()?;
        crate::chrome_trace::write(&rt, &trace, path)?;
    } else {
        let start = Instant::now();
        rt.run()?;
        println!("ran in {:.2} ms", start.elapsed().as_secs_f64() * 1e3);
    }
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for pt in plan.tensors[..plan.n_graph_tensors as usize].iter() {
        if pt.role != Role::Output {
            continue;
        }
        let t = rt.tensor_id(&pt.name)?;
        let Some(values) = rt.tensor_values(t) else {
            continue;
        };
        println!(
            "{}  {} {}  {}",
            pt.name,
            pt.dtype,
            ir::layout::fmt_ne(&pt.ne),
            summary::summarize(&values)
        );
        if let Some(dir) = &args.save {
            let path = dir.join(format!("{}.npy", file_stem(&pt.name)));
            npy_values::write_values(&path, &values, pt.dtype)?;
            println!("  saved {}", path.display());
        }
    }
    if args.check.is_some() {
        worst_ok &= check_outputs(&rt, &weights, inputs)?;
    }
    Ok(if worst_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

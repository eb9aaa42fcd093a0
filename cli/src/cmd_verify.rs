//! `ggplan verify`: re-prove a plan with the independent checker.

use anyhow::Result;
use clap::Args;
use compiler::target::Target;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan verify`.
#[derive(Args)]
#[command(after_help = "Examples:\n  ggplan verify llama2l.plan.ron\n  \
    ggplan verify llama2l.plan.ron --max-splits 2 --max-copy-bytes 1048576 --max-arena-over-bound 1.02")]
pub struct VerifyArgs {
    /// The plan file.
    plan: PathBuf,
    /// Target to check op support against (default: the plan's target when it is a preset).
    #[arg(long)]
    target: Option<String>,
    /// Quality gate: fail when the plan has more splits than N.
    #[arg(long, value_name = "N")]
    max_splits: Option<usize>,
    /// Quality gate: fail when more than BYTES are copied between devices per run.
    #[arg(long, value_name = "BYTES")]
    max_copy_bytes: Option<u64>,
    /// Quality gate: fail when a device's compute arena exceeds RATIO times
    /// its lower bound (1.02: 2% above).
    #[arg(long, value_name = "RATIO")]
    max_arena_over_bound: Option<f64>,
}

/// Runs `ggplan verify`: exit 0 when valid, 1 listing every violation.
pub fn run(args: VerifyArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let target = match &args.target {
        Some(t) => Some(ggplan::target::resolve_with_notes(t, &mut |note| {
            eprintln!("{note}")
        })?),
        None if plan.target_name == ggplan::target::HOST => {
            Some(ggplan::target::host_target(false, &mut |note| {
                eprintln!("{note}")
            })?)
        }
        None => Target::preset(&plan.target_name),
    };
    if target.is_none() {
        println!(
            "note: target '{}' is not a preset; op support is not checked (give --target FILE)",
            plan.target_name
        );
    }
    let problems = compiler::check::check_plan(&plan, target.as_ref());
    if problems.is_empty() {
        println!(
            "{}: valid ({} tensors, {} splits)",
            args.plan.display(),
            plan.tensors.len(),
            plan.splits.len()
        );
        let gates = ggplan::Gates {
            max_splits: args.max_splits,
            max_copy_bytes: args.max_copy_bytes,
            max_arena_over_bound: args.max_arena_over_bound,
        };
        if gates == ggplan::Gates::default() {
            return Ok(ExitCode::SUCCESS);
        }
        let failures = gates.failures(&plan);
        let figures = ggplan::gates::GateFigures::of(&plan);
        let arenas: Vec<String> = figures
            .arenas
            .iter()
            .map(|(device, bytes, bound)| format!("{device} {bytes} B (bound {bound} B)"))
            .collect();
        println!(
            "gates: {} splits, {} bytes copied per run, compute arenas: {}",
            figures.splits,
            figures.copy_bytes,
            if arenas.is_empty() {
                "none".to_string()
            } else {
                arenas.join(", ")
            }
        );
        if failures.is_empty() {
            println!("{}: every gate kept", args.plan.display());
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{}: {} gate{} failed:",
            args.plan.display(),
            failures.len(),
            if failures.len() == 1 { "" } else { "s" }
        );
        for f in &failures {
            println!("  - {f}");
        }
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "{}: {} violation{}:",
        args.plan.display(),
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in &problems {
        println!("  - {p}");
    }
    Ok(ExitCode::FAILURE)
}

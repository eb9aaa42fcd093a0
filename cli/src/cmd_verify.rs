//! `ggplan verify`: re-prove a plan with the independent checker.

use anyhow::Result;
use clap::Args;
use compiler::target::Target;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan verify`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan verify llama2l.plan.ron")]
pub struct VerifyArgs {
    /// The plan file.
    plan: PathBuf,
    /// Target to check op support against (default: the plan's target when it is a preset).
    #[arg(long)]
    target: Option<String>,
}

/// Runs `ggplan verify`: exit 0 when valid, 1 listing every violation.
pub fn run(args: VerifyArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let target = match &args.target {
        Some(t) => Some(crate::host_target::parse_target(t)?),
        None if plan.target_name == crate::host_target::HOST => {
            Some(crate::host_target::host_target(false)?)
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
        return Ok(ExitCode::SUCCESS);
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

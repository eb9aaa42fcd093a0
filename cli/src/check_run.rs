//! `--check` for `ggplan run`: prints `runtime::check`'s comparisons.

use anyhow::Result;
use clap::ValueEnum;
use kernels::reference::Dense;
use runtime::check::Comparison;
use runtime::{Runtime, Weights};
use std::collections::BTreeMap;

/// What `--check` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckMode {
    /// Every output, against the reference evaluator of the whole plan.
    Outputs,
    /// Every step in isolation, then every output.
    All,
}

fn print(c: &Comparison) {
    let at = c.step.map_or(String::new(), |s| format!("step {s:>4}  "));
    println!(
        "  {at}{:<10} {:<32} NMSE {:>10.3e}  (max {:.0e})  {}",
        c.kind,
        format!("'{}'", c.tensor),
        c.nmse,
        c.threshold,
        if c.passed() { "ok" } else { "FAIL" }
    );
}

/// Runs `rt` observed, checking every step in isolation; true when all pass.
pub fn check_steps(rt: &mut Runtime) -> Result<bool> {
    println!("checking every step against the reference kernels on the same inputs:");
    let all = runtime::check::check_steps(rt, &mut |c| print(c))?;
    let failed = all.iter().filter(|c| !c.passed()).count();
    println!("steps: {} checked, {failed} over threshold", all.len());
    Ok(failed == 0)
}

/// Compares every output with the reference plan evaluator; true when all pass.
pub fn check_outputs(
    rt: &Runtime,
    weights: &Weights,
    inputs: BTreeMap<String, Dense>,
) -> Result<bool> {
    println!(
        "checking outputs against the reference evaluator (max NMSE {:.0e}):",
        runtime::check::output_threshold(rt)
    );
    let all = runtime::check::check_outputs(rt, weights, inputs)?;
    all.iter().for_each(print);
    Ok(all.iter().all(Comparison::passed))
}

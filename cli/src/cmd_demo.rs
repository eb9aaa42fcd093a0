//! `ggplan demo`: the embedded default job, runnable on a fresh machine.
//!
//! For now it evaluates the bundled 2-layer llama example with seeded random
//! weights and inputs using the reference kernels; later it compiles and runs a
//! plan for this host.

use crate::cmd_eval::eval_and_report;
use anyhow::Result;
use clap::Args;
use kernels::evaluate::{Bindings, Weights};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// The bundled example graph.
const LLAMA2L: &str = include_str!("../../examples/graphs/llama2l.ron");

/// Arguments of `ggplan demo`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan demo --seed 3")]
pub struct DemoArgs {
    /// Seed for the random weights and tokens.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<ExitCode> {
    let graph = ir::text::parse(LLAMA2L, "examples/graphs/llama2l.ron (bundled)")?;
    println!("ggplan demo: the bundled 2-layer llama example (examples/graphs/llama2l.ron)");
    let bindings = Bindings {
        weights: Weights::Random { seed: args.seed },
        inputs: BTreeMap::new(),
        random_inputs: Some(args.seed),
    };
    eval_and_report(&graph, &bindings, None)?;
    Ok(ExitCode::SUCCESS)
}

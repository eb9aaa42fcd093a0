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
    let outputs = eval_and_report(&graph, &bindings, None)?;
    if let Some((name, logits)) = outputs.first() {
        // Logits are [n_vocab, n_tokens]: the greedy next token is each row's argmax.
        let n_vocab = logits.ne[0] as usize;
        let greedy: Vec<String> = logits
            .data
            .chunks(n_vocab)
            .take(8)
            .map(|row| {
                let best = row
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f64::NEG_INFINITY),
                        |b, (i, &v)| if v >= b.1 { (i, v) } else { b },
                    );
                best.0.to_string()
            })
            .collect();
        println!(
            "greedy next token at positions 0..8 (argmax of '{name}'): [{}]",
            greedy.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

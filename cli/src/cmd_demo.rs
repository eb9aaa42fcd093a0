//! `ggplan demo`: the embedded default job, runnable on a fresh machine.
//!
//! Compiles the bundled 2-layer llama example for the CPU, prints the plan
//! summary, runs the plan (its own order, arenas, offsets and fused kernels)
//! with the reference kernels, and checks its logits against the graph run
//! step by step. The LLVM-JIT runtime (issue 4) will replace the reference run.

use crate::cmd_eval::eval_and_report;
use anyhow::{Result, bail};
use clap::Args;
use compiler::pipeline::{CompileOptions, compile};
use kernels::evaluate::{Bindings, Weights, evaluate_plan};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

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
    println!("ggplan demo: the bundled 2-layer llama example (examples/graphs/llama2l.ron)\n");
    let target = compiler::target::Target::preset("cpu").expect("the cpu preset exists");
    let options = CompileOptions {
        policy: compiler::assign::Policy::Cost,
        placement: Default::default(),
        spelled: vec!["--target cpu".into()],
    };
    let start = Instant::now();
    let plan = compile(&graph, &target, &options)?.plan;
    println!("compiled in {:.2} ms:", start.elapsed().as_secs_f64() * 1e3);
    print!("{}", crate::plan_summary::summary(&plan));
    println!();

    let bindings = Bindings {
        weights: Weights::Random { seed: args.seed },
        inputs: BTreeMap::new(),
        random_inputs: Some(args.seed),
    };
    let outputs = eval_and_report(&graph, &bindings, None)?;
    let start = Instant::now();
    let run = evaluate_plan(&plan, &bindings)?;
    println!(
        "ran the plan with the reference kernels in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    for (name, want) in &outputs {
        let Some(have) = run.read_name(name) else {
            bail!("the plan has no output '{name}'")
        };
        let num: f64 = want
            .data
            .iter()
            .zip(&have.data)
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        let den: f64 = want.data.iter().map(|a| a * a).sum();
        println!(
            "plan vs graph, '{name}': NMSE {:.2e}",
            num / den.max(f64::MIN_POSITIVE)
        );
    }
    if let Some((name, logits)) = outputs.first() {
        // Logits are [n_vocab, n_tokens]: the greedy next token is each row's argmax.
        let n_vocab = logits.ne[0] as usize;
        let greedy: Vec<String> = logits
            .data
            .chunks(n_vocab)
            .take(8)
            .map(|row| {
                row.iter()
                    .enumerate()
                    .fold(
                        (0, f64::NEG_INFINITY),
                        |b, (i, &v)| if v >= b.1 { (i, v) } else { b },
                    )
                    .0
                    .to_string()
            })
            .collect();
        println!(
            "greedy next token at positions 0..8 (argmax of '{name}'): [{}]",
            greedy.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

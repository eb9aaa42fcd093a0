//! `ggplan demo`: the embedded default job, runnable on a fresh machine.
//!
//! Compiles the bundled 2-layer llama example for the CPU, prints the plan
//! summary, loads it into the CPU runtime (JIT-compiled kernels), times it,
//! and checks its logits against the reference evaluator. When set-up has
//! installed SmolLM2-135M, it then generates a short continuation with it.

use anyhow::{Result, bail};
use clap::Args;
use compiler::pipeline::{CompileOptions, compile};
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

/// SmolLM2's GGUF when set-up installed it (`GGPLAN_SMOLLM2_GGUF`, else
/// `.models/paths.env` in the current folder).
fn installed_smollm2() -> Option<std::path::PathBuf> {
    const KEY: &str = "GGPLAN_SMOLLM2_GGUF";
    let from_env = std::env::var_os(KEY)
        .filter(|v| !v.is_empty())
        .map(Into::into);
    from_env
        .or_else(|| {
            let env = std::fs::read_to_string(".models/paths.env").ok()?;
            env.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == KEY)
                .map(|(_, v)| std::path::PathBuf::from(v.trim()))
        })
        .filter(|p| p.is_file())
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<ExitCode> {
    let graph = ir::text::parse(LLAMA2L, "examples/graphs/llama2l.ron (bundled)")?;
    println!("ggplan demo: the bundled 2-layer llama example (examples/graphs/llama2l.ron)\n");
    let target = compiler::target::Target::preset("cpu").expect("the cpu preset exists");
    let options = CompileOptions {
        policy: compiler::assign::Policy::Cost,
        placement: Default::default(),
        micro_batches: 1,
        tensor_split: None,
        spelled: vec!["--target cpu".into()],
    };
    let start = Instant::now();
    let plan = compile(&graph, &target, &options)?.plan;
    println!("compiled in {:.2} ms:", start.elapsed().as_secs_f64() * 1e3);
    print!("{}", ggplan::plan::summary(&plan));
    println!();

    let plan = std::sync::Arc::new(plan);
    let weights = runtime::Weights::Random { seed: args.seed };
    let start = Instant::now();
    let mut rt = runtime::Runtime::load(
        std::sync::Arc::clone(&plan),
        weights.clone(),
        &runtime::LoadOptions::default(),
    )?;
    println!(
        "loaded on {} threads in {:.1} ms (random weights, seed {}; {} kernels JIT-compiled)",
        rt.threads(),
        start.elapsed().as_secs_f64() * 1e3,
        args.seed,
        rt.kernels().jit().stats().kernels_compiled
    );
    let mut inputs = BTreeMap::new();
    for name in rt.input_names() {
        inputs.insert(name.clone(), rt.set_random_input(&name, args.seed)?);
    }
    rt.run()?;
    let mut times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        rt.run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let n_tokens = plan
        .tensors
        .iter()
        .find(|t| t.name == "tokens")
        .map_or(1, |t| t.ne[0]);
    println!(
        "ran the plan: median {median:.2} ms per pass over 10 runs ({:.0} tokens/s for {n_tokens} tokens)",
        n_tokens as f64 / (median / 1e3)
    );
    let checks = runtime::check::check_outputs(&rt, &weights, inputs)?;
    for c in &checks {
        println!(
            "checked against the reference evaluator: '{}' NMSE {:.2e} (max {:.0e}) {}",
            c.tensor,
            c.nmse,
            c.threshold,
            if c.passed() { "ok" } else { "FAIL" }
        );
    }
    let logits = rt.output_f32("result_output")?;
    // Logits are [n_vocab, n_tokens]: the greedy next token is each row's argmax.
    let n_vocab = plan
        .tensors
        .iter()
        .find(|t| t.name == "result_output")
        .map_or(1, |t| t.ne[0]);
    let greedy: Vec<String> = logits
        .chunks(n_vocab as usize)
        .take(8)
        .map(|row| ggplan::jobs::argmax(row).to_string())
        .collect();
    println!(
        "greedy next token at positions 0..8: [{}]",
        greedy.join(", ")
    );
    if checks.iter().any(|c| !c.passed()) {
        bail!("the runtime's outputs differ from the reference");
    }
    if let Some(gguf) = installed_smollm2() {
        println!(
            "\nSmolLM2-135M-Instruct (installed by scripts/setup.sh): greedy generation, prefill + decode plans sharing a KV cache"
        );
        crate::cmd_generate::run(crate::cmd_generate::GenerateArgs {
            gguf,
            prompt: "Once upon a time, in a small village by the sea, there lived a".into(),
            prefill_graph: None,
            decode_graph: None,
            max_tokens: 32,
            ignore_eos: false,
            ctx: 128,
            min_bucket: ggplan::jobs::buckets::DEFAULT_MIN_BUCKET,
            dump_logits: None,
            json: false,
            precision: crate::cmd_generate::PrecisionArg::Fast,
            kv: crate::cmd_generate::KvArg::F32,
            threads: None,
            target: "cpu".into(),
            split_mode: None,
            tensor_split: Vec::new(),
            rpc: Vec::new(),
        })?;
    } else {
        println!(
            "\n(SmolLM2 is not installed; scripts/setup.sh installs it and the demo then generates text with it)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

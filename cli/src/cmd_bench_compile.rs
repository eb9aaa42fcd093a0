//! `ggplan bench-compile`: how long compiling takes, per pass, on a
//! 32-layer llama-7B-shaped graph (n_embd 4096, 32 heads, n_ff 11008, 512
//! tokens, vocab 32000, F16 weights).
//!
//! A compile is latency, not throughput; the machine figure printed beside it
//! (single-thread memcpy bandwidth, measured in the same run) is there so runs
//! on different machines can be put side by side.

use crate::cmd_compile::PolicyArg;
use anyhow::Result;
use clap::Args;
use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use ir::{DType, RopeMode, RopeParams};
use models::llama::{LlamaConfig, LlamaNames, build_prefill};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan bench-compile`.
#[derive(Args)]
#[command(
    after_help = "Example:\n  ggplan bench-compile --target cpu+cuda0 --offload-layers 16 --runs 20"
)]
pub struct BenchCompileArgs {
    /// Target preset, `host`, or file.
    #[arg(long, default_value = "cpu")]
    target: String,
    /// Placement policy.
    #[arg(long, value_enum, default_value = "cost")]
    policy: PolicyArg,
    /// Offload the last N blocks to the first accelerator.
    #[arg(long)]
    offload_layers: Option<u32>,
    /// Compilations to time (the median is reported).
    #[arg(long, default_value_t = 15)]
    runs: usize,
}

/// The llama-7B-shaped benchmark graph's configuration.
pub fn llama7b_shape() -> LlamaConfig {
    LlamaConfig {
        n_layer: 32,
        n_embd: 4096,
        n_head: 32,
        n_head_kv: 32,
        head_dim: 128,
        n_ff: 11008,
        n_vocab: 32000,
        n_tokens: 512,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 128, 10000.0),
        weight_dtype: DType::F16,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F16,
        output_dtype: DType::F16,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

/// Single-thread memcpy bandwidth over 256 MiB, GB/s (read + write counted once).
fn memcpy_gbps() -> f64 {
    let n = 256 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    n as f64 / best / 1e9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the benchmark.
pub fn run(args: BenchCompileArgs) -> Result<ExitCode> {
    let graph = build_prefill(&llama7b_shape())?;
    let target = ggplan::target::resolve_with_notes(&args.target, &mut |note| eprintln!("{note}"))?;
    let options = CompileOptions {
        policy: Policy::from(args.policy),
        placement: PlacementOptions {
            offload_layers: args.offload_layers,
            ..Default::default()
        },
        micro_batches: 1,
        tensor_split: None,
        spelled: vec![],
    };
    println!(
        "graph: llama-7B shape, 32 layers, 512 tokens: {} tensors ({} nodes); target {}",
        graph.len(),
        graph.nodes().count(),
        target.name
    );
    println!(
        "machine: memcpy {:.1} GB/s single thread (measured now)",
        memcpy_gbps()
    );
    let mut per_pass: BTreeMap<usize, (&'static str, Vec<f64>)> = BTreeMap::new();
    let mut totals = Vec::new();
    let runs = args.runs.max(1);
    let bar = crate::progress::bar(runs as u64, "compiling");
    for _ in 0..runs {
        let t = Instant::now();
        let compiled = compile(&graph, &target, &options)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        totals.push(ms);
        bar.inc(1);
        tracing::debug!(run = totals.len(), ms, "compiled");
        for (i, p) in compiled.timings.iter().enumerate() {
            per_pass
                .entry(i)
                .or_insert((p.pass, vec![]))
                .1
                .push(p.micros / 1e3);
        }
    }
    bar.finish_and_clear();
    for (_, (pass, mut ms)) in per_pass {
        println!("  {pass:<9} {:>8.3} ms (median)", median(&mut ms));
    }
    let (min, max) = (
        totals.iter().cloned().fold(f64::MAX, f64::min),
        totals.iter().cloned().fold(0.0, f64::max),
    );
    println!(
        "total     {:>8.3} ms median, {min:.3}-{max:.3} ms over {} runs",
        median(&mut totals),
        totals.len()
    );
    Ok(ExitCode::SUCCESS)
}

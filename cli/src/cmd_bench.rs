//! `ggplan bench`: time a plan on this machine, beside the machine's ceilings
//! measured in the same run.

use crate::plan_load::LoadArgs;
use anyhow::Result;
use clap::Args;
use ir::{DType, Role};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan bench`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan bench llama2l.plan.ron --random-weights 7 --threads 1 --runs 20\n  \
    ggplan bench plan.ron --weights model.gguf --input tokens=tokens.npy"
)]
pub struct BenchArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Timed runs (after one warm-up run).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Also list the N slowest steps (median time), each with its fastest
    /// run, its kernel and GFLOP/s.
    #[arg(long, value_name = "N")]
    steps: Option<usize>,
}

#[derive(Default)]
struct Totals {
    ns: f64,
    bytes: u64,
    flops: u64,
    steps: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `ggplan bench`.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let ceilings = runtime::ceiling::measure();
    println!("{ceilings}");
    let (plan, _weights, mut rt) = args.load.load()?;
    // Inputs not given are seeded random even with real weights: a bench
    // needs values, not meaningful ones.
    let seed = args.load.source.random_weights.unwrap_or(0);
    args.load.set_inputs(&mut rt, Some(seed))?;
    rt.run()?;
    let runs = args.runs.max(1);
    let n_steps = rt.steps().len();
    let mut wall = Vec::with_capacity(runs);
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); n_steps];
    let bar = crate::progress::bar(runs as u64, "timing runs");
    for _ in 0..runs {
        bar.inc(1);
        let t = Instant::now();
        rt.run_profiled()?;
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        for (i, &ns) in rt.last_profile().iter().enumerate() {
            per_step[i].push(ns as f64);
        }
    }
    bar.finish_and_clear();
    let (min, max) = wall.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
        (lo.min(x), hi.max(x))
    });
    let med = median(&mut wall.clone());
    println!(
        "\n{} runs on {} threads: median {med:.3} ms per run (min {min:.3}, max {max:.3}); the plan estimated {:.3} ms",
        runs,
        rt.threads(),
        plan.stats.estimated_us / 1e3
    );
    let read = rt.memory_read_bytes();
    let floor_ms = read as f64 / (ceilings.memcpy_gbps * 1e9) * 1e3;
    println!(
        "  memory floor: {:.2} MB of weights and state read per run / memcpy {:.1} GB/s = {floor_ms:.3} ms; the median run is {:.2}x that floor",
        read as f64 / 1e6,
        ceilings.memcpy_gbps,
        med / floor_ms.max(1e-9)
    );
    // Tokens: the first I32 input's element count (token ids), when there is one.
    if let Some(tokens) = plan.tensors[..plan.n_graph_tensors as usize]
        .iter()
        .find(|t| t.role == Role::Input && t.dtype == DType::I32)
    {
        let n = tokens.ne.iter().product::<i64>();
        println!(
            "  {n} tokens per run ('{}'): {:.1} tokens/s",
            tokens.name,
            n as f64 / (med / 1e3)
        );
    }
    let step_medians: Vec<f64> = per_step.iter_mut().map(|v| median(v)).collect();
    if let Some(n) = args.steps {
        slowest_steps(&plan, &rt, &step_medians, &per_step, n);
    }
    let mut by_kind: BTreeMap<&str, Totals> = BTreeMap::new();
    let mut by_split: BTreeMap<usize, Totals> = BTreeMap::new();
    for (i, step) in rt.steps().iter().enumerate() {
        let ns = step_medians[i];
        for t in [
            by_kind.entry(step.kind).or_default(),
            by_split.entry(step.split).or_default(),
        ] {
            t.ns += ns;
            t.bytes += step.bytes;
            t.flops += step.flops;
            t.steps += 1;
        }
    }
    let total_ns: f64 = by_kind.values().map(|t| t.ns).sum();
    let line = |name: &str, t: &Totals| {
        println!(
            "  {name:<14} {:>5} steps {:>9.3} ms {:>5.1}%  {:>7.1} GB/s  {:>7.1} GFLOP/s",
            t.steps,
            t.ns / 1e6,
            100.0 * t.ns / total_ns.max(1.0),
            t.bytes as f64 / t.ns.max(1.0),
            t.flops as f64 / t.ns.max(1.0)
        );
    };
    println!("\nper op kind (median step times; bytes = operands read + result written):");
    let mut kinds: Vec<_> = by_kind.iter().collect();
    kinds.sort_by(|a, b| b.1.ns.total_cmp(&a.1.ns));
    for (kind, t) in kinds {
        line(kind, t);
    }
    // Which kernel (and instruction set) runs each mul_mat, and the JIT's width.
    let mut matmuls: BTreeMap<String, usize> = BTreeMap::new();
    for step in rt.steps().iter().filter(|s| s.op == Some(ir::Op::MulMat)) {
        *matmuls.entry(step.kernel.describe()).or_default() += 1;
    }
    println!(
        "\nkernels: JIT {}-lane f32 vectors; mul_mat:",
        rt.kernels().jit().vector_width()
    );
    for (kernel, n) in &matmuls {
        println!("  {n:>5} x {kernel}");
    }
    println!("\nper split:");
    for (s, t) in &by_split {
        let dev = &plan.devices[plan.splits[*s].device.index()].name;
        line(&format!("split {s} {dev}"), t);
    }
    println!(
        "\nceiling for comparison: memcpy {:.1} GB/s, FMA {:.1} GFLOP/s per core x {} threads = {:.1} GFLOP/s",
        ceilings.memcpy_gbps,
        ceilings.fma_gflops_per_core,
        rt.threads(),
        ceilings.fma_gflops_per_core * rt.threads() as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// Prints the `n` steps with the largest median time: its median and fastest
/// run, GFLOP/s at both, what it writes and its kernel. `per_step` holds each
/// step's times, sorted (by [`median`]).
fn slowest_steps(
    plan: &ir::plan::Plan,
    rt: &runtime::Runtime,
    medians: &[f64],
    per_step: &[Vec<f64>],
    n: usize,
) {
    let mut order: Vec<usize> = (0..medians.len()).collect();
    order.sort_by(|&a, &b| medians[b].total_cmp(&medians[a]).then(a.cmp(&b)));
    println!("\nslowest steps (median and fastest of the runs):");
    for i in order.into_iter().take(n) {
        let step = &rt.steps()[i];
        let fastest = per_step[i].first().copied().unwrap_or(0.0);
        let gflops = |ns: f64| step.flops as f64 / ns.max(1.0);
        println!(
            "  step {i:>4} {:<9} {:>8.3} ms {:>8.3} ms {:>7.1} {:>7.1} GFLOP/s  {}  {}",
            step.kind,
            medians[i] / 1e6,
            fastest / 1e6,
            gflops(medians[i]),
            gflops(fastest),
            plan.tensors[step.dst as usize].name,
            step.kernel.describe()
        );
    }
}

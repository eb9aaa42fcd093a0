//! `ggplan compile`: graph + target + options -> plan file.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PinRule, PlacementOptions};
use compiler::tensor_split::{Collectives, ExpertSplit, SplitRule, TensorSplitOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// Placement policy names on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum PolicyArg {
    /// Reproduce ggml_backend_sched's greedy decisions.
    Ggml,
    /// Minimise estimated time (default).
    Cost,
}

impl From<PolicyArg> for Policy {
    fn from(p: PolicyArg) -> Policy {
        match p {
            PolicyArg::Ggml => Policy::Ggml,
            PolicyArg::Cost => Policy::Cost,
        }
    }
}

/// How blocks are spread over devices (llama.cpp's `--split-mode`).
#[derive(Clone, Copy, ValueEnum)]
pub enum SplitModeArg {
    /// Whole blocks per device, in proportion to --tensor-split (or memory).
    Layer,
    /// Every large matrix split over all devices (tensor parallelism;
    /// llama.cpp's -sm row, now -sm tensor), in proportion to --tensor-split.
    #[value(alias = "tensor")]
    Row,
}

/// Arguments of `ggplan compile`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan compile examples/graphs/llama2l.ron --target cpu -o llama2l.plan.ron\n  \
    ggplan compile examples/graphs/llama2l.ron --target cpu+cuda0 --offload-layers 1 --policy ggml -o p.ron\n  \
    ggplan compile examples/graphs/llama2l.ron --target cpu0+cpu1 --split-mode layer --tensor-split 1,1 -o p.ron\n  \
    ggplan compile examples/graphs/llama2l.ron --target cpu0+cpu1 --split-mode row -o p.ron"
)]
pub struct CompileArgs {
    /// The graph file (.ron).
    graph: PathBuf,
    /// A preset (cpu, cuda0, cpu+cuda0, cpu+cuda0+cuda1, cpu0+cpu1,
    /// cpu0+cpu1+cpu2+cpu3, numa0, numa0+numa1, cpu+rpc0, cpu+rpc0+rpc1), `host` (this machine: its devices, memory and
    /// calibrated speed, cached) or a target file (.ron).
    #[arg(long, default_value = "cpu")]
    target: String,
    /// Placement policy.
    #[arg(long, value_enum, default_value = "cost")]
    policy: PolicyArg,
    /// Pin weights whose name matches REGEX to DEVICE (first match wins).
    #[arg(long = "pin", value_name = "REGEX=DEVICE")]
    pins: Vec<String>,
    /// Keep every block's expert tensors (`ffn_{up,down,gate}_exps`) on the
    /// host CPU (llama.cpp's --cpu-moe), after the --pin rules.
    #[arg(long, conflicts_with = "n_cpu_moe")]
    cpu_moe: bool,
    /// Keep the expert tensors of the first N blocks on the host CPU
    /// (llama.cpp's --n-cpu-moe N), after the --pin rules.
    #[arg(long, value_name = "N")]
    n_cpu_moe: Option<u32>,
    /// Put the last N blocks' weights and the output head on the first accelerator.
    #[arg(long, value_name = "N")]
    offload_layers: Option<u32>,
    /// Place as many layers as fit each device's memory (a mixture of experts: every block's attention first, then the first blocks' experts, as llama.cpp's --fit; under --policy cost, the first blocks whole on the host instead when that is estimated faster)
    #[arg(long)]
    fit: bool,
    /// Model ggml's op_offload under --policy ggml (llama.cpp's default): a
    /// product of batch >= 32 on weights in CPU memory runs on the first CUDA
    /// device, the weights copied there each run. Without it, plans are as
    /// llama.cpp's --no-op-offload.
    #[arg(long)]
    op_offload: bool,
    /// Spread whole blocks over the target's devices (`layer`, llama.cpp's
    /// -sm layer) or split every large matrix over them (`row`, alias `tensor`).
    #[arg(long, value_enum)]
    split_mode: Option<SplitModeArg>,
    /// Split the weights and state whose name matches REGEX along AXIS over
    /// every device (tensor parallelism with your own rules; first match wins).
    #[arg(long = "split", value_name = "REGEX=AXIS")]
    splits: Vec<String>,
    /// Proportions per device, in target order (llama.cpp's -ts): of blocks
    /// with --split-mode layer (without it, by device memory), of each split
    /// tensor with --split-mode row or --split (without it, equal).
    #[arg(long, value_name = "P0,P1,...", value_delimiter = ',')]
    tensor_split: Vec<f64>,
    /// How a tensor split completes its partial sums: `all-reduce` (every
    /// device gets the sum), `reduce-scatter` (each keeps a slice of the
    /// tokens until a product needs them all: an all-gather), or `auto`
    /// (the cheaper plan by the cost model).
    #[arg(
        long,
        value_name = "auto|all-reduce|reduce-scatter",
        default_value = "auto"
    )]
    collectives: String,
    /// How `--split-mode row` cuts a mixture of experts' stacked matrices:
    /// `rows` (every expert alike, as ggml's meta backend: each device its
    /// rows of every routed expert), `whole` (whole experts per device,
    /// expert parallelism: each device the tokens routed to its experts), or
    /// `auto` (the cheaper plan by the cost model; rows on a tie).
    #[arg(long, value_name = "auto|rows|whole", default_value = "auto")]
    experts: String,
    /// Cut the batch into N micro-batches run one after another, so the
    /// devices of a layer split work on different micro-batches at once
    /// (ggml's pipeline parallelism). The graph must attend over a KV cache.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pipeline: u32,
    /// ggml RPC servers (llama.cpp's `ggml-rpc-server`) to add to `--target
    /// host` as devices rpc0, rpc1, ... (llama.cpp's `--rpc`): their memory
    /// from each server, their links measured now.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    rpc: Vec<String>,
    /// Also write the CUDA kernels the plan's GPU steps launch into DIR: each
    /// module's source (.cu) and, where NVRTC can be loaded, its PTX for
    /// sm_80 and sm_90 under the kernel cache's names, so a GPU host loading
    /// the plan with GGPLAN_CUDA_CACHE=DIR compiles nothing.
    #[arg(long, value_name = "DIR")]
    emit_cuda: Option<PathBuf>,
    /// Where to write the plan.
    #[arg(short, long, value_name = "PLAN.ron")]
    output: PathBuf,
}

/// The layer split and the tensor split that `--split-mode`, `--split` and
/// `--tensor-split` ask for (shared by `compile` and `generate`).
pub(crate) fn split_options(
    split_mode: Option<SplitModeArg>,
    splits: &[String],
    shares: &[f64],
    collectives: Collectives,
    experts: ExpertSplit,
) -> Result<(Option<Vec<f64>>, Option<TensorSplitOptions>)> {
    let layer_split = matches!(split_mode, Some(SplitModeArg::Layer)).then(|| shares.to_vec());
    let rules = splits
        .iter()
        .map(|s| SplitRule::parse(s).map_err(|e| anyhow::anyhow!("--split {e}")))
        .collect::<Result<Vec<_>>>()?;
    if matches!(split_mode, Some(SplitModeArg::Layer)) && !rules.is_empty() {
        anyhow::bail!(
            "--split REGEX=AXIS splits tensors; it cannot be combined with --split-mode layer"
        );
    }
    let tensor_split =
        (matches!(split_mode, Some(SplitModeArg::Row)) || !rules.is_empty()).then(|| {
            TensorSplitOptions {
                shares: shares.to_vec(),
                rules,
                collectives,
                experts,
            }
        });
    if split_mode.is_none() && tensor_split.is_none() && !shares.is_empty() {
        anyhow::bail!("--tensor-split needs --split-mode layer|row or --split REGEX=AXIS");
    }
    if tensor_split.is_none() && collectives != Collectives::Auto {
        anyhow::bail!("--collectives needs --split-mode row or --split REGEX=AXIS");
    }
    if !matches!(split_mode, Some(SplitModeArg::Row)) && experts != ExpertSplit::Auto {
        anyhow::bail!(
            "--experts needs --split-mode row (with --split rules, axis 2 of an expert \
             tensor shares its experts out whole)"
        );
    }
    Ok((layer_split, tensor_split))
}

/// Runs `ggplan compile`.
pub fn run(args: CompileArgs) -> Result<ExitCode> {
    let graph = ir::text::read_graph(&args.graph)?;
    let mut target =
        ggplan::target::resolve_with_notes(&args.target, &mut |note| eprintln!("{note}"))?;
    if !args.rpc.is_empty() {
        if args.target != ggplan::target::HOST {
            anyhow::bail!(
                "--rpc adds remote devices to --target host; for a plan made without the \
                 servers, use a preset (cpu+rpc0, cpu+rpc0+rpc1) or a target file with \
                 Remote devices"
            );
        }
        ggplan::target::add_remote_devices(&mut target, &args.rpc, &mut |n| eprintln!("{n}"))?;
    }
    let mut pins = args
        .pins
        .iter()
        .map(|p| PinRule::parse(p, &target))
        .collect::<Result<Vec<_>, _>>()?;
    pins.extend(compiler::placement::moe_pins(
        &graph,
        &target,
        args.cpu_moe,
        args.n_cpu_moe,
    )?);
    let (layer_split, tensor_split) = split_options(
        args.split_mode,
        &args.splits,
        &args.tensor_split,
        Collectives::parse(&args.collectives).map_err(|e| anyhow::anyhow!("--collectives {e}"))?,
        ExpertSplit::parse(&args.experts).map_err(|e| anyhow::anyhow!("--experts {e}"))?,
    )?;
    let mut options = CompileOptions {
        policy: Policy::from(args.policy),
        placement: PlacementOptions {
            pins,
            offload_layers: args.offload_layers,
            fit: args.fit,
            layer_split,
            // Set by the compile pipeline from `micro_batches`.
            pipelined: false,
            op_offload: args.op_offload,
        },
        micro_batches: args.pipeline,
        tensor_split,
        spelled: Vec::new(),
    };
    options.spelled = options.flags(&args.target);
    let compiled = compile(&graph, &target, &options)?;
    // The kernels first: a plan whose GPU steps have none is refused whole.
    if let Some(dir) = &args.emit_cuda {
        emit_cuda(&compiled.plan, dir)?;
    }
    ir::plan::write_plan(&args.output, &compiled.plan).with_context(|| "writing the plan")?;
    print!("{}", ggplan::plan::summary(&compiled.plan));
    let total: f64 = compiled.timings.iter().map(|t| t.micros).sum();
    let passes: Vec<String> = compiled
        .timings
        .iter()
        .map(|t| format!("{} {:.0} us", t.pass, t.micros))
        .collect();
    println!("compiled in {:.2} ms: {}", total / 1e3, passes.join(", "));
    println!("wrote {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes the CUDA modules `plan` loads into `dir` (see `--emit-cuda`).
fn emit_cuda(plan: &ir::plan::Plan, dir: &std::path::Path) -> Result<()> {
    use runtime::device::cuda::{nvrtc, sources};
    let kernels = sources::plan_kernels(plan)?;
    if kernels.steps == 0 {
        anyhow::bail!("--emit-cuda: the plan runs nothing on a CUDA device");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let modules = kernels.modules();
    let compile = nvrtc::nvrtc_present();
    for (name, source) in &modules {
        let file = dir.join(format!("{}.cu", name.replace(' ', "_")));
        ir::text::write_atomically(&file, source.as_bytes())?;
        if compile {
            for arch in ["compute_80", "compute_90"] {
                let ptx = nvrtc::compile(source, arch, "cuda")?;
                let file = dir.join(nvrtc::cache_name(source, arch));
                ir::text::write_atomically(&file, ptx.as_bytes())?;
            }
        }
    }
    println!(
        "wrote {} CUDA modules ({} steps on the GPU) to {}{}",
        modules.len(),
        kernels.steps,
        dir.display(),
        if compile {
            ", with PTX for sm_80 and sm_90 (load with GGPLAN_CUDA_CACHE set to that folder)"
        } else {
            " (sources only: NVRTC cannot be loaded here, so no PTX)"
        }
    );
    Ok(())
}

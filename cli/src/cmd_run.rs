//! `ggplan run`: execute a plan with the fast CPU runtime, optionally checking
//! it against the reference evaluator.

use crate::check_run::{CheckMode, check_outputs, check_steps};
use crate::cmd_eval::file_stem;
use crate::cmd_generate::PrecisionArg;
use crate::{npy_values, summary};
use anyhow::{Context, Result, bail};
use clap::Args;
use ir::Role;
use ir::plan::Plan;
use kernels::reference::Dense;
use runtime::{LoadOptions, Runtime, Weights};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `ggplan run`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan run llama2l.plan.ron --random-weights 7 --check=all\n  \
    ggplan run plan.ron --weights model.gguf --input tokens=tokens.npy --save out/"
)]
pub struct RunArgs {
    /// The plan file (.ron), from `ggplan compile`.
    plan: PathBuf,
    #[command(flatten)]
    source: WeightArgs,
    /// Values for an input (or initial state) tensor from a .npy file.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Quantized products: `fast` (8-bit activations, as llama.cpp) or `exact` (f32).
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fast)]
    precision: PrecisionArg,
    /// Write every output as DIR/<name>.npy (float32, or int32 for i32 tensors).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// Compare with the reference evaluator: every output (`--check`), or every
    /// step in isolation (`--check=all`); exits 1 over DESIGN.md's NMSE thresholds.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "outputs")]
    check: Option<CheckMode>,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write a Chrome trace of the run (Perfetto, chrome://tracing): one track
    /// per device stream, every step, copy and event wait.
    #[arg(long, value_name = "FILE.json", conflicts_with = "check")]
    trace: Option<PathBuf>,
    #[command(flatten)]
    rpc: RpcArgs,
}

/// Remote devices (shared with `ggplan bench`).
#[derive(Args)]
pub struct RpcArgs {
    /// ggml RPC servers (llama.cpp's `ggml-rpc-server`) for the plan's remote
    /// devices, in order: `rpc0` is the first (llama.cpp's `--rpc`).
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub rpc: Vec<String>,
}

impl RpcArgs {
    /// The servers connected, or `None` when none is given.
    pub fn connect(&self) -> Result<Option<Arc<runtime::device::rpc::RemoteServers>>> {
        if self.rpc.is_empty() {
            return Ok(None);
        }
        let servers = runtime::device::rpc::RemoteServers::connect(
            &self.rpc,
            runtime::device::rpc::device::DEFAULT_TIMEOUT,
        )?;
        Ok(Some(Arc::new(servers)))
    }
}

/// Where weights come from (shared with `ggplan bench`).
#[derive(Args)]
pub struct WeightArgs {
    /// Seeded random weights; inputs not given with --input are random too.
    #[arg(long, value_name = "SEED", conflicts_with = "weights")]
    pub random_weights: Option<u64>,
    /// Bind weights by name from a .gguf or .safetensors file.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
}

impl WeightArgs {
    /// The runtime's weights for `plan`.
    pub fn weights(&self, plan: &Plan, plan_path: &Path) -> Result<Weights> {
        Ok(match (&self.weights, self.random_weights) {
            (Some(path), _) => Weights::open(path)?,
            (None, Some(seed)) => Weights::Random { seed },
            (None, None) if plan.tensors.iter().any(|t| t.role == Role::Weight) => bail!(
                "{} has weights: give --weights FILE or --random-weights SEED",
                plan_path.display()
            ),
            (None, None) => Weights::Random { seed: 0 },
        })
    }
}

/// Loads a plan file and its weights into a runtime.
pub fn load(
    path: &Path,
    source: &WeightArgs,
    threads: Option<usize>,
    rpc: &RpcArgs,
    precision: PrecisionArg,
) -> Result<(Arc<Plan>, Weights, Runtime)> {
    let plan = Arc::new(ir::plan::read_plan(path)?);
    let weights = source.weights(&plan, path)?;
    let mut options = LoadOptions {
        rpc: rpc.connect()?,
        precision: precision.runtime(),
        ..LoadOptions::default()
    };
    if let Some(n) = threads {
        options.threads = n.max(1);
    }
    let start = Instant::now();
    let rt = crate::progress::while_preparing(&options, "preparing kernels", |options| {
        Runtime::load(Arc::clone(&plan), weights.clone(), options)
            .with_context(|| format!("loading {}", path.display()))
    })?;
    let r = rt.load_report();
    let uploaded = match r.weight_bytes_uploaded {
        0 => String::new(),
        b => format!(
            " + {:.1} MiB uploaded to device memory",
            b as f64 / 1048576.0
        ),
    };
    println!(
        "loaded plan '{}' ({} steps) on {} threads in {:.1} ms: weights {:.1} MiB in place + {:.1} MiB copied{uploaded} ({:.1} ms), kernels prepared in {:.1} ms ({:.1} MiB of weights repacked)",
        plan.graph_name,
        rt.steps().len(),
        rt.threads(),
        start.elapsed().as_secs_f64() * 1e3,
        r.weight_bytes_in_place as f64 / 1048576.0,
        r.weight_bytes_copied as f64 / 1048576.0,
        r.weights_time.as_secs_f64() * 1e3,
        r.prepare_time.as_secs_f64() * 1e3,
        r.weight_bytes_repacked as f64 / 1048576.0,
    );
    for w in &r.warnings {
        println!("warning: {w}");
    }
    if !r.fallbacks.is_empty() {
        println!(
            "note: {} steps run on the reference kernels (slow): {}",
            r.fallbacks.len(),
            r.fallbacks.join(", ")
        );
    }
    Ok((plan, weights, rt))
}

/// Sets every input: from `--input` files, else seeded random values when a
/// seed is given. Returns the values set (for the reference).
pub fn set_inputs(
    rt: &mut Runtime,
    specs: &[String],
    seed: Option<u64>,
) -> Result<BTreeMap<String, Dense>> {
    let plan = rt.plan().clone();
    let mut given = BTreeMap::new();
    for spec in specs {
        let Some((name, path)) = spec.split_once('=') else {
            bail!("--input '{spec}' must be NAME=FILE.npy");
        };
        let t = rt.tensor_id(name)?;
        let layout = plan.tensors[t as usize].layout();
        let values = npy_values::read_values(Path::new(path), name, &layout)?;
        let mut bytes = vec![0u8; layout.span_bytes() as usize];
        kernels::reference::scatter(&values, &mut bytes, &layout);
        rt.set_input_bytes(name, &bytes)?;
        given.insert(name.to_string(), values);
    }
    if let Some(seed) = seed {
        for name in rt.input_names() {
            if let std::collections::btree_map::Entry::Vacant(slot) = given.entry(name) {
                let values = rt.set_random_input(slot.key(), seed)?;
                println!("input '{}': random (seeded)", slot.key());
                slot.insert(values);
            }
        }
    }
    Ok(given)
}

/// Runs `ggplan run`.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let (plan, weights, mut rt) = load(
        &args.plan,
        &args.source,
        args.threads,
        &args.rpc,
        args.precision,
    )?;
    let inputs = set_inputs(&mut rt, &args.inputs, args.source.random_weights)?;
    let mut worst_ok = true;
    if args.check == Some(CheckMode::All) {
        worst_ok &= check_steps(&mut rt)?;
    } else if let Some(path) = &args.trace {
        let trace = rt.run_traced()?;
        crate::chrome_trace::write(&rt, &trace, path)?;
    } else {
        let start = Instant::now();
        rt.run()?;
        println!("ran in {:.2} ms", start.elapsed().as_secs_f64() * 1e3);
    }
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for pt in plan.tensors[..plan.n_graph_tensors as usize].iter() {
        if pt.role != Role::Output {
            continue;
        }
        let t = rt.tensor_id(&pt.name)?;
        let Some(values) = rt.tensor_values(t) else {
            continue;
        };
        println!(
            "{}  {} {}  {}",
            pt.name,
            pt.dtype,
            ir::layout::fmt_ne(&pt.ne),
            summary::summarize(&values)
        );
        if let Some(dir) = &args.save {
            let path = dir.join(format!("{}.npy", file_stem(&pt.name)));
            npy_values::write_values(&path, &values, pt.dtype)?;
            println!("  saved {}", path.display());
        }
    }
    if args.check.is_some() {
        worst_ok &= check_outputs(&rt, &weights, inputs)?;
    }
    Ok(if worst_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

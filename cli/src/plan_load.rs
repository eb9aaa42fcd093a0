//! Loading a plan for `ggplan run` and `ggplan bench`: the plan file, where
//! its weights come from, remote servers, threads, precision and inputs.

use crate::cmd_generate::PrecisionArg;
use crate::npy_values;
use anyhow::{Context, Result, bail};
use clap::Args;
use ir::Role;
use ir::plan::Plan;
use kernels::reference::Dense;
use runtime::{LoadOptions, Runtime, Weights};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

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

/// What `ggplan run` and `ggplan bench` both take to load a plan.
#[derive(Args)]
pub struct LoadArgs {
    /// The plan file (.ron), from `ggplan compile`.
    pub plan: PathBuf,
    #[command(flatten)]
    pub source: WeightArgs,
    /// Values for an input (or initial state) tensor from a .npy file.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub inputs: Vec<String>,
    /// Quantized products: `fast` (8-bit activations, as llama.cpp) or `exact` (f32).
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fast)]
    pub precision: PrecisionArg,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub rpc: RpcArgs,
}

impl LoadArgs {
    /// Loads the plan file and its weights into a runtime.
    pub fn load(&self) -> Result<(Arc<Plan>, Weights, Runtime)> {
        let path = &self.plan;
        let plan = Arc::new(ir::plan::read_plan(path)?);
        let weights = self.source.weights(&plan, path)?;
        let mut options = LoadOptions {
            rpc: self.rpc.connect()?,
            precision: self.precision.runtime(),
            ..LoadOptions::default()
        };
        if let Some(n) = self.threads {
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
        &self,
        rt: &mut Runtime,
        seed: Option<u64>,
    ) -> Result<BTreeMap<String, Dense>> {
        let plan = rt.plan().clone();
        let mut given = BTreeMap::new();
        for spec in &self.inputs {
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
}

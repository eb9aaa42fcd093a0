//! `ggplan eval`: run a graph with the reference kernels.

use crate::{npy_values, summary};
use anyhow::{Context, Result, bail};
use clap::Args;
use ir::{Graph, Role};
use kernels::evaluate::{Bindings, Weights, evaluate};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan eval`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan eval examples/graphs/llama2l.ron --random-weights 7\n  \
    ggplan eval graph.ron --weights model.gguf --input tokens=tokens.npy --save out/"
)]
pub struct EvalArgs {
    /// The graph file (.ron).
    graph: PathBuf,
    /// Seeded random weights; inputs not given with --input are random too.
    #[arg(long, value_name = "SEED", conflicts_with = "weights")]
    random_weights: Option<u64>,
    /// Bind weights by name from a .gguf or .safetensors file.
    #[arg(long, value_name = "FILE")]
    weights: Option<PathBuf>,
    /// Values for an input (or initial state) tensor from a .npy file.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Write every output as DIR/<name>.npy (float32, or int32 for i32 tensors).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
}

/// Runs `ggplan eval`.
pub fn run(args: EvalArgs) -> Result<ExitCode> {
    let graph = ir::text::read_graph(&args.graph)?;
    let inputs = read_inputs(&graph, &args.inputs)?;
    let file = match &args.weights {
        Some(path) => Some(ir::files::open_tensor_file(path)?),
        None => None,
    };
    let weights = match (&file, args.random_weights) {
        (Some(f), _) => Weights::File(f.as_ref()),
        (None, Some(seed)) => Weights::Random { seed },
        (None, None) if graph.with_role(Role::Weight).next().is_some() => {
            bail!(
                "{} has weights: give --weights FILE or --random-weights SEED",
                args.graph.display()
            )
        }
        (None, None) => Weights::Random { seed: 0 },
    };
    let bindings = Bindings {
        weights,
        inputs,
        random_inputs: args.random_weights,
    };
    eval_and_report(&graph, &bindings, args.save.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// Evaluates `graph`, prints a summary line per output, optionally saves them,
/// and returns each output's name and values.
pub fn eval_and_report(
    graph: &Graph,
    bindings: &Bindings<'_>,
    save: Option<&Path>,
) -> Result<Vec<(String, kernels::reference::Dense)>> {
    let nodes = graph.nodes().count();
    let weight_bytes: u64 = graph
        .with_role(Role::Weight)
        .map(|id| graph.tensor(id).layout.span_bytes())
        .sum();
    println!(
        "graph '{}': {} tensors ({} nodes, {} leafs), weights {:.1} MiB",
        graph.name,
        graph.len(),
        nodes,
        graph.len() - nodes,
        weight_bytes as f64 / (1 << 20) as f64
    );
    for id in graph.with_role(Role::Input) {
        if !bindings.inputs.contains_key(&graph.tensor(id).name) {
            println!("input '{}': random (seeded)", graph.tensor(id).name);
        }
    }
    let start = Instant::now();
    let memory = evaluate(graph, bindings)?;
    println!(
        "evaluated with the reference kernels in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    if let Some(dir) = save {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut outputs = Vec::new();
    for id in graph.with_role(Role::Output) {
        let t = graph.tensor(id);
        let values = memory.read(id);
        println!(
            "{}  {} {}  {}",
            t.name,
            t.layout.dtype,
            ir::layout::fmt_ne(&t.layout.ne),
            summary::summarize(&values)
        );
        if let Some(dir) = save {
            let path = dir.join(format!("{}.npy", file_stem(&t.name)));
            npy_values::write_values(&path, &values, t.layout.dtype)?;
            println!("  saved {}", path.display());
        }
        outputs.push((t.name.clone(), values));
    }
    Ok(outputs)
}

fn read_inputs(
    graph: &Graph,
    specs: &[String],
) -> Result<BTreeMap<String, kernels::reference::Dense>> {
    let mut inputs = BTreeMap::new();
    for spec in specs {
        let Some((name, path)) = spec.split_once('=') else {
            bail!("--input '{spec}' must be NAME=FILE.npy");
        };
        let id = graph
            .find(name)
            .filter(|&id| matches!(graph.tensor(id).role, Role::Input | Role::State))
            .with_context(|| {
                format!("--input {name}: the graph has no input or state tensor named '{name}'")
            })?;
        let values = npy_values::read_values(Path::new(path), name, &graph.tensor(id).layout)?;
        inputs.insert(name.to_string(), values);
    }
    Ok(inputs)
}

/// A tensor name made safe as a file name (`l0.attn/q` -> `l0.attn_q`).
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

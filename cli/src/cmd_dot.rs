//! `ggplan dot`: the plan as a Graphviz picture (splits coloured by device,
//! copies as edges between them).

use anyhow::{Context, Result, bail};
use clap::Args;
use ir::plan::{Plan, Step};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Arguments of `ggplan dot`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan dot llama2l.plan.ron -o plan.svg")]
pub struct DotArgs {
    /// The plan file.
    plan: PathBuf,
    /// Output: `.svg` (needs Graphviz's `dot`; otherwise the .dot is written beside it) or `.dot`.
    #[arg(short, long)]
    output: PathBuf,
}

const COLOURS: [&str; 4] = ["#cfe2f3", "#d9ead3", "#fce5cd", "#ead1dc"];

/// The DOT text of a plan.
pub fn to_dot(plan: &Plan) -> String {
    let mut s = String::from(
        "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=monospace];\n",
    );
    let step_name = |step: &Step| match step {
        Step::Op { op, dst, .. } => format!("{} ({})", plan.tensors[*dst as usize].name, op.name()),
        Step::Fused { kernel } => {
            let k = &plan.kernels[*kernel as usize];
            format!(
                "{} (fused x{})",
                plan.tensors[k.output as usize].name,
                k.nodes.len()
            )
        }
    };
    let mut writer = std::collections::BTreeMap::new();
    for (i, split) in plan.splits.iter().enumerate() {
        let colour = COLOURS[split.device.index() % COLOURS.len()];
        let dev = &plan.devices[split.device.index()].name;
        let _ = writeln!(
            s,
            "  subgraph cluster_{i} {{\n    label=\"split {i}: {dev}\"; style=filled; color=\"{colour}\";"
        );
        for (k, step) in split.steps.iter().enumerate() {
            let _ = writeln!(
                s,
                "    s{i}_{k} [label=\"{}\", fillcolor=white];",
                step_name(step).replace('"', "'")
            );
            let dst = match step {
                Step::Op { dst, .. } => *dst,
                Step::Fused { kernel } => plan.kernels[*kernel as usize].output,
            };
            writer.insert(dst, format!("s{i}_{k}"));
        }
        s += "  }\n";
    }
    for (i, split) in plan.splits.iter().enumerate() {
        let Some(first) = split.steps.first().map(|_| format!("s{i}_0")) else {
            continue;
        };
        for c in &split.copies {
            let from = writer.get(&c.src).cloned().unwrap_or_else(|| {
                let leaf = format!("leaf_{}", c.src);
                let _ = writeln!(
                    s,
                    "  {leaf} [label=\"{}\", shape=ellipse];",
                    plan.tensors[c.src as usize].name
                );
                leaf
            });
            let _ = writeln!(
                s,
                "  {from} -> {first} [label=\"copy {} ({} B)\", color=red];",
                plan.tensors[c.src as usize].name, c.bytes
            );
        }
    }
    s += "}\n";
    s
}

/// Runs `ggplan dot`.
pub fn run(args: DotArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let dot = to_dot(&plan);
    let ext = args
        .output
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    match ext {
        "dot" => ir::text::write_atomically(&args.output, dot.as_bytes())?,
        "svg" => {
            let dot_path = args.output.with_extension("dot");
            ir::text::write_atomically(&dot_path, dot.as_bytes())?;
            match Command::new("dot").arg("-Tsvg").arg(&dot_path).output() {
                Ok(out) if out.status.success() => {
                    ir::text::write_atomically(&args.output, &out.stdout)?;
                    std::fs::remove_file(&dot_path)
                        .with_context(|| format!("removing {}", dot_path.display()))?;
                }
                _ => {
                    println!(
                        "Graphviz `dot` is not installed (apt-get install graphviz); wrote {} instead",
                        dot_path.display()
                    );
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        _ => bail!("{}: give a .svg or .dot output file", args.output.display()),
    }
    println!("wrote {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

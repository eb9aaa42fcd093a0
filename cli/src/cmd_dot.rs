//! `ggplan dot`: the plan as a Graphviz picture, top to bottom: by default one
//! node per split (repeats folded, copies as edges with bytes), with
//! `--detail` every step (see `ggplan::plan::dot`).

use anyhow::{Context, Result, bail};
use clap::Args;
use ggplan::plan::DotView;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Arguments of `ggplan dot`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan dot llama2l.plan.ron -o plan.svg\n  ggplan dot llama2l.plan.ron --detail -o steps.svg"
)]
pub struct DotArgs {
    /// The plan file.
    plan: PathBuf,
    /// Output: `.svg` (needs Graphviz's `dot`; otherwise the .dot is written beside it) or `.dot`.
    #[arg(short, long)]
    output: PathBuf,
    /// Every step in its split, instead of one node per split (repeats
    /// folded) with copies as edges.
    #[arg(long)]
    detail: bool,
}

/// Runs `ggplan dot`.
pub fn run(args: DotArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let view = if args.detail {
        DotView::Detail
    } else {
        DotView::Summary
    };
    let dot = ggplan::plan::dot(&plan, view);
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

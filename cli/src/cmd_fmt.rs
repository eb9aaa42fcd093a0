//! `ggplan fmt`: canonical formatting of graph files.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan fmt`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan fmt examples/graphs/llama2l.ron --check")]
pub struct FmtArgs {
    /// Graph files (.ron) to format.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Change nothing; exit 1 if a file is not in canonical form.
    #[arg(long)]
    check: bool,
}

/// Formats (or checks) every file. All files are parsed before any is written,
/// so one bad file leaves every file untouched.
pub fn run(args: FmtArgs) -> Result<ExitCode> {
    let mut changed = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let graph = ir::text::parse(&text, &path.display().to_string())?;
        if ir::text::to_ron(&graph) != text {
            changed.push((path, graph));
        }
    }
    for (path, graph) in &changed {
        if args.check {
            println!(
                "{}: not in canonical form (run `ggplan fmt {}`)",
                path.display(),
                path.display()
            );
        } else {
            ir::text::write_graph(path, graph)?;
            println!("{}: formatted", path.display());
        }
    }
    Ok(if args.check && !changed.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

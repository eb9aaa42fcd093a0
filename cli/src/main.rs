//! `ggplan`: the command-line face of the planner.
//!
//! Each subcommand lives in its own module; `main` only parses arguments and
//! turns errors into a message and exit code 1 (clap uses 2 for usage errors).

mod cmd_demo;
mod cmd_eval;
mod cmd_fmt;
mod npy_values;
mod summary;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// ggplan: an ahead-of-time planner for ggml-style compute graphs.
#[derive(Parser)]
#[command(name = "ggplan", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bundled example end to end (needs no files).
    Demo(cmd_demo::DemoArgs),
    /// Evaluate a graph with the reference kernels and summarise its outputs.
    Eval(cmd_eval::EvalArgs),
    /// Rewrite a graph file in canonical form (or check that it is).
    Fmt(cmd_fmt::FmtArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cmd_demo::run(args),
        Command::Eval(args) => cmd_eval::run(args),
        Command::Fmt(args) => cmd_fmt::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

//! `ggplan`: the command-line face of the planner.
//!
//! Each subcommand lives in its own module; `main` only parses arguments and
//! turns errors into a message and exit code 1 (clap uses 2 for usage errors).

mod check_run;
mod chrome_trace;
mod cmd_bench;
mod cmd_bench_compile;
mod cmd_compile;
mod cmd_demo;
mod cmd_devices;
mod cmd_diff;
mod cmd_dot;
mod cmd_embed;
mod cmd_eval;
mod cmd_fmt;
mod cmd_generate;
mod cmd_graph;
mod cmd_import;
mod cmd_memory;
mod cmd_quantize;
mod cmd_run;
mod cmd_show;
mod cmd_verify;
mod logging;
mod memory_svg;
mod memory_timeline;
mod npy_values;
mod plan_load;
mod progress;
mod summary;
mod svg;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// ggplan: an ahead-of-time planner for ggml-style compute graphs.
#[derive(Parser)]
#[command(name = "ggplan", version, about, long_about = None)]
struct Cli {
    /// Log what ggplan does to stderr: -v for progress, -vv for detail (RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a graph for a target into a plan.
    Compile(cmd_compile::CompileArgs),
    /// Summarise a plan: splits, copies, memory per device.
    Show(cmd_show::ShowArgs),
    /// Say where each tensor is and why (or everything about one tensor).
    Explain(cmd_show::ExplainArgs),
    /// Re-prove a plan with the independent checker.
    Verify(cmd_verify::VerifyArgs),
    /// Compare two plans: placements, splits, copies and memory.
    Diff(cmd_diff::DiffArgs),
    /// Draw a plan's compute arenas over time (SVG) and report the peak.
    Memory(cmd_memory::MemoryArgs),
    /// Draw a plan with Graphviz.
    Dot(cmd_dot::DotArgs),
    /// Time a plan on the devices it names (CPU, CUDA, `--rpc` servers): per run, op kind and split, beside the host's ceilings.
    Bench(cmd_bench::BenchArgs),
    /// Time compiling a 32-layer llama-7B-shaped graph, per pass.
    BenchCompile(cmd_bench_compile::BenchCompileArgs),
    /// List the devices a plan can name here: the CPU (cores, SIMD, memory, NUMA nodes), CUDA GPUs, `--rpc` servers.
    Devices(cmd_devices::DevicesArgs),
    /// Run the bundled example end to end (needs no files).
    Demo(cmd_demo::DemoArgs),
    /// Evaluate a graph with the reference kernels and summarise its outputs.
    Eval(cmd_eval::EvalArgs),
    /// Run a plan on the devices it names: CPU, CUDA GPUs, `--rpc` servers (optionally checked against the reference).
    Run(cmd_run::RunArgs),
    /// Sentence embeddings with a BERT encoder (Hugging Face folder or GGUF), with a similarity table.
    Embed(cmd_embed::EmbedArgs),
    /// Build a model's graph at a fixed shape from a GGUF file or a Hugging Face folder.
    Graph(cmd_graph::GraphArgs),
    /// Import llama.cpp's captured decode (scripts/llama-capture.sh) as a graph.
    Import(cmd_import::ImportArgs),
    /// Greedy text generation with a llama-family GGUF (prefill + decode plans sharing a KV cache).
    Generate(cmd_generate::GenerateArgs),
    /// Rewrite a graph file in canonical form (or check that it is).
    Fmt(cmd_fmt::FmtArgs),
    /// Requantize a GGUF file (q4_0, q4_1, q8_0, q4_k, q5_k, q6_k, or llama.cpp's q4_k_m mix).
    Quantize(cmd_quantize::QuantizeArgs),
}

/// Restores the default SIGPIPE action (Rust ignores it, so a closed pipe,
/// as in `ggplan show plan.ron | head`, would make the next print panic):
/// the process then ends quietly when its reader goes away, like every Unix
/// tool. Output files are written through a rename, so none is left half-written.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first in `main`, before any other thread exists; setting
    // a signal's action to the default has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = Cli::parse();
    logging::init(cli.verbose);
    let result = match cli.command {
        Command::Compile(args) => cmd_compile::run(args),
        Command::Show(args) => cmd_show::run_show(args),
        Command::Explain(args) => cmd_show::run_explain(args),
        Command::Verify(args) => cmd_verify::run(args),
        Command::Diff(args) => cmd_diff::run(args),
        Command::Dot(args) => cmd_dot::run(args),
        Command::Memory(args) => cmd_memory::run(args),
        Command::Devices(args) => cmd_devices::run(args),
        Command::Bench(args) => cmd_bench::run(args),
        Command::BenchCompile(args) => cmd_bench_compile::run(args),
        Command::Demo(args) => cmd_demo::run(args),
        Command::Eval(args) => cmd_eval::run(args),
        Command::Fmt(args) => cmd_fmt::run(args),
        Command::Run(args) => cmd_run::run(args),
        Command::Embed(args) => cmd_embed::run(args),
        Command::Generate(args) => cmd_generate::run(args),
        Command::Graph(args) => cmd_graph::run(args),
        Command::Import(args) => cmd_import::run(args),
        Command::Quantize(args) => cmd_quantize::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, joined by ": ". A cause whose text the message
/// already contains is left out: the library errors print their cause in
/// their own message and also expose it as `source()`, which anyhow's `{:#}`
/// would print twice ("file: No such file: No such file").
fn error_chain(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(ir::Error::Io {
            path: "a.ron".into(),
            source: io,
        });
        assert_eq!(error_chain(&e), "a.ron: No such file");
        let wrapped = e.context("loading the plan");
        assert_eq!(
            error_chain(&wrapped),
            "loading the plan: a.ron: No such file"
        );
    }
}

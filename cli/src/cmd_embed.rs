//! `ggplan embed`: sentence embeddings with a BERT encoder (all-MiniLM-L6-v2
//! style: mean or `[CLS]` pooling, L2 normalisation) on the CPU runtime, from
//! a Hugging Face folder or a GGUF file.

use anyhow::{Result, bail};
use clap::Args;
use ggplan::jobs::{Embedder, cosine};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan embed`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan embed --hf all-MiniLM-L6-v2/ \"A cat sits.\" \"A dog runs.\"\n  \
    ggplan embed --gguf all-MiniLM-L6-v2.F16.gguf \"first\" \"second\" --save embeddings.npy"
)]
pub struct EmbedArgs {
    /// A Hugging Face folder: config.json, model.safetensors, tokenizer.json.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with = "gguf",
        required_unless_present = "gguf"
    )]
    hf: Option<PathBuf>,
    /// A BERT GGUF file (architecture bert, WordPiece vocabulary), as
    /// llama.cpp's converter writes it.
    #[arg(long, value_name = "FILE")]
    gguf: Option<PathBuf>,
    /// The sentences.
    #[arg(required = true)]
    sentences: Vec<String>,
    /// Write the embeddings as a float32 .npy of shape [n_sentences, dim].
    #[arg(long, value_name = "FILE.npy")]
    save: Option<PathBuf>,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Where the plans run: a preset (`cpu`, `cuda0`, `cpu0+cpu1`, ...) or a
    /// target file.
    #[arg(long, default_value = "cpu")]
    target: String,
}

/// Where the encoder comes from.
/// Runs `ggplan embed`.
pub fn run(args: EmbedArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let mut embedder = match (&args.hf, &args.gguf) {
        (Some(dir), _) => Embedder::open_hf(dir, args.threads)?,
        (None, Some(path)) => Embedder::open_gguf(path, args.threads)?,
        (None, None) => bail!("give --hf DIR or --gguf FILE"),
    };
    if args.target != "cpu" {
        embedder = embedder.on_target(ggplan::target::resolve(&args.target)?)?;
    }
    // A bar over the first plan's kernels: later plans reuse them.
    let bar = crate::progress::bar(0, "preparing kernels");
    embedder.set_progress(Some(crate::progress::preparing(&bar)));
    let mut run_seconds = 0.0;
    let mut n_tokens_total = 0;
    let mut embeddings: Vec<Vec<f32>> = Vec::new();
    for sentence in &args.sentences {
        let e = embedder.embed(sentence)?;
        bar.finish_and_clear();
        embedder.set_progress(None);
        run_seconds += e.run_seconds;
        n_tokens_total += e.tokens;
        let head: Vec<String> = e
            .values
            .iter()
            .take(6)
            .map(|v| format!("{v:+.5}"))
            .collect();
        println!(
            "[{}] {sentence:?} ({} tokens): [{}, ...] dim {}",
            embeddings.len(),
            e.tokens,
            head.join(", "),
            e.values.len()
        );
        embeddings.push(e.values);
    }
    if embeddings.len() > 1 {
        println!("\ncosine similarity:");
        print!("     ");
        for j in 0..embeddings.len() {
            print!(" [{j:>2}]  ");
        }
        println!();
        for (i, a) in embeddings.iter().enumerate() {
            print!("[{i:>2}] ");
            for b in &embeddings {
                print!("{:>7.4} ", cosine(a, b));
            }
            println!();
        }
    }
    println!(
        "\n{} sentences, {n_tokens_total} tokens on {} threads: {:.0} tokens/s running ({:.1} ms total with compiling and loading)",
        embeddings.len(),
        embedder.threads(),
        n_tokens_total as f64 / run_seconds.max(1e-9),
        start.elapsed().as_secs_f64() * 1e3
    );
    if let Some(path) = &args.save {
        let dim = embeddings[0].len() as u64;
        let flat: Vec<f32> = embeddings.concat();
        ir::files::npy::write_npy_f32(path, &[embeddings.len() as u64, dim], &flat)?;
        println!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

//! `ggplan embed`: sentence embeddings with a BERT encoder (all-MiniLM-L6-v2
//! style: mean or `[CLS]` pooling, L2 normalisation) on the CPU runtime, from
//! a Hugging Face folder or a GGUF file.

use crate::model_session::Shared;
use anyhow::{Context, Result, bail};
use clap::Args;
use ir::files::gguf::GgufFile;
use models::bert::{self, BertConfig};
use models::{Family, Tokenizer};
use runtime::{Precision, Weights};
use std::path::{Path, PathBuf};
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
}

/// Where the encoder comes from.
enum Source {
    Hf(PathBuf),
    Gguf(GgufFile),
}

impl Source {
    /// The config for a sentence of `n_tokens` tokens.
    fn config(&self, n_tokens: i64) -> Result<BertConfig> {
        Ok(match self {
            Source::Hf(dir) => BertConfig::from_hf_dir(dir, n_tokens)?,
            Source::Gguf(file) => BertConfig::from_gguf(file, n_tokens)?,
        })
    }
}

/// The tokenizer, weights and config source of a folder or a GGUF file.
fn open(args: &EmbedArgs) -> Result<(Tokenizer, Weights, Source)> {
    match (&args.hf, &args.gguf) {
        (Some(dir), _) => {
            let tokenizer = Tokenizer::from_hf_file(&dir.join("tokenizer.json"))
                .with_context(|| format!("reading the tokenizer of {}", dir.display()))?;
            let weights = Weights::open(dir.join("model.safetensors"))?;
            Ok((tokenizer, weights, Source::Hf(dir.clone())))
        }
        (None, Some(path)) => {
            let file = GgufFile::open(path)?;
            check_encoder(&file, path)?;
            let tokenizer = Tokenizer::from_gguf(&file)?;
            let weights = Weights::open(path)?;
            Ok((tokenizer, weights, Source::Gguf(file)))
        }
        (None, None) => bail!("give --hf DIR or --gguf FILE"),
    }
}

/// `embed` needs an encoder: a decoder's file is refused by name.
fn check_encoder(file: &GgufFile, path: &Path) -> Result<()> {
    match Family::of(file)? {
        Family::Bert => Ok(()),
        Family::Llama => bail!(
            "{}: architecture '{}' is a decoder; embed needs a BERT encoder (architecture 'bert'); \
             use generate for decoders",
            path.display(),
            file.architecture().unwrap_or("?")
        ),
    }
}

/// Runs `ggplan embed`.
pub fn run(args: EmbedArgs) -> Result<ExitCode> {
    let (tokenizer, weights, source) = open(&args)?;
    let shared = Shared::new(args.threads, Precision::Exact)?;
    let start = Instant::now();
    let mut run_seconds = 0.0;
    let mut n_tokens_total = 0;
    let mut embeddings: Vec<Vec<f32>> = Vec::new();
    for sentence in &args.sentences {
        let ids = tokenizer.encode(sentence)?;
        if ids.is_empty() {
            bail!("sentence {sentence:?} has no tokens");
        }
        let cfg = source.config(ids.len() as i64)?;
        let graph = bert::build_encoder(&cfg)?;
        let mut rt = shared.load(&graph, &weights)?;
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        rt.set_input_i32(bert::TOKENS, &ids)?;
        let t = Instant::now();
        rt.run()?;
        run_seconds += t.elapsed().as_secs_f64();
        n_tokens_total += ids.len();
        let e = rt.output_f32(bert::EMBEDDING)?;
        let head: Vec<String> = e.iter().take(6).map(|v| format!("{v:+.5}")).collect();
        println!(
            "[{}] {sentence:?} ({} tokens): [{}, ...] dim {}",
            embeddings.len(),
            ids.len(),
            head.join(", "),
            e.len()
        );
        embeddings.push(e);
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
        shared.threads(),
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

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(f64::MIN_POSITIVE)
}

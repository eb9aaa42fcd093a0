//! `ggplan graph`: build a model's graph at a fixed shape from its files.

use anyhow::{Result, bail};
use clap::Args;
use ir::files::gguf::GgufFile;
use ir::{DType, Graph};
use models::Family;
use models::bert::{self, BertConfig};
use models::llama::{self, CacheConfig, LlamaConfig};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan graph`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan graph --gguf SmolLM2-135M-Instruct.Q4_1.gguf --tokens 128 -o prefill.ron\n  \
    ggplan graph --gguf model.gguf --ctx 512 --decode -o decode.ron\n  \
    ggplan graph --gguf model.gguf --ctx 2048 --attend 128 --decode -o decode128.ron\n  \
    ggplan graph --hf all-MiniLM-L6-v2/ --tokens 16 -o minilm.ron\n  \
    ggplan graph --gguf all-MiniLM-L6-v2.F16.gguf --tokens 16 -o minilm.ron"
)]
pub struct GraphArgs {
    /// A GGUF file: a llama-family decoder (llama, mistral, qwen2) or a BERT
    /// encoder (bert), by its general.architecture.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "hf",
        required_unless_present = "hf"
    )]
    gguf: Option<PathBuf>,
    /// A Hugging Face BERT folder (config.json, model.safetensors).
    #[arg(long, value_name = "DIR")]
    hf: Option<PathBuf>,
    /// Tokens per run (prefill batch or sentence length).
    #[arg(long, default_value_t = 16)]
    tokens: i64,
    /// With a KV cache of this many rows (llama only): the generation graphs.
    #[arg(long)]
    ctx: Option<i64>,
    /// The one-token decode graph (llama only; implies a cache, 512 rows unless --ctx).
    #[arg(long)]
    decode: bool,
    /// Attend over only the first ROWS cache rows (llama only; default: all
    /// --ctx rows), as `generate` does in its context buckets.
    #[arg(long, value_name = "ROWS")]
    attend: Option<i64>,
    /// F16 KV cache instead of F32.
    #[arg(long)]
    kv_f16: bool,
    /// Where to write the graph (.ron).
    #[arg(short, long, value_name = "GRAPH.ron")]
    output: PathBuf,
}

/// Runs `ggplan graph`.
pub fn run(args: GraphArgs) -> Result<ExitCode> {
    let graph = match (&args.gguf, &args.hf) {
        (Some(path), _) => {
            let file = GgufFile::open(path)?;
            match Family::of(&file)? {
                Family::Llama => llama_graph(&args, &file)?,
                Family::Bert => {
                    refuse_cache_options(&args)?;
                    bert::build_encoder(&BertConfig::from_gguf(&file, args.tokens)?)?
                }
            }
        }
        (None, Some(dir)) => {
            refuse_cache_options(&args)?;
            bert::build_encoder(&BertConfig::from_hf_dir(dir, args.tokens)?)?
        }
        (None, None) => bail!("give --gguf FILE or --hf DIR"),
    };
    ir::text::write_graph(&args.output, &graph)?;
    println!(
        "wrote {} ('{}': {} tensors)",
        args.output.display(),
        graph.name,
        graph.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The prefill graph, or with `--ctx`/`--decode` the generation graph, of a
/// llama-family file.
fn llama_graph(args: &GraphArgs, file: &GgufFile) -> Result<Graph> {
    let tokens = if args.decode { 1 } else { args.tokens };
    let cfg = LlamaConfig::from_gguf(file, tokens)?;
    Ok(match (args.ctx, args.decode, args.attend) {
        (None, false, None) => llama::build_prefill(&cfg)?,
        (ctx, _, attend) => {
            let cache = CacheConfig {
                n_ctx: ctx.unwrap_or(512),
                kv_dtype: if args.kv_f16 { DType::F16 } else { DType::F32 },
            };
            llama::build_cached_attending(&cfg, &cache, attend.unwrap_or(cache.n_ctx))?
        }
    })
}

/// A KV cache belongs to decoders: `--ctx`, `--attend` and `--decode` are
/// refused for an encoder.
fn refuse_cache_options(args: &GraphArgs) -> Result<()> {
    if args.ctx.is_some() || args.decode || args.attend.is_some() {
        bail!("--ctx, --attend and --decode apply to llama-family decoders, not BERT encoders");
    }
    Ok(())
}

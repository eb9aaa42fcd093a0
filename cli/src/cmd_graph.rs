//! `ggplan graph`: build a model's graph at a fixed shape from its files.

use anyhow::{Result, bail};
use clap::Args;
use ggplan::ModelShape;
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
    /// A GGUF file: a llama-family decoder (llama incl. Mixtral, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3) or a
    /// BERT encoder (bert), by its general.architecture.
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
    /// Logits of the last token only (llama only), as llama.cpp computes a
    /// prefill: the output head runs on one row.
    #[arg(long)]
    last_logits: bool,
    /// Where to write the graph (.ron).
    #[arg(short, long, value_name = "GRAPH.ron")]
    output: PathBuf,
}

/// Runs `ggplan graph`.
pub fn run(args: GraphArgs) -> Result<ExitCode> {
    let shape = ModelShape {
        tokens: args.tokens,
        ctx: args.ctx,
        decode: args.decode,
        attend: args.attend,
        kv_f16: args.kv_f16,
        last_logits: args.last_logits,
    };
    let graph = match (&args.gguf, &args.hf) {
        (Some(path), _) => ggplan::graph::from_gguf(path, &shape)?,
        (None, Some(dir)) => {
            if shape != ModelShape::tokens(args.tokens) {
                bail!(
                    "--ctx, --attend, --decode, --kv-f16 and --last-logits apply to llama-family decoders, not BERT encoders"
                );
            }
            ggplan::graph::from_hf(dir, args.tokens)?
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

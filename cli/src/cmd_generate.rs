//! `ggplan generate`: greedy text generation with a llama-family GGUF on the
//! CPU runtime. Fixed-shape plans share one KV cache of `--ctx` rows: a
//! prefill plan for the prompt's tokens, then decode plans for one token at a
//! time, one per context bucket (`decode_buckets.rs`): each attends over the
//! smallest power-of-two window of cache rows that holds the sequence so far,
//! so short sequences do not pay for the whole context.
//!
//! The prefill plan attends over the whole cache. A window would save little
//! (the prefill runs once; its weights dominate) and would change its bits:
//! with many query columns gemm picks its kernel by the matrix sizes, so the
//! scores over fewer rows round differently, and with 8-bit activations such
//! a difference can change a greedy token later on. Decode steps (one
//! column) are bit-identical in every bucket (see `decode_buckets.rs`).

use crate::decode_buckets::{DEFAULT_MIN_BUCKET, DecodePlans, context_buckets};
use crate::model_session::Shared;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use ir::DType;
use ir::files::gguf::GgufFile;
use models::llama::{self, CacheConfig, LlamaConfig, step_inputs};
use models::{StreamDecoder, Tokenizer};
use runtime::{Precision, Runtime, Weights};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `ggplan generate`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan generate --gguf SmolLM2-135M-Instruct.Q4_1.gguf --prompt \"Once upon a time\"\n  \
    ggplan generate --gguf model.gguf --prompt \"Hello\" --max-tokens 64 --ctx 256 --json"
)]
pub struct GenerateArgs {
    /// A llama-family GGUF file (llama, mistral, qwen2).
    #[arg(long, value_name = "FILE")]
    pub(crate) gguf: PathBuf,
    /// The prompt.
    #[arg(long)]
    pub(crate) prompt: String,
    /// Tokens to generate (fewer when the model ends the text or the context is full).
    #[arg(long, default_value_t = 32)]
    pub(crate) max_tokens: usize,
    /// Context length: the KV cache's rows.
    #[arg(long, default_value_t = 512)]
    pub(crate) ctx: i64,
    /// Smallest context bucket (a power of two): each step attends over the
    /// smallest of ROWS, 2·ROWS, 4·ROWS, …, --ctx that holds the sequence;
    /// ROWS >= --ctx attends over the whole cache at every step.
    #[arg(long, value_name = "ROWS", default_value_t = DEFAULT_MIN_BUCKET)]
    pub(crate) min_bucket: i64,
    /// Write the prompt positions' logits as a float32 .npy [n_prompt, vocab].
    #[arg(long, value_name = "FILE.npy")]
    pub(crate) dump_logits: Option<PathBuf>,
    /// Print one JSON object (prompt ids, generated ids, text, speeds) instead of streaming.
    #[arg(long)]
    pub(crate) json: bool,
    /// Quantized products: `fast` (8-bit activations, as llama.cpp) or `exact` (f32).
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fast)]
    pub(crate) precision: PrecisionArg,
    /// KV cache element type.
    #[arg(long, value_enum, default_value_t = KvArg::F32)]
    pub(crate) kv: KvArg,
    /// Threads (default: all cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
}

/// `--precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// Activations quantized to 8 bits for quantized weights.
    Fast,
    /// Weights dequantized, products in f32.
    Exact,
}

/// `--kv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvArg {
    /// f32 cache (exact).
    F32,
    /// f16 cache (half the memory traffic).
    F16,
}

/// Index of the first largest value of a logits row (the greedy token).
pub(crate) fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Sets a cached graph's per-step inputs for `ids` at position `n_past`, the
/// graph attending over the first `attend` of `n_ctx` cache rows.
fn feed(rt: &mut Runtime, ids: &[u32], n_past: i64, n_ctx: i64, attend: i64) -> Result<()> {
    let step = step_inputs(n_past, ids.len() as i64, n_ctx, attend)?;
    let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    rt.set_input_i32(llama::TOKENS, &ids)?;
    rt.set_input_i32(llama::POSITIONS, &step.pos)?;
    rt.set_input_i32(llama::KV_IDX, &step.kv_idx)?;
    rt.set_input_f32(llama::KQ_MASK, &step.kq_mask)?;
    Ok(())
}

/// Runs `ggplan generate`.
pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let file = GgufFile::open(&args.gguf)?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("reading the tokenizer of {}", args.gguf.display()))?;
    let prompt = tokenizer.encode(&args.prompt)?;
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    let n_prompt = prompt.len() as i64;
    if n_prompt > args.ctx {
        bail!(
            "the prompt is {n_prompt} tokens, longer than the context of {} (raise --ctx)",
            args.ctx
        );
    }
    let precision = match args.precision {
        PrecisionArg::Fast => Precision::Fast,
        PrecisionArg::Exact => Precision::Exact,
    };
    let cache = CacheConfig {
        n_ctx: args.ctx,
        kv_dtype: match args.kv {
            KvArg::F32 => DType::F32,
            KvArg::F16 => DType::F16,
        },
    };
    let buckets = context_buckets(args.ctx, args.min_bucket)?;
    let load_start = Instant::now();
    let cfg = LlamaConfig::from_gguf(&file, n_prompt)?;
    let prefill_graph = llama::build_cached(&cfg, &cache)?;
    drop(file);
    let weights = Weights::open(&args.gguf)?;
    let shared = Shared::new(args.threads, precision)?;
    let mut prefill = shared.load(&prefill_graph, &weights)?;
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    tracing::info!(?buckets, "decode buckets (cache rows attended)");
    if !args.json {
        eprintln!(
            "loaded {} ({} layers, vocab {}) for {} threads in {load_ms:.0} ms ({} kernels JIT-compiled)",
            args.gguf.display(),
            cfg.n_layer,
            cfg.n_vocab,
            shared.threads(),
            shared.kernels_compiled()
        );
    }

    let n_vocab = cfg.n_vocab as usize;
    let t = Instant::now();
    feed(&mut prefill, &prompt, 0, args.ctx, args.ctx)?;
    prefill.run()?;
    let logits = prefill.output_f32(llama::LOGITS)?;
    let prefill_s = t.elapsed().as_secs_f64();
    // Its arenas are not needed again (the cache lives in the shared store).
    drop(prefill);
    if let Some(path) = &args.dump_logits {
        ir::files::npy::write_npy_f32(path, &[n_prompt as u64, n_vocab as u64], &logits)?;
    }
    let mut next = argmax(&logits[(n_prompt as usize - 1) * n_vocab..]);

    let mut out = std::io::stdout().lock();
    if !args.json {
        write!(out, "{}", args.prompt)?;
        out.flush()?;
    }
    let mut stream = StreamDecoder::new(&tokenizer);
    let mut decode = DecodePlans::new(&shared, &weights, &cfg, cache, buckets);
    let mut generated = Vec::new();
    let mut n_past = n_prompt;
    let t = Instant::now();
    let mut decode_steps = 0usize;
    loop {
        generated.push(next);
        if !args.json {
            write!(out, "{}", stream.push(next)?)?;
            out.flush()?;
        }
        if generated.len() >= args.max_tokens
            || Some(next) == tokenizer.eos_id()
            || n_past >= args.ctx
        {
            break;
        }
        let (runtime, attend) = decode.for_step(n_past)?;
        feed(runtime, &[next], n_past, args.ctx, attend)?;
        runtime.run()?;
        decode_steps += 1;
        n_past += 1;
        next = argmax(&runtime.output_f32(llama::LOGITS)?);
    }
    // Decode speed counts the steps, not the compiling of bucket plans.
    let plans_s = decode.load_seconds();
    let decode_s = (t.elapsed().as_secs_f64() - plans_s).max(0.0);
    let text = tokenizer.decode(&generated)?;
    let prefill_tps = n_prompt as f64 / prefill_s;
    let decode_tps = decode_steps as f64 / decode_s.max(1e-9);
    let plans: Vec<_> = decode
        .loads()
        .iter()
        .map(|l| {
            serde_json::json!({
                "attend": l.attend,
                "first_position": l.first_position,
                "load_ms": l.load_ms,
            })
        })
        .collect();
    if args.json {
        let value = serde_json::json!({
            "prompt": args.prompt,
            "prompt_ids": prompt,
            "generated_ids": generated,
            "text": text,
            "prefill_tokens": n_prompt,
            "prefill_tokens_per_s": prefill_tps,
            "decode_tokens": decode_steps,
            "decode_tokens_per_s": decode_tps,
            "decode_plans": plans,
            "threads": shared.threads(),
        });
        writeln!(out, "{value}")?;
    } else {
        write!(out, "{}", stream.finish())?;
        writeln!(out)?;
        let windows: Vec<String> = decode
            .loads()
            .iter()
            .map(|l| l.attend.to_string())
            .collect();
        eprintln!(
            "prefill: {n_prompt} tokens in {:.1} ms ({prefill_tps:.1} tokens/s); decode: {decode_steps} tokens in {:.1} ms ({decode_tps:.1} tokens/s; cache rows attended {}, plans loaded in {:.1} ms); {} threads",
            prefill_s * 1e3,
            decode_s * 1e3,
            if windows.is_empty() {
                "-".to_string()
            } else {
                windows.join(" -> ")
            },
            plans_s * 1e3,
            shared.threads()
        );
    }
    Ok(ExitCode::SUCCESS)
}

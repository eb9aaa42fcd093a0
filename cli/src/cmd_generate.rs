//! `ggplan generate`: greedy text generation with a llama-family GGUF on the
//! CPU runtime, printed as it is made. The work (a prefill plan, then decode
//! plans per context bucket sharing one KV cache) is `ggplan::Generator`
//! (ggplan/src/jobs/generator.rs); this module parses the flags and prints.

use crate::cmd_compile::{SplitModeArg, split_options};
use anyhow::Result;
use clap::{Args, ValueEnum};
use ggplan::jobs::buckets::DEFAULT_MIN_BUCKET;
use ggplan::jobs::{GenerateEvent, GenerateOptions, Generation, Generator, ImportedGenerator};
use ir::DType;
use runtime::Precision;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan generate`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan generate --gguf SmolLM2-135M-Instruct.Q4_1.gguf --prompt \"Once upon a time\"\n  \
    ggplan generate --gguf model.gguf --prompt \"Hello\" --max-tokens 64 --ctx 256 --json\n  \
    ggplan generate --gguf model.gguf --prompt \"Hello\" --target cpu0+cpu1 --split-mode row\n  \
    ggplan generate --gguf model.gguf --prompt \"Hello\" --prefill-graph prefill.ron --decode-graph decode.ron"
)]
pub struct GenerateArgs {
    /// A llama-family GGUF file (llama, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3; Mixtral is llama with experts).
    #[arg(long, value_name = "FILE")]
    pub(crate) gguf: PathBuf,
    /// The prompt.
    #[arg(long)]
    pub(crate) prompt: String,
    /// Generate with llama.cpp's own graphs instead of ggplan's builder: a
    /// prefill graph imported from a capture (`ggplan import`; the prompt runs
    /// in chunks of its batch, the rest through the decode graph). The
    /// context is the graphs' (the capture's --ctx); --ctx and --kv are not used.
    #[arg(long, value_name = "GRAPH.ron", requires = "decode_graph")]
    pub(crate) prefill_graph: Option<PathBuf>,
    /// The one-token decode graph imported beside --prefill-graph (a capture
    /// of `--tokens 1` with the same --ctx and cache types).
    #[arg(long, value_name = "GRAPH.ron", requires = "prefill_graph")]
    pub(crate) decode_graph: Option<PathBuf>,
    /// Tokens to generate (fewer when the model ends the text or the context is full).
    #[arg(long, default_value_t = 32)]
    pub(crate) max_tokens: usize,
    /// Go on past end-of-generation tokens (EOS, `<end_of_turn>`, `<|im_end|>`, ...):
    /// exactly --max-tokens tokens unless the context fills, as llama.cpp's --ignore-eos.
    #[arg(long)]
    pub(crate) ignore_eos: bool,
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
    /// Threads (default: all cores; a multi-device target's devices run
    /// their own cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// The target plans are compiled for: a preset (cpu, cpu0+cpu1, ...),
    /// `host` or a target file.
    #[arg(long, default_value = "cpu")]
    pub(crate) target: String,
    /// `row` (alias `tensor`): every large matrix and the KV cache split over
    /// the target's devices; `layer`: whole blocks per device.
    #[arg(long, value_enum)]
    pub(crate) split_mode: Option<SplitModeArg>,
    /// Proportions per device, in target order (llama.cpp's -ts).
    #[arg(long, value_name = "P0,P1,...", value_delimiter = ',')]
    pub(crate) tensor_split: Vec<f64>,
    /// ggml RPC servers for the target's remote devices (rpc0, rpc1, ...;
    /// llama.cpp's `--rpc`); with `--target host` they become its devices.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub(crate) rpc: Vec<String>,
}

/// `--precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// Activations quantized to 8 bits for quantized weights.
    Fast,
    /// Weights dequantized, products in f32.
    Exact,
}

impl PrecisionArg {
    /// The runtime's precision.
    pub fn runtime(self) -> Precision {
        match self {
            PrecisionArg::Fast => Precision::Fast,
            PrecisionArg::Exact => Precision::Exact,
        }
    }
}

/// `--kv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvArg {
    /// f32 cache (exact).
    F32,
    /// f16 cache (half the memory traffic).
    F16,
}

/// The builder's generator or the imported graphs'.
enum AnyGenerator {
    Built(Box<Generator>),
    Imported(Box<ImportedGenerator>),
}

impl AnyGenerator {
    fn threads(&self) -> usize {
        match self {
            AnyGenerator::Built(g) => g.threads(),
            AnyGenerator::Imported(g) => g.threads(),
        }
    }

    fn generate(
        &mut self,
        prompt: &str,
        max_tokens: usize,
        on: &mut dyn FnMut(GenerateEvent<'_>),
    ) -> ggplan::Result<Generation> {
        match self {
            AnyGenerator::Built(g) => g.generate(prompt, max_tokens, on),
            AnyGenerator::Imported(g) => g.generate(prompt, max_tokens, on),
        }
    }
}

/// Runs `ggplan generate`.
pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let bar = crate::progress::bar(0, "loading the prefill plan");
    let options = GenerateOptions {
        ctx: args.ctx,
        min_bucket: args.min_bucket,
        precision: args.precision.runtime(),
        kv: match args.kv {
            KvArg::F32 => DType::F32,
            KvArg::F16 => DType::F16,
        },
        threads: args.threads,
        progress: Some(crate::progress::preparing(&bar)),
        target: Some(args.target.clone()),
        compile: {
            let (layer_split, tensor_split) = split_options(
                args.split_mode,
                &[],
                &args.tensor_split,
                Default::default(),
                Default::default(),
            )?;
            let mut compile = ggplan::CompileOptions {
                placement: ggplan::PlacementOptions {
                    layer_split,
                    ..Default::default()
                },
                tensor_split,
                ..Default::default()
            };
            compile.spelled = compile.flags(&args.target);
            compile
        },
        rpc: args.rpc.clone(),
        // Every position's logits only when they are dumped.
        all_prompt_logits: args.dump_logits.is_some(),
        ignore_eos: args.ignore_eos,
    };
    let mut generator =
        match (&args.prefill_graph, &args.decode_graph) {
            (Some(prefill), Some(decode)) => AnyGenerator::Imported(Box::new(
                ImportedGenerator::open(&args.gguf, (prefill, decode), options)?,
            )),
            _ => AnyGenerator::Built(Box::new(Generator::open(&args.gguf, options)?)),
        };
    let threads = generator.threads();
    let gguf = args.gguf.display().to_string();
    let mut out = std::io::stdout().lock();
    let mut written: std::io::Result<()> = Ok(());
    let generation = generator
        .generate(&args.prompt, args.max_tokens, &mut |event| match event {
            GenerateEvent::Loaded {
                n_layer,
                n_vocab,
                load_ms,
                kernels_compiled,
            } => {
                bar.finish_and_clear();
                if !args.json {
                    eprintln!(
                        "loaded {gguf} ({n_layer} layers, vocab {n_vocab}) for {threads} threads in {load_ms:.0} ms ({kernels_compiled} kernels JIT-compiled)"
                    );
                }
            }
            GenerateEvent::Text(text) => {
                if !args.json && written.is_ok() {
                    written = write!(out, "{text}").and_then(|()| out.flush());
                }
            }
        })?;
    written?;
    if let Some(path) = &args.dump_logits {
        let shape = [
            generation.prompt_ids.len() as u64,
            generation.n_vocab as u64,
        ];
        ir::files::npy::write_npy_f32(path, &shape, &generation.prompt_logits)?;
    }
    let prefill_tps = generation.prefill_tokens_per_second();
    let decode_tps = generation.decode_tokens_per_second();
    let plans_s = generation
        .decode_plans
        .iter()
        .map(|l| l.load_ms)
        .sum::<f64>()
        / 1e3;
    // The memory floor of decode, with the bandwidth measured now.
    let memcpy_gbps = if generation.decode_steps > 0 {
        runtime::ceiling::memcpy_gbps(256 << 20, 3)
    } else {
        0.0
    };
    let floor_ratio = generation.decode_floor_ratio(memcpy_gbps);
    if args.json {
        let plans: Vec<_> = generation
            .decode_plans
            .iter()
            .map(|l| {
                serde_json::json!({
                    "attend": l.attend,
                    "first_position": l.first_position,
                    "load_ms": l.load_ms,
                })
            })
            .collect();
        let value = serde_json::json!({
            "prompt": args.prompt,
            "prompt_ids": generation.prompt_ids,
            "generated_ids": generation.generated_ids,
            "stop": generation.stop.name(),
            "text": generation.text,
            "prefill_tokens": generation.prompt_ids.len(),
            "prefill_tokens_per_s": prefill_tps,
            "decode_tokens": generation.decode_steps,
            "decode_tokens_per_s": decode_tps,
            "decode_plans": plans,
            "decode_read_bytes_per_token": generation.decode_read_bytes_per_token(),
            "memcpy_gbps": memcpy_gbps,
            "decode_floor_ratio": floor_ratio,
            "threads": threads,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(out)?;
        let windows: Vec<String> = generation
            .decode_plans
            .iter()
            .map(|l| l.attend.to_string())
            .collect();
        eprintln!(
            "prefill: {} tokens in {:.1} ms ({prefill_tps:.1} tokens/s); decode: {} tokens in {:.1} ms ({decode_tps:.1} tokens/s; cache rows attended {}, plans loaded in {:.1} ms); {threads} threads; stopped: {}",
            generation.prompt_ids.len(),
            generation.prefill_seconds * 1e3,
            generation.decode_steps,
            generation.decode_seconds * 1e3,
            if windows.is_empty() {
                "-".to_string()
            } else {
                windows.join(" -> ")
            },
            plans_s * 1e3,
            generation.stop.name(),
        );
        if generation.decode_steps > 0 {
            eprintln!(
                "decode reads {:.1} MB of weights and cache per token; at memcpy {memcpy_gbps:.1} GB/s (measured now) that is {:.2} ms, and decode ran at {floor_ratio:.2}x that floor",
                generation.decode_read_bytes_per_token() / 1e6,
                generation.decode_read_bytes_per_token() / (memcpy_gbps * 1e9) * 1e3,
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! Greedy generation with a llama-family GGUF on the CPU runtime.
//!
//! Fixed-shape plans share one KV cache of `ctx` rows: a prefill plan for the
//! prompt's tokens, then decode plans for one token at a time, one per
//! context bucket ([`super::buckets`]): each attends over the smallest
//! power-of-two window of cache rows that holds the sequence so far, so short
//! sequences do not pay for the whole context.
//!
//! The prefill plan attends over the whole cache. A window would save little
//! (the prefill runs once; its weights dominate) and would change its bits:
//! with many query columns gemm picks its kernel by the matrix sizes, so the
//! scores over fewer rows round differently, and with 8-bit activations such
//! a difference can change a greedy token later on. Decode steps (one
//! column) are bit-identical in every bucket (see [`super::buckets`]).

use super::buckets::{BucketLoad, DEFAULT_MIN_BUCKET, DecodePlans, context_buckets};
use super::greedy::continue_greedily;
use super::session::{Progress, Session};
use crate::{Error, Result};
use ir::DType;
use ir::files::gguf::GgufFile;
use models::Tokenizer;
use models::llama::{self, CacheConfig, LlamaConfig, step_inputs};
use runtime::{Precision, Runtime, Weights};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How a [`Generator`] runs.
#[derive(Clone)]
pub struct GenerateOptions {
    /// Context length: the KV cache's rows.
    pub ctx: i64,
    /// Smallest context bucket (a power of two); `>= ctx` attends over the
    /// whole cache at every step.
    pub min_bucket: i64,
    /// Quantized products: 8-bit activations (`Fast`, as llama.cpp) or f32.
    pub precision: Precision,
    /// KV cache element type: F32 or F16.
    pub kv: DType,
    /// Threads (`None`: all cores).
    pub threads: Option<usize>,
    /// Sees the prefill plan's kernel preparation (a progress bar).
    pub progress: Option<Progress>,
    /// The target plans are compiled for (`None`: the `cpu` preset), by
    /// name (a preset, `host` or a target file).
    pub target: Option<String>,
    /// How plans are compiled for it (a tensor split: `--split-mode row`).
    pub compile: crate::CompileOptions,
    /// ggml RPC servers for the target's remote devices (`rpc0`, ...), in
    /// order; with the `host` target they are added to it as devices.
    pub rpc: Vec<String>,
    /// Compute every prompt position's logits (`--dump-logits`); otherwise
    /// only the last one's, as llama.cpp does (the prefill skips the output
    /// head for the other positions).
    pub all_prompt_logits: bool,
    /// Keep generating past end-of-generation tokens (llama.cpp's
    /// `--ignore-eos`): a fixed token count for benchmarks.
    pub ignore_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            ctx: 512,
            min_bucket: DEFAULT_MIN_BUCKET,
            precision: Precision::Fast,
            kv: DType::F32,
            threads: None,
            progress: None,
            target: None,
            compile: crate::CompileOptions::default(),
            rpc: Vec::new(),
            all_prompt_logits: false,
            ignore_eos: false,
        }
    }
}

/// What [`Generator::generate`] reports while it runs.
pub enum GenerateEvent<'a> {
    /// The prefill plan is compiled and loaded.
    Loaded {
        /// Blocks of the model.
        n_layer: usize,
        /// Vocabulary size.
        n_vocab: usize,
        /// Building, compiling and loading the prefill plan, ms.
        load_ms: f64,
        /// Distinct kernels the JIT compiled so far.
        kernels_compiled: usize,
    },
    /// More text: the prompt first, then each generated token's text as
    /// soon as it is whole UTF-8.
    Text(&'a str),
}

/// Why a generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The token count asked for was reached.
    MaxTokens,
    /// The model wrote an end-of-generation token (EOS, `<end_of_turn>`,
    /// ...: `Tokenizer::is_end_of_generation`); it is the last generated id.
    EndOfGeneration,
    /// The KV cache is full.
    ContextFull,
}

impl StopReason {
    /// Its name in `generate --json`.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::MaxTokens => "max_tokens",
            StopReason::EndOfGeneration => "end_of_generation",
            StopReason::ContextFull => "context_full",
        }
    }
}

/// One generation's result and timings.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// The generated ids (the first comes from the prefill).
    pub generated_ids: Vec<u32>,
    /// The generated text.
    pub text: String,
    /// The prefill's logits, `[prompt tokens, vocab]` row-major with
    /// [`GenerateOptions::all_prompt_logits`], else the last token's `[vocab]`.
    pub prompt_logits: Vec<f32>,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Seconds running the prefill.
    pub prefill_seconds: f64,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Seconds running decode steps (bucket plan loads excluded).
    pub decode_seconds: f64,
    /// Each decode bucket's plan load.
    pub decode_plans: Vec<BucketLoad>,
    /// Bytes of weights and cache the decode steps read, all steps together
    /// (`Runtime::memory_read_bytes` of each step's plan).
    pub decode_read_bytes: u64,
    /// Why it stopped.
    pub stop: StopReason,
}

impl Generation {
    /// Prompt tokens per second in the prefill.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_seconds.max(1e-9)
    }

    /// Generated tokens per second over the decode steps.
    pub fn decode_tokens_per_second(&self) -> f64 {
        self.decode_steps as f64 / self.decode_seconds.max(1e-9)
    }

    /// Bytes of weights and cache read per decode step (0 without steps).
    pub fn decode_read_bytes_per_token(&self) -> f64 {
        self.decode_read_bytes as f64 / self.decode_steps.max(1) as f64
    }

    /// The decode time over its memory floor: the bytes the steps read
    /// divided by `memcpy_gbps` (read + write GB/s, as
    /// `runtime::ceiling::memcpy_gbps` measures). 1.0 is memory speed.
    pub fn decode_floor_ratio(&self, memcpy_gbps: f64) -> f64 {
        let floor = self.decode_read_bytes as f64 / (memcpy_gbps * 1e9).max(1.0);
        self.decode_seconds / floor.max(1e-12)
    }
}

/// Greedy text generation with one llama-family GGUF (llama, mistral, qwen2).
///
/// ```no_run
/// use ggplan::jobs::GenerateEvent;
/// let mut generator = ggplan::Generator::open("SmolLM2-135M-Instruct.Q4_1.gguf", Default::default())?;
/// let generation = generator.generate("Once upon a time", 32, &mut |event| {
///     if let GenerateEvent::Text(text) = event {
///         print!("{text}");
///     }
/// })?;
/// println!("\n{:.1} tokens/s", generation.decode_tokens_per_second());
/// # Ok::<(), ggplan::Error>(())
/// ```
pub struct Generator {
    path: PathBuf,
    tokenizer: Tokenizer,
    weights: Weights,
    options: GenerateOptions,
    buckets: Vec<i64>,
    session: Session,
}

impl Generator {
    /// Opens `gguf`: its tokenizer, its weights (mapped, not read), a session
    /// of `options.threads`. Plans are compiled by [`Generator::generate`],
    /// whose prefill plan is shaped by the prompt.
    pub fn open(gguf: impl AsRef<Path>, options: GenerateOptions) -> Result<Generator> {
        let path = gguf.as_ref().to_path_buf();
        let tokenizer = open_tokenizer(&GgufFile::open(&path)?)?;
        let buckets = context_buckets(options.ctx, options.min_bucket)?;
        let weights = Weights::open(&path)?;
        let session = open_session(&options)?;
        Ok(Generator {
            path,
            tokenizer,
            weights,
            options,
            buckets,
            session,
        })
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Threads the plans run on.
    pub fn threads(&self) -> usize {
        self.session.threads()
    }

    /// The decode buckets (cache rows attended), smallest first.
    pub fn buckets(&self) -> &[i64] {
        &self.buckets
    }

    /// Generates up to `max_tokens` tokens after `prompt`, greedily, until
    /// the end-of-text token or a full context; `on` sees the load and the
    /// text as it is made.
    pub fn generate(
        &mut self,
        prompt: &str,
        max_tokens: usize,
        on: &mut dyn FnMut(GenerateEvent<'_>),
    ) -> Result<Generation> {
        let tokenizer = &self.tokenizer;
        let prompt_ids = tokenizer.encode(prompt)?;
        if prompt_ids.is_empty() {
            return Err(Error::Usage("the prompt has no tokens".to_string()));
        }
        let n_ctx = self.options.ctx;
        let n_prompt = prompt_ids.len() as i64;
        if n_prompt > n_ctx {
            return Err(Error::Usage(format!(
                "the prompt is {n_prompt} tokens, longer than the context of {n_ctx} (raise the context: `ctx`, `--ctx`)"
            )));
        }
        let cache = CacheConfig {
            n_ctx,
            kv_dtype: self.options.kv,
        };
        let load_start = Instant::now();
        let mut cfg = LlamaConfig::from_gguf(&GgufFile::open(&self.path)?, n_prompt)?;
        cfg.last_logits_only = !self.options.all_prompt_logits;
        let prefill_graph = llama::build_cached(&cfg, &cache)?;
        let mut prefill =
            self.session
                .load(&prefill_graph, &self.weights, self.options.progress.clone())?;
        on(GenerateEvent::Loaded {
            n_layer: cfg.n_layer,
            n_vocab: cfg.n_vocab as usize,
            load_ms: load_start.elapsed().as_secs_f64() * 1e3,
            kernels_compiled: self.session.kernels_compiled(),
        });
        tracing::info!(buckets = ?self.buckets, "decode buckets (cache rows attended)");

        let n_vocab = cfg.n_vocab as usize;
        let t = Instant::now();
        feed(
            &mut prefill,
            &prompt_ids,
            0,
            (n_ctx, n_ctx),
            cfg.local_window(),
        )?;
        prefill.run()?;
        let prompt_logits = prefill.output_f32(llama::LOGITS)?;
        let prefill_seconds = t.elapsed().as_secs_f64();
        // Its arenas are not needed again (the cache lives in the shared store).
        drop(prefill);
        // The last row: the only one unless every position's was asked for.
        let next = argmax(&prompt_logits[prompt_logits.len() - n_vocab..]);

        on(GenerateEvent::Text(prompt));
        let mut decode = DecodePlans::new(
            &self.session,
            &self.weights,
            &cfg,
            cache,
            self.buckets.clone(),
        );
        let window = cfg.local_window();
        let t = Instant::now();
        let run = continue_greedily(
            tokenizer,
            next,
            (n_prompt, n_ctx),
            (max_tokens, self.options.ignore_eos),
            on,
            &mut |id, n_past| {
                let (runtime, attend) = decode.for_step(n_past)?;
                feed(runtime, &[id], n_past, (n_ctx, attend), window)?;
                runtime.run()?;
                let logits = runtime.output_f32(llama::LOGITS)?;
                Ok((logits, runtime.memory_read_bytes()))
            },
        )?;
        // Decode speed counts the steps, not the compiling of bucket plans.
        let decode_seconds = (t.elapsed().as_secs_f64() - decode.load_seconds()).max(0.0);
        Ok(Generation {
            text: tokenizer.decode(&run.generated_ids)?,
            prompt_ids,
            generated_ids: run.generated_ids,
            prompt_logits,
            n_vocab,
            prefill_seconds,
            decode_steps: run.steps,
            decode_seconds,
            decode_plans: decode.loads().to_vec(),
            decode_read_bytes: run.read_bytes,
            stop: run.stop,
        })
    }
}

/// The session `options` ask for: their target (`host` with the RPC
/// servers added as devices), threads, precision and compile options.
pub(super) fn open_session(options: &GenerateOptions) -> Result<Session> {
    let target_name = options.target.as_deref().unwrap_or("cpu");
    let mut target = crate::target::resolve(target_name)?;
    if target_name == crate::target::HOST && !options.rpc.is_empty() {
        crate::target::add_remote_devices(&mut target, &options.rpc, &mut |n| {
            tracing::info!("{n}")
        })?;
    }
    Session::for_target(
        options.threads,
        options.precision,
        target,
        options.compile.clone(),
    )?
    .with_rpc(&options.rpc)
}

/// The tokenizer of the opened GGUF `file`, naming the file when it cannot.
pub(super) fn open_tokenizer(file: &GgufFile) -> Result<Tokenizer> {
    Tokenizer::from_gguf(file).map_err(|e| {
        let path = ir::files::TensorSource::path(file).display();
        Error::Usage(format!("{path}: reading the tokenizer: {e}"))
    })
}

/// Index of the first largest value of a logits row (the greedy token).
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Sets a cached graph's per-step inputs for `ids` at position `n_past`, the
/// graph attending over the first `attend` of `n_ctx` cache rows (and its
/// local layers over the last `window` positions, when it has them).
fn feed(
    rt: &mut Runtime,
    ids: &[u32],
    n_past: i64,
    (n_ctx, attend): (i64, i64),
    window: Option<i64>,
) -> Result<()> {
    let step = step_inputs(n_past, ids.len() as i64, n_ctx, attend)
        .map_err(|e| Error::Usage(format!("decode step at position {n_past}: {e}")))?;
    let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    rt.set_input_i32(llama::TOKENS, &ids)?;
    rt.set_input_i32(llama::POSITIONS, &step.pos)?;
    rt.set_input_i32(llama::KV_IDX, &step.kv_idx)?;
    rt.set_input_f32(llama::KQ_MASK, &step.kq_mask)?;
    if let Some(window) = window {
        let mask = llama::sliding_window_mask(n_past, ids.len() as i64, attend, window);
        rt.set_input_f32(llama::KQ_MASK_SWA, &mask)?;
    }
    Ok(())
}

//! Greedy generation with graphs imported from llama.cpp's captures
//! (`ggplan import`): a prefill graph of `n` tokens and a one-token decode
//! graph over the same KV cache, so any decoder llama.cpp builds generates
//! here, not only the architectures ggplan's builder knows.
//!
//! The prompt runs in chunks of `n` tokens through the prefill graph while
//! `n` or more remain, the rest one token at a time through the decode
//! graph; generated tokens then go through the decode graph. The inputs of
//! each run are llama.cpp's for that batch (`models::capture::BatchInputs`:
//! positions, cache rows, masks), token `p` in cache row `p`; Gemma 3's
//! local layers' masks hide keys out of the GGUF's window, and any other
//! architecture with a sliding window is refused.
//!
//! Invariants: both graphs declare the same state tensors (names, dtypes,
//! extents), so the two plans loaded through one [`Session`] share one KV
//! cache; the context is the cache rows both graphs attend over (their
//! masks' `n_kv`, set by the capture's `--ctx`): a sequence reaching past it
//! stops with [`super::StopReason::ContextFull`].

use super::generator::{
    GenerateEvent, GenerateOptions, Generation, argmax, open_session, open_tokenizer,
};
use super::greedy::continue_greedily;
use super::session::Session;
use crate::{Error, Result};
use ir::files::gguf::GgufFile;
use ir::{Graph, Role};
use models::Tokenizer;
use models::capture::BatchInputs;
use models::llama::{LlamaConfig, SlidingWindow};
use runtime::{Runtime, Weights};
use std::path::Path;
use std::time::Instant;

/// The output llama.cpp names its logits.
const LOGITS: &str = "result_output";

/// An imported graph and the inputs it needs per batch.
struct ImportedGraph {
    graph: Graph,
    inputs: BatchInputs,
}

impl ImportedGraph {
    fn read(path: &Path, window_of: &dyn Fn(usize) -> Option<usize>) -> Result<ImportedGraph> {
        let graph = crate::graph::read(path)?;
        let named = |e: String| Error::Usage(format!("{}: {e}", path.display()));
        let inputs = BatchInputs::of(&graph, window_of).map_err(named)?;
        match graph.find(LOGITS).map(|id| graph.tensor(id).role) {
            Some(Role::Output) => {}
            _ => {
                return Err(named(format!(
                    "no output '{LOGITS}' (llama.cpp's logits): is it an imported decoder?"
                )));
            }
        }
        Ok(ImportedGraph { graph, inputs })
    }

    /// The logits' row length.
    fn n_vocab(&self) -> usize {
        let id = self.graph.find(LOGITS).expect("checked by read");
        self.graph.tensor(id).layout.ne[0] as usize
    }

    /// Sets the inputs of the batch `ids` at `n_past` and runs; the logits
    /// rows it computed and the bytes it read.
    fn run(&self, rt: &mut Runtime, ids: &[u32], n_past: i64) -> Result<(Vec<f32>, u64)> {
        let values = (self.inputs.values(ids, n_past as usize))
            .map_err(|e| Error::Usage(format!("'{}': {e}", self.graph.name)))?;
        for (name, bytes) in values {
            rt.set_input_bytes(&name, &bytes)?;
        }
        rt.run()?;
        Ok((rt.output_f32(LOGITS)?, rt.memory_read_bytes()))
    }
}

/// The model's sliding window, when it has one: Gemma 3's (its layer
/// pattern is known); any other architecture with
/// `{arch}.attention.sliding_window` is refused, its local layers unknown.
fn sliding_window(file: &GgufFile, path: &Path, arch: &str) -> Result<Option<SlidingWindow>> {
    let key = format!("{arch}.attention.sliding_window");
    match file.get(&key) {
        None => Ok(None),
        Some(_) if arch == "gemma3" => Ok(LlamaConfig::from_gguf(file, 1)?
            .gemma3
            .and_then(|g| g.sliding_window)),
        Some(window) => Err(Error::Usage(format!(
            "{}: {key} = {window:?}: which of its layers attend over the window is known for gemma3 only; generate from the GGUF (without --prefill-graph) if ggplan builds it",
            path.display()
        ))),
    }
}

/// Generates with imported graphs (see the module doc).
pub struct ImportedGenerator {
    tokenizer: Tokenizer,
    weights: Weights,
    options: GenerateOptions,
    session: Session,
    prefill: ImportedGraph,
    decode: ImportedGraph,
    /// `{architecture}.block_count` of the GGUF (0 when absent), for the load message.
    n_layer: usize,
}

impl ImportedGenerator {
    /// Opens `gguf` (tokenizer and weights) and the imported graphs; fails
    /// naming the file when a graph's inputs are not llama.cpp's (see
    /// `BatchInputs`), the decode graph is not one token, or the graphs'
    /// caches differ. `options.ctx` and `min_bucket` are not used: the
    /// graphs fix the context.
    pub fn open(
        gguf: impl AsRef<Path>,
        (prefill, decode): (&Path, &Path),
        options: GenerateOptions,
    ) -> Result<ImportedGenerator> {
        let path = gguf.as_ref();
        // One open for the tokenizer and the metadata read here.
        let file = GgufFile::open(path)?;
        let tokenizer = open_tokenizer(&file)?;
        let arch = file.get_str("general.architecture").unwrap_or_default();
        let n_layer = file.get_u64(&format!("{arch}.block_count")).unwrap_or(0) as usize;
        let window = sliding_window(&file, path, arch)?;
        let window_of =
            |layer: usize| window.and_then(|w| w.is_local(layer).then_some(w.window as usize));
        let prefill = ImportedGraph::read(prefill, &window_of)?;
        let decode_path = decode;
        let decode = ImportedGraph::read(decode, &window_of)?;
        if decode.inputs.n_tokens() != 1 {
            return Err(Error::Usage(format!(
                "{}: the decode graph decodes {} tokens per run, not 1 (capture it with --tokens 1)",
                decode_path.display(),
                decode.inputs.n_tokens()
            )));
        }
        let states = |g: &Graph| -> Vec<(String, ir::Layout)> {
            g.tensors()
                .iter()
                .filter(|t| t.role == Role::State)
                .map(|t| (t.name.clone(), t.layout))
                .collect()
        };
        if states(&prefill.graph) != states(&decode.graph) {
            return Err(Error::Usage(format!(
                "{}: its KV cache (state tensors) differs from the prefill graph's: capture both from the same model with the same --ctx and cache types",
                decode_path.display()
            )));
        }
        let weights = Weights::open(path)?;
        let session = open_session(&options)?;
        Ok(ImportedGenerator {
            n_layer,
            tokenizer,
            weights,
            options,
            session,
            prefill,
            decode,
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

    /// Cache rows both graphs attend over: the longest sequence.
    pub fn context(&self) -> usize {
        self.prefill.inputs.n_kv().min(self.decode.inputs.n_kv())
    }

    /// Generates up to `max_tokens` tokens after `prompt`, greedily, as
    /// [`super::Generator::generate`] does.
    pub fn generate(
        &mut self,
        prompt: &str,
        max_tokens: usize,
        on: &mut dyn FnMut(GenerateEvent<'_>),
    ) -> Result<Generation> {
        let tokenizer = &self.tokenizer;
        let prompt_ids = tokenizer.encode(prompt)?;
        let n_ctx = self.context() as i64;
        let n_prompt = prompt_ids.len() as i64;
        if prompt_ids.is_empty() || n_prompt > n_ctx {
            return Err(Error::Usage(format!(
                "the prompt is {n_prompt} tokens; the imported graphs hold 1 to {n_ctx} (capture them with a larger --ctx)"
            )));
        }
        let chunk = self.prefill.inputs.n_tokens();
        let all_rows = self.options.all_prompt_logits;
        if all_rows && self.prefill.inputs.last_row_only() {
            return Err(Error::Usage(
                "every prompt position's logits were asked for, but the prefill graph computes the last row's only".into(),
            ));
        }
        let load_start = Instant::now();
        let progress = self.options.progress.clone();
        let mut prefill = self
            .session
            .load(&self.prefill.graph, &self.weights, progress)?;
        let mut decode = self.session.load(&self.decode.graph, &self.weights, None)?;
        let n_vocab = self.prefill.n_vocab();
        on(GenerateEvent::Loaded {
            n_layer: self.n_layer,
            n_vocab,
            load_ms: load_start.elapsed().as_secs_f64() * 1e3,
            kernels_compiled: self.session.kernels_compiled(),
        });

        let t = Instant::now();
        let mut prompt_logits = Vec::new();
        let mut n_past = 0usize;
        while n_past < prompt_ids.len() {
            let (logits, step) = if prompt_ids.len() - n_past >= chunk {
                let ids = &prompt_ids[n_past..n_past + chunk];
                (self.prefill.run(&mut prefill, ids, n_past as i64)?.0, chunk)
            } else {
                let ids = &prompt_ids[n_past..n_past + 1];
                (self.decode.run(&mut decode, ids, n_past as i64)?.0, 1)
            };
            if all_rows {
                prompt_logits.extend_from_slice(&logits);
            } else {
                prompt_logits = logits[logits.len() - n_vocab..].to_vec();
            }
            n_past += step;
        }
        let prefill_seconds = t.elapsed().as_secs_f64();
        drop(prefill);
        let next = argmax(&prompt_logits[prompt_logits.len() - n_vocab..]);

        on(GenerateEvent::Text(prompt));
        let decode_graph = &self.decode;
        let t = Instant::now();
        let run = continue_greedily(
            tokenizer,
            next,
            (n_prompt, n_ctx),
            (max_tokens, self.options.ignore_eos),
            on,
            &mut |id, n_past| decode_graph.run(&mut decode, &[id], n_past),
        )?;
        Ok(Generation {
            text: tokenizer.decode(&run.generated_ids)?,
            prompt_ids,
            generated_ids: run.generated_ids,
            prompt_logits,
            n_vocab,
            prefill_seconds,
            decode_steps: run.steps,
            decode_seconds: t.elapsed().as_secs_f64(),
            decode_plans: Vec::new(),
            decode_read_bytes: run.read_bytes,
            stop: run.stop,
        })
    }
}

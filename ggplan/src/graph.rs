//! Graphs: from graph text, or built from a model's files at a fixed shape.
//!
//! A graph is the input of [`crate::compile`]: every tensor with its op,
//! dtype and extents. Plans are made for fixed shapes, so a model's graph is
//! built for a number of tokens (and, for a decoder that keeps a KV cache, a
//! context length) given by [`ModelShape`].

use crate::Result;
use ir::DType;
use ir::files::gguf::GgufFile;
use models::Family;
use models::bert::{self, BertConfig};
use models::llama::{self, CacheConfig, LlamaConfig};
use std::path::Path;

pub use ir::Graph;

/// The fixed shape a model's graph is built for.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// Tokens per evaluation (prefill or an encoder's sequence); a decode
    /// step uses one.
    pub tokens: i64,
    /// Decoders: the KV cache's rows. `None` builds a prefill graph with no
    /// cache (unless `decode` or `attend` ask for one, with 512 rows).
    pub ctx: Option<i64>,
    /// Decoders: one token per evaluation, attending over the cache.
    pub decode: bool,
    /// Decoders: attend over only the first `ROWS` cache rows (a context
    /// bucket); `None` attends over the whole cache.
    pub attend: Option<i64>,
    /// Decoders: keep the KV cache in f16 instead of f32.
    pub kv_f16: bool,
    /// Decoders: the last token's logits only, as llama.cpp computes a
    /// prefill (`LlamaConfig::last_logits_only`).
    pub last_logits: bool,
}

impl ModelShape {
    /// An encoder or prefill graph over `tokens` tokens with no KV cache.
    pub fn tokens(tokens: i64) -> ModelShape {
        ModelShape {
            tokens,
            ctx: None,
            decode: false,
            attend: None,
            kv_f16: false,
            last_logits: false,
        }
    }

    /// A decoder step: one token attending over a cache of `ctx` rows.
    pub fn decode(ctx: i64) -> ModelShape {
        ModelShape {
            tokens: 1,
            ctx: Some(ctx),
            decode: true,
            attend: None,
            kv_f16: false,
            last_logits: false,
        }
    }

    fn wants_cache(&self) -> bool {
        self.ctx.is_some() || self.decode || self.attend.is_some()
    }

    /// Anything only a decoder has (a cache, last-token logits).
    fn decoder_only(&self) -> bool {
        self.wants_cache() || self.last_logits
    }
}

/// Reads a graph text file (RON); the graph is verified.
///
/// ```
/// let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
/// assert_eq!(graph.name, "mlp");
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn read(path: impl AsRef<Path>) -> Result<Graph> {
    Ok(ir::text::read_graph(path.as_ref())?)
}

/// Parses graph text; `name` is what errors call the text (a file name).
///
/// ```
/// let text = r#"(format_version: 1, name: "tiny", tensors: [
///     (name: "x", role: Input, dtype: F32, ne: [8, 1, 1, 1]),
///     (name: "y", role: Output, op: Silu, src: ["x"], dtype: F32, ne: [8, 1, 1, 1]),
/// ])"#;
/// let graph = ggplan::graph::parse(text, "tiny.ron")?;
/// assert_eq!(graph.len(), 2);
/// assert_eq!(ggplan::graph::parse(&ggplan::graph::to_text(&graph), "again.ron")?, graph);
/// let wrong = text.replace("[8, 1, 1, 1]),\n])", "[9, 1, 1, 1]),\n])");
/// let refused = ggplan::graph::parse(&wrong, "wrong.ron").unwrap_err().to_string();
/// assert!(refused.contains("wrong.ron"), "{refused}");
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn parse(text: &str, name: &str) -> Result<Graph> {
    Ok(ir::text::parse(text, name)?)
}

/// The graph text of `graph`, canonical (what [`parse`] reads back).
pub fn to_text(graph: &Graph) -> String {
    ir::text::to_ron(graph)
}

/// Builds the graph of a GGUF model: a llama-family decoder (llama, mistral,
/// qwen2, qwen3, qwen3moe, gemma3) or a BERT encoder, at `shape`. Only the
/// file's metadata is read.
///
/// ```no_run
/// use ggplan::ModelShape;
/// let prefill = ggplan::graph::from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", &ModelShape::tokens(128))?;
/// let decode = ggplan::graph::from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", &ModelShape::decode(512))?;
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn from_gguf(path: impl AsRef<Path>, shape: &ModelShape) -> Result<Graph> {
    let file = GgufFile::open(path.as_ref())?;
    match Family::of(&file)? {
        Family::Llama => llama_graph(&file, shape),
        Family::Bert => {
            refuse_cache(shape)?;
            Ok(bert::build_encoder(&BertConfig::from_gguf(
                &file,
                shape.tokens,
            )?)?)
        }
    }
}

/// Builds the graph of a Hugging Face BERT folder (config.json,
/// model.safetensors) over `tokens` tokens.
///
/// ```no_run
/// let encoder = ggplan::graph::from_hf("all-MiniLM-L6-v2", 16)?;
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn from_hf(dir: impl AsRef<Path>, tokens: i64) -> Result<Graph> {
    Ok(bert::build_encoder(&BertConfig::from_hf_dir(
        dir.as_ref(),
        tokens,
    )?)?)
}

/// The prefill graph, or with a cache the generation graph, of a llama-family file.
fn llama_graph(file: &GgufFile, shape: &ModelShape) -> Result<Graph> {
    let tokens = if shape.decode { 1 } else { shape.tokens };
    let mut cfg = LlamaConfig::from_gguf(file, tokens)?;
    cfg.last_logits_only = shape.last_logits;
    if !shape.wants_cache() {
        return Ok(llama::build_prefill(&cfg)?);
    }
    let cache = CacheConfig {
        n_ctx: shape.ctx.unwrap_or(512),
        kv_dtype: if shape.kv_f16 { DType::F16 } else { DType::F32 },
    };
    Ok(llama::build_cached_attending(
        &cfg,
        &cache,
        shape.attend.unwrap_or(cache.n_ctx),
    )?)
}

/// A KV cache belongs to decoders.
fn refuse_cache(shape: &ModelShape) -> Result<()> {
    if shape.decoder_only() {
        return Err(crate::Error::Usage(
            "a context, decode or attend window, or last-token logits, apply to llama-family decoders, not BERT encoders"
                .to_string(),
        ));
    }
    Ok(())
}

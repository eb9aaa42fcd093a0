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
        }
    }

    fn wants_cache(&self) -> bool {
        self.ctx.is_some() || self.decode || self.attend.is_some()
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
pub fn parse(text: &str, name: &str) -> Result<Graph> {
    Ok(ir::text::parse(text, name)?)
}

/// The graph text of `graph`, canonical (what [`parse`] reads back).
pub fn to_text(graph: &Graph) -> String {
    ir::text::to_ron(graph)
}

/// Builds the graph of a GGUF model: a llama-family decoder (llama, mistral,
/// qwen2) or a BERT encoder, at `shape`.
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
pub fn from_hf(dir: impl AsRef<Path>, tokens: i64) -> Result<Graph> {
    Ok(bert::build_encoder(&BertConfig::from_hf_dir(
        dir.as_ref(),
        tokens,
    )?)?)
}

/// The prefill graph, or with a cache the generation graph, of a llama-family file.
fn llama_graph(file: &GgufFile, shape: &ModelShape) -> Result<Graph> {
    let tokens = if shape.decode { 1 } else { shape.tokens };
    let cfg = LlamaConfig::from_gguf(file, tokens)?;
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
    if shape.wants_cache() {
        return Err(crate::Error::Usage(
            "a context, decode or attend window applies to llama-family decoders, not BERT encoders"
                .to_string(),
        ));
    }
    Ok(())
}

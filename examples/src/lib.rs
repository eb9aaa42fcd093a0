//! The example graphs of `examples/graphs/`, and how to rebuild them.
//!
//! Invariant: `examples/graphs/{name}.ron` is byte for byte `ir::text::to_ron`
//! of the graph the function `{name}` here builds, for every entry of
//! [`GRAPHS`]; `cargo run -p ggplan-examples --bin {name}` rewrites it, and the
//! workspace test `example_graphs` fails when a file drifts from its builder.

use ir::{DType, Graph, GraphBuilder, RopeMode, RopeParams};
use models::bert::{BertConfig, BertNames, Pooling, build_encoder};
use models::llama::{CacheConfig, LlamaConfig, LlamaNames, build_cached, build_prefill};
use std::path::PathBuf;

/// A function building one example graph.
pub type BuildFn = fn() -> Result<Graph, ir::Error>;

/// Every example graph: its name (file stem and binary name) and builder.
pub const GRAPHS: [(&str, BuildFn); 4] = [
    ("mlp", mlp),
    ("llama2l", llama2l),
    ("llama2l_kv", llama2l_kv),
    ("bert2l", bert2l),
];

/// Where the example graph `name` is stored: `examples/graphs/{name}.ron`.
pub fn graph_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("graphs")
        .join(format!("{name}.ron"))
}

/// Builds an example graph with `build` and writes it to [`graph_path`]`(name)`.
pub fn write_example(name: &str, build: BuildFn) -> Result<PathBuf, ir::Error> {
    let path = graph_path(name);
    ir::text::write_graph(&path, &build()?)?;
    Ok(path)
}

/// The whole program under `src/bin/NAME.rs`: writes the graph, says where,
/// and exits 1 with the error if building or writing fails.
pub fn run_example(name: &str, build: BuildFn) -> std::process::ExitCode {
    match write_example(name, build) {
        Ok(path) => {
            println!("wrote {}", path.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A two-layer MLP classifying 16 rows of 64 features into 10 classes:
/// `probs = soft_max(w2 · relu(w1 · x + b1) + b2)`.
pub fn mlp() -> Result<Graph, ir::Error> {
    let mut b = GraphBuilder::new("mlp");
    let x = b.input("x", DType::F32, [64, 16, 1, 1])?;
    let w1 = b.weight("w1", DType::F32, [64, 128, 1, 1])?;
    let b1 = b.weight("b1", DType::F32, [128, 1, 1, 1])?;
    let w2 = b.weight("w2", DType::F32, [128, 10, 1, 1])?;
    let b2 = b.weight("b2", DType::F32, [10, 1, 1, 1])?;
    let h = b.mul_mat("fc1.mm", w1, x)?;
    let h = b.add("fc1", h, b1)?;
    let h = b.unary("fc1.relu", ir::Op::Relu, h)?;
    let y = b.mul_mat("fc2.mm", w2, h)?;
    let y = b.add("fc2", y, b2)?;
    let probs = b.soft_max("probs", y, None, 1.0, 0.0)?;
    b.mark_output(probs)?;
    b.finish()
}

/// The configuration of ggml's reference 2-layer llama
/// (`shared/references/ggml/llama2l-graph.json`).
pub fn llama2l_config() -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 512,
        n_head: 8,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 1536,
        n_vocab: 8000,
        n_tokens: 128,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 64, 10000.0),
        weight_dtype: DType::F32,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Example,
    }
}

/// The 2-layer llama prefill of [`llama2l_config`], node for node ggml's.
pub fn llama2l() -> Result<Graph, ir::Error> {
    let mut g = build_prefill(&llama2l_config())?;
    g.name = "llama2l".into();
    Ok(g)
}

/// The prefill of [`llama2l_config`]'s 128 tokens over a KV cache of 128 rows
/// (F32): the same weights and arithmetic as [`llama2l`], but positions, cache
/// rows and the causal mask are inputs and attention reads the cache through
/// `set_rows`. This is the graph form that `ggplan compile --pipeline N` cuts
/// into micro-batches (each writes its rows of the cache, in order).
pub fn llama2l_kv() -> Result<Graph, ir::Error> {
    let cache = CacheConfig {
        n_ctx: 128,
        kv_dtype: DType::F32,
    };
    let mut g = build_cached(&llama2l_config(), &cache)?;
    g.name = "llama2l_kv".into();
    Ok(g)
}

/// The configuration of the 2-layer BERT example (MiniLM-like, smaller).
pub fn bert2l_config() -> BertConfig {
    BertConfig {
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_ff: 1024,
        n_vocab: 1000,
        n_ctx_train: 512,
        n_types: 2,
        n_tokens: 48,
        eps: 1e-12,
        weight_dtype: DType::F32,
        embd_dtype: DType::F32,
        pooling: Pooling::Mean,
        l2_normalize: true,
        names: BertNames::HuggingFace,
    }
}

/// The 2-layer BERT encoder of [`bert2l_config`] with mean pooling and L2
/// normalisation.
pub fn bert2l() -> Result<Graph, ir::Error> {
    let mut g = build_encoder(&bert2l_config())?;
    g.name = "bert2l".into();
    Ok(g)
}

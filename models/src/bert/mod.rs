//! BERT encoders at a fixed shape, producing a sentence embedding as
//! sentence-transformers does (all-MiniLM-L6-v2): mean pooling over the tokens
//! (or the `[CLS]` token's state), then L2 normalisation.
//!
//! Two front-ends fill the one [`BertConfig`] the builder reads:
//! [`BertConfig::from_hf_dir`] (a Hugging Face folder, `hf_config.rs`) and
//! [`BertConfig::from_gguf`] (a GGUF file as llama.cpp's converter writes it,
//! `gguf_config.rs`). They differ only in where the hyperparameters come from
//! and in the weight names ([`BertNames`]); the graph is the same.
//!
//! Invariants of [`build_encoder`]'s graph:
//! - leafs, in this order: `tokens` (I32 input `[n_tokens]`), `pos` (I32
//!   constant `0..n_tokens`), `token_types` (I32 constant, all 0), then the
//!   weights named by `cfg.names` ([`names`]): the three embedding tables,
//!   the embedding layer norm, and per layer every [`LayerPart`]'s weight and
//!   bias; the token table takes `embd_dtype`, layer matrices `weight_dtype`,
//!   everything else is F32;
//! - nodes: `inp_tok`, `inp_type`, `inp_tok_type`, `inp_pos`, `inp_embd`,
//!   `inp_norm`; per layer `l{i}.` + `q`, `k`, `v` (each a `.mm` node plus the
//!   bias add), the attention nodes (see `attention`, no mask, scale
//!   1/sqrt(head_dim)), `attn_out`, `attn_res`, `attn_norm`, `ffn_up`,
//!   `ffn_gelu` (exact erf gelu), `ffn_down`, `ffn_res`, `l_out` (layer norms
//!   are `{name}.norm`, `{name}.mul` and the bias add `{name}`); then the
//!   pooling: `pool.t`, `pool.t_cont`, `pool.mean` (`[1, n_embd]`) for
//!   [`Pooling::Mean`], or `pool.cls` (a view of token 0's state) for
//!   [`Pooling::Cls`]; when normalising, `pool.flat` (the pooled vector),
//!   `embd.sqr`, `embd.sum_sq`, `embd.l2`; the last node, `embedding`
//!   `[n_embd, 1]`, is the only output;
//! - all tokens attend to all tokens (one sequence, no padding), all token
//!   types are 0; the pooler weights are not used.

mod gguf_config;
mod hf_config;
pub mod names;
#[cfg(test)]
mod tests;

pub use names::{BertNames, LayerPart};

use crate::attention::{attend, heads_major, split_heads, transposed_values};
use ir::{ConstInit, DType, Error, Graph, GraphBuilder, TensorId};

/// Name of the token-id input.
pub const TOKENS: &str = "tokens";
/// Name of the position-id constant.
pub const POSITIONS: &str = "pos";
/// Name of the token-type-id constant.
pub const TOKEN_TYPES: &str = "token_types";
/// Name of the sentence-embedding output.
pub const EMBEDDING: &str = "embedding";

/// Hyperparameters and shapes of a BERT encoder.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Number of encoder layers.
    pub n_layer: usize,
    /// Hidden width.
    pub n_embd: i64,
    /// Attention heads; divides `n_embd`.
    pub n_head: i64,
    /// Hidden width of the FFN.
    pub n_ff: i64,
    /// Vocabulary size.
    pub n_vocab: i64,
    /// Rows of the position embedding table (`max_position_embeddings`).
    pub n_ctx_train: i64,
    /// Rows of the token-type table (`type_vocab_size`).
    pub n_types: i64,
    /// Tokens in the sequence; at most `n_ctx_train`.
    pub n_tokens: i64,
    /// Epsilon of every layer norm (`layer_norm_eps`).
    pub eps: f32,
    /// Dtype of the dense matrices of the layers.
    pub weight_dtype: DType,
    /// Dtype of the token embedding table (F16 in llama.cpp's F16
    /// conversions, which keep the position and token-type tables F32).
    pub embd_dtype: DType,
    /// How the token states become one vector.
    pub pooling: Pooling,
    /// Divide the pooled embedding by its L2 norm (sentence-transformers'
    /// `Normalize` module).
    pub l2_normalize: bool,
    /// How weights are named (the file they bind to).
    pub names: BertNames,
}

/// How the token states become the sentence vector (sentence-transformers'
/// `pooling_mode_*`, llama.cpp's `{arch}.pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The mean over all tokens (`pooling_mode_mean_tokens`; GGUF 1).
    Mean,
    /// The state of the first token, `[CLS]` (`pooling_mode_cls_token`; GGUF 2).
    Cls,
}

impl BertConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> i64 {
        self.n_embd / self.n_head
    }
}

/// A weight and its bias.
#[derive(Clone, Copy)]
struct Affine {
    weight: TensorId,
    bias: TensorId,
}

/// Builds the encoder graph of `cfg` (see the module doc for its tensors).
pub fn build_encoder(cfg: &BertConfig) -> Result<Graph, Error> {
    if cfg.n_tokens > cfg.n_ctx_train {
        return Err(Error::Leaf {
            name: POSITIONS.into(),
            reason: format!(
                "{} tokens need more positions than the {} rows of '{}'",
                cfg.n_tokens,
                cfg.n_ctx_train,
                cfg.names.position_embeddings()
            ),
        });
    }
    let mut b = GraphBuilder::new("bert_encoder");
    let (e, t) = (cfg.n_embd, cfg.n_tokens);
    let tokens = b.input(TOKENS, DType::I32, [t, 1, 1, 1])?;
    let arange = ConstInit::Arange {
        start: 0.0,
        step: 1.0,
    };
    let pos = b.constant(POSITIONS, DType::I32, [t, 1, 1, 1], arange)?;
    let types = b.constant(TOKEN_TYPES, DType::I32, [t, 1, 1, 1], ConstInit::Fill(0.0))?;

    let names = cfg.names;
    let word = b.weight(
        names.word_embeddings(),
        cfg.embd_dtype,
        [e, cfg.n_vocab, 1, 1],
    )?;
    let pos_table = b.weight(
        names.position_embeddings(),
        DType::F32,
        [e, cfg.n_ctx_train, 1, 1],
    )?;
    let type_table = b.weight(
        names.token_type_embeddings(),
        DType::F32,
        [e, cfg.n_types, 1, 1],
    )?;
    let embd_norm = Affine {
        weight: b.weight(names.embeddings_norm(false), DType::F32, [e, 1, 1, 1])?,
        bias: b.weight(names.embeddings_norm(true), DType::F32, [e, 1, 1, 1])?,
    };
    let layers = (0..cfg.n_layer)
        .map(|il| declare_layer_weights(&mut b, cfg, il))
        .collect::<Result<Vec<_>, _>>()?;

    let tok = b.get_rows("inp_tok", word, tokens)?;
    let typ = b.get_rows("inp_type", type_table, types)?;
    let x = b.add("inp_tok_type", tok, typ)?;
    let p = b.get_rows("inp_pos", pos_table, pos)?;
    let x = b.add("inp_embd", x, p)?;
    let mut x = layer_norm(&mut b, "inp_norm", x, embd_norm, cfg.eps)?;
    for (il, w) in layers.iter().enumerate() {
        x = build_layer(&mut b, cfg, il, w, x)?;
    }
    let out = pool(&mut b, x, cfg.pooling, cfg.l2_normalize)?;
    b.mark_output(out)?;
    b.finish()
}

fn declare_layer_weights(
    b: &mut GraphBuilder,
    cfg: &BertConfig,
    il: usize,
) -> Result<[Affine; 8], Error> {
    let (e, ff) = (cfg.n_embd, cfg.n_ff);
    let mut out = [Affine {
        weight: TensorId(0),
        bias: TensorId(0),
    }; LayerPart::ALL.len()];
    for (slot, part) in out.iter_mut().zip(LayerPart::ALL) {
        let (dtype, n_in, n_out) = match part {
            LayerPart::AttnNorm | LayerPart::OutputNorm => (DType::F32, e, 1),
            LayerPart::Query | LayerPart::Key | LayerPart::Value | LayerPart::AttnOutput => {
                (cfg.weight_dtype, e, e)
            }
            LayerPart::Intermediate => (cfg.weight_dtype, e, ff),
            LayerPart::Output => (cfg.weight_dtype, ff, e),
        };
        let n_bias = if part.is_norm() { n_in } else { n_out };
        *slot = Affine {
            weight: b.weight(cfg.names.layer_weight(il, part), dtype, [n_in, n_out, 1, 1])?,
            bias: b.weight(
                cfg.names.layer_bias(il, part),
                DType::F32,
                [n_bias, 1, 1, 1],
            )?,
        };
    }
    Ok(out)
}

/// One post-norm encoder layer over `x [n_embd, n_tokens]`.
fn build_layer(
    b: &mut GraphBuilder,
    cfg: &BertConfig,
    il: usize,
    w: &[Affine; 8],
    x: TensorId,
) -> Result<TensorId, Error> {
    let p = format!("l{il}");
    let part = |part: LayerPart| w[part as usize];
    let (hd, nh) = (cfg.head_dim(), cfg.n_head);

    let q = linear(b, &format!("{p}.q"), x, part(LayerPart::Query))?;
    let q = split_heads(b, format!("{p}.q3"), q, hd, nh)?;
    let q = heads_major(b, format!("{p}.q_perm"), q)?;
    let k = linear(b, &format!("{p}.k"), x, part(LayerPart::Key))?;
    let k = split_heads(b, format!("{p}.k3"), k, hd, nh)?;
    let k = heads_major(b, format!("{p}.k_perm"), k)?;
    let v = linear(b, &format!("{p}.v"), x, part(LayerPart::Value))?;
    let v_t = transposed_values(b, &p, v, hd, nh)?;
    let attn = attend(b, &p, k, q, v_t, None, 1.0 / (hd as f32).sqrt())?;
    let attn = linear(
        b,
        &format!("{p}.attn_out"),
        attn,
        part(LayerPart::AttnOutput),
    )?;
    let x = b.add(format!("{p}.attn_res"), attn, x)?;
    let x = layer_norm(
        b,
        &format!("{p}.attn_norm"),
        x,
        part(LayerPart::AttnNorm),
        cfg.eps,
    )?;

    let up = linear(b, &format!("{p}.ffn_up"), x, part(LayerPart::Intermediate))?;
    let up = b.gelu_erf(format!("{p}.ffn_gelu"), up)?;
    let down = linear(b, &format!("{p}.ffn_down"), up, part(LayerPart::Output))?;
    let x = b.add(format!("{p}.ffn_res"), down, x)?;
    layer_norm(
        b,
        &format!("{p}.l_out"),
        x,
        part(LayerPart::OutputNorm),
        cfg.eps,
    )
}

/// The pooled vector of `x [n_embd, n_tokens]`, optionally L2-normalised:
/// the output `embedding [n_embd, 1]`.
fn pool(
    b: &mut GraphBuilder,
    x: TensorId,
    pooling: Pooling,
    l2_normalize: bool,
) -> Result<TensorId, Error> {
    let n_embd = b.tensor(x).ne()[0];
    let pooled = if l2_normalize { "pool.flat" } else { EMBEDDING };
    let v = match pooling {
        Pooling::Mean => {
            let xt = b.transpose("pool.t", x)?;
            let xt = b.cont("pool.t_cont", xt)?;
            let mean = b.mean("pool.mean", xt)?;
            b.reshape(pooled, mean, [n_embd, 1, 1, 1])?
        }
        Pooling::Cls => {
            // Token 0's state: the first column of the packed `x`.
            let column = b.tensor(x).layout.nb[1];
            let first = b.view(
                "pool.cls",
                x,
                [n_embd, 1, 1, 1],
                [column, column, column],
                0,
            )?;
            b.cont(pooled, first)?
        }
    };
    if !l2_normalize {
        return Ok(v);
    }
    let sq = b.unary("embd.sqr", ir::Op::Sqr, v)?;
    let sum = b.sum_rows("embd.sum_sq", sq)?;
    let l2 = b.unary("embd.l2", ir::Op::Sqrt, sum)?;
    b.div(EMBEDDING, v, l2)
}

/// `x @ weight + bias` as nodes `{name}.mm` and `{name}`.
fn linear(b: &mut GraphBuilder, name: &str, x: TensorId, w: Affine) -> Result<TensorId, Error> {
    let y = b.mul_mat(format!("{name}.mm"), w.weight, x)?;
    b.add(name, y, w.bias)
}

/// Layer norm with an affine transform, as nodes `{name}.norm`, `{name}.mul`
/// and `{name}`.
fn layer_norm(
    b: &mut GraphBuilder,
    name: &str,
    x: TensorId,
    w: Affine,
    eps: f32,
) -> Result<TensorId, Error> {
    let y = b.norm(format!("{name}.norm"), x, eps)?;
    let y = b.mul(format!("{name}.mul"), y, w.weight)?;
    b.add(name, y, w.bias)
}

//! Llama-family decoders (llama, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3) at a
//! fixed shape.
//!
//! Two kinds of graph:
//! - [`build_prefill`]: the prefill of `n_tokens` tokens from position 0, as
//!   llama.cpp's `llm_build_llama` builds it without a KV cache (keys and values
//!   of the batch attend to each other directly);
//! - [`build_cached`] (in `cached.rs`): `n_tokens` tokens at arbitrary positions
//!   over a KV cache held in state tensors, for generation, attending over the
//!   whole cache or ([`build_cached_attending`]) over its first `attend` rows;
//!   [`step_inputs`] computes its per-step inputs.
//!
//! Both add the q/k/v biases (`{p}.q_bias`, `{p}.k_bias`, `{p}.v_bias`, after
//! each projection) when `qkv_bias` is set (qwen2), an RMS norm of every
//! query and key head before rope (`{p}.q_norm`, `{p}.k_norm`, each with its
//! `.rms`) when `qk_norm` is [`QkNorm::PerHead`] (qwen3), or of the whole
//! projections before they are split into heads ([`QkNorm::Whole`], OLMoE),
//! and rope's frequency factors as
//! its third source when `rope_factors` is set (Llama 3), and Gemma 3's
//! differences when `gemma3` is set (`gemma3.rs`: embedding scale, query
//! scale, post-norms, GEGLU, sliding-window layers with their own mask
//! `kq_mask_swa` and rope base), and a mixture-of-experts FFN in place of the
//! dense one when `moe` is set (qwen3moe: `moe.rs`, the nodes `ffn_moe_*`
//! between `ffn_norm` and `l_out`); without them the nodes below are
//! unchanged.
//!
//! Invariants of [`build_prefill`]'s graph:
//! - leafs, in this order: `tokens` (I32 input `[n_tokens]`), `pos` (I32
//!   constant `0..n_tokens`), `kq_mask` (F32 causal mask `[n_tokens, n_tokens]`),
//!   the token embedding, per layer the [`BlockWeight`]s in declaration order,
//!   the output norm and (unless tied) the output projection; weight names come
//!   from [`LlamaNames`];
//! - nodes, in ggml's order: `inp_embd`; per layer `l{i}.` + `attn_norm.rms`,
//!   `attn_norm`, `v`, `v3`, `v_perm`, `v_t`, `k`, `k3`, `k_rope`, `k_perm`,
//!   `q`, `q3`, `q_rope`, `q_perm`, `kq`, `kq_soft_max`, `kqv`, `kqv_perm`,
//!   `kqv_merged`, `attn_out`, `ffn_inp`, `ffn_norm.rms`,
//!   `ffn_norm`, `ffn_gate`, `ffn_silu`, `ffn_up`, `ffn_gate_par`, `ffn_out`,
//!   `l_out`; then `result_norm.rms`, `result_norm` and `result_output`, the
//!   logits `[n_vocab, n_tokens]`, the only output;
//! - this is ggml's node list exactly (tests/example_graphs.rs compares it with
//!   the graph ggml itself builds).

mod cached;
#[cfg(test)]
mod cached_tests;
mod gemma3;
mod gguf_config;
mod moe;
#[cfg(test)]
mod moe_tests;
mod names;
mod step;
#[cfg(test)]
mod tests;

pub use cached::{CacheConfig, build_cached, build_cached_attending, cache_k_name, cache_v_name};
pub use gemma3::{Gemma3, SlidingWindow, sliding_window_mask};
pub use moe::Moe;

/// Where a model RMS-norms its queries and keys before rope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// Not at all (llama, mistral, qwen2, Mixtral).
    None,
    /// Each head on its own, weights of `head_dim` (qwen3, qwen3moe, gemma3).
    PerHead,
    /// Each token's whole projection, weights of `n_head · head_dim` (queries)
    /// and `n_head_kv · head_dim` (keys), before it is split into heads (OLMoE).
    Whole,
}
pub use names::{BlockWeight, LlamaNames, MoeWeight};
pub use step::{StepError, StepInputs, step_inputs};

use crate::attention::{attend, heads_major, split_heads, transposed_values};
use ir::{ConstInit, DType, Error, GluKind, Graph, GraphBuilder, Op, RopeParams, TensorId};

/// Name of the token-id input.
pub const TOKENS: &str = "tokens";
/// Name of the rope positions (a constant in the prefill graph, an input in
/// the cached one).
pub const POSITIONS: &str = "pos";
/// Name of the attention mask (a constant in the prefill graph, an input in
/// the cached one).
pub const KQ_MASK: &str = "kq_mask";
/// Name of the local (sliding-window) layers' attention mask, when the model
/// has them (Gemma 3): a constant in the prefill graph, an input in the
/// cached one, computed by [`sliding_window_mask`].
pub const KQ_MASK_SWA: &str = "kq_mask_swa";
/// Name of the cache-row input of the cached graph.
pub const KV_IDX: &str = "kv_idx";
/// Name of the constant row index of [`LlamaConfig::last_logits_only`].
pub const OUT_IDS: &str = "out_ids";
/// Name of the logits output.
pub const LOGITS: &str = "result_output";

/// Hyperparameters and shapes of a llama-family decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Width of the residual stream.
    pub n_embd: i64,
    /// Query heads.
    pub n_head: i64,
    /// Key/value heads; divides `n_head` (grouped-query attention when smaller).
    pub n_head_kv: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// Hidden width of the dense FFN (unused when `moe` is set).
    pub n_ff: i64,
    /// Vocabulary size (rows of the token embedding, logits per token).
    pub n_vocab: i64,
    /// Tokens in the prefill batch.
    pub n_tokens: i64,
    /// Epsilon of every RMS norm.
    pub rms_eps: f32,
    /// Rotary embedding applied to q and k.
    pub rope: RopeParams,
    /// Dtype of the block matrices (wq, wk, wv, wo, ffn gate/up/down).
    pub weight_dtype: DType,
    /// Block matrices whose dtype differs from `weight_dtype`, by tensor name
    /// (files with a quantization mix, such as llama.cpp's Q4_K_M).
    pub matrix_dtypes: std::collections::BTreeMap<String, DType>,
    /// Dtype of the token embedding table.
    pub embd_dtype: DType,
    /// Dtype of the output projection (ignored when `tied_output`).
    pub output_dtype: DType,
    /// The logits reuse the token embedding (no output projection weight).
    pub tied_output: bool,
    /// q, k and v projections add an F32 bias (qwen2): weights
    /// [`LlamaNames::bias`] of `[n_head * head_dim]` / `[n_head_kv * head_dim]`.
    pub qkv_bias: bool,
    /// q and k's rope divides each pair's angle by an F32 factor (Llama 3.x's
    /// long-context scaling): the weight [`LlamaNames::rope_factors`] of
    /// `[rope.n_dims / 2]`, shared by every block.
    pub rope_factors: bool,
    /// Whether queries and keys are RMS-normed before rope, and over what
    /// (weights [`LlamaNames::head_norm`]).
    pub qk_norm: QkNorm,
    /// Gemma 3's additions (see `gemma3.rs`), for `gemma3` files.
    pub gemma3: Option<Gemma3>,
    /// A mixture-of-experts FFN in every block instead of the dense one
    /// (see `moe.rs`; `qwen3moe` files): the block weights `FfnGate`,
    /// `FfnUp` and `FfnDown` are not declared, the [`MoeWeight`]s are.
    pub moe: Option<Moe>,
    /// Logits for the last token only (`[n_vocab, 1]`, as llama.cpp
    /// computes them in a prefill): as in llama.cpp, the last block cuts its
    /// attention output and its residual input to the last row
    /// (`{p}.attn_out_rows`, `{p}.inp_out_rows`: `get_rows` of the constant
    /// `out_ids`) before the residual add, so its FFN, the output norm and
    /// the head run on one row. For large vocabularies the head is most of
    /// a prefill's work (Gemma 3: 262,144 rows).
    pub last_logits_only: bool,
    /// How weights are named.
    pub names: LlamaNames,
}

impl LlamaConfig {
    /// The window of the local layers when the graphs have any (and so the
    /// input [`KQ_MASK_SWA`], which [`sliding_window_mask`] fills).
    pub fn local_window(&self) -> Option<i64> {
        let w = self.gemma3?.sliding_window?;
        has_local_layers(self).then_some(w.window)
    }
}

/// The weights of one block, indexed by [`BlockWeight`] (declaration order).
struct BlockWeights {
    /// `None` only for the dense FFN's weights of a block with experts.
    ids: [Option<TensorId>; BlockWeight::ALL.len()],
    /// Biases of wq, wk, wv, when the config has them.
    bias: [Option<TensorId>; 3],
    /// Rope's frequency factors, when the config has them (one weight for all blocks).
    rope_factors: Option<TensorId>,
    /// The query and key head norms' weights, when the config has them.
    head_norms: Option<[TensorId; 2]>,
    /// Gemma 3's norms of attention's and the FFN's outputs.
    post_norms: Option<[TensorId; 2]>,
    /// The router and experts, when the config has a mixture of experts.
    moe: Option<moe::MoeWeights>,
}

impl BlockWeights {
    /// The block weight `w`; only the dense FFN reads the FFN's three, and
    /// only blocks without experts have them (declared together by
    /// `declare_block_weights` from the same `cfg.moe`).
    fn get(&self, w: BlockWeight) -> TensorId {
        self.ids[w as usize].unwrap_or_else(|| panic!("{w:?} is not declared with experts"))
    }

    fn bias(&self, w: BlockWeight) -> Option<TensorId> {
        match w {
            BlockWeight::Wq => self.bias[0],
            BlockWeight::Wk => self.bias[1],
            BlockWeight::Wv => self.bias[2],
            _ => None,
        }
    }
}

/// The leafs every llama graph shares, declared in this order after the
/// graph's own inputs: token embedding, block weights, output norm, output.
struct ModelWeights {
    tok_embd: TensorId,
    layers: Vec<BlockWeights>,
    output_norm: TensorId,
    /// The output projection, or `tok_embd` when tied.
    output: TensorId,
}

fn declare_weights(b: &mut GraphBuilder, cfg: &LlamaConfig) -> Result<ModelWeights, Error> {
    let names = cfg.names;
    let tok_embd = b.weight(
        names.token_embd(),
        cfg.embd_dtype,
        [cfg.n_embd, cfg.n_vocab, 1, 1],
    )?;
    let mut layers = (0..cfg.n_layer)
        .map(|il| declare_block_weights(b, cfg, il))
        .collect::<Result<Vec<_>, _>>()?;
    let rope_factors = (cfg.rope_factors)
        .then(|| {
            let n = i64::from(cfg.rope.n_dims / 2);
            b.weight(names.rope_factors(), DType::F32, [n, 1, 1, 1])
        })
        .transpose()?;
    for l in &mut layers {
        l.rope_factors = rope_factors;
    }
    let output_norm = b.weight(names.output_norm(), DType::F32, [cfg.n_embd, 1, 1, 1])?;
    let output = if cfg.tied_output {
        tok_embd
    } else {
        b.weight(
            names.output(),
            cfg.output_dtype,
            [cfg.n_embd, cfg.n_vocab, 1, 1],
        )?
    };
    Ok(ModelWeights {
        tok_embd,
        layers,
        output_norm,
        output,
    })
}

/// The attention masks of a graph: every layer's, and the local layers'
/// when the model has sliding-window layers.
#[derive(Clone, Copy)]
struct Masks {
    full: TensorId,
    local: Option<TensorId>,
}

impl Masks {
    /// The mask layer `il` attends with.
    fn of_layer(&self, cfg: &LlamaConfig, il: usize) -> TensorId {
        match (self.local, local_window(cfg, il)) {
            (Some(local), Some(_)) => local,
            _ => self.full,
        }
    }
}

/// The sliding window of layer `il`, when it is a local layer.
fn local_window(cfg: &LlamaConfig, il: usize) -> Option<SlidingWindow> {
    let w = cfg.gemma3?.sliding_window?;
    w.is_local(il).then_some(w)
}

/// Whether any layer of `cfg` is local (its graphs then have `kq_mask_swa`).
fn has_local_layers(cfg: &LlamaConfig) -> bool {
    (0..cfg.n_layer).any(|il| local_window(cfg, il).is_some())
}

/// Embedding, every block (each with its layer's cache, if any) and the
/// logits, marked as the output.
fn build_body(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    w: &ModelWeights,
    tokens: TensorId,
    pos: TensorId,
    masks: Masks,
    caches: Option<&[cached::LayerCache]>,
) -> Result<(), Error> {
    let mut x = b.get_rows("inp_embd", w.tok_embd, tokens)?;
    if let Some(g) = cfg.gemma3 {
        x = b.scale("inp_scaled", x, g.embd_scale)?;
    }
    let out_ids = if cfg.last_logits_only && cfg.n_tokens > 1 {
        let last = ConstInit::Fill((cfg.n_tokens - 1) as f64);
        Some(b.constant(OUT_IDS, DType::I32, [1, 1, 1, 1], last)?)
    } else {
        None
    };
    for (il, lw) in w.layers.iter().enumerate() {
        let cache = caches.map(|c| &c[il]);
        let mask = masks.of_layer(cfg, il);
        // The last block keeps only the rows whose logits are computed.
        let rows = out_ids.filter(|_| il + 1 == w.layers.len());
        x = build_block(b, cfg, il, lw, (x, rows), pos, mask, cache)?;
    }
    let x = rms_norm_mul(b, "result_norm", x, w.output_norm, cfg.rms_eps)?;
    let cap = cfg.gemma3.and_then(|g| g.logit_softcap);
    let name = if cap.is_some() {
        "result_output.raw"
    } else {
        LOGITS
    };
    let mut logits = b.mul_mat(name, w.output, x)?;
    if let Some(c) = cap {
        let scaled = b.scale("result_output.scaled", logits, 1.0 / c)?;
        let capped = b.unary("result_output.tanh", Op::Tanh, scaled)?;
        logits = b.scale(LOGITS, capped, c)?;
    }
    b.mark_output(logits)
}

/// Builds the prefill graph of `cfg` (see the module doc for its tensors).
/// Norm weights are F32; the other weights take the config's dtypes.
pub fn build_prefill(cfg: &LlamaConfig) -> Result<Graph, Error> {
    let mut b = GraphBuilder::new("llama_prefill");
    let t = cfg.n_tokens;
    let tokens = b.input(TOKENS, DType::I32, [t, 1, 1, 1])?;
    let arange = ConstInit::Arange {
        start: 0.0,
        step: 1.0,
    };
    let pos = b.constant(POSITIONS, DType::I32, [t, 1, 1, 1], arange)?;
    let mask = b.constant(
        KQ_MASK,
        DType::F32,
        [t, t, 1, 1],
        ConstInit::CausalMask { n_past: 0 },
    )?;

    // A local layer's mask differs from the causal one only past its window.
    let local = match cfg.gemma3.and_then(|g| g.sliding_window) {
        Some(w) if has_local_layers(cfg) => {
            let init = if t <= w.window {
                ConstInit::CausalMask { n_past: 0 }
            } else {
                let mask = sliding_window_mask(0, t, t, w.window);
                ConstInit::Values(mask.into_iter().map(f64::from).collect())
            };
            Some(b.constant(KQ_MASK_SWA, DType::F32, [t, t, 1, 1], init)?)
        }
        _ => None,
    };

    let weights = declare_weights(&mut b, cfg)?;
    let masks = Masks { full: mask, local };
    build_body(&mut b, cfg, &weights, tokens, pos, masks, None)?;
    b.finish()
}

fn declare_block_weights(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    il: usize,
) -> Result<BlockWeights, Error> {
    let (e, q, kv, ff) = (
        cfg.n_embd,
        cfg.n_head * cfg.head_dim,
        cfg.n_head_kv * cfg.head_dim,
        cfg.n_ff,
    );
    let mut ids = [None; BlockWeight::ALL.len()];
    let mut bias = [None; 3];
    let mut moe = None;
    for (slot, w) in ids.iter_mut().zip(BlockWeight::ALL) {
        let dense_ffn = matches!(
            w,
            BlockWeight::FfnGate | BlockWeight::FfnUp | BlockWeight::FfnDown
        );
        if let Some(m) = cfg.moe.as_ref().filter(|_| dense_ffn) {
            // The experts, where the dense FFN's weights would be.
            if moe.is_none() {
                moe = Some(moe::declare(b, cfg, m, il)?);
            }
            continue;
        }
        let name = cfg.names.block(il, w);
        let matrix = cfg
            .matrix_dtypes
            .get(&name)
            .copied()
            .unwrap_or(cfg.weight_dtype);
        let (dtype, ne0, ne1) = match w {
            BlockWeight::AttnNorm | BlockWeight::FfnNorm => (DType::F32, e, 1),
            BlockWeight::Wq => (matrix, e, q),
            BlockWeight::Wk | BlockWeight::Wv => (matrix, e, kv),
            BlockWeight::Wo => (matrix, q, e),
            BlockWeight::FfnGate | BlockWeight::FfnUp => (matrix, e, ff),
            BlockWeight::FfnDown => (matrix, ff, e),
        };
        *slot = Some(b.weight(name, dtype, [ne0, ne1, 1, 1])?);
        // Each bias follows its matrix, as in the GGUF files that have them.
        let bias_slot = match w {
            BlockWeight::Wq => Some(0),
            BlockWeight::Wk => Some(1),
            BlockWeight::Wv => Some(2),
            _ => None,
        };
        if let Some(i) = bias_slot.filter(|_| cfg.qkv_bias) {
            bias[i] = Some(b.weight(cfg.names.bias(il, w), DType::F32, [ne1, 1, 1, 1])?);
        }
    }
    let norm_widths = match cfg.qk_norm {
        QkNorm::None => None,
        QkNorm::PerHead => Some([cfg.head_dim; 2]),
        QkNorm::Whole => Some([q, kv]),
    };
    let head_norms = norm_widths
        .map(|[wq, wk]| -> Result<[TensorId; 2], Error> {
            Ok([
                b.weight(cfg.names.head_norm(il, false), DType::F32, [wq, 1, 1, 1])?,
                b.weight(cfg.names.head_norm(il, true), DType::F32, [wk, 1, 1, 1])?,
            ])
        })
        .transpose()?;
    let post_norms = (cfg.gemma3.is_some())
        .then(|| -> Result<[TensorId; 2], Error> {
            let e = [cfg.n_embd, 1, 1, 1];
            Ok([
                b.weight(cfg.names.post_norm(il, false), DType::F32, e)?,
                b.weight(cfg.names.post_norm(il, true), DType::F32, e)?,
            ])
        })
        .transpose()?;
    Ok(BlockWeights {
        ids,
        bias,
        rope_factors: None,
        head_norms,
        post_norms,
        moe,
    })
}

/// The projection `{p}.{name} = w × cur`, plus its bias (`{p}.{name}_bias`) when the block has one.
fn project(
    b: &mut GraphBuilder,
    p: &str,
    name: &str,
    w: &BlockWeights,
    which: BlockWeight,
    cur: TensorId,
) -> Result<TensorId, Error> {
    let y = b.mul_mat(format!("{p}.{name}"), w.get(which), cur)?;
    match w.bias(which) {
        Some(bias) => b.add(format!("{p}.{name}_bias"), y, bias),
        None => Ok(y),
    }
}

/// Layer `il`'s rope of `x` at `pos` (a local layer's base when it has its
/// own), with the block's frequency factors if it has them.
fn rope(
    b: &mut GraphBuilder,
    name: String,
    x: TensorId,
    pos: TensorId,
    cfg: &LlamaConfig,
    il: usize,
    w: &BlockWeights,
) -> Result<TensorId, Error> {
    let mut params = cfg.rope;
    if let Some(window) = local_window(cfg, il) {
        params.freq_base = window.freq_base;
    }
    match w.rope_factors {
        Some(f) => b.rope_with_factors(name, x, pos, f, params),
        None => b.rope(name, x, pos, params),
    }
}

/// `x`, RMS-normed with `post`'s weight as `{name}` when the block has
/// post-norms (Gemma 3; `post` picks attention's or the FFN's).
fn post_norm(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    w: &BlockWeights,
    ffn: bool,
    name: &str,
    x: TensorId,
) -> Result<TensorId, Error> {
    match w.post_norms {
        Some(norms) => rms_norm_mul(b, name, x, norms[usize::from(ffn)], cfg.rms_eps),
        None => Ok(x),
    }
}

/// The RMS norm of queries (`k: false`) or keys `x` when the model norms
/// them at this `stage` (before the heads are split: [`QkNorm::Whole`];
/// after: [`QkNorm::PerHead`]); otherwise `x` itself.
fn qk_norm(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    w: &BlockWeights,
    name: &str,
    x: TensorId,
    k: bool,
    stage: QkNorm,
) -> Result<TensorId, Error> {
    match w.head_norms {
        Some(norms) if cfg.qk_norm == stage => {
            rms_norm_mul(b, name, x, norms[usize::from(k)], cfg.rms_eps)
        }
        _ => Ok(x),
    }
}

/// One decoder block over the residual stream `x [n_embd, n_tokens]`.
/// Without a `cache`, the batch's keys and values attend to each other (the
/// prefill graph, node for node ggml's); with one, they are written into it
/// and attention reads the cache rows the layer cache attends over. With
/// `out_rows` (row indices), the block continues after attention with those
/// rows only (llama.cpp's last block with `inp_out_ids`).
#[allow(clippy::too_many_arguments)]
fn build_block(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    il: usize,
    w: &BlockWeights,
    (x, out_rows): (TensorId, Option<TensorId>),
    pos: TensorId,
    mask: TensorId,
    cache: Option<&cached::LayerCache>,
) -> Result<TensorId, Error> {
    let p = format!("l{il}");
    let hd = cfg.head_dim;
    let cur = rms_norm_mul(
        b,
        &format!("{p}.attn_norm"),
        x,
        w.get(BlockWeight::AttnNorm),
        cfg.rms_eps,
    )?;

    let v = project(b, &p, "v", w, BlockWeight::Wv, cur)?;
    // ggml packs the batch's values right after computing them; a cache
    // takes them as they are.
    let values = match cache {
        None => transposed_values(b, &p, v, hd, cfg.n_head_kv)?,
        Some(_) => v,
    };
    let k = project(b, &p, "k", w, BlockWeight::Wk, cur)?;
    let k = qk_norm(b, cfg, w, &format!("{p}.k_norm"), k, true, QkNorm::Whole)?;
    let k = split_heads(b, format!("{p}.k3"), k, hd, cfg.n_head_kv)?;
    let k = qk_norm(b, cfg, w, &format!("{p}.k_norm"), k, true, QkNorm::PerHead)?;
    let k = rope(b, format!("{p}.k_rope"), k, pos, cfg, il, w)?;
    let (k, v_t) = match cache {
        None => (heads_major(b, format!("{p}.k_perm"), k)?, values),
        Some(c) => c.store_and_view(b, &p, k, values)?,
    };
    let q = project(b, &p, "q", w, BlockWeight::Wq, cur)?;
    let q = qk_norm(b, cfg, w, &format!("{p}.q_norm"), q, false, QkNorm::Whole)?;
    let q = split_heads(b, format!("{p}.q3"), q, hd, cfg.n_head)?;
    let q = qk_norm(b, cfg, w, &format!("{p}.q_norm"), q, false, QkNorm::PerHead)?;
    let q = rope(b, format!("{p}.q_rope"), q, pos, cfg, il, w)?;
    // Gemma scales the queries and not the scores (as llama.cpp does).
    let (q, scale) = match cfg.gemma3 {
        Some(g) => (b.scale(format!("{p}.q_scaled"), q, g.q_scale)?, 1.0),
        None => (q, 1.0 / (hd as f32).sqrt()),
    };
    let q = heads_major(b, format!("{p}.q_perm"), q)?;
    let attn = attend(b, &p, k, q, v_t, Some(mask), scale)?;
    let mut attn = b.mul_mat(format!("{p}.attn_out"), w.get(BlockWeight::Wo), attn)?;
    let mut x = x;
    if let Some(ids) = out_rows {
        // Before Gemma's post-attention norm, where llama.cpp cuts.
        attn = b.get_rows(format!("{p}.attn_out_rows"), attn, ids)?;
        x = b.get_rows(format!("{p}.inp_out_rows"), x, ids)?;
    }
    let attn = post_norm(b, cfg, w, false, &format!("{p}.attn_post_norm"), attn)?;
    let ffn_inp = b.add(format!("{p}.ffn_inp"), attn, x)?;

    let cur = rms_norm_mul(
        b,
        &format!("{p}.ffn_norm"),
        ffn_inp,
        w.get(BlockWeight::FfnNorm),
        cfg.rms_eps,
    )?;
    let out = match &w.moe {
        Some(experts) => moe::build_ffn(b, &p, experts, cur)?,
        None => dense_ffn(b, cfg, &p, w, cur)?,
    };
    let out = post_norm(b, cfg, w, true, &format!("{p}.ffn_post_norm"), out)?;
    b.add(format!("{p}.l_out"), out, ffn_inp)
}

/// The dense FFN of block `p` over the normed residual `cur`: SiLU-gated
/// (`ffn_silu`, `ffn_gate_par`), or GEGLU for Gemma 3; `ffn_out`.
fn dense_ffn(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    p: &str,
    w: &BlockWeights,
    cur: TensorId,
) -> Result<TensorId, Error> {
    let gate = b.mul_mat(format!("{p}.ffn_gate"), w.get(BlockWeight::FfnGate), cur)?;
    let par = if cfg.gemma3.is_some() {
        let up = b.mul_mat(format!("{p}.ffn_up"), w.get(BlockWeight::FfnUp), cur)?;
        b.glu_split(format!("{p}.ffn_geglu"), GluKind::GeGlu, gate, up)?
    } else {
        let gate = b.silu(format!("{p}.ffn_silu"), gate)?;
        let up = b.mul_mat(format!("{p}.ffn_up"), w.get(BlockWeight::FfnUp), cur)?;
        b.mul(format!("{p}.ffn_gate_par"), gate, up)?
    };
    b.mul_mat(format!("{p}.ffn_out"), w.get(BlockWeight::FfnDown), par)
}

/// `rms_norm(x) * weight` as nodes `{name}.rms` and `{name}`.
fn rms_norm_mul(
    b: &mut GraphBuilder,
    name: &str,
    x: TensorId,
    weight: TensorId,
    eps: f32,
) -> Result<TensorId, Error> {
    let normed = b.rms_norm(format!("{name}.rms"), x, eps)?;
    b.mul(name, normed, weight)
}

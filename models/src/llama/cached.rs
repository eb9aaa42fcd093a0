//! [`build_cached`]: the llama graph for generation, `n_tokens` new tokens at
//! arbitrary positions over a KV cache held in state tensors;
//! [`build_cached_attending`]: the same graph attending over only the first
//! `attend` rows of the cache (a context bucket: decode cost grows with the
//! rows read, not with the cache's size).
//!
//! The same builder makes the prefill (`n_tokens` = prompt length) and the
//! decode (`n_tokens` = 1) graph, at any `attend`; all declare the same state
//! tensors, so a runtime that keeps state by name shares one cache between
//! all their plans.
//!
//! Tensors (ggml order, `C` = `n_head_kv * head_dim`, `t` = `n_tokens`, `a` =
//! `attend` (`n_ctx` in [`build_cached`]), `es` the cache dtype's element size):
//! - inputs `tokens` I32 `[t]`, `pos` I32 `[t]` (rope positions), `kv_idx` I32
//!   `[t]` (the cache row each token's K and V go to), `kq_mask` F32
//!   `[a, t]` (additive: 0 = attend, -inf = hidden); [`super::step_inputs`]
//!   computes the last three; with sliding-window layers (Gemma 3) also
//!   `kq_mask_swa` F32 `[a, t]`, from [`super::sliding_window_mask`];
//! - state per layer: `l{i}.cache_k` `[C, n_ctx]` (one row per cache slot, the
//!   heads of a slot contiguous) and `l{i}.cache_v` `[n_ctx, C]` (transposed:
//!   one row per value channel), whatever `attend` is;
//! - then the weights, as in the prefill graph, and the logits `result_output`
//!   `[n_vocab, t]`, the only output.
//!
//! Per layer, after `k_rope` and `v`:
//! - `k_rows` (reshape to `[C, t]`), `k_cache_set` (set_rows into `cache_k` at
//!   `kv_idx`), `k_cached` (a strided view `[head_dim, a, n_kv]`, nb
//!   `[es, C·es, head_dim·es]`: the first `a` slots), which is mul_mat's src0
//!   directly;
//! - `v_cols` (reshape to `[1, C, t]`), `v_cols_t` (permute to `[1, t, C]`),
//!   `v_cache_cols` (`cache_v` seen as `[1, n_ctx, C]`), `v_cache_set` (set_rows:
//!   with one-element rows, token `j`'s value channel `c` lands at
//!   `cache_v[kv_idx[j], c]`), `v_cached` (reshape to `[n_ctx, head_dim, n_kv]`
//!   when `a = n_ctx`; otherwise a view `[a, head_dim, n_kv]` with nb
//!   `[es, n_ctx·es, head_dim·n_ctx·es]`: the first `a` elements of each row).
//!
//! Why this layout: `kqv = mul_mat(v, kq)` needs src0 `[a, head_dim, n_kv]`
//! with rows along the context, and mul_mat refuses a transposed src0. Storing V
//! transposed makes that src0 a plain reshape (or a row-prefix view) of the
//! cache, so no step packs the V cache (a per-step `cont` of `a × C` values per
//! layer); a step writes only its `t × C` values. K needs no transpose: its
//! view is strided over heads but its rows are packed, which mul_mat accepts.
//!
//! Invariants:
//! - attention reads the cache through the `set_rows` results, so every read
//!   depends on the write of the same step (no ordering by side effect);
//! - writes index the whole cache (`kv_idx` < `n_ctx`); attention spans rows
//!   `0..a`; rows not yet written (zeros in a fresh cache, or stale values)
//!   must be hidden by `kq_mask` (-inf), which [`super::step_inputs`] does, and
//!   a step's tokens must land inside the window (`n_past + t <= a`), which it
//!   checks;
//! - with `attend = n_ctx` the graph is exactly [`build_cached`]'s;
//! - the cache dtype is F32 (exact) or F16 (half the memory and bandwidth; K
//!   and V are rounded to f16 when stored).

use super::{
    KQ_MASK, KQ_MASK_SWA, KV_IDX, LlamaConfig, Masks, POSITIONS, TOKENS, build_body,
    declare_weights, has_local_layers,
};
use ir::{DType, Error, Graph, GraphBuilder, TensorId};

/// The KV cache of [`build_cached`]'s graphs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheConfig {
    /// Cache rows (the context length): the most tokens a sequence can hold.
    pub n_ctx: i64,
    /// Dtype of the cached keys and values: F32 (exact) or F16 (fast, looser).
    pub kv_dtype: DType,
}

/// Name of layer `il`'s key cache state, `[n_head_kv * head_dim, n_ctx]`.
pub fn cache_k_name(il: usize) -> String {
    format!("l{il}.cache_k")
}

/// Name of layer `il`'s (transposed) value cache state, `[n_ctx, n_head_kv * head_dim]`.
pub fn cache_v_name(il: usize) -> String {
    format!("l{il}.cache_v")
}

/// Builds the graph of `config.n_tokens` new tokens over the cache, attending
/// over all of it (see the module doc for its tensors). Fails when the cache
/// dtype is not F32 or F16, or when `n_tokens` exceeds `n_ctx` (a batch that
/// could never fit).
pub fn build_cached(config: &LlamaConfig, cache: &CacheConfig) -> Result<Graph, Error> {
    build_cached_attending(config, cache, cache.n_ctx)
}

/// [`build_cached`] attending over only the first `attend` rows of the cache
/// (the state tensors keep all `n_ctx` rows). Fails as [`build_cached`] does,
/// and when `attend` is not in `1..=n_ctx` or `n_tokens` exceeds `attend`.
pub fn build_cached_attending(
    config: &LlamaConfig,
    cache: &CacheConfig,
    attend: i64,
) -> Result<Graph, Error> {
    let (t, n_ctx) = (config.n_tokens, cache.n_ctx);
    if !matches!(cache.kv_dtype, DType::F32 | DType::F16) {
        return Err(Error::Leaf {
            name: cache_k_name(0),
            reason: format!("the KV cache is f32 or f16, not {}", cache.kv_dtype),
        });
    }
    if t > n_ctx {
        return Err(Error::Leaf {
            name: KV_IDX.into(),
            reason: format!("a batch of {t} tokens does not fit a cache of n_ctx = {n_ctx} rows"),
        });
    }
    if !(1..=n_ctx).contains(&attend) {
        return Err(Error::Leaf {
            name: KQ_MASK.into(),
            reason: format!(
                "attention over attend = {attend} rows of a cache of n_ctx = {n_ctx} rows \
                 (need 1 <= attend <= n_ctx)"
            ),
        });
    }
    if t > attend {
        return Err(Error::Leaf {
            name: KQ_MASK.into(),
            reason: format!(
                "a batch of {t} tokens does not fit an attention window of attend = {attend} rows"
            ),
        });
    }
    let mut b = GraphBuilder::new("llama_cached");
    let tokens = b.input(TOKENS, DType::I32, [t, 1, 1, 1])?;
    let pos = b.input(POSITIONS, DType::I32, [t, 1, 1, 1])?;
    let kv_idx = b.input(KV_IDX, DType::I32, [t, 1, 1, 1])?;
    let mask = b.input(KQ_MASK, DType::F32, [attend, t, 1, 1])?;
    let local = (has_local_layers(config))
        .then(|| b.input(KQ_MASK_SWA, DType::F32, [attend, t, 1, 1]))
        .transpose()?;
    let kv_width = config.n_head_kv * config.head_dim;
    let caches = (0..config.n_layer)
        .map(|il| {
            Ok(LayerCache {
                k: b.state(cache_k_name(il), cache.kv_dtype, [kv_width, n_ctx, 1, 1])?,
                v: b.state(cache_v_name(il), cache.kv_dtype, [n_ctx, kv_width, 1, 1])?,
                kv_idx,
                attend,
                head_dim: config.head_dim,
                n_head_kv: config.n_head_kv,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let weights = declare_weights(&mut b, config)?;
    let masks = Masks { full: mask, local };
    build_body(&mut b, config, &weights, tokens, pos, masks, Some(&caches))?;
    b.finish()
}

/// One layer's cache states and where this step writes.
pub(super) struct LayerCache {
    k: TensorId,
    v: TensorId,
    kv_idx: TensorId,
    /// Rows attention reads (the first `attend` of `n_ctx`).
    attend: i64,
    head_dim: i64,
    n_head_kv: i64,
}

impl LayerCache {
    /// Writes the batch's roped keys `k [head_dim, n_kv, t]` and values
    /// `v [C, t]` into the cache and returns what attention reads, the first
    /// `attend` rows: keys `[head_dim, attend, n_kv]` and values
    /// `[attend, head_dim, n_kv]`.
    pub(super) fn store_and_view(
        &self,
        b: &mut GraphBuilder,
        p: &str,
        k: TensorId,
        v: TensorId,
    ) -> Result<(TensorId, TensorId), Error> {
        let (hd, n_kv, attend) = (self.head_dim, self.n_head_kv, self.attend);
        let kv_width = hd * n_kv;
        let t = b.tensor(k).ne()[2];
        let [_, n_ctx, _, _] = b.tensor(self.k).ne();
        let es = b.tensor(self.k).dtype().block_bytes();

        let k_rows = b.reshape(format!("{p}.k_rows"), k, [kv_width, t, 1, 1])?;
        let k_set = b.set_rows(format!("{p}.k_cache_set"), self.k, k_rows, self.kv_idx)?;
        let row = kv_width as u64 * es;
        let k_cached = b.view(
            format!("{p}.k_cached"),
            k_set,
            [hd, attend, n_kv, 1],
            [row, hd as u64 * es, row * n_ctx as u64],
            0,
        )?;

        let v_cols = b.reshape(format!("{p}.v_cols"), v, [1, kv_width, t, 1])?;
        let v_cols = b.permute(format!("{p}.v_cols_t"), v_cols, [0, 2, 1, 3])?;
        let v_dst = b.reshape(format!("{p}.v_cache_cols"), self.v, [1, n_ctx, kv_width, 1])?;
        let v_set = b.set_rows(format!("{p}.v_cache_set"), v_dst, v_cols, self.kv_idx)?;
        let v_name = format!("{p}.v_cached");
        let v_cached = if attend == n_ctx {
            b.reshape(v_name, v_set, [n_ctx, hd, n_kv, 1])?
        } else {
            // Each value row holds n_ctx slots; read its first `attend`.
            let v_row = n_ctx as u64 * es;
            let head = hd as u64 * v_row;
            b.view(
                v_name,
                v_set,
                [attend, hd, n_kv, 1],
                [v_row, head, head * n_kv as u64],
                0,
            )?
        };
        Ok((k_cached, v_cached))
    }
}

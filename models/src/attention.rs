//! Multi-head attention pieces shared by the llama and BERT builders, in
//! ggml's form (llama.cpp `build_attn_mha` without flash attention).
//!
//! Shapes (ggml order, ne0 first), for `hd` = head_dim, `t` = n_tokens:
//! - projections are `[n_heads * hd, t]`; [`split_heads`] sees them as
//!   `[hd, n_heads, t]`, with the heads of a row contiguous, as llama.cpp does;
//! - [`heads_major`] permutes to `[hd, t, n_heads]` (q and k);
//! - [`transposed_values`] packs v as `[t, hd, n_kv_heads]`;
//! - [`attend`] computes `kq [t_k, t_q, n_heads]`, its soft_max and
//!   `kqv [hd, t_q, n_heads]`, and merges heads back to `[n_heads * hd, t]`.
//!
//! Grouped-query attention needs no repeat: ggml's `mul_mat` broadcasts src0
//! (k, v with `n_kv_heads`) over src1's dim 2 (`n_heads`), so query head `h`
//! reads kv head `h / (n_heads / n_kv_heads)`.
//!
//! Node names are `{prefix}.{v3, v_perm, v_t, kq, kq_soft_max, kqv, kqv_perm,
//! kqv_merged}` as in the ggml reference graph.

use ir::{GraphBuilder, TensorId};

type R = Result<TensorId, ir::Error>;

/// `x [n_heads * head_dim, n_tokens]` seen as `[head_dim, n_heads, n_tokens]`.
pub(crate) fn split_heads(
    b: &mut GraphBuilder,
    name: String,
    x: TensorId,
    head_dim: i64,
    n_heads: i64,
) -> R {
    let n_tokens = b.tensor(x).ne()[1];
    b.reshape(name, x, [head_dim, n_heads, n_tokens, 1])
}

/// `[head_dim, n_heads, n_tokens]` permuted to `[head_dim, n_tokens, n_heads]`.
pub(crate) fn heads_major(b: &mut GraphBuilder, name: String, x3: TensorId) -> R {
    b.permute(name, x3, [0, 2, 1, 3])
}

/// Values `v [n_kv_heads * head_dim, n_tokens]` packed as
/// `[n_tokens, head_dim, n_kv_heads]` (nodes `v3`, `v_perm`, `v_t`), the src0
/// of `kqv`.
pub(crate) fn transposed_values(
    b: &mut GraphBuilder,
    prefix: &str,
    v: TensorId,
    head_dim: i64,
    n_kv_heads: i64,
) -> R {
    let v3 = split_heads(b, format!("{prefix}.v3"), v, head_dim, n_kv_heads)?;
    let v_perm = b.permute(format!("{prefix}.v_perm"), v3, [1, 2, 0, 3])?;
    b.cont(format!("{prefix}.v_t"), v_perm)
}

/// Scaled dot-product attention over heads-major `k` and `q`, the packed
/// values `v_t`, an optional additive `mask`; returns the heads merged back
/// into `[n_heads * head_dim, n_tokens]`.
/// Heads merge with one shaped `cont` (`kqv_merged`), as ggml_cont_2d does.
pub(crate) fn attend(
    b: &mut GraphBuilder,
    prefix: &str,
    k: TensorId,
    q: TensorId,
    v_t: TensorId,
    mask: Option<TensorId>,
    scale: f32,
) -> R {
    let kq = b.mul_mat(format!("{prefix}.kq"), k, q)?;
    let kq = b.soft_max(format!("{prefix}.kq_soft_max"), kq, mask, scale, 0.0)?;
    let kqv = b.mul_mat(format!("{prefix}.kqv"), v_t, kq)?;
    let [head_dim, n_tokens, n_heads, _] = b.tensor(kqv).ne();
    let kqv_perm = b.permute(format!("{prefix}.kqv_perm"), kqv, [0, 2, 1, 3])?;
    b.cont_shaped(
        format!("{prefix}.kqv_merged"),
        kqv_perm,
        [head_dim * n_heads, n_tokens, 1, 1],
    )
}

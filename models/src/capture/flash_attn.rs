//! ggml's `flash_attn_ext`, imported as the attention it computes in
//! ggplan's ops (llama.cpp's default path with `-fa auto`, on the CPU too).
//!
//! ggml: `flash_attn_ext(q, k, v, mask)` with `q` [d, tokens, heads], `k`
//! [d, kv, kv_heads], `v` [d_v, kv, kv_heads] (heads a multiple of kv_heads),
//! `mask` [kv, >= tokens] (F16), parameters (scale, max_bias, logit_softcap,
//! precision); the result is [d_v, heads, tokens], already permuted for the
//! output projection. Lowered to:
//!
//! ```text
//! kq   = mul_mat(k, q)                          [kv, tokens, heads]
//! p    = soft_max(kq, mask, scale, max_bias)
//! v_t  = cont(transpose(v))                     [kv, d_v, kv_heads]
//! kqv  = mul_mat(v_t, p)                        [d_v, tokens, heads]
//! out  = cont(permute(kqv, 0 2 1 3))            [d_v, heads, tokens]
//! ```
//!
//! The same numbers up to rounding: ggml's CPU kernel takes Q to F16 for the
//! K products and may accumulate V in F16; this path keeps F32. A logit
//! softcap (Gemma 2) or attention sinks (gpt-oss) are not lowered: refused.

use ir::{GraphBuilder, Layout, Op, TensorId};

use super::CapturedTensor;

/// What the lowering needs from the node's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FlashAttn {
    scale: f32,
    max_bias: f32,
}

/// The parameters of a `FLASH_ATTN_EXT` node, or what ggplan cannot lower.
pub(super) fn params(t: &CapturedTensor) -> Result<FlashAttn, String> {
    if t.src.len() > 4 {
        return Err("FLASH_ATTN_EXT with sinks".into());
    }
    if t.src.len() < 3 {
        return Err("FLASH_ATTN_EXT without q, k and v".into());
    }
    if t.param_f32(2) != 0.0 {
        return Err("FLASH_ATTN_EXT with a logit softcap".into());
    }
    Ok(FlashAttn {
        scale: t.param_f32(0),
        max_bias: t.param_f32(1),
    })
}

/// Builds the lowered attention for node `name` with sources (q, k, v
/// [, mask]); the last node is `name` with the `declared` layout.
pub(super) fn lower(
    b: &mut GraphBuilder,
    unique: &mut impl FnMut(&str) -> String,
    name: &str,
    p: FlashAttn,
    srcs: &[TensorId],
    declared: Layout,
) -> Result<TensorId, ir::Error> {
    let (q, k, v) = (srcs[0], srcs[1], srcs[2]);
    let kq = b.node(unique(&format!("{name}.kq")), Op::MulMat, &[k, q], None)?;
    let mut soft_srcs = vec![kq];
    soft_srcs.extend(srcs.get(3));
    let soft_max = Op::SoftMax {
        scale: p.scale,
        max_bias: p.max_bias,
    };
    let probs = b.node(
        unique(&format!("{name}.kq_soft_max")),
        soft_max,
        &soft_srcs,
        None,
    )?;
    let v_t = b.node(unique(&format!("{name}.v_t")), Op::Transpose, &[v], None)?;
    let v_t = b.node(unique(&format!("{name}.v_t_cont")), Op::Cont, &[v_t], None)?;
    let kqv = b.node(
        unique(&format!("{name}.kqv")),
        Op::MulMat,
        &[v_t, probs],
        None,
    )?;
    let axes = [0, 2, 1, 3];
    let merged = b.node(
        unique(&format!("{name}.kqv_permuted")),
        Op::Permute { axes },
        &[kqv],
        None,
    )?;
    b.node(unique(name), Op::Cont, &[merged], Some(declared))
}

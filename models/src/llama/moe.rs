//! The mixture-of-experts FFN of Qwen 3 MoE (`qwen3moe`), Mixtral (`llama`
//! with a nonzero `llama.expert_count`) and OLMoE (`olmoe`), which takes the
//! dense FFN's place in every block, and how
//! [`super::LlamaConfig::from_gguf`] reads it. llama.cpp builds all three with
//! `build_moe_ffn` (softmax gating, SiLU-gated experts, no shared expert),
//! renormalising the chosen weights except for OLMoE ([`Moe::renormalise`]);
//! they differ in the attention and in the experts' width ([`ExpertWidth`]).
//!
//! Per token (`x` the FFN-normed residual, `[n_embd, t]`), the nodes of
//! llama.cpp's `build_moe_ffn`, in ggml's node order:
//! - `ffn_moe_logits` = router × x (`[n_expert, t]`), `ffn_moe_probs` its
//!   soft_max over experts;
//! - `ffn_moe_argsort` sorts each token's probabilities descending and
//!   `ffn_moe_topk` views its first `n_expert_used` ids (`[k, t]`, the source's
//!   row stride): the chosen experts;
//! - `ffn_moe_weights` = their probabilities (`get_rows` of the probabilities
//!   seen as `[1, n_expert, t]`), divided by their sum clamped from below at
//!   2^-14 (`ffn_moe_weights_sum`, `_sum_clamped`, `_norm`): they sum to 1
//!   (not for OLMoE, whose weights are the probabilities as they are);
//! - `ffn_moe_gate`, `ffn_moe_up` = `mul_mat_id` of the stacked gate / up
//!   experts with x seen as `[n_embd, 1, t]` (every slot reads the token's one
//!   column), `ffn_moe_swiglu` = silu(gate) · up, `ffn_moe_down` the down
//!   experts' `mul_mat_id` (`[n_embd, k, t]`);
//! - `ffn_moe_weighted` = each slot times its weight; `ffn_moe_slot{i}` views
//!   slot `i` (`[n_embd, t]`), added in slot order into `ffn_moe_out` (one slot:
//!   packed by a `cont`, so the FFN's output is never a strided view).
//!
//! Invariants:
//! - the graph has no node that mixes tokens: each token's output depends on
//!   its own column only, so a batch computes what one-token batches compute;
//! - a MoE file's `expert_*` keys are all read or refused by name:
//!   `expert_count` and `expert_used_count` (1 ≤ used ≤ count) are required,
//!   `expert_feed_forward_length` defaults to `feed_forward_length / used` for
//!   `qwen3moe` and must equal `feed_forward_length` for `llama` and `olmoe`
//!   (as llama.cpp sizes them), `expert_weights_norm` is accepted only when it
//!   says what llama.cpp does whatever it says (renormalise, but not for
//!   `olmoe`); any other key
//!   (`expert_weights_scale`, shared experts, expert groups, per-layer arrays) is
//!   refused;
//! - a router whose rows disagree with `expert_count` is an error naming the
//!   tensor and the key; every other expert tensor is checked against the
//!   graph like any weight (name, dtype, shape).

use super::{LlamaConfig, MoeWeight};
use crate::Error;
use crate::gguf_meta::GgufMeta;
use ir::{GluKind, GraphBuilder, TensorId};

/// The smallest sum the chosen weights are divided by (the smallest normal
/// f16, llama.cpp's guard against a zero sum).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// A mixture-of-experts FFN's shape (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moe {
    /// Experts per layer.
    pub n_expert: i64,
    /// Experts each token uses (`k`), at most `n_expert`.
    pub n_expert_used: i64,
    /// Hidden width of one expert.
    pub n_ff_exp: i64,
    /// The chosen experts' weights are divided by their (clamped) sum
    /// (qwen3moe, Mixtral); OLMoE uses the soft_max probabilities as they are.
    pub renormalise: bool,
}

/// The `{arch}.*` keys [`read`] consumes, beside the llama ones.
pub(super) const KEYS: [&str; 4] = [
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_weights_norm",
];

/// How an architecture sizes one expert's hidden layer in llama.cpp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExpertWidth {
    /// `qwen3moe`: `expert_feed_forward_length`, by default
    /// `feed_forward_length / expert_used_count`.
    OwnKey,
    /// `llama` with experts (Mixtral) and `olmoe`: `feed_forward_length`
    /// itself (llama.cpp does not read `expert_feed_forward_length` there, so
    /// a file saying another width is refused).
    FeedForward,
}

/// Reads the experts of a `qwen3moe`, `olmoe` or `llama` file with experts
/// (see the module doc); `n_ff` is the file's `feed_forward_length`;
/// `renormalise`: whether llama.cpp renormalises this architecture's chosen
/// weights.
pub(super) fn read(
    meta: &GgufMeta<'_>,
    arch: &str,
    n_ff: i64,
    width: ExpertWidth,
    renormalise: bool,
) -> Result<Moe, Error> {
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let n_expert = meta.positive(&key("expert_count"))?;
    let used_key = key("expert_used_count");
    let n_expert_used = meta.positive(&used_key)?;
    if n_expert_used > n_expert {
        return Err(meta.bad(
            &used_key,
            format!("is {n_expert_used}, more than the {n_expert} experts"),
        ));
    }
    let ff_key = key("expert_feed_forward_length");
    let n_ff_exp = match (width, meta.opt_positive(&ff_key)?) {
        (ExpertWidth::OwnKey, Some(n)) => n,
        (ExpertWidth::OwnKey, None) if n_ff >= n_expert_used => n_ff / n_expert_used,
        (ExpertWidth::OwnKey, None) => return Err(meta.missing(&ff_key)),
        (ExpertWidth::FeedForward, Some(n)) if n != n_ff => {
            return Err(meta.bad(
                &ff_key,
                format!(
                    "is {n}, but llama.cpp makes {arch}'s experts feed_forward_length ({n_ff}) wide"
                ),
            ));
        }
        (ExpertWidth::FeedForward, _) => n_ff,
    };
    let norm_key = key("expert_weights_norm");
    if let Some(says) = meta.opt_bool(&norm_key)?
        && says != renormalise
    {
        let does = if renormalise {
            "renormalises"
        } else {
            "does not renormalise"
        };
        return Err(meta.unsupported(format!(
            "{norm_key} is {says}, but llama.cpp {does} {arch}'s expert weights \
             whatever it says"
        )));
    }
    Ok(Moe {
        n_expert,
        n_expert_used,
        n_ff_exp,
        renormalise,
    })
}

/// Refuses a layer whose router does not have one row per expert, naming the
/// tensor and the key (before the generic weight check, whose message would
/// not say which key disagrees).
pub(super) fn check_router_rows(
    meta: &GgufMeta<'_>,
    cfg: &LlamaConfig,
    moe: &Moe,
    arch: &str,
) -> Result<(), Error> {
    for il in 0..cfg.n_layer {
        let name = cfg.names.moe(il, MoeWeight::Router);
        let router = meta.tensor(&name)?;
        if router.ne[1] != moe.n_expert {
            return Err(meta.bad_tensor(
                &name,
                format!(
                    "has {} rows (one per expert) but {arch}.expert_count is {}",
                    router.ne[1], moe.n_expert
                ),
            ));
        }
    }
    Ok(())
}

/// One block's MoE weights, with the shape they were declared for.
pub(super) struct MoeWeights {
    shape: Moe,
    router: TensorId,
    gate: TensorId,
    up: TensorId,
    down: TensorId,
}

/// Declares layer `il`'s MoE weights in [`MoeWeight::ALL`]'s order; each
/// takes its own dtype from `cfg.matrix_dtypes`, `weight_dtype` by default.
pub(super) fn declare(
    b: &mut GraphBuilder,
    cfg: &LlamaConfig,
    moe: &Moe,
    il: usize,
) -> Result<MoeWeights, ir::Error> {
    let (e, f, n) = (cfg.n_embd, moe.n_ff_exp, moe.n_expert);
    let mut ids = [TensorId(0); MoeWeight::ALL.len()];
    for (slot, w) in ids.iter_mut().zip(MoeWeight::ALL) {
        let name = cfg.names.moe(il, w);
        let dtype = (cfg.matrix_dtypes.get(&name).copied()).unwrap_or(cfg.weight_dtype);
        let ne = match w {
            MoeWeight::Router => [e, n, 1, 1],
            MoeWeight::GateExps | MoeWeight::UpExps => [e, f, n, 1],
            MoeWeight::DownExps => [f, e, n, 1],
        };
        *slot = b.weight(name, dtype, ne)?;
    }
    let [router, gate, up, down] = ids;
    Ok(MoeWeights {
        shape: *moe,
        router,
        gate,
        up,
        down,
    })
}

/// The MoE FFN of block `p` over the normed residual `x [n_embd, t]` (the
/// module doc's nodes); returns `ffn_moe_out`, `[n_embd, t]`.
pub(super) fn build_ffn(
    b: &mut GraphBuilder,
    p: &str,
    w: &MoeWeights,
    x: TensorId,
) -> Result<TensorId, ir::Error> {
    let [n_embd, t, _, _] = b.tensor(x).ne();
    let (n, k) = (w.shape.n_expert, w.shape.n_expert_used);

    let logits = b.mul_mat(format!("{p}.ffn_moe_logits"), w.router, x)?;
    let probs = b.soft_max(format!("{p}.ffn_moe_probs"), logits, None, 1.0, 0.0)?;
    // ggml's order: the probabilities' 3-d view, then the sort it gathers by.
    let probs3 = b.reshape(format!("{p}.ffn_moe_probs3"), probs, [1, n, t, 1])?;
    let order = b.argsort(format!("{p}.ffn_moe_argsort"), probs, true)?;
    let row = b.tensor(order).layout.nb[1];
    let chosen = b.view(
        format!("{p}.ffn_moe_topk"),
        order,
        [k, t, 1, 1],
        [row, row * t as u64, row * t as u64],
        0,
    )?;
    // [1, k, t]: the chosen experts' probabilities.
    let mut weights = b.get_rows(format!("{p}.ffn_moe_weights"), probs3, chosen)?;
    if w.shape.renormalise {
        let flat = b.reshape(format!("{p}.ffn_moe_weights2"), weights, [k, t, 1, 1])?;
        let sum = b.sum_rows(format!("{p}.ffn_moe_weights_sum"), flat)?;
        let sum = b.clamp(
            format!("{p}.ffn_moe_weights_sum_clamped"),
            sum,
            MIN_WEIGHT_SUM,
            f32::INFINITY,
        )?;
        let normed = b.div(format!("{p}.ffn_moe_weights_norm"), flat, sum)?;
        weights = b.reshape(format!("{p}.ffn_moe_weights3"), normed, [1, k, t, 1])?;
    }

    let x3 = b.reshape(format!("{p}.ffn_norm3"), x, [n_embd, 1, t, 1])?;
    let gate = b.mul_mat_id(format!("{p}.ffn_moe_gate"), w.gate, x3, chosen)?;
    let up = b.mul_mat_id(format!("{p}.ffn_moe_up"), w.up, x3, chosen)?;
    let par = b.glu_split(format!("{p}.ffn_moe_swiglu"), GluKind::SwiGlu, gate, up)?;
    let experts = b.mul_mat_id(format!("{p}.ffn_moe_down"), w.down, par, chosen)?;
    let weighted = b.mul(format!("{p}.ffn_moe_weighted"), experts, weights)?;

    // Every slot's view first, then the adds in slot order (ggml's order).
    let nb = b.tensor(weighted).layout.nb;
    let slots = (0..k)
        .map(|i| {
            b.view(
                format!("{p}.ffn_moe_slot{i}"),
                weighted,
                [n_embd, t, 1, 1],
                [nb[2], nb[2] * t as u64, nb[2] * t as u64],
                i as u64 * nb[1],
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = format!("{p}.ffn_moe_out");
    if k == 1 {
        return b.cont(out, slots[0]);
    }
    let mut sum = slots[0];
    for (i, &slot) in slots.iter().enumerate().skip(1) {
        let name = if i + 1 == slots.len() {
            out.clone()
        } else {
            format!("{p}.ffn_moe_sum{i}")
        };
        sum = b.add(name, sum, slot)?;
    }
    Ok(sum)
}

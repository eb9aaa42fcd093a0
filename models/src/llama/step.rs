//! [`step_inputs`]: the per-step input values of [`super::build_cached`]'s
//! graphs for one sequence whose token at position `p` lives in cache row `p`.
//!
//! Invariants of a [`StepInputs`] for `n_tokens` tokens after `n_past`:
//! - `pos[j] = kv_idx[j] = n_past + j`;
//! - `kq_mask[r + n_ctx * j]` (ggml order, `[n_ctx, n_tokens]`) is 0 when cache
//!   row `r` holds a key at a position `<= n_past + j` (causal, and the row is
//!   filled once this step has written its rows), `-inf` otherwise. Rows at or
//!   beyond `n_past + n_tokens` are never filled yet, so they are always hidden:
//!   a fresh cache's zeros (or stale rows of an earlier, longer sequence) never
//!   take part in attention.

/// The values of the `pos`, `kv_idx` and `kq_mask` inputs for one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepInputs {
    /// Rope position of each new token, `[n_tokens]`.
    pub pos: Vec<i32>,
    /// Cache row each new token's key and value are written to, `[n_tokens]`.
    pub kv_idx: Vec<i32>,
    /// Additive attention mask, `[n_ctx, n_tokens]` with `n_ctx` innermost.
    pub kq_mask: Vec<f32>,
}

/// Why a step's inputs cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The tokens would run past the end of the cache.
    #[error(
        "context overflow: {n_past} cached tokens + {n_tokens} new tokens = {} exceed the context of n_ctx = {n_ctx}",
        .n_past + .n_tokens
    )]
    ContextOverflow {
        /// Tokens already in the cache.
        n_past: i64,
        /// New tokens of this step.
        n_tokens: i64,
        /// Rows of the cache.
        n_ctx: i64,
    },
    /// A count is out of range (negative `n_past`, no tokens, an empty or
    /// i32-overflowing context).
    #[error("bad step: {0}")]
    BadCount(String),
}

/// The inputs of a step of `n_tokens` tokens starting at position `n_past`,
/// over a cache of `n_ctx` rows (see the module doc). Errors when
/// `n_past + n_tokens > n_ctx`, naming both.
pub fn step_inputs(n_past: i64, n_tokens: i64, n_ctx: i64) -> Result<StepInputs, StepError> {
    if n_past < 0 || n_tokens < 1 || n_ctx < 1 || n_ctx > i64::from(i32::MAX) {
        return Err(StepError::BadCount(format!(
            "need n_past >= 0, n_tokens >= 1 and 1 <= n_ctx <= {}; got n_past = {n_past}, \
             n_tokens = {n_tokens}, n_ctx = {n_ctx}",
            i32::MAX
        )));
    }
    if n_past.saturating_add(n_tokens) > n_ctx {
        return Err(StepError::ContextOverflow {
            n_past,
            n_tokens,
            n_ctx,
        });
    }
    // In range of i32: every position is below n_ctx <= i32::MAX.
    let positions: Vec<i32> = (n_past..n_past + n_tokens).map(|p| p as i32).collect();
    let kq_mask = (0..n_tokens)
        .flat_map(|j| {
            (0..n_ctx).map(move |r| {
                if r <= n_past + j {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Ok(StepInputs {
        pos: positions.clone(),
        kv_idx: positions,
        kq_mask,
    })
}

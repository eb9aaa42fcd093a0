//! [`step_inputs`]: the per-step input values of [`super::build_cached`]'s
//! (and [`super::build_cached_attending`]'s) graphs for one sequence whose
//! token at position `p` lives in cache row `p`.
//!
//! Invariants of a [`StepInputs`] for `n_tokens` tokens after `n_past`, over
//! the first `attend` rows of a cache of `n_ctx` rows:
//! - `n_past + n_tokens <= attend <= n_ctx` (else a [`StepError`] naming the
//!   numbers): every new token's row is inside the rows attention reads;
//! - `pos[j] = kv_idx[j] = n_past + j`;
//! - `kq_mask[r + attend * j]` (ggml order, `[attend, n_tokens]`) is 0 when
//!   cache row `r` holds a key at a position `<= n_past + j` (causal, and the
//!   row is filled once this step has written its rows), `-inf` otherwise.
//!   Rows at or beyond `n_past + n_tokens` are never filled yet, so they are
//!   always hidden: a fresh cache's zeros (or stale rows of an earlier, longer
//!   sequence) never take part in attention. Rows at or beyond `attend` are
//!   not read at all.

/// The values of the `pos`, `kv_idx` and `kq_mask` inputs for one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepInputs {
    /// Rope position of each new token, `[n_tokens]`.
    pub pos: Vec<i32>,
    /// Cache row each new token's key and value are written to, `[n_tokens]`.
    pub kv_idx: Vec<i32>,
    /// Additive attention mask, `[attend, n_tokens]` with `attend` innermost.
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
    /// The tokens fit the cache but not the rows the graph attends over.
    #[error(
        "attention window overflow: {n_past} cached tokens + {n_tokens} new tokens = {} exceed the window of attend = {attend} rows (a larger bucket is needed)",
        .n_past + .n_tokens
    )]
    WindowOverflow {
        /// Tokens already in the cache.
        n_past: i64,
        /// New tokens of this step.
        n_tokens: i64,
        /// Rows attention reads.
        attend: i64,
    },
    /// The attention window is larger than the cache.
    #[error(
        "attention window of attend = {attend} rows is larger than the cache of n_ctx = {n_ctx} rows"
    )]
    WindowBeyondContext {
        /// Rows attention would read.
        attend: i64,
        /// Rows of the cache.
        n_ctx: i64,
    },
    /// A count is out of range (negative `n_past`, no tokens, an empty or
    /// i32-overflowing context, an empty window).
    #[error("bad step: {0}")]
    BadCount(String),
}

/// The inputs of a step of `n_tokens` tokens starting at position `n_past`,
/// attending over the first `attend` rows of a cache of `n_ctx` rows (see the
/// module doc; `attend = n_ctx` for [`super::build_cached`]'s graphs). Errors
/// when `attend > n_ctx`, when `n_past + n_tokens > n_ctx` or when
/// `n_past + n_tokens > attend`, naming the numbers.
pub fn step_inputs(
    n_past: i64,
    n_tokens: i64,
    n_ctx: i64,
    attend: i64,
) -> Result<StepInputs, StepError> {
    if n_past < 0 || n_tokens < 1 || n_ctx < 1 || n_ctx > i64::from(i32::MAX) || attend < 1 {
        return Err(StepError::BadCount(format!(
            "need n_past >= 0, n_tokens >= 1, attend >= 1 and 1 <= n_ctx <= {}; got n_past = \
             {n_past}, n_tokens = {n_tokens}, n_ctx = {n_ctx}, attend = {attend}",
            i32::MAX
        )));
    }
    if attend > n_ctx {
        return Err(StepError::WindowBeyondContext { attend, n_ctx });
    }
    let end = n_past.saturating_add(n_tokens);
    if end > n_ctx {
        return Err(StepError::ContextOverflow {
            n_past,
            n_tokens,
            n_ctx,
        });
    }
    if end > attend {
        return Err(StepError::WindowOverflow {
            n_past,
            n_tokens,
            attend,
        });
    }
    // In range of i32: every position is below attend <= n_ctx <= i32::MAX.
    let positions: Vec<i32> = (n_past..end).map(|p| p as i32).collect();
    let kq_mask = (0..n_tokens)
        .flat_map(|j| {
            (0..attend).map(move |r| {
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

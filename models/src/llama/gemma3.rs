//! Gemma 3 as a llama-family decoder: what its graph adds to llama's, and
//! how [`super::LlamaConfig::from_gguf`] reads it from a `gemma3` GGUF file.
//!
//! Gemma 3's block is llama's (RMS norms, grouped-query attention with q/k
//! head norms, NeoX rope, a gated FFN, a tied output) with these differences,
//! each taken from llama.cpp's `gemma3` graph:
//! - the token embedding is multiplied by `sqrt(n_embd)` (`inp_scaled`);
//! - queries are scaled by [`Gemma3::q_scale`] after rope (`l{i}.q_scaled`)
//!   and the softmax scale is 1;
//! - attention's output and the FFN's output are each RMS-normed with their
//!   own weight before the residual add (`post_attention_norm`,
//!   `post_ffw_norm`);
//! - the FFN is GEGLU (tanh GELU of the gate times up, one `glu` node);
//! - with a [`SlidingWindow`], five of every six layers are local: they see
//!   only the last `window` positions (their own mask, `kq_mask_swa`) and
//!   rotate with their own rope base (10000 unless the file says otherwise);
//! - optionally (`final_logit_softcapping`) the logits are `c * tanh(x / c)`.
//!
//! Invariant: a `gemma3` file's keys are all read or refused by name (an
//! explicit per-layer window pattern array, for one, is refused).

use crate::Error;
use crate::gguf_meta::GgufMeta;

/// Gemma 3's additions to the llama graph (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemma3 {
    /// The token embedding's multiplier, `sqrt(n_embd)`.
    pub embd_scale: f32,
    /// Queries' multiplier after rope (llama.cpp's `f_attention_scale`).
    pub q_scale: f32,
    /// Local (sliding-window) layers, when the model has them.
    pub sliding_window: Option<SlidingWindow>,
    /// `c` of the logits' soft cap `c * tanh(x / c)`, when the file sets one.
    pub logit_softcap: Option<f32>,
}

/// Sliding-window attention: which layers are local and how they differ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingWindow {
    /// A local layer's token at position `p` sees keys at `p - window + 1 ..= p`.
    pub window: i64,
    /// Layer `il` is local unless `il % pattern == pattern - 1`.
    pub pattern: usize,
    /// Rope's frequency base in local layers.
    pub freq_base: f32,
}

impl SlidingWindow {
    /// Whether layer `il` attends over the window only.
    pub fn is_local(&self, il: usize) -> bool {
        il % self.pattern < self.pattern - 1
    }
}

/// The `gemma3.*` keys [`read`] consumes, beside the llama ones.
pub(super) const KEYS: [&str; 4] = [
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
    "final_logit_softcapping",
];

/// Reads Gemma 3's additions from a `gemma3` file's metadata, with llama.cpp's
/// defaults: a window pattern of 6, a local rope base of 10000, and the query
/// scale `1 / sqrt(head_dim)` (`1 / sqrt(n_embd / n_head)` for the 62-layer
/// 27B model, as llama.cpp decides it).
pub(super) fn read(
    meta: &GgufMeta<'_>,
    n_layer: i64,
    n_embd: i64,
    n_head: i64,
    head_dim: i64,
) -> Result<Gemma3, Error> {
    let window = meta.opt_positive("gemma3.attention.sliding_window")?;
    let pattern_key = "gemma3.attention.sliding_window_pattern";
    // An array (a per-layer pattern) is refused by opt_u64, naming the key.
    let pattern = meta.opt_u64(pattern_key)?.unwrap_or(6);
    if pattern < 1 {
        return Err(meta.bad(pattern_key, "is 0".into()));
    }
    let freq_base = meta
        .opt_f32("gemma3.rope.freq_base_swa")?
        .unwrap_or(10000.0);
    let softcap = meta.opt_f32("gemma3.final_logit_softcapping")?;
    let q_scale = if n_layer == 62 {
        1.0 / ((n_embd / n_head) as f32).sqrt()
    } else {
        1.0 / (head_dim as f32).sqrt()
    };
    Ok(Gemma3 {
        embd_scale: (n_embd as f32).sqrt(),
        q_scale,
        sliding_window: window.map(|window| SlidingWindow {
            window,
            pattern: pattern as usize,
            freq_base,
        }),
        logit_softcap: softcap.filter(|&c| c != 0.0),
    })
}

/// The additive mask of a local layer, `[attend, n_tokens]` (`attend`
/// innermost): 0 where cache row `r` holds a key the token at `n_past + j`
/// sees (`r <= n_past + j` and `n_past + j - r < window`), -inf elsewhere.
/// Rows hold the positions of their index, as [`super::step_inputs`] assumes.
pub fn sliding_window_mask(n_past: i64, n_tokens: i64, attend: i64, window: i64) -> Vec<f32> {
    (0..n_tokens)
        .flat_map(|j| {
            let p = n_past + j;
            (0..attend).map(move |r| {
                if r <= p && p - r < window {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global() {
        let w = SlidingWindow {
            window: 512,
            pattern: 6,
            freq_base: 10000.0,
        };
        let global: Vec<usize> = (0..18).filter(|&il| !w.is_local(il)).collect();
        assert_eq!(
            global,
            [5, 11, 17],
            "llama.cpp's gemma3 270M: layers 5, 11, 17"
        );
    }

    #[test]
    fn the_window_hides_old_and_future_rows() {
        // Token at position 5 with a window of 3 sees rows 3, 4, 5.
        let m = sliding_window_mask(5, 1, 8, 3);
        let seen: Vec<usize> = (0..8).filter(|&r| m[r] == 0.0).collect();
        assert_eq!(seen, [3, 4, 5]);
        // Two tokens at 1 and 2, window 2: rows 0-1, then 1-2.
        let m = sliding_window_mask(1, 2, 4, 2);
        assert_eq!(&m[..4], &[0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert_eq!(&m[4..], &[f32::NEG_INFINITY, 0.0, 0.0, f32::NEG_INFINITY]);
    }
}

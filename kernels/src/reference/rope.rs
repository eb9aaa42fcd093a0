//! rope: rotary position embedding with ggml's rope_ext + YaRN semantics.
//!
//! src0 is `[head_dim, n_head, n_tokens, ne3]`, src1 the I32 positions `[n_tokens]`,
//! the optional src2 the F32 frequency factors `f` (at least `n_dims/2`; Llama 3's
//! `rope_freqs`, 1 for every pair when absent).
//! For token `t` at position `p = pos[t]` and pair `i` in `0..n_dims/2`:
//! - `theta_extrap = p * freq_base^(-2i / n_dims) / f[i]`,
//!   `theta_interp = freq_scale * theta_extrap`;
//! - without YaRN (`ext_factor == 0`): `theta = theta_interp`, `mscale = attn_factor`;
//! - with YaRN: `mix = ramp(i) * ext_factor` where `ramp(i) = 1 - clamp((i - low) /
//!   max(0.001, high - low), 0, 1)` and `[low, high]` = [`rope_yarn_corr_dims`];
//!   `theta = theta_interp (1 - mix) + theta_extrap mix`,
//!   `mscale = attn_factor (1 + 0.1 ln(1 / freq_scale))`;
//! - the pair `(x0, x1)` becomes `(x0 c - x1 s, x0 s + x1 c)` with `c = mscale cos theta`,
//!   `s = mscale sin theta`. Normal mode pairs `(x[2i], x[2i+1])`, Neox
//!   `(x[i], x[i + n_dims/2])`. Elements at index `>= n_dims` pass through unchanged.
//!
//! Invariant: at position 0 with `mscale = 1` every row is unchanged; the rotation
//! preserves each pair's norm (scaled by `mscale`).

use super::dense::Dense;
use ir::{RopeMode, RopeParams};

/// ggml's YaRN correction range `[low, high]` in pair indices: with
/// `corr_dim(r) = n_dims ln(n_ctx_orig / (2 pi r)) / (2 ln freq_base)`,
/// `low = max(0, floor(corr_dim(beta_fast)))`, `high = min(n_dims - 1, ceil(corr_dim(beta_slow)))`.
pub fn rope_yarn_corr_dims(
    n_dims: u32,
    n_ctx_orig: u32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f64; 2] {
    let n_dims = f64::from(n_dims);
    let corr_dim = |n_rot: f32| {
        let n_rot = f64::from(n_rot);
        n_dims * (f64::from(n_ctx_orig) / (n_rot * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * f64::from(freq_base).ln())
    };
    let low = corr_dim(beta_fast).floor().max(0.0);
    let high = corr_dim(beta_slow).ceil().min(n_dims - 1.0);
    [low, high]
}

/// The YaRN ramp of pair `i`: 1 below `low`, 0 above `high`, linear between.
fn yarn_ramp(low: f64, high: f64, i: usize) -> f64 {
    let y = (i as f64 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// `(cos theta, sin theta)` times mscale for every pair of a token at `pos`,
/// each pair's angle divided by its frequency factor.
fn rotations(p: &RopeParams, pos: f64, factors: Option<&Dense>) -> Vec<(f64, f64)> {
    let n_dims = f64::from(p.n_dims);
    let freq_scale = f64::from(p.freq_scale);
    let ext_factor = f64::from(p.ext_factor);
    let [low, high] = rope_yarn_corr_dims(
        p.n_dims,
        p.n_ctx_orig,
        p.freq_base,
        p.beta_fast,
        p.beta_slow,
    );
    (0..p.n_dims as usize / 2)
        .map(|i| {
            let factor = factors.map_or(1.0, |f| f.data[i]);
            let theta_extrap = pos * f64::from(p.freq_base).powf(-2.0 * i as f64 / n_dims) / factor;
            let theta_interp = freq_scale * theta_extrap;
            let mut mscale = f64::from(p.attn_factor);
            let theta = if ext_factor != 0.0 {
                let mix = yarn_ramp(low, high, i) * ext_factor;
                mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
                theta_interp * (1.0 - mix) + theta_extrap * mix
            } else {
                theta_interp
            };
            (theta.cos() * mscale, theta.sin() * mscale)
        })
        .collect()
}

/// rope of `a` at the positions in `pos`, with the frequency factors when given.
pub(crate) fn rope(p: &RopeParams, a: &Dense, pos: &Dense, factors: Option<&Dense>) -> Dense {
    let mut out = a.clone();
    let half = p.n_dims as usize / 2;
    for i2 in 0..a.ne[2] {
        let rot = rotations(p, pos.data[i2 as usize], factors);
        for i3 in 0..a.ne[3] {
            for i1 in 0..a.ne[1] {
                let row = out.row_mut(i1, i2, i3);
                for (i, &(c, s)) in rot.iter().enumerate() {
                    let (j0, j1) = match p.mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + half),
                    };
                    let (x0, x1) = (row[j0], row[j1]);
                    row[j0] = x0 * c - x1 * s;
                    row[j1] = x0 * s + x1 * c;
                }
            }
        }
    }
    out
}

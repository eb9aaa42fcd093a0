//! rope (ggml rope_ext with YaRN), normal and neox pairing, positions I32.
//!
//! The angle math mirrors `kernels::reference` in f64: per pair `i` the
//! frequency `freq_base^(-2i/n_dims)` and the YaRN mix are computed once at
//! prepare; per token each thread computes the `n_dims/2` (cos, sin) pairs once
//! (rows of one token are consecutive, so a thread recomputes only when the
//! token changes), then rotates each row in f32. f64 angles keep large
//! positions exact enough for the 1e-7 NMSE bound.
//!
//! The optional frequency factors (src2, Llama 3's `rope_freqs`) divide each
//! pair's frequency. They are read when the kernel runs, not at prepare: a
//! weight's bytes are bound after the plan is loaded.

use super::rows::{RowIo, scratch_row};
use super::{dtypes, need, read_i32, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op, RopeMode, RopeParams};
use kernels::reference::rope_yarn_corr_dims;

/// Prepares rope of `srcs = [x, positions, factors?]` into `dst`.
pub(super) fn prepare(
    op: &Op,
    p: &RopeParams,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (a, pos) = (srcs[0], srcs[1]);
    need(
        op,
        a.dtype.is_float() && dst.dtype.is_float() && pos.dtype == DType::I32,
        || dtypes(&dst, srcs),
    )?;
    need(
        op,
        dst.ne == a.ne && pos.ne[0] == a.ne[2] && pos.n_elements() == pos.ne[0] as usize,
        || {
            format!(
                "x {}, positions {} and dst {} do not fit",
                shape(&a),
                shape(&pos),
                shape(&dst)
            )
        },
    )?;
    let n_dims = p.n_dims as usize;
    need(
        op,
        n_dims > 0 && n_dims.is_multiple_of(2) && n_dims as i64 <= a.ne[0],
        || {
            format!(
                "n_dims {n_dims} must be even, positive and at most {}",
                a.ne[0]
            )
        },
    )?;
    let factors = srcs.get(2).copied();
    if let Some(f) = factors {
        need(
            op,
            f.dtype == DType::F32 && f.ne[0] as usize >= n_dims / 2,
            || {
                format!(
                    "frequency factors {} {} must be F32 with at least n_dims / 2 = {} elements",
                    f.dtype,
                    shape(&f),
                    n_dims / 2
                )
            },
        )?;
    }
    let angles = Angles::new(p);
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let ne0 = a.ne[0] as usize;
    let mode = p.mode;
    let name = format!("rope {:?} {} -> {}", mode, a.dtype, dst.dtype).to_lowercase();
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let half = n_dims / 2;
        let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
        let freq = angles.freq_with(factors);
        let mut token = usize::MAX;
        let mut x_buf = scratch_row(true, ne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            let [i1, i2, i3] = a.row_coords(r);
            if i2 != token {
                token = i2;
                // SAFETY: i2 < pos.ne0 (checked), so the element is inside pos.
                let at = unsafe { read_i32(pos.row_ptr(0, 0, 0).add(i2 * pos.nb[0] as usize)) };
                angles.table(&freq, f64::from(at), &mut cos, &mut sin);
            }
            // SAFETY: (i1, i2, i3) is a row of both x and dst (same extents); the
            // dst row is this thread's; `view` copies x when it overlaps it.
            unsafe {
                let d = dst.row_ptr(i1, i2, i3);
                let x = ai.view(a.row_ptr(i1, i2, i3), ne0, &mut x_buf, d, di.span(ne0));
                let y = di.target(d, ne0, &mut y_buf);
                match mode {
                    RopeMode::Normal => {
                        for (i, (&c, &s)) in cos.iter().zip(&sin).enumerate() {
                            let (x0, x1) = (x[2 * i], x[2 * i + 1]);
                            y[2 * i] = x0 * c - x1 * s;
                            y[2 * i + 1] = x0 * s + x1 * c;
                        }
                    }
                    RopeMode::Neox => {
                        let (x_lo, x_hi) = x[..n_dims].split_at(half);
                        let (y_lo, y_hi) = y[..n_dims].split_at_mut(half);
                        for i in 0..half {
                            let (x0, x1, c, s) = (x_lo[i], x_hi[i], cos[i], sin[i]);
                            y_lo[i] = x0 * c - x1 * s;
                            y_hi[i] = x0 * s + x1 * c;
                        }
                    }
                }
                y[n_dims..].copy_from_slice(&x[n_dims..]);
                di.commit(d, y);
            }
        }
    }))
}

/// What the angle of pair `i` at position `pos` needs, computed once.
struct Angles {
    /// `freq_base^(-2i/n_dims)` per pair.
    freq: Vec<f64>,
    /// YaRN mix per pair (`ramp(i) * ext_factor`); empty without YaRN.
    mix: Vec<f64>,
    freq_scale: f64,
    mscale: f64,
}

impl Angles {
    fn new(p: &RopeParams) -> Angles {
        let n_dims = f64::from(p.n_dims);
        let half = p.n_dims as usize / 2;
        let freq = (0..half)
            .map(|i| f64::from(p.freq_base).powf(-2.0 * i as f64 / n_dims))
            .collect();
        let freq_scale = f64::from(p.freq_scale);
        let mut mscale = f64::from(p.attn_factor);
        let mut mix = Vec::new();
        if p.ext_factor != 0.0 {
            let [low, high] = rope_yarn_corr_dims(
                p.n_dims,
                p.n_ctx_orig,
                p.freq_base,
                p.beta_fast,
                p.beta_slow,
            );
            let ext = f64::from(p.ext_factor);
            mix = (0..half)
                .map(|i| {
                    let y = (i as f64 - low) / (high - low).max(0.001);
                    (1.0 - y.clamp(0.0, 1.0)) * ext
                })
                .collect();
            mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
        }
        Angles {
            freq,
            mix,
            freq_scale,
            mscale,
        }
    }

    /// Each pair's frequency divided by its factor (read from `factors` now).
    fn freq_with(&self, factors: Option<RawTensor>) -> Vec<f64> {
        let Some(f) = factors else {
            return self.freq.clone();
        };
        (self.freq.iter().enumerate())
            .map(|(i, &freq)| {
                // SAFETY: i < n_dims / 2 <= f.ne0 (checked at prepare), so the
                // element is inside the factors' row.
                let factor = unsafe {
                    f.row_ptr(0, 0, 0)
                        .add(i * f.nb[0] as usize)
                        .cast::<f32>()
                        .read_unaligned()
                };
                freq / f64::from(factor)
            })
            .collect()
    }

    /// `mscale * (cos, sin)` of every pair's angle at `pos`, with the pairs'
    /// frequencies `freq` (from [`Angles::freq_with`]).
    fn table(&self, freq: &[f64], pos: f64, cos: &mut [f32], sin: &mut [f32]) {
        for (i, (c, s)) in cos.iter_mut().zip(sin.iter_mut()).enumerate() {
            let extrap = pos * freq[i];
            let interp = self.freq_scale * extrap;
            let theta = match self.mix.get(i) {
                Some(&m) => interp * (1.0 - m) + extrap * m,
                None => interp,
            };
            let (sn, cs) = theta.sin_cos();
            *c = (cs * self.mscale) as f32;
            *s = (sn * self.mscale) as f32;
        }
    }
}

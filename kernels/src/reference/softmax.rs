//! soft_max (ggml's soft_max_ext) and diag_mask_inf.
//!
//! soft_max, per row (i1, i2, i3) of src0: `y = softmax(x * scale + slope * mask_row)`
//! where `mask_row = mask[:, i1, i2 % mask.ne2, i3 % mask.ne3]` (the mask may have
//! more rows than src0: row i1 is used), and `slope` is the ALiBi slope of head
//! `h = i2` when `max_bias > 0`, else 1 (see [`alibi_slope`]).
//!
//! Choice: a row whose logits are all -inf (every position masked) yields all
//! zeros rather than NaN. ggml's CPU kernel produces NaN there (0/0); callers
//! never rely on either.

use super::dense::Dense;

/// ggml's ALiBi slope of head `h` out of `n_head`: with `n = 2^floor(log2(n_head))`,
/// `m0 = 2^(-max_bias / n)`, `m1 = 2^(-(max_bias / 2) / n)`, the slope is
/// `m0^(h + 1)` for `h < n`, else `m1^(2 (h - n) + 1)`. 1 when `max_bias <= 0`.
pub fn alibi_slope(max_bias: f32, n_head: i64, h: i64) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let max_bias = f64::from(max_bias);
    let n_head_log2 = 1i64 << (63 - n_head.max(1).leading_zeros());
    let n = n_head_log2 as f64;
    let m0 = 2f64.powf(-max_bias / n);
    let m1 = 2f64.powf(-(max_bias / 2.0) / n);
    if h < n_head_log2 {
        m0.powf((h + 1) as f64)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f64)
    }
}

/// Softmax of `row` in place; all-(-inf) rows become zeros.
fn softmax_in_place(row: &mut [f64]) {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    if max == f64::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

/// soft_max_ext of `a` with optional `mask`.
pub(crate) fn soft_max(a: &Dense, mask: Option<&Dense>, scale: f32, max_bias: f32) -> Dense {
    let mut out = a.clone();
    let scale = f64::from(scale);
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            let slope = alibi_slope(max_bias, a.ne[2], i2);
            for i1 in 0..a.ne[1] {
                let row = out.row_mut(i1, i2, i3);
                let mask_row = mask.map(|m| m.row(i1, i2 % m.ne[2], i3 % m.ne[3]));
                for (i0, v) in row.iter_mut().enumerate() {
                    *v *= scale;
                    if let Some(m) = mask_row {
                        *v += slope * m[i0];
                    }
                }
                softmax_in_place(row);
            }
        }
    }
    out
}

/// Element (i0, i1, ..) becomes -inf where `i0 > n_past + i1`; others are kept.
pub(crate) fn diag_mask_inf(a: &Dense, n_past: i64) -> Dense {
    let mut out = a.clone();
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            for i1 in 0..a.ne[1] {
                let row = out.row_mut(i1, i2, i3);
                for (i0, v) in row.iter_mut().enumerate() {
                    if i0 as i64 > n_past + i1 {
                        *v = f64::NEG_INFINITY;
                    }
                }
            }
        }
    }
    out
}

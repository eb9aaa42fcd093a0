//! diag_mask_inf and soft_max (ggml's soft_max_ext: scale, optional F32/F16
//! mask broadcast over dims 2 and 3, ALiBi slopes per head = dim 2).
//!
//! soft_max choice, as the reference: a row whose logits are all -inf gives
//! zeros. Sums accumulate in f64; exp is std's f32 exp (this is the fallback:
//! the JIT kernel is the fast one).

use super::rows::{RowIo, scratch_row, sum_f64};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};
use kernels::reference::alibi_slope;

/// Prepares diag_mask_inf of `a` into `dst`: element i0 of row i1 becomes -inf
/// where `i0 > n_past + i1`.
pub(super) fn prepare_diag(
    op: &Op,
    n_past: i64,
    dst: RawTensor,
    a: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    need(op, a.dtype.is_float() && dst.dtype.is_float(), || {
        dtypes(&dst, &[a])
    })?;
    need(op, dst.ne == a.ne, || {
        format!("src0 {} and dst {} differ", shape(&a), shape(&dst))
    })?;
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let ne0 = a.ne[0] as usize;
    let name = format!("diag_mask_inf {} -> {}", a.dtype, dst.dtype);
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            let [i1, i2, i3] = a.row_coords(r);
            let keep = (n_past + i1 as i64 + 1).clamp(0, ne0 as i64) as usize;
            // SAFETY: a row of both (same extents); the dst row is ours.
            unsafe {
                let d = dst.row_ptr(i1, i2, i3);
                let x = ai.view(a.row_ptr(i1, i2, i3), ne0, &mut x_buf, d, di.span(ne0));
                let y = di.target(d, ne0, &mut y_buf);
                y[..keep].copy_from_slice(&x[..keep]);
                y[keep..].fill(f32::NEG_INFINITY);
                di.commit(d, y);
            }
        }
    }))
}

/// Prepares soft_max of `srcs = [logits, mask?]` into `dst`.
pub(super) fn prepare_soft_max(
    op: &Op,
    scale: f32,
    max_bias: f32,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let a = srcs[0];
    let mask = srcs.get(1).copied();
    let mask_ok = mask.is_none_or(|m| matches!(m.dtype, DType::F32 | DType::F16));
    need(
        op,
        a.dtype.is_float() && dst.dtype.is_float() && mask_ok,
        || dtypes(&dst, srcs),
    )?;
    need(
        op,
        dst.ne == a.ne
            && mask.is_none_or(|m| {
                m.ne[0] == a.ne[0]
                    && m.ne[1] >= a.ne[1]
                    && a.ne[2] % m.ne[2] == 0
                    && a.ne[3] % m.ne[3] == 0
            }),
        || {
            let m = mask.map(|m| shape(&m)).unwrap_or_default();
            format!(
                "logits {}, mask {m} and dst {} do not fit",
                shape(&a),
                shape(&dst)
            )
        },
    )?;
    let slopes: Vec<f32> = (0..a.ne[2])
        .map(|h| alibi_slope(max_bias, a.ne[2], h) as f32)
        .collect();
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let mi = mask.map(|m| RowIo::new(&m));
    let ne0 = a.ne[0] as usize;
    let name = format!("soft_max {} -> {}", a.dtype, dst.dtype);
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut m_buf = scratch_row(mask.is_some(), ne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            let [i1, i2, i3] = a.row_coords(r);
            // SAFETY: a row of src0 and dst (same extents), the mask row is
            // inside the mask (dims 2, 3 broadcast by modulo, ne1 >= src0's);
            // the dst row is ours and `view` copies sources that overlap it.
            unsafe {
                let d = dst.row_ptr(i1, i2, i3);
                let span = di.span(ne0);
                let x = ai.view(a.row_ptr(i1, i2, i3), ne0, &mut x_buf, d, span);
                let y = di.target(d, ne0, &mut y_buf);
                match (mask, mi) {
                    (Some(m), Some(mi)) => {
                        let mp = m.row_ptr(i1, i2 % m.ne[2] as usize, i3 % m.ne[3] as usize);
                        let mv = mi.view(mp, ne0, &mut m_buf, d, span);
                        let slope = slopes[i2];
                        for ((o, &v), &mk) in y.iter_mut().zip(x).zip(mv) {
                            *o = v * scale + slope * mk;
                        }
                    }
                    _ => {
                        for (o, &v) in y.iter_mut().zip(x) {
                            *o = v * scale;
                        }
                    }
                }
                softmax_in_place(y);
                di.commit(d, y);
            }
        }
    }))
}

/// Softmax of `y` in place; an all -inf row becomes zeros.
fn softmax_in_place(y: &mut [f32]) {
    let max = y.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        y.fill(0.0);
        return;
    }
    for v in y.iter_mut() {
        *v = (*v - max).exp();
    }
    let inv = (1.0 / sum_f64(y)) as f32;
    for v in y.iter_mut() {
        *v *= inv;
    }
}

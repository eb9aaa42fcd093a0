//! Row normalisation fallbacks: rms_norm `x / sqrt(mean(x^2) + eps)` and norm
//! `(x - mean) / sqrt(var + eps)` (population variance, two passes as the
//! reference). Sums in f64, the final scaling in f32.

use super::rows::{RowIo, scratch_row, sum_f64, sum_sq_dev_f64, sum_sq_f64};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::Op;

/// Prepares rms_norm or norm of `a` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    a: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (eps, rms) = match *op {
        Op::RmsNorm { eps } => (eps, true),
        Op::Norm { eps } => (eps, false),
        _ => return Err(super::unsupported(op, "not a norm".into())),
    };
    need(op, a.dtype.is_float() && dst.dtype.is_float(), || {
        dtypes(&dst, &[a])
    })?;
    need(op, dst.ne == a.ne, || {
        format!("src0 {} and dst {} differ", shape(&a), shape(&dst))
    })?;
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let ne0 = a.ne[0] as usize;
    let eps = f64::from(eps);
    let name = format!("{} {} -> {} (fallback)", op.name(), a.dtype, dst.dtype);
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            // SAFETY: r is a row of both (same extents); dst row r is ours and
            // `view` copies the source row when it overlaps it.
            unsafe {
                let d = dst.flat_row_ptr(r);
                let x = ai.view(a.flat_row_ptr(r), ne0, &mut x_buf, d, di.span(ne0));
                let y = di.target(d, ne0, &mut y_buf);
                if rms {
                    let inv = (1.0 / (sum_sq_f64(x) / ne0 as f64 + eps).sqrt()) as f32;
                    for (o, &v) in y.iter_mut().zip(x) {
                        *o = v * inv;
                    }
                } else {
                    let mean = sum_f64(x) / ne0 as f64;
                    let var = sum_sq_dev_f64(x, mean) / ne0 as f64;
                    let inv = (1.0 / (var + eps).sqrt()) as f32;
                    let m = mean as f32;
                    for (o, &v) in y.iter_mut().zip(x) {
                        *o = (v - m) * inv;
                    }
                }
                di.commit(d, y);
            }
        }
    }))
}

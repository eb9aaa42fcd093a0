//! argsort: the I32 indices that sort each row, ascending or descending
//! (ggml's argsort; its first k of a descending row are a top-k). Equal
//! values keep index order (a stable sort by `f32::total_cmp`), as the
//! reference does.
//!
//! Invariant: one row per unit; dst has src0's extents.

use super::rows::{RowIo, scratch_row};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Prepares argsort of `a` into the I32 `dst`.
pub(super) fn prepare(
    op: &Op,
    descending: bool,
    dst: RawTensor,
    a: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    need(op, a.dtype.is_float() && dst.dtype == DType::I32, || {
        dtypes(&dst, &[a])
    })?;
    need(op, dst.ne == a.ne, || {
        format!("src0 {} and dst {} differ", shape(&a), shape(&dst))
    })?;
    let ai = RowIo::new(&a);
    let ne0 = a.ne[0] as usize;
    let name = format!("argsort {} -> i32", a.dtype).to_lowercase();
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut buf = scratch_row(!ai.direct(), ne0);
        let mut order: Vec<usize> = Vec::with_capacity(ne0);
        for r in rows {
            // SAFETY: r is a row of src0 and of dst (same extents); dst's row
            // is this thread's, and an I32 dst never overlaps a float src0
            // (a sort's result owns its memory).
            unsafe {
                let x = ai.view(a.flat_row_ptr(r), ne0, &mut buf, std::ptr::null(), 0);
                order.clear();
                order.extend(0..ne0);
                order.sort_by(|&i, &j| {
                    let o = x[i].total_cmp(&x[j]);
                    if descending { o.reverse() } else { o }
                });
                let d = dst.flat_row_ptr(r);
                for (i, &v) in order.iter().enumerate() {
                    d.add(i * dst.nb[0] as usize)
                        .cast::<i32>()
                        .write_unaligned(v as i32);
                }
            }
        }
    }))
}

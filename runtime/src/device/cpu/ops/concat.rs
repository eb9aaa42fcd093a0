//! concat: src1 follows src0 along `dim`. Pure data movement (one dtype), one
//! dst row per unit: along dim 0 each dst row is a src0 row then a src1 row,
//! along dims 1..3 each dst row is one row of either source.

use super::rows::{RowIo, copy_elems};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::Op;

/// Prepares concat of `srcs = [a, b]` along `dim` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
    dim: usize,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (a, b) = (srcs[0], srcs[1]);
    need(op, a.dtype == b.dtype && a.dtype == dst.dtype, || {
        dtypes(&dst, srcs)
    })?;
    let fits = dim < 4
        && (0..4).all(|d| {
            let joined = if d == dim { a.ne[d] + b.ne[d] } else { a.ne[d] };
            (d == dim || a.ne[d] == b.ne[d]) && dst.ne[d] == joined
        });
    need(op, fits, || {
        format!(
            "{} and {} do not join along dim {dim} into {}",
            shape(&a),
            shape(&b),
            shape(&dst)
        )
    })?;
    let (ai, bi, di) = (RowIo::new(&a), RowIo::new(&b), RowIo::new(&dst));
    let dtype = dst.dtype;
    let ne0 = dst.ne[0] as usize;
    let (a0, b0) = (a.ne[0] as usize, b.ne[0] as usize);
    // Byte offset of src1's part of a dst row when joining along dim 0.
    let b_at = a0 / dtype.block_elems() as usize * di.nb0;
    let name = format!("concat {dtype} dim {dim}");
    Ok(unit_kernel(name, dst.n_rows(), move |rows| {
        for r in rows {
            let c = dst.row_coords(r);
            // SAFETY: c is a dst row; the source row picked below is inside
            // that source (shapes checked at prepare); dst rows are ours.
            unsafe {
                let d = dst.row_ptr(c[0], c[1], c[2]);
                if dim == 0 {
                    copy_elems(dtype, a.row_ptr(c[0], c[1], c[2]), ai.nb0, d, di.nb0, a0);
                    let s = b.row_ptr(c[0], c[1], c[2]);
                    copy_elems(dtype, s, bi.nb0, d.add(b_at), di.nb0, b0);
                } else if (c[dim - 1] as i64) < a.ne[dim] {
                    copy_elems(dtype, a.row_ptr(c[0], c[1], c[2]), ai.nb0, d, di.nb0, ne0);
                } else {
                    let mut cb = c;
                    cb[dim - 1] -= a.ne[dim] as usize;
                    copy_elems(
                        dtype,
                        b.row_ptr(cb[0], cb[1], cb[2]),
                        bi.nb0,
                        d,
                        di.nb0,
                        ne0,
                    );
                }
            }
        }
    }))
}

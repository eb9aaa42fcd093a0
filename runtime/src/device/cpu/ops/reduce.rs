//! Row reductions: sum_rows and mean (dst ne0 = 1, f64 accumulation) and
//! argmax (I32 index of the *last* maximum; NaN never wins; an all -inf or
//! all-NaN row gives the last index or 0 exactly as the reference).

use super::rows::{RowIo, scratch_row, sum_f64};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Prepares sum_rows, mean or argmax of `a` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    a: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let is_argmax = matches!(op, Op::Argmax);
    let dst_ok = if is_argmax {
        dst.dtype == DType::I32
    } else {
        dst.dtype.is_float()
    };
    need(op, a.dtype.is_float() && dst_ok, || dtypes(&dst, &[a]))?;
    let want = if is_argmax {
        [a.ne[1], 1, 1, 1]
    } else {
        [1, a.ne[1], a.ne[2], a.ne[3]]
    };
    need(
        op,
        dst.ne == want && (!is_argmax || (a.ne[2] == 1 && a.ne[3] == 1)),
        || {
            format!(
                "src0 {} gives {}, not dst {}",
                shape(&a),
                ne_str(want),
                shape(&dst)
            )
        },
    )?;
    let ai = RowIo::new(&a);
    let di = RowIo::new(&dst);
    let ne0 = a.ne[0] as usize;
    let name = format!("{} {} -> {}", op.name(), a.dtype, dst.dtype);
    let mean = matches!(op, Op::Mean);
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut buf = scratch_row(!ai.direct(), ne0);
        for r in rows {
            // SAFETY: r is a row of src0; dst element r (argmax) or row r's only
            // element (sum, mean) is this thread's. Nothing writes src0.
            unsafe {
                let x = ai.view(a.flat_row_ptr(r), ne0, &mut buf, std::ptr::null(), 0);
                if is_argmax {
                    let d = dst.row_ptr(0, 0, 0).add(r * dst.nb[0] as usize);
                    d.cast::<i32>().write_unaligned(last_max(x) as i32);
                } else {
                    let s = sum_f64(x);
                    let v = if mean { s / ne0 as f64 } else { s };
                    di.store(dst.flat_row_ptr(r), &[v as f32]);
                }
            }
        }
    }))
}

/// Index of the last maximum, as the reference's `v >= best` scan (NaN never
/// wins; an all -inf row gives its last index, an all-NaN row 0), in two
/// vectorisable passes: the maximum, then the last element equal to it.
fn last_max(x: &[f32]) -> usize {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            // `v > l` is false for NaN, so NaN never becomes the maximum.
            *l = if v > *l { v } else { *l };
        }
    }
    let mut max = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for &v in tail {
        max = if v > max { v } else { max };
    }
    x.iter().rposition(|&v| v == max).unwrap_or(0)
}

fn ne_str(ne: [i64; 4]) -> String {
    ir::layout::fmt_ne(&ne)
}

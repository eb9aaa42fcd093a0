//! get_rows: `dst[:, j, k1, k2] = src0[:, idx[j, k1, k2], k1, k2]`, converting
//! to dst's dtype (quantized tables are dequantized row by row); get_rows_part:
//! the same from rows `[start, start + src0.ne1)` of a larger table, an index
//! outside them giving a row of zeros (dst is f32).
//!
//! Invariant: one dst row per unit; a same-dtype row is a memcpy, an F32 dst
//! row is decoded into in place, anything else goes through one scratch row.
//! An index outside the table panics naming it (never reads out of bounds);
//! for a part, an index outside the part's rows reads nothing.

use super::rows::{RowIo, copy_elems, scratch_row};
use super::{dtypes, need, read_i32, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Prepares get_rows of `srcs = [table, indices]` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (a, idx) = (srcs[0], srcs[1]);
    let part = match *op {
        Op::GetRowsPart { start } => {
            need(op, dst.dtype == DType::F32 && a.dtype != DType::I32, || {
                format!("a part is read as f32 rows: {}", dtypes(&dst, srcs))
            })?;
            Some(start)
        }
        _ => None,
    };
    let same = a.dtype == dst.dtype;
    need(
        op,
        idx.dtype == DType::I32 && (same || (dst.dtype != DType::I32 && a.dtype != DType::I32)),
        || dtypes(&dst, srcs),
    )?;
    need(
        op,
        idx.ne[3] == 1
            && a.ne[2] == idx.ne[1]
            && a.ne[3] == idx.ne[2]
            && dst.ne == [a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]],
        || {
            format!(
                "table {}, indices {} and dst {} do not fit",
                shape(&a),
                shape(&idx),
                shape(&dst)
            )
        },
    )?;
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let ne0 = a.ne[0] as usize;
    let n_table = a.ne[1];
    let name = match part {
        Some(start) => format!(
            "get_rows_part {} -> {} from row {start}",
            a.dtype, dst.dtype
        ),
        None => format!("get_rows {} -> {}", a.dtype, dst.dtype),
    };
    Ok(unit_kernel(name, dst.n_rows(), move |rows| {
        let mut buf = scratch_row(!same && !di.direct(), ne0);
        for r in rows {
            let [j, k1, k2] = dst.row_coords(r);
            // SAFETY: (j, k1, k2) is a dst row, so it indexes idx (shapes checked);
            // the table row is checked below; dst rows are this thread's share.
            unsafe {
                let i = read_i32(idx.row_ptr(k1, k2, 0).add(j * idx.nb[0] as usize));
                let d = dst.row_ptr(j, k1, k2);
                let i = match part {
                    None => i64::from(i),
                    Some(start) => {
                        // `start` comes from the plan: any i64 (no overflow).
                        let r = i64::from(i).checked_sub(start).unwrap_or(-1);
                        if !(0..n_table).contains(&r) {
                            // Another device's row: this part adds zeros.
                            std::slice::from_raw_parts_mut(d.cast::<f32>(), ne0).fill(0.0);
                            continue;
                        }
                        r
                    }
                };
                assert!(
                    (0..n_table).contains(&i),
                    "get_rows: index {i} is outside the table's 0..{n_table} rows"
                );
                let s = a.row_ptr(i as usize, k1, k2);
                if same {
                    copy_elems(a.dtype, s, ai.nb0, d, di.nb0, ne0);
                } else if di.direct() {
                    ai.load(s, std::slice::from_raw_parts_mut(d.cast::<f32>(), ne0));
                } else {
                    ai.load(s, &mut buf);
                    di.store(d, &buf);
                }
            }
        }
    }))
}

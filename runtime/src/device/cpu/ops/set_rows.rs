//! set_rows: `dst[:, idx[i, i2 % idx.ne1, i3 % idx.ne2], i2, i3] = rows[:, i, i2, i3]`,
//! converting to dst's dtype (quantizing whole rows). dst is the view of src0
//! the result aliases; rows not named by an index keep their bytes.
//!
//! Invariant: one *destination* row per unit: the thread owning a destination
//! row scans the source rows of its plane in order and writes those naming it.
//! With repeated indices the later row wins on any number of threads, as in
//! the reference (ggml splits by source row, so its repeated indices race).
//! Every thread reads every index of its planes: O(rows) index reads per plane
//! per thread, against O(rows x ne0) bytes written.

use super::rows::{RowIo, copy_elems, scratch_row};
use super::{dtypes, need, read_i32, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Prepares set_rows of `srcs = [destination, rows, indices]` through `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (base, rows, idx) = (srcs[0], srcs[1], srcs[2]);
    need(
        op,
        rows.dtype.is_float()
            && idx.dtype == DType::I32
            && dst.dtype == base.dtype
            && dst.dtype != DType::I32,
        || dtypes(&dst, srcs),
    )?;
    need(
        op,
        rows.ne[0] == dst.ne[0]
            && idx.ne[0] == rows.ne[1]
            && rows.ne[2] % idx.ne[1] == 0
            && rows.ne[3] % idx.ne[2] == 0
            && idx.ne[3] == 1
            && rows.ne[2] == dst.ne[2]
            && rows.ne[3] == dst.ne[3],
        || {
            format!(
                "destination {}, rows {} and indices {} do not fit",
                shape(&dst),
                shape(&rows),
                shape(&idx)
            )
        },
    )?;
    let (ri, di) = (RowIo::new(&rows), RowIo::new(&dst));
    let same = rows.dtype == dst.dtype;
    // llama.cpp's transposed V cache is written one element per index
    // (thousands per token batch): converted inline, not through a row.
    let scalar_f16 = rows.ne[0] == 1 && rows.dtype == DType::F32 && dst.dtype == DType::F16;
    let ne0 = rows.ne[0] as usize;
    let n_dst = dst.ne[1];
    let (in1, in2) = (idx.ne[1] as usize, idx.ne[2] as usize);
    let name = format!("set_rows {} -> {}", rows.dtype, dst.dtype);
    let (n_src, planes_ne2) = (rows.ne[1] as usize, dst.ne[2] as usize);
    let n_dst = n_dst as usize;
    Ok(unit_kernel(name, dst.n_rows(), move |units| {
        let mut buf = scratch_row(!same, ne0);
        let mut u = units.start;
        while u < units.end {
            // This thread's destination rows lo..hi of plane (i2, i3).
            let plane = u / n_dst;
            let (lo, hi) = (u % n_dst, (units.end - plane * n_dst).min(n_dst));
            let (i2, i3) = (plane % planes_ne2, plane / planes_ne2);
            // SAFETY: row (i2, i3) of idx, broadcast by modulo.
            let idx_row = unsafe { idx.row_ptr(i2 % in1, i3 % in2, 0) };
            for i in 0..n_src {
                // SAFETY: element i of that row is inside idx, the destination
                // row is checked below, source rows are in bounds.
                unsafe {
                    let k = read_i32(idx_row.add(i * idx.nb[0] as usize));
                    assert!(
                        (0..n_dst as i64).contains(&i64::from(k)),
                        "set_rows: index {k} is outside the destination's 0..{n_dst} rows"
                    );
                    let k = k as usize;
                    if !(lo..hi).contains(&k) {
                        continue;
                    }
                    let s = rows.row_ptr(i, i2, i3);
                    let d = dst.row_ptr(k, i2, i3);
                    if scalar_f16 {
                        let x = s.cast::<f32>().read_unaligned();
                        d.cast::<u16>()
                            .write_unaligned(half::f16::from_f32(x).to_bits());
                    } else if same {
                        copy_elems(dst.dtype, s, ri.nb0, d, di.nb0, ne0);
                    } else {
                        let v = ri.view(s, ne0, &mut buf, d, di.span(ne0));
                        di.store(d, v);
                    }
                }
            }
            u = plane * n_dst + hi;
        }
    }))
}

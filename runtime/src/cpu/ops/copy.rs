//! cpy and cont: src0's elements in flat logical order written into dst's
//! elements in flat logical order (shapes may differ, counts agree), converting
//! dtype (F32/F16/BF16 between each other, to quantized by whole rows).
//!
//! Three paths, picked at prepare:
//! - both contiguous: the data is one long run cut in chunks of [`CHUNK`]
//!   elements (a multiple of every block size), memmove or convert per chunk;
//! - same row length: row to row;
//! - otherwise: each dst row gathers its values from one or more source rows
//!   (a source row cut mid-way needs a plain, not block-quantized, source).
//!
//! For cpy, dst is the view of src1 the result aliases: it is written through.

use super::rows::{RowIo, copy_elems, elem_bytes, overlaps, scratch_row};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Elements per unit of the contiguous path (a multiple of 256, the largest block).
const CHUNK: usize = 16 * 1024;

/// Prepares cpy or cont of `src` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    src: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let same = src.dtype == dst.dtype;
    let detail = || dtypes(&dst, &[src]);
    need(
        op,
        same || (src.dtype != DType::I32 && dst.dtype != DType::I32),
        detail,
    )?;
    need(op, src.n_elements() == dst.n_elements(), || {
        format!(
            "src0 {} and dst {} differ in element count",
            shape(&src),
            shape(&dst)
        )
    })?;
    let name = format!("{} {} -> {}", op.name(), src.dtype, dst.dtype);
    if src.is_contiguous() && dst.is_contiguous() {
        return Ok(linear(name, dst, src));
    }
    if src.ne[0] == dst.ne[0] {
        return Ok(by_rows(name, dst, src));
    }
    need(op, !src.dtype.is_quantized(), || {
        format!(
            "{}: a strided {} source {} cannot be re-cut into rows of {}",
            dtypes(&dst, &[src]),
            src.dtype,
            shape(&src),
            dst.ne[0]
        )
    })?;
    Ok(regroup(name, dst, src))
}

/// Both contiguous: chunks of one long run.
fn linear(name: String, dst: RawTensor, src: RawTensor) -> Box<dyn CpuKernel> {
    let n = src.n_elements();
    let (si, di) = (RowIo::new(&src), RowIo::new(&dst));
    let same = src.dtype == dst.dtype;
    // Byte offset of flat element `e` (a block boundary for quantized dtypes).
    let at = |t: &RawTensor, e: usize| e / t.dtype.block_elems() as usize * elem_bytes(t.dtype);
    unit_kernel(name, n.div_ceil(CHUNK), move |units| {
        let mut buf = scratch_row(!same, CHUNK);
        for u in units {
            let start = u * CHUNK;
            let len = CHUNK.min(n - start);
            // SAFETY: [start, start + len) is inside both tensors (equal counts),
            // chunk boundaries are block boundaries, dst chunks are ours.
            unsafe {
                let s = src.row_ptr(0, 0, 0).add(at(&src, start));
                let d = dst.row_ptr(0, 0, 0).add(at(&dst, start));
                if same {
                    std::ptr::copy(s, d, at(&src, len));
                } else {
                    let v = si.view(s, len, &mut buf, d, di.span(len));
                    di.store(d, v);
                }
            }
        }
    })
}

/// Same row length: row r of src to row r of dst.
fn by_rows(name: String, dst: RawTensor, src: RawTensor) -> Box<dyn CpuKernel> {
    let (si, di) = (RowIo::new(&src), RowIo::new(&dst));
    let same = src.dtype == dst.dtype;
    let ne0 = src.ne[0] as usize;
    unit_kernel(name, dst.n_rows(), move |rows| {
        let mut buf = scratch_row(!same, ne0);
        for r in rows {
            // SAFETY: r is a row of both (same row length and count); dst rows are ours.
            unsafe {
                let s = src.flat_row_ptr(r);
                let d = dst.flat_row_ptr(r);
                if same {
                    copy_elems(src.dtype, s, si.nb0, d, di.nb0, ne0);
                } else if di.direct() && !overlaps(s, si.span(ne0), d, ne0 * 4) {
                    si.load(s, std::slice::from_raw_parts_mut(d.cast::<f32>(), ne0));
                } else {
                    let v = si.view(s, ne0, &mut buf, d, di.span(ne0));
                    di.store(d, v);
                }
            }
        }
    })
}

/// Different row lengths: each dst row gathers the run of source elements
/// that flat order assigns it (plain source dtypes only).
fn regroup(name: String, dst: RawTensor, src: RawTensor) -> Box<dyn CpuKernel> {
    let (si, di) = (RowIo::new(&src), RowIo::new(&dst));
    let same = src.dtype == dst.dtype;
    let (sne0, dne0) = (src.ne[0] as usize, dst.ne[0] as usize);
    unit_kernel(name, dst.n_rows(), move |rows| {
        let mut buf = scratch_row(!same, dne0);
        for r in rows {
            let flat = r * dne0;
            let (mut srow, mut i0) = (flat / sne0, flat % sne0);
            let mut k = 0;
            // SAFETY: the runs walk source elements flat..flat + dne0, all inside
            // src (equal counts); dst row r is ours.
            unsafe {
                let d = dst.flat_row_ptr(r);
                while k < dne0 {
                    let len = (sne0 - i0).min(dne0 - k);
                    let s = src.flat_row_ptr(srow).add(i0 * si.nb0);
                    if same {
                        copy_elems(src.dtype, s, si.nb0, d.add(k * di.nb0), di.nb0, len);
                    } else {
                        si.load(s, &mut buf[k..k + len]);
                    }
                    k += len;
                    i0 = 0;
                    srow += 1;
                }
                if !same {
                    di.store(d, &buf);
                }
            }
        }
    })
}

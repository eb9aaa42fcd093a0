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
use crate::device::cpu::{CpuKernel, RawTensor};
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

/// Tile of the transposing path: [`TILE_ROWS`] source rows by [`TILE_COLS`]
/// columns. Each source column of the tile is a contiguous run (a transposed
/// source has `nb1` = the element size), read whole once, so power-of-two
/// strides that alias one cache set cost nothing; each dst row then gets a
/// contiguous run of [`TILE_COLS`] values.
const TILE_ROWS: usize = 128;
const TILE_COLS: usize = 128;

/// Same row length: row r of src to row r of dst. A source with strided
/// elements (transposed) goes through [`transposing`] unless dst is quantized
/// (its rows are encoded whole).
fn by_rows(name: String, dst: RawTensor, src: RawTensor) -> Box<dyn CpuKernel> {
    let (si, di) = (RowIo::new(&src), RowIo::new(&dst));
    let same = src.dtype == dst.dtype;
    let ne0 = src.ne[0] as usize;
    let n_rows = dst.n_rows();
    if !si.packed && !dst.dtype.is_quantized() {
        return transposing(name, dst, src);
    }
    unit_kernel(name, n_rows, move |rows| {
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

/// Same row length, strided source elements, plain dst: tiles of
/// [`TILE_ROWS`] consecutive i1 rows of one (i2, i3) (a uniform `nb1` apart)
/// by [`TILE_COLS`] columns, staged through an f32 tile. Same-dtype I32 moves
/// as F32 bits, which the round trip keeps exactly (as it keeps F16, BF16).
fn transposing(name: String, dst: RawTensor, src: RawTensor) -> Box<dyn CpuKernel> {
    let as_bits = |t: &RawTensor| {
        let mut io = RowIo::new(t);
        if t.dtype == DType::I32 {
            io.dtype = DType::F32;
        }
        io
    };
    let di = as_bits(&dst);
    // The source read along i1: a column of the tile is a strided run.
    let mut col = as_bits(&src);
    col.nb0 = src.nb[1] as usize;
    col.packed = col.nb0 == elem_bytes(src.dtype);
    let snb0 = src.nb[0] as usize;
    let [ne0, ne1, ne2] = [0, 1, 2].map(|d| src.ne[d] as usize);
    let blocks = ne1.div_ceil(TILE_ROWS);
    let n_units = blocks * src.n_rows() / ne1;
    unit_kernel(name, n_units, move |units| {
        let mut tile = vec![0f32; TILE_ROWS * TILE_COLS];
        let mut row = [0f32; TILE_COLS];
        let mut d = [std::ptr::null_mut(); TILE_ROWS];
        for u in units {
            let (blk, outer) = (u % blocks, u / blocks);
            let (i1, i2, i3) = (blk * TILE_ROWS, outer % ne2, outer / ne2);
            let g = TILE_ROWS.min(ne1 - i1);
            let r0 = i1 + ne1 * outer;
            for (k, dk) in d.iter_mut().enumerate().take(g) {
                // SAFETY: r0 + k is a row of both (same row length and count).
                *dk = unsafe { dst.flat_row_ptr(r0 + k) };
            }
            // SAFETY: source rows i1..i1 + g of (i2, i3) are inside src.
            let s0 = unsafe { src.row_ptr(i1, i2, i3) }.cast_const();
            for c in (0..ne0).step_by(TILE_COLS) {
                let len = TILE_COLS.min(ne0 - c);
                for cc in 0..len {
                    // SAFETY: column c + cc of the g source rows (plain dtype).
                    unsafe {
                        col.load(s0.add((c + cc) * snb0), &mut tile[cc * TILE_ROWS..][..g]);
                    }
                }
                for (k, &dk) in d.iter().enumerate().take(g) {
                    for (cc, v) in row[..len].iter_mut().enumerate() {
                        *v = tile[cc * TILE_ROWS + k];
                    }
                    // SAFETY: columns c..c + len of a dst row this thread owns.
                    unsafe { di.store(dk.add(c * di.nb0), &row[..len]) };
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

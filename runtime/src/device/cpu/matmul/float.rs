//! mul_mat through the `gemm` crate (f32), for every src0 dtype except the
//! integer-kernel ones (Q8_0, Q4_0, Q4_1).
//!
//! - f32 operands are read in place through their strides: gemm takes any row
//!   and column stride, so permuted views (K^T Q, V softmax on views of the KV
//!   cache) need no copy.
//! - src1 that is not f32 is converted once per run into the shared scratch
//!   (phase 1, rows split over threads, then a barrier).
//! - src0 that is not f32 (F16, BF16, K-quants) is converted to f32 in blocks
//!   of rows into a per-thread buffer, each block then multiplied by gemm.
//!   Why this route for F16 rather than gemm's f16 path: on x86 without
//!   AVX512-FP16, gemm's f16 kernel widens its packed f16 panels to f32 anyway,
//!   but it also needs src1 rounded to f16 and writes f16 results (two
//!   roundings that f32 avoids) which then need widening into dst. Converting
//!   src0 costs O(M K) per run against O(M N K) multiply-adds, and for small N
//!   (decode) the block stays in L1/L2, so the weights are read from memory once.
//!
//! - times one column (decode), at most `MATVEC_ROWS` src0 rows per gemm
//!   call on both routes, so every row takes the same gemm kernel.
//!
//! Threads: gemm runs with `Parallelism::None` inside each pool thread; the
//! pool divides dst into matrices and ranges of rows or columns ([`Split`]).
//!
//! Invariant: with one src1 column, a dst element's bits depend only on its
//! src0 row, the column and K, never on M, the row range or the thread split.

use super::convert::row_to_f32;
use super::shape::Geometry;
use super::split::Split;
use crate::device::cpu::{CpuKernel, ThreadCtx};
use gemm::Parallelism;
use ir::DType;
use std::cell::RefCell;

/// Rows of dst per item are multiples of this (gemm's AVX2/AVX-512 f32
/// micro-kernels are 16 or 32 rows tall... any multiple of 16 keeps them whole
/// for all but the last item).
const ALIGN: usize = 16;

/// Most src0 rows per gemm call when src1 has one column (a matrix-vector
/// product, as in decode), and per converted block. gemm computes such a
/// product with its horizontal (dot-product) kernel when `m * n <= 256` and
/// with its gemv kernel above, and the two sum a row's products in different
/// orders. Capped at 256 rows, every row takes the horizontal kernel whatever
/// M and the thread split are, so its value depends only on its own data:
/// attention over the first rows of a KV cache (a decode context bucket)
/// gives, to the bit, the scores and values of attention over the whole
/// masked cache (tests/runtime_windows.rs).
const MATVEC_ROWS: usize = 256;

thread_local! {
    /// Per-thread block of src0 rows widened to f32 (kept across runs).
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// An f32 matrix view: element (kk, x) of batch (b2, b3) at
/// `ptr + kk * s0 + x * s1 + b2 * s2 + b3 * s3` (strides in f32 elements).
#[derive(Clone, Copy)]
struct F32View {
    ptr: *const f32,
    s: [usize; 4],
}

impl F32View {
    fn of_tensor(t: &crate::device::cpu::RawTensor) -> F32View {
        F32View {
            ptr: t.data as *const f32,
            s: t.nb.map(|b| b as usize / 4),
        }
    }
}

/// The prepared kernel.
pub struct GemmMatMul {
    geo: Geometry,
}

impl GemmMatMul {
    /// A kernel for `geo` (any src0 dtype but I32; f32 src0 and src1 are read in place).
    pub fn new(geo: Geometry) -> GemmMatMul {
        GemmMatMul { geo }
    }

    fn converts_src1(&self) -> bool {
        self.geo.src1.dtype != DType::F32
    }

    /// Widens this thread's share of src1's rows into `scratch` (packed f32
    /// `[k, n, ne12, ne13]`).
    ///
    /// # Safety
    /// `scratch` holds `scratch_bytes()` bytes.
    unsafe fn convert_src1(&self, ctx: &ThreadCtx<'_>, scratch: *mut f32) -> F32View {
        let g = &self.geo;
        for r in ctx.share(g.n * g.batches()) {
            let (j, (b2, b3)) = (r % g.n, g.batch_coords(r / g.n));
            // SAFETY: row r of the packed scratch is inside it, and only this
            // thread writes it (its share).
            let out = unsafe { std::slice::from_raw_parts_mut(scratch.add(r * g.k), g.k) };
            // SAFETY: j, b2, b3 are inside src1's extents.
            unsafe {
                row_to_f32(
                    g.src1.dtype,
                    g.src1_row(j, b2, b3),
                    g.src1.nb[0] as usize,
                    out,
                )
            };
        }
        F32View {
            ptr: scratch,
            s: [1, g.k, g.k * g.n, g.k * g.n * g.ne12],
        }
    }

    /// dst rows `rows` x columns `cols` of batch (b2, b3).
    ///
    /// # Safety
    /// The ranges are inside the extents; `src1` views valid f32 data.
    unsafe fn block(
        &self,
        b2: usize,
        b3: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        src1: F32View,
    ) {
        let g = &self.geo;
        let (n, k) = (cols.len(), g.k);
        let d = F32View::of_tensor(&g.dst);
        // SAFETY: cols.start < n and b2, b3 inside src1's extents.
        let rhs = unsafe {
            src1.ptr
                .add(cols.start * src1.s[1] + b2 * src1.s[2] + b3 * src1.s[3])
        };
        // SAFETY: element (rows.start, cols.start, b2, b3) of dst.
        let dst_at = |i: usize| unsafe { g.dst_at(i, cols.start, b2, b3) };
        if g.src0.dtype == DType::F32 {
            let a = F32View::of_tensor(&g.src0);
            // One column: rows in blocks (see MATVEC_ROWS); otherwise one call.
            let step = if n == 1 { MATVEC_ROWS } else { rows.len() };
            for start in rows.clone().step_by(step.max(1)) {
                let m = step.min(rows.end - start);
                // SAFETY: row `start` < rows.end of src0's matrix for (b2, b3).
                let lhs = unsafe { g.src0_row(start, b2, b3) } as *const f32;
                // SAFETY: every view covers the (m x cols x k) block.
                unsafe {
                    gemm_f32(
                        (m, n, k),
                        (dst_at(start), d.s[0], d.s[1]),
                        (lhs, a.s[1], a.s[0]),
                        (rhs, src1.s[0], src1.s[1]),
                    )
                };
            }
            return;
        }
        // Rows per converted block: small enough to stay in L2 when there is
        // little work per row, large enough to amortise gemm's packing of src1.
        let budget = if n <= 8 { 64 << 10 } else { 1 << 20 };
        let mb = (budget / (4 * k)).clamp(ALIGN, MATVEC_ROWS);
        ROWS.with_borrow_mut(|buf| {
            buf.resize(mb * k, 0.0);
            for start in rows.clone().step_by(mb) {
                let m = mb.min(rows.end - start);
                for (r, out) in buf.chunks_exact_mut(k).take(m).enumerate() {
                    // SAFETY: row start + r < rows.end of the matrix for (b2, b3).
                    unsafe {
                        row_to_f32(
                            g.src0.dtype,
                            g.src0_row(start + r, b2, b3),
                            g.src0.nb[0] as usize,
                            out,
                        )
                    };
                }
                // SAFETY: buf holds m packed rows of k; the other views as above.
                unsafe {
                    gemm_f32(
                        (m, n, k),
                        (dst_at(start), d.s[0], d.s[1]),
                        (buf.as_ptr(), k, 1),
                        (rhs, src1.s[0], src1.s[1]),
                    )
                };
            }
        });
    }
}

/// `dst (m x n) = lhs (m x k) * rhs (k x n)`, each matrix given as (pointer,
/// row stride, column stride) in elements.
///
/// # Safety
/// Every element the strides reach is valid; dst does not overlap the inputs.
unsafe fn gemm_f32(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs, dst_cs): (*mut f32, usize, usize),
    (lhs, lhs_rs, lhs_cs): (*const f32, usize, usize),
    (rhs, rhs_rs, rhs_cs): (*const f32, usize, usize),
) {
    // SAFETY: forwarded from the caller; `read_dst` is false, so dst's old
    // contents (NaN poison included) are never read.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs as isize,
            dst_rs as isize,
            false,
            lhs,
            lhs_cs as isize,
            lhs_rs as isize,
            rhs,
            rhs_cs as isize,
            rhs_rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

impl CpuKernel for GemmMatMul {
    fn scratch_bytes(&self) -> usize {
        let g = &self.geo;
        if self.converts_src1() {
            4 * g.k * g.n * g.batches()
        } else {
            0
        }
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        let g = &self.geo;
        let src1 = if self.converts_src1() {
            // SAFETY: scratch has scratch_bytes() bytes, aligned to 64.
            let view = unsafe { self.convert_src1(ctx, scratch as *mut f32) };
            ctx.barrier();
            view
        } else {
            F32View::of_tensor(&g.src1)
        };
        let split = Split::new(g.batches(), g.m, g.n, ctx.nth, ALIGN, false);
        for it in ctx.share(split.items()) {
            let (b, range) = split.item(it);
            let (b2, b3) = g.batch_coords(b);
            let (rows, cols) = if split.along_m {
                (range, 0..g.n)
            } else {
                (0..g.m, range)
            };
            // SAFETY: the item's ranges are inside the extents.
            unsafe { self.block(b2, b3, rows, cols, src1) };
        }
    }

    fn describe(&self) -> String {
        format!(
            "mul_mat {} x {} (gemm f32)",
            self.geo.src0.dtype, self.geo.src1.dtype
        )
    }
}

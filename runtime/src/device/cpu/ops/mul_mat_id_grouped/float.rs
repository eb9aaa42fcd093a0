//! The f32 route: any expert dtype (quantized ones in exact precision, as
//! mul_mat's `float` route), the expert's rows widened to f32 by blocks (F32
//! experts read in place), times its columns gathered in phase 1 (one packed
//! `[k, c]` block), by `gemm` on one thread; each block's results are
//! scattered from a per-thread buffer to the pairs' dst rows.
//!
//! Values: the widening is `matmul::convert::row_to_f32`'s (exactly
//! `kernels::quant::dequantize_row`); sums are f32, as mul_mat's f32 routes.

use super::Moe;
use crate::device::cpu::RawTensor;
use crate::device::cpu::matmul::convert::row_to_f32;
use gemm::Parallelism;
use ir::DType;
use std::ops::Range;

/// Most rows per gemm call (as `matmul::float`'s `MATVEC_ROWS`): with one
/// column gemm then takes its dot-product kernel for every row.
const MAX_ROWS: usize = 256;
/// Fewest rows per block.
const MIN_ROWS: usize = 16;

/// A thread's buffers, kept across runs.
#[derive(Default)]
pub struct Buffers {
    /// A block of expert rows widened to f32.
    rows: Vec<f32>,
    /// A block of results, `[rows, c]` column by column.
    out: Vec<f32>,
}

/// The route's choices, made at prepare time.
pub struct F32Route {
    /// The experts are packed, aligned f32: gemm reads them in place.
    in_place: bool,
    dtype: DType,
}

impl F32Route {
    /// The route for experts `a`.
    pub fn new(a: &RawTensor) -> F32Route {
        F32Route {
            in_place: a.dtype == DType::F32
                && a.nb[0] == 4
                && (a.data as usize).is_multiple_of(4)
                && a.nb.iter().all(|s| s % 4 == 0),
            dtype: a.dtype,
        }
    }

    /// dst rows `rows` of expert `e` for each of its `pairs`, whose
    /// activations are columns `first..first + pairs.len()` of `gathered`
    /// (`[k, n_pairs]`, packed).
    ///
    /// # Safety
    /// `e < n_expert`; `rows` inside `0..n`; `pairs` non-empty, each below
    /// `n_pairs`, and `first + pairs.len() <= n_pairs`; `gathered` holds
    /// phase 1's columns; no other thread writes these dst elements.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rows(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        first: usize,
        gathered: *const f32,
        bufs: &mut Buffers,
    ) {
        let (k, c, di) = (moe.shape.k, pairs.len(), moe.di);
        let a = &moe.a;
        // Rows per block: few columns keep the block in L2 (as mul_mat's
        // float route), many amortise gemm's packing of the columns.
        let budget = if c <= 8 { 64 << 10 } else { 1 << 20 };
        let mb = (budget / (4 * k)).clamp(MIN_ROWS, MAX_ROWS);
        bufs.out.resize(mb * c, 0.0);
        if !self.in_place {
            bufs.rows.resize(mb * k, 0.0);
        }
        // SAFETY: column `first` of the packed [k, n_pairs] matrix.
        let rhs = unsafe { gathered.add(first * k) };
        for start in rows.clone().step_by(mb) {
            let m = mb.min(rows.end - start);
            // SAFETY: in both arms, rows start..start + m of expert e are
            // inside the experts (caller's contract).
            let (lhs, lhs_rs, lhs_cs) = unsafe {
                if self.in_place {
                    let lhs = a.row_ptr(start, e, 0) as *const f32;
                    (lhs, a.nb[1] as usize / 4, a.nb[0] as usize / 4)
                } else {
                    for (r, out) in bufs.rows.chunks_exact_mut(k).take(m).enumerate() {
                        let row = a.row_ptr(start + r, e, 0);
                        row_to_f32(self.dtype, row, a.nb[0] as usize, out);
                    }
                    (bufs.rows.as_ptr(), k, 1)
                }
            };
            // SAFETY: out holds m x c; lhs m rows of k; rhs c columns of k.
            unsafe {
                gemm_f32(
                    (m, c, k),
                    (bufs.out.as_mut_ptr(), 1, m),
                    (lhs, lhs_rs, lhs_cs),
                    (rhs, 1, k),
                )
            };
            for (j, &p) in pairs.iter().enumerate() {
                // SAFETY: p < n_pairs.
                let dst = unsafe { moe.dst_col(p) };
                for (i, &v) in bufs.out[j * m..(j + 1) * m].iter().enumerate() {
                    // SAFETY: row start + i < n of pair p's dst row, owned
                    // by this thread.
                    unsafe { *dst.add((start + i) * di) = v };
                }
            }
        }
    }

    /// How the route reads the experts, for descriptions.
    pub fn describe(&self) -> String {
        if self.in_place {
            "gemm f32".into()
        } else {
            "widened to f32, gemm".into()
        }
    }
}

/// `dst (m x n) = lhs (m x k) * rhs (k x n)`, each matrix given as
/// (pointer, row stride, column stride) in elements (as `matmul::float`).
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
    // contents are never read.
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

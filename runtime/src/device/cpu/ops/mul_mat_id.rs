//! mul_mat_id (a mixture of experts' product): `dst[:, e, t] = experts[:, :,
//! ids[e, t]]^T · b[:, e % b1, t]` for experts `[k, n, n_expert]` of any
//! weight dtype, activations `[k, b1, t]` and I32 ids `[n_used, t]`.
//!
//! Two kernels:
//! - grouped by expert ([`super::mul_mat_id_grouped`]): the fast path, for
//!   an f32 dst (every plan's: `ir::rules` makes it packed f32);
//! - row by row ([`prepare_rows`], here): one dst row (a token's expert
//!   slot) per unit; the token's activation row is read once into f32, each
//!   of the expert's `n` rows is decoded (dequantized) into a scratch row and
//!   dotted with it, summed in f64 in order of k. It takes any float dst, and
//!   is the benchmarks' baseline.
//!
//! Precision: [`prepare`] (what `prepare_op` calls) knows neither the
//! runtime's [`Precision`] nor whether the experts are a weight, so it asks
//! the grouped kernel for [`Precision::Exact`] without repacking: quantized
//! experts are widened to f32 (the f32 route MulMat takes in exact
//! precision), which is the precise side of both precisions. The 8-bit
//! activation routes (`Precision::Fast`, weights repacked at load) are
//! reached through [`super::mul_mat_id_grouped::prepare_mul_mat_id`] by a
//! caller that knows both, as `mul_mat` is prepared.
//!
//! A `mul_mat_id_part` (one device's experts `[first, first + n_expert)` of
//! a larger set, expert parallelism) runs on the same kernels: a slot routed
//! to another part's expert gets a row of zeros.
//!
//! Invariant: an expert id outside the full set (`0..n_expert`, or the
//! part's `0..experts`) panics naming it (the pool reports the panic as the
//! step's failure); no byte outside the experts' tensor is read. Both
//! kernels check every id before using it.

use super::rows::{RowIo, scratch_row};
use super::{check_tensor, dtypes, need, read_i32, shape, unit_kernel, unsupported};
use crate::RuntimeError;
use crate::device::cpu::matmul::Precision;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// The extents of one mul_mat_id, checked once ([`check`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MoeShape {
    /// Dot product length (row length of experts and activations).
    pub k: usize,
    /// Rows per expert (dst's row length).
    pub n: usize,
    /// Experts in the tensor.
    pub n_expert: usize,
    /// Expert slots per token.
    pub n_used: usize,
    /// Tokens.
    pub t: usize,
    /// Activation rows per token: 1 (shared by every slot) or `n_used`.
    pub b1: usize,
    /// The full set's expert that this tensor's expert 0 is (0 but for a
    /// `mul_mat_id_part`).
    pub first: usize,
    /// Experts in the full set (`n_expert` but for a `mul_mat_id_part`).
    pub experts: usize,
}

impl MoeShape {
    /// This tensor's expert for full-set id `id`, `None` when another part
    /// holds it.
    pub fn local(&self, id: usize) -> Option<usize> {
        id.checked_sub(self.first).filter(|&e| e < self.n_expert)
    }
}

/// Checks `srcs = [experts, activations, ids]` and `dst` of one
/// mul_mat_id (arity, what every op kernel assumes of a tensor, dtypes and
/// extents), naming what does not fit: callers other than `prepare_op` need
/// no other check.
pub(crate) fn check(
    op: &Op,
    dst: &RawTensor,
    srcs: &[RawTensor],
) -> Result<MoeShape, RuntimeError> {
    ir::rules::check_arity(op, srcs.len()).map_err(|why| unsupported(op, why))?;
    check_tensor(op, "dst", dst)?;
    for (i, t) in srcs.iter().enumerate() {
        check_tensor(op, &format!("src{i}"), t)?;
    }
    let (a, b, ids) = (srcs[0], srcs[1], srcs[2]);
    need(
        op,
        a.dtype != DType::I32
            && b.dtype.is_float()
            && ids.dtype == DType::I32
            && dst.dtype.is_float(),
        || dtypes(dst, srcs),
    )?;
    let (k, n, n_expert) = (a.ne[0], a.ne[1], a.ne[2]);
    let (n_used, t) = (ids.ne[0], ids.ne[1]);
    let (first, experts) = match *op {
        Op::MulMatIdPart { first, experts } => (first, experts),
        _ => (0, n_expert),
    };
    need(
        op,
        first >= 0
            && first
                .checked_add(n_expert)
                .is_some_and(|end| end <= experts),
        || format!("experts [{first}, {first} + {n_expert}) are not inside 0..{experts}"),
    )?;
    let fits = b.ne[0] == k
        && (b.ne[1] == 1 || b.ne[1] == n_used)
        && b.ne[2] == t
        && b.ne[3] == 1
        && ids.ne[2] == 1
        && ids.ne[3] == 1
        && dst.ne == [n, n_used, t, 1]
        && a.ne[3] == 1
        && (!a.dtype.is_quantized()
            || (k % a.dtype.block_elems() as i64 == 0
                && a.nb[0] as usize == a.dtype.block_bytes() as usize));
    need(op, fits, || {
        format!(
            "experts {}, activations {}, ids {} and dst {} do not fit",
            shape(&a),
            shape(&b),
            shape(&ids),
            shape(dst)
        )
    })?;
    Ok(MoeShape {
        k: k as usize,
        n: n as usize,
        n_expert: n_expert as usize,
        n_used: n_used as usize,
        t: t as usize,
        b1: b.ne[1] as usize,
        first: first as usize,
        experts: experts as usize,
    })
}

/// Reads the expert id of slot `e` of token `tok` and gives this tensor's
/// expert for it (`None`: another part's expert), panicking (naming it)
/// when the id is outside the full set `0..s.experts`.
///
/// # Safety
/// `e < n_used`, `tok < t`: inside the ids' extents.
pub(crate) unsafe fn expert_id(
    ids: &RawTensor,
    e: usize,
    tok: usize,
    s: &MoeShape,
) -> Option<usize> {
    // SAFETY: (e, tok) is inside ids' extents (caller's contract).
    let id = unsafe { read_i32(ids.row_ptr(tok, 0, 0).add(e * ids.nb[0] as usize)) };
    assert!(
        (0..s.experts as i64).contains(&i64::from(id)),
        "mul_mat_id: expert id {id} (slot {e}, token {tok}) is outside 0..{}",
        s.experts
    );
    s.local(id as usize)
}

/// Prepares mul_mat_id of `srcs = [experts, activations, ids]` into `dst`
/// for `prepare_op` (module doc: the precise route, nothing repacked).
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    check(op, &dst, srcs)?;
    // SAFETY: nothing is repacked, so nothing is read now.
    unsafe {
        super::mul_mat_id_grouped::prepare_mul_mat_id_op(op, dst, srcs, Precision::Exact, None)
    }
}

/// The row-by-row kernel (module doc), for any float dst.
pub(crate) fn prepare_rows(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let s = check(op, &dst, srcs)?;
    let (a, b, ids) = (srcs[0], srcs[1], srcs[2]);
    let (ai, bi, di) = (RowIo::new(&a), RowIo::new(&b), RowIo::new(&dst));
    let MoeShape {
        k,
        n,
        n_used,
        t,
        b1,
        ..
    } = s;
    let name = format!(
        "{} {} x {} -> {} (row by row)",
        op.name(),
        a.dtype,
        b.dtype,
        dst.dtype
    )
    .to_lowercase();
    Ok(unit_kernel(name, n_used * t, move |units| {
        let mut x = scratch_row(true, k);
        let mut w = scratch_row(true, k);
        let mut y = scratch_row(true, n);
        for u in units {
            let (e, tok) = (u % n_used, u / n_used);
            // SAFETY: (e, tok) is inside ids' extents, checked at prepare.
            let Some(id) = (unsafe { expert_id(&ids, e, tok, &s) }) else {
                // Another part's expert: a row of zeros.
                y.fill(0.0);
                // SAFETY: (e, tok) is inside dst; the row is this unit's alone.
                unsafe { di.store(dst.row_ptr(e, tok, 0), &y) };
                continue;
            };
            // SAFETY: row (e % b1, tok) of b holds k elements; expert `id`'s
            // rows are in bounds (id checked just above); the dst row is this
            // unit's alone and does not overlap its sources (a product's
            // result owns its memory).
            unsafe {
                bi.load(b.row_ptr(e % b1, tok, 0), &mut x);
                for (i, out) in y.iter_mut().enumerate() {
                    ai.load(a.row_ptr(i, id, 0), &mut w);
                    let dot = w
                        .iter()
                        .zip(x.iter())
                        .fold(0.0f64, |acc, (&p, &q)| acc + f64::from(p) * f64::from(q));
                    *out = dot as f32;
                }
                di.store(dst.row_ptr(e, tok, 0), &y);
            }
        }
    }))
}

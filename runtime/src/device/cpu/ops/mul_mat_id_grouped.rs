//! mul_mat_id's fast path: the (slot, token) pairs of a run grouped by
//! expert, each expert's rows multiplied by its tokens' activations with
//! mul_mat's own kernels, the results scattered back to dst.
//!
//! A run, on every thread of the pool:
//! 1. the ids are read and the pairs sorted by expert (`groups::Groups`: a
//!    counting sort, stable, so deterministic). Each thread sorts them itself,
//!    into its own buffer (`n_used * t` ids; no barrier needed for them); an
//!    id outside `0..n_expert` panics naming it before anything is read with
//!    it (the pool then gives up the barrier below and re-raises the panic).
//!    Then the activations are prepared into the shared scratch, split over
//!    the threads:
//!    - the int8 routes quantize each activation row (`b1 * t` rows) exactly
//!      as mul_mat quantizes src1 for the same weight dtype (8-bit blocks of
//!      32, `matmul::q8`, for Q8_0 .. Q5_1; Q8_K, `matmul::kquant::q8k`, permuted
//!      as the repacked weights, for K-quants). An expert's columns are then
//!      gathered by address, since the tiles take one pointer per column: with
//!      `b1 == 1` a token's row is quantized once for all its experts;
//!    - the f32 route widens the pairs' activation rows and gathers them in
//!      expert order into one packed `[k, n_used * t]` matrix, so an
//!      expert's columns are one `[k, c]` block for gemm.
//! 2. A barrier.
//! 3. Each thread takes its share of (expert, range of rows) units
//!    (`groups::for_share`: contiguous in expert order, balanced by cost,
//!    so one expert that takes most tokens is split over the threads, and
//!    in decode, `t == 1`, the `n_used` experts are shared out) and runs
//!    mul_mat's kernel over those rows and the expert's columns, writing
//!    each result straight to its dst row (the scatter).
//!
//! Routes, chosen once at prepare time as mul_mat chooses them
//! ([`crate::device::cpu::matmul::route`]) for the experts' dtype:
//! - [`Precision::Fast`] with Q8_0, Q4_0, Q4_1 experts (Q5_0, Q5_1 when
//!   repacked): `int8`, the `qdot` tiles (AVX512-VNNI lanes over weights
//!   repacked at load, AVX2 tiles over rows in place); one or two columns
//!   (decode) as mul_mat's matrix-vector products, four weight streams per
//!   thread; up to 64 columns on the same streams; more in row chunks that
//!   stay in L2;
//! - [`Precision::Fast`] with Q4_K, Q5_K, Q6_K experts (K a multiple of 256,
//!   repacked at load but for the scalar set): `kquant`, the K-quant tiles
//!   (4 rows x up to 4 columns in decode, 1 x 8 beyond);
//! - otherwise `float` (every dtype; quantized experts in
//!   [`Precision::Exact`], as mul_mat's f32 route): experts widened to f32 by
//!   blocks of rows (F32 experts read in place), gemm.
//!
//! Unlike mul_mat, a quantized expert keeps its int8 route whatever its
//! column count (mul_mat moves to f32 from `f32_route_min_columns` columns,
//! 48 to 512 by host and dtype): an expert's count is `t * n_used /
//! n_expert` on average, far below, and llama.cpp quantizes mul_mat_id's
//! activations at every size too.
//!
//! Invariants:
//! - every thread sorts the same ids into the same groups, and its share
//!   depends only on the groups, `ith` and `nth`: results do not depend on
//!   scheduling; a dst element is written by one thread once;
//! - scratch holds the activations of phase 1, written before the barrier and
//!   only read after it;
//! - the experts are read only through rows of checked ids (no byte outside
//!   their tensor); repacked copies only of experts that are weights (the
//!   caller passes a cache only then).

mod float;
mod groups;
mod int8;
mod kquant;
#[cfg(test)]
mod tests;

use super::mul_mat_id::{MoeShape, check, expert_id, prepare_rows};
use crate::RuntimeError;
use crate::device::cpu::matmul::Precision;
use crate::device::cpu::matmul::convert::row_to_f32;
use crate::device::cpu::matmul::kquant::Isa as KQuantIsa;
use crate::device::cpu::matmul::packed::RepackCache;
use crate::device::cpu::matmul::qdot::Isa as Int8Isa;
use crate::device::cpu::{CpuKernel, RawTensor, ThreadCtx};
use groups::Groups;
use ir::{DType, Op};
use std::cell::RefCell;

/// Prepares `dst = mul_mat_id(srcs)` (`srcs = [experts, activations, ids]`)
/// on the grouped kernel: quantized experts with 8-bit activations in
/// [`Precision::Fast`], widened to f32 in [`Precision::Exact`], as mul_mat;
/// `repack`: the experts are a weight and may be repacked through it, for
/// the int8 lanes and the K-quant tiles (without it, K-quant and Q5 experts
/// take the f32 route, as mul_mat's do). A dst that is not f32 takes the
/// row-by-row kernel.
///
/// # Safety
/// With `repack`, the experts' bytes are readable now and never change while
/// the kernel lives.
pub unsafe fn prepare_mul_mat_id(
    dst: RawTensor,
    srcs: &[RawTensor],
    precision: Precision,
    repack: Option<&RepackCache>,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    // SAFETY: forwarded.
    unsafe { prepare_mul_mat_id_op(&Op::MulMatId, dst, srcs, precision, repack) }
}

/// [`prepare_mul_mat_id`] of `op`: `mul_mat_id`, or a `mul_mat_id_part`
/// (the slots routed to other parts' experts get rows of zeros).
///
/// # Safety
/// As [`prepare_mul_mat_id`].
pub unsafe fn prepare_mul_mat_id_op(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
    precision: Precision,
    repack: Option<&RepackCache>,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    // SAFETY: forwarded.
    unsafe { prepare_with(op, dst, srcs, precision, repack, Forced::default()) }
}

/// The row-by-row kernel (`mul_mat_id.rs`): one dst row per unit, f64 sums
/// (the benchmarks' baseline).
pub fn prepare_mul_mat_id_rows(
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    prepare_rows(&Op::MulMatId, dst, srcs)
}

/// Instruction sets forced by tests (`None`: the host's choice, as mul_mat's).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Forced {
    pub int8: Option<Int8Isa>,
    pub kquant: Option<KQuantIsa>,
    /// A deliberate bug, to show that the tests catch one.
    #[cfg(test)]
    pub mutant: Mutant,
}

/// Bugs a test plants in the kernel to see the comparison fail.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Mutant {
    /// The real kernel.
    #[default]
    None,
    /// Each result goes to the next pair's dst row.
    WrongScatter,
    /// Every slot reads its token's first activation row.
    WrongGather,
}

/// [`prepare_mul_mat_id`] with `forced` instruction sets.
///
/// # Safety
/// As [`prepare_mul_mat_id`].
pub(crate) unsafe fn prepare_with(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
    precision: Precision,
    repack: Option<&RepackCache>,
    forced: Forced,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let shape = check(op, &dst, srcs)?;
    let f32_aligned =
        |t: &RawTensor| (t.data as usize).is_multiple_of(4) && t.nb.iter().all(|s| s % 4 == 0);
    if dst.dtype != DType::F32
        || !f32_aligned(&dst)
        || u32::try_from(shape.n_used * shape.t).is_err()
    {
        return prepare_rows(op, dst, srcs);
    }
    let (a, b) = (srcs[0], srcs[1]);
    let moe = Moe {
        a,
        b,
        ids: srcs[2],
        dst,
        shape,
        act_in_place: b.dtype == DType::F32 && b.nb[0] == 4 && f32_aligned(&b),
        di: dst.nb[0] as usize / 4,
        #[cfg(test)]
        mutant: forced.mutant,
    };
    let fast = precision == Precision::Fast;
    // SAFETY: forwarded (the experts are readable and constant with `repack`).
    let route = unsafe {
        match (
            int8::Int8::new(&a, shape.k, repack, forced.int8),
            kquant::KQuant::new(&a, shape.k, repack, forced.kquant),
        ) {
            (Some(r), _) if fast => Route::Int8(r),
            (_, Some(r)) if fast => Route::KQuant(r),
            _ => Route::F32(float::F32Route::new(&a)),
        }
    };
    Ok(Box::new(GroupedMulMatId { moe, route }))
}

/// One mul_mat_id's operands and extents, as every route reads them.
pub(crate) struct Moe {
    /// Experts `[k, n, n_expert]`.
    pub a: RawTensor,
    /// Activations `[k, b1, t]`.
    pub b: RawTensor,
    /// Ids `[n_used, t]`.
    pub ids: RawTensor,
    /// Result `[n, n_used, t]`, f32.
    pub dst: RawTensor,
    /// The extents.
    pub shape: MoeShape,
    /// Activation rows are packed, aligned f32: read in place.
    pub act_in_place: bool,
    /// dst's element stride, in f32.
    pub di: usize,
    #[cfg(test)]
    mutant: Mutant,
}

impl Moe {
    /// (slot, token) pairs: `n_used * t`.
    pub fn n_pairs(&self) -> usize {
        self.shape.n_used * self.shape.t
    }

    /// The activation row (`slot % b1 + b1 * token`, of `b1 * t`) that pair
    /// `p = slot + n_used * token` reads.
    pub fn act_index(&self, p: u32) -> usize {
        let s = &self.shape;
        let (slot, tok) = (p as usize % s.n_used, p as usize / s.n_used);
        #[cfg(test)]
        if self.mutant == Mutant::WrongGather {
            return s.b1 * tok;
        }
        slot % s.b1 + s.b1 * tok
    }

    /// dst row of pair `p` (element `i` at `+ i * di`).
    ///
    /// # Safety
    /// `p < n_pairs()`.
    pub unsafe fn dst_col(&self, p: u32) -> *mut f32 {
        let s = &self.shape;
        #[cfg(test)]
        let p = match self.mutant {
            Mutant::WrongScatter => (p + 1) % self.n_pairs() as u32,
            _ => p,
        };
        let (slot, tok) = (p as usize % s.n_used, p as usize / s.n_used);
        // SAFETY: (slot, tok) is inside dst's extents; dst is f32 and 4-byte
        // aligned (checked at prepare).
        unsafe { self.dst.row_ptr(slot, tok, 0) as *mut f32 }
    }

    /// Row 0 of expert `e` as stored.
    ///
    /// # Safety
    /// `e < n_expert`.
    pub unsafe fn expert(&self, e: usize) -> *const u8 {
        // SAFETY: inside the experts' extents.
        unsafe { self.a.row_ptr(0, e, 0) }
    }

    /// Calls `f` with activation row `r` (of `b1 * t`) as f32: in place when
    /// the rows are packed f32, else widened into `buf`.
    ///
    /// # Safety
    /// `r < b1 * t`.
    pub unsafe fn with_act_row<R>(
        &self,
        r: usize,
        buf: &mut Vec<f32>,
        f: impl FnOnce(&[f32]) -> R,
    ) -> R {
        let (k, b1) = (self.shape.k, self.shape.b1);
        // SAFETY: (r % b1, r / b1) is inside b's extents; packed f32 rows
        // are k aligned floats.
        unsafe {
            let src = self.b.row_ptr(r % b1, r / b1, 0);
            if self.act_in_place {
                return f(std::slice::from_raw_parts(src as *const f32, k));
            }
            buf.resize(k, 0.0);
            row_to_f32(self.b.dtype, src, self.b.nb[0] as usize, buf);
        }
        f(buf)
    }
}

/// The kernel family of one prepared mul_mat_id.
enum Route {
    Int8(int8::Int8),
    KQuant(kquant::KQuant),
    F32(float::F32Route),
}

/// What a thread keeps across runs: its sort of the ids and row buffers.
#[derive(Default)]
struct Local {
    groups: Groups,
    /// One activation row widened to f32.
    act: Vec<f32>,
    /// The f32 route's buffers.
    float: float::Buffers,
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

/// The prepared kernel.
struct GroupedMulMatId {
    moe: Moe,
    route: Route,
}

impl GroupedMulMatId {
    /// Sorts the pairs by expert into `groups`, checking every id; pairs
    /// routed to another part's experts go to the groups' rest.
    ///
    /// # Safety
    /// The ids are readable.
    unsafe fn sort(&self, groups: &mut Groups) {
        let s = &self.moe.shape;
        groups.sort(s.n_expert, self.moe.n_pairs(), |p| {
            // SAFETY: p < n_used * t, so (slot, token) is inside the ids.
            unsafe { expert_id(&self.moe.ids, p % s.n_used, p / s.n_used, s) }
        });
    }
}

impl CpuKernel for GroupedMulMatId {
    fn scratch_bytes(&self) -> usize {
        let s = &self.moe.shape;
        match &self.route {
            Route::Int8(r) => r.row_bytes() * s.b1 * s.t,
            Route::KQuant(r) => r.row_bytes() * s.b1 * s.t,
            Route::F32(_) => 4 * s.k * self.moe.n_pairs(),
        }
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        let (moe, s) = (&self.moe, &self.moe.shape);
        LOCAL.with_borrow_mut(|local| {
            let Local { groups, act, float } = local;
            // SAFETY: the ids are readable while the kernel runs.
            unsafe { self.sort(groups) };
            // The rest (another part's experts): rows of zeros, this
            // thread's share of them (no other phase writes those rows).
            let rest = groups.rest();
            for at in ctx.share(rest.len()) {
                // SAFETY: rest pairs are < n_pairs; dst rows hold n f32 at
                // stride di.
                unsafe {
                    let row = moe.dst_col(rest[at]);
                    for i in 0..s.n {
                        *row.add(i * moe.di) = 0.0;
                    }
                }
            }
            // Phase 1: this thread's share of the activations. SAFETY (every
            // arm): scratch holds scratch_bytes() bytes, aligned to 64; each
            // row or column written is this thread's alone.
            match &self.route {
                Route::Int8(r) => {
                    for row in ctx.share(s.b1 * s.t) {
                        let out = scratch.wrapping_add(row * r.row_bytes());
                        // SAFETY: row < b1 * t; see above.
                        unsafe { moe.with_act_row(row, act, |x| r.quantize(x, out)) };
                    }
                }
                Route::KQuant(r) => {
                    for row in ctx.share(s.b1 * s.t) {
                        let out = scratch.wrapping_add(row * r.row_bytes());
                        // SAFETY: as above.
                        unsafe { moe.with_act_row(row, act, |x| r.quantize(x, out)) };
                    }
                }
                Route::F32(_) => {
                    let gathered = scratch as *mut f32;
                    for at in ctx.share(groups.placed()) {
                        let r = moe.act_index(groups.pair_at(at));
                        // SAFETY: column `at` of the packed [k, pairs] matrix.
                        let out =
                            unsafe { std::slice::from_raw_parts_mut(gathered.add(at * s.k), s.k) };
                        // SAFETY: r < b1 * t.
                        unsafe { moe.with_act_row(r, act, |x| out.copy_from_slice(x)) };
                    }
                }
            }
            ctx.barrier();
            // Phase 2: this thread's (expert, rows) units.
            groups::for_share(groups, s.n, ctx.ith, ctx.nth, |e, rows| {
                let pairs = groups.pairs(e);
                // SAFETY: e < n_expert, rows inside 0..n, pairs < n_pairs;
                // phase 1 is complete; the dst rows are this thread's.
                unsafe {
                    match &self.route {
                        Route::Int8(r) => r.rows(moe, e, rows, pairs, scratch),
                        Route::KQuant(r) => r.rows(moe, e, rows, pairs, scratch),
                        Route::F32(r) => {
                            let first = groups.first(e);
                            r.rows(moe, e, rows, pairs, first, scratch as *const f32, float)
                        }
                    }
                }
            });
        });
    }

    fn describe(&self) -> String {
        let route = match &self.route {
            Route::Int8(r) => r.describe(),
            Route::KQuant(r) => r.describe(),
            Route::F32(r) => r.describe(),
        };
        let op = if self.moe.shape.experts == self.moe.shape.n_expert {
            "mul_mat_id"
        } else {
            "mul_mat_id_part"
        };
        format!(
            "{op} {} x {} (grouped by expert, {route})",
            self.moe.a.dtype, self.moe.b.dtype
        )
    }
}

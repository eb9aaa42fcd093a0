//! CPU kernels for every non-matmul op of the IR that is a step of its own:
//! data movement (get_rows, set_rows, cpy, cont, concat), rope, reductions,
//! masks, and plain-Rust fallbacks of the elementwise, norm and soft_max ops
//! (the JIT normally replaces those).
//!
//! Entry point: [`prepare_op`], called once per step at plan load. It checks
//! dtypes and shapes and returns a kernel with the addresses baked in, or
//! [`RuntimeError::Unsupported`] naming the op and dtypes (never a panic).
//!
//! Invariants of every kernel here:
//! - semantics are those of `kernels::reference` (same index rules, same tie
//!   and -inf choices); arithmetic is f32 with f64 accumulation for sums;
//! - work is split over destination rows (or fixed-size chunks of contiguous
//!   data) with [`crate::device::cpu::ThreadCtx::share`], so threads write disjoint
//!   bytes (set_rows with a repeated index within one (i2, i3) is the one
//!   exception: which row wins is then unspecified, as in ggml);
//! - no barrier is used, so an out-of-range row index (a bug in the graph's
//!   inputs) may panic without deadlocking the pool; the pool re-raises it;
//! - a destination that exactly aliases a source (in-place steps) is safe:
//!   a source row overlapping the row being written is copied first.
//!
//! Code map: `rows` (row I/O and conversions), `copy` (cpy, cont), `get_rows`,
//! `set_rows`, `concat`, `rope`, `reduce` (sum_rows, mean, argmax), `argsort`,
//! `mul_mat_id` (a mixture of experts' product, row by row: the reference
//! route; `mul_mat_id_grouped`, tokens grouped by expert on mul_mat's tiles,
//! is the runtime's), `mask` (diag_mask_inf, soft_max), `unary`, `binary`
//! (add..div, glu), `norm`, `collective` (all_reduce_sum, all_gather over
//! parts on other CPU devices).

mod argsort;
mod binary;
mod collective;
mod concat;
mod copy;
mod get_rows;
mod mask;
mod mul_mat_id;
pub mod mul_mat_id_grouped;
mod norm;
mod reduce;
mod rope;
mod rows;
mod set_rows;
mod unary;

#[cfg(test)]
mod tests;

use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor, ThreadCtx};
use ir::Op;
use ir::layout::fmt_ne;
use std::ops::Range;

/// A prepared kernel for `op` writing `dst` from `srcs` (the step's operands in
/// the op's order). For `cpy` and `set_rows`, `dst` is the view of the
/// destination source the result aliases; the kernel writes through it.
///
/// Returns [`RuntimeError::Unsupported`] for view ops and `mul_mat` (not steps
/// handled here), for dtype combinations without a kernel, and for operands
/// whose shapes do not fit the op.
pub fn prepare_op(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    ir::rules::check_arity(op, srcs.len()).map_err(|why| unsupported(op, why))?;
    for (what, t) in std::iter::once(("dst".to_string(), &dst))
        .chain(srcs.iter().enumerate().map(|(i, s)| (format!("src{i}"), s)))
    {
        check_tensor(op, &what, t)?;
    }
    match *op {
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => Err(unsupported(
            op,
            "a view op runs no kernel (its result is its source's bytes)".into(),
        )),
        Op::MulMat => Err(unsupported(
            op,
            "matrix products are not prepared by cpu::ops::prepare_op".into(),
        )),
        Op::GetRows | Op::GetRowsPart { .. } => get_rows::prepare(op, dst, srcs),
        Op::Cpy | Op::Cont => copy::prepare(op, dst, srcs[0]),
        Op::SetRows => set_rows::prepare(op, dst, srcs),
        Op::Concat { dim } => concat::prepare(op, dst, srcs, usize::from(dim)),
        Op::Rope(ref p) => rope::prepare(op, p, dst, srcs),
        Op::SumRows | Op::Mean | Op::Argmax => reduce::prepare(op, dst, srcs[0]),
        Op::Argsort { descending } => argsort::prepare(op, descending, dst, srcs[0]),
        Op::MulMatId | Op::MulMatIdPart { .. } => mul_mat_id::prepare(op, dst, srcs),
        Op::DiagMaskInf { n_past } => mask::prepare_diag(op, n_past, dst, srcs[0]),
        Op::SoftMax { scale, max_bias } => mask::prepare_soft_max(op, scale, max_bias, dst, srcs),
        ir::unary_op!() => unary::prepare(op, dst, srcs[0]),
        Op::Add | Op::Sub | Op::Mul | Op::Div => binary::prepare(op, dst, srcs),
        Op::Glu { kind, swapped } => binary::prepare_glu(op, kind, swapped, dst, srcs),
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::prepare(op, dst, srcs[0]),
        Op::AllReduceSum { .. } | Op::AllGather { .. } | Op::ReduceScatterSum { .. } => {
            collective::prepare(op, dst, srcs)
        }
    }
}

/// The error for `op` with `detail` (which names dtypes or shapes).
pub(crate) fn unsupported(op: &Op, detail: String) -> RuntimeError {
    RuntimeError::Unsupported {
        op: op.name().to_string(),
        detail,
    }
}

/// `dst f16 <- src0 q4_0, src1 i32`: the dtypes of a step, for messages.
pub(crate) fn dtypes(dst: &RawTensor, srcs: &[RawTensor]) -> String {
    let s: Vec<String> = srcs
        .iter()
        .enumerate()
        .map(|(i, t)| format!("src{i} {}", t.dtype))
        .collect();
    format!("dst {} <- {}", dst.dtype, s.join(", "))
}

/// `Unsupported` unless `ok`, with `detail` built lazily.
pub(crate) fn need(op: &Op, ok: bool, detail: impl FnOnce() -> String) -> Result<(), RuntimeError> {
    if ok {
        Ok(())
    } else {
        Err(unsupported(op, detail()))
    }
}

/// Shapes as `[a, b, c, d]` for messages.
pub(crate) fn shape(t: &RawTensor) -> String {
    fmt_ne(&t.ne)
}

/// Checks what every kernel assumes of a tensor: positive extents, whole blocks
/// per row, packed quantized rows, a non-null address.
fn check_tensor(op: &Op, what: &str, t: &RawTensor) -> Result<(), RuntimeError> {
    need(op, t.ne.iter().all(|&n| n >= 1), || {
        format!("{what} extents {} must all be >= 1", shape(t))
    })?;
    need(op, t.dtype.row_bytes(t.ne[0] as u64).is_some(), || {
        format!(
            "{what} {} rows of {} are not whole blocks",
            t.dtype, t.ne[0]
        )
    })?;
    need(
        op,
        !t.dtype.is_quantized() || t.nb[0] == t.dtype.block_bytes(),
        || format!("{what} is {} and its rows must be packed", t.dtype),
    )?;
    need(op, !t.data.is_null(), || format!("{what} has no memory"))
}

/// A kernel whose work is `n_units` independent units (rows or chunks), run
/// by `body` over each thread's share.
struct UnitKernel<F> {
    name: String,
    n_units: usize,
    body: F,
}

impl<F: Fn(Range<usize>) + Send + Sync> CpuKernel for UnitKernel<F> {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        let units = ctx.share(self.n_units);
        if !units.is_empty() {
            (self.body)(units);
        }
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// Boxes a [`UnitKernel`]. `body` must uphold the tensor contract of
/// [`CpuKernel::run`]: it may touch only the tensors it was prepared with, and
/// only the destination bytes of its units.
pub(crate) fn unit_kernel(
    name: String,
    n_units: usize,
    body: impl Fn(Range<usize>) + Send + Sync + 'static,
) -> Box<dyn CpuKernel> {
    Box::new(UnitKernel {
        name,
        n_units,
        body,
    })
}

/// Reads the i32 at byte address `p`.
///
/// # Safety
/// `p` addresses 4 readable bytes.
pub(crate) unsafe fn read_i32(p: *const u8) -> i32 {
    // SAFETY: caller contract; the read tolerates any alignment.
    unsafe { p.cast::<i32>().read_unaligned() }
}

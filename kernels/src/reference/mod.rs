//! The reference (oracle) kernels: every non-view op of [`ir::Op`] evaluated in f64
//! with ggml's semantics, for clarity rather than speed.
//!
//! Flow: [`gather`] a node's sources from bytes into [`Dense`] values, [`compute`]
//! the node, [`scatter`] the result into the node's bytes (rounding to its dtype).
//!
//! Invariants:
//! - every op reads its sources as given (f64 values) and computes in f64;
//!   results are not rounded to the node's dtype here: [`scatter`] does that once;
//! - sources satisfy `ir::rules` (kernels assume it; gross violations panic with a
//!   message naming the op, never read out of bounds);
//! - view ops (view, reshape, permute, transpose) have no kernel: their values are
//!   their root's bytes gathered through their own layout. [`compute`] panics on them.
//!
//! Code map, one concept per file: [`dense`] (values, gather, scatter),
//! `elementwise` (unary, binary, glu), `norm`, `matmul`, `softmax` (and
//! diag_mask_inf), `rope`, `copy` (cpy, get_rows, set_rows, concat), `reduce`
//! (sum_rows, mean, argmax). Semantic choices a fast kernel must match are in those
//! module docs: an all -inf soft_max row gives zeros; argmax takes the first maximum.

pub mod attention;
pub mod dense;
pub mod fused;

mod copy;
mod elementwise;
mod matmul;
mod norm;
mod reduce;
mod rope;
mod softmax;

#[cfg(test)]
mod tests;

pub use dense::{Dense, gather, scatter};
pub use elementwise::{gelu_erf, gelu_tanh, silu};
pub use rope::rope_yarn_corr_dims;
pub use softmax::alibi_slope;

use ir::Layout;
use ir::Op;
use ir::layout::fmt_ne;

/// Evaluates the non-view op `op` over `srcs` (in the op's source order).
/// `out` is the node's result layout from `ir::rules`; the result has its extents.
///
/// Panics on view ops, on a wrong number of sources, and when the computed extents
/// differ from `out.ne`.
pub fn compute(op: &Op, srcs: &[&Dense], out: &Layout) -> Dense {
    if let Err(why) = ir::rules::check_arity(op, srcs.len()) {
        panic!("reference::compute: {op} {why}");
    }
    let a = srcs[0];
    let binary = |f: fn(f64, f64) -> f64| elementwise::binary(a, srcs[1], f);
    let result = match *op {
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => panic!(
            "reference::compute: {op} is a view op and has no kernel; gather its root's \
             bytes through the view's layout instead"
        ),
        Op::GetRows => copy::get_rows(a, srcs[1], None),
        Op::GetRowsPart { start } => copy::get_rows(a, srcs[1], Some(start)),
        Op::Add => binary(|x, y| x + y),
        Op::Sub => binary(|x, y| x - y),
        Op::Mul => binary(|x, y| x * y),
        Op::Div => binary(|x, y| x / y),
        ir::unary_op!() => {
            let f = op.unary_fn().expect("a unary op has a unary fn");
            elementwise::unary(a, |x| fused::apply_unary(f, x))
        }
        Op::Glu { kind, swapped } => elementwise::glu(kind, swapped, a, srcs.get(1).copied()),
        Op::RmsNorm { eps } => norm::rms_norm(a, eps),
        Op::Norm { eps } => norm::norm(a, eps),
        Op::MulMat => matmul::mul_mat(a, srcs[1]),
        Op::SoftMax { scale, max_bias } => {
            softmax::soft_max(a, srcs.get(1).copied(), scale, max_bias)
        }
        Op::Rope(ref params) => rope::rope(params, a, srcs[1], srcs.get(2).copied()),
        Op::Cpy => copy::cpy(a, out.ne),
        // Packing may also reshape (ggml_cont_4d): values keep their element order.
        Op::Cont => copy::cpy(a, out.ne),
        Op::SetRows => copy::set_rows(a, srcs[1], srcs[2]),
        Op::Concat { dim } => copy::concat(a, srcs[1], usize::from(dim)),
        Op::SumRows => reduce::sum_rows(a),
        Op::Mean => reduce::mean(a),
        Op::Argmax => reduce::argmax(a),
        Op::Argsort { descending } => reduce::argsort(a, descending),
        Op::MulMatId => matmul::mul_mat_id(a, srcs[1], srcs[2], None),
        Op::MulMatIdPart { first, experts } => {
            matmul::mul_mat_id(a, srcs[1], srcs[2], Some((first, experts)))
        }
        Op::DiagMaskInf { n_past } => softmax::diag_mask_inf(a, n_past),
        Op::AllReduceSum { .. } => srcs[1..].iter().fold(a.clone(), |acc, part| {
            elementwise::binary(&acc, part, |x, y| x + y)
        }),
        Op::AllGather { dim, .. } => srcs[1..].iter().fold(a.clone(), |acc, part| {
            copy::concat(&acc, part, usize::from(dim))
        }),
        Op::ReduceScatterSum {
            dim, start, len, ..
        } => {
            let sum = srcs[1..].iter().fold(a.clone(), |acc, part| {
                elementwise::binary(&acc, part, |x, y| x + y)
            });
            copy::slice(&sum, usize::from(dim), start, len)
        }
    };
    assert_eq!(
        result.ne,
        out.ne,
        "reference::compute: {op} over {} gives {}, but the node's layout says {}",
        srcs.iter()
            .map(|s| fmt_ne(&s.ne))
            .collect::<Vec<_>>()
            .join(", "),
        fmt_ne(&result.ne),
        fmt_ne(&out.ne)
    );
    result
}

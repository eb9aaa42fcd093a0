//! What determines a kernel's generated code (its cache key), and the run-time
//! argument block that carries everything else.
//!
//! Invariants:
//! - a [`Spec`] holds only code-determining facts: the body, dtypes, each
//!   tensor's [`Access`] class, constants (eps, scale) and the streaming flag.
//!   Addresses and extents never enter it: they travel in the argument block,
//!   so identical layers share one compiled kernel;
//! - argument block layout: for tensor `t` (0 = output, then the inputs, then
//!   a soft_max mask) the nine i64 at `t * 9` are: data pointer, ne0..ne3,
//!   nb0..nb3; a soft_max kernel's ALiBi slope table pointer follows the last
//!   tensor.

use super::super::RawTensor;
use ir::DType;
use ir::plan::{BinaryFn, Expr, UnaryFn};

/// i64 slots per tensor in the argument block.
pub(super) const SLOTS: usize = 9;

/// How a kernel reads (or writes) one tensor along a row. Chosen at prepare
/// time from the tensor's layout and the output's row length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// Row length = the output's, elements packed: vector loads and stores.
    Contig,
    /// One element per row, broadcast over the output row (a splat).
    Bcast,
    /// Row length = the output's, elements `nb0` bytes apart (permuted views).
    Strided,
    /// A shorter row repeated along the output row (index modulo ne0).
    Repeat,
}

impl Access {
    /// The class of `t` read along output rows of `out_ne0` elements.
    pub fn of(t: &RawTensor, out_ne0: i64) -> Access {
        let packed = t.nb[0] == elem_bytes(t.dtype) as u64;
        if t.ne[0] == out_ne0 && (packed || t.ne[0] == 1) {
            Access::Contig
        } else if t.ne[0] == 1 {
            Access::Bcast
        } else if t.ne[0] == out_ne0 {
            Access::Strided
        } else {
            Access::Repeat
        }
    }
}

/// A one-argument function of the generated code: the plan's [`UnaryFn`]s
/// plus the building blocks tested on their own.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(not(test), allow(dead_code))] // Exp and Erf alone: tests only.
pub(super) enum Func {
    /// A plan unary function.
    Plan(UnaryFn),
    /// e^x (the polynomial of `math`).
    Exp,
    /// erf(x).
    Erf,
}

/// One node of a kernel body: [`Expr`] with [`Func`] for unary functions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Node {
    /// Kernel input `i`.
    Input(u32),
    /// f(arg).
    Unary(Func, u32),
    /// f(a, b).
    Binary(BinaryFn, u32, u32),
    /// rms_norm over the row of input `i`.
    RmsNorm(u32, f32),
    /// norm over the row of input `i`.
    Norm(u32, f32),
}

impl Node {
    /// The node of a plan expression.
    pub fn of(e: &Expr) -> Node {
        match *e {
            Expr::Input(i) => Node::Input(i),
            Expr::Unary(f, a) => Node::Unary(Func::Plan(f), a),
            Expr::Binary(f, a, b) => Node::Binary(f, a, b),
            Expr::RmsNorm { input, eps } => Node::RmsNorm(input, eps),
            Expr::Norm { input, eps } => Node::Norm(input, eps),
        }
    }

    /// True for the row reductions.
    pub fn is_norm(&self) -> bool {
        matches!(self, Node::RmsNorm(..) | Node::Norm(..))
    }
}

/// A tensor as the generated code sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TensorSpec {
    /// F32 or F16.
    pub dtype: DType,
    /// Access class along rows.
    pub access: Access,
}

/// Everything that determines a kernel's code; its `Debug` text is the cache key.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Spec {
    /// An elementwise body, optionally with row norms.
    Fused {
        /// The body, output last.
        nodes: Vec<Node>,
        /// The output (tensor 0).
        out: TensorSpec,
        /// The inputs (tensors 1..).
        inputs: Vec<TensorSpec>,
        /// Non-temporal stores of the output (aligned by a peeled prologue).
        stream: bool,
    },
    /// soft_max(x * scale + slope * mask) over rows.
    SoftMax {
        /// The output (tensor 0).
        out: TensorSpec,
        /// The logits (tensor 1).
        src: TensorSpec,
        /// The mask (tensor 2), if any.
        mask: Option<TensorSpec>,
        /// Multiplier of the logits.
        scale: f32,
        /// Whether per-head ALiBi slopes are read from the slope table.
        alibi: bool,
    },
}

impl Spec {
    /// The cache key: exact (`Debug` prints floats so that they round-trip).
    pub fn key(&self) -> String {
        format!("{self:?}")
    }
}

/// Bytes of one element of a dtype the JIT supports.
pub(super) fn elem_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F16 => 2,
        _ => 4,
    }
}

/// The argument block: tensors in order, then `extra` slots.
pub(super) fn arg_block(tensors: &[RawTensor], extra: &[i64]) -> Box<[i64]> {
    let mut args = Vec::with_capacity(tensors.len() * SLOTS + extra.len());
    for t in tensors {
        args.push(t.data as i64);
        args.extend(t.ne);
        args.extend(t.nb.iter().map(|&b| b as i64));
    }
    args.extend_from_slice(extra);
    args.into_boxed_slice()
}

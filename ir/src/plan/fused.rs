//! Fused kernels: a small expression DAG over a kernel's inputs, evaluated per
//! output element (the runtime JIT-compiles it; the reference interprets it).
//!
//! Invariants (checked by `compiler::check`):
//! - `body` is in topological order: an expression refers only to earlier ones;
//! - the last expression is the output, written to `output` with its layout;
//! - inputs broadcast like ggml's binary ops: input `i` is read at the output
//!   index modulo its own extents;
//! - a row normalisation (`RmsNorm`, `Norm`) applies to an input whose rows have
//!   the output's ne0, and reduces over that row before the elementwise body.

use crate::op::{GluKind, Op};
use serde::{Deserialize, Serialize};

/// A one-argument elementwise function.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum UnaryFn {
    /// x * scale + bias.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after.
        bias: f32,
    },
    /// x^2.
    Sqr,
    /// sqrt(x).
    Sqrt,
    /// x * sigmoid(x).
    Silu,
    /// gelu, tanh approximation.
    Gelu,
    /// gelu, erf form.
    GeluErf,
    /// max(x, 0).
    Relu,
    /// tanh(x).
    Tanh,
    /// min(max(x, min), max).
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
}

/// A two-argument elementwise function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryFn {
    /// a + b.
    Add,
    /// a - b.
    Sub,
    /// a * b.
    Mul,
    /// a / b.
    Div,
}

/// One node of a fused expression; arguments index earlier expressions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// Input `i` of the kernel, read with broadcasting.
    Input(u32),
    /// f(arg).
    Unary(UnaryFn, u32),
    /// f(a, b).
    Binary(BinaryFn, u32, u32),
    /// x / sqrt(mean(x^2) + eps) over the row of input `i`.
    RmsNorm {
        /// Kernel input index.
        input: u32,
        /// Epsilon.
        eps: f32,
    },
    /// (x - mean) / sqrt(var + eps) over the row of input `i`.
    Norm {
        /// Kernel input index.
        input: u32,
        /// Epsilon.
        eps: f32,
    },
}

/// A fused kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedKernel {
    /// Plan tensors read, indexed by `Expr::Input`.
    pub inputs: Vec<u32>,
    /// The plan tensor written (the last graph node of the group).
    pub output: u32,
    /// The graph nodes this kernel replaces, in their order (all but the last
    /// take no memory).
    pub nodes: Vec<u32>,
    /// The expression, output last.
    pub body: Vec<Expr>,
}

/// The functions ops apply, as fused bodies name them: here, beside
/// [`UnaryFn`] and [`BinaryFn`], so that `op.rs` does not depend on the plan.
impl Op {
    /// The elementwise function a one-source op applies, which fused kernels,
    /// the JIT and CUDA code generation evaluate; `None` for any other op.
    pub fn unary_fn(&self) -> Option<UnaryFn> {
        Some(match *self {
            Op::Scale { scale, bias } => UnaryFn::Scale { scale, bias },
            Op::Sqr => UnaryFn::Sqr,
            Op::Sqrt => UnaryFn::Sqrt,
            Op::Silu => UnaryFn::Silu,
            Op::Gelu => UnaryFn::Gelu,
            Op::GeluErf => UnaryFn::GeluErf,
            Op::Relu => UnaryFn::Relu,
            Op::Tanh => UnaryFn::Tanh,
            Op::Clamp { min, max } => UnaryFn::Clamp { min, max },
            _ => return None,
        })
    }

    /// The function a two-source elementwise op applies (src1 broadcast over
    /// src0); `None` for any other op.
    pub fn binary_fn(&self) -> Option<BinaryFn> {
        Some(match self {
            Op::Add => BinaryFn::Add,
            Op::Sub => BinaryFn::Sub,
            Op::Mul => BinaryFn::Mul,
            Op::Div => BinaryFn::Div,
            _ => return None,
        })
    }
}

impl GluKind {
    /// The activation applied to the gate.
    pub fn activation(self) -> UnaryFn {
        match self {
            GluKind::SwiGlu => UnaryFn::Silu,
            GluKind::GeGlu => UnaryFn::Gelu,
            GluKind::GeGluErf => UnaryFn::GeluErf,
        }
    }
}

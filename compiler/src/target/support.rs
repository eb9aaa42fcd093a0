//! Which (op, src0 dtype) pairs a device can run.
//!
//! Ops are named by [`OpKind`], a parameter-less mirror of [`ir::Op`] whose
//! names are exactly `Op::name()` (`mul_mat`, `rms_norm`, ...), so target files
//! speak the same names as errors and summaries.
//!
//! Invariants:
//! - [`OpKind::of`] matches `ir::Op` exhaustively: a new op breaks the build
//!   here until it has a kind;
//! - `OpKind::of(op).name() == op.name()` for every op, and [`OpKind::ALL`]
//!   lists every kind once (both checked by this module's tests);
//! - an unknown op name in a target file is a parse error with its line and
//!   column (serde refuses the variant), never a silently ignored entry.

use ir::{DType, Op};
use serde::{Deserialize, Serialize};

/// An op without its parameters, named as `ir::Op::name()` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // one variant per `ir::Op` variant, documented there
pub enum OpKind {
    GetRows,
    Add,
    Sub,
    Mul,
    Div,
    Scale,
    Sqr,
    Sqrt,
    Silu,
    Gelu,
    GeluErf,
    Relu,
    Tanh,
    Glu,
    RmsNorm,
    Norm,
    MulMat,
    SoftMax,
    Rope,
    Cpy,
    Cont,
    SetRows,
    View,
    Reshape,
    Permute,
    Transpose,
    Concat,
    SumRows,
    Mean,
    Argmax,
    DiagMaskInf,
}

impl OpKind {
    /// Every kind, in `ir::Op` declaration order.
    pub const ALL: [OpKind; 31] = [
        OpKind::GetRows,
        OpKind::Add,
        OpKind::Sub,
        OpKind::Mul,
        OpKind::Div,
        OpKind::Scale,
        OpKind::Sqr,
        OpKind::Sqrt,
        OpKind::Silu,
        OpKind::Gelu,
        OpKind::GeluErf,
        OpKind::Relu,
        OpKind::Tanh,
        OpKind::Glu,
        OpKind::RmsNorm,
        OpKind::Norm,
        OpKind::MulMat,
        OpKind::SoftMax,
        OpKind::Rope,
        OpKind::Cpy,
        OpKind::Cont,
        OpKind::SetRows,
        OpKind::View,
        OpKind::Reshape,
        OpKind::Permute,
        OpKind::Transpose,
        OpKind::Concat,
        OpKind::SumRows,
        OpKind::Mean,
        OpKind::Argmax,
        OpKind::DiagMaskInf,
    ];

    /// The kind of `op`.
    pub fn of(op: &Op) -> OpKind {
        match op {
            Op::GetRows => OpKind::GetRows,
            Op::Add => OpKind::Add,
            Op::Sub => OpKind::Sub,
            Op::Mul => OpKind::Mul,
            Op::Div => OpKind::Div,
            Op::Scale { .. } => OpKind::Scale,
            Op::Sqr => OpKind::Sqr,
            Op::Sqrt => OpKind::Sqrt,
            Op::Silu => OpKind::Silu,
            Op::Gelu => OpKind::Gelu,
            Op::GeluErf => OpKind::GeluErf,
            Op::Relu => OpKind::Relu,
            Op::Tanh => OpKind::Tanh,
            Op::Glu { .. } => OpKind::Glu,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
            Op::Norm { .. } => OpKind::Norm,
            Op::MulMat => OpKind::MulMat,
            Op::SoftMax { .. } => OpKind::SoftMax,
            Op::Rope(_) => OpKind::Rope,
            Op::Cpy => OpKind::Cpy,
            Op::Cont => OpKind::Cont,
            Op::SetRows => OpKind::SetRows,
            Op::View { .. } => OpKind::View,
            Op::Reshape => OpKind::Reshape,
            Op::Permute { .. } => OpKind::Permute,
            Op::Transpose => OpKind::Transpose,
            Op::Concat { .. } => OpKind::Concat,
            Op::SumRows => OpKind::SumRows,
            Op::Mean => OpKind::Mean,
            Op::Argmax => OpKind::Argmax,
            Op::DiagMaskInf { .. } => OpKind::DiagMaskInf,
        }
    }

    /// The op's name, as `ir::Op::name()` and target files write it.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::GetRows => "get_rows",
            OpKind::Add => "add",
            OpKind::Sub => "sub",
            OpKind::Mul => "mul",
            OpKind::Div => "div",
            OpKind::Scale => "scale",
            OpKind::Sqr => "sqr",
            OpKind::Sqrt => "sqrt",
            OpKind::Silu => "silu",
            OpKind::Gelu => "gelu",
            OpKind::GeluErf => "gelu_erf",
            OpKind::Relu => "relu",
            OpKind::Tanh => "tanh",
            OpKind::Glu => "glu",
            OpKind::RmsNorm => "rms_norm",
            OpKind::Norm => "norm",
            OpKind::MulMat => "mul_mat",
            OpKind::SoftMax => "soft_max",
            OpKind::Rope => "rope",
            OpKind::Cpy => "cpy",
            OpKind::Cont => "cont",
            OpKind::SetRows => "set_rows",
            OpKind::View => "view",
            OpKind::Reshape => "reshape",
            OpKind::Permute => "permute",
            OpKind::Transpose => "transpose",
            OpKind::Concat => "concat",
            OpKind::SumRows => "sum_rows",
            OpKind::Mean => "mean",
            OpKind::Argmax => "argmax",
            OpKind::DiagMaskInf => "diag_mask_inf",
        }
    }

    /// The kind called `name` (`mul_mat`, ...), if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of ops: every op of this build, or the listed ones.
///
/// `All` means every op this build of ggplan knows, including ops added later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpSet {
    /// Every op.
    All,
    /// Only these ops.
    Only(Vec<OpKind>),
}

impl OpSet {
    /// True when `kind` is in the set.
    pub fn contains(&self, kind: OpKind) -> bool {
        match self {
            OpSet::All => true,
            OpSet::Only(kinds) => kinds.contains(&kind),
        }
    }
}

/// A set of dtypes: every dtype, or the listed ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DTypeSet {
    /// Every dtype.
    All,
    /// Only these dtypes.
    Only(Vec<DType>),
}

impl DTypeSet {
    /// True when `dtype` is in the set.
    pub fn contains(&self, dtype: DType) -> bool {
        match self {
            DTypeSet::All => true,
            DTypeSet::Only(dtypes) => dtypes.contains(&dtype),
        }
    }
}

/// One support entry: every op of `ops` runs when its src0 has a dtype of `src0`.
///
/// A device supports (op, dtype) when any of its entries contains both.
/// Keying on src0 follows ggml's `supports_op`, which mostly decides by the
/// type of `op->src[0]` (the weight of `mul_mat`, the table of `get_rows`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSupport {
    /// The ops of this entry.
    pub ops: OpSet,
    /// The src0 dtypes they accept.
    pub src0: DTypeSet,
}

impl OpSupport {
    /// True when this entry covers `kind` with src0 of dtype `src0`.
    pub fn covers(&self, kind: OpKind, src0: DType) -> bool {
        self.ops.contains(kind) && self.src0.contains(src0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{GluKind, RopeMode, RopeParams};

    /// One op of every variant. `OpKind::of` is exhaustive, so a new `Op`
    /// needs a new `OpKind`, and `every_kind_has_the_ir_name` then fails until
    /// the new op is added here too.
    fn one_op_of_each_variant() -> Vec<Op> {
        vec![
            Op::GetRows,
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Div,
            Op::Scale {
                scale: 2.0,
                bias: 0.0,
            },
            Op::Sqr,
            Op::Sqrt,
            Op::Silu,
            Op::Gelu,
            Op::GeluErf,
            Op::Relu,
            Op::Tanh,
            Op::Glu {
                kind: GluKind::SwiGlu,
                swapped: false,
            },
            Op::RmsNorm { eps: 1e-5 },
            Op::Norm { eps: 1e-5 },
            Op::MulMat,
            Op::SoftMax {
                scale: 1.0,
                max_bias: 0.0,
            },
            Op::Rope(RopeParams::plain(RopeMode::Normal, 64, 10000.0)),
            Op::Cpy,
            Op::Cont,
            Op::SetRows,
            Op::View { offset: 0 },
            Op::Reshape,
            Op::Permute { axes: [1, 0, 2, 3] },
            Op::Transpose,
            Op::Concat { dim: 0 },
            Op::SumRows,
            Op::Mean,
            Op::Argmax,
            Op::DiagMaskInf { n_past: 0 },
        ]
    }

    #[test]
    fn every_kind_has_the_ir_name() {
        let ops = one_op_of_each_variant();
        let kinds: Vec<OpKind> = ops.iter().map(OpKind::of).collect();
        assert_eq!(kinds, OpKind::ALL, "one op per kind, in declaration order");
        for op in &ops {
            let kind = OpKind::of(op);
            assert_eq!(kind.name(), op.name());
            assert_eq!(OpKind::from_name(op.name()), Some(kind));
        }
        assert_eq!(OpKind::from_name("flash_attn_ext"), None);
    }

    #[test]
    fn serde_names_are_the_ir_names() {
        for kind in OpKind::ALL {
            assert_eq!(ron::to_string(&kind).unwrap(), kind.name());
            assert_eq!(ron::from_str::<OpKind>(kind.name()).unwrap(), kind);
        }
        assert!(ron::from_str::<OpKind>("matmul").is_err());
    }

    #[test]
    fn entries_cover_their_pairs_only() {
        let e = OpSupport {
            ops: OpSet::Only(vec![OpKind::MulMat]),
            src0: DTypeSet::Only(vec![DType::Q4_0]),
        };
        assert!(e.covers(OpKind::MulMat, DType::Q4_0));
        assert!(!e.covers(OpKind::MulMat, DType::Q4_1));
        assert!(!e.covers(OpKind::GetRows, DType::Q4_0));
        let all = OpSupport {
            ops: OpSet::All,
            src0: DTypeSet::All,
        };
        assert!(DType::ALL.iter().all(|&d| all.covers(OpKind::Rope, d)));
    }
}

//! `OpKind`: the closed op set without parameters.
//!
//! Invariants: [`OpKind::of`] matches `Op` exhaustively, so a new op breaks the
//! build here until it has a kind; [`OpKind::ALL`] lists every kind once;
//! `Op::name()` is its kind's name, so each op name is written in one place.

use crate::op::Op;
use serde::{Deserialize, Serialize};

/// An op without its parameters: what target files, support tables and
/// kernel registries key on. Its name is the op's name everywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // one variant per `Op` variant, documented there
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
    AllReduceSum,
    AllGather,
    ReduceScatterSum,
    GetRowsPart,
    Clamp,
    Argsort,
    MulMatId,
    MulMatIdPart,
}

impl OpKind {
    /// Every kind, in `Op` declaration order.
    pub const ALL: [OpKind; 39] = [
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
        OpKind::AllReduceSum,
        OpKind::AllGather,
        OpKind::ReduceScatterSum,
        OpKind::GetRowsPart,
        OpKind::Clamp,
        OpKind::Argsort,
        OpKind::MulMatId,
        OpKind::MulMatIdPart,
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
            Op::AllReduceSum { .. } => OpKind::AllReduceSum,
            Op::AllGather { .. } => OpKind::AllGather,
            Op::ReduceScatterSum { .. } => OpKind::ReduceScatterSum,
            Op::GetRowsPart { .. } => OpKind::GetRowsPart,
            Op::Clamp { .. } => OpKind::Clamp,
            Op::Argsort { .. } => OpKind::Argsort,
            Op::MulMatId => OpKind::MulMatId,
            Op::MulMatIdPart { .. } => OpKind::MulMatIdPart,
        }
    }

    /// The op's name, as errors, summaries and target files write it.
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
            OpKind::AllReduceSum => "all_reduce_sum",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatterSum => "reduce_scatter_sum",
            OpKind::GetRowsPart => "get_rows_part",
            OpKind::Clamp => "clamp",
            OpKind::Argsort => "argsort",
            OpKind::MulMatId => "mul_mat_id",
            OpKind::MulMatIdPart => "mul_mat_id_part",
        }
    }

    /// Collectives: their participants read parts on other devices.
    pub fn is_collective(self) -> bool {
        matches!(
            self,
            OpKind::AllReduceSum | OpKind::AllGather | OpKind::ReduceScatterSum
        )
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

impl Op {
    /// This op's kind (the op without its parameters).
    pub fn kind(&self) -> OpKind {
        OpKind::of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{GluKind, RopeMode, RopeParams};

    /// One op of every variant. `OpKind::of` is exhaustive, so a new `Op`
    /// needs a new `OpKind`, and `kinds_follow_op_declaration_order` then fails until
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
            Op::AllReduceSum {
                group: 0,
                rank: 0,
                ranks: 1,
            },
            Op::AllGather {
                dim: 0,
                group: 0,
                rank: 0,
                ranks: 1,
            },
            Op::ReduceScatterSum {
                dim: 0,
                start: 0,
                len: 1,
                group: 0,
                rank: 0,
                ranks: 1,
            },
            Op::GetRowsPart { start: 0 },
            Op::Clamp { min: 0.0, max: 1.0 },
            Op::Argsort { descending: true },
            Op::MulMatId,
            Op::MulMatIdPart {
                first: 0,
                experts: 1,
            },
        ]
    }

    #[test]
    fn kinds_follow_op_declaration_order() {
        let ops = one_op_of_each_variant();
        let kinds: Vec<OpKind> = ops.iter().map(Op::kind).collect();
        assert_eq!(kinds, OpKind::ALL, "one op per kind, in declaration order");
        for op in &ops {
            assert_eq!(OpKind::from_name(op.name()), Some(op.kind()));
        }
        assert_eq!(OpKind::from_name("flash_attn_ext"), None);
    }
}

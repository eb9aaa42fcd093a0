//! Which (op, src0 dtype) pairs a device can run.
//!
//! Ops are named by [`OpKind`] (from `ir`: the op without its parameters, named
//! as `Op::name()` names it: `mul_mat`, `rms_norm`, ...), so target files speak
//! the same names as errors and summaries.
//!
//! Invariants:
//! - an unknown op name in a target file is a parse error with its line and
//!   column (serde refuses the variant), never a silently ignored entry.

use ir::DType;
pub use ir::OpKind;
use serde::{Deserialize, Serialize};

/// A set of ops: every op of this build, every op but the listed ones, or
/// the listed ones.
///
/// `All` and `AllBut` mean every op this build of ggplan knows (but those
/// listed), including ops added later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpSet {
    /// Every op.
    All,
    /// Every op but these.
    AllBut(Vec<OpKind>),
    /// Only these ops.
    Only(Vec<OpKind>),
}

impl OpSet {
    /// True when `kind` is in the set.
    pub fn contains(&self, kind: OpKind) -> bool {
        match self {
            OpSet::All => true,
            OpSet::AllBut(kinds) => !kinds.contains(&kind),
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

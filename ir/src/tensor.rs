//! Tensors of a graph: ids, roles, constants and views.
//!
//! Invariants (checked by [`crate::verify`]):
//! - a tensor's `srcs` all have smaller ids (the tensor list is a topological order);
//! - leafs (`op == None`) have a leaf role and no sources; nodes have a node role;
//! - `view` is `Some` exactly for view ops and ops that write into a source, and
//!   always names the *root* (a tensor that is not itself a view), never a view.

use crate::dtype::DType;
use crate::layout::Layout;
use crate::op::Op;
use serde::{Deserialize, Serialize};

/// Dense index of a tensor in its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The id as a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for TensorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// What a tensor is for; decides where it lives and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// Leaf read from a weights file, immutable.
    Weight,
    /// Leaf set by the caller before each run.
    Input,
    /// Leaf whose contents persist between runs and that the graph may write
    /// (through `cpy` or `set_rows` into views of it), such as a KV cache.
    State,
    /// Leaf whose values the graph itself defines (see [`ConstInit`]).
    Constant,
    /// Node computed during the run and dropped after its last use.
    Intermediate,
    /// Node the caller reads after the run.
    Output,
}

impl Role {
    /// True for the roles a leaf may have.
    pub fn is_leaf_role(self) -> bool {
        matches!(
            self,
            Role::Weight | Role::Input | Role::State | Role::Constant
        )
    }
}

/// How a constant leaf's values are defined, element by element, over its
/// elements in ggml order (flat index = i0 + ne0*(i1 + ne1*(i2 + ne2*i3))).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConstInit {
    /// Every element the same value.
    Fill(f64),
    /// start + step * flat index (positions 0, 1, 2, ... for rope).
    Arange {
        /// Value of element 0.
        start: f64,
        /// Increment per element.
        step: f64,
    },
    /// A causal attention mask [n_kv, n_tokens]: 0 where key `i0 <= n_past + i1`,
    /// -inf elsewhere; repeated over dims 2 and 3.
    CausalMask {
        /// Cached positions before the first token.
        n_past: i64,
    },
    /// Explicit values, one per element.
    Values(Vec<f64>),
}

impl ConstInit {
    /// The value of the element at `idx` of a tensor with extents `ne`.
    pub fn value_at(&self, ne: [i64; 4], idx: [i64; 4]) -> f64 {
        let flat = idx[0] + ne[0] * (idx[1] + ne[1] * (idx[2] + ne[2] * idx[3]));
        match self {
            ConstInit::Fill(v) => *v,
            ConstInit::Arange { start, step } => start + step * flat as f64,
            ConstInit::CausalMask { n_past } => {
                if idx[0] <= n_past + idx[1] {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            }
            ConstInit::Values(v) => v.get(flat as usize).copied().unwrap_or(f64::NAN),
        }
    }
}

/// Where a view's bytes are: inside its root tensor, at a byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ViewOf {
    /// The tensor that owns the bytes (never itself a view).
    pub root: TensorId,
    /// Byte offset from the start of the root.
    pub offset: u64,
}

/// One tensor of a graph: a leaf or a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Unique name within the graph (weights: the name in the weights file).
    pub name: String,
    /// dtype, extents and strides.
    pub layout: Layout,
    /// What the tensor is for.
    pub role: Role,
    /// The op computing it; `None` for leafs.
    pub op: Option<Op>,
    /// Operands, in the op's order.
    pub srcs: Vec<TensorId>,
    /// For views and write-into ops: the root whose bytes this tensor aliases.
    pub view: Option<ViewOf>,
    /// For constants: how their values are defined.
    pub init: Option<ConstInit>,
    /// For a weight that is one slice of a stored tensor (tensor
    /// parallelism): which tensor and which slice.
    pub shard: Option<crate::shard::WeightShard>,
}

impl Tensor {
    /// True for leafs (weights, inputs, state, constants).
    pub fn is_leaf(&self) -> bool {
        self.op.is_none()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The extents.
    pub fn ne(&self) -> [i64; 4] {
        self.layout.ne
    }

    /// `name dtype [ne]`, for error messages.
    pub fn describe(&self) -> String {
        format!(
            "'{}' {} {}",
            self.name,
            self.layout.dtype,
            crate::layout::fmt_ne(&self.layout.ne)
        )
    }
}

//! Lifetime types shared by the emit pass and the memory planner: a
//! [`Lifetime`], the in-place rule ([`in_place_operand`]), and the
//! [`Liveness`] summary with the execution-order check behind
//! [`crate::emit::compute_liveness`].
//!
//! There is one lifetime analysis: the emit pass's, over a plan's global step
//! order (`emit/lifetimes.rs`); [`crate::emit::compute_liveness`] runs it on
//! one device for a graph and an execution order. This module holds no
//! analysis of its own and imports nothing from `emit`.
//!
//! **Invariants** of a [`Liveness`] (re-derived independently by `tests/liveness.rs`):
//! - steps are the order's non-view nodes (views run nothing), numbered from 0;
//! - `tensors` holds exactly the nodes that own compute memory: non-view nodes
//!   that are not write-into ops (`cpy`, `set_rows`), with role Intermediate or
//!   Output, in step order. Each has `first` = its step and `last` = the last step
//!   reading it directly or through views, never before `first`; a tensor that
//!   is an Output, or whose view is an Output, lives to `n_steps - 1`.
//! - `buffers` partition those tensors: a tensor owns a new buffer, or it replaces
//!   a source in place (recorded in `in_place`) and joins that source's buffer. A
//!   buffer's lifetime is the union of its members'; consecutive members meet only
//!   at the hand-over step, where the same node reads the old and writes the new.
//! - Sizes are `ggml_nbytes` (span bytes) aligned up to the alignment (0 acts as 1).
//! - Leafs (weights, state, inputs, constants) never enter `tensors` or
//!   `buffers`; `resident` lists them with their arena [`Usage`].
//!
//! In-place rules are in [`in_place_operand`] and the emit pass's donor check.

mod order;

pub(crate) use order::check_order;
pub use order::{OrderError, OrderProblem};

use ir::{Op, TensorId};

/// A position in the execution order.
pub type Step = usize;

/// A block of bytes that is alive over the steps `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// The tensor this lifetime belongs to (for a merged buffer: its first member).
    pub tensor: TensorId,
    /// Bytes, aligned up to the alignment.
    pub size: u64,
    /// The producing step.
    pub first: Step,
    /// The last step that reads the bytes (inclusive).
    pub last: Step,
}

impl Lifetime {
    /// True when both are alive at some common step.
    pub fn overlaps_in_time(&self, other: &Lifetime) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

pub use ir::plan::Usage;

/// A leaf that lives for the whole run in a non-compute arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resident {
    /// The leaf.
    pub tensor: TensorId,
    /// Its arena.
    pub usage: Usage,
    /// Bytes, aligned up to the alignment.
    pub size: u64,
}

/// A node that writes its result over a dying source's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlace {
    /// The node.
    pub node: TensorId,
    /// The compute tensor (a root) whose bytes it takes over.
    pub reuses: TensorId,
    /// The operand it read them through: `reuses` itself, or a view of it at offset 0.
    pub via: TensorId,
}

/// The result of [`crate::emit::compute_liveness`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// Length of the execution order.
    pub n_steps: usize,
    /// Every tensor owning compute memory, its own lifetime, in step order.
    pub tensors: Vec<Lifetime>,
    /// Compute buffers after in-place merges, in order of first step; `tensor`
    /// is the member that created the buffer.
    pub buffers: Vec<Lifetime>,
    /// Indexed by tensor id: the buffer holding the tensor's bytes, for compute
    /// tensors and for views of them (a view adds its offset); `None` otherwise.
    pub buffer_of: Vec<Option<usize>>,
    /// In-place reuses, in step order.
    pub in_place: Vec<InPlace>,
    /// Every leaf with its arena and size, in id order.
    pub resident: Vec<Resident>,
}

impl Liveness {
    /// Total bytes of the leafs living in `usage`'s arena (0 for `Compute`).
    pub fn resident_bytes(&self, usage: Usage) -> u64 {
        self.resident
            .iter()
            .filter(|r| r.usage == usage)
            .fold(0u64, |acc, r| acc.saturating_add(r.size))
    }

    /// The compute arena without any reuse: every compute tensor its own bytes.
    pub fn no_reuse_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |acc, t| acc.saturating_add(t.size))
    }
}

/// Which operand a node of `op` with `n_srcs` sources may overwrite in place.
///
/// The result is written over the operand's bytes, so each output element may
/// depend only on input elements the kernel has already read by the time it
/// writes that element's position. Allowed (operand 0 only):
/// - unary elementwise ops (`scale`, `sqr`, `sqrt`, `silu`, `gelu`, `gelu_erf`,
///   `relu`, `tanh`) and `diag_mask_inf`: out\[i\] depends on in\[i\] (and i);
/// - `add`/`sub`/`mul`/`div`: out\[i\] = src0\[i\] op src1\[broadcast i\]; src1 is
///   never taken, because it repeats over src0: overwriting it would change the
///   values later rows read;
/// - `rms_norm`, `norm`, `soft_max` (its mask is src1, broadcast over heads, never
///   taken): row-local; kernels reduce a row before writing it;
/// - `rope`: each rotated pair depends only on itself; kernels read both elements
///   of a pair before writing either (src1, the I32 positions, is never taken);
/// - `glu` with two sources: act(gate\[i\]) * up\[i\]; the one-source form halves the
///   row, so elements move and it is refused;
/// - `cont`: only when the caller's layout check finds the source already packed
///   with the result's layout (then it is a plain copy).
///
/// Refused: `mul_mat` (every output reads whole rows of both inputs), `get_rows`
/// (rows move), `concat`, `sum_rows`, `mean`, `argmax` (shapes change), `cpy` and
/// `set_rows` (they already write into their destination and own no memory), and
/// view ops (they own no memory).
pub fn in_place_operand(op: &Op, n_srcs: usize) -> Option<usize> {
    match op {
        ir::unary_op!() | Op::DiagMaskInf { .. } => Some(0),
        Op::Add | Op::Sub | Op::Mul | Op::Div => Some(0),
        Op::RmsNorm { .. } | Op::Norm { .. } | Op::SoftMax { .. } | Op::Rope(_) => Some(0),
        Op::Glu { .. } => (n_srcs == 2).then_some(0),
        Op::Cont => Some(0),
        // A sort writes indices while it reads values: its own memory.
        Op::MulMat
        | Op::MulMatId
        | Op::MulMatIdPart { .. }
        | Op::Argsort { .. }
        | Op::GetRows
        | Op::GetRowsPart { .. }
        | Op::Concat { .. }
        | Op::SumRows
        | Op::Mean
        | Op::Argmax => None,
        Op::Cpy | Op::SetRows => None,
        // Parts live on other devices; a participant writes its own result.
        Op::AllReduceSum { .. } | Op::AllGather { .. } | Op::ReduceScatterSum { .. } => None,
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => None,
    }
}

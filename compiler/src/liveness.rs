//! Liveness: when each compute-arena tensor is alive, which nodes overwrite a
//! dying source in place, and how big the tensors of the other arenas are.
//!
//! Input: a graph and an execution order (every node exactly once, each after
//! its node sources). Step `s` is the position in that order.
//!
//! **Invariants** of a [`Liveness`] (re-derived independently by `tests/liveness.rs`):
//! - `tensors` holds exactly the nodes that own compute memory: non-view nodes
//!   that are not write-into ops (`cpy`, `set_rows`), with role Intermediate or
//!   Output, in step order. Each has `first` = its step and `last` = the last step
//!   of any node reading it directly or through a view (a view of a view names the
//!   root; write-into results are views of their destination's root), never before
//!   `first`; a tensor that is an Output, or whose view is an Output, lives to
//!   `n_steps - 1`.
//! - `buffers` partition those tensors: a tensor owns a new buffer, or it replaces
//!   a source in place (recorded in `in_place`) and joins that source's buffer. A
//!   buffer's lifetime is the union of its members'; consecutive members meet only
//!   at the hand-over step, where the same node reads the old and writes the new.
//! - Sizes are `ggml_nbytes` (span bytes) aligned up to the alignment (0 acts as 1).
//! - Leafs (weights, state, inputs, constants) never enter `tensors` or
//!   `buffers`; `resident` lists them with their arena [`Usage`].
//!
//! In-place rules are in [`in_place_operand`] and `in_place_source` below.

mod order;

pub use order::{OrderError, OrderProblem};

use ir::{Graph, Layout, Op, Role, Tensor, TensorId};

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

/// The result of [`compute_liveness`].
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
        Op::Scale { .. }
        | Op::Sqr
        | Op::Sqrt
        | Op::Silu
        | Op::Gelu
        | Op::GeluErf
        | Op::Relu
        | Op::Tanh
        | Op::DiagMaskInf { .. } => Some(0),
        Op::Add | Op::Sub | Op::Mul | Op::Div => Some(0),
        Op::RmsNorm { .. } | Op::Norm { .. } | Op::SoftMax { .. } | Op::Rope(_) => Some(0),
        Op::Glu { .. } => (n_srcs == 2).then_some(0),
        Op::Cont => Some(0),
        Op::MulMat
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

/// Lifetimes of the compute tensors of `graph` run in `order`, in-place reuse,
/// and the leafs of the other arenas. Sizes are aligned up to `alignment`.
///
/// Fails, listing every problem, when `order` is not an execution order of
/// `graph`'s nodes (an unknown id, a leaf, a repeat, a missing node, or a node
/// before one of its sources). `graph` is expected to have passed `ir::verify`.
pub fn compute_liveness(
    graph: &Graph,
    order: &[TensorId],
    alignment: u64,
) -> Result<Liveness, OrderError> {
    order::check_order(graph, order)?;
    let n_steps = order.len();
    let root = |id: TensorId| graph.storage_of(id).root.index();

    // The last step reading each root, directly or through views.
    let mut last_read: Vec<Option<Step>> = vec![None; graph.len()];
    for (step, &id) in order.iter().enumerate() {
        let t = graph.tensor(id);
        for &src in &t.srcs {
            let r = root(src);
            last_read[r] = last_read[r].max(Some(step));
        }
        if t.role == Role::Output {
            last_read[root(id)] = Some(n_steps - 1);
        }
    }

    let mut tensors = Vec::new();
    let mut buffers: Vec<Lifetime> = Vec::new();
    let mut buffer_of: Vec<Option<usize>> = vec![None; graph.len()];
    let mut in_place = Vec::new();
    for (step, &id) in order.iter().enumerate() {
        let t = graph.tensor(id);
        if !owns_compute_memory(t) {
            continue;
        }
        let own = Lifetime {
            tensor: id,
            size: align_up(t.layout.span_bytes(), alignment),
            first: step,
            last: last_read[id.index()].unwrap_or(step).max(step),
        };
        tensors.push(own);
        let shared = in_place_source(graph, t, step, &last_read, &buffer_of)
            .and_then(|(via, reuses)| Some((via, reuses, buffer_of[reuses.index()]?)));
        if let Some((via, reuses, b)) = shared {
            let buf = &mut buffers[b];
            buf.last = buf.last.max(own.last);
            buf.size = buf.size.max(own.size);
            buffer_of[id.index()] = Some(b);
            in_place.push(InPlace {
                node: id,
                reuses,
                via,
            });
        } else {
            buffer_of[id.index()] = Some(buffers.len());
            buffers.push(own);
        }
    }
    for id in graph.ids() {
        if graph.tensor(id).view.is_some() {
            buffer_of[id.index()] = buffer_of[root(id)];
        }
    }

    let resident = graph
        .leafs()
        .map(|id| {
            let t = graph.tensor(id);
            Resident {
                tensor: id,
                usage: Usage::of(t.role),
                size: align_up(t.layout.span_bytes(), alignment),
            }
        })
        .collect();
    Ok(Liveness {
        n_steps,
        tensors,
        buffers,
        buffer_of,
        in_place,
        resident,
    })
}

/// True for nodes whose bytes are their own and live in the compute arena.
fn owns_compute_memory(t: &Tensor) -> bool {
    let Some(op) = t.op else { return false };
    t.view.is_none()
        && !op.is_view()
        && op.writes_into_source().is_none()
        && matches!(t.role, Role::Intermediate | Role::Output)
}

/// The (operand, root) whose buffer node `t` at `step` may take over, if any:
/// the op allows it ([`in_place_operand`]); the operand is a compute
/// Intermediate root or a view of one at offset 0; this step is the root's last
/// read; the operand is packed with the result's dtype and extents; and no other
/// operand of the node reads the same root through a different tensor.
fn in_place_source(
    graph: &Graph,
    t: &Tensor,
    step: Step,
    last_read: &[Option<Step>],
    buffer_of: &[Option<usize>],
) -> Option<(TensorId, TensorId)> {
    let operand = in_place_operand(t.op.as_ref()?, t.srcs.len())?;
    let via = *t.srcs.get(operand)?;
    let storage = graph.storage_of(via);
    let root = graph.tensor(storage.root);
    let ok = storage.offset == 0
        && root.role == Role::Intermediate
        && buffer_of[storage.root.index()].is_some()
        && last_read[storage.root.index()] == Some(step)
        && same_packed_bytes(&graph.tensor(via).layout, &t.layout)
        && t.srcs
            .iter()
            .all(|&s| s == via || graph.storage_of(s).root != storage.root);
    ok.then_some((via, storage.root))
}

/// True when element i of `a` and of `b` sit at the same byte offset for every
/// i: same dtype and extents, both packed (unit dims may carry any stride).
fn same_packed_bytes(a: &Layout, b: &Layout) -> bool {
    a.dtype == b.dtype && a.ne == b.ne && a.is_contiguous() && b.is_contiguous()
}

/// `n` rounded up to a multiple of `alignment` (0 acts as 1), or `u64::MAX`
/// when that overflows (never a smaller size: `plan_memory` then refuses it).
fn align_up(n: u64, alignment: u64) -> u64 {
    let a = alignment.max(1);
    n.div_ceil(a).saturating_mul(a)
}

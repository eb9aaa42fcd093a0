//! The plan checker: re-proves a [`Plan`] from the plan alone.
//!
//! It shares no code with the passes that make plans (assign, schedule, split,
//! fuse, liveness, memory): it reads only `ir` types (the plan, [`crate::Op`], the
//! shape rules of [`crate::rules`]) and, when given one, the target. Lifetimes,
//! spans and validity are recomputed here from scratch. It never stops at the
//! first problem: [`check_plan`] returns every violation, each with its
//! [`ViolationKind`], the tensor to blame when there is one, and a sentence. It
//! never panics, whatever the plan holds (indices out of range, overflowing
//! sizes, zero alignments): every lookup is a `.get()`, every sum is checked,
//! and an item whose indices are out of range is reported once (as
//! [`ViolationKind::Format`]) and skipped by the later families.
//!
//! **Invariants re-proved**, by family (one file each):
//! 1. `format` — [`ViolationKind::Format`]: the format version is this build's;
//!    `n_graph_tensors <= tensors.len()`; every tensor, device, arena and
//!    kernel index in placements, copies, steps and kernels is in range;
//!    device alignments are powers of two and buffer limits positive; every
//!    layout is valid (`ne >= 1`, whole blocks per row, a span that fits in
//!    `u64`); graph constants, and only they, carry an `init` (explicit values:
//!    one per element); `copy_of` is set exactly on the tensors past
//!    `n_graph_tensors`, and a copy has its original's dtype and extents; a
//!    copy placed as a view (a graph view re-created over a copy) views a copy
//!    of its original's owner at the original's offset; a copy moves the bytes
//!    of a tensor of the same original into a copy tensor, `bytes` = its span; an
//!    op step has its op's arity, is not a view op (views run no kernel), and
//!    its destination's dtype and extents follow the op's shape rule
//!    (`shape`, through [`crate::rules::derive`]).
//! 2. `placement` — [`ViolationKind::Placement`] and [`ViolationKind::Bounds`]:
//!    an arena placement is in an arena of the tensor's device and of the usage
//!    its role asks for, at an offset aligned to the device's alignment, and
//!    ends inside the arena (span = ggml_nbytes, computed here); a view names a
//!    tensor with an arena placement on the same device and stays inside its
//!    span; `Fused` placements are exactly the non-last members of fused
//!    kernels and what fused `mul_mat` steps compute inside; an arena fits the device's `max_buffer_bytes` (the compiler
//!    chunks arenas) and the sum of a device's arenas its `memory_bytes`; the result of
//!    a write-into op (`cpy`, `set_rows`) is a view of its destination's bytes.
//! 3. `order` — [`ViolationKind::Order`] and [`ViolationKind::Device`]: walking
//!    the splits in order (copies, then steps), every tensor read already holds
//!    data (written before, a leaf — Weight, Input, State, Constant — or a view
//!    of such bytes that no step writes itself); copies read another device and
//!    write the split's device; every tensor a step touches lives on the split's
//!    device (a view on its owner's); every graph node with bytes is written
//!    exactly once (by an op step or as a fused kernel's output), a view at most
//!    once; a copy tensor with bytes is filled by copies only, at least once (a
//!    refill after its original is written into is allowed), a re-created view
//!    by none; leafs and fused intermediates are never written.
//! 4. `lifetime` — [`ViolationKind::Lifetime`]: over a global step counter
//!    (split by split: its copies, then its steps) a tensor with arena bytes
//!    lives from the step writing it to the last step touching it (reads and
//!    writes through views count for the owner); Output tensors (and owners of
//!    Output views) live to the end, leafs for the whole run. Two tensors of
//!    one arena alive at a common step never share a byte, except in-place
//!    reuse: the step that writes one reads the other (directly or through a
//!    view), that other dies there and is neither a leaf nor kept to the end,
//!    and both have the same offset and span.
//! 5. `support` — [`ViolationKind::Support`]: not here; the compiler's family
//!    (which knows targets) runs at this point through [`check_plan_with`].
//! 6. `fused` — [`ViolationKind::Fused`]: a kernel's `nodes` end with its
//!    `output`, no node belongs to two kernels, one step runs each kernel; its
//!    body is non-empty and topologically ordered, every `Input`, `RmsNorm` and
//!    `Norm` names an input in range; inputs broadcast over the output and
//!    norms read rows of the output's length; the body's extents, and every
//!    node's, equal the output tensor's; a kernel reads no fused intermediate.
//! 7. `stats` — [`ViolationKind::Stats`]: `n_splits` is the number of splits;
//!    per link direction, copy counts and bytes are the copies'; per device,
//!    `compute_bytes` is the sum of its Compute arenas and the lower bound does
//!    not exceed it; the estimated time is finite and non-negative.
//! 8. `streams` — [`ViolationKind::Sync`]: one compute and at most one copy
//!    stream per device; a split runs on its device's compute stream, a copy on
//!    a copy stream of its source's or destination's device; waits and records
//!    name steps that exist, sorted; every event is recorded exactly once, and
//!    every wait comes later in global order than the record it waits for (so
//!    no schedule deadlocks). From these, happens-before as vector clocks.
//! 9. `race` — [`ViolationKind::Race`]: accesses on different streams to
//!    overlapping bytes, one a write, are ordered by happens-before in their
//!    global order (read after write, copies included; write after read, so no
//!    bytes are reused while another stream may still read them; write after
//!    write). Skipped when family 8 found a problem.
//! 10. `collective` and `partial` — [`ViolationKind::Collective`]: the
//!     participants of each collective (`all_reduce_sum`, `all_gather`) are
//!     ranks `0..ranks`, each once, each on its own device, all running the
//!     same op (and `dim`) over the same `ranks` and the same parts in the
//!     same order (their results' shapes are family 1's); a partial sum (a
//!     part of an all-reduce) is read by nothing but all-reduce participants:
//!     no other step, no fused kernel, no copy, directly or through a view;
//!     and no graph output is a partial sum that no all-reduce adds up.
//! 11. `shards` — [`ViolationKind::Shard`]: a tensor with a `shard` is a graph
//!     weight and a valid slice of its source
//!     ([`crate::WeightShard::problem`]); the shards of one source agree on
//!     its extents, dtype and axis, and their slices tile the source along
//!     that axis with no gap and no overlap.
//! 12. `routed` — [`ViolationKind::Collective`]: the `mul_mat_id_part`s of
//!     one routed value (expert parallelism, marked `SplitPart::Routed`)
//!     carry marks naming their own experts, agree on the expert set, read
//!     the same ids, and their experts tile the set with no gap and no
//!     overlap; a routed part is read only by element-wise ops that map 0 to
//!     0, packing, `mul_mat_id_part`, `add`/`sub` and collectives.

mod attention;
mod collective;
mod format;
mod fused;
mod lifetime;
mod order;
mod partial;
mod placement;
mod product_glu;
mod product_many;
mod rope_store;
mod routed;
pub use rope_store::{MAX_OPS as ROPE_STORE_MAX_OPS, MAX_TENSORS as ROPE_STORE_MAX_TENSORS};
mod race;
mod shape;
mod shards;
mod stats;
mod streams;
mod trace;

use crate::plan::{Placement, Plan, PlanTensor};
use crate::{DType, Role};

/// Which family of invariants a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// Indices out of range, bad version, malformed layouts, copies, arity, shapes.
    Format,
    /// A placement in the wrong arena, misaligned, or a bad view or fused placement.
    Placement,
    /// Two tensors alive at the same step share bytes.
    Lifetime,
    /// A copy or step touches bytes on a device other than its split's.
    Device,
    /// A read before the bytes were written, or a tensor written the wrong number of times.
    Order,
    /// An op or fused expression its device does not support.
    Support,
    /// Bytes outside their arena or view owner, or arenas over a device's memory.
    Bounds,
    /// A malformed fused kernel.
    Fused,
    /// Stats that disagree with the plan.
    Stats,
    /// A malformed stream or event: wrong stream for a split or copy, an event
    /// recorded twice or never, a wait no earlier record satisfies.
    Sync,
    /// Two accesses on different streams to the same bytes, one a write, that
    /// no chain of events orders.
    Race,
    /// Collective participants that do not form one group (ranks, op, parts,
    /// devices), or a partial sum read by something other than its all-reduce.
    Collective,
    /// A weight shard that is no valid slice, or shards of one stored tensor
    /// that disagree, leave a gap or overlap.
    Shard,
}

impl std::fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ViolationKind::Format => "format",
            ViolationKind::Placement => "placement",
            ViolationKind::Lifetime => "lifetime",
            ViolationKind::Device => "device",
            ViolationKind::Order => "order",
            ViolationKind::Support => "support",
            ViolationKind::Bounds => "bounds",
            ViolationKind::Fused => "fused",
            ViolationKind::Stats => "stats",
            ViolationKind::Sync => "sync",
            ViolationKind::Race => "race",
            ViolationKind::Collective => "collective",
            ViolationKind::Shard => "shard",
        })
    }
}

/// One broken invariant of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanViolation {
    /// The family of invariants broken.
    pub what: ViolationKind,
    /// The tensor to blame, when there is one.
    pub tensor: Option<u32>,
    /// The tensor's name, or what else is to blame (`split 2`, `arena 0`, `stats`).
    pub name: String,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl std::fmt::Display for PlanViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tensor {
            Some(id) => write!(f, "tensor '{}' (t{id}): {}", self.name, self.message),
            None => write!(f, "{}: {}", self.name, self.message),
        }
    }
}

/// Re-proves every invariant of the module doc for `plan`. Returns every
/// violation found (empty when the plan is valid), family by family in the
/// order of the module doc.
pub fn check_plan(plan: &Plan) -> Vec<PlanViolation> {
    check_plan_with(plan, |_| {})
}

/// [`check_plan`], with `extra` run in family 5's place (after lifetimes,
/// before fused kernels), reporting through the same [`Checker`].
pub fn check_plan_with(plan: &Plan, extra: impl FnOnce(&mut Checker<'_>)) -> Vec<PlanViolation> {
    let mut c = Checker {
        plan,
        out: Vec::new(),
    };
    format::check(&mut c);
    shape::check(&mut c);
    placement::check(&mut c);
    let accesses = trace::accesses(plan);
    order::check(&mut c, &accesses);
    lifetime::check(&mut c, &accesses);
    extra(&mut c);
    fused::check(&mut c);
    stats::check(&mut c);
    if let Some(hb) = streams::check(&mut c, &accesses) {
        race::check(&mut c, &accesses, &hb);
    }
    collective::check(&mut c);
    partial::check(&mut c, &accesses);
    shards::check(&mut c);
    routed::check(&mut c, &accesses);
    c.out
}

/// The plan under check and the violations found so far.
pub struct Checker<'p> {
    /// The plan.
    pub plan: &'p Plan,
    out: Vec<PlanViolation>,
}

impl<'p> Checker<'p> {
    /// Tensor `i`, if in range.
    pub fn tensor(&self, i: u32) -> Option<&'p PlanTensor> {
        self.plan.tensors.get(i as usize)
    }

    /// Reports a problem of tensor `i` (named from the plan when in range).
    pub fn tensor_problem(&mut self, what: ViolationKind, i: u32, message: String) {
        let name = self.tensor(i).map(|t| t.name.clone()).unwrap_or_default();
        self.out.push(PlanViolation {
            what,
            tensor: Some(i),
            name,
            message,
        });
    }

    /// Reports a problem of something other than a tensor.
    pub fn problem(&mut self, what: ViolationKind, name: impl Into<String>, message: String) {
        self.out.push(PlanViolation {
            what,
            tensor: None,
            name: name.into(),
            message,
        });
    }

    /// The tensor owning tensor `i`'s bytes: `i` itself for an arena placement,
    /// the viewed tensor for a view of an arena-placed tensor; `None` for fused
    /// intermediates, broken views and indices out of range.
    fn owner(&self, i: u32) -> Option<u32> {
        match self.tensor(i)?.placement {
            Placement::Arena { .. } => Some(i),
            Placement::View { of, .. } => match self.tensor(of)?.placement {
                Placement::Arena { .. } => Some(of),
                _ => None,
            },
            Placement::Fused => None,
        }
    }

    /// The device holding tensor `i`'s bytes: its owner's for a view.
    fn device_of(&self, i: u32) -> Option<u32> {
        let owner = self.owner(i).unwrap_or(i);
        self.tensor(owner).map(|t| t.device.0)
    }

    /// `'name' (tN)` for messages.
    fn describe(&self, i: u32) -> String {
        match self.tensor(i) {
            Some(t) => format!("'{}' (t{i})", t.name),
            None => format!("t{i} (out of range)"),
        }
    }

    /// True when devices `a` and `b` address the same memory (CPU devices
    /// of one host), so a step on one may read the other's bytes in place.
    fn share_memory(&self, a: u32, b: u32) -> bool {
        let cpu = |d: u32| {
            self.plan
                .devices
                .get(d as usize)
                .is_some_and(|dev| dev.kind.is_cpu())
        };
        cpu(a) && cpu(b)
    }

    /// The name of device `d` for messages.
    fn device_name(&self, d: u32) -> String {
        match self.plan.devices.get(d as usize) {
            Some(dev) => format!("'{}' (d{d})", dev.name),
            None => format!("d{d} (out of range)"),
        }
    }
}

/// True for the roles of graph leafs, whose bytes hold data from the start.
fn is_leaf_role(role: Role) -> bool {
    matches!(
        role,
        Role::Weight | Role::Input | Role::State | Role::Constant
    )
}

/// ggml_nbytes of a layout, computed with checked arithmetic: the bytes from
/// the first element to one past the last. `None` for negative extents or a
/// span past `u64`; 0 when an extent is 0.
fn span_bytes(dtype: DType, ne: [i64; 4], nb: [u64; 4]) -> Option<u64> {
    if ne.iter().any(|&n| n < 0) {
        return None;
    }
    if ne.contains(&0) {
        return Some(0);
    }
    let block = dtype.block_elems();
    let (mut bytes, first_dim) = if block == 1 {
        (dtype.block_bytes(), 0)
    } else {
        ((ne[0] as u64 / block).checked_mul(nb[0])?, 1)
    };
    for i in first_dim..4 {
        bytes = bytes.checked_add((ne[i] as u64 - 1).checked_mul(nb[i])?)?;
    }
    Some(bytes)
}

/// [`span_bytes`] of a plan tensor.
fn span_of(t: &PlanTensor) -> Option<u64> {
    span_bytes(t.dtype, t.ne, t.nb)
}

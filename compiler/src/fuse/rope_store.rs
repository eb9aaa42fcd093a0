//! Rotary embeddings and KV-cache stores: a block's `rope` (of its queries
//! and keys) and `set_rows` (its keys and values into the caches) nodes
//! become one step, so a GPU launches one kernel for them. Every member
//! keeps its tensor and its bytes; the step runs at the last member's
//! position.
//!
//! Invariants of every [`RopeStore`] (the checker re-proves the step's
//! counts, shapes and independence on its own):
//! 1. it has 2 to [`MAX_OPS`] members, distinct non-view `rope` (2 or 3
//!    sources) and `set_rows` nodes no other fusion took, naming at most
//!    [`MAX_TENSORS`] distinct tensors (members and sources, but the
//!    destinations `set_rows` write into);
//! 2. its ropes have equal parameters, positions and frequency factors;
//! 3. every member runs on the same device, one that runs our kernels (not a
//!    remote RPC server); no tensor involved is a partial sum of a tensor
//!    split;
//! 4. no member reads the root another member writes (a rope its own id, a
//!    `set_rows` the root it writes into), and no two write one root, except
//!    a *chained* store: a `set_rows` whose rows are a packed view at offset
//!    0 of an earlier member rope's packed result of its dtype and element
//!    count (the step's kernel rotates the rope's sources for it);
//! 5. members are in execution order, all within [`WINDOW`] computing nodes
//!    of the first; every computing node between the first and the last is
//!    on the same device, reads no root a member writes and writes
//!    into no root a member reads or writes, so running every member at the
//!    last one's position computes what the unfused nodes computed;
//! 6. groups are found greedily along the order: each free member starts
//!    one, which takes the later free members that fit, in order, up to the
//!    maximum, and stops at the first node that rule 5 forbids passing; the
//!    same graph, assignment and order always give the same groups, in the
//!    order of their first members;
//! 7. its results and operands (but the destinations `set_rows` write into)
//!    span at most [`MAX_BYTES`] together: the step runs its ops at once, so
//!    every operand lives until the last op's position (the nodes between
//!    keep their lifetimes); for launch-bound (small) ops that costs nothing
//!    worth counting, for large ones it would raise the peak of compute
//!    memory for a launch that does not matter.

use super::Context;
use ir::plan::SplitPart;
use ir::{Graph, Op, TensorId};

pub use ir::plan::check::{ROPE_STORE_MAX_OPS as MAX_OPS, ROPE_STORE_MAX_TENSORS as MAX_TENSORS};

/// How many computing nodes after its first member a group may reach (rule
/// 5: keeps the operands' lifetimes short).
pub const WINDOW: usize = 32;

/// The most bytes a group's results and operands may span together (rule 7).
/// A decode block's are a few KiB (SmolLM2's 7 KiB; a 70B model's, 8192-wide
/// queries over 1024-wide keys, about 80 KiB); a 32-token
/// prefill block of 512-wide projections already spans 320 KiB, and gains
/// nothing from sharing a launch.
pub const MAX_BYTES: u64 = 256 << 10;

/// Rope and `set_rows` nodes computed as one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RopeStore {
    /// The members, in execution order; each keeps its bytes.
    pub members: Vec<TensorId>,
}

/// The groups of the graph (see the module doc); `taken` marks nodes other
/// fusions took.
pub(super) fn find(ctx: &Context<'_>, order: &[TensorId], taken: &[bool]) -> Vec<RopeStore> {
    let mut free: Vec<bool> = taken.iter().map(|t| !t).collect();
    let mut groups = Vec::new();
    for (p, &first) in order.iter().enumerate() {
        if !at(ctx, first, p) || !free[first.index()] || !member(ctx, first) {
            continue;
        }
        let mut group = Group::new(ctx, first);
        let mut seen = 0;
        for (q, &next) in order.iter().enumerate().skip(p + 1) {
            let t = ctx.graph.tensor(next);
            if !at(ctx, next, q) || t.op.is_none_or(|op| op.is_view()) {
                continue;
            }
            seen += 1;
            if seen > WINDOW || group.members.len() == MAX_OPS {
                break;
            }
            if ctx.device(next) != ctx.device(first) {
                break;
            }
            if free[next.index()] && member(ctx, next) && group.admits(next) {
                group.add(next);
            } else if group.blocked_by(next) {
                break;
            }
        }
        if group.members.len() >= 2 {
            for &m in &group.members {
                free[m.index()] = false;
            }
            groups.push(RopeStore {
                members: group.members,
            });
        }
    }
    groups
}

/// True when node `id` first appears at position `p`.
fn at(ctx: &Context<'_>, id: TensorId, p: usize) -> bool {
    ctx.pos.get(id.index()) == Some(&Some(p))
}

/// Rules 1 and 3 for one node.
fn member(ctx: &Context<'_>, id: TensorId) -> bool {
    let t = ctx.graph.tensor(id);
    let kind = match t.op {
        Some(Op::Rope(_)) => (2..=3).contains(&t.srcs.len()),
        Some(Op::SetRows) => t.srcs.len() == 3,
        _ => false,
    };
    let partial = std::iter::once(&id).chain(&t.srcs).any(|t| {
        matches!(
            ctx.assignment.parts.get(t.index()),
            Some(Some(SplitPart::Partial { .. }))
        )
    });
    // A set_rows node is a view of the bytes it writes into; a rope owns its.
    let bytes = t.op == Some(Op::SetRows) || t.view.is_none();
    kind && bytes && !partial && ctx.device(id).is_some_and(|d| (ctx.fusable)(d))
}

/// A group being grown: its members and the roots they read and write.
struct Group<'c, 'g> {
    ctx: &'c Context<'g>,
    members: Vec<TensorId>,
    reads: Vec<TensorId>,
    writes: Vec<TensorId>,
    tensors: Vec<TensorId>,
}

impl<'c, 'g> Group<'c, 'g> {
    fn new(ctx: &'c Context<'g>, first: TensorId) -> Self {
        let mut group = Group {
            ctx,
            members: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            tensors: Vec::new(),
        };
        group.add(first);
        group
    }

    fn graph(&self) -> &'g Graph {
        self.ctx.graph
    }

    fn root(&self, t: TensorId) -> TensorId {
        self.graph().storage_of(t).root
    }

    /// The sources `m` reads (a `set_rows`'s rows and indices).
    fn read_srcs(&self, m: TensorId) -> &'g [TensorId] {
        let t = self.graph().tensor(m);
        match t.op {
            Some(Op::SetRows) => &t.srcs[1..],
            _ => &t.srcs,
        }
    }

    fn add(&mut self, m: TensorId) {
        let chained = self.chained_rope(m);
        for &s in self.read_srcs(m) {
            if Some(self.root(s)) != chained {
                self.reads.push(self.root(s));
            }
        }
        if let Some(rope) = chained {
            let roots: Vec<TensorId> = (self.graph().tensor(rope).srcs.iter())
                .map(|&s| self.root(s))
                .collect();
            self.reads.extend(roots);
        }
        // A rope writes its own bytes, a set_rows its destination's.
        self.writes.push(self.root(m));
        self.tensors = self.with_tensors_of(m);
        self.members.push(m);
    }

    /// The member rope whose result `m` (a `set_rows`) stores through a
    /// packed view at offset 0 (rule 4's exception).
    fn chained_rope(&self, m: TensorId) -> Option<TensorId> {
        let g = self.graph();
        let t = g.tensor(m);
        if t.op != Some(Op::SetRows) {
            return None;
        }
        let rows = t.srcs[1];
        let storage = g.storage_of(rows);
        let rope = storage.root;
        let r = g.tensor(rows);
        let d = g.tensor(rope);
        let count = |ne: [i64; 4]| ne.iter().product::<i64>();
        let fits = self.members.contains(&rope)
            && matches!(d.op, Some(Op::Rope(_)))
            && d.view.is_none()
            && storage.offset == 0
            && r.layout.dtype == d.layout.dtype
            && r.layout.is_contiguous()
            && d.layout.is_contiguous()
            && count(r.layout.ne) == count(d.layout.ne);
        fits.then_some(rope)
    }

    /// The distinct tensors the kernel's arguments hold with `m` added: each
    /// member and its operands, but a `set_rows`'s destination operand.
    fn with_tensors_of(&self, m: TensorId) -> Vec<TensorId> {
        let t = self.graph().tensor(m);
        let skip = usize::from(t.op == Some(Op::SetRows));
        let mut tensors = self.tensors.clone();
        tensors.extend(std::iter::once(m).chain(t.srcs.iter().skip(skip).copied()));
        tensors.sort_unstable();
        tensors.dedup();
        tensors
    }

    /// Rules 1, 2, 4 and 7 for a candidate after the current members.
    fn admits(&self, m: TensorId) -> bool {
        let g = self.graph();
        let t = g.tensor(m);
        let angles = |r: &ir::Tensor| (r.op, r.srcs[1..].to_vec());
        let ropes_agree = match t.op {
            Some(Op::Rope(_)) => (self.members.iter())
                .map(|&o| g.tensor(o))
                .filter(|o| matches!(o.op, Some(Op::Rope(_))))
                .all(|o| angles(o) == angles(t)),
            _ => true,
        };
        let chained = self.chained_rope(m);
        let reads_written = (self.read_srcs(m).iter())
            .any(|&s| self.writes.contains(&self.root(s)) && Some(self.root(s)) != chained);
        let chained_reads_written = chained.is_some_and(|rope| {
            (g.tensor(rope).srcs.iter()).any(|&s| self.writes.contains(&self.root(s)))
        });
        let written = self.root(m);
        let clashes = self.writes.contains(&written) || self.reads.contains(&written);
        let tensors = self.with_tensors_of(m);
        let bytes: u64 = (tensors.iter())
            .map(|&t| g.tensor(t).layout.span_bytes())
            .sum();
        ropes_agree
            && !reads_written
            && !chained_reads_written
            && !clashes
            && tensors.len() <= MAX_TENSORS
            && bytes <= MAX_BYTES
    }

    /// Rule 5: true when the group may not move past computing node `t`.
    fn blocked_by(&self, t: TensorId) -> bool {
        let node = self.graph().tensor(t);
        let reads_written = (node.srcs.iter()).any(|&s| self.writes.contains(&self.root(s)));
        let writes_into = (node.op.and_then(|op| op.writes_into_source())).is_some_and(|_| {
            let r = self.root(t);
            self.reads.contains(&r) || self.writes.contains(&r)
        });
        reads_written || writes_into
    }
}

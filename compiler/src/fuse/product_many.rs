//! Sibling products: `mul_mat`s of one activation tensor (a transformer
//! block's Q, K and V projections) become one step, `dsts[i] = w_i · x`, so a
//! GPU launches one kernel for them. Each product keeps its tensor and its
//! bytes (other nodes read them).
//!
//! Invariants of every [`ProductMany`] (the checker re-proves the step's
//! shapes and reads on its own):
//! 1. it has 2 to [`MAX_PRODUCTS`] members, distinct non-view `mul_mat` nodes
//!    (F32 and packed) that no other fusion took (no elementwise group,
//!    product-add or product-GLU), none written into (`cpy`, `set_rows`:
//!    views of them are read after the step as before);
//! 2. every member reads the same activations `x` (one tensor id, so one K)
//!    and its own weight, all weights of one dtype (one kernel decodes them);
//! 3. every member runs on the same device, one that runs our kernels (not a
//!    remote RPC server);
//! 4. members are in execution order; the step runs at the first member's
//!    position, so each weight is a leaf or computed before it (and its
//!    root too), and no node from the first member to the last writes
//!    (`cpy`, `set_rows`) into the root of `x` or of any member's weight, so
//!    computing every product at the first position reads what the unfused
//!    `mul_mat`s read (their results are only written earlier);
//! 5. no tensor involved (members, weights, `x`) is a partial sum of a tensor
//!    split;
//! 6. groups are found greedily along the order: each free `mul_mat` starts
//!    one, which takes the later free `mul_mat`s that fit, in order, up to
//!    the maximum; a node is in at most one group; the same graph,
//!    assignment and order always give the same groups, in the order of
//!    their first members.

use super::Context;
use ir::plan::SplitPart;
use ir::{DType, Op, TensorId};

/// The most products one step computes (the CUDA argument block holds the
/// activations and five weight and result pairs).
pub const MAX_PRODUCTS: usize = 5;

/// Products of one activation tensor, computed as one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductMany {
    /// The `mul_mat` nodes, in execution order; each keeps its bytes.
    pub products: Vec<TensorId>,
}

impl ProductMany {
    /// The step's reads in the plan's order: each product's weight, then the
    /// activations.
    pub fn reads(&self, graph: &ir::Graph) -> Vec<TensorId> {
        let mut reads: Vec<TensorId> = (self.products.iter())
            .map(|&p| graph.tensor(p).srcs[0])
            .collect();
        reads.push(graph.tensor(self.products[0]).srcs[1]);
        reads
    }
}

/// The groups of the graph (see the module doc); `taken` marks nodes other
/// fusions took.
pub(super) fn find(ctx: &Context<'_>, order: &[TensorId], taken: &[bool]) -> Vec<ProductMany> {
    let mut free: Vec<bool> = taken.iter().map(|t| !t).collect();
    let mut groups = Vec::new();
    for (p, &first) in order.iter().enumerate() {
        if ctx.pos.get(first.index()) != Some(&Some(p)) || !free[first.index()] {
            continue;
        }
        if !member(ctx, first) || !weight_ready(ctx, first, p) {
            continue;
        }
        let x = ctx.graph.tensor(first).srcs[1];
        let device = ctx.device(first);
        let dtype = weight_dtype(ctx, first);
        let mut roots = vec![root(ctx, x), root(ctx, ctx.graph.tensor(first).srcs[0])];
        let mut products = vec![first];
        for (q, &next) in order.iter().enumerate().skip(p + 1) {
            if products.len() == MAX_PRODUCTS {
                break;
            }
            if ctx.pos.get(next.index()) != Some(&Some(q)) || !free[next.index()] {
                continue;
            }
            let fits = member(ctx, next)
                && ctx.graph.tensor(next).srcs[1] == x
                && ctx.device(next) == device
                && weight_dtype(ctx, next) == dtype
                && weight_ready(ctx, next, p);
            if !fits {
                continue;
            }
            let w = root(ctx, ctx.graph.tensor(next).srcs[0]);
            let with: Vec<TensorId> = roots.iter().copied().chain([w]).collect();
            let overwritten =
                (ctx.writes.iter()).any(|&(at, r)| p < at && at < q && with.contains(&r));
            if overwritten {
                continue;
            }
            roots = with;
            products.push(next);
        }
        if products.len() >= 2 {
            for &m in &products {
                free[m.index()] = false;
            }
            groups.push(ProductMany { products });
        }
    }
    groups
}

fn root(ctx: &Context<'_>, t: TensorId) -> TensorId {
    ctx.graph.storage_of(t).root
}

fn weight_dtype(ctx: &Context<'_>, p: TensorId) -> DType {
    ctx.graph.tensor(ctx.graph.tensor(p).srcs[0]).layout.dtype
}

/// Rules 1, 3 and 5 for one node.
fn member(ctx: &Context<'_>, p: TensorId) -> bool {
    let g = ctx.graph;
    let t = g.tensor(p);
    let &[w, x] = t.srcs.as_slice() else {
        return false;
    };
    let written_into = (ctx.writes.iter()).any(|&(_, r)| r == p);
    let partial = [p, w, x].iter().any(|t| {
        matches!(
            ctx.assignment.parts.get(t.index()),
            Some(Some(SplitPart::Partial { .. }))
        )
    });
    t.op == Some(Op::MulMat)
        && t.view.is_none()
        && t.layout.dtype == DType::F32
        && t.layout.is_contiguous()
        && !written_into
        && !partial
        && ctx.device(p).is_some_and(|d| (ctx.fusable)(d))
}

/// Rule 4's first half: `p`'s weight (and its root) is a leaf or a node
/// before position `first`.
fn weight_ready(ctx: &Context<'_>, p: TensorId, first: usize) -> bool {
    let w = ctx.graph.tensor(p).srcs[0];
    [w, root(ctx, w)].iter().all(|&t| {
        ctx.graph.tensor(t).is_leaf()
            || matches!(ctx.pos.get(t.index()), Some(Some(q)) if *q < first)
    })
}

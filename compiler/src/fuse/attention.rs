//! Attention over a KV cache as one step: `cont(permute(mul_mat(v,
//! soft_max(mul_mat(k, q), mask)), 0, 2, 1, 3))` — the scores, the
//! probabilities, the weighted sum of values and its head-merging copy —
//! becomes one [`ir::plan::Step::Attention`], so a GPU launches one kernel
//! per layer's attention instead of four, and the scores, probabilities and
//! product are never stored (placed `Fused`, taking no plan memory; a CPU
//! device keeps them in one pair of buffers its attention steps share, as
//! large as the largest step's, allocated once at load).
//!
//! Invariants of every [`Attention`] (the checker re-proves the step's
//! shapes, placement and reads on its own):
//! 1. `scores` is a non-view `mul_mat(k, q)` node, `probs` a non-view
//!    `soft_max(scores)` or `soft_max(scores, mask)` node, `product` a
//!    non-view `mul_mat(v, probs)` node, each F32 and packed, an
//!    `Intermediate` (not a graph output) that nothing writes into, whose one
//!    reader node is the next op of the chain; nothing views `scores` or
//!    `probs`, and only `permuted` views `product`;
//! 2. `permuted` is a `permute(product)` view with axes `(0, 2, 1, 3)`, an
//!    `Intermediate` whose one reader is `dst`, a non-view `cont` node that
//!    is F32, packed and in no elementwise group (it may be a graph output);
//! 3. all five run on the same device, one that runs our kernels (never a
//!    remote RPC server);
//! 4. in the execution order `scores < probs < product < dst`, and no node
//!    between `scores` and `dst` writes (`cpy`, `set_rows`) into the root of
//!    `k`, `q`, `v` or the mask, so computing everything at `dst`'s position
//!    reads the values the unfused ops read;
//! 5. no tensor involved is a part of a tensor split's partial sum;
//! 6. shapes one kernel covers: `k`, `q`, `v` and the mask are float
//!    (F32, F16, BF16); a head of `k` (`k.ne[0]`) and of `v` (`v.ne[1]`) has
//!    at most [`MAX_HEAD_DIM`] values. `k`/`v` heads broadcast over `q`'s as
//!    `mul_mat` broadcasts (grouped-query attention), any number of query
//!    rows (decode's one, prefill's many), any mask `soft_max` takes;
//! 7. a node is in at most one attention; the same graph, assignment and
//!    order always give the same attentions, in the order of their `dst`.

use super::Context;
use ir::plan::SplitPart;
use ir::{DType, Op, Role, TensorId};

/// The largest head (values per key or value row) an attention step takes:
/// the CUDA kernel keeps a row in registers, 8 values per lane of a warp.
pub const MAX_HEAD_DIM: i64 = 256;

/// One attention chain, computed as one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attention {
    /// `mul_mat(k, q)` (never stored).
    pub scores: TensorId,
    /// `soft_max(scores, mask?)` (never stored).
    pub probs: TensorId,
    /// `mul_mat(v, probs)` (never stored).
    pub product: TensorId,
    /// `permute(product, 0, 2, 1, 3)` (a view of nothing stored).
    pub permuted: TensorId,
    /// The `cont` node, whose tensor the step writes.
    pub dst: TensorId,
}

impl Attention {
    /// The step's reads in the plan's order: `k`, `q`, `v`, then the mask
    /// when the softmax has one.
    pub fn reads(&self, graph: &ir::Graph) -> Vec<TensorId> {
        let s = &graph.tensor(self.scores).srcs;
        let mut reads = vec![s[0], s[1], graph.tensor(self.product).srcs[0]];
        reads.extend(graph.tensor(self.probs).srcs.get(1));
        reads
    }

    /// The softmax's `(scale, max_bias)`.
    pub fn softmax(&self, graph: &ir::Graph) -> (f32, f32) {
        match graph.tensor(self.probs).op {
            Some(Op::SoftMax { scale, max_bias }) => (scale, max_bias),
            _ => unreachable!("rule 1: probs is a soft_max node"),
        }
    }

    /// Its nodes: the four intermediates, then `dst`.
    pub fn nodes(&self) -> [TensorId; 5] {
        [
            self.scores,
            self.probs,
            self.product,
            self.permuted,
            self.dst,
        ]
    }
}

/// The attentions of the graph (see the module doc); `taken` marks nodes
/// already in an elementwise group or a product-add.
pub(super) fn find(ctx: &Context<'_>, order: &[TensorId], taken: &[bool]) -> Vec<Attention> {
    let mut found = Vec::new();
    for (p, &dst) in order.iter().enumerate() {
        if ctx.pos.get(dst.index()) != Some(&Some(p)) {
            continue;
        }
        if let Some(a) = at(ctx, dst).filter(|a| a.nodes().iter().all(|n| !taken[n.index()])) {
            found.push(a);
        }
    }
    found
}

/// The attention whose `cont` is `dst`, when the rules hold.
fn at(ctx: &Context<'_>, dst: TensorId) -> Option<Attention> {
    let g = ctx.graph;
    let node = |id: TensorId, op: fn(&Op) -> bool, arity: &[usize]| {
        let t = g.tensor(id);
        (t.op.as_ref().is_some_and(op) && arity.contains(&t.srcs.len())).then_some(t)
    };
    let dt = node(dst, |o| *o == Op::Cont, &[1])?;
    let permuted = dt.srcs[0];
    let pt = node(permuted, |o| matches!(o, Op::Permute { .. }), &[1])?;
    let product = pt.srcs[0];
    let prt = node(product, |o| *o == Op::MulMat, &[2])?;
    let (v, probs) = (prt.srcs[0], prt.srcs[1]);
    let st = node(probs, |o| matches!(o, Op::SoftMax { .. }), &[1, 2])?;
    let scores = st.srcs[0];
    let sct = node(scores, |o| *o == Op::MulMat, &[2])?;
    let (k, q) = (sct.srcs[0], sct.srcs[1]);
    let mask = st.srcs.get(1).copied();

    let packed_f32 = |t: &ir::Tensor| {
        t.view.is_none() && t.layout.dtype == DType::F32 && t.layout.is_contiguous()
    };
    let inner = |id: TensorId, reader: TensorId| {
        let t = g.tensor(id);
        packed_f32(t) && t.role == Role::Intermediate && ctx.readers[id.index()] == [reader]
    };
    // Only `permuted` views the product; nothing views or writes into the
    // scores or the probabilities.
    let only_permuted_views_product = g
        .ids()
        .filter(|&id| id != product && g.tensor(id).view.is_some_and(|v| v.root == product))
        .all(|id| id == permuted);
    let rule_1 = inner(scores, probs)
        && !ctx.aliased[scores.index()]
        && inner(probs, product)
        && !ctx.aliased[probs.index()]
        && inner(product, permuted)
        && only_permuted_views_product;
    let rule_2 = pt.op == Some(Op::Permute { axes: [0, 2, 1, 3] })
        && pt.role == Role::Intermediate
        && pt.view.is_some_and(|v| v.root == product && v.offset == 0)
        && ctx.readers[permuted.index()] == [dst]
        && !ctx.aliased[dst.index()]
        && packed_f32(dt);
    let device = ctx.device(dst)?;
    let rule_3 = [scores, probs, product, permuted]
        .iter()
        .all(|&n| ctx.device(n) == Some(device))
        && (ctx.fusable)(device);
    let pos = |id: TensorId| ctx.pos.get(id.index()).copied().flatten();
    let (Some(from), Some(p1), Some(p2), Some(to)) =
        (pos(scores), pos(probs), pos(product), pos(dst))
    else {
        return None;
    };
    let mut operands = vec![k, q, v];
    operands.extend(mask);
    let roots: Vec<TensorId> = operands.iter().map(|&s| g.storage_of(s).root).collect();
    let rule_4 = from < p1
        && p1 < p2
        && p2 < to
        && !(ctx.writes.iter()).any(|&(p, root)| from < p && p < to && roots.contains(&root));
    let mut involved = vec![scores, probs, product, permuted, dst];
    involved.extend(&operands);
    let rule_5 = !involved.iter().any(|t| {
        matches!(
            ctx.assignment.parts.get(t.index()),
            Some(Some(SplitPart::Partial { .. }))
        )
    });
    let float = |t: TensorId| {
        matches!(
            g.tensor(t).layout.dtype,
            DType::F32 | DType::F16 | DType::BF16
        )
    };
    let rule_6 = operands.iter().all(|&t| float(t))
        && g.tensor(k).layout.ne[0] <= MAX_HEAD_DIM
        && g.tensor(v).layout.ne[1] <= MAX_HEAD_DIM;
    (rule_1 && rule_2 && rule_3 && rule_4 && rule_5 && rule_6).then_some(Attention {
        scores,
        probs,
        product,
        permuted,
        dst,
    })
}

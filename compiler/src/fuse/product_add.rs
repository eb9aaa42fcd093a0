//! Products fused with the add that reads them: `add(mul_mat(w, x), r)` (or
//! `add(r, mul_mat(w, x))`) becomes one step, `dst = w · x + r`, so a GPU
//! launches one kernel for it (the output projections of a transformer block
//! with their residual adds) and the product is never stored.
//!
//! Invariants of every [`ProductAdd`] (the checker re-proves the step's
//! shapes, placement and reads on its own):
//! 1. `product` is a non-view `mul_mat` node, F32 and packed, an
//!    `Intermediate` (not a graph output) that nothing views or writes into,
//!    whose one reader node is `add`;
//! 2. `add` is a non-view two-source `add` node, F32 and packed, in no
//!    elementwise group, with `product` as exactly one of its sources; the
//!    other, `addend`, is F32 with the product's extents exactly (no
//!    broadcasting: the kernels add element for element), and so is `add`;
//! 3. both run on the same device, one that runs our kernels (not a remote
//!    RPC server);
//! 4. `add` comes after `product` in the execution order, and no node
//!    between them writes (`cpy`, `set_rows`) into the root of the product's
//!    weight or activations, so computing the product at the add's position
//!    reads the values the unfused `mul_mat` read;
//! 5. no tensor involved is a partial sum of a tensor split (a partial add is
//!    a linear step the checker admits; a product-add reading a share is not);
//! 6. a node is in at most one pair; the same graph, assignment and order
//!    always give the same pairs, in the order of their adds.

use super::Context;
use ir::plan::SplitPart;
use ir::{DType, Op, Role, TensorId};

/// One `mul_mat` and the `add` of its product, computed as one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductAdd {
    /// The `mul_mat` node (never stored).
    pub product: TensorId,
    /// The `add` node, whose tensor the step writes.
    pub add: TensorId,
    /// The add's other operand.
    pub addend: TensorId,
}

impl ProductAdd {
    /// The step's reads in the plan's order: weight, activations, addend.
    pub fn reads(&self, graph: &ir::Graph) -> [TensorId; 3] {
        let srcs = &graph.tensor(self.product).srcs;
        [srcs[0], srcs[1], self.addend]
    }
}

/// The pairs of the graph (see the module doc); `taken` marks nodes already
/// in an elementwise group.
pub(super) fn find(ctx: &Context<'_>, order: &[TensorId], taken: &[bool]) -> Vec<ProductAdd> {
    let mut pairs = Vec::new();
    for (p, &add) in order.iter().enumerate() {
        if ctx.pos.get(add.index()) != Some(&Some(p)) || taken[add.index()] {
            continue;
        }
        if let Some(pair) = pair_at(ctx, add) {
            pairs.push(pair);
        }
    }
    pairs
}

/// The pair whose add is `add`, when the rules hold.
fn pair_at(ctx: &Context<'_>, add: TensorId) -> Option<ProductAdd> {
    let g = ctx.graph;
    let at = g.tensor(add);
    let &[s0, s1] = at.srcs.as_slice() else {
        return None;
    };
    let is_product = |s: TensorId| g.tensor(s).op == Some(Op::MulMat);
    let (product, addend) = match (is_product(s0), is_product(s1)) {
        _ if s0 == s1 => return None,
        (true, _) => (s0, s1),
        (false, true) => (s1, s0),
        (false, false) => return None,
    };
    let pt = g.tensor(product);
    let &[w, x] = pt.srcs.as_slice() else {
        return None;
    };
    let packed_f32 = |t: &ir::Tensor| {
        t.view.is_none() && t.layout.dtype == DType::F32 && t.layout.is_contiguous()
    };
    let rule_1 = packed_f32(pt)
        && pt.role == Role::Intermediate
        && !ctx.aliased[product.index()]
        && ctx.readers[product.index()] == [add];
    let rule_2 = at.op == Some(Op::Add)
        && packed_f32(at)
        && g.tensor(addend).layout.dtype == DType::F32
        && g.tensor(addend).layout.ne == pt.layout.ne
        && at.layout.ne == pt.layout.ne;
    let device = ctx.device(add)?;
    let rule_3 = ctx.device(product) == Some(device) && (ctx.fusable)(device);
    let (Some(from), Some(to)) = (ctx.pos[product.index()], ctx.pos[add.index()]) else {
        return None;
    };
    let roots = [w, x].map(|s| g.storage_of(s).root);
    let rule_4 = from < to
        && !(ctx.writes.iter()).any(|&(p, root)| from < p && p < to && roots.contains(&root));
    let involved = [product, add, addend, w, x];
    let rule_5 = !involved.iter().any(|t| {
        matches!(
            ctx.assignment.parts.get(t.index()),
            Some(Some(SplitPart::Partial { .. }))
        )
    });
    (rule_1 && rule_2 && rule_3 && rule_4 && rule_5).then_some(ProductAdd {
        product,
        add,
        addend,
    })
}

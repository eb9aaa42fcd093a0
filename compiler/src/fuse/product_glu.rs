//! Gate and up products fused with the gated linear unit that reads them:
//! `glu(mul_mat(w_gate, x), mul_mat(w_up, x))` becomes one step,
//! `dst = act(w_gate · x) * (w_up · x)`, so a GPU launches one kernel for a
//! feed-forward block's first half (three before) and neither product is
//! stored. The graph may spell the unit as a two-source `glu` op (`swiglu`,
//! `geglu`, `geglu_erf`), or as `act` then `mul` (SmolLM2's `ffn_silu`,
//! `ffn_gate_par`), which the elementwise pass has made a group.
//!
//! Invariants of every [`ProductGlu`] (the checker re-proves the step's
//! shapes, placement and reads on its own):
//! 1. the unit is either a non-view two-source `glu` node (`swapped` false,
//!    gate first), F32 and packed, in no elementwise group, with no `inner`
//!    nodes; or an elementwise group of exactly two inputs whose body is
//!    `Input(0)`, `Unary(act, 0)`, `Input(1)`, `Binary(Mul, 1, 2)` (either
//!    operand order), `act` being `silu`, `gelu` or `gelu_erf` (the activation
//!    of a [`GluKind`]), its input 0 the gate; its non-last members are
//!    `inner`, its last `dst`;
//! 2. `gate` and `up` are distinct non-view `mul_mat` nodes, F32 and packed,
//!    `Intermediate` (not graph outputs) that nothing views or writes into,
//!    every reader of which is a node of the unit (so neither is observable);
//! 3. both products read the same activations `x` (one tensor id), their
//!    weights have one dtype and the same extents (one kernel decodes both;
//!    the same K and rows), and both products have `dst`'s extents (no
//!    broadcasting: the kernels combine element for element);
//! 4. the products and every node of the unit run on one device, one that
//!    runs our kernels (not a remote RPC server);
//! 5. both products come before `dst` in the execution order, and no node
//!    from the earlier product to `dst` writes (`cpy`, `set_rows`) into the
//!    root of either weight or of `x`, so computing both products at `dst`'s
//!    position reads what the unfused `mul_mat`s read;
//! 6. no tensor involved (products, unit nodes, weights, `x`) is a partial
//!    sum of a tensor split;
//! 7. a node is in at most one unit; the same graph, assignment and order
//!    always give the same units, in the order of their `dst`.
//!
//! Memory: `dst` keeps its tensor; the products and `inner` take no memory.

use super::{Context, FusedGroup};
use ir::plan::{BinaryFn, Expr, SplitPart, UnaryFn};
use ir::{DType, GluKind, Op, Role, TensorId};

/// Two products of one activation tensor and the GLU of them, as one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductGlu {
    /// The unit's activation.
    pub kind: GluKind,
    /// The gate `mul_mat` node (never stored).
    pub gate: TensorId,
    /// The up `mul_mat` node (never stored).
    pub up: TensorId,
    /// The unit's nodes before `dst` (never stored): the activation node of
    /// an `act` then `mul` group.
    pub inner: Vec<TensorId>,
    /// The unit's output node, whose tensor the step writes.
    pub dst: TensorId,
}

impl ProductGlu {
    /// The step's reads in the plan's order: gate weight, up weight,
    /// activations.
    pub fn reads(&self, graph: &ir::Graph) -> [TensorId; 3] {
        let (g, u) = (&graph.tensor(self.gate).srcs, &graph.tensor(self.up).srcs);
        [g[0], u[0], g[1]]
    }

    /// Every node the step computes: the products, `inner`, then `dst`.
    pub fn nodes(&self) -> impl Iterator<Item = TensorId> + '_ {
        [self.gate, self.up]
            .into_iter()
            .chain(self.inner.iter().copied())
            .chain([self.dst])
    }
}

/// The units of the graph (see the module doc), and the groups they take
/// (indices into `groups`, ascending); `taken` marks nodes in groups.
pub(super) fn find(
    ctx: &Context<'_>,
    order: &[TensorId],
    groups: &[FusedGroup],
    taken: &[bool],
) -> (Vec<ProductGlu>, Vec<usize>) {
    let mut units = Vec::new();
    let mut used = Vec::new();
    for (p, &node) in order.iter().enumerate() {
        if ctx.pos.get(node.index()) != Some(&Some(p)) {
            continue;
        }
        let found = if taken[node.index()] {
            let g = groups.iter().position(|g| g.output() == Some(node));
            g.and_then(|g| Some((unit_of_group(&groups[g])?, Some(g))))
        } else {
            unit_of_op(ctx, node).map(|u| (u, None))
        };
        if let Some((unit, group)) = found
            && rules_hold(ctx, &unit)
        {
            units.push(unit);
            used.extend(group);
        }
    }
    used.sort_unstable();
    (units, used)
}

/// Rule 1, a group: `act(in0) * in1` over two products.
fn unit_of_group(group: &FusedGroup) -> Option<ProductGlu> {
    let &[gate, up] = group.inputs.as_slice() else {
        return None;
    };
    let (&dst, inner) = group.nodes.split_last()?;
    let act = match group.body.as_slice() {
        [
            Expr::Input(0),
            Expr::Unary(act, 0),
            Expr::Input(1),
            Expr::Binary(BinaryFn::Mul, a, b),
        ] if (*a, *b) == (1, 2) || (*a, *b) == (2, 1) => *act,
        _ => return None,
    };
    let kind = match act {
        UnaryFn::Silu => GluKind::SwiGlu,
        UnaryFn::Gelu => GluKind::GeGlu,
        UnaryFn::GeluErf => GluKind::GeGluErf,
        _ => return None,
    };
    Some(ProductGlu {
        kind,
        gate,
        up,
        inner: inner.to_vec(),
        dst,
    })
}

/// Rule 1, an op: a two-source `glu`, gate first.
fn unit_of_op(ctx: &Context<'_>, node: TensorId) -> Option<ProductGlu> {
    let t = ctx.graph.tensor(node);
    let Some(Op::Glu {
        kind,
        swapped: false,
    }) = t.op
    else {
        return None;
    };
    let &[gate, up] = t.srcs.as_slice() else {
        return None;
    };
    let packed = t.view.is_none() && t.layout.dtype == DType::F32 && t.layout.is_contiguous();
    packed.then_some(ProductGlu {
        kind,
        gate,
        up,
        inner: Vec::new(),
        dst: node,
    })
}

/// Rules 2 to 6 for a candidate unit.
fn rules_hold(ctx: &Context<'_>, u: &ProductGlu) -> bool {
    let g = ctx.graph;
    let unit: Vec<TensorId> = u.inner.iter().copied().chain([u.dst]).collect();
    let product = |p: TensorId| {
        let t = g.tensor(p);
        t.op == Some(Op::MulMat)
            && t.srcs.len() == 2
            && t.view.is_none()
            && t.layout.dtype == DType::F32
            && t.layout.is_contiguous()
            && t.role == Role::Intermediate
            && !ctx.aliased[p.index()]
            && ctx.readers[p.index()].iter().all(|r| unit.contains(r))
    };
    if u.gate == u.up || !product(u.gate) || !product(u.up) {
        return false;
    }
    let [w_gate, w_up, x] = u.reads(g);
    let (wg, wu) = (&g.tensor(w_gate).layout, &g.tensor(w_up).layout);
    let ne = g.tensor(u.dst).layout.ne;
    let rule_3 = g.tensor(u.up).srcs[1] == x
        && wg.dtype == wu.dtype
        && wg.ne == wu.ne
        && [u.gate, u.up].iter().all(|&p| g.tensor(p).layout.ne == ne);
    let Some(device) = ctx.device(u.dst) else {
        return false;
    };
    let rule_4 = (ctx.fusable)(device) && u.nodes().all(|n| ctx.device(n) == Some(device));
    let positions = [u.gate, u.up, u.dst].map(|n| ctx.pos.get(n.index()).copied().flatten());
    let [Some(pg), Some(pu), Some(to)] = positions else {
        return false;
    };
    let from = pg.min(pu);
    let roots = [w_gate, w_up, x].map(|s| g.storage_of(s).root);
    let rule_5 = pg < to
        && pu < to
        && !(ctx.writes.iter()).any(|&(p, root)| from < p && p < to && roots.contains(&root));
    let rule_6 = !(u.nodes().chain([w_gate, w_up, x])).any(|t| {
        matches!(
            ctx.assignment.parts.get(t.index()),
            Some(Some(SplitPart::Partial { .. }))
        )
    });
    rule_3 && rule_4 && rule_5 && rule_6
}

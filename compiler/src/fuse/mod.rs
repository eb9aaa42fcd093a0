//! Pass `fuse`: chains of elementwise nodes (and a row normalisation followed
//! by elementwise nodes) become one fused kernel, described by a small
//! expression DAG ([`ir::plan::Expr`]) that the runtime JIT-compiles and
//! `kernels::reference::fused::eval_fused` interprets.
//!
//! Groups are found greedily along the execution order: each node not yet in a
//! group that may be a member starts a chain, which follows the unique reader of
//! its last member while the rules below hold; chains of at least two members
//! become groups. The same graph, assignment and order always give the same
//! groups (no hash map iteration; ties cannot arise).
//!
//! Invariants of every [`FusedGroup`] of a [`Fusion`]:
//! 1. **members** are non-view nodes whose op is a unary elementwise op (`scale`,
//!    `sqr`, `sqrt`, `silu`, `gelu`, `gelu_erf`, `relu`, `tanh`), a binary op
//!    (`add`, `sub`, `mul`, `div`; src1 may broadcast over src0, whose extents
//!    are the output's), a two-source `glu` (`act(gate) * up`), or — only as the
//!    *first* member — `rms_norm` / `norm` (a row prologue reading a group
//!    input: the norm-then-mul pattern `mul(rms_norm(x), w)`);
//! 2. every member is F32, packed (contiguous) and has the same extents (those
//!    of the group output); no member is or reads a partial sum or a routed
//!    part of a tensor split (`SplitPart::Partial`, `SplitPart::Routed`,
//!    directly or through a view: the checker lets no fused kernel read one);
//! 3. every member runs on the same device (`assignment.device`), one that
//!    runs fused kernels (not a remote RPC server: [`fuse_elementwise_where`]);
//! 4. every member but the last has exactly one reader node in the graph, and
//!    that reader is the next member; it is not a graph output (its role is
//!    `Intermediate`), and no tensor is a view of it or writes into it. So the
//!    members form a chain and only the last member's values are observable;
//! 5. a group has at least two members; a node belongs to at most one group;
//! 6. members appear in `order` in group order; the fused kernel runs at the
//!    last member's position, and no node strictly between the first and the
//!    last member's positions writes (`cpy`, `set_rows`) into the root of a
//!    group input, so reading the inputs later than the unfused nodes would
//!    have gives the same values;
//! 7. `inputs` are the operands of members that are not members, each once, in
//!    first-use order (members in order, sources in source order). They may be
//!    leafs, nodes or (strided) views of any float dtype; the body reads them
//!    with broadcasting (the output index modulo the input's extents);
//! 8. `body` is in topological order and its last expression is the output:
//!    `Expr::Input(i)` appears (once) before the first expression that uses
//!    input `i` as an operand; a unary member is `Unary(f, x)`; a binary member
//!    `Binary(f, src0, src1)`; a glu member `Unary(act, gate)` followed by
//!    `Binary(Mul, that, up)`; a norm member `RmsNorm { input, eps }` /
//!    `Norm { input, eps }` naming the input index directly.
//!
//! Memory: the group output keeps its tensor (and its bytes); the other members
//! are never materialised and take no memory.
//!
//! Then two `mul_mat`s of one activation tensor read only by a GLU (a
//! two-source `glu` node, or a group computing `act(gate) * up`) join it as a
//! [`ProductGlu`] (rules in [`product_glu`]; the group leaves `groups`); and
//! among the nodes no group took, each `mul_mat` whose one reader is an
//! `add` joins it as a [`ProductAdd`] (rules in [`product_add`]): one step
//! computing the product and adding the other operand before it stores.
//! Then each `cont(permute(mul_mat(v, soft_max(mul_mat(k, q)))))` no group or
//! pair took becomes an [`Attention`] (rules in [`attention`]).
//! Then `mul_mat`s of one activation tensor that no fusion took join as a
//! [`ProductMany`] (rules in [`product_many`]): one step, every product
//! stored. Last, a block's `rope` and `set_rows` nodes join as a
//! [`RopeStore`] (rules in [`rope_store`]): one step, every result stored.

pub mod attention;
mod body;
pub mod product_add;
pub mod product_glu;
pub mod product_many;
pub mod rope_store;

pub use attention::Attention;
pub use product_add::ProductAdd;
pub use product_glu::ProductGlu;
pub use product_many::ProductMany;
pub use rope_store::RopeStore;

use crate::assign::Assignment;
use ir::plan::{BinaryFn, Expr, UnaryFn};
use ir::{DType, Graph, Op, Role, TensorId};

/// The fused groups of a graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fusion {
    /// The groups, in the order of their first member in the execution order.
    pub groups: Vec<FusedGroup>,
    /// Products fused with their add, in the order of their adds.
    pub products: Vec<ProductAdd>,
    /// Attention chains run as one step, in the order of their results.
    pub attentions: Vec<Attention>,
    /// Gate and up products fused with their GLU, in the order of their
    /// outputs (the groups they took are no longer in `groups`).
    pub glus: Vec<ProductGlu>,
    /// Sibling products computed as one step, in the order of their first
    /// members.
    pub many: Vec<ProductMany>,
    /// Rope and `set_rows` nodes computed as one step, in the order of
    /// their first members.
    pub rope_stores: Vec<RopeStore>,
}

impl Fusion {
    /// The index of the group containing node `id`, if any.
    pub fn group_of(&self, id: TensorId) -> Option<usize> {
        self.groups.iter().position(|g| g.nodes.contains(&id))
    }

    /// The number of nodes that are members of some group, product-add,
    /// attention, product-GLU, sibling-product or rope-and-store group.
    pub fn n_fused_nodes(&self) -> usize {
        self.groups.iter().map(|g| g.nodes.len()).sum::<usize>()
            + 2 * self.products.len()
            + 5 * self.attentions.len()
            + self.glus.iter().map(|u| u.nodes().count()).sum::<usize>()
            + self.many.iter().map(|m| m.products.len()).sum::<usize>()
            + self
                .rope_stores
                .iter()
                .map(|r| r.members.len())
                .sum::<usize>()
    }

    /// The rope-and-store group computing node `id`, if any.
    pub fn rope_store_of(&self, id: TensorId) -> Option<&RopeStore> {
        self.rope_stores.iter().find(|r| r.members.contains(&id))
    }

    /// The attention whose node (intermediate or result) is `id`, if any.
    pub fn attention_of(&self, id: TensorId) -> Option<&Attention> {
        self.attentions.iter().find(|a| a.nodes().contains(&id))
    }

    /// The sibling-product group computing node `id`, if any.
    pub fn product_many_of(&self, id: TensorId) -> Option<&ProductMany> {
        self.many.iter().find(|m| m.products.contains(&id))
    }

    /// The product-GLU unit computing node `id`, if any.
    pub fn product_glu_of(&self, id: TensorId) -> Option<&ProductGlu> {
        self.glus.iter().find(|u| u.nodes().any(|n| n == id))
    }

    /// The product-add pair whose add or product is node `id`, if any.
    pub fn product_add_of(&self, id: TensorId) -> Option<&ProductAdd> {
        self.products
            .iter()
            .find(|p| p.add == id || p.product == id)
    }
}

/// One fused kernel: a chain of graph nodes computed as one expression.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGroup {
    /// The member nodes, in order; the last is the output.
    pub nodes: Vec<TensorId>,
    /// Tensors read from outside the group, in first-use order; `Expr::Input(i)`
    /// and the norms' `input` index this list.
    pub inputs: Vec<TensorId>,
    /// The expression, output last.
    pub body: Vec<Expr>,
}

impl FusedGroup {
    /// The node whose tensor the kernel writes (the last member).
    pub fn output(&self) -> Option<TensorId> {
        self.nodes.last().copied()
    }
}

/// What a member contributes to the body.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Member {
    /// One elementwise function of src0.
    Unary(UnaryFn),
    /// A binary function of src0 and src1 (broadcast).
    Binary(BinaryFn),
    /// `act(src0) * src1`.
    Glu(UnaryFn),
    /// A row normalisation of src0 (first member only).
    RmsNorm(f32),
    /// Mean-and-variance normalisation of src0 (first member only).
    Norm(f32),
}

impl Member {
    /// The member kind of `op` over `n_srcs` sources, or `None` when it cannot fuse.
    fn of(op: &Op, n_srcs: usize) -> Option<Member> {
        Some(match *op {
            ir::unary_op!() => Member::Unary(op.unary_fn()?),
            Op::Add | Op::Sub | Op::Mul | Op::Div => Member::Binary(op.binary_fn()?),
            Op::Glu { kind, .. } if n_srcs == 2 => Member::Glu(kind.activation()),
            Op::RmsNorm { eps } => Member::RmsNorm(eps),
            Op::Norm { eps } => Member::Norm(eps),
            Op::Glu { .. }
            | Op::GetRows
            | Op::GetRowsPart { .. }
            | Op::MulMat
            | Op::MulMatId
            | Op::MulMatIdPart { .. }
            | Op::Argsort { .. }
            | Op::SoftMax { .. }
            | Op::Rope(_)
            | Op::Cpy
            | Op::Cont
            | Op::SetRows
            | Op::View { .. }
            | Op::Reshape
            | Op::Permute { .. }
            | Op::Transpose
            | Op::Concat { .. }
            | Op::SumRows
            | Op::Mean
            | Op::Argmax
            | Op::DiagMaskInf { .. }
            | Op::AllReduceSum { .. }
            | Op::AllGather { .. }
            | Op::ReduceScatterSum { .. } => return None,
        })
    }

    /// Row normalisations may only start a group.
    fn first_only(self) -> bool {
        matches!(self, Member::RmsNorm(_) | Member::Norm(_))
    }

    /// How many sources the member reads.
    fn arity(self) -> usize {
        match self {
            Member::Unary(_) | Member::RmsNorm(_) | Member::Norm(_) => 1,
            Member::Binary(_) | Member::Glu(_) => 2,
        }
    }
}

/// Groups the elementwise chains of `graph` run in `order` on the devices of
/// `assignment`, then pairs products with their adds (see the module doc for
/// the rules).
///
/// `order` is expected to be an execution order of the graph's nodes; ids that
/// are not nodes of `graph`, or that repeat, are skipped rather than trusted, and
/// a tensor without a device in `assignment` never fuses.
pub fn fuse_elementwise(graph: &Graph, assignment: &Assignment, order: &[TensorId]) -> Fusion {
    fuse_elementwise_where(graph, assignment, order, &|_| true)
}

/// [`fuse_elementwise`] for a target whose devices do not all run fused
/// kernels: a node on a device `fusable` refuses never joins a group (a
/// remote RPC server runs ggml's ops one by one, not our kernels).
pub fn fuse_elementwise_where(
    graph: &Graph,
    assignment: &Assignment,
    order: &[TensorId],
    fusable: &dyn Fn(crate::target::DeviceId) -> bool,
) -> Fusion {
    let ctx = Context::new(graph, assignment, order, fusable);
    let mut taken = vec![false; graph.len()];
    let mut groups = Vec::new();
    for (p, &start) in order.iter().enumerate() {
        if ctx.pos.get(start.index()) != Some(&Some(p)) || taken[start.index()] {
            continue;
        }
        let Some(kind) = ctx.member(start) else {
            continue;
        };
        let mut chain = vec![(start, kind)];
        while let Some(next) = ctx.next_member(&chain, &taken) {
            chain.push(next);
        }
        if chain.len() < 2 {
            continue;
        }
        if let Some(group) = body::build(graph, &chain) {
            for &(id, _) in &chain {
                taken[id.index()] = true;
            }
            groups.push(group);
        }
    }
    let (glus, used) = product_glu::find(&ctx, order, &groups, &taken);
    for g in used.into_iter().rev() {
        groups.remove(g);
    }
    let products = product_add::find(&ctx, order, &taken);
    let fused = (glus.iter().flat_map(|u| u.nodes().collect::<Vec<_>>()))
        .chain(products.iter().flat_map(|p| [p.product, p.add]));
    for n in fused {
        taken[n.index()] = true;
    }
    let attentions = attention::find(&ctx, order, &taken);
    for n in attentions.iter().flat_map(|a| a.nodes()) {
        taken[n.index()] = true;
    }
    let many = product_many::find(&ctx, order, &taken);
    for m in many.iter().flat_map(|m| &m.products) {
        taken[m.index()] = true;
    }
    let rope_stores = rope_store::find(&ctx, order, &taken);
    Fusion {
        groups,
        products,
        attentions,
        glus,
        many,
        rope_stores,
    }
}

/// What the rules need to know about the graph, computed once.
struct Context<'a> {
    graph: &'a Graph,
    assignment: &'a Assignment,
    /// Position of each node in `order` (first occurrence).
    pos: Vec<Option<usize>>,
    /// Distinct reader nodes of each tensor, in id order.
    readers: Vec<Vec<TensorId>>,
    /// True for tensors some other tensor views or writes into.
    aliased: Vec<bool>,
    /// (position, root written) of every write-into node in `order`.
    writes: Vec<(usize, TensorId)>,
    /// Whether a device runs fused kernels.
    fusable: &'a dyn Fn(crate::target::DeviceId) -> bool,
}

impl<'a> Context<'a> {
    fn new(
        graph: &'a Graph,
        assignment: &'a Assignment,
        order: &[TensorId],
        fusable: &'a dyn Fn(crate::target::DeviceId) -> bool,
    ) -> Context<'a> {
        let n = graph.len();
        let mut pos = vec![None; n];
        for (p, &id) in order.iter().enumerate() {
            let is_node = id.index() < n && !graph.tensor(id).is_leaf();
            if is_node && pos[id.index()].is_none() {
                pos[id.index()] = Some(p);
            }
        }
        let mut readers: Vec<Vec<TensorId>> = vec![Vec::new(); n];
        let mut aliased = vec![false; n];
        for id in graph.ids() {
            let t = graph.tensor(id);
            for (i, &s) in t.srcs.iter().enumerate() {
                let repeat = t.srcs[..i].contains(&s);
                if let (false, Some(r)) = (repeat, readers.get_mut(s.index())) {
                    r.push(id);
                }
            }
            if let Some(v) = t.view.filter(|v| v.root != id)
                && let Some(a) = aliased.get_mut(v.root.index())
            {
                *a = true;
            }
        }
        let writes = order
            .iter()
            .enumerate()
            .filter(|&(p, &id)| pos.get(id.index()) == Some(&Some(p)))
            .filter(|&(_, &id)| {
                graph
                    .tensor(id)
                    .op
                    .is_some_and(|op| op.writes_into_source().is_some())
            })
            .map(|(p, &id)| (p, graph.storage_of(id).root))
            .collect();
        Context {
            graph,
            assignment,
            pos,
            readers,
            aliased,
            writes,
            fusable,
        }
    }

    /// The member kind of node `id` when it may be in a group at all (rules 1–2).
    fn member(&self, id: TensorId) -> Option<Member> {
        let t = self.graph.tensor(id);
        let kind = Member::of(&t.op?, t.srcs.len())?;
        let ok = t.srcs.len() == kind.arity()
            && t.view.is_none()
            && t.layout.dtype == DType::F32
            && t.layout.is_contiguous()
            && self.device(id).is_some_and(|d| (self.fusable)(d))
            && t.srcs.iter().all(|s| s.index() < self.graph.len())
            && !self.partial(id)
            && !t.srcs.iter().any(|&s| self.partial(s));
        (ok && self.sources_fit(t, kind)).then_some(kind)
    }

    /// Whether `id` (or the tensor whose bytes it views) is a partial sum
    /// or a routed part.
    fn partial(&self, id: TensorId) -> bool {
        let is = |t: TensorId| {
            matches!(
                self.assignment.parts.get(t.index()),
                Some(Some(
                    ir::plan::SplitPart::Partial { .. } | ir::plan::SplitPart::Routed { .. }
                ))
            )
        };
        is(id) || is(self.graph.storage_of(id).root)
    }

    /// Source 0 (and a glu's up) has the result's extents; a binary op's
    /// src1 repeats evenly over it; every source is a float tensor.
    fn sources_fit(&self, t: &ir::Tensor, kind: Member) -> bool {
        let src = |i: usize| &self.graph.tensor(t.srcs[i]).layout;
        let same = |i: usize| src(i).ne == t.layout.ne;
        let float = (0..t.srcs.len()).all(|i| src(i).dtype.is_float());
        float
            && same(0)
            && match kind {
                Member::Binary(_) => {
                    (0..4).all(|d| src(1).ne[d] >= 1 && t.layout.ne[d] % src(1).ne[d] == 0)
                }
                Member::Glu(_) => same(1),
                Member::Unary(_) | Member::RmsNorm(_) | Member::Norm(_) => true,
            }
    }

    fn device(&self, id: TensorId) -> Option<crate::target::DeviceId> {
        self.assignment.device.get(id.index()).copied()
    }

    /// The node that may extend `chain`, if the rules allow one.
    fn next_member(
        &self,
        chain: &[(TensorId, Member)],
        taken: &[bool],
    ) -> Option<(TensorId, Member)> {
        let (first, _) = *chain.first()?;
        let (last, _) = *chain.last()?;
        let lt = self.graph.tensor(last);
        // Rule 4: the last member must be invisible outside the group.
        if lt.role != Role::Intermediate || self.aliased[last.index()] {
            return None;
        }
        let [next] = self.readers[last.index()][..] else {
            return None;
        };
        let kind = self.member(next)?;
        let nt = self.graph.tensor(next);
        let ft = self.graph.tensor(first);
        let ok = !taken[next.index()]
            && !kind.first_only()
            && nt.layout.ne == ft.layout.ne
            && self.device(next) == self.device(first)
            && self.pos[next.index()] > self.pos[last.index()]
            && self.pos[last.index()].is_some();
        if !ok || self.inputs_overwritten(chain, next) {
            return None;
        }
        Some((next, kind))
    }

    /// Rule 6: true when a node between the chain's first member and `next`
    /// writes into the root of an input the extended group would read.
    fn inputs_overwritten(&self, chain: &[(TensorId, Member)], next: TensorId) -> bool {
        let (Some(&(first, _)), Some(Some(end))) = (chain.first(), self.pos.get(next.index()))
        else {
            return true;
        };
        let Some(start) = self.pos[first.index()] else {
            return true;
        };
        let members: Vec<TensorId> = chain.iter().map(|&(id, _)| id).chain([next]).collect();
        let roots: Vec<TensorId> = members
            .iter()
            .flat_map(|&m| self.graph.tensor(m).srcs.iter().copied())
            .filter(|s| !members.contains(s))
            .map(|s| self.graph.storage_of(s).root)
            .collect();
        self.writes
            .iter()
            .any(|&(p, root)| start < p && p < *end && roots.contains(&root))
    }
}

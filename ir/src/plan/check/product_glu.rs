//! A `mul_mat` + GLU step (`Step::MulMatGlu`) in families 1 and 2: its
//! indices are in range; its products and inner nodes are graph tensors other
//! than what it reads and writes, each named once; both weights have one
//! dtype; each product is `mul_mat` of its weight and the activations (shape
//! rule), placed `Fused`; the result is the two-source GLU of the products
//! (shape rule), with arena bytes; an inner node is F32 of the result's
//! extents, placed `Fused` (family 2 reads [`fused_nodes`]). Reads and the
//! write go through `GlobalItem`, so order, lifetimes, races and events cover
//! the step like any other; a partial sum it reads is refused (`trace`: no op).

use super::shape::check_op;
use super::{Checker, ViolationKind::Format};
use crate::GluKind;
use crate::op::Op;
use crate::plan::Step;

/// The step's fields, as the checker reads them.
pub(super) struct Fields<'a> {
    pub kind: GluKind,
    pub products: &'a [u32; 2],
    pub inner: &'a [u32],
    pub dst: u32,
    pub srcs: &'a [u32; 3],
}

impl<'a> Fields<'a> {
    /// The fields of `step` when it is a `MulMatGlu`.
    pub fn of(step: &'a Step) -> Option<Fields<'a>> {
        match step {
            Step::MulMatGlu {
                kind,
                products,
                inner,
                dst,
                srcs,
            } => Some(Fields {
                kind: *kind,
                products,
                inner,
                dst: *dst,
                srcs,
            }),
            _ => None,
        }
    }
}

/// The nodes every `MulMatGlu` step of the plan computes without storing
/// them (its products and inner nodes): placed `Fused`.
pub(super) fn fused_nodes(c: &Checker<'_>) -> Vec<u32> {
    (c.plan.splits.iter().flat_map(|s| &s.steps))
        .filter_map(Fields::of)
        .flat_map(|f| {
            f.products
                .iter()
                .chain(f.inner)
                .copied()
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Family 1 for one step named `name`: index ranges and roles.
pub(super) fn format(c: &mut Checker<'_>, name: String, f: &Fields<'_>) {
    let all = (f.products.iter().chain(f.inner).chain(f.srcs)).chain([&f.dst]);
    for &t in all {
        if t as usize >= c.plan.tensors.len() {
            let msg = format!("mul_mat + glu names t{t}, out of range");
            c.problem(Format, name.clone(), msg);
        }
    }
    let computed: Vec<u32> = f.products.iter().chain(f.inner).copied().collect();
    for (i, &t) in computed.iter().enumerate() {
        let n = c.plan.n_graph_tensors;
        if t >= n || t == f.dst || f.srcs.contains(&t) || computed[..i].contains(&t) {
            let msg = format!(
                "mul_mat + glu computes t{t} inside it, which must be a graph tensor other \
                 than its result and operands, named once"
            );
            c.problem(Format, name.clone(), msg);
        }
    }
    if let (Some(g), Some(u)) = (c.tensor(f.srcs[0]), c.tensor(f.srcs[1]))
        && g.dtype != u.dtype
    {
        let msg = format!(
            "mul_mat + glu: the gate weight is {}, the up weight {} (one kernel decodes one dtype)",
            g.dtype, u.dtype
        );
        c.problem(Format, name, msg);
    }
}

/// Family 1, shapes: both products are `mul_mat` of their weight and the
/// activations, computed inside the step; the result their GLU; inner nodes
/// F32 of the result's extents.
pub(super) fn shape(c: &mut Checker<'_>, f: &Fields<'_>) {
    let [gate, up] = *f.products;
    check_op(c, &Op::MulMat, gate, &[f.srcs[0], f.srcs[2]], true);
    check_op(c, &Op::MulMat, up, &[f.srcs[1], f.srcs[2]], true);
    let glu = Op::Glu {
        kind: f.kind,
        swapped: false,
    };
    check_op(c, &glu, f.dst, &[gate, up], false);
    let Some(out) = c.tensor(f.dst) else { return };
    for &t in f.inner {
        if let Some(i) = c.tensor(t)
            && (i.dtype != crate::DType::F32 || i.ne != out.ne)
        {
            let msg = format!(
                "mul_mat + glu computes it inside: it must be F32 {:?} like the result, not {} {:?}",
                out.ne, i.dtype, i.ne
            );
            c.tensor_problem(Format, t, msg);
        }
    }
}

//! Family 1 (format), shapes: every op step's destination has the dtype and
//! extents its op's rule ([`crate::rules::derive`]) gives for its sources; a
//! write-into op (`cpy`, `set_rows`) writes a view of its destination's bytes,
//! every other op a tensor with arena bytes (family 2, placement). A
//! `mul_mat` + `add` step is held to both ops' rules, its product placed
//! `Fused` and its addend of the product's extents; an attention step to its
//! five ops' (`attention.rs`).
//!
//! The rules are run only on layouts small enough that their arithmetic cannot
//! overflow; a step over larger ones is refused as too large to check.

use super::Checker;
use super::ViolationKind::{Format, Placement as PlacementKind};
use crate::plan::{Placement, PlanTensor, Step};
use crate::{Layout, Op, Tensor, TensorId, ViewOf};

/// Largest extent product, stride and offset handed to the shape rules.
const SANE: u64 = 1 << 48;

pub(super) fn check(c: &mut Checker<'_>) {
    for split in &c.plan.splits {
        for step in &split.steps {
            match step {
                Step::Op { op, dst, srcs } => check_op(c, op, *dst, srcs, false),
                Step::MulMatAdd { product, dst, srcs } => {
                    check_mul_mat_add(c, *product, *dst, srcs);
                }
                Step::Attention { .. } => super::attention::check_shapes(c, step, check_op),
                Step::MulMatGlu { .. } => {
                    if let Some(f) = super::product_glu::Fields::of(step) {
                        super::product_glu::shape(c, &f);
                    }
                }
                Step::MulMatMany { dsts, srcs } => super::product_many::shape(c, dsts, srcs),
                Step::RopeStore { .. } => super::rope_store::shape(c, step),
                Step::Fused { .. } => {}
            }
        }
    }
}

/// A product-add step is its two ops' rules: the product (placed `Fused`)
/// is `mul_mat` of the weight and activations, the result their `add` with
/// the addend, which has the product's extents exactly (the kernels add
/// element for element, never broadcasting).
fn check_mul_mat_add(c: &mut Checker<'_>, product: u32, dst: u32, srcs: &[u32; 3]) {
    check_op(c, &Op::MulMat, product, &srcs[..2], true);
    check_op(c, &Op::Add, dst, &[product, srcs[2]], false);
    if let (Some(p), Some(r)) = (c.tensor(product), c.tensor(srcs[2]))
        && p.ne != r.ne
    {
        let msg = format!(
            "mul_mat + add: the addend {} has extents {:?}, the product {:?}",
            c.describe(srcs[2]),
            r.ne,
            p.ne
        );
        c.tensor_problem(Format, dst, msg);
    }
}

/// Checks one op's result against its rule; `fused`: the result is computed
/// inside its step and never stored (placed `Fused`).
pub(super) fn check_op(c: &mut Checker<'_>, op: &Op, dst: u32, srcs: &[u32], fused: bool) {
    if op.is_view() || !crate::rules::arity(op).contains(&srcs.len()) {
        return; // reported by the format family
    }
    let Some(out) = c.tensor(dst) else { return };
    let mut operands = Vec::with_capacity(srcs.len());
    for &s in srcs {
        let Some(t) = c.tensor(s) else { return };
        operands.push(as_graph_tensor(t));
    }
    // A step whose shapes cannot be checked is refused, never passed: a huge
    // stride on a unit axis spans nothing, but skipping the rules for it let
    // an add over mismatched operands through (found by the plan_edit target).
    if let Some(&t) = srcs
        .iter()
        .chain([&dst])
        .find(|&&t| c.tensor(t).is_some_and(|t| !sane(t)))
    {
        let msg = format!(
            "{op}: {} has extents, strides or a view offset over 2^48, too large to check",
            c.describe(t)
        );
        return c.tensor_problem(Format, dst, msg);
    }
    let pairs: Vec<(TensorId, &Tensor)> =
        srcs.iter().map(|&s| TensorId(s)).zip(&operands).collect();
    let declared = Layout {
        dtype: out.dtype,
        ne: out.ne,
        nb: out.nb,
    };
    let derived = match crate::rules::derive(op, &pairs, Some(&declared)) {
        Ok(d) => d,
        Err(reason) => {
            let operands: Vec<String> = srcs.iter().map(|&s| c.describe(s)).collect();
            let msg = format!("{op} over {}: {reason}", operands.join(", "));
            return c.tensor_problem(Format, dst, msg);
        }
    };
    let want = derived.layout;
    let strides_differ = (0..4).any(|i| want.ne[i] != 1 && want.nb[i] != out.nb[i]);
    if want.dtype != out.dtype || want.ne != out.ne || strides_differ {
        let msg = format!(
            "{op} gives {} {:?} with strides {:?}, the tensor is {} {:?} with strides {:?}",
            want.dtype, want.ne, want.nb, out.dtype, out.ne, out.nb
        );
        c.tensor_problem(Format, dst, msg);
    }
    match (derived.view, out.placement) {
        (Some(v), Placement::View { of, offset }) if v.root.0 == of && v.offset == offset => {}
        (Some(v), placement) => {
            let msg = format!(
                "{op} writes into {} at offset {}: its result must be that view, not {placement}",
                c.describe(v.root.0),
                v.offset
            );
            c.tensor_problem(PlacementKind, dst, msg);
        }
        (None, Placement::Arena { .. }) if !fused => {}
        (None, Placement::Fused) if fused => {}
        (None, placement) if fused => {
            let msg = format!(
                "{op} is computed inside its fused step: it must be placed Fused, not {placement}"
            );
            c.tensor_problem(PlacementKind, dst, msg);
        }
        (None, placement) => {
            let msg =
                format!("{op} computes new bytes: it needs an arena placement, not {placement}");
            c.tensor_problem(PlacementKind, dst, msg);
        }
    }
}

/// True when the rules' arithmetic on this tensor cannot overflow.
fn sane(t: &PlanTensor) -> bool {
    let elems = t.ne.iter().try_fold(1u64, |acc, &n| {
        if n >= 1 {
            acc.checked_mul(n as u64)
        } else {
            None
        }
    });
    let offset = match t.placement {
        Placement::View { offset, .. } => offset,
        _ => 0,
    };
    elems.is_some_and(|e| e <= SANE) && t.nb.iter().all(|&b| b <= SANE) && offset <= SANE
}

/// The plan tensor as the shape rules see an operand: its layout, role and view.
fn as_graph_tensor(t: &PlanTensor) -> Tensor {
    let view = match t.placement {
        Placement::View { of, offset } => Some(ViewOf {
            root: TensorId(of),
            offset,
        }),
        _ => None,
    };
    Tensor {
        name: t.name.clone(),
        layout: Layout {
            dtype: t.dtype,
            ne: t.ne,
            nb: t.nb,
        },
        role: t.role,
        op: None,
        srcs: Vec::new(),
        view,
        init: None,
        shard: None,
    }
}

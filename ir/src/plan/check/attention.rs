//! Family 1 (format), an attention step ([`Step::Attention`]): its tensors in
//! range, its four intermediates graph tensors distinct from its result and
//! operands, and each of its ops held to its rule: `scores = mul_mat(k, q)`,
//! `probs = soft_max(scores, mask?)` with the step's scale and bias,
//! `product = mul_mat(v, probs)`, `permuted` the product with axes 1 and 2
//! swapped (same dtype, extents and strides so permuted), and
//! `dst = cont(permuted)`. The intermediates are placed `Fused` (family 2
//! counts them as fused members).

use super::Checker;
use super::ViolationKind::Format;
use crate::Op;
use crate::plan::Step;

/// The tensors an attention step computes inside itself (no bytes).
pub(super) fn inner(step: &Step) -> Option<[u32; 4]> {
    match step {
        Step::Attention {
            scores,
            probs,
            product,
            permuted,
            ..
        } => Some([*scores, *probs, *product, *permuted]),
        _ => None,
    }
}

/// Bounds and roles of the step's tensor ids (`name` names the step).
pub(super) fn check_format(c: &mut Checker<'_>, name: String, step: &Step) {
    let Step::Attention { dst, srcs, .. } = step else {
        return;
    };
    let Some(inner) = inner(step) else { return };
    let n = c.plan.n_graph_tensors;
    for &t in inner.iter().chain([dst]).chain(srcs) {
        if t as usize >= c.plan.tensors.len() {
            let msg = format!("attention names t{t}, out of range");
            c.problem(Format, name.clone(), msg);
        }
    }
    if !(3..=4).contains(&srcs.len()) {
        let msg = format!(
            "attention reads k, q, v and an optional mask: 3 or 4 sources, not {}",
            srcs.len()
        );
        c.problem(Format, name.clone(), msg);
    }
    for (i, &t) in inner.iter().enumerate() {
        let repeated = inner[..i].contains(&t);
        if t >= n || t == *dst || srcs.contains(&t) || repeated {
            let msg = format!(
                "attention computes t{t} inside itself, which must be a graph tensor other \
                 than its result, its operands and its other intermediates"
            );
            c.problem(Format, name.clone(), msg);
        }
    }
}

/// Each op of the step against its rule; `check_op(c, op, dst, srcs, fused)`
/// is the shape family's one-op check.
pub(super) fn check_shapes(
    c: &mut Checker<'_>,
    step: &Step,
    check_op: impl Fn(&mut Checker<'_>, &Op, u32, &[u32], bool),
) {
    let Step::Attention {
        scores,
        probs,
        product,
        permuted,
        dst,
        srcs,
        scale,
        max_bias,
    } = step
    else {
        return;
    };
    if !(3..=4).contains(&srcs.len()) {
        return; // format
    }
    let (k, q, v) = (srcs[0], srcs[1], srcs[2]);
    check_op(c, &Op::MulMat, *scores, &[k, q], true);
    let softmax = Op::SoftMax {
        scale: *scale,
        max_bias: *max_bias,
    };
    let mut softmax_srcs = vec![*scores];
    softmax_srcs.extend(srcs.get(3));
    check_op(c, &softmax, *probs, &softmax_srcs, true);
    check_op(c, &Op::MulMat, *product, &[v, *probs], true);
    if let (Some(p), Some(m)) = (c.tensor(*product), c.tensor(*permuted)) {
        let swap = |a: [i64; 4]| [a[0], a[2], a[1], a[3]];
        let swap_u = |a: [u64; 4]| [a[0], a[2], a[1], a[3]];
        if m.dtype != p.dtype || m.ne != swap(p.ne) || m.nb != swap_u(p.nb) {
            let msg = format!(
                "attention: {} must be {} with axes 1 and 2 swapped ({} {:?} strides {:?}), \
                 not {} {:?} strides {:?}",
                c.describe(*permuted),
                c.describe(*product),
                p.dtype,
                swap(p.ne),
                swap_u(p.nb),
                m.dtype,
                m.ne,
                m.nb
            );
            c.tensor_problem(Format, *dst, msg);
        }
    }
    check_op(c, &Op::Cont, *dst, &[*permuted], false);
}

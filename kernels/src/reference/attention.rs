//! The reference of an attention step (`ir::plan::Step::Attention`): its
//! five ops one after another, in f64 like every reference op.

use super::{Dense, compute};
use ir::{Layout, Op};

/// The layouts of an attention step's tensors, as the plan declares them.
#[derive(Clone, Copy, Debug)]
pub struct AttentionLayouts<'a> {
    /// `mul_mat(k, q)`.
    pub scores: &'a Layout,
    /// `soft_max(scores, mask?)`.
    pub probs: &'a Layout,
    /// `mul_mat(v, probs)`.
    pub product: &'a Layout,
    /// `cont(permute(product, 0, 2, 1, 3))`: the result.
    pub dst: &'a Layout,
}

/// `cont(permute(mul_mat(v, soft_max(mul_mat(k, q) · scale (+ mask))), 0, 2,
/// 1, 3))` for `srcs` = `[k, q, v]` or `[k, q, v, mask]`.
pub fn attention(
    srcs: &[&Dense],
    (scale, max_bias): (f32, f32),
    layouts: AttentionLayouts<'_>,
) -> Dense {
    assert!(
        (3..=4).contains(&srcs.len()),
        "attention reads k, q, v and an optional mask"
    );
    let scores = compute(&Op::MulMat, &[srcs[0], srcs[1]], layouts.scores);
    let mut softmax_srcs = vec![&scores];
    softmax_srcs.extend(srcs.get(3).copied());
    let probs = compute(
        &Op::SoftMax { scale, max_bias },
        &softmax_srcs,
        layouts.probs,
    );
    let product = compute(&Op::MulMat, &[srcs[2], &probs], layouts.product);
    compute(&Op::Cont, &[&swap_axes_1_2(&product)], layouts.dst)
}

/// `a` with axes 1 and 2 swapped, packed: what `cont` reads through
/// `permute(a, 0, 2, 1, 3)`.
pub fn swap_axes_1_2(a: &Dense) -> Dense {
    let [n0, n1, n2, n3] = a.ne.map(|n| n as usize);
    let mut data = Vec::with_capacity(a.data.len());
    for i3 in 0..n3 {
        for i1 in 0..n1 {
            for i2 in 0..n2 {
                let from = ((i3 * n2 + i2) * n1 + i1) * n0;
                data.extend_from_slice(&a.data[from..from + n0]);
            }
        }
    }
    Dense::new([a.ne[0], a.ne[2], a.ne[1], a.ne[3]], data)
}

//! A `mul_mat` x N step (`Step::MulMatMany`) in family 1: its indices are in
//! range; it has one weight per result, then the activations, 2 to 5
//! products (what a CUDA argument block holds); its results are distinct
//! graph tensors it does not read; all weights have one dtype; each result is
//! `mul_mat` of its weight and the activations (shape rule), with arena bytes
//! (family 2 as for any op). Reads and writes go through `GlobalItem`, so
//! order, lifetimes, races and events cover every result; a partial sum it
//! reads is refused (`trace`: no op).

use super::shape::check_op;
use super::{Checker, ViolationKind::Format};
use crate::op::Op;

/// Family 1 for one step named `name`: index ranges, counts, dtypes.
pub(super) fn format(c: &mut Checker<'_>, name: String, dsts: &[u32], srcs: &[u32]) {
    for &t in dsts.iter().chain(srcs) {
        if t as usize >= c.plan.tensors.len() {
            let msg = format!("mul_mat x {} names t{t}, out of range", dsts.len());
            c.problem(Format, name.clone(), msg);
        }
    }
    if !(2..=5).contains(&dsts.len()) || srcs.len() != dsts.len() + 1 {
        let msg = format!(
            "mul_mat x N computes 2 to 5 products from one weight each and the activations: \
             {} results, {} operands",
            dsts.len(),
            srcs.len()
        );
        return c.problem(Format, name, msg);
    }
    for (i, &t) in dsts.iter().enumerate() {
        if t >= c.plan.n_graph_tensors || srcs.contains(&t) || dsts[..i].contains(&t) {
            let msg = format!(
                "mul_mat x {} writes t{t}, which must be a graph tensor it does not read, named once",
                dsts.len()
            );
            c.problem(Format, name.clone(), msg);
        }
    }
    let dtypes: Vec<_> = (srcs[..dsts.len()].iter())
        .filter_map(|&w| c.tensor(w).map(|t| t.dtype))
        .collect();
    if dtypes.windows(2).any(|p| p[0] != p[1]) {
        let msg =
            format!("mul_mat x N: weights of dtypes {dtypes:?} (one kernel decodes one dtype)");
        c.problem(Format, name, msg);
    }
}

/// Family 1, shapes: each result is `mul_mat` of its weight and the
/// activations, stored.
pub(super) fn shape(c: &mut Checker<'_>, dsts: &[u32], srcs: &[u32]) {
    let Some(&x) = srcs.last() else { return };
    if srcs.len() != dsts.len() + 1 {
        return; // format
    }
    for (&dst, &w) in dsts.iter().zip(srcs) {
        check_op(c, &Op::MulMat, dst, &[w, x], false);
    }
}

//! The plan step of one fused attention chain ([`crate::fuse::attention`]).

use crate::Error;
use crate::fuse::Attention;
use ir::plan::Step;
use ir::{Graph, TensorId};

/// `Step::Attention` for `a`, its operands named through `local` (the plan
/// tensor holding each on the step's device).
pub(super) fn step(
    graph: &Graph,
    a: &Attention,
    mut local: impl FnMut(TensorId) -> Result<u32, Error>,
) -> Result<Step, Error> {
    let srcs = (a.reads(graph).into_iter())
        .map(&mut local)
        .collect::<Result<_, _>>()?;
    let (scale, max_bias) = a.softmax(graph);
    Ok(Step::Attention {
        scores: a.scores.0,
        probs: a.probs.0,
        product: a.product.0,
        permuted: a.permuted.0,
        dst: a.dst.0,
        srcs,
        scale,
        max_bias,
    })
}

//! The device-neutral part of preparing an attention step
//! ([`ir::plan::Step::Attention`]): its costs and its [`PreparedStep`].

use super::{DeviceStep, PrepareCtx, PreparedStep};
use ir::plan::Step;

/// The number of elements of plan tensor `t`.
fn elements(ctx: &PrepareCtx<'_>, t: u32) -> u64 {
    ctx.plan.tensors[t as usize].ne.iter().product::<i64>() as u64
}

impl PrepareCtx<'_> {
    /// The attention step `step` of split `split` running `kernel`; its
    /// costs are its two products' multiply-adds (2 flops each) and one
    /// operation per score for the softmax.
    ///
    /// # Panics
    /// When `step` is not an attention step.
    pub fn attention_step(
        &self,
        split: usize,
        step: &Step,
        kernel: Box<dyn DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let Step::Attention {
            scores,
            product,
            dst,
            srcs,
            ..
        } = step
        else {
            panic!("attention_step of a step that is no attention");
        };
        let bytes = self.span(*dst) + srcs.iter().map(|&t| self.span(t)).sum::<u64>();
        let head = self.plan.tensors[srcs[0] as usize].ne[0] as u64;
        let n_kv = self.plan.tensors[srcs[2] as usize].ne[0] as u64;
        let (n_scores, n_out) = (elements(self, *scores), elements(self, *product));
        let flops = 2 * head * n_scores + n_scores + 2 * n_kv * n_out;
        self.compound_step(
            split,
            "attention",
            (kernel, fallback),
            (*dst, srcs),
            (bytes, flops),
        )
    }
}

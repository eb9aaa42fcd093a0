//! Preparing a plan's steps: each split's copies, then its steps, in global
//! order, each prepared by a device ([`crate::device::Device::prepare_step`]
//! and [`crate::device::Device::prepare_copy`]) into a [`PreparedStep`]:
//! a device-neutral record of what runs, what it touches and what it costs.
//!
//! A step is prepared by the device of its split. A copy is prepared by its
//! end that is not host memory, the destination first (a GPU or a server
//! moves the bytes), or by its source when both ends are host memory (a
//! memcpy on the copy stream of the device that holds the bytes).

use crate::RuntimeError;
pub use crate::device::PreparedStep;
use crate::device::{CopyEnd, Device, PrepareCtx};
use ir::plan::Step;
use std::sync::Arc;

/// The steps of `ctx.plan`, in execution order (each split's copies first),
/// prepared by `devices` (one per plan device); `on_prepare` sees (steps
/// prepared, steps in all).
pub(crate) fn prepare_all(
    ctx: &PrepareCtx<'_>,
    devices: &[Arc<dyn Device>],
    on_prepare: Option<&(dyn Fn(usize, usize) + Send + Sync)>,
) -> Result<Vec<PreparedStep>, RuntimeError> {
    let plan = ctx.plan;
    let total: usize = (plan.splits.iter())
        .map(|s| s.copies.len() + s.steps.len())
        .sum();
    let mut out = Vec::with_capacity(total);
    for (s, split) in plan.splits.iter().enumerate() {
        for c in &split.copies {
            let on = |t: u32| plan.tensors[t as usize].device.index();
            let end = |t: u32| CopyEnd {
                device: &devices[on(t)],
                addr: ctx.addr[t as usize],
            };
            let (from, to) = (end(c.src), end(c.dst));
            let by = if to.is_host() { on(c.src) } else { on(c.dst) };
            out.push(PreparedStep {
                kernel: devices[by].prepare_copy(from, to, c.bytes as usize)?,
                split: s,
                device: by,
                kind: "copy",
                op: None,
                fused_kernel: None,
                product: None,
                dst: c.dst,
                srcs: vec![c.src],
                bytes: 2 * c.bytes,
                flops: 0,
                fallback: false,
            });
        }
        let device = &devices[split.device.index()];
        for step in &split.steps {
            let index = out.len();
            let prepared = device.prepare_step(ctx, s, index, step).map_err(|e| {
                let dst = match step {
                    Step::Op { dst, .. }
                    | Step::MulMatAdd { dst, .. }
                    | Step::MulMatGlu { dst, .. }
                    | Step::Attention { dst, .. } => *dst,
                    Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => {
                        dsts.first().copied().unwrap_or(0)
                    }
                    Step::Fused { kernel } => {
                        (plan.kernels.get(*kernel as usize)).map_or(0, |k| k.output)
                    }
                };
                RuntimeError::Step {
                    step: index,
                    tensor: plan.tensors[dst as usize].name.clone(),
                    source: Box::new(e),
                }
            })?;
            out.push(prepared);
            if let Some(report) = on_prepare {
                report(out.len(), total);
            }
        }
    }
    Ok(out)
}

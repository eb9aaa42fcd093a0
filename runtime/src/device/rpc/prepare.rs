//! Preparing a step for a remote device (its node, which the device sends
//! with the rest of its segment as one ggml graph) and a copy with a remote
//! end; and which weights a server may hold as dequantized F32 copies.

use super::device::RemoteDevice;
use super::ggml::step_records;
use super::kernels::{End, RemoteCopy, RemoteStep};
use crate::RuntimeError;
use crate::device::PreparedStep;
use crate::device::{CopyEnd, Device, PrepareCtx};
use ir::Role;
use ir::plan::{Placement, Plan, Step};
use std::sync::Arc;

/// Prepares `step` (global index `index`) of split `split` on `device`.
pub(super) fn prepare_step(
    device: &Arc<RemoteDevice>,
    ctx: &PrepareCtx<'_>,
    split: usize,
    index: usize,
    step: &Step,
) -> Result<PreparedStep, RuntimeError> {
    let Step::Op { op, dst, srcs } = step else {
        return Err(RuntimeError::Unsupported {
            op: "fused".to_string(),
            detail: format!(
                "a fused kernel or fused step (mul_mat + add, mul_mat + glu, mul_mat x N, attention, rope + set_rows) on remote device '{}' (ggml runs ops one by one; \
                 the compiler does not fuse there)",
                ctx.device_name(split)
            ),
        });
    };
    ctx.check_reads(split, Some(op), srcs)?;
    let locate = |t: u32| device.locate(ctx.addr[t as usize] as u64, ctx.span(t));
    let graph = step_records(ctx.plan, index, op, *dst, srcs, &locate).map_err(|e| {
        RuntimeError::Unsupported {
            op: op.name().to_string(),
            detail: format!("on remote device '{}': {e}", device.info().name),
        }
    })?;
    let kernel = Box::new(RemoteStep {
        device: Arc::clone(device),
        graph: Arc::new(graph),
    });
    Ok(ctx.op_step(split, (op, *dst, srcs), kernel, false))
}

/// A copy of `bytes` from `from` to `to`, at least one end remote, the
/// other remote or host memory.
pub(super) fn prepare_copy(
    from: CopyEnd<'_>,
    to: CopyEnd<'_>,
    bytes: usize,
) -> Result<RemoteCopy, RuntimeError> {
    let end = |e: CopyEnd<'_>| {
        if let Ok(remote) = Arc::clone(e.device).as_any_arc().downcast::<RemoteDevice>() {
            return Ok(End::Remote(remote, e.addr as u64));
        }
        if e.is_host() {
            return Ok(End::Host(e.addr));
        }
        Err(RuntimeError::Unsupported {
            op: "copy".to_string(),
            detail: format!(
                "a copy between a remote device and '{}', which is neither remote nor host memory",
                e.device.info().name
            ),
        })
    };
    Ok(RemoteCopy {
        from: end(from)?,
        to: end(to)?,
        bytes,
    })
}

/// Per plan tensor: a block-quantized weight that a remote device may hold as
/// a dequantized F32 copy in exact precision, because every step reading it
/// is a `mul_mat` or `get_rows` taking it whole as src0 (where F32 values
/// compute what our exact kernels compute from the blocks), and nothing
/// views it or copies its bytes elsewhere.
pub(super) fn f32_weights(plan: &Plan) -> Vec<bool> {
    let mut ok: Vec<bool> = (plan.tensors.iter())
        .map(|t| t.role == Role::Weight && t.dtype.block_elems() > 1)
        .collect();
    let mut refuse = |t: u32| {
        if let Some(x) = ok.get_mut(t as usize) {
            *x = false;
        }
    };
    for pt in &plan.tensors {
        if let Placement::View { of, .. } = pt.placement {
            refuse(of);
        }
    }
    for split in &plan.splits {
        for c in &split.copies {
            refuse(c.src);
        }
        for step in &split.steps {
            match step {
                Step::Op { op, srcs, .. } => {
                    let whole_src0 = matches!(op, ir::Op::MulMat | ir::Op::GetRows);
                    for (i, &s) in srcs.iter().enumerate() {
                        if !(whole_src0 && i == 0) {
                            refuse(s);
                        }
                    }
                }
                // Never on a remote device (the compiler does not fuse
                // there); refused to stay on the safe side.
                Step::MulMatAdd { srcs, .. } | Step::MulMatGlu { srcs, .. } => {
                    srcs.iter().for_each(|&s| refuse(s))
                }
                Step::MulMatMany { srcs, .. } | Step::RopeStore { srcs, .. } => {
                    srcs.iter().for_each(|&s| refuse(s))
                }
                Step::Attention { srcs, .. } => srcs.iter().for_each(|&s| refuse(s)),
                Step::Fused { kernel } => {
                    for &s in plan
                        .kernels
                        .get(*kernel as usize)
                        .map_or(&[][..], |k| &k.inputs)
                    {
                        refuse(s);
                    }
                }
            }
        }
    }
    ok
}

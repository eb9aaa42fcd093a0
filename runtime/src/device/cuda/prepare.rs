//! Preparing a step for a GPU: a launch of a hand-written kernel or of CUDA
//! C generated from a fused body; and a copy with a GPU end.

use super::device::CudaDevice;
use super::launch;
use super::step::{CudaCopy, CudaStep, End};
use crate::RuntimeError;
use crate::device::PreparedStep;
use crate::device::cpu::RawTensor;
use crate::device::{CopyEnd, PrepareCtx};
use ir::plan::{FusedKernel, Step};
use std::sync::Arc;

/// Prepares `step` of split `split` on `device`: a kernel launch.
pub(super) fn prepare_step(
    device: &Arc<CudaDevice>,
    ctx: &PrepareCtx<'_>,
    split: usize,
    step: &Step,
) -> Result<PreparedStep, RuntimeError> {
    let name = ctx.device_name(split);
    let on_gpu = |e: RuntimeError| match e {
        RuntimeError::Unsupported { op, detail } => RuntimeError::Cuda {
            device: name.to_string(),
            what: format!("no kernel for {op}: {detail}"),
        },
        other => other,
    };
    match step {
        Step::Op { op, dst, srcs } => {
            ctx.check_reads(split, Some(op), srcs)?;
            let s: Vec<RawTensor> = srcs.iter().map(|&t| ctx.raw(t)).collect();
            let launch = launch::op(op, ctx.raw(*dst), &s).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.op_step(split, (op, *dst, srcs), kernel, false))
        }
        Step::MulMatAdd { product, dst, srcs } => {
            ctx.check_reads(split, None, srcs)?;
            let launch =
                launch::mul_mat_add(ctx.raw(*dst), srcs.map(|t| ctx.raw(t))).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.product_add_step(split, (*product, *dst, srcs), kernel, false))
        }
        Step::Attention {
            dst,
            srcs,
            scale,
            max_bias,
            ..
        } => {
            ctx.check_reads(split, None, srcs)?;
            let s: Vec<RawTensor> = srcs.iter().map(|&t| ctx.raw(t)).collect();
            let launch =
                launch::attention(ctx.raw(*dst), &s, (*scale, *max_bias)).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.attention_step(split, step, kernel, false))
        }
        Step::MulMatMany { dsts, srcs } => {
            ctx.check_reads(split, None, srcs)?;
            let d: Vec<RawTensor> = dsts.iter().map(|&t| ctx.raw(t)).collect();
            let w: Vec<RawTensor> = srcs[..dsts.len()].iter().map(|&t| ctx.raw(t)).collect();
            let x = ctx.raw(srcs[dsts.len()]);
            let launch = launch::mul_mat_many(&d, &w, x).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.product_many_step(split, step, kernel, false))
        }
        Step::RopeStore { .. } => {
            for (op, _, srcs) in step.ops() {
                ctx.check_reads(split, Some(op), srcs)?;
            }
            let ops = launch::row_ops(ctx.plan, step, |t| ctx.raw(t));
            let launch = launch::rope_store(&ops).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.rope_store_step(split, step, kernel, false))
        }
        Step::MulMatGlu {
            kind, dst, srcs, ..
        } => {
            ctx.check_reads(split, None, srcs)?;
            let launch = launch::mul_mat_glu(*kind, ctx.raw(*dst), srcs.map(|t| ctx.raw(t)))
                .map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.product_glu_step(split, step, kernel, false))
        }
        Step::Fused { kernel: index } => {
            let k: &FusedKernel = &ctx.plan.kernels[*index as usize];
            ctx.check_reads(split, None, &k.inputs)?;
            let inputs: Vec<RawTensor> = k.inputs.iter().map(|&t| ctx.raw(t)).collect();
            let launch = launch::fused(&k.body, ctx.raw(k.output), &inputs).map_err(on_gpu)?;
            let kernel = Box::new(CudaStep::new(device, launch));
            Ok(ctx.fused_step(split, *index, kernel, false))
        }
    }
}

/// A copy of `bytes` from `from` to `to`, at least one end a GPU; the other
/// end a GPU or host memory (the compiler never joins a GPU and a remote
/// device by a copy: targets with both are refused).
pub(super) fn prepare_copy(
    from: CopyEnd<'_>,
    to: CopyEnd<'_>,
    bytes: usize,
) -> Result<CudaCopy, RuntimeError> {
    let end = |e: CopyEnd<'_>| {
        if let Ok(gpu) = Arc::clone(e.device).as_any_arc().downcast::<CudaDevice>() {
            return Ok(End::Gpu(gpu, e.addr as u64));
        }
        if e.is_host() {
            return Ok(End::Host(e.addr));
        }
        Err(RuntimeError::Unsupported {
            op: "copy".to_string(),
            detail: format!(
                "a copy between a GPU and '{}', which is neither a GPU nor host memory",
                e.device.info().name
            ),
        })
    };
    Ok(CudaCopy {
        from: end(from)?,
        to: end(to)?,
        bytes,
    })
}

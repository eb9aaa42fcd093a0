//! Preparing a step for the CPU: the fast kernel families ([`FastKernels`]:
//! matmuls, the LLVM JIT, plain-Rust ops), or the reference kernels on one
//! thread where none supports the step (correct, slow, and listed in the
//! load report); and a copy between host arenas, a memcpy.

use super::attention::{AttentionBuffers, SharedAttentionBuffers};
use super::in_turn::KernelsInTurn;
use super::product_add::ProductAddKernel;
use super::product_glu::ProductGluKernel;
use super::reference_kernel::{ReferenceFusedKernel, ReferenceKernel};
use super::{CpuKernel, FastKernels, RawTensor, ThreadCtx};
use crate::RuntimeError;
use crate::device::PreparedStep;
use crate::device::{DeviceStep, PrepareCtx};
use ir::plan::{FusedKernel, Step};
use ir::{Op, Role};
use std::any::Any;

/// A CPU kernel as a prepared step.
pub struct CpuStep(pub Box<dyn CpuKernel>);

impl DeviceStep for CpuStep {
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn scratch_bytes(&self) -> usize {
        self.0.scratch_bytes()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Prepares `step` of split `split` with `fast`, or the reference kernel
/// (an attention step over the device's `attention` buffers).
pub(super) fn prepare_step(
    ctx: &PrepareCtx<'_>,
    (fast, attention): (&FastKernels, &SharedAttentionBuffers),
    split: usize,
    step: &Step,
) -> Result<PreparedStep, RuntimeError> {
    match step {
        Step::Op { op, dst, srcs } => {
            ctx.check_reads(split, Some(op), srcs)?;
            let d = ctx.raw(*dst);
            let s: Vec<RawTensor> = srcs.iter().map(|&t| ctx.raw(t)).collect();
            // A weight (through views): bound before preparation, never
            // written; copies of weights are intermediates.
            let src0_is_weight = srcs.first().is_some_and(|&t| {
                ctx.plan.tensors[ctx.plan.owner(t) as usize].role == Role::Weight
            });
            let (kernel, fallback) = op_kernel(fast, op, d, &s, src0_is_weight)?;
            Ok(ctx.op_step(split, (op, *dst, srcs), Box::new(CpuStep(kernel)), fallback))
        }
        Step::MulMatAdd { product, dst, srcs } => {
            ctx.check_reads(split, None, srcs)?;
            let d = ctx.raw(*dst);
            let [w, x, r] = srcs.map(|t| ctx.raw(t));
            let src0_is_weight =
                ctx.plan.tensors[ctx.plan.owner(srcs[0]) as usize].role == Role::Weight;
            // The product is written as `dst` (both are packed F32 of one
            // extent: checker), then the addend added to it in place.
            let (product_kernel, slow_product) =
                op_kernel(fast, &Op::MulMat, d, &[w, x], src0_is_weight)?;
            let (add_kernel, slow_add) = op_kernel(fast, &Op::Add, d, &[d, r], false)?;
            let kernel = Box::new(ProductAddKernel {
                product: product_kernel,
                add: add_kernel,
            });
            let step = (*product, *dst, srcs);
            let fallback = slow_product || slow_add;
            Ok(ctx.product_add_step(split, step, Box::new(CpuStep(kernel)), fallback))
        }
        Step::Attention { .. } => attention_step(ctx, (fast, attention), split, step),
        Step::MulMatMany { dsts, srcs } => {
            ctx.check_reads(split, None, srcs)?;
            let x = ctx.raw(*srcs.last().expect("checker: operands"));
            let mut products = Vec::with_capacity(dsts.len());
            let mut fallback = false;
            for (&dst, &w) in dsts.iter().zip(srcs) {
                let is_weight = ctx.plan.tensors[ctx.plan.owner(w) as usize].role == Role::Weight;
                let (k, slow) =
                    op_kernel(fast, &Op::MulMat, ctx.raw(dst), &[ctx.raw(w), x], is_weight)?;
                products.push(k);
                fallback |= slow;
            }
            let kernel = Box::new(CpuStep(Box::new(KernelsInTurn { kernels: products })));
            Ok(ctx.product_many_step(split, step, kernel, fallback))
        }
        Step::RopeStore { .. } => {
            let mut kernels = Vec::new();
            let mut fallback = false;
            for (op, dst, srcs) in step.ops() {
                ctx.check_reads(split, Some(op), srcs)?;
                let s: Vec<RawTensor> = srcs.iter().map(|&t| ctx.raw(t)).collect();
                let (k, slow) = op_kernel(fast, op, ctx.raw(dst), &s, false)?;
                kernels.push(k);
                fallback |= slow;
            }
            let kernel = Box::new(CpuStep(Box::new(KernelsInTurn { kernels })));
            Ok(ctx.rope_store_step(split, step, kernel, fallback))
        }
        Step::MulMatGlu {
            kind, dst, srcs, ..
        } => {
            ctx.check_reads(split, None, srcs)?;
            let d = ctx.raw(*dst);
            let [wg, wu, x] = srcs.map(|t| ctx.raw(t));
            let is_weight =
                |t: u32| ctx.plan.tensors[ctx.plan.owner(t) as usize].role == Role::Weight;
            // The gate product is written as `dst` (both packed F32 of one
            // extent: checker), the up product into the step's buffer, then
            // the unit in place over `dst`.
            let glu = Op::Glu {
                kind: *kind,
                swapped: false,
            };
            let (gate, slow_gate) = op_kernel(fast, &Op::MulMat, d, &[wg, x], is_weight(srcs[0]))?;
            let slow = std::cell::Cell::new(slow_gate);
            let kernel = ProductGluKernel::new(
                d,
                gate,
                |up| {
                    let (k, s) = op_kernel(fast, &Op::MulMat, up, &[wu, x], is_weight(srcs[1]))?;
                    slow.set(slow.get() || s);
                    Ok::<_, RuntimeError>(k)
                },
                |up| {
                    let (k, s) = op_kernel(fast, &glu, d, &[d, up], false)?;
                    slow.set(slow.get() || s);
                    Ok(k)
                },
            )?;
            let kernel = Box::new(CpuStep(Box::new(kernel)));
            Ok(ctx.product_glu_step(split, step, kernel, slow.get()))
        }
        Step::Fused { kernel: index } => {
            let k: &FusedKernel = &ctx.plan.kernels[*index as usize];
            ctx.check_reads(split, None, &k.inputs)?;
            let out = ctx.raw(k.output);
            let inputs: Vec<RawTensor> = k.inputs.iter().map(|&t| ctx.raw(t)).collect();
            let (kernel, fallback) = match fast.fused(&k.body, out, &inputs) {
                Ok(kn) => (kn, false),
                Err(RuntimeError::Unsupported { .. }) => (
                    Box::new(ReferenceFusedKernel::new(k.body.clone(), out, inputs))
                        as Box<dyn CpuKernel>,
                    true,
                ),
                Err(e) => return Err(e),
            };
            Ok(ctx.fused_step(split, *index, Box::new(CpuStep(kernel)), fallback))
        }
    }
}

fn op_kernel(
    fast: &FastKernels,
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
    src0_is_weight: bool,
) -> Result<(Box<dyn CpuKernel>, bool), RuntimeError> {
    match fast.op(op, dst, srcs, src0_is_weight) {
        Ok(k) => Ok((k, false)),
        Err(RuntimeError::Unsupported { .. }) => Ok((
            Box::new(ReferenceKernel::new(*op, dst, srcs.to_vec())),
            true,
        )),
        Err(e) => Err(e),
    }
}

/// A byte copy between two tensors of one layout in host memory (a copy
/// between CPU devices), split over threads.
pub(super) struct CopyKernel {
    pub(super) src: *mut u8,
    pub(super) dst: *mut u8,
    pub(super) bytes: usize,
}

// SAFETY: addresses of arena bytes; threads copy disjoint ranges.
unsafe impl Send for CopyKernel {}
// SAFETY: as above.
unsafe impl Sync for CopyKernel {}

impl CpuKernel for CopyKernel {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        let r = ctx.share(self.bytes);
        // SAFETY: both tensors hold `bytes` bytes (the checker proved the copy's
        // size equals both spans) and do not overlap (different arenas).
        unsafe {
            std::ptr::copy_nonoverlapping(self.src.add(r.start), self.dst.add(r.start), r.len())
        };
    }

    fn describe(&self) -> String {
        format!("copy {} bytes", self.bytes)
    }
}

/// An attention step: the four ops' kernels over the device's attention
/// buffers (see [`super::attention`]).
fn attention_step(
    ctx: &PrepareCtx<'_>,
    (fast, shared): (&FastKernels, &SharedAttentionBuffers),
    split: usize,
    step: &Step,
) -> Result<PreparedStep, RuntimeError> {
    let Step::Attention {
        scores,
        product,
        permuted,
        dst,
        srcs,
        scale,
        max_bias,
        ..
    } = step
    else {
        unreachable!("called for attention steps only");
    };
    ctx.check_reads(split, None, srcs)?;
    let layout = |t: u32| ctx.plan.tensors[t as usize].layout();
    let at = (ctx.plan, ctx.plan.splits[split].device);
    let layouts = [*scores, *product, *permuted].map(layout);
    let b = AttentionBuffers::new(shared, at, layouts)?;
    let [k, q, v] = [0, 1, 2].map(|i| ctx.raw(srcs[i]));
    let mut softmax_srcs = vec![b.scores];
    softmax_srcs.extend(srcs.get(3).map(|&m| ctx.raw(m)));
    let softmax = Op::SoftMax {
        scale: *scale,
        max_bias: *max_bias,
    };
    let (s, slow_s) = op_kernel(fast, &Op::MulMat, b.scores, &[k, q], false)?;
    let (p, slow_p) = op_kernel(fast, &softmax, b.scores, &softmax_srcs, false)?;
    let (o, slow_o) = op_kernel(fast, &Op::MulMat, b.product, &[v, b.scores], false)?;
    let (c, slow_c) = op_kernel(fast, &Op::Cont, ctx.raw(*dst), &[b.permuted], false)?;
    let fallback = slow_s || slow_p || slow_o || slow_c;
    let kernel = Box::new(b.kernel([s, p, o, c]));
    Ok(ctx.attention_step(split, step, Box::new(CpuStep(kernel)), fallback))
}

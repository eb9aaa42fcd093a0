//! A step computed by the scalar reference kernels (`kernels::reference`), on
//! thread 0: the runtime's fallback for an op or dtype combination no fast
//! kernel handles. It is correct by construction (it is the oracle) and slow;
//! the runtime reports each use at load so a slow plan is never a mystery.

use super::{CpuKernel, RawTensor, ThreadCtx};
use ir::Op;
use kernels::reference::{compute, gather, scatter};

/// `op` over `srcs` into `dst` with the reference kernels.
pub struct ReferenceKernel {
    op: Op,
    dst: RawTensor,
    srcs: Vec<RawTensor>,
}

impl ReferenceKernel {
    /// Prepares the fallback for one op step.
    pub fn new(op: Op, dst: RawTensor, srcs: Vec<RawTensor>) -> ReferenceKernel {
        ReferenceKernel { op, dst, srcs }
    }
}

/// The bytes of `t` as a slice.
///
/// # Safety
/// `t` upholds [`RawTensor`]'s invariant.
pub unsafe fn bytes_of<'a>(t: &RawTensor) -> &'a [u8] {
    // SAFETY: RawTensor's invariant: data points to span_bytes valid bytes.
    unsafe { std::slice::from_raw_parts(t.data, t.span_bytes() as usize) }
}

impl CpuKernel for ReferenceKernel {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        if ctx.ith != 0 {
            return;
        }
        let values: Vec<_> = self
            .srcs
            .iter()
            // SAFETY: prepared tensors are valid (run's contract).
            .map(|s| gather(unsafe { bytes_of(s) }, &s.layout()))
            .collect();
        let refs: Vec<_> = values.iter().collect();
        let out = compute(&self.op, &refs, &self.dst.layout());
        // SAFETY: dst is valid for its span; only thread 0 writes it.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.dst.data, self.dst.span_bytes() as usize)
        };
        scatter(&out, dst, &self.dst.layout());
    }

    fn describe(&self) -> String {
        format!("{} (reference fallback)", self.op.name())
    }
}

/// A fused kernel's body evaluated by the reference interpreter on thread 0.
pub struct ReferenceFusedKernel {
    body: Vec<ir::plan::Expr>,
    output: RawTensor,
    inputs: Vec<RawTensor>,
}

impl ReferenceFusedKernel {
    /// Prepares the fallback for one fused step.
    pub fn new(body: Vec<ir::plan::Expr>, output: RawTensor, inputs: Vec<RawTensor>) -> Self {
        ReferenceFusedKernel {
            body,
            output,
            inputs,
        }
    }
}

impl CpuKernel for ReferenceFusedKernel {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        if ctx.ith != 0 {
            return;
        }
        let values: Vec<_> = self
            .inputs
            .iter()
            // SAFETY: prepared tensors are valid (run's contract).
            .map(|s| gather(unsafe { bytes_of(s) }, &s.layout()))
            .collect();
        let refs: Vec<_> = values.iter().collect();
        let out = kernels::reference::fused::eval_fused(&self.body, &refs, self.output.ne);
        // SAFETY: output is valid for its span; only thread 0 writes it.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.output.data, self.output.span_bytes() as usize)
        };
        scatter(&out, dst, &self.output.layout());
    }

    fn describe(&self) -> String {
        "fused (reference fallback)".to_string()
    }
}

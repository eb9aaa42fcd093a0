//! A `mul_mat` x N step on the CPU: each product's kernel, the one the
//! unfused `mul_mat` would run (float panels, int8 lanes, K-quant tiles,
//! `gemm`, the reference), writes its own result, with a barrier between
//! each two, so the fused step's bits are the unfused products'.
//!
//! Invariant: the kernels share one scratch, used one after the other (an
//! int8 kernel quantizes the activations into it); no product's result
//! shares bytes with an operand of another (the compiler gives the step no
//! in-place operand).

use super::{CpuKernel, ThreadCtx};

/// The products, one after the other, in one step.
pub struct ProductManyKernel {
    /// One kernel per product, in the step's order.
    pub products: Vec<Box<dyn CpuKernel>>,
}

impl CpuKernel for ProductManyKernel {
    fn scratch_bytes(&self) -> usize {
        (self.products.iter())
            .map(|k| k.scratch_bytes())
            .max()
            .unwrap_or(0)
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        for (i, kernel) in self.products.iter().enumerate() {
            // SAFETY: the caller's contract, passed on: every thread runs
            // every kernel, in this order, with the same scratch (large
            // enough for each); the barrier ends each kernel's use of the
            // scratch before the next one's.
            unsafe {
                if i > 0 {
                    ctx.barrier();
                }
                kernel.run(ctx, scratch);
            }
        }
    }

    fn describe(&self) -> String {
        let each: Vec<String> = self.products.iter().map(|k| k.describe()).collect();
        each.join(" + ")
    }
}

//! Steps of several results on the CPU (`mul_mat` x N, rope + `set_rows`):
//! each result's kernel, the one its unfused op would run (for products:
//! float panels, int8 lanes, K-quant tiles, `gemm`, the reference), writes
//! its own result, with a barrier between each two, so the fused step's bits
//! are the unfused ops'.
//!
//! Invariant: the kernels share one scratch, used one after the other (an
//! int8 kernel quantizes the activations into it); the kernels run in the
//! step's order, so a result an earlier kernel writes is complete before a
//! later one reads it (a chained cache store reads its rope's result).

use super::{CpuKernel, ThreadCtx};

/// Kernels one after the other, in one step.
pub struct KernelsInTurn {
    /// One kernel per result, in the step's order.
    pub kernels: Vec<Box<dyn CpuKernel>>,
}

impl CpuKernel for KernelsInTurn {
    fn scratch_bytes(&self) -> usize {
        (self.kernels.iter())
            .map(|k| k.scratch_bytes())
            .max()
            .unwrap_or(0)
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        for (i, kernel) in self.kernels.iter().enumerate() {
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
        let each: Vec<String> = self.kernels.iter().map(|k| k.describe()).collect();
        each.join(" + ")
    }
}

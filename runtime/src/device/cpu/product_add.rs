//! A `mul_mat` + `add` step on the CPU: the product kernel writes `dst`,
//! every thread meets at a barrier, then an elementwise add kernel adds the
//! addend into `dst` in place. Every matmul family (float panels, int8 lanes,
//! K-quant tiles, `gemm`, the reference) computes the product exactly as it
//! would for the unfused `mul_mat`, so the fused step's bits are the unfused
//! pair's.
//!
//! Invariant: the addend never shares `dst`'s bytes (the compiler gives a
//! product-add no in-place operand), so writing the product first loses
//! nothing; the two kernels share one scratch, used one after the other.

use super::{CpuKernel, ThreadCtx};

/// The product, then the add, in one step.
pub struct ProductAddKernel {
    /// Writes `w · x` into `dst`.
    pub product: Box<dyn CpuKernel>,
    /// Writes `dst + addend` into `dst`.
    pub add: Box<dyn CpuKernel>,
}

impl CpuKernel for ProductAddKernel {
    fn scratch_bytes(&self) -> usize {
        self.product.scratch_bytes().max(self.add.scratch_bytes())
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        // SAFETY: the caller's contract, passed on: every thread of the pool
        // runs both kernels, in this order, with the same scratch (large
        // enough for either); the barrier orders every product element's
        // write before any thread's add reads it.
        unsafe {
            self.product.run(ctx, scratch);
            ctx.barrier();
            self.add.run(ctx, scratch);
        }
    }

    fn describe(&self) -> String {
        format!("{} + add", self.product.describe())
    }
}

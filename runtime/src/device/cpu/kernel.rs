//! The one interface between the executor and CPU kernels.
//!
//! A kernel is prepared once at load for one plan step (its tensors' addresses
//! baked in), then run many times. Every thread of the pool calls `run` with
//! its [`ThreadCtx`]; the kernel takes its own share of the work (rows or
//! blocks) and may use [`ThreadCtx::barrier`] between phases.

use super::pool::ThreadCtx;

/// A prepared step.
pub trait CpuKernel: Send + Sync {
    /// Bytes of scratch memory one run needs, shared by all threads (e.g.
    /// activations quantized once for a quantized matmul). 0 for none.
    fn scratch_bytes(&self) -> usize {
        0
    }

    /// Runs this thread's share.
    ///
    /// # Safety
    /// The tensors the kernel was prepared with are valid; `scratch` points to
    /// `scratch_bytes()` bytes aligned to 64, the same for every thread of one
    /// run; every thread of the pool calls `run` exactly once per run.
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8);

    /// A short description for errors and profiles (`mul_mat q4_1 x f32`).
    fn describe(&self) -> String;
}

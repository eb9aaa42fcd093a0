//! The CPU device, one room: the device itself (the host, a group of its
//! cores or a NUMA node: `device.rs`), its worker pool, how its steps are
//! prepared, and the kernels (LLVM JIT, matmuls, plain-Rust ops, the
//! reference fallback).

#[cfg(feature = "llvm")]
pub mod jit;
pub mod jit_choices;
// A build without LLVM (a GPU host that runs plans on CUDA and has no
// libLLVM): the same interface, declining every kernel, so the plain-Rust
// and reference kernels take those steps.
pub mod affinity;
pub mod attention;
mod device;
pub mod fast;
pub mod in_turn;
#[cfg(not(feature = "llvm"))]
#[path = "jit_off.rs"]
pub mod jit;
pub mod kernel;
pub mod matmul;
pub mod numa;
pub mod ops;
pub mod pool;
pub mod prepare;
pub mod product_add;
pub mod product_glu;
pub mod reference_kernel;
pub mod tensor;

pub use affinity::{PinError, allowed_cores, pin_current_thread, pin_or_warn};
pub use device::{CpuDevice, Pinned, cpu_caps};
pub use fast::FastKernels;
pub use kernel::CpuKernel;
pub use pool::{ThreadCtx, ThreadPool};
pub use prepare::CpuStep;
pub use tensor::RawTensor;

#[cfg(test)]
mod tests;

//! The CPU device: thread pool, prepared kernels, and the kernels themselves.

#[cfg(feature = "llvm")]
pub mod jit;
pub mod jit_choices;
// A build without LLVM (a GPU host that runs plans on CUDA and has no
// libLLVM): the same interface, declining every kernel, so the plain-Rust
// and reference kernels take those steps.
#[cfg(not(feature = "llvm"))]
#[path = "jit_off.rs"]
pub mod jit;
pub mod kernel;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod reference_kernel;
pub mod tensor;

pub use kernel::CpuKernel;
pub use pool::{ThreadCtx, ThreadPool};
pub use tensor::RawTensor;

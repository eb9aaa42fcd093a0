//! The CPU device: thread pool, prepared kernels, and the kernels themselves.

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

//! CUDA devices: the driver probe ([`probe`]) the registry lists GPUs with,
//! and the backend that runs plan steps on them.
//!
//! Pipeline, per plan device `Cuda { ordinal }` at load: the GPU is opened
//! once per process (`driver`: primary context, one stream); each arena is
//! one device allocation (`device`), refused before allocating when the GPU
//! lacks the free bytes; weights and constants are uploaded (directly, or
//! under `GGPLAN_CUDA_STAGING=1` through page-locked staging buffers:
//! `driver::PinnedStaging`, the order in `device::staging`); every step
//! becomes a [`launch::Launch`] (pure: kernel, grid, block, argument block)
//! of a hand-written kernel (`kernels/ops.cu`: mul_mat with on-the-fly
//! dequantization of every block format, `kernels/blocks.cuh`, checked on
//! the host by `blocks_host`; get_rows, soft_max, rope, copies,
//! set_rows, reductions) or of a kernel generated from the step's body
//! (`codegen`: fused bodies, elementwise ops and norms, as the CPU JIT takes
//! them); the op library and the plan's generated kernels are compiled by
//! NVRTC once per distinct source (`nvrtc`, with a disk cache, so a host
//! without NVRTC runs kernels compiled elsewhere) and loaded.
//!
//! Values are computed in f32 from the weights' own bytes (no 8-bit
//! activations): a CUDA run matches the CPU's exact precision.
//!
//! Without the `cuda` feature, `device` and `step` are stand-ins whose
//! device can never be opened (`nocuda.rs`).

pub mod args;
mod backend;
#[cfg(test)]
mod blocks_host;
pub mod codegen;
pub mod launch;
pub mod probe;
pub mod sources;

#[cfg(feature = "cuda")]
pub mod device;
#[cfg(feature = "cuda")]
mod device_impl;
#[cfg(feature = "cuda")]
pub mod driver;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
mod prepare;
#[cfg(feature = "cuda")]
pub mod step;

pub use backend::CudaBackend;
#[cfg(feature = "cuda")]
pub use device::CudaDevice;
pub use probe::{CudaDevice as ProbedGpu, CudaStatus};

//! The plan runtime: loads a [`ir::plan::Plan`] and weights, checks the plan,
//! allocates one arena per (device, usage) and executes the steps on the CPU
//! (LLVM-JIT fused kernels, `gemm` matmuls, SIMD quantized kernels).
//!
//! Layering: depends on `ir` and `kernels` only, never on the compiler.
//! Entry point: [`Runtime::load`], then `set_input_*`, [`Runtime::run`],
//! `output_*`.

mod addresses;
pub mod ceiling;
pub mod check;

pub mod device;
pub mod error;
mod execute;
pub mod executor;
mod load;
mod load_options;

pub mod memory;
pub mod runtime;
mod session_io;
pub mod state;
mod state_journal;
mod state_writers;
pub mod steps;
pub mod traffic;
pub mod weights;

#[cfg(test)]
mod tests;

pub use device::cpu::FastKernels;
pub use device::cpu::matmul::Precision;
pub use error::RuntimeError;
pub use execute::{Flow, Observer, StepInfo};
pub use runtime::{LoadOptions, LoadReport, Runtime};
pub use state::StateStore;
pub use weights::Weights;

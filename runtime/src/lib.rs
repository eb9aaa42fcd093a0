//! The plan runtime: loads a [`ir::plan::Plan`] and weights, checks the plan,
//! allocates one arena per (device, usage) and executes the steps on the CPU
//! (LLVM-JIT fused kernels, `gemm` matmuls, SIMD quantized kernels).
//!
//! Layering: depends on `ir` only, never on the compiler.

pub mod ceiling;
pub mod cpu;
pub mod error;

pub use error::RuntimeError;

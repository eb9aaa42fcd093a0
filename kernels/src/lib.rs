//! Kernels of ggplan.
//!
//! - [`quant`]: the element formats (f32, f16, bf16, i32 and ggml's block-quantized
//!   Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K): byte layouts, dequantization exactly as ggml
//!   does it, and quantizers;
//! - [`reference`](mod@reference): the scalar oracle. Every op of `ir::Op` evaluated in f64 over
//!   [`reference::Dense`] values, plus [`reference::gather`] / [`reference::scatter`]
//!   to move values between bytes (any strides, any dtype) and that dense form. Every
//!   fast kernel (LLVM JIT, SIMD, CUDA) is tested against it;
//! - [`evaluate`]: the reference evaluator, running a whole graph with the oracle
//!   (ggml's memory model: views read and write their root's bytes);
//! - [`testing`]: the seeded generator tests use to draw inputs for comparisons
//!   with the oracle, and small hand-made plans (tensor parallelism).
//!
//! Invariant: nothing here allocates device memory, opens a device or needs LLVM; the
//! crate is plain safe Rust.

pub mod evaluate;
pub mod quant;
pub mod reference;

pub mod testing;

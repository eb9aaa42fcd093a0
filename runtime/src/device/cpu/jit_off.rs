//! The JIT's interface in a build without LLVM (the runtime's `llvm` feature
//! off): every kernel is declined as `Unsupported`, so fused steps run on the
//! reference kernels and elementwise, norm and soft_max steps on the
//! plain-Rust kernels of `cpu::ops` (the load report lists the fallbacks).
//! Such a build is for hosts that run plans on other devices (a CUDA host
//! without libLLVM); the CPU speed figures are the LLVM build's.

use super::{CpuKernel, RawTensor};
use crate::RuntimeError;
use ir::Op;
use ir::plan::Expr;

pub use super::jit_choices::{JitOptions, JitStats, StreamingStores};

/// The stand-in JIT: compiles nothing.
pub struct Jit;

fn declined(op: &str) -> RuntimeError {
    RuntimeError::Unsupported {
        op: op.to_string(),
        detail: "this build has no LLVM JIT (the runtime's `llvm` feature is off)".to_string(),
    }
}

impl Jit {
    /// The stand-in.
    pub fn new() -> Result<Jit, RuntimeError> {
        Ok(Jit)
    }

    /// The stand-in; the options have no effect.
    pub fn with_options(_options: JitOptions) -> Result<Jit, RuntimeError> {
        Ok(Jit)
    }

    /// Lanes of the JIT's vectors: 0, there is no JIT.
    pub fn vector_width(&self) -> u32 {
        0
    }

    /// Nothing compiled.
    pub fn stats(&self) -> JitStats {
        JitStats::default()
    }

    /// Declined: no JIT in this build.
    pub fn prepare_fused(
        &self,
        _body: &[Expr],
        _output: RawTensor,
        _inputs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        Err(declined("fused"))
    }

    /// Declined: no JIT in this build.
    pub fn prepare_soft_max(
        &self,
        _scale: f32,
        _max_bias: f32,
        _dst: RawTensor,
        _src: RawTensor,
        _mask: Option<RawTensor>,
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        Err(declined("soft_max"))
    }

    /// Declined: no JIT in this build.
    pub fn prepare_elementwise(
        &self,
        op: &Op,
        _dst: RawTensor,
        _srcs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        Err(declined(op.name()))
    }
}

//! The fast CPU kernels, chosen per step: the one place that knows which
//! kernel family handles which op.

use crate::RuntimeError;
use crate::cpu::{CpuKernel, RawTensor};
use ir::Op;
use ir::plan::Expr;

/// The fast kernel families (the JIT and its cache live here, shared by every
/// runtime loaded with the same instance).
pub struct FastKernels {}

impl FastKernels {
    /// Sets up the kernel families (LLVM for the host CPU).
    pub fn new() -> Result<FastKernels, RuntimeError> {
        Ok(FastKernels {})
    }

    /// A kernel for one op step, or `Unsupported`.
    pub(crate) fn op(
        &self,
        op: &Op,
        _dst: RawTensor,
        _srcs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        Err(RuntimeError::Unsupported {
            op: op.name().to_string(),
            detail: "not yet".into(),
        })
    }

    /// A kernel for one fused step, or `Unsupported`.
    pub(crate) fn fused(
        &self,
        _body: &[Expr],
        _out: RawTensor,
        _inputs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        Err(RuntimeError::Unsupported {
            op: "fused".into(),
            detail: "not yet".into(),
        })
    }
}

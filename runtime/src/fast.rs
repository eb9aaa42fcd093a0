//! The fast CPU kernels, chosen per step: the one place that knows which
//! kernel family handles which op.

use crate::RuntimeError;
use crate::cpu::matmul::{Precision, prepare_mul_mat_with};
use crate::cpu::{CpuKernel, RawTensor};
use ir::Op;
use ir::plan::Expr;

/// The fast kernel families (the JIT and its cache live here, shared by every
/// runtime loaded with the same instance).
pub struct FastKernels {
    precision: Precision,
}

impl FastKernels {
    /// Sets up the kernel families (LLVM for the host CPU).
    pub fn new(precision: Precision) -> Result<FastKernels, RuntimeError> {
        Ok(FastKernels { precision })
    }

    /// How quantized matmuls are computed.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// A kernel for one op step, or `Unsupported`.
    pub(crate) fn op(
        &self,
        op: &Op,
        dst: RawTensor,
        srcs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        match op {
            Op::MulMat => prepare_mul_mat_with(dst, srcs[0], srcs[1], self.precision),
            _ => Err(RuntimeError::Unsupported {
                op: op.name().to_string(),
                detail: "not yet".into(),
            }),
        }
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

//! The fast CPU kernels, chosen per step: the one place that knows which
//! kernel family handles which op.
//!
//! - `mul_mat` → [`crate::device::cpu::matmul`];
//! - fused kernels, elementwise ops (unary, binary, glu), rms_norm, norm and
//!   soft_max → the LLVM JIT ([`crate::device::cpu::jit`]); where the JIT declines a
//!   layout or dtype, the plain-Rust kernels of [`crate::device::cpu::ops`];
//! - every other op → [`crate::device::cpu::ops`].
//!
//! What none of them supports comes back as `Unsupported`, and the runtime
//! falls back to the reference kernels for that step (and says so).

use crate::RuntimeError;
use crate::device::cpu::jit::Jit;
use crate::device::cpu::matmul::packed::RepackCache;
use crate::device::cpu::matmul::{Precision, prepare_mul_mat_weights, prepare_mul_mat_with};
use crate::device::cpu::ops::prepare_op;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::Op;
use ir::plan::Expr;

/// The fast kernel families. The JIT and its kernel cache live here, and the
/// weights repacked for the quantized matmuls: runtimes loaded with the same
/// instance (prefill and decode) compile each distinct kernel once and share
/// each repacked weight.
pub struct FastKernels {
    precision: Precision,
    jit: Jit,
    repack: RepackCache,
}

impl FastKernels {
    /// How quantized products are computed.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Sets up the kernel families (LLVM for the host CPU).
    pub fn new(precision: Precision) -> Result<FastKernels, RuntimeError> {
        Ok(FastKernels {
            precision,
            jit: Jit::new()?,
            repack: RepackCache::new(),
        })
    }

    /// Bytes of repacked weight copies that loaded kernels hold now.
    pub fn repacked_bytes(&self) -> u64 {
        self.repack.live_bytes()
    }

    /// The JIT (for its statistics).
    pub fn jit(&self) -> &Jit {
        &self.jit
    }

    /// A kernel for one op step, or `Unsupported`. `src0_is_weight`: srcs[0]
    /// is (a view of) a weight, bound before preparation and never written.
    pub(crate) fn op(
        &self,
        op: &Op,
        dst: RawTensor,
        srcs: &[RawTensor],
        src0_is_weight: bool,
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        let jitted = match op {
            // SAFETY: a weight's bytes are bound before preparation and no
            // step writes them (plan checker), and they live as long as the
            // runtime that holds this kernel.
            Op::MulMat if src0_is_weight => unsafe {
                return prepare_mul_mat_weights(
                    dst,
                    srcs[0],
                    srcs[1],
                    self.precision,
                    &self.repack,
                );
            },
            Op::MulMat => return prepare_mul_mat_with(dst, srcs[0], srcs[1], self.precision),
            // SAFETY: as for MulMat: a repack cache only for a weight's
            // bytes, bound before preparation and never written.
            Op::MulMatId | Op::MulMatIdPart { .. } => unsafe {
                return crate::device::cpu::ops::mul_mat_id_grouped::prepare_mul_mat_id_op(
                    op,
                    dst,
                    srcs,
                    self.precision,
                    src0_is_weight.then_some(&self.repack),
                );
            },
            Op::SoftMax { scale, max_bias } => {
                self.jit
                    .prepare_soft_max(*scale, *max_bias, dst, srcs[0], srcs.get(1).copied())
            }
            op if op.is_unary()
                || op.is_binary()
                || matches!(op, Op::Glu { .. } | Op::RmsNorm { .. } | Op::Norm { .. }) =>
            {
                self.jit.prepare_elementwise(op, dst, srcs)
            }
            _ => return prepare_op(op, dst, srcs),
        };
        match jitted {
            Err(RuntimeError::Unsupported { .. }) => prepare_op(op, dst, srcs),
            other => other,
        }
    }

    /// A kernel for one fused step, or `Unsupported`.
    pub(crate) fn fused(
        &self,
        body: &[Expr],
        out: RawTensor,
        inputs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        self.jit.prepare_fused(body, out, inputs)
    }
}

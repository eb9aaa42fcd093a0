//! Everything that can go wrong loading or running a plan. Every message
//! names what is wrong: the file, tensor, op, device or shapes.

use thiserror::Error;

/// A runtime error.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// No CPU kernel for this op with these dtypes or layouts.
    #[error("no CPU kernel for {op}: {detail}")]
    Unsupported {
        /// The op (`mul_mat`, `rope`, ...).
        op: String,
        /// What is not supported (dtypes, layouts).
        detail: String,
    },
    /// LLVM failed to set up or to compile a kernel.
    #[error("JIT: {0}")]
    Jit(String),
}

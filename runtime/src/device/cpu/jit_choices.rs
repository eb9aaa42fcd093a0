//! What the LLVM JIT's users choose and read (`cpu::jit`), shared with the
//! stand-in of a build without LLVM (`cpu/jit_off.rs`), so both offer the
//! same types.

use std::time::Duration;

/// When fused kernels write their output with non-temporal stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StreamingStores {
    /// Outputs larger than the last-level cache (the JIT's
    /// `streaming_threshold_bytes`; the rule in its module doc).
    #[default]
    Auto,
    /// Every eligible output (packed, element-aligned), whatever its size.
    Always,
    /// Never.
    Never,
}

/// Choices of a [`Jit`](crate::device::cpu::jit::Jit).
#[derive(Clone, Copy, Debug, Default)]
pub struct JitOptions {
    /// Non-temporal stores of outputs.
    pub streaming: StreamingStores,
}

/// What a [`Jit`](crate::device::cpu::jit::Jit) has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JitStats {
    /// Distinct kernels compiled.
    pub kernels_compiled: usize,
    /// Prepares served from the cache.
    pub cache_hits: usize,
    /// Total time spent generating, optimising and compiling.
    pub compile_time: Duration,
}

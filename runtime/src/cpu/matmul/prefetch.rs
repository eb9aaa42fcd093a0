//! Software prefetch ahead of a weight stream, shared by the float panel
//! tiles and the quantized lane kernel.
//!
//! Why: one core streams weights from L3 or memory no faster than its
//! outstanding misses allow, and the hardware prefetchers did not keep
//! enough of them in flight. Hints issued [`PREFETCH_AHEAD`] bytes ahead of
//! the reads did:
//! - the panel tiles' first panel, from L3 (2026-11-27, one thread): 126-137
//!   GFLOP/s before, 138-153 after;
//! - the lane kernel's matrix-vector products (2026-11-27, one thread, weights
//!   from L3): SmolLM2-135M's mul_mats 7.4-7.5 ms per token before, 6.0-6.7
//!   after (README).
//!
//! Invariant: a prefetch is a hint; it never faults, so addresses past the
//! end of a tensor are allowed (computed with `wrapping_add`).

/// How far ahead of its reads a stream is prefetched (bytes; for the panel
/// tiles 2048 and 8192 measured no better, for the lane kernel 2048-4096
/// were alike).
pub(crate) const PREFETCH_AHEAD: usize = 4096;

/// Prefetches into L1 the lines of the `step_bytes` that lie
/// [`PREFETCH_AHEAD`] bytes past `a` (a hint: it never faults, even past the
/// stream's end).
#[inline(always)]
pub(crate) fn prefetch_ahead(a: *const u8, step_bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..step_bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing and cannot fault.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PREFETCH_AHEAD + line) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (a, step_bytes);
}

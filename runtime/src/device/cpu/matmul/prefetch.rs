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
//!   after (docs/performance.md).
//!
//! The quantized matrix-vector kernels prefetch only where
//! [`stream_prefetch`] says: on Intel hosts, where it was measured to gain,
//! weights from L3 and from memory alike (2026-11-27, Xeon family 6 model
//! 207, one thread, 4096x4096 from 534 MB of copies: Q4_1 13.0 -> 15.6-16.5
//! GB/s, Q4_K 12.4-12.7 -> 15.3-16.7); not elsewhere by default, since on
//! an earlier AMD EPYC host a prefetch 2 KiB ahead of the same four streams
//! per tile lost a third of the speed (`quantized` module doc) and no AMD
//! host has been measured since. `GGPLAN_STREAM_PREFETCH=on` / `off`
//! overrides the choice, to measure a host.
//!
//! Invariant: a prefetch is a hint; it never faults, so addresses past the
//! end of a tensor are allowed (computed with `wrapping_add`). Prefetching
//! changes no value a kernel computes.

use std::sync::OnceLock;

/// Whether the quantized matrix-vector kernels prefetch their weight row
/// streams on this host (module doc), read once per process.
pub(crate) fn stream_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        choose_stream_prefetch(
            std::env::var("GGPLAN_STREAM_PREFETCH").ok().as_deref(),
            super::intel_host(),
        )
    })
}

/// The choice for `GGPLAN_STREAM_PREFETCH` (`on`, `off`, anything else or
/// unset: the host's default) on an Intel host or not.
fn choose_stream_prefetch(setting: Option<&str>, intel: bool) -> bool {
    match setting {
        Some("on") => true,
        Some("off") => false,
        _ => intel,
    }
}

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

#[cfg(test)]
mod tests {
    use super::choose_stream_prefetch;

    #[test]
    fn the_setting_overrides_the_hosts_default() {
        for intel in [false, true] {
            assert!(choose_stream_prefetch(Some("on"), intel));
            assert!(!choose_stream_prefetch(Some("off"), intel));
            assert_eq!(choose_stream_prefetch(None, intel), intel);
            assert_eq!(choose_stream_prefetch(Some("yes"), intel), intel);
        }
    }
}

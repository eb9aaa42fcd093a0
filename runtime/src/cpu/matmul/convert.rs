//! Rows of any src dtype as f32: for src0 dtypes without their own kernel and
//! for src1 that is not f32.
//!
//! Invariant: the values are exactly `kernels::quant::dequantize_row`'s (f16
//! and bf16 widen exactly; quantized rows go through that very function).

use half::{bf16, f16};
use ir::DType;

/// Writes the `out.len()` values of the row that starts at `src` (element
/// stride `nb0` bytes for plain dtypes; quantized rows are packed) as f32.
///
/// # Safety
/// `src` points to a readable row of `out.len()` values of `dtype` with that
/// stride; `dtype` is not I32 and quantized rows are whole blocks.
pub unsafe fn row_to_f32(dtype: DType, src: *const u8, nb0: usize, out: &mut [f32]) {
    let k = out.len();
    let size = dtype.block_bytes() as usize;
    if dtype.is_quantized() {
        let bytes = k / dtype.block_elems() as usize * size;
        // SAFETY: the row is `bytes` readable bytes by the caller's contract.
        let row = unsafe { std::slice::from_raw_parts(src, bytes) };
        kernels::quant::dequantize_row(dtype, row, out);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if dtype == DType::F16 && nb0 == 2 && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: f16c was detected; the row is readable by the caller's contract.
        unsafe { x86::f16_row(src, out) };
        return;
    }
    // Element x < k of the row (wrapping: only dereferenced for x < k, which
    // the caller guarantees readable).
    let at = |x: usize| src.wrapping_add(x * nb0);
    match dtype {
        DType::F32 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`; unaligned reads need no alignment.
                *o = unsafe { (at(x) as *const f32).read_unaligned() };
            }
        }
        DType::F16 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`.
                *o = f16::from_bits(unsafe { (at(x) as *const u16).read_unaligned() }).to_f32();
            }
        }
        DType::BF16 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`.
                *o = bf16::from_bits(unsafe { (at(x) as *const u16).read_unaligned() }).to_f32();
            }
        }
        other => unreachable!("row_to_f32: {other} rows are not converted (checked at prepare)"),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use std::arch::x86_64::*;

    /// Packed f16 row to f32, 8 values per instruction.
    ///
    /// # Safety
    /// `src` holds `out.len()` f16 values.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_row(src: *const u8, out: &mut [f32]) {
        let k = out.len();
        let mut x = 0;
        while x + 8 <= k {
            // SAFETY: values x..x + 8 are in the row and in `out`.
            unsafe {
                let h = _mm_loadu_si128(src.add(2 * x) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(x), _mm256_cvtph_ps(h));
            }
            x += 8;
        }
        for (x, o) in out.iter_mut().enumerate().skip(x) {
            // SAFETY: x < k.
            *o =
                f16::from_bits(unsafe { (src.add(2 * x) as *const u16).read_unaligned() }).to_f32();
        }
    }
}

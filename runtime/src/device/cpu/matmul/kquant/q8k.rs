//! Activations (src1 rows) quantized to Q8_K for the K-quant dot products.
//!
//! A row of `k` values (k a multiple of [`QK_K`] = 256) is `k / 256` blocks.
//! Per block: `max` is the first value of largest magnitude (sign kept);
//! when it is 0 the block's quants and scale are 0; otherwise `iscale =
//! -127 / max`, each quant is `round_ties_even(x * iscale)` capped at 127
//! (as ggml's Q8_K: the largest value maps to -127, so every quant lies in
//! -127..=127 and no `-128` reaches the `maddubs` products), and the scale is
//! `d = 1 / iscale`. `bsums[j]` is the sum of quants `16 j .. 16 j + 16` of
//! the block: what Q4_K's and Q5_K's minimums and Q6_K's offset of 32 need.
//!
//! Row layout ([`row_bytes`] bytes, a multiple of 64 so rows stay aligned
//! in the scratch): `qs: [i8; k]`, then `bsums: [i16; k / 16]`, then
//! `d: [f32; k / 256]`. Every block's 256 quants start at a multiple of 256
//! bytes from the row and its 16 sums at a multiple of 32.
//!
//! Invariant: for finite inputs the scalar and the AVX2 quantizers write
//! identical bytes (the same f32 operations in the same order per value;
//! `max` is found exactly), so the dot kernels can be tested alone on
//! either's output. (A NaN may make them differ; neither panics.)

use super::Isa;

/// Values per Q8_K block (and per K-quant super-block).
pub const QK_K: usize = 256;

/// Values per block sum.
pub const SUM_ELEMS: usize = 16;

/// Bytes of one quantized row of `k` values (k a multiple of 256).
pub fn row_bytes(k: usize) -> usize {
    (k + 2 * (k / SUM_ELEMS) + 4 * (k / QK_K)).next_multiple_of(64)
}

/// A quantized row, as the dot kernels read it.
#[derive(Clone, Copy, Debug)]
pub struct Q8KRow {
    /// `k` quants.
    pub qs: *const i8,
    /// `k / 16` sums of 16 quants.
    pub bsums: *const i16,
    /// `k / 256` block scales.
    pub d: *const f32,
}

impl Q8KRow {
    /// The row of `k` values stored at `base`.
    ///
    /// # Safety
    /// `base` points to [`row_bytes`]`(k)` bytes, aligned to 4.
    pub unsafe fn at(base: *const u8, k: usize) -> Q8KRow {
        // SAFETY: both offsets are inside the row by its layout.
        unsafe {
            Q8KRow {
                qs: base as *const i8,
                bsums: base.add(k) as *const i16,
                d: base.add(k + 2 * (k / SUM_ELEMS)) as *const f32,
            }
        }
    }
}

/// Quantizes `x` (a multiple of 256 values) into the row at `out`.
///
/// # Safety
/// `out` points to [`row_bytes`]`(x.len())` writable bytes aligned to 4;
/// the host supports `isa`.
pub unsafe fn quantize_row(x: &[f32], out: *mut u8, isa: Isa) {
    // SAFETY: out has row_bytes(k) bytes (caller's contract).
    let row = unsafe { Q8KRow::at(out, x.len()) };
    for (b, block) in x.chunks_exact(QK_K).enumerate() {
        // SAFETY: block b's quants, sums and scale lie inside the row; the
        // host has AVX2 when `isa` says so.
        unsafe {
            let qs = row.qs.add(b * QK_K) as *mut i8;
            let bsums = row.bsums.add(b * (QK_K / SUM_ELEMS)) as *mut i16;
            let d = match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => x86::quantize_block(block, qs, bsums),
                _ => quantize_block(block, qs, bsums),
            };
            *(row.d.add(b) as *mut f32) = d;
        }
    }
}

/// The first value of largest magnitude in `x`, sign kept (0 for all zeros).
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// One block: writes 256 quants and 16 sums, returns the scale.
///
/// # Safety
/// `qs` has 256 writable bytes, `bsums` 16 writable `i16`; `x` has 256 values.
unsafe fn quantize_block(x: &[f32], qs: *mut i8, bsums: *mut i16) -> f32 {
    let max = signed_max(x);
    if max == 0.0 {
        // SAFETY: the caller's buffers.
        unsafe {
            std::ptr::write_bytes(qs, 0, QK_K);
            std::ptr::write_bytes(bsums, 0, QK_K / SUM_ELEMS);
        }
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (j, group) in x.chunks_exact(SUM_ELEMS).enumerate() {
        let mut sum = 0i16;
        for (i, &v) in group.iter().enumerate() {
            let q = (v * iscale).round_ties_even().min(127.0) as i8;
            sum += i16::from(q);
            // SAFETY: 16 j + i < 256.
            unsafe { *qs.add(SUM_ELEMS * j + i) = q };
        }
        // SAFETY: j < 16.
        unsafe { *bsums.add(j) = sum };
    }
    1.0 / iscale
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{QK_K, SUM_ELEMS};
    use std::arch::x86_64::*;

    /// As the scalar `quantize_block`, 8 values per instruction. The signed
    /// maximum is found as the scalar loop finds it: the largest magnitude
    /// by a vector max, then the first value that has it.
    ///
    /// # Safety
    /// As the scalar `quantize_block`; the host has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_block(x: &[f32], qs: *mut i8, bsums: *mut i16) -> f32 {
        debug_assert_eq!(x.len(), QK_K);
        let p = x.as_ptr();
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for o in (0..QK_K).step_by(8) {
            // SAFETY: o + 8 <= 256 values.
            let v = unsafe { _mm256_loadu_ps(p.add(o)) };
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 {
            // SAFETY: the caller's buffers.
            unsafe {
                std::ptr::write_bytes(qs, 0, QK_K);
                std::ptr::write_bytes(bsums, 0, QK_K / SUM_ELEMS);
            }
            return 0.0;
        }
        // amax is one of the magnitudes, so a value has it.
        let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        let s = _mm256_set1_ps(iscale);
        let cap = _mm256_set1_ps(127.0);
        // packs interleave 128-bit lanes: one cross-lane permute undoes it.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for o in (0..QK_K).step_by(32) {
            // SAFETY: values o..o + 32 are inside the block.
            let q: [__m256i; 4] = std::array::from_fn(|i| unsafe {
                let v = _mm256_mul_ps(_mm256_loadu_ps(p.add(o + 8 * i)), s);
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
                _mm256_cvtps_epi32(_mm256_min_ps(r, cap))
            });
            // Three hadds and a fold leave lane i = the sum of q[i]'s 8
            // values; one more adds the pairs: lanes 0, 1 = sums 16 apart.
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
            let h = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let sums = _mm_hadd_epi32(h, h);
            let w = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let w = _mm256_permutevar8x32_epi32(w, order);
            // SAFETY: bytes o..o + 32 of the block's quants, sums o / 16 and
            // o / 16 + 1 of its 16.
            unsafe {
                _mm256_storeu_si256(qs.add(o) as *mut __m256i, w);
                *bsums.add(o / SUM_ELEMS) = _mm_cvtsi128_si32(sums) as i16;
                *bsums.add(o / SUM_ELEMS + 1) = _mm_extract_epi32::<1>(sums) as i16;
            }
        }
        1.0 / iscale
    }
}

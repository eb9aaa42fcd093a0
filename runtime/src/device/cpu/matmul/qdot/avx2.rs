//! AVX2 tiles: one 32-byte vector per block; `maddubs` (u8 x i8 pairs to i16)
//! then `madd` with ones (to 8 x i32), widened to f32 and scaled per block.
//!
//! Q8_0 weights are signed, so (as maddubs needs one unsigned operand) the
//! weights' absolute values multiply the activations carrying the weights'
//! signs; |w| <= 128 and |q| <= 127 keep each i16 pair sum below 2^15. Nibbles
//! (0..=15) are unsigned already; Q4_0's offset of 8 is taken off with the
//! activations' block sums instead.

use super::kind;
use crate::device::cpu::matmul::q8::{QK, QRow};
use std::arch::x86_64::*;

/// Bit `j` (0..8) of each byte of `planes` moved to bit 4 of that byte, by
/// a 16-bit shift (at most 4 left or 3 right, so bit 4 of each byte comes
/// from its own byte); the other bits are left for the caller to clear.
/// The 5-bit formats' fifth bits stored as bit planes (Q5_K's `qh`, the
/// repacked Q5_0 / Q5_1 groups) become the value 16 this way.
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
pub(crate) unsafe fn plane_to_bit4(planes: __m256i, j: usize) -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        match j {
            0 => _mm256_slli_epi16::<4>(planes),
            1 => _mm256_slli_epi16::<3>(planes),
            2 => _mm256_slli_epi16::<2>(planes),
            3 => _mm256_slli_epi16::<1>(planes),
            4 => planes,
            5 => _mm256_srli_epi16::<1>(planes),
            6 => _mm256_srli_epi16::<2>(planes),
            _ => _mm256_srli_epi16::<3>(planes),
        }
    }
}

/// Sum of the 8 lanes.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Every accumulator's lane sum. (Loops, not `array::map`, whose closure
/// was not inlined: a call per row cost about as much as a group of blocks.)
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn hsums<const R: usize, const C: usize>(acc: &[[__m256; C]; R]) -> [[f32; C]; R] {
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            out[r][c] = hsum(acc[r][c]);
        }
    }
    out
}

/// The f16 at `p` in all 8 lanes, looked up in `table` (every f16 as f32):
/// one load and a broadcast load, where F16C would add two shuffle-port uops
/// per block and row (they made the Q4 matrix-vector kernels compute bound).
///
/// # Safety
/// `p` has two readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn f16_splat(table: &[f32; 65536], p: *const u8) -> __m256 {
    // SAFETY: forwarded.
    let bits = unsafe { (p as *const u16).read_unaligned() };
    _mm256_broadcast_ss(&table[bits as usize])
}

/// 16 bytes of nibbles as 32 bytes: low nibbles (values 0..16), then high ones.
/// (A broadcast load and a blend rather than an insert: no shuffle-port uop.)
///
/// # Safety
/// `p` has 16 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: forwarded.
    let x = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i)) };
    let both = _mm256_blend_epi32::<0b1111_0000>(x, _mm256_srli_epi16::<4>(x));
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// `out[r][c] = dot(w[r], a[c])` over blocks `b0..nb` of format `K`, one
/// block at a time (the tail after whole groups of [`super::avx2_group`], and
/// AVX-512's odd last block).
///
/// # Safety
/// Each `w[r]` points to `nb` blocks of `K`; each `a[c]` to at least `nb`
/// blocks; the host has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_k<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [QRow; C],
    b0: usize,
    nb: usize,
) -> [[f32; C]; R] {
    let bytes = kind::block_bytes(K);
    let table = super::f16_table();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for b in b0..nb {
        // SAFETY: block b of every row is inside it (caller's contract).
        unsafe {
            let q: [__m256i; C] =
                std::array::from_fn(|c| _mm256_loadu_si256(a[c].qs.add(b * QK) as *const __m256i));
            let d1: [__m256; C] = std::array::from_fn(|c| _mm256_broadcast_ss(&*a[c].d.add(b)));
            for r in 0..R {
                let blk = w[r].add(b * bytes);
                let d0 = f16_splat(table, blk);
                match K {
                    kind::Q8_0 => {
                        let wq = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                        let wabs = _mm256_sign_epi8(wq, wq);
                        for c in 0..C {
                            let p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(q[c], wq));
                            let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                            acc[r][c] = _mm256_fmadd_ps(s, _mm256_mul_ps(d0, d1[c]), acc[r][c]);
                        }
                    }
                    kind::Q4_0 => {
                        let u = nibbles(blk.add(2));
                        for c in 0..C {
                            let s8x8 = _mm256_set1_ps(-8.0 * *a[c].s8.add(b));
                            let p = _mm256_maddubs_epi16(u, q[c]);
                            let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                            let t = _mm256_fmadd_ps(s, d1[c], s8x8);
                            acc[r][c] = _mm256_fmadd_ps(d0, t, acc[r][c]);
                        }
                    }
                    _ => {
                        let u = nibbles(blk.add(4));
                        let m0 = f16_splat(table, blk.add(2));
                        for c in 0..C {
                            let s8 = _mm256_broadcast_ss(&*a[c].s8.add(b));
                            let p = _mm256_maddubs_epi16(u, q[c]);
                            let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                            // One add on the accumulator's dependency chain.
                            let t =
                                _mm256_fmadd_ps(m0, s8, _mm256_mul_ps(s, _mm256_mul_ps(d0, d1[c])));
                            acc[r][c] = _mm256_add_ps(acc[r][c], t);
                        }
                    }
                }
            }
        }
    }
    hsums(&acc)
}

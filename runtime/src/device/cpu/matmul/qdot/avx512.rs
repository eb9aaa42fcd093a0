//! AVX-512 tiles: two blocks per 64-byte vector (lanes 0..8 of the i32/f32
//! vectors belong to block b, lanes 8..16 to block b + 1, each half scaled by
//! its own block's scales). An odd last block goes to the AVX2 kernel.
//!
//! Integer products as in AVX2 (u8 x i8 with the weights' signs moved onto the
//! activations for Q8_0, via a mask since AVX-512 has no `vpsignb`), summed by
//! `vpdpbusd` when the host has VNNI, else by `maddubs` + `madd`.
//!
//! This project's machine lacks AVX-512: the tests run this path only where
//! the CPU has it. On a Xeon with AVX-512 VNNI (the device machine) every
//! tile shape at 1..128 blocks and whole kernels (1 and 3 threads) matched
//! the scalar kernels, with VNNI and without.

use super::avx2;
use super::kind;
use crate::device::cpu::matmul::q8::{QK, QRow};
use std::arch::x86_64::*;

/// `[x; 8] ++ [y; 8]` from two f32 at `p` and `p + 1`.
///
/// # Safety
/// `p` has two readable f32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pair_f32(p: *const f32) -> __m512 {
    // SAFETY: forwarded.
    let (x, y) = unsafe { (_mm256_broadcast_ss(&*p), _mm256_broadcast_ss(&*p.add(1))) };
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castpd256_pd512(_mm256_castps_pd(x)),
        _mm256_castps_pd(y),
    ))
}

/// `[x; 8] ++ [y; 8]` from the f16 at `p` and at `q`.
///
/// # Safety
/// Both have two readable bytes.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pair_f16(p: *const u8, q: *const u8) -> __m512 {
    // SAFETY: forwarded.
    let (x, y) = unsafe {
        (
            (p as *const i16).read_unaligned(),
            (q as *const i16).read_unaligned(),
        )
    };
    _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(y), _mm_set1_epi16(x)))
}

/// 32 bytes (two blocks' quants, at `p` and `q`) as one vector.
///
/// # Safety
/// Both have 32 readable bytes.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pair_bytes(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: forwarded.
    let (x, y) = unsafe {
        (
            _mm256_loadu_si256(p as *const __m256i),
            _mm256_loadu_si256(q as *const __m256i),
        )
    };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), y)
}

/// Two blocks of nibbles (16 bytes at `p` and `q`) as 64 values 0..16 in
/// block order: low nibbles of p, high of p, low of q, high of q.
///
/// # Safety
/// Both have 16 readable bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn pair_nibbles(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: forwarded.
    let (x, y) = unsafe {
        (
            _mm_loadu_si128(p as *const __m128i),
            _mm_loadu_si128(q as *const __m128i),
        )
    };
    let both = _mm256_set_m128i(y, x);
    let mask = _mm256_set1_epi8(0x0F);
    let lo = _mm256_and_si256(both, mask);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(both), mask);
    // [lo_p, lo_q, hi_p, hi_q] -> [lo_p, hi_p, lo_q, hi_q] (128-bit lanes).
    let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    _mm512_shuffle_i64x2::<0b11_01_10_00>(z, z)
}

/// Sums of 4 adjacent u8 x i8 products, as 16 x f32 (VNNI).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn dot4_vnni(u: __m512i, s: __m512i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s))
}

/// Sums of 4 adjacent u8 x i8 products, as 16 x f32 (no VNNI: pairs to i16,
/// then pairs of those to i32; the i16 sums cannot saturate, see `avx2`).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn dot4_bw(u: __m512i, s: __m512i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_madd_epi16(
        _mm512_maddubs_epi16(u, s),
        _mm512_set1_epi16(1),
    ))
}

/// Sum of the 16 lanes.
#[target_feature(enable = "avx512f")]
#[inline]
fn hsum(v: __m512) -> f32 {
    _mm512_reduce_add_ps(v)
}

/// `out[r][c] = dot(w[r], a[c])` over `nb` blocks of format `kind`.
///
/// # Safety
/// As `avx2::tile_k` over all `nb` blocks; the host has AVX-512 F and BW (and VNNI when `vnni`)
/// besides AVX2, FMA and F16C.
pub(super) unsafe fn tile<const R: usize, const C: usize>(
    vnni: bool,
    kind: u8,
    w: [*const u8; R],
    a: [QRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    // SAFETY: forwarded; the features match each variant.
    unsafe {
        match (kind, vnni) {
            (kind::Q8_0, true) => tile_vnni::<{ kind::Q8_0 }, R, C>(w, a, nb),
            (kind::Q4_0, true) => tile_vnni::<{ kind::Q4_0 }, R, C>(w, a, nb),
            (_, true) => tile_vnni::<{ kind::Q4_1 }, R, C>(w, a, nb),
            (kind::Q8_0, false) => tile_bw::<{ kind::Q8_0 }, R, C>(w, a, nb),
            (kind::Q4_0, false) => tile_bw::<{ kind::Q4_0 }, R, C>(w, a, nb),
            _ => tile_bw::<{ kind::Q4_1 }, R, C>(w, a, nb),
        }
    }
}

/// The kernel for one weight format, compiled once per feature set (so the
/// variant without VNNI never contains a VNNI instruction).
macro_rules! tile_kernel {
    ($name:ident, $features:literal, $dot4:ident) => {
        /// [`tile`] for one weight format.
        ///
        /// # Safety
        /// As [`tile`], with the features named here.
        #[target_feature(enable = $features)]
        unsafe fn $name<const K: u8, const R: usize, const C: usize>(
            w: [*const u8; R],
            a: [QRow; C],
            nb: usize,
        ) -> [[f32; C]; R] {
            let bytes = kind::block_bytes(K);
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            let pairs = nb / 2;
            for p in 0..pairs {
                let b = 2 * p;
                // SAFETY: blocks b and b + 1 of every row are inside it.
                unsafe {
                    let q: [__m512i; C] = std::array::from_fn(|c| {
                        _mm512_loadu_si512(a[c].qs.add(b * QK) as *const __m512i)
                    });
                    let d1: [__m512; C] = std::array::from_fn(|c| pair_f32(a[c].d.add(b)));
                    for r in 0..R {
                        let (x, y) = (w[r].add(b * bytes), w[r].add((b + 1) * bytes));
                        let d0 = pair_f16(x, y);
                        match K {
                            kind::Q8_0 => {
                                let wq = pair_bytes(x.add(2), y.add(2));
                                let neg = _mm512_movepi8_mask(wq);
                                let wabs = _mm512_abs_epi8(wq);
                                for c in 0..C {
                                    let qs = _mm512_mask_sub_epi8(
                                        q[c],
                                        neg,
                                        _mm512_setzero_si512(),
                                        q[c],
                                    );
                                    let s = $dot4(wabs, qs);
                                    acc[r][c] =
                                        _mm512_fmadd_ps(s, _mm512_mul_ps(d0, d1[c]), acc[r][c]);
                                }
                            }
                            kind::Q4_0 => {
                                let u = pair_nibbles(x.add(2), y.add(2));
                                for c in 0..C {
                                    let s8x8 = _mm512_mul_ps(
                                        pair_f32(a[c].s8.add(b)),
                                        _mm512_set1_ps(-8.0),
                                    );
                                    let t = _mm512_fmadd_ps($dot4(u, q[c]), d1[c], s8x8);
                                    acc[r][c] = _mm512_fmadd_ps(d0, t, acc[r][c]);
                                }
                            }
                            _ => {
                                let u = pair_nibbles(x.add(4), y.add(4));
                                let m0 = pair_f16(x.add(2), y.add(2));
                                for c in 0..C {
                                    let s8 = pair_f32(a[c].s8.add(b));
                                    let t = _mm512_fmadd_ps(
                                        $dot4(u, q[c]),
                                        _mm512_mul_ps(d0, d1[c]),
                                        acc[r][c],
                                    );
                                    acc[r][c] = _mm512_fmadd_ps(m0, s8, t);
                                }
                            }
                        }
                    }
                }
            }
            let mut out = acc.map(|row| row.map(|v| hsum(v)));
            if nb % 2 == 1 {
                // SAFETY: the last block is inside every row; the host has AVX2.
                let last = unsafe { avx2::tile_k::<K, R, C>(w, a, nb - 1, nb) };
                for (o, l) in out.iter_mut().flatten().zip(last.iter().flatten()) {
                    *o += l;
                }
            }
            out
        }
    };
}

tile_kernel!(
    tile_vnni,
    "avx512f,avx512bw,avx512vnni,avx2,fma,f16c",
    dot4_vnni
);
tile_kernel!(tile_bw, "avx512f,avx512bw,avx2,fma,f16c", dot4_bw);

//! AVX2 tiles over groups of 8 blocks: the integer sums of 8 blocks are
//! reduced into one vector (lane j = block b + j) before any float work, so
//! the conversion and the scaling cost one instruction per 8 blocks rather
//! than one per block.
//!
//! Each 32-byte weight vector holds two blocks, `b + i` (low 128 bits) and
//! `b + 4 + i` (high), i in 0..4: for Q4, the 16 nibble bytes of each, whose
//! low nibbles are matched with the activations' regrouped quants `qp`
//! ([`crate::device::cpu::matmul::q8`]) and high nibbles likewise; the two `maddubs`
//! results of a pair are added as i16 (each lane at most 2 * 2 * 15 * 127 =
//! 7620). Q8_0 weights come as the low halves and the high halves of the two
//! blocks (the signs moved onto the activations as in [`super::avx2`]); their
//! i16 lanes reach 2 * 128 * 127, so each half is widened alone. Three
//! `hadd`s then leave lane j = block b + j (low lane of hadd's output halves
//! keeps blocks b..b+4, the high b+4..b+8), matching the contiguous f32
//! scales of the activations; the weights' f16 scales of 8 blocks are
//! gathered with 8 scalar loads and converted by F16C.
//!
//! A last partial group of `4 <= t < 8` blocks runs the same code with the
//! missing blocks' weights and scales zero and the activations' scales
//! loaded under a mask (nothing past a row is read); a shorter tail goes to
//! [`super::avx2::tile_k`], one block at a time.

use super::avx2::{hsum, tile_k};
use super::kind;
use crate::device::cpu::matmul::q8::{GROUP, QK, QRow};
use std::arch::x86_64::*;

/// Scales of blocks `b..b + t` of one weight row: (d, m) as f32 in block
/// order, zero past `t` (m is garbage for Q8_0 and Q4_0, which ignore it).
///
/// # Safety
/// `row` points to at least `b + t` blocks of `bytes` bytes (each at least 4).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales(row: *const u8, b: usize, t: usize, bytes: usize) -> (__m256, __m256) {
    let dm = |j: usize| {
        if j < t {
            // SAFETY: the first 4 bytes of block b + j (d, then m or quants).
            unsafe { (row.add((b + j) * bytes) as *const i32).read_unaligned() }
        } else {
            0
        }
    };
    // f16 pairs (d, m) of blocks 0, 1, 4, 5 and of 2, 3, 6, 7: after the
    // conversion, one shuffle per output picks d (or m) in block order.
    let x = _mm256_cvtph_ps(_mm_setr_epi32(dm(0), dm(1), dm(4), dm(5)));
    let y = _mm256_cvtph_ps(_mm_setr_epi32(dm(2), dm(3), dm(6), dm(7)));
    (
        _mm256_shuffle_ps::<0b10_00_10_00>(x, y),
        _mm256_shuffle_ps::<0b11_01_11_01>(x, y),
    )
}

/// 16 bytes at `p` (low 128 bits, zero unless `lo`) and at `q` (high,
/// zero unless `hi`).
///
/// # Safety
/// Each pointer whose flag is set has 16 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn two_halves(p: *const u8, q: *const u8, lo: bool, hi: bool) -> __m256i {
    // SAFETY: only the flagged pointers are read.
    unsafe {
        let x = if lo {
            _mm_loadu_si128(p as *const __m128i)
        } else {
            _mm_setzero_si128()
        };
        let y = if hi {
            _mm_loadu_si128(q as *const __m128i)
        } else {
            _mm_setzero_si128()
        };
        _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(x), y)
    }
}

/// `out[r][c] = dot(w[r], a[c])` over `nb` blocks of format `K`.
///
/// # Safety
/// Each `w[r]` points to `nb` blocks of `K`; each `a[c]` to a quantized row
/// of exactly `nb` blocks; the host has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [QRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for g in 0..nb / GROUP {
        // SAFETY: forwarded; a whole group.
        unsafe { group::<K, R, C, true>(w, a, g * GROUP, GROUP, &mut acc) };
    }
    let b = nb / GROUP * GROUP;
    let mut out = [[0f32; C]; R];
    if nb - b >= GROUP / 2 {
        // SAFETY: forwarded; blocks b..nb exist.
        unsafe { group::<K, R, C, false>(w, a, b, nb - b, &mut acc) };
    } else if b < nb {
        // A short tail costs less one block at a time than as a whole group.
        // SAFETY: forwarded.
        out = unsafe { tile_k::<K, R, C>(w, a, b, nb) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r][c] += hsum(acc[r][c]);
        }
    }
    out
}

/// Adds blocks `b..b + t` (t = 8 when `FULL`) to `acc` (lane j: block b + j).
///
/// # Safety
/// As [`tile`], with `b + t <= nb`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group<const K: u8, const R: usize, const C: usize, const FULL: bool>(
    w: [*const u8; R],
    a: [QRow; C],
    b: usize,
    t: usize,
    acc: &mut [[__m256; C]; R],
) {
    let bytes = kind::block_bytes(K);
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let has = |j: usize| FULL || j < t;
    {
        // SAFETY: only blocks b + j with has(j) are read from the weights and
        // the activations' scales; the regrouped quants span whole groups.
        unsafe {
            let mask = _mm256_cmpgt_epi32(
                _mm256_set1_epi32(t as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            let load = |p: *const f32| {
                if FULL {
                    _mm256_loadu_ps(p)
                } else {
                    _mm256_maskload_ps(p, mask)
                }
            };
            let d1: [__m256; C] = std::array::from_fn(|c| load(a[c].d.add(b)));
            // Q4_0: 64 s8 = 8 d1 sum(q); Q4_1: 8 s8 = d1 sum(q).
            let f = if K == kind::Q4_0 { 64.0 } else { 8.0 };
            let s: [__m256; C] =
                std::array::from_fn(|c| _mm256_mul_ps(load(a[c].s8.add(b)), _mm256_set1_ps(f)));
            for r in 0..R {
                let (dw, mw) = scales(w[r], b, t, bytes);
                let blk = |j: usize| w[r].wrapping_add((b + j) * bytes);
                // Per pair i: (vector for the low halves, for the high halves).
                let wv: [(__m256i, __m256i); 4] = std::array::from_fn(|i| {
                    let (p, q, hp, hq) = (blk(i), blk(i + 4), has(i), has(i + 4));
                    if K == kind::Q8_0 {
                        (
                            two_halves(p.wrapping_add(2), q.wrapping_add(2), hp, hq),
                            two_halves(
                                p.wrapping_add(2 + QK / 2),
                                q.wrapping_add(2 + QK / 2),
                                hp,
                                hq,
                            ),
                        )
                    } else {
                        let o = if K == kind::Q4_0 { 2 } else { 4 };
                        let v = two_halves(p.wrapping_add(o), q.wrapping_add(o), hp, hq);
                        (
                            _mm256_and_si256(v, low),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                        )
                    }
                });
                for c in 0..C {
                    let qp = a[c].qp.add(b * QK);
                    let m: [__m256i; 4] = std::array::from_fn(|i| {
                        let ql = _mm256_loadu_si256(qp.add(64 * i) as *const __m256i);
                        let qh = _mm256_loadu_si256(qp.add(64 * i + 32) as *const __m256i);
                        let (wl, wh) = wv[i];
                        if K == kind::Q8_0 {
                            let pl = _mm256_maddubs_epi16(
                                _mm256_sign_epi8(wl, wl),
                                _mm256_sign_epi8(ql, wl),
                            );
                            let ph = _mm256_maddubs_epi16(
                                _mm256_sign_epi8(wh, wh),
                                _mm256_sign_epi8(qh, wh),
                            );
                            _mm256_add_epi32(
                                _mm256_madd_epi16(pl, ones),
                                _mm256_madd_epi16(ph, ones),
                            )
                        } else {
                            let p = _mm256_add_epi16(
                                _mm256_maddubs_epi16(wl, ql),
                                _mm256_maddubs_epi16(wh, qh),
                            );
                            _mm256_madd_epi16(p, ones)
                        }
                    });
                    let h = _mm256_hadd_epi32(
                        _mm256_hadd_epi32(m[0], m[1]),
                        _mm256_hadd_epi32(m[2], m[3]),
                    );
                    let sum = _mm256_cvtepi32_ps(h);
                    acc[r][c] = match K {
                        kind::Q8_0 => _mm256_fmadd_ps(sum, _mm256_mul_ps(dw, d1[c]), acc[r][c]),
                        kind::Q4_0 => {
                            _mm256_fmadd_ps(dw, _mm256_fmsub_ps(sum, d1[c], s[c]), acc[r][c])
                        }
                        _ => _mm256_fmadd_ps(
                            sum,
                            _mm256_mul_ps(dw, d1[c]),
                            _mm256_fmadd_ps(mw, s[c], acc[r][c]),
                        ),
                    };
                }
            }
        }
    }
}

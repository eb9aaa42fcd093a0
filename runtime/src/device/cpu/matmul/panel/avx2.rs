//! AVX2 + FMA (+ F16C for f16 panels) micro-kernel: a tile of 16 weight rows (two vectors) x up to 6
//! activation columns, 12 accumulators held in registers over the depth.

use super::{Matvec4, NextPanel, Tile};
use crate::device::cpu::matmul::prefetch::prefetch_ahead;
use std::arch::x86_64::*;

/// Weight rows per tile.
const MR: usize = 16;
/// Activation block width.
const NR: usize = 6;

/// One depth step of a panel: its 16 rows as two vectors (f16 widened).
///
/// # Safety
/// `a` holds 16 values of the panel's type, 32-byte aligned.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load_rows<const F16: bool>(a: *const u8) -> (__m256, __m256) {
    // SAFETY: forwarded.
    unsafe {
        if F16 {
            let h = a as *const __m128i;
            (
                _mm256_cvtph_ps(_mm_load_si128(h)),
                _mm256_cvtph_ps(_mm_load_si128(h.add(1))),
            )
        } else {
            let f = a as *const f32;
            (_mm256_load_ps(f), _mm256_load_ps(f.add(8)))
        }
    }
}

/// Lanes `0..n` set (`n <= 8`, clamped), as a maskload/maskstore mask.
#[target_feature(enable = "avx2")]
fn lanes(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n.min(8) as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// One tile of `N` columns (module doc); `F16`: the panel holds f16 values.
///
/// # Safety
/// As [`super::run_tile`], for this host with AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_n<const N: usize, const F16: bool>(t: &Tile) {
    let whole = t.rows == MR;
    let (lo, hi) = (lanes(t.rows), lanes(t.rows.saturating_sub(8)));
    let mut x = [_mm256_setzero_ps(); N];
    let mut y = [_mm256_setzero_ps(); N];
    if t.load {
        for j in 0..N {
            // SAFETY: the tile's rows of column j are readable dst; masked
            // lanes are not touched (wrapping: the pointer may pass the end).
            unsafe {
                let (p, q) = (t.dst[j], t.dst[j].wrapping_add(8));
                if whole {
                    x[j] = _mm256_loadu_ps(p);
                    y[j] = _mm256_loadu_ps(q);
                } else {
                    x[j] = _mm256_maskload_ps(p, lo);
                    y[j] = _mm256_maskload_ps(q, hi);
                }
            }
        }
    }
    let (mut a, mut b) = (t.a, t.b);
    let mut next = NextPanel::new(t);
    for _ in 0..t.depth {
        next.step();
        // SAFETY: the panel holds MR values per depth step, 32-byte aligned;
        // the column block NR per step, of which the first N are set.
        unsafe {
            if t.prefetch {
                prefetch_ahead(a, MR * if F16 { 2 } else { 4 });
            }
            let (a0, a1) = load_rows::<F16>(a);
            for j in 0..N {
                let s = _mm256_broadcast_ss(&*b.add(j));
                x[j] = _mm256_fmadd_ps(a0, s, x[j]);
                y[j] = _mm256_fmadd_ps(a1, s, y[j]);
            }
            a = a.add(MR * if F16 { 2 } else { 4 });
            b = b.add(NR);
        }
    }
    for j in 0..N {
        // SAFETY: as the loads.
        unsafe {
            let (p, q) = (t.dst[j], t.dst[j].wrapping_add(8));
            if whole {
                _mm256_storeu_ps(p, x[j]);
                _mm256_storeu_ps(q, y[j]);
            } else {
                _mm256_maskstore_ps(p, lo, x[j]);
                _mm256_maskstore_ps(q, hi, y[j]);
            }
        }
    }
}

/// [`Matvec4`]: four panels, one column, eight accumulators.
///
/// # Safety
/// As [`super::run_matvec4`], for this host with AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec4<const F16: bool>(t: &Matvec4) {
    let whole = t.rows.map(|r| r == MR);
    let masks = t.rows.map(|r| (lanes(r), lanes(r.saturating_sub(8))));
    let mut x = [_mm256_setzero_ps(); 4];
    let mut y = [_mm256_setzero_ps(); 4];
    if t.load {
        for p in 0..4 {
            // SAFETY: as in tile_n.
            unsafe {
                let (d0, d1) = (t.dst[p], t.dst[p].wrapping_add(8));
                if whole[p] {
                    x[p] = _mm256_loadu_ps(d0);
                    y[p] = _mm256_loadu_ps(d1);
                } else {
                    x[p] = _mm256_maskload_ps(d0, masks[p].0);
                    y[p] = _mm256_maskload_ps(d1, masks[p].1);
                }
            }
        }
    }
    let step = MR * if F16 { 2 } else { 4 };
    for kk in 0..t.depth {
        // SAFETY: each panel holds MR values per depth step, 32-byte aligned;
        // the column block NR f32 per step.
        unsafe {
            let s = _mm256_broadcast_ss(&*t.b.add(kk * NR));
            for p in 0..4 {
                let (a0, a1) = load_rows::<F16>(t.a[p].add(kk * step));
                x[p] = _mm256_fmadd_ps(a0, s, x[p]);
                y[p] = _mm256_fmadd_ps(a1, s, y[p]);
            }
        }
    }
    for p in 0..4 {
        // SAFETY: as the loads.
        unsafe {
            let (d0, d1) = (t.dst[p], t.dst[p].wrapping_add(8));
            if whole[p] {
                _mm256_storeu_ps(d0, x[p]);
                _mm256_storeu_ps(d1, y[p]);
            } else {
                _mm256_maskstore_ps(d0, masks[p].0, x[p]);
                _mm256_maskstore_ps(d1, masks[p].1, y[p]);
            }
        }
    }
}

/// [`tile_n`] for `t.cols` columns; `F16`: the panel holds f16 values.
///
/// # Safety
/// As [`super::run_tile`], for this host with AVX2 and FMA.
pub unsafe fn tile<const F16: bool>(t: &Tile) {
    // SAFETY: forwarded.
    unsafe {
        match t.cols {
            1 => tile_n::<1, F16>(t),
            2 => tile_n::<2, F16>(t),
            3 => tile_n::<3, F16>(t),
            4 => tile_n::<4, F16>(t),
            5 => tile_n::<5, F16>(t),
            _ => tile_n::<6, F16>(t),
        }
    }
}

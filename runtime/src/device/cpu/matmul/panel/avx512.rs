//! AVX-512F micro-kernels: a tile of 32 weight rows (two vectors) x up to 14
//! activation columns, 28 accumulators held in registers over the depth; and
//! one column against four panels ([`matvec4`]).

use super::{Matvec4, NextPanel, Tile};
use crate::device::cpu::matmul::prefetch::prefetch_ahead;
use std::arch::x86_64::*;

/// Weight rows per tile.
const MR: usize = 32;
/// Activation block width.
const NR: usize = 14;

/// One depth step of a panel: its 32 rows as two vectors (f16 widened).
///
/// # Safety
/// `a` holds 32 values of the panel's type, 32-byte aligned.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_rows<const F16: bool>(a: *const u8) -> (__m512, __m512) {
    // SAFETY: forwarded.
    unsafe {
        if F16 {
            let h = a as *const __m256i;
            (
                _mm512_cvtph_ps(_mm256_load_si256(h)),
                _mm512_cvtph_ps(_mm256_load_si256(h.add(1))),
            )
        } else {
            let f = a as *const f32;
            (_mm512_load_ps(f), _mm512_load_ps(f.add(16)))
        }
    }
}

/// Lanes `0..n` set (`n <= 16`).
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// One tile of `N` columns (module doc); `F16`: the panel holds f16 values.
///
/// # Safety
/// As [`super::run_tile`], for this host with AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn tile_n<const N: usize, const F16: bool>(t: &Tile) {
    let (lo, hi) = (lanes(t.rows.min(16)), lanes(t.rows.saturating_sub(16)));
    let mut x = [_mm512_setzero_ps(); N];
    let mut y = [_mm512_setzero_ps(); N];
    if t.load {
        for j in 0..N {
            // SAFETY: the tile's rows of column j are readable dst; masked
            // lanes are not touched (wrapping: the pointer may pass the end).
            unsafe {
                x[j] = _mm512_maskz_loadu_ps(lo, t.dst[j]);
                y[j] = _mm512_maskz_loadu_ps(hi, t.dst[j].wrapping_add(16));
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
                let s = _mm512_set1_ps(*b.add(j));
                x[j] = _mm512_fmadd_ps(a0, s, x[j]);
                y[j] = _mm512_fmadd_ps(a1, s, y[j]);
            }
            a = a.add(MR * if F16 { 2 } else { 4 });
            b = b.add(NR);
        }
    }
    for j in 0..N {
        // SAFETY: as the loads.
        unsafe {
            _mm512_mask_storeu_ps(t.dst[j], lo, x[j]);
            _mm512_mask_storeu_ps(t.dst[j].wrapping_add(16), hi, y[j]);
        }
    }
}

/// [`Matvec4`]: four panels, one column, eight accumulators.
///
/// # Safety
/// As [`super::run_matvec4`], for this host with AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn matvec4_body<const F16: bool>(t: &Matvec4) {
    let masks: [(__mmask16, __mmask16); 4] = t
        .rows
        .map(|r| (lanes(r.min(16)), lanes(r.saturating_sub(16))));
    let mut x = [_mm512_setzero_ps(); 4];
    let mut y = [_mm512_setzero_ps(); 4];
    if t.load {
        for p in 0..4 {
            // SAFETY: as in tile_n.
            unsafe {
                x[p] = _mm512_maskz_loadu_ps(masks[p].0, t.dst[p]);
                y[p] = _mm512_maskz_loadu_ps(masks[p].1, t.dst[p].wrapping_add(16));
            }
        }
    }
    let step = MR * if F16 { 2 } else { 4 };
    for kk in 0..t.depth {
        // SAFETY: each panel holds MR values per depth step, 32-byte aligned;
        // the column block NR f32 per step.
        unsafe {
            let s = _mm512_set1_ps(*t.b.add(kk * NR));
            for p in 0..4 {
                let (a0, a1) = load_rows::<F16>(t.a[p].add(kk * step));
                x[p] = _mm512_fmadd_ps(a0, s, x[p]);
                y[p] = _mm512_fmadd_ps(a1, s, y[p]);
            }
        }
    }
    for p in 0..4 {
        // SAFETY: as the loads.
        unsafe {
            _mm512_mask_storeu_ps(t.dst[p], masks[p].0, x[p]);
            _mm512_mask_storeu_ps(t.dst[p].wrapping_add(16), masks[p].1, y[p]);
        }
    }
}

/// [`matvec4_body`], then zmm16-31 cleared (see [`tile`]).
///
/// # Safety
/// As [`super::run_matvec4`], for this host with AVX-512F.
pub unsafe fn matvec4<const F16: bool>(t: &Matvec4) {
    // SAFETY: forwarded.
    unsafe { matvec4_body::<F16>(t) };
    clear_upper_registers();
}

/// [`tile_n`] for `t.cols` columns; `F16`: the panel holds f16 values.
///
/// # Safety
/// As [`super::run_tile`], for this host with AVX-512F.
pub unsafe fn tile<const F16: bool>(t: &Tile) {
    // SAFETY: forwarded.
    unsafe { dispatch::<F16>(t) };
    clear_upper_registers();
}

/// Zeroes zmm16-zmm31, which the tiles use and `vzeroupper` leaves alone.
/// Left dirty, they slowed this thread's later 256-bit EVEX code (the VNNI
/// lane kernel of `qdot`) by about a quarter on this project's Zen 4 host.
fn clear_upper_registers() {
    // SAFETY: only vector registers the asm block declares are written.
    unsafe {
        std::arch::asm!(
            "vpxord zmm16, zmm16, zmm16",
            "vpxord zmm17, zmm17, zmm17",
            "vpxord zmm18, zmm18, zmm18",
            "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20",
            "vpxord zmm21, zmm21, zmm21",
            "vpxord zmm22, zmm22, zmm22",
            "vpxord zmm23, zmm23, zmm23",
            "vpxord zmm24, zmm24, zmm24",
            "vpxord zmm25, zmm25, zmm25",
            "vpxord zmm26, zmm26, zmm26",
            "vpxord zmm27, zmm27, zmm27",
            "vpxord zmm28, zmm28, zmm28",
            "vpxord zmm29, zmm29, zmm29",
            "vpxord zmm30, zmm30, zmm30",
            "vpxord zmm31, zmm31, zmm31",
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            options(nomem, nostack, preserves_flags),
        );
    }
}

/// [`tile_n`] for `t.cols` columns.
///
/// # Safety
/// As [`tile`].
unsafe fn dispatch<const F16: bool>(t: &Tile) {
    // SAFETY: forwarded.
    unsafe {
        match t.cols {
            1 => tile_n::<1, F16>(t),
            2 => tile_n::<2, F16>(t),
            3 => tile_n::<3, F16>(t),
            4 => tile_n::<4, F16>(t),
            5 => tile_n::<5, F16>(t),
            6 => tile_n::<6, F16>(t),
            7 => tile_n::<7, F16>(t),
            8 => tile_n::<8, F16>(t),
            9 => tile_n::<9, F16>(t),
            10 => tile_n::<10, F16>(t),
            11 => tile_n::<11, F16>(t),
            12 => tile_n::<12, F16>(t),
            13 => tile_n::<13, F16>(t),
            _ => tile_n::<14, F16>(t),
        }
    }
}

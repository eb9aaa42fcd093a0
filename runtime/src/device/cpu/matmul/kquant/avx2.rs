//! AVX2 (+FMA) tiles of K-quant weight rows x Q8_K activation rows, and the
//! same code with AVX512-VNNI's 256-bit `vpdpbusd` ([`tile_vnni`]) or
//! AVX-VNNI's VEX-encoded one ([`tile_avx_vnni`], rows not interleaved).
//! Weights are repacked at load and activations permuted alike
//! ([`super::repack`]): 32-bit lane `g` of every vector belongs to sub-block
//! `g` (Q6_K: `g + 8 (v / 4)` in vector `v`).
//!
//! Per super-block and weight row, the quants are unpacked once into 8
//! vectors of 32 unsigned values (Q4_K 0..=15, Q5_K 0..=31, Q6_K 0..=63);
//! then, per activation column:
//! - with VNNI, one `vpdpbusd` per vector adds each lane's 4 byte products
//!   to the lane's raw sum, and after the block one `vpmulld` by the 8 (Q6_K:
//!   twice 8) sub-block scales, as i32, scales them (bounds at the multiply);
//! - plain AVX2: `maddubs` (u8 x i8 pairs to i16; at most 2 * 63 * 127 =
//!   16002, so never saturated) and `madd` with one vector holding each
//!   sub-block's scale under its lane's two i16 lanes, added in i32.
//!
//! Both give the same exact integer per lane, so every set computes the
//! same bits (tested). The minimums of Q4_K / Q5_K are one more `madd` of
//! the activations' sums of 16 with the mins (each min twice, for the two
//! sums of its sub-block); Q6_K's offset of 32 is `32 sum_s sc_s bsums_s`,
//! one `madd` and a shift, subtracted in i32. Each block then costs one or
//! two conversions and two or three f32 instructions per output. Q4_K /
//! Q5_K scales and mins are unpacked from their 12 bytes in vector registers
//! ([`scales_mins`]); the f16 super-block scales come from the f16 table
//! (one load and a broadcast each, as in `qdot::avx2`).
//!
//! Why repacked (2026-11-27, 2-core Xeon, family 6 model 207,
//! `benches/matmul.rs -- ffn_down`, GB/s of weights, alternating runs):
//! in the stored order each vector was one sub-block, so each took a
//! `pshufb` to spread its scale and a `maddubs` + `vpdpwssd` pair; the
//! matrix-vector tiles were then bound by their instruction count, Q4_K at
//! 21.0-22.4 GB/s on one thread with the weights in L2, against Q4_1's lane
//! kernel at 42-44. Repacked: Q4_K 26.2-27.0, Q6_K 22.3-22.4 (from
//! 20.5-20.6). The copies also live in the repacked weights' huge-page
//! slab, where the stored tensors sat on 4 KiB pages: that alone moved Q4_1
//! on two threads from 31.9 to 39.1 GB/s (forced to 4 KiB pages with
//! `GGPLAN_HUGE_PAGES=0`). SmolLM2's `ffn_down` (1536 x 576) on two threads,
//! 96 MB of copies (L3): Q4_K 34.7-35.7 -> 44.0-44.4, Q6_K 33.3-34.4 ->
//! 38.6-39.0, Q4_1 43.4-48.7 in the same runs. Prefill (N = 128, one
//! thread, GFLOP/s): Q4_K K=4096 124.6-127.9 -> 140.2-145.5, K=1536
//! 106.7-113.4 -> 118.1-120.4; Q6_K 112.4-112.9 -> 121.3-122.0.
//!
//! Rows one after another, or interleaved: with VNNI (whose AVX-512 VL
//! encoding gives 32 vector registers) tiles of at most [`INTERLEAVE`]
//! outputs run their rows sub-block by sub-block, so the unpacking chains
//! of several rows are in flight at once. A matrix-vector tile (4 x 1) is
//! bound by those chains, not by the instruction count: interleaved, it
//! went from 6.0 to 4.6 ns per Q4_K super-block (6.4 from 8.1 for Q6_K,
//! 6.8 from 7.2 for Q5_K); with AVX2's 16 registers interleaving spilled
//! and lost. Software prefetch of the weights 2 to 8 blocks ahead did not
//! help either way.
//!
//! Measured before the repacking (one thread, 2-core Zen 4, weights in L2,
//! ns per super-block and column, 2026-11-25): 1 x 8 tiles run Q4_K / Q5_K / Q6_K at 3.4 /
//! 3.7 / 3.7 (VNNI 2.9 / 3.1 / 3.1); 4 x 1 at 6.2 / 7.6 / 8.2 (VNNI
//! interleaved 4.6 / 6.8 / 6.4).
//!
//! Tried and not kept (2026-11-26, 2-core Xeon, family 6 model 207, weights
//! from memory, `benches/matmul.rs`, each set forced in turn twice): Q4_K
//! and Q5_K rows repacked at load so that one 64-byte load holds four whole
//! sub-blocks, run by 512-bit `maddubs` + `vpdpwssd` (four of each per
//! super-block where the tiles of then took eight; Q5_K's fifth bits as byte masks
//! for a masked `vpaddb`). 4096² matvec, one / two threads: Q4_K 12.0-12.4
//! / 25.7-29.0 GB/s against 12.4-13.7 / 36.9-45.0 for the 256-bit tiles of
//! then (before the repacking above), Q5_K 12.9-15.5 /
//! 31.2-35.7 against 11.3-11.5 / 30.4-33.2; prefill K=1536 M=576 N=128
//! Q4_K 69 against 111 GFLOP/s. Fewer instructions did not make up for the
//! 512-bit integer ports (on this core `vpdpwssd` on 512 bits issues at
//! half the 256-bit rate, as far as these figures show; not checked with
//! counters, which this VM does not expose).
//!
//! Every function but the entry points [`tile`], [`tile_vnni`] and
//! [`tile_avx_vnni`] is `#[inline(always)]` without target features of its
//! own: it is compiled into them, whose features cover every intrinsic it
//! calls.

use super::kind;
use super::q8k::{Q8KRow, QK_K, SUM_ELEMS};
use crate::device::cpu::matmul::prefetch::{prefetch_ahead, stream_prefetch};
use crate::device::cpu::matmul::qdot::{f16_table, plane_to_bit4};
use std::arch::x86_64::*;

/// `madd` + `add` (plain AVX2).
const PLAIN: u8 = 0;
/// AVX512-VNNI's `vpdpwssd` on 256-bit vectors (with VL's 32 registers).
const EVEX: u8 = 1;
/// AVX-VNNI's `vpdpwssd` (VEX-encoded, 16 registers).
const VEX: u8 = 2;

/// Most outputs (rows x columns) of a VNNI tile whose rows are interleaved
/// (measured: 8 helped Q4_K 4 x 2 tiles and cost Q6_K's more).
const INTERLEAVE: usize = 4;

/// `out[r][c] = dot(w[r], a[c])` over `nb` super-blocks of format `K`.
///
/// # Safety
/// Each `w[r]` points to `nb` blocks of `K`; each `a[c]` to a Q8_K row of
/// at least `nb` blocks; the host has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [Q8KRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    // SAFETY: forwarded; the features are enabled here.
    unsafe { tile_body::<K, R, C, PLAIN>(w, a, nb) }
}

/// [`tile`] with `vpdpwssd` for `madd` + `add`.
///
/// # Safety
/// As [`tile`]; the host also has AVX512-VNNI and AVX512-VL.
#[target_feature(enable = "avx2,fma,avx512f,avx512vnni,avx512vl")]
pub(super) unsafe fn tile_vnni<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [Q8KRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    // SAFETY: forwarded; the features are enabled here.
    unsafe { tile_body::<K, R, C, EVEX>(w, a, nb) }
}

/// [`tile`] with AVX-VNNI's `vpdpwssd` (the VEX form, for AVX2 hosts
/// without AVX-512), rows one after another (16 vector registers).
///
/// # Safety
/// As [`tile`]; the host also has AVX-VNNI.
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(super) unsafe fn tile_avx_vnni<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [Q8KRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    // SAFETY: forwarded; the features are enabled here.
    unsafe { tile_body::<K, R, C, VEX>(w, a, nb) }
}

/// The body of both entry points: per super-block, every row's block
/// (interleaved, or one row after another) times every column.
///
/// # Safety
/// As [`tile`] (and [`tile_vnni`] when `VNNI`); called only where those
/// features are enabled.
#[inline(always)]
unsafe fn tile_body<const K: u8, const R: usize, const C: usize, const VNNI: u8>(
    w: [*const u8; R],
    a: [Q8KRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    let table = f16_table();
    let bytes = kind::block_bytes(K);
    let prefetch = stream_prefetch();
    // SAFETY: block b of row r and of every column exists (caller's
    // contract); the caller enabled the features the intrinsics need.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for b in 0..nb {
            // Each row is a stream (a matrix-vector tile's rows come from
            // distant parts of the matrix): fetch it ahead.
            if prefetch {
                for &row in &w {
                    prefetch_ahead(row.add(b * bytes), bytes);
                }
            }
            if VNNI == EVEX && R * C <= INTERLEAVE {
                let blk: [*const u8; R] = std::array::from_fn(|r| w[r].add(b * bytes));
                if K == kind::Q6_K {
                    q6k_rows::<R, C, VNNI>(table, blk, &a, b, &mut acc);
                } else {
                    affine_rows::<K, R, C, VNNI>(table, blk, &a, b, &mut acc);
                }
                continue;
            }
            for r in 0..R {
                let blk = [w[r].add(b * bytes)];
                let mut one = [acc[r]];
                if K == kind::Q6_K {
                    q6k_rows::<1, C, VNNI>(table, blk, &a, b, &mut one);
                } else {
                    affine_rows::<K, 1, C, VNNI>(table, blk, &a, b, &mut one);
                }
                acc[r] = one[0];
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum(acc[r][c]);
            }
        }
        out
    }
}

/// Sum of the 8 lanes.
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: the caller's features.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// The f16 at `p` in all 8 lanes, through `table` (every f16 as f32).
///
/// # Safety
/// `p` has two readable bytes; the caller has AVX2.
#[inline(always)]
unsafe fn f16_splat(table: &[f32; 65536], p: *const u8) -> __m256 {
    // SAFETY: forwarded.
    unsafe {
        let bits = (p as *const u16).read_unaligned();
        _mm256_broadcast_ss(&table[bits as usize])
    }
}

/// 32 bytes at `p`.
///
/// # Safety
/// `p` has 32 readable bytes; the caller has AVX2.
#[inline(always)]
unsafe fn load<T>(p: *const T) -> __m256i {
    // SAFETY: forwarded.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// `a | (b & mask)`: one `vpternlogd` with AVX-512 (VL), two instructions
/// otherwise.
///
/// # Safety
/// The caller has AVX2, and AVX512-VL when `VNNI` is [`EVEX`].
#[inline(always)]
unsafe fn or_masked<const VNNI: u8>(a: __m256i, b: __m256i, mask: __m256i) -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        match VNNI {
            // Truth table of a | (b & c) over a = 0xF0, b = 0xCC, c = 0xAA.
            EVEX => _mm256_ternarylogic_epi32::<0xF8>(a, b, mask),
            _ => _mm256_or_si256(a, _mm256_and_si256(b, mask)),
        }
    }
}

/// The 8 scales (bytes 0..8) and 8 mins (bytes 8..16) of the Q4_K / Q5_K
/// block at `blk`, unpacked from its 12 bytes (the rule of
/// `super::scales`): bytes 4..8 of the block hold scales 0..4 and bytes
/// 8..12 mins 0..4 (low 6 bits each); scales 4..8 are the low nibbles of
/// bytes 12..16 plus bits 6, 7 of bytes 4..8 as bits 4, 5; mins 4..8 the
/// high nibbles plus bits 6, 7 of bytes 8..12.
///
/// # Safety
/// `blk` has 16 readable bytes; the caller has AVX2.
#[inline(always)]
unsafe fn scales_mins(blk: *const u8) -> __m128i {
    // SAFETY: forwarded.
    unsafe {
        let v = _mm_loadu_si128(blk as *const __m128i);
        // Words: scales 0..4, scales 4..8 (low nibbles), mins 0..4, mins
        // 4..8 (high nibbles, shifted down below).
        let x = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15),
        );
        let low = _mm_and_si128(x, _mm_setr_epi32(0x3f3f_3f3f, 0x0f0f_0f0f, 0x3f3f_3f3f, 0));
        let high = _mm_and_si128(_mm_srli_epi32::<4>(x), _mm_setr_epi32(0, 0, 0, 0x0f0f_0f0f));
        // Bits 6, 7 of bytes 4..8 (for scales 4..8) and 8..12 (mins 4..8)
        // to bits 4, 5 of words 1 and 3.
        let top = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11),
        );
        let top = _mm_and_si128(_mm_srli_epi32::<2>(top), _mm_set1_epi8(0x30));
        _mm_or_si128(_mm_or_si128(low, high), top)
    }
}

/// The `pshufb` control that puts byte `first + j` (of a [`scales_mins`]
/// vector, which holds its 16 bytes in both 128-bit lanes) at i16 lanes
/// `2 j` and `2 j + 1`, zero-extended: `j` 0..4 over the low half, 4..8
/// over the high one, each under the two i16 lanes of 32-bit lane `j`.
/// `first` 0: the scales, each under its sub-block's lane (repacked
/// weights); 8: the mins, each twice, in the order of the activations'
/// sums of 16.
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
unsafe fn pairs_control(first: i8) -> __m256i {
    let control: [i8; 32] = std::array::from_fn(|i| {
        if i % 2 == 1 {
            -1
        } else {
            first + (i / 4) as i8
        }
    });
    // SAFETY: 32 readable bytes; the caller's features.
    unsafe { _mm256_loadu_si256(control.as_ptr() as *const __m256i) }
}

/// `acc + u q` over each 32-bit lane's 4 byte products: `vpdpbusd` with
/// VNNI; plain AVX2 multiplies by `scales` on the way (`maddubs` + `madd`:
/// its lanes come out already scaled).
///
/// # Safety
/// The caller has AVX2, and AVX512-VNNI + VL when `VNNI` is [`EVEX`],
/// AVX-VNNI when it is [`VEX`].
#[inline(always)]
unsafe fn lane_dot<const VNNI: u8>(
    acc: __m256i,
    u: __m256i,
    q: __m256i,
    scales: __m256i,
) -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        match VNNI {
            EVEX => _mm256_dpbusd_epi32(acc, u, q),
            VEX => _mm256_dpbusd_avx_epi32(acc, u, q),
            _ => _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), scales)),
        }
    }
}

/// Adds one Q4_K or Q5_K super-block (repacked: lane `g` of every vector is
/// sub-block `g`, [`super::repack`]) of each of `RR` weight rows times block
/// `b` of each column to `acc` (rows interleaved vector by vector).
///
/// # Safety
/// Each `blk[r]` points to one repacked block of `K`; every `a[c]` has block
/// `b`, permuted alike; the caller has [`tile_body`]'s features.
#[inline(always)]
unsafe fn affine_rows<const K: u8, const RR: usize, const C: usize, const VNNI: u8>(
    table: &[f32; 65536],
    blk: [*const u8; RR],
    a: &[Q8KRow; C],
    b: usize,
    acc: &mut [[__m256; C]; RR],
) {
    // SAFETY: every read is inside a block or inside block b of a column.
    unsafe {
        let sm: [__m256i; RR] =
            std::array::from_fn(|r| _mm256_broadcastsi128_si256(scales_mins(blk[r])));
        // Plain AVX2: each scale under its sub-block's two i16 lanes.
        let scales: [__m256i; RR] = if VNNI == PLAIN {
            std::array::from_fn(|r| _mm256_shuffle_epi8(sm[r], pairs_control(0)))
        } else {
            [_mm256_setzero_si256(); RR]
        };
        let low = _mm256_set1_epi8(0x0F);
        let mut isum = [[_mm256_setzero_si256(); C]; RR];
        for j in 0..8 {
            for r in 0..RR {
                // Vector j: low nibbles of chunk j / 2 for even j, high for
                // odd (Q5_K: fifth bits from bit j of qh).
                let qs = blk[r].add(if K == kind::Q4_K { 16 } else { 48 });
                let x = load(qs.add(32 * (j / 2)));
                let mut u = if j % 2 == 0 {
                    _mm256_and_si256(x, low)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(x), low)
                };
                if K == kind::Q5_K {
                    // Bits elsewhere than 4 are cleared by `or_masked`.
                    let fifth = plane_to_bit4(load(blk[r].add(16)), j);
                    u = or_masked::<VNNI>(u, fifth, _mm256_set1_epi8(0x10));
                }
                for c in 0..C {
                    let q = load(a[c].qs.add(b * QK_K + 32 * j));
                    isum[r][c] = lane_dot::<VNNI>(isum[r][c], u, q, scales[r]);
                }
            }
        }
        for r in 0..RR {
            if VNNI != PLAIN {
                // Lane g holds sub-block g's raw sum: times scale g (at
                // most 63 * 32 * 31 * 127 < 2^23, exact).
                let sc = _mm256_cvtepu8_epi32(_mm256_castsi256_si128(sm[r]));
                for v in &mut isum[r] {
                    *v = _mm256_mullo_epi32(*v, sc);
                }
            }
            let d = f16_splat(table, blk[r]);
            let dmin = f16_splat(table, blk[r].add(2));
            let mins = _mm256_shuffle_epi8(sm[r], pairs_control(8));
            for c in 0..C {
                let bsums = load(a[c].bsums.add(b * (QK_K / SUM_ELEMS)));
                let msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins));
                let dy = _mm256_broadcast_ss(&*a[c].d.add(b));
                // dy (d isum - dmin msum), one FMA on the accumulator's chain.
                let t =
                    _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(isum[r][c]), _mm256_mul_ps(dmin, msum));
                acc[r][c] = _mm256_fmadd_ps(dy, t, acc[r][c]);
            }
        }
    }
}

/// Adds one Q6_K super-block (repacked: lane `g` of vector `v` is
/// sub-block `g + 8 (v / 4)`, [`super::repack`]) of each of `RR` weight rows
/// times block `b` of each column to `acc` (rows interleaved vector by
/// vector).
///
/// # Safety
/// Each `blk[r]` points to one repacked Q6_K block; every `a[c]` has block
/// `b`, permuted alike; the caller has [`tile_body`]'s features.
#[inline(always)]
unsafe fn q6k_rows<const RR: usize, const C: usize, const VNNI: u8>(
    table: &[f32; 65536],
    blk: [*const u8; RR],
    a: &[Q8KRow; C],
    b: usize,
    acc: &mut [[__m256; C]; RR],
) {
    // SAFETY: every read is inside a block or inside block b of a column.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let top = _mm256_set1_epi8(0x30);
        let sc_bytes: [__m128i; RR] =
            std::array::from_fn(|r| _mm_loadu_si128(blk[r].add(192) as *const __m128i));
        // Plain AVX2: scales 0..8 (vectors 0..4) and 8..16 (vectors 4..8),
        // each under its sub-block's two i16 lanes, sign-extended.
        let pair_scales = |r: usize, half: usize| {
            if VNNI != PLAIN {
                return _mm256_setzero_si256();
            }
            let x = sc_bytes[r];
            let pairs = if half == 0 {
                _mm_unpacklo_epi8(x, x)
            } else {
                _mm_unpackhi_epi8(x, x)
            };
            _mm256_cvtepi8_epi16(pairs)
        };
        let scales: [[__m256i; RR]; 2] =
            std::array::from_fn(|half| std::array::from_fn(|r| pair_scales(r, half)));
        // Per half: with VNNI the raw sums of sub-blocks 8 half + g, scaled
        // after the block; plain AVX2 sums scaled products into half 0.
        let mut isum = [[[_mm256_setzero_si256(); 2]; C]; RR];
        for (half, half_scales) in scales.iter().enumerate() {
            for t in 0..4 {
                for r in 0..RR {
                    // Vector 4 half + t: low 4 bits from ql (chunk t % 2,
                    // nibble t / 2), top 2 from bits 2 t, 2 t + 1 of qh.
                    let ql = load(blk[r].add(64 * half + 32 * (t % 2)));
                    let qh = load(blk[r].add(128 + 32 * half));
                    let lo4 = if t < 2 {
                        _mm256_and_si256(ql, low)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql), low)
                    };
                    let hi2 = match t {
                        0 => _mm256_slli_epi16::<4>(qh),
                        1 => _mm256_slli_epi16::<2>(qh),
                        2 => qh,
                        _ => _mm256_srli_epi16::<2>(qh),
                    };
                    let u = or_masked::<VNNI>(lo4, hi2, top);
                    let h = if VNNI == PLAIN { 0 } else { half };
                    for c in 0..C {
                        let q = load(a[c].qs.add(b * QK_K + 128 * half + 32 * t));
                        isum[r][c][h] = lane_dot::<VNNI>(isum[r][c][h], u, q, half_scales[r]);
                    }
                }
            }
        }
        for r in 0..RR {
            let d = f16_splat(table, blk[r].add(208));
            let sc_all = _mm256_cvtepi8_epi16(sc_bytes[r]);
            let (sc_lo, sc_hi) = if VNNI == PLAIN {
                (_mm256_setzero_si256(), _mm256_setzero_si256())
            } else {
                (
                    _mm256_cvtepi8_epi32(sc_bytes[r]),
                    _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc_bytes[r], sc_bytes[r])),
                )
            };
            for c in 0..C {
                let [s0, s1] = isum[r][c];
                // Raw sums times their (signed) scales: at most 16 * 63 *
                // 127 * 128 < 2^25 each, exact.
                let isum = if VNNI == PLAIN {
                    s0
                } else {
                    _mm256_add_epi32(_mm256_mullo_epi32(s0, sc_lo), _mm256_mullo_epi32(s1, sc_hi))
                };
                let bsums = load(a[c].bsums.add(b * (QK_K / SUM_ELEMS)));
                let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc_all));
                let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, offset));
                let dy = _mm256_broadcast_ss(&*a[c].d.add(b));
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), s, acc[r][c]);
            }
        }
    }
}

//! AVX2 (+FMA) tiles of K-quant weight rows x Q8_K activation rows, and the
//! same code with AVX512-VNNI's 256-bit `vpdpwssd` ([`tile_vnni`]) or
//! AVX-VNNI's VEX-encoded one ([`tile_avx_vnni`], rows not interleaved).
//!
//! Per super-block and weight row, the quants are unpacked once into 32-byte
//! vectors of unsigned values (Q4_K 0..=15, Q5_K 0..=31, Q6_K 0..=63), each
//! vector one sub-block of 32 values (Q4_K, Q5_K) or two of 16 (Q6_K); then,
//! per activation column, `maddubs` (u8 x i8 pairs to i16; at most 2 * 63 *
//! 127 = 16002, so never saturated) and `madd` with the sub-block scales as
//! i16 (pairs to i32) give 8 lanes of scaled integer sums, added over the
//! block in i32 (bounds in the module doc of [`super`]); with VNNI, `madd`
//! and the add are one `vpdpwssd`. The minimums of Q4_K / Q5_K are one more
//! `madd` of the activations' sums of 16 with the mins (each min twice, for
//! the two sums of its sub-block); Q6_K's offset of 32 is `32 sum_s sc_s
//! bsums_s`, one `madd` and a shift, subtracted in i32. Each block then
//! costs one or two conversions and two or three f32 instructions per
//! output.
//!
//! Sub-block scales reach all 16 i16 lanes of a vector by `pshufb` from a
//! vector holding the 8 scales in both 128-bit lanes (Q6_K: the low lane
//! picks one sub-block's scale, the high lane the next's). Q4_K / Q5_K
//! scales and mins are unpacked from their 12 bytes in vector registers
//! ([`scales_mins`]; the scalar rule of `super::scales` cost twice the
//! instructions). The f16 super-block scales come from the f16 table (one
//! load and a broadcast each, as in `qdot::avx2`).
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
//! Measured (one thread, 2-core Zen 4, weights in L2, ns per super-block
//! and column, 2026-11-25): 1 x 8 tiles run Q4_K / Q5_K / Q6_K at 3.4 /
//! 3.7 / 3.7 (VNNI 2.9 / 3.1 / 3.1); 4 x 1 at 6.2 / 7.6 / 8.2 (VNNI
//! interleaved 4.6 / 6.8 / 6.4).
//!
//! Tried and not kept (2026-11-26, 2-core Xeon, family 6 model 207, weights
//! from memory, `benches/matmul.rs`, each set forced in turn twice): Q4_K
//! and Q5_K rows repacked at load so that one 64-byte load holds four whole
//! sub-blocks, run by 512-bit `maddubs` + `vpdpwssd` (four of each per
//! super-block where these tiles take eight; Q5_K's fifth bits as byte masks
//! for a masked `vpaddb`). 4096² matvec, one / two threads: Q4_K 12.0-12.4
//! / 25.7-29.0 GB/s against 12.4-13.7 / 36.9-45.0 here, Q5_K 12.9-15.5 /
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
use crate::cpu::matmul::qdot::f16_table;
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
#[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
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
    // SAFETY: block b of row r and of every column exists (caller's
    // contract); the caller enabled the features the intrinsics need.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for b in 0..nb {
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

/// `isum + madd(p, s)`.
///
/// # Safety
/// The caller has AVX2, and AVX512-VNNI + VL when `VNNI` is [`EVEX`],
/// AVX-VNNI when it is [`VEX`].
#[inline(always)]
unsafe fn dot_add<const VNNI: u8>(isum: __m256i, p: __m256i, s: __m256i) -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        match VNNI {
            EVEX => _mm256_dpwssd_epi32(isum, p, s),
            VEX => _mm256_dpwssd_avx_epi32(isum, p, s),
            _ => _mm256_add_epi32(isum, _mm256_madd_epi16(p, s)),
        }
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

/// Sub-block `j`'s Q5_K fifth bits (bit `j` of each byte of `qh`) moved to
/// bit 4 of each byte, the rest cleared. The 16-bit shifts keep bit 4 of
/// each byte within the byte for the shifts used (at most 4 left, 3 right).
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
unsafe fn fifth_bits(qh: __m256i, j: usize) -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        let x = match j {
            0 => _mm256_slli_epi16::<4>(qh),
            1 => _mm256_slli_epi16::<3>(qh),
            2 => _mm256_slli_epi16::<2>(qh),
            3 => _mm256_slli_epi16::<1>(qh),
            4 => qh,
            5 => _mm256_srli_epi16::<1>(qh),
            6 => _mm256_srli_epi16::<2>(qh),
            _ => _mm256_srli_epi16::<3>(qh),
        };
        _mm256_and_si256(x, _mm256_set1_epi8(0x10))
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

/// The `pshufb` control that puts byte `8 + j / 2` (min `j / 2` of a
/// [`scales_mins`] vector, in both 128-bit lanes) at i16 lane `j` of the
/// low half and byte `12 + j / 2` at i16 lane `j` of the high half, each
/// zero-extended: the mins in the order of the activations' sums of 16.
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
unsafe fn mins_control() -> __m256i {
    // SAFETY: the caller's features.
    unsafe {
        _mm256_setr_epi8(
            8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, //
            12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1,
        )
    }
}

/// Adds one Q4_K or Q5_K super-block of each of `RR` weight rows times
/// block `b` of each column to `acc` (rows interleaved sub-block by
/// sub-block).
///
/// # Safety
/// Each `blk[r]` points to one block of `K`; every `a[c]` has block `b`;
/// the caller has [`tile_body`]'s features.
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
        let low = _mm256_set1_epi8(0x0F);
        let mut isum = [[_mm256_setzero_si256(); C]; RR];
        for j in 0..8 {
            for r in 0..RR {
                // Sub-block j: values 32 j..; low nibbles of chunk j / 2 for
                // even j, high for odd.
                let qs = blk[r].add(if K == kind::Q4_K { 16 } else { 48 });
                let x = load(qs.add(32 * (j / 2)));
                let mut u = if j % 2 == 0 {
                    _mm256_and_si256(x, low)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(x), low)
                };
                if K == kind::Q5_K {
                    u = _mm256_or_si256(u, fifth_bits(load(blk[r].add(16)), j));
                }
                // Scale j (byte j) zero-extended into every i16 lane.
                let s = _mm256_shuffle_epi8(sm[r], _mm256_set1_epi16(j as i16 | -256));
                for c in 0..C {
                    let q = load(a[c].qs.add(b * QK_K + 32 * j));
                    isum[r][c] = dot_add::<VNNI>(isum[r][c], _mm256_maddubs_epi16(u, q), s);
                }
            }
        }
        for r in 0..RR {
            let d = f16_splat(table, blk[r]);
            let dmin = f16_splat(table, blk[r].add(2));
            let mins = _mm256_shuffle_epi8(sm[r], mins_control());
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

/// The `pshufb` control that spreads i16 lane `lo` over the low 128-bit
/// lane and i16 lane `lo + 1` over the high one.
///
/// # Safety
/// The caller has AVX2.
#[inline(always)]
unsafe fn pick_pair(lo: i16) -> __m256i {
    let word = |i: i16| (2 * i) | ((2 * i + 1) << 8);
    // SAFETY: the caller's features.
    unsafe { _mm256_setr_m128i(_mm_set1_epi16(word(lo)), _mm_set1_epi16(word(lo + 1))) }
}

/// Adds one Q6_K super-block of each of `RR` weight rows times block `b`
/// of each column to `acc` (rows interleaved quarter by quarter).
///
/// # Safety
/// Each `blk[r]` points to one Q6_K block; every `a[c]` has block `b`; the
/// caller has [`tile_body`]'s features.
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
        let mut isum = [[_mm256_setzero_si256(); C]; RR];
        for half in 0..2 {
            for t in 0..4 {
                for r in 0..RR {
                    let sc = _mm_loadl_epi64(blk[r].add(192 + 8 * half) as *const __m128i);
                    let scales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc));
                    // Quarter t: values 128 half + 32 t.., sub-blocks
                    // 8 half + 2 t (low 128 bits) and 8 half + 2 t + 1 (high);
                    // low 4 bits from ql (chunk t % 2, nibble t / 2), top 2
                    // from bits 2 t, 2 t + 1 of qh.
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
                    let u = _mm256_or_si256(lo4, _mm256_and_si256(hi2, top));
                    let s = _mm256_shuffle_epi8(scales, pick_pair(2 * t as i16));
                    for c in 0..C {
                        let q = load(a[c].qs.add(b * QK_K + 128 * half + 32 * t));
                        isum[r][c] = dot_add::<VNNI>(isum[r][c], _mm256_maddubs_epi16(u, q), s);
                    }
                }
            }
        }
        for r in 0..RR {
            let d = f16_splat(table, blk[r].add(208));
            let sc_all = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk[r].add(192) as *const __m128i));
            for c in 0..C {
                let bsums = load(a[c].bsums.add(b * (QK_K / SUM_ELEMS)));
                let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc_all));
                let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r][c], offset));
                let dy = _mm256_broadcast_ss(&*a[c].d.add(b));
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), s, acc[r][c]);
            }
        }
    }
}

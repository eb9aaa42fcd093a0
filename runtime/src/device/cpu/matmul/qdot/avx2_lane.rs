//! AVX2 tiles over Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 rows repacked at load
//! ([`crate::device::cpu::matmul::packed`]): one block per 32-bit lane, so the
//! integer sums of 8 blocks land in one vector (lane j = block j) with no
//! horizontal reduction until the row's end, and the blocks' scales apply
//! as one vector per group (8 f16, one load and one F16C conversion).
//!
//! Per group of 8 blocks, weight row and column:
//! - Q4: 4 loads of 32 nibble bytes, each split into low nibbles (`and`)
//!   and high nibbles (`shift`, `and`); 8 `maddubs` with the activations'
//!   `ql`, added as i16 (each at most 2 * 15 * 127 = 3810 in magnitude, so 8
//!   of them stay below 2^15), one `madd` with ones, one conversion, two FMAs;
//! - Q5: as Q4, with each vector's fifth bits merged in as bit 4: one load
//!   of the group's bit planes (`packed`), from which each of the 8
//!   nibble vectors takes its plane to bit 4 (GFNI: one `gf2p8affineqb`,
//!   else a 16-bit shift and an `and`), merged with the nibbles (AVX-512:
//!   one `vpternlogd` that also drops the other nibble, else `and` + `or`);
//!   a pair tail adds its fifth bits as 16 under two byte masks per vector
//!   (AVX-512: a masked `vpaddb`; AVX2: [`mask_bytes`]), half words of the
//!   two blocks' `qh`. The i16 tree then stops at four `maddubs` (each at
//!   most 2 * 31 * 127 = 7874), two `madd`s widen;
//! - Q8_0: 8 loads of 32 bytes; per vector the weights' signs move onto the
//!   activations (`maddubs` takes unsigned x signed), a `maddubs` and a
//!   `madd` (the i16 pair sums reach 2 * 128 * 127, so each is widened
//!   alone), 7 i32 adds, one conversion, one FMA.
//!
//! A last group of `4 < t < 8` blocks runs the same code with its vectors
//! (`4 t` bytes each) and the activations' scales loaded under a lane mask,
//! so the missing blocks' lanes are zero and nothing past a row is read. A
//! last group of `t <= 4` blocks (K = 576 ends in 2) comes in pairs of
//! blocks, one per 128-bit half ([`pairs`]): 4 lanes per block, its scales
//! spread over them by a permute, at half a group's work or less.
//!
//! Float work per group, lane j = block j (weights d, m; activations d1,
//! s8 = d1 sum(q) / 8):
//! - Q8_0: `acc += d d1 sum(w q)`;
//! - Q4_0: `acc += d (d1 sum(u q) - 64 s8)`;
//! - Q4_1 and Q5_1: `acc += d d1 sum(u q) + m 8 s8`;
//! - Q5_0: `acc += d (d1 sum(u q) - 128 s8)`.
//!
//! With VNNI ([`tile_vnni`]: AVX512-VNNI with AVX512-VL, on 256-bit vectors;
//! [`tile_avx_vnni`]: AVX-VNNI, the same instruction VEX-encoded for hosts
//! without AVX-512) each `maddubs` + i16 add + `madd` becomes one `vpdpbusd` accumulating
//! into i32 lanes. The integer sums are the same numbers (no i16 saturates
//! in either form, bounds above), so both variants give the same bits. The
//! body is one `#[inline(always)]` function per variant, compiled inside
//! each entry point's target features.

use super::avx2::{hsums, plane_to_bit4};
use super::kind;
use super::{Isa, LaneTile};
use crate::device::cpu::matmul::kind::{fifth_bit_bytes, scale_fields};
use crate::device::cpu::matmul::prefetch::{prefetch_ahead, stream_prefetch};
use crate::device::cpu::matmul::q8::{GROUP, PAIRED_TAIL, QK, QRow};
use std::arch::x86_64::*;

/// The masks of the first `t` of 8 blocks: `mask` (and `lanes`, the same
/// bits as floats) selects 32-bit lanes `0..t`; `words` the 32-bit words
/// `0..ceil(t / 2)` of 8 packed f16 values.
struct TailMasks {
    mask: __m256i,
    lanes: __m256,
    words: __m128i,
}

#[target_feature(enable = "avx2")]
#[inline]
fn tail_masks(t: usize) -> TailMasks {
    let mask = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(t as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    let words = _mm_cmpgt_epi32(
        _mm_set1_epi32(t.div_ceil(2) as i32),
        _mm_setr_epi32(0, 1, 2, 3),
    );
    TailMasks {
        mask,
        lanes: _mm256_castsi256_ps(mask),
        words,
    }
}

/// `t` f16 values at `p` (`t` = 8 when `FULL`) as f32, zero past `t`.
/// `pairs` masks the 32-bit words holding them (`ceil(t / 2)`), `lanes` the
/// lanes below `t`: for odd `t` the last word's upper half belongs to the
/// next field and is cleared after the conversion. (A masked load, not a
/// copy through the stack: small stores feeding a wide load stall.)
///
/// # Safety
/// `p` has `4 ceil(t / 2)` readable bytes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn f16s<const FULL: bool>(p: *const u8, pairs: __m128i, lanes: __m256) -> __m256 {
    if FULL {
        // SAFETY: 16 bytes (t = 8).
        return _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) });
    }
    // SAFETY: only the words under `pairs` are read.
    let h = unsafe { _mm_maskload_epi32(p as *const i32, pairs) };
    _mm256_and_ps(_mm256_cvtph_ps(h), lanes)
}

/// Q4_0 and Q5_0: values `(u - offset) d`, the offset taken off through the
/// activations' sums; Q4_1 and Q5_1 add `m` through them instead.
const fn signed_offset(k: u8) -> bool {
    k == kind::Q4_0 || k == kind::Q5_0
}

/// The factor on `s8 = d1 sum(q) / 8` per block: `8 offset` (Q4_0 64, Q5_0
/// 128) or 8 for the minimum's term (Q4_1, Q5_1).
const fn offset_scale(k: u8) -> f32 {
    match k {
        kind::Q4_0 => 64.0,
        kind::Q5_0 => 128.0,
        _ => 8.0,
    }
}

/// A byte mask as bytes: 16 in byte `p` where bit `p` of `m` is set, else 0
/// (AVX2: the mask in every lane, each byte spread to 8 bytes, one bit
/// kept per byte, compared).
#[target_feature(enable = "avx2")]
#[inline]
fn mask_bytes(m: u32) -> __m256i {
    #[rustfmt::skip]
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let b = _mm256_and_si256(
        _mm256_shuffle_epi8(_mm256_set1_epi32(m as i32), spread),
        bit,
    );
    _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(16))
}

/// The kernel once per instruction set: `$features` on every function (so
/// each intrinsic and closure is compiled, and inlined, inside them) and
/// `VNNI` choosing `vpdpbusd`. (Generic bodies without target features,
/// always inlined into feature-enabled entry points, left some closures'
/// intrinsics as calls: 5x slower on Q8_0 tails.)
macro_rules! lane_kernel {
    (
        $module:ident, $features:literal, $vnni:literal, $masks:literal, $gfni:literal,
        $dpbusd:ident
    ) => {
        mod $module {
            use super::*;

            /// AVX-512 (BW + VL): a pair tail's fifth bits are added by one
            /// masked `vpaddb` per half vector, and a group's merge with
            /// one `vpternlogd`.
            const MASKS: bool = $masks;

            /// GFNI: each bit plane moves to bit 4 with one affine step.
            const GFNI: bool = $gfni;

            /// Bit plane `S` of `planes` (module `packed`) at bit 4 of each
            /// byte, every other bit zero.
            ///
            /// # Safety
            /// Inside this module's target features.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn fifth<const S: i64>(planes: __m256i) -> __m256i {
                // SAFETY: the caller runs inside the features (the affine
                // step only where they include GFNI).
                #[allow(unused_unsafe)]
                unsafe {
                    if GFNI {
                        // Row 3 of the bit matrix (output bit 4) picks bit S.
                        return _mm256_gf2p8affine_epi64_epi8::<0>(
                            planes,
                            _mm256_set1_epi64x(1 << (24 + S)),
                        );
                    }
                    let at4 = plane_to_bit4(planes, S as usize);
                    _mm256_and_si256(at4, _mm256_set1_epi8(16))
                }
            }

            /// The low nibbles of `v` (`low`: 0x0F in every byte) with the
            /// fifth bits `f` ([`fifth`]) as bit 4.
            ///
            /// # Safety
            /// Inside this module's target features.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn with_fifth(v: __m256i, f: __m256i, low: __m256i) -> __m256i {
                // SAFETY: the caller runs inside the features (the ternary
                // logic only where they include AVX512-VL).
                #[allow(unused_unsafe)]
                unsafe {
                    if MASKS {
                        // low ? v : f, bit by bit.
                        _mm256_ternarylogic_epi32::<0xE4>(v, f, low)
                    } else {
                        _mm256_or_si256(_mm256_and_si256(v, low), f)
                    }
                }
            }

            /// Sums with `vpdpbusd` rather than `maddubs` + `madd`.
            const VNNI: bool = $vnni;

            /// `v` with 16 added to the bytes whose bit is set in mask `m`.
            ///
            /// # Safety
            /// Inside this module's target features.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn add_fifth(v: __m256i, m: u32) -> __m256i {
                // SAFETY: the caller runs inside the features (the masked
                // add only where they include AVX512-BW and VL).
                #[allow(unused_unsafe)]
                unsafe {
                    if MASKS {
                        _mm256_mask_add_epi8(v, m, v, _mm256_set1_epi8(16))
                    } else {
                        _mm256_or_si256(v, mask_bytes(m))
                    }
                }
            }

            /// `out[r][c] = dot(w[r], a[c])` over `nb` blocks of format `K`, weight
            /// rows in the repacked layout.
            ///
            /// # Safety
            /// Each `w[r]` points to a repacked row of `nb` blocks of `K`; each `a[c]`
            /// to a quantized row of exactly `nb` blocks; the host has this module's
            /// target features.
            #[target_feature(enable = $features)]
            pub(in super::super) unsafe fn tile<const K: u8, const R: usize, const C: usize>(
                w: [*const u8; R],
                a: [QRow; C],
                nb: usize,
            ) -> [[f32; C]; R] {
                // Once per tile, not per group (an atomic load).
                let prefetch = stream_prefetch();
                // SAFETY: every call below is forwarded from the caller.
                unsafe {
                    let mut acc = [[_mm256_setzero_ps(); C]; R];
                    for g in 0..nb / GROUP {
                        group::<K, R, C, true>(w, a, g * GROUP, GROUP, prefetch, &mut acc);
                    }
                    let b = nb / GROUP * GROUP;
                    if nb - b > PAIRED_TAIL {
                        group::<K, R, C, false>(w, a, b, nb - b, prefetch, &mut acc);
                    } else if nb > b {
                        pairs::<K, R, C>(w, a, b, nb - b, &mut acc);
                    }
                    hsums(&acc)
                }
            }

            /// Adds blocks `b..b + t` (t = 8 when `FULL`) to `acc` (lane j: block b + j),
            /// each row's stream fetched ahead when `prefetch`.
            ///
            /// # Safety
            /// As [`tile`], with `b + t <= nb` and `b` a multiple of 8.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn group<const K: u8, const R: usize, const C: usize, const FULL: bool>(
                w: [*const u8; R],
                a: [QRow; C],
                b: usize,
                t: usize,
                prefetch: bool,
                acc: &mut [[__m256; C]; R],
            ) {
                let t = if FULL { GROUP } else { t };
                let fields = scale_fields(K);
                // SAFETY: the activations' scales of blocks b..b + t (only those lanes
                // are read) and their whole ql group; weight bytes inside the t blocks
                // at b (repacked layout: fields, then vectors of 4 t bytes). Every
                // intrinsic runs inside the entry point's target features.
                unsafe {
                    let low = _mm256_set1_epi8(0x0F);
                    let ones = _mm256_set1_epi16(1);
                    let TailMasks {
                        mask,
                        lanes,
                        words: pairs,
                    } = tail_masks(t);
                    let load = |p: *const f32| {
                        if FULL {
                            _mm256_loadu_ps(p)
                        } else {
                            _mm256_maskload_ps(p, mask)
                        }
                    };
                    let d1: [__m256; C] = std::array::from_fn(|c| load(a[c].d.add(b)));
                    // Q4_0: 64 s8 = 8 d1 sum(q); Q5_0: 128 s8 = 16 d1 sum(q);
                    // Q4_1, Q5_1: 8 s8 = d1 sum(q).
                    let f = _mm256_set1_ps(offset_scale(K));
                    let s: [__m256; C] =
                        std::array::from_fn(|c| _mm256_mul_ps(load(a[c].s8.add(b)), f));
                    for r in 0..R {
                        let p = w[r].add(b * kind::block_bytes(K));
                        // Each row is a stream (a tile's rows come from
                        // distant parts of the matrix): fetch it ahead.
                        if prefetch {
                            prefetch_ahead(p, GROUP * kind::block_bytes(K));
                        }
                        let dw = f16s::<FULL>(p, pairs, lanes);
                        let mw = if kind::has_min(K) {
                            f16s::<FULL>(p.add(2 * t), pairs, lanes)
                        } else {
                            _mm256_setzero_ps()
                        };
                        let qh = p.add(2 * fields * t);
                        let qw = qh.add(fifth_bit_bytes(K) * t);
                        let vector = |v: usize| {
                            let q = qw.add(4 * t * v);
                            if FULL {
                                _mm256_loadu_si256(q as *const __m256i)
                            } else {
                                _mm256_maskload_epi32(q as *const i32, mask)
                            }
                        };
                        if K == kind::Q8_0 {
                            let x: [__m256i; 8] = std::array::from_fn(vector);
                            for c in 0..C {
                                let ql = a[c].ql.add(b * QK);
                                let q =
                                    |v: usize| _mm256_loadu_si256(ql.add(32 * v) as *const __m256i);
                                let sum =
                                    _mm256_cvtepi32_ps(q8_sums(x, std::array::from_fn(q), ones));
                                acc[r][c] =
                                    _mm256_fmadd_ps(sum, _mm256_mul_ps(dw, d1[c]), acc[r][c]);
                            }
                            continue;
                        }
                        let x: [__m256i; 4] = std::array::from_fn(vector);
                        let (lo, hi): ([__m256i; 4], [__m256i; 4]) = if kind::five_bit(K) {
                            // The group's bit planes, laid out as a quant
                            // vector (module `packed`).
                            let planes = if FULL {
                                _mm256_loadu_si256(qh as *const __m256i)
                            } else {
                                _mm256_maskload_epi32(qh as *const i32, mask)
                            };
                            let f = [
                                fifth::<0>(planes),
                                fifth::<1>(planes),
                                fifth::<2>(planes),
                                fifth::<3>(planes),
                                fifth::<4>(planes),
                                fifth::<5>(planes),
                                fifth::<6>(planes),
                                fifth::<7>(planes),
                            ];
                            (
                                std::array::from_fn(|v| with_fifth(x[v], f[2 * v], low)),
                                std::array::from_fn(|v| {
                                    with_fifth(_mm256_srli_epi16::<4>(x[v]), f[2 * v + 1], low)
                                }),
                            )
                        } else {
                            (
                                x.map(|v| _mm256_and_si256(v, low)),
                                x.map(|v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), low)),
                            )
                        };
                        for c in 0..C {
                            let ql = a[c].ql.add(b * QK);
                            let q = |v: usize| _mm256_loadu_si256(ql.add(32 * v) as *const __m256i);
                            let sum = if VNNI {
                                // Two chains of four, each lane's 4 products a step.
                                let mut s = [_mm256_setzero_si256(); 2];
                                for v in 0..4 {
                                    s[v % 2] = $dpbusd(s[v % 2], lo[v], q(v));
                                    s[v % 2] = $dpbusd(s[v % 2], hi[v], q(v + 4));
                                }
                                _mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1]))
                            } else {
                                // A tree of i16 adds: 8 products, depth 3
                                // (Q5: two trees of 4, widened apart).
                                let m: [__m256i; 4] = std::array::from_fn(|v| {
                                    _mm256_add_epi16(
                                        _mm256_maddubs_epi16(lo[v], q(v)),
                                        _mm256_maddubs_epi16(hi[v], q(v + 4)),
                                    )
                                });
                                let (m01, m23) =
                                    (_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3]));
                                let sum = if kind::five_bit(K) {
                                    _mm256_add_epi32(
                                        _mm256_madd_epi16(m01, ones),
                                        _mm256_madd_epi16(m23, ones),
                                    )
                                } else {
                                    _mm256_madd_epi16(_mm256_add_epi16(m01, m23), ones)
                                };
                                _mm256_cvtepi32_ps(sum)
                            };
                            acc[r][c] = if signed_offset(K) {
                                _mm256_fmadd_ps(dw, _mm256_fmsub_ps(sum, d1[c], s[c]), acc[r][c])
                            } else {
                                _mm256_fmadd_ps(
                                    sum,
                                    _mm256_mul_ps(dw, d1[c]),
                                    _mm256_fmadd_ps(mw, s[c], acc[r][c]),
                                )
                            };
                        }
                    }
                }
            }

            /// Adds the last `t <= 4` blocks `b..b + t` to `acc`, two blocks per vector
            /// (lanes 0..4: block `b + 2p`, lanes 4..8: block `b + 2p + 1`), paired in
            /// the repacked row as the module `packed` says; the activations' `ql` hold
            /// the same pairs. Each block's constant term is spread evenly
            /// over its 4 lanes (all lanes are summed at the end).
            ///
            /// # Safety
            /// As [`tile`], with `b + t == nb`, `t <= 4` and `b` a multiple of 8.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn pairs<const K: u8, const R: usize, const C: usize>(
                w: [*const u8; R],
                a: [QRow; C],
                b: usize,
                t: usize,
                acc: &mut [[__m256; C]; R],
            ) {
                let fields = scale_fields(K);
                // SAFETY: the activations' scales of blocks b..b + t (masked) and their
                // ql group; weight bytes inside the t blocks at b (repacked layout:
                // fields, then the blocks' nibble bytes in order). Every intrinsic runs
                // inside the entry point's target features.
                unsafe {
                    let low = _mm256_set1_epi8(0x0F);
                    let ones = _mm256_set1_epi16(1);
                    let TailMasks { mask, lanes, words } = tail_masks(t);
                    // Pair p's lanes take blocks 2p (lanes 0..4) and 2p + 1 (lanes 4..8).
                    let spread = [
                        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                        _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                    ];
                    // The block sums' term over 4 lanes: a quarter of the group's.
                    let f = _mm256_set1_ps(offset_scale(K) / 4.0);
                    let d1: [__m256; C] =
                        std::array::from_fn(|c| _mm256_maskload_ps(a[c].d.add(b), mask));
                    let s: [__m256; C] = std::array::from_fn(|c| {
                        _mm256_mul_ps(_mm256_maskload_ps(a[c].s8.add(b), mask), f)
                    });
                    for r in 0..R {
                        let p0 = w[r].add(b * kind::block_bytes(K));
                        let dw = f16s::<false>(p0, words, lanes);
                        let mw = if kind::has_min(K) {
                            f16s::<false>(p0.add(2 * t), words, lanes)
                        } else {
                            _mm256_setzero_ps()
                        };
                        let qh = p0.add(2 * fields * t);
                        let qw = qh.add(fifth_bit_bytes(K) * t);
                        // Q5: block j's fifth bits (none past t).
                        let word = |j: usize| {
                            if j < t {
                                (qh as *const u32).add(j).read_unaligned()
                            } else {
                                0
                            }
                        };
                        for (p, &spread) in spread.iter().enumerate().take(t.div_ceil(2)) {
                            let dwp = _mm256_permutevar8x32_ps(dw, spread);
                            // 32 bytes at `at`, or 16 (a last block alone) and zeros.
                            let half = |at: *const u8| {
                                let x = _mm_loadu_si128(at as *const __m128i);
                                _mm256_set_m128i(_mm_setzero_si128(), x)
                            };
                            if K == kind::Q8_0 {
                                let pair = qw.add(64 * p);
                                let x = if 2 * p + 1 < t {
                                    [0, 32]
                                        .map(|o| _mm256_loadu_si256(pair.add(o) as *const __m256i))
                                } else {
                                    [0, 16].map(|o| half(pair.add(o)))
                                };
                                for c in 0..C {
                                    let ql = a[c].ql.add(b * QK + 64 * p);
                                    let q = |h: usize| {
                                        _mm256_loadu_si256(ql.add(32 * h) as *const __m256i)
                                    };
                                    let m = [0, 1].map(|h| q8_product(x[h], q(h), ones));
                                    let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(m[0], m[1]));
                                    let d1p = _mm256_permutevar8x32_ps(d1[c], spread);
                                    acc[r][c] =
                                        _mm256_fmadd_ps(sum, _mm256_mul_ps(dwp, d1p), acc[r][c]);
                                }
                                continue;
                            }
                            let x = if 2 * p + 1 < t {
                                _mm256_loadu_si256(qw.add(32 * p) as *const __m256i)
                            } else {
                                half(qw.add(32 * p))
                            };
                            let mut lo = _mm256_and_si256(x, low);
                            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
                            if kind::five_bit(K) {
                                // Byte p' of the low half holds block 2p's
                                // quant byte p': its fifth bits are bits p'
                                // (low nibble) and 16 + p' (high) of qh; the
                                // high half, block 2p + 1's. So the pair's
                                // byte masks are half words of the two qh.
                                let (w0, w1) = (word(2 * p), word(2 * p + 1));
                                lo = add_fifth(lo, (w0 & 0xFFFF) | (w1 << 16));
                                hi = add_fifth(hi, (w0 >> 16) | (w1 & 0xFFFF_0000));
                            }
                            let mwp = _mm256_permutevar8x32_ps(mw, spread);
                            for c in 0..C {
                                let ql = a[c].ql.add(b * QK + 64 * p);
                                let q =
                                    |h: usize| _mm256_loadu_si256(ql.add(32 * h) as *const __m256i);
                                let sum = if VNNI {
                                    let s = $dpbusd(_mm256_setzero_si256(), lo, q(0));
                                    _mm256_cvtepi32_ps($dpbusd(s, hi, q(1)))
                                } else {
                                    let m = _mm256_add_epi16(
                                        _mm256_maddubs_epi16(lo, q(0)),
                                        _mm256_maddubs_epi16(hi, q(1)),
                                    );
                                    _mm256_cvtepi32_ps(_mm256_madd_epi16(m, ones))
                                };
                                let d1p = _mm256_permutevar8x32_ps(d1[c], spread);
                                let sp = _mm256_permutevar8x32_ps(s[c], spread);
                                acc[r][c] = if signed_offset(K) {
                                    _mm256_fmadd_ps(dwp, _mm256_fmsub_ps(sum, d1p, sp), acc[r][c])
                                } else {
                                    _mm256_fmadd_ps(
                                        sum,
                                        _mm256_mul_ps(dwp, d1p),
                                        _mm256_fmadd_ps(mwp, sp, acc[r][c]),
                                    )
                                };
                            }
                        }
                    }
                }
            }

            /// Q8_0: the 32-bit sums of 4 products `w q` of one weight vector and one
            /// activation vector. `maddubs` and `vpdpbusd` multiply unsigned by signed
            /// bytes, so the weights' signs move onto the activations; each i16 pair sum
            /// of `maddubs` reaches 2 * 128 * 127 and is widened at once (two would
            /// overflow).
            ///
            /// # Safety
            /// Inside this module's target features.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q8_product(w: __m256i, q: __m256i, ones: __m256i) -> __m256i {
                // SAFETY: the caller runs inside the features. (Only the
                // VNNI intrinsic needs it, and only where VNNI is not one.)
                #[allow(unused_unsafe)]
                unsafe {
                    let (u, s) = (_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
                    if VNNI {
                        $dpbusd(_mm256_setzero_si256(), u, s)
                    } else {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones)
                    }
                }
            }

            /// Q8_0: lane j = the sum of block j's products over 8 vectors.
            ///
            /// # Safety
            /// As [`q8_product`].
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn q8_sums(w: [__m256i; 8], q: [__m256i; 8], ones: __m256i) -> __m256i {
                // SAFETY: the caller runs inside the features.
                unsafe {
                    if VNNI {
                        let mut s = [_mm256_setzero_si256(); 2];
                        for v in 0..8 {
                            let u = _mm256_sign_epi8(w[v], w[v]);
                            s[v % 2] = $dpbusd(s[v % 2], u, _mm256_sign_epi8(q[v], w[v]));
                        }
                        return _mm256_add_epi32(s[0], s[1]);
                    }
                    let m: [__m256i; 8] = std::array::from_fn(|v| q8_product(w[v], q[v], ones));
                    let m: [__m256i; 4] =
                        std::array::from_fn(|i| _mm256_add_epi32(m[2 * i], m[2 * i + 1]));
                    _mm256_add_epi32(_mm256_add_epi32(m[0], m[1]), _mm256_add_epi32(m[2], m[3]))
                }
            }
        }
    };
}

lane_kernel!(
    plain,
    "avx2,fma,f16c",
    false,
    false,
    false,
    _mm256_dpbusd_epi32
);
lane_kernel!(
    with_vnni,
    "avx2,fma,f16c,avx512vnni,avx512vl,avx512bw",
    true,
    true,
    false,
    _mm256_dpbusd_epi32
);
lane_kernel!(
    with_vnni_gfni,
    "avx2,fma,f16c,avx512vnni,avx512vl,avx512bw,gfni",
    true,
    true,
    true,
    _mm256_dpbusd_epi32
);
lane_kernel!(
    with_avx_vnni,
    "avx2,fma,f16c,avxvnni",
    true,
    false,
    false,
    _mm256_dpbusd_avx_epi32
);
lane_kernel!(
    with_avx_vnni_gfni,
    "avx2,fma,f16c,avxvnni,gfni",
    true,
    false,
    true,
    _mm256_dpbusd_avx_epi32
);

/// Whether the host has GFNI (Q5 groups then take their bit planes to bit 4
/// with one affine step each).
pub(super) fn host_gfni() -> bool {
    std::arch::is_x86_feature_detected!("gfni")
}

/// The lane kernel for `isa` over format `K`: with `vpdpbusd` under
/// AVX512-VNNI (with VL and BW) or AVX-VNNI, the AVX2 one (AVX2, FMA, F16C)
/// under any other set; Q5 formats with GFNI when `gfni` (the VNNI sets
/// only, whose hosts mostly have it): the dispatch passes `lane_gfni`,
/// the rule kernel descriptions name too; tests force either. The caller
/// checks that the host has the sets (and GFNI when `gfni`).
pub(super) fn kernel<const K: u8, const R: usize, const C: usize>(
    isa: Isa,
    gfni: bool,
) -> LaneTile<R, C> {
    let gfni = gfni && kind::five_bit(K);
    match (isa, gfni) {
        (Isa::Avx512 { vnni: true }, true) => with_vnni_gfni::tile::<K, R, C>,
        (Isa::Avx512 { vnni: true }, false) => with_vnni::tile::<K, R, C>,
        (Isa::AvxVnni, true) => with_avx_vnni_gfni::tile::<K, R, C>,
        (Isa::AvxVnni, false) => with_avx_vnni::tile::<K, R, C>,
        _ => plain::tile::<K, R, C>,
    }
}

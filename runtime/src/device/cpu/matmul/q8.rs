//! Activations (src1 rows) quantized to 8 bits for the integer kernels.
//!
//! A row of `k` values (k a multiple of 32) is `k / 32` blocks of 32; block b
//! has an f32 scale `d[b] = amax / 127`, quants `qs = round_ties_even(x / d)`
//! (computed as `x * (1 / d)`, 0 when d = 0) in -127..=127, and
//! `s8[b] = d[b] * sum(qs of block b) / 8`: the block sum that Q4_0's offset
//! and Q4_1's minimum need, divided by 8 so that adding it to each of a SIMD
//! accumulator's 8 lanes sums to the whole.
//!
//! Row layout ([`row_bytes`] bytes, a multiple of 64 so rows stay aligned):
//! `qs: [i8; k]`, then `d: [f32; k / 32]`, then `s8: [f32; k / 32]`, then
//! `qp: [i8; k]`: the quants again, regrouped for the AVX2 kernel over groups
//! of [`GROUP`] blocks. For the group of blocks `b..b + 8` (256 bytes) and
//! `i` in 0..4, 64 bytes: the low halves (values 0..16) of blocks `b + i` and
//! `b + 4 + i`, then their high halves (values 16..32); so one 32-byte load
//! meets the nibbles of two weight blocks as one vector holds them. A last
//! partial group takes 256 bytes too; the places of its missing blocks hold
//! garbage (the kernel multiplies them by zero weights).
//!
//! Then, from the next multiple of 64 bytes, `ql: [i8; 256 * groups]`: the
//! quants once more, for the kernel over weights repacked at load
//! ([`super::packed`]): for group `g` (blocks `b = 8 g ..`), 8 vectors of 32
//! bytes; in vector `v`, the 4 bytes of lane `j` are quants `4 v .. 4 v + 4`
//! of block `b + j` (an 8 x 8 transpose of the group's 4-byte words), so each
//! 32-bit lane of an integer product belongs to one block. Lanes of blocks
//! past the row's end are zero. A last group of `t <= 4` blocks
//! ([`PAIRED_TAIL`]) is laid out in pairs instead: for pair `p` (blocks
//! `b + 2p`, `b + 2p + 1`), 64 bytes: both blocks' quants 0..16, then both
//! blocks' quants 16..32 (zeros for a block past the end), as the repacked
//! weights' nibbles of such a group come in plain block order.
//!
//! Invariant: the scalar and the AVX2 quantizers give identical bytes (same
//! f32 operations, same rounding), so the dot kernels can be compared alone.

use super::isa::Isa;

/// Values per block.
pub const QK: usize = 32;

/// Blocks per group in the regrouped quants `qp` and `ql`.
pub const GROUP: usize = 8;

/// A last group of at most this many blocks is laid out in pairs in `ql`
/// (and in repacked weights).
pub const PAIRED_TAIL: usize = GROUP / 2;

/// Bytes of one quantized row of `k` values.
pub fn row_bytes(k: usize) -> usize {
    lanes_offset(k) + groups_bytes(k)
}

/// Bytes of `qp` (and of `ql`) for rows of `k` values: whole groups.
fn groups_bytes(k: usize) -> usize {
    (k / QK).div_ceil(GROUP) * GROUP * QK
}

/// Offset of `ql` in a row of `k` values (aligned to 64).
fn lanes_offset(k: usize) -> usize {
    (k + 8 * (k / QK) + groups_bytes(k)).next_multiple_of(64)
}

/// A quantized row, as the dot kernels read it.
#[derive(Clone, Copy, Debug)]
pub struct QRow {
    /// `k` quants.
    pub qs: *const i8,
    /// `k / 32` scales.
    pub d: *const f32,
    /// `k / 32` scaled block sums over 8.
    pub s8: *const f32,
    /// The quants regrouped by groups of 8 blocks (module doc).
    pub qp: *const i8,
    /// The quants transposed by groups of 8 blocks, one block per 32-bit
    /// lane (module doc).
    pub ql: *const i8,
}

impl QRow {
    /// The row of `k` values stored at `base`.
    ///
    /// # Safety
    /// `base` points to [`row_bytes`]`(k)` bytes, aligned to 4.
    pub unsafe fn at(base: *const u8, k: usize) -> QRow {
        // SAFETY: the offsets are inside the row by its layout.
        unsafe {
            QRow {
                qs: base as *const i8,
                d: base.add(k) as *const f32,
                s8: base.add(k + 4 * (k / QK)) as *const f32,
                qp: base.add(k + 8 * (k / QK)) as *const i8,
                ql: base.add(lanes_offset(k)) as *const i8,
            }
        }
    }
}

/// Quantizes `x` (a multiple of 32 values) into the row at `out`.
///
/// # Safety
/// `out` points to [`row_bytes`]`(x.len())` writable bytes aligned to 4;
/// `isa` is supported by the host.
pub unsafe fn quantize_row(x: &[f32], out: *mut u8, isa: Isa) {
    let k = x.len();
    // SAFETY: out has row_bytes(k) bytes (caller's contract).
    let row = unsafe { QRow::at(out, k) };
    for (b, block) in x.chunks_exact(QK).enumerate() {
        // SAFETY: block b's 32 quants and its two scales lie inside the row;
        // the host has AVX2 when `isa` says so.
        unsafe {
            let qs = row.qs.add(b * QK) as *mut i8;
            let (d, sum) = match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 { .. } => x86::quantize_block(block, qs),
                _ => quantize_block(block, qs),
            };
            *(row.d.add(b) as *mut f32) = d;
            *(row.s8.add(b) as *mut f32) = d * sum as f32 * 0.125;
        }
    }
    let nb = k / QK;
    for g in 0..nb.div_ceil(GROUP) {
        let b = g * GROUP;
        for i in 0..GROUP / 2 {
            for (half, o) in [0, QK / 2].into_iter().enumerate() {
                for (side, blk) in [b + i, b + GROUP / 2 + i].into_iter().enumerate() {
                    if blk >= nb {
                        continue;
                    }
                    // SAFETY: 16 quants of block blk (inside the row) go to
                    // 16 bytes inside the group's 256 bytes of qp.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            row.qs.add(blk * QK + o),
                            (row.qp as *mut i8).add(b * QK + i * 64 + half * 32 + side * 16),
                            QK / 2,
                        )
                    };
                }
            }
        }
        // SAFETY: the group's 256 bytes of ql lie inside the row.
        let ql = unsafe { std::slice::from_raw_parts_mut((row.ql as *mut i8).add(b * QK), 256) };
        ql.fill(0);
        let t = GROUP.min(nb - b);
        for blk in b..b + t {
            // SAFETY: block blk's quants lie inside qs.
            let q = unsafe { std::slice::from_raw_parts(row.qs.add(blk * QK), QK) };
            let j = blk - b;
            if t <= PAIRED_TAIL {
                let (p, side) = (j / 2, j % 2);
                for half in 0..2 {
                    let at = 64 * p + 32 * half + 16 * side;
                    ql[at..at + 16].copy_from_slice(&q[16 * half..16 * half + 16]);
                }
            } else {
                for v in 0..QK / 4 {
                    ql[32 * v + 4 * j..32 * v + 4 * j + 4].copy_from_slice(&q[4 * v..4 * v + 4]);
                }
            }
        }
    }
}

/// One block: writes 32 quants, returns (scale, sum of the quants).
///
/// # Safety
/// `qs` has 32 writable bytes; `x` has 32 values.
unsafe fn quantize_block(x: &[f32], qs: *mut i8) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0;
    for (i, &v) in x.iter().enumerate() {
        let q = (v * id).round_ties_even() as i8;
        sum += i32::from(q);
        // SAFETY: i < 32.
        unsafe { *qs.add(i) = q };
    }
    (d, sum)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// As the scalar `quantize_block`, 8 values per instruction.
    ///
    /// # Safety
    /// `qs` has 32 writable bytes; `x` has 32 values.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_block(x: &[f32], qs: *mut i8) -> (f32, i32) {
        let p = x.as_ptr();
        // SAFETY: x has 32 values.
        let v = unsafe { [0, 8, 16, 24].map(|o| _mm256_loadu_ps(p.add(o))) };
        let sign = _mm256_set1_ps(-0.0);
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        let amax = _mm_cvtss_f32(m);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = v.map(|v| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v, id),
            );
            _mm256_cvtps_epi32(r)
        });
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        // packs interleave 128-bit lanes: undo with one cross-lane permute.
        let w = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: qs has 32 writable bytes.
        unsafe { _mm256_storeu_si256(qs as *mut __m256i, w) };
        (d, _mm_cvtsi128_si32(s))
    }
}

//! Bit fields of the K-quant super-blocks, decoded one at a time (the
//! layouts are documented in `kernels::quant::{q4_k, q5_k, q6_k}`, whose
//! `dequantize_block` is the reference these agree with).
//!
//! Q4_K and Q5_K keep eight 6-bit scales and eight 6-bit mins in 12 bytes:
//! as three little-endian words `w0, w1, w2`, the bytes of `w0 & 0x3f3f3f3f`
//! are scales 0..4, of `w1 & 0x3f3f3f3f` mins 0..4; scales 4..8 take their
//! low 4 bits from the low nibbles of `w2` and their top 2 from the top bits
//! of `w0`'s bytes, mins 4..8 the high nibbles of `w2` and the top bits of
//! `w1`'s bytes.

/// Scales and mins of a Q4_K / Q5_K super-block, 8 bytes each, as two
/// little-endian words (byte j = sub-block j), from its 12 packed bytes.
pub fn q4k_scales_mins_words(packed: &[u8; 12]) -> (u64, u64) {
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let (low6, top2) = (0x3f3f_3f3f, 0x0303_0303);
    let sc_hi = (w2 & 0x0f0f_0f0f) | (((w0 >> 6) & top2) << 4);
    let m_hi = ((w2 >> 4) & 0x0f0f_0f0f) | (((w1 >> 6) & top2) << 4);
    let sc = u64::from(w0 & low6) | (u64::from(sc_hi) << 32);
    let m = u64::from(w1 & low6) | (u64::from(m_hi) << 32);
    (sc, m)
}

/// [`q4k_scales_mins_words`] as arrays: (scales, mins) of sub-blocks 0..8.
pub fn q4k_scales_mins(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let (sc, m) = q4k_scales_mins_words(packed);
    (sc.to_le_bytes(), m.to_le_bytes())
}

/// Q5_K: the fifth bit of value `32 j + l` (sub-block `j`, `l` < 32) from
/// the block's 32 bytes `qh`: bit `j` of `qh[l]`.
pub fn q5k_fifth_bit(qh: &[u8], j: usize, l: usize) -> u8 {
    (qh[l] >> j) & 1
}

/// Q6_K: the unsigned 6-bit quant (0..=63, the value's `u` before the offset
/// of 32) of value `v` (< 256) of the 210-byte block `blk`.
pub fn q6k_quant(blk: &[u8], v: usize) -> u8 {
    let (half, quarter, l) = (v / 128, v % 128 / 32, v % 32);
    let low = (blk[64 * half + 32 * (quarter % 2) + l] >> (4 * (quarter / 2))) & 0x0F;
    let high = (blk[128 + 32 * half + l] >> (2 * quarter)) & 3;
    low | (high << 4)
}

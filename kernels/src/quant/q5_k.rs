//! Q5_K: 256 values in 176 bytes (8 sub-blocks of 32).
//!
//! ```text
//! offset  size  field
//! 0       2     d       f16 scale of the sub-block scales
//! 2       2     dmin    f16 scale of the sub-block mins
//! 4       12    scales  8 six-bit scales + 8 six-bit mins, packed as in Q4_K
//! 16      32    qh      fifth bits
//! 48      128   qs      low 4 bits, laid out as Q4_K's qs
//! ```
//! Chunk c (values 64c..64c+64): value 64c + l has low bits `qs[32c + l] & 0xF`
//! and fifth bit `(qh[l] >> 2c) & 1`; value 64c + 32 + l has low bits
//! `qs[32c + l] >> 4` and fifth bit `(qh[l] >> (2c + 1)) & 1`; q in 0..=31.
//! value = (d*sc) * q - (dmin*m), computed in f32 in that order.
//!
//! The quantizer is the Q4_K encoder with 31 levels (`k_common::encode_affine`);
//! the same error bound holds (within `d*sc/2`, or `dmin/2` below the offset).

use super::k_common::{QK_K, encode_affine, pack_scale_min_k4, scale_min_k4};
use super::{read_f16, write_f16};

/// Values per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 176;

/// Decodes one block (176 bytes) into 256 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    let dmin = read_f16(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..BLOCK_BYTES];
    for c in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * c, scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
        let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let y = &mut out[64 * c..64 * (c + 1)];
        for l in 0..32 {
            let byte = qs[32 * c + l];
            let q1 = (byte & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4);
            let q2 = (byte >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
            y[l] = d1 * f32::from(q1) - min1;
            y[l + 32] = d2 * f32::from(q2) - min2;
        }
    }
}

/// Encodes 256 values into one block.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let enc = encode_affine(values, 31);
    write_f16(block, 0, enc.d);
    write_f16(block, 2, enc.dmin);
    block[4..16].copy_from_slice(&pack_scale_min_k4(&enc.sc, &enc.m));
    block[16..48].fill(0);
    for c in 0..4 {
        for l in 0..32 {
            let (q1, q2) = (enc.q[64 * c + l], enc.q[64 * c + 32 + l]);
            block[48 + 32 * c + l] = (q1 & 0x0F) | ((q2 & 0x0F) << 4);
            block[16 + l] |= ((q1 >> 4) << (2 * c)) | ((q2 >> 4) << (2 * c + 1));
        }
    }
}

//! Q4_K: 256 values in 144 bytes (8 sub-blocks of 32).
//!
//! ```text
//! offset  size  field
//! 0       2     d       f16 scale of the sub-block scales
//! 2       2     dmin    f16 scale of the sub-block mins
//! 4       12    scales  8 six-bit scales + 8 six-bit mins (see get_scale_min_k4 below)
//! 16      128   qs      4 chunks of 32 bytes, one per 64 values
//! ```
//! Chunk c (values 64c..64c+64) is `qs[32c..32c+32]`: byte l's low nibble is value
//! 64c + l (sub-block 2c), its high nibble value 64c + 32 + l (sub-block 2c + 1).
//! Sub-block j's scale `sc` and min `m` (ggml's `get_scale_min_k4`): for j < 4,
//! `sc = scales[j] & 63`, `m = scales[j+4] & 63`; otherwise
//! `sc = (scales[j+4] & 0xF) | (scales[j-4] >> 6) << 4` and
//! `m = (scales[j+4] >> 4) | (scales[j] >> 6) << 4`.
//! value = (d*sc) * q - (dmin*m), computed in f32 in that order.
//!
//! The quantizer is a simple valid encoder (not ggml's iterative search); see
//! `k_common::encode_affine`. Error bound (tested): every value is within
//! `d*sc/2` of its reconstruction, or within `dmin/2` when it lies below its
//! sub-block's offset `-dmin*m` (d, dmin, sc, m as decoded from the block).

use super::k_common::{QK_K, encode_affine, pack_scale_min_k4, scale_min_k4};
use super::{read_f16, write_f16};

/// Values per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 144;

/// Decodes one block (144 bytes) into 256 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    let dmin = read_f16(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..BLOCK_BYTES];
    for c in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * c, scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
        let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let chunk = &qs[32 * c..32 * (c + 1)];
        let y = &mut out[64 * c..64 * (c + 1)];
        for (l, &byte) in chunk.iter().enumerate() {
            y[l] = d1 * f32::from(byte & 0x0F) - min1;
            y[l + 32] = d2 * f32::from(byte >> 4) - min2;
        }
    }
}

/// Encodes 256 values into one block.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let enc = encode_affine(values, 15);
    write_f16(block, 0, enc.d);
    write_f16(block, 2, enc.dmin);
    block[4..16].copy_from_slice(&pack_scale_min_k4(&enc.sc, &enc.m));
    for c in 0..4 {
        for l in 0..32 {
            block[16 + 32 * c + l] = enc.q[64 * c + l] | (enc.q[64 * c + 32 + l] << 4);
        }
    }
}

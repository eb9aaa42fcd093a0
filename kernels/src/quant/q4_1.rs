//! Q4_1: 32 values in 20 bytes.
//!
//! ```text
//! offset  size  field
//! 0       2     d   f16 scale
//! 2       2     m   f16 minimum
//! 4       16    qs  byte j: low nibble = q[j], high nibble = q[j + 16]
//! ```
//! value j = `q[j] * d + m`, q in 0..=15.
//!
//! Quantization (ggml's `quantize_row_q4_1_ref`): `d = (max - min) / 15`, `m = min`,
//! `q = min(15, trunc((x - min) / d + 0.5))`.
//!
//! Error bound (tested): `|x - value| <= d/2 + 15 |d - f16(d)| + |min - f16(min)|`.

use super::{read_f16, write_f16};
use half::f16;

/// Values per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 20;

/// Decodes one block (20 bytes) into 32 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    let m = read_f16(block, 2);
    let (low, high) = out.split_at_mut(BLOCK_ELEMS / 2);
    for (j, &byte) in block[4..BLOCK_BYTES].iter().enumerate() {
        low[j] = f32::from(byte & 0x0F) * d + m;
        high[j] = f32::from(byte >> 4) * d + m;
    }
}

/// Encodes 32 values into one block, as ggml's reference quantizer does.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let min = values.iter().fold(f32::MAX, |m, &v| m.min(v));
    let max = values.iter().fold(-f32::MAX, |m, &v| m.max(v));
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    write_f16(block, 0, f16::from_f32(d));
    write_f16(block, 2, f16::from_f32(min));
    let nibble = |x: f32| (((x - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    for j in 0..BLOCK_ELEMS / 2 {
        block[4 + j] = nibble(values[j]) | (nibble(values[j + BLOCK_ELEMS / 2]) << 4);
    }
}

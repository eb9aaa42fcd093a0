//! Q8_0: 32 values in 34 bytes.
//!
//! ```text
//! offset  size  field
//! 0       2     d   f16 scale
//! 2       32    qs  i8 quants, value j = qs[j] * d
//! ```
//! Quantization (ggml's `quantize_row_q8_0_ref`): `amax = max |x|`, `d = amax / 127`,
//! `q = round(x / d)` (half away from zero; computed as `x * (1/d)` in f32, 0 when d = 0).
//!
//! Error bound (tested): `|x - value| <= d/2 + 127 |d - f16(d)|` plus f32 rounding,
//! where `d = amax / 127` and `|d - f16(d)| <= d * 2^-11` for normal f16.

use super::{read_f16, write_f16};
use half::f16;

/// Values per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;

/// Decodes one block (`block`: 34 bytes) into 32 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    for (y, &q) in out.iter_mut().zip(&block[2..BLOCK_BYTES]) {
        *y = f32::from(q as i8) * d;
    }
}

/// Encodes 32 values into one block, as ggml's reference quantizer does.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    write_f16(block, 0, f16::from_f32(d));
    for (q, &x) in block[2..BLOCK_BYTES].iter_mut().zip(values) {
        *q = ((x * id).round() as i8) as u8;
    }
}

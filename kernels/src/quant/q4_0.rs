//! Q4_0: 32 values in 18 bytes.
//!
//! ```text
//! offset  size  field
//! 0       2     d   f16 scale
//! 2       16    qs  byte j: low nibble = q[j], high nibble = q[j + 16]
//! ```
//! value j = `(q[j] - 8) * d`, q in 0..=15.
//!
//! Quantization (ggml's `quantize_row_q4_0_ref`): `max` is the value of largest
//! magnitude *with its sign*; `d = max / -8` (so `max` itself encodes as q = 0, exactly
//! up to the f16 rounding of d); `q = min(15, trunc(x / d + 8.5))`.
//!
//! Error bound (tested): `|x - value| <= |d|/2 + 8 |d - f16(d)|` for values with
//! `x/d < 7.5`; values of the opposite sign to `max` with `x/d >= 7.5` clamp to
//! q = 15 and are off by at most `|d| + 8 |d - f16(d)|`.

use super::{read_f16, signed_amax, write_f16};
use half::f16;

/// Values per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;

/// Decodes one block (18 bytes) into 32 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    let (low, high) = out.split_at_mut(BLOCK_ELEMS / 2);
    for (j, &byte) in block[2..BLOCK_BYTES].iter().enumerate() {
        low[j] = f32::from(i16::from(byte & 0x0F) - 8) * d;
        high[j] = f32::from(i16::from(byte >> 4) - 8) * d;
    }
}

/// Encodes 32 values into one block, as ggml's reference quantizer does.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let max = signed_amax(values);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    write_f16(block, 0, f16::from_f32(d));
    let nibble = |x: f32| ((x * id + 8.5) as i8).clamp(0, 15) as u8;
    for j in 0..BLOCK_ELEMS / 2 {
        block[2 + j] = nibble(values[j]) | (nibble(values[j + BLOCK_ELEMS / 2]) << 4);
    }
}

//! Q5_0: 32 values in 22 bytes.
//!
//! ```text
//! offset  size  field
//! 0       2     d   f16 scale
//! 2       4     qh  u32: bit j = fifth bit (value 16) of q[j]
//! 6       16    qs  byte j: low nibble = low 4 bits of q[j], high nibble = of q[j + 16]
//! ```
//! value j = `(q[j] - 16) * d`, q in 0..=31.
//!
//! Quantization (ggml's `quantize_row_q5_0_ref`): `max` is the value of largest
//! magnitude *with its sign*; `d = max / -16`; `q = min(31, trunc(x / d + 16.5))`.
//!
//! Error bound (tested): `|x - value| <= |d|/2 + 16 |d - f16(d)|` for values with
//! `x/d < 15.5`; values of the opposite sign to `max` beyond clamp to q = 31 and are
//! off by at most `|d| + 16 |d - f16(d)|`.

use super::five_bit::{Quants, pack, unpack};
use super::{read_f16, signed_amax, write_f16};
use half::f16;

/// Values per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 22;

/// Decodes one block (22 bytes) into 32 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    for (v, q) in out.iter_mut().zip(unpack(&block[2..BLOCK_BYTES])) {
        *v = f32::from(i16::from(q) - 16) * d;
    }
}

/// Encodes 32 values into one block, as ggml's reference quantizer does.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let max = signed_amax(values);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    write_f16(block, 0, f16::from_f32(d));
    let mut q: Quants = [0; BLOCK_ELEMS];
    for (q, &x) in q.iter_mut().zip(values) {
        *q = ((x * id + 16.5) as i8).clamp(0, 31) as u8;
    }
    pack(&q, &mut block[2..BLOCK_BYTES]);
}

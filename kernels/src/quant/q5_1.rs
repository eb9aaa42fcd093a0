//! Q5_1: 32 values in 24 bytes.
//!
//! ```text
//! offset  size  field
//! 0       2     d   f16 scale
//! 2       2     m   f16 minimum
//! 4       4     qh  u32: bit j = fifth bit (value 16) of q[j]
//! 8       16    qs  byte j: low nibble = low 4 bits of q[j], high nibble = of q[j + 16]
//! ```
//! value j = `q[j] * d + m`, q in 0..=31.
//!
//! Quantization (ggml's `quantize_row_q5_1_ref`): `d = (max - min) / 31`, `m = min`,
//! `q = min(31, trunc((x - min) / d + 0.5))`.
//!
//! Error bound (tested): `|x - value| <= d/2 + 31 |d - f16(d)| + |min - f16(min)|`.

use super::five_bit::{Quants, pack, unpack};
use super::{read_f16, write_f16};
use half::f16;

/// Values per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 24;

/// Decodes one block (24 bytes) into 32 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 0);
    let m = read_f16(block, 2);
    for (v, q) in out.iter_mut().zip(unpack(&block[4..BLOCK_BYTES])) {
        *v = f32::from(q) * d + m;
    }
}

/// Encodes 32 values into one block, as ggml's reference quantizer does.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let min = values.iter().fold(f32::MAX, |m, &v| m.min(v));
    let max = values.iter().fold(-f32::MAX, |m, &v| m.max(v));
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    write_f16(block, 0, f16::from_f32(d));
    write_f16(block, 2, f16::from_f32(min));
    let mut q: Quants = [0; BLOCK_ELEMS];
    for (q, &x) in q.iter_mut().zip(values) {
        *q = (((x - min) * id + 0.5) as i8).clamp(0, 31) as u8;
    }
    pack(&q, &mut block[4..BLOCK_BYTES]);
}

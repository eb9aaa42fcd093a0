//! Plain (one value per block) formats.
//!
//! - F32: IEEE binary32, 4 bytes little-endian;
//! - F16: IEEE binary16, 2 bytes; encoding rounds to nearest, ties to even;
//! - BF16: the top 16 bits of a binary32, 2 bytes; encoding rounds to nearest, ties
//!   to even (NaN stays NaN), as ggml's `GGML_FP32_TO_BF16`;
//! - I32: two's complement, 4 bytes. Encoding rounds half away from zero and
//!   saturates (NaN becomes 0); decoding gives the value (as f32 in
//!   [`super::dequantize_row`], exactly as f64 in [`read_value`]).
//!
//! [`read_value`] and [`write_value`] convert one element straight between bytes
//! and f64, rounding once: [`f64_to_f16`] and [`f64_to_bf16`] are correctly rounded
//! (half's own `from_f64` goes through f32 or drops low bits, so it can round twice).

use half::{bf16, f16};
use ir::DType;

/// The value of the one element of plain type `dtype` at the start of `bytes`.
///
/// Panics for block-quantized dtypes (they have no single-element encoding).
pub fn read_value(dtype: DType, bytes: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes(word(bytes))),
        DType::F16 => f16::from_le_bytes([bytes[0], bytes[1]]).to_f64(),
        DType::BF16 => bf16::from_le_bytes([bytes[0], bytes[1]]).to_f64(),
        DType::I32 => f64::from(i32::from_le_bytes(word(bytes))),
        q => panic!("read_value: {q} is block-quantized; decode whole rows with dequantize_row"),
    }
}

/// Writes `value` as one element of plain type `dtype` at the start of `bytes`,
/// rounding once from f64 to the destination type.
///
/// Panics for block-quantized dtypes.
pub fn write_value(dtype: DType, value: f64, bytes: &mut [u8]) {
    match dtype {
        DType::F32 => bytes[..4].copy_from_slice(&(value as f32).to_le_bytes()),
        DType::F16 => bytes[..2].copy_from_slice(&f64_to_f16(value).to_le_bytes()),
        DType::BF16 => bytes[..2].copy_from_slice(&f64_to_bf16(value).to_le_bytes()),
        DType::I32 => bytes[..4].copy_from_slice(&(value.round() as i32).to_le_bytes()),
        q => panic!("write_value: {q} is block-quantized; encode whole rows with quantize_row"),
    }
}

/// `value` rounded to the nearest f16, ties to even (once, from f64).
pub fn f64_to_f16(value: f64) -> f16 {
    f16::from_f32(f64_to_f32_round_to_odd(value))
}

/// `value` rounded to the nearest bf16, ties to even (once, from f64).
pub fn f64_to_bf16(value: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_round_to_odd(value))
}

/// `value` as f32 rounded "to odd": truncated toward zero, with the last mantissa
/// bit set when inexact. Rounding that to nearest-even in a format at least two
/// bits narrower (f16: 11 bits, bf16: 8, against f32's 24) equals rounding `value`
/// directly, because the odd last bit keeps inexact values off the ties.
fn f64_to_f32_round_to_odd(value: f64) -> f32 {
    let nearest = value as f32;
    if value.is_nan() || f64::from(nearest) == value {
        return nearest;
    }
    let mut bits = nearest.to_bits();
    if f64::from(nearest).abs() > value.abs() {
        // One step toward zero (sign-magnitude bits); inf steps to the largest finite.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

fn word(bytes: &[u8]) -> [u8; 4] {
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

pub(super) fn decode_f32(block: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes(word(block));
}

pub(super) fn decode_f16(block: &[u8], out: &mut [f32]) {
    out[0] = f16::from_le_bytes([block[0], block[1]]).to_f32();
}

pub(super) fn decode_bf16(block: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_le_bytes([block[0], block[1]]).to_f32();
}

pub(super) fn decode_i32(block: &[u8], out: &mut [f32]) {
    out[0] = i32::from_le_bytes(word(block)) as f32;
}

pub(super) fn encode_f32(values: &[f32], block: &mut [u8]) {
    block.copy_from_slice(&values[0].to_le_bytes());
}

pub(super) fn encode_f16(values: &[f32], block: &mut [u8]) {
    block.copy_from_slice(&f16::from_f32(values[0]).to_le_bytes());
}

pub(super) fn encode_bf16(values: &[f32], block: &mut [u8]) {
    block.copy_from_slice(&bf16::from_f32(values[0]).to_le_bytes());
}

pub(super) fn encode_i32(values: &[f32], block: &mut [u8]) {
    block.copy_from_slice(&(values[0].round() as i32).to_le_bytes());
}

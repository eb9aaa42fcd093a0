//! Element formats: rows of values as bytes, and back.
//!
//! Every [`DType`] is a sequence of blocks of `block_elems` values stored in
//! `block_bytes` bytes (plain types are blocks of one value). All multi-byte fields
//! are little-endian; scales written "f16" are IEEE binary16. The byte layouts are
//! ggml's (and so GGUF's); each format's module documents its own:
//!
//! | dtype | values / bytes | module |
//! | --- | --- | --- |
//! | F32, F16, BF16, I32 | 1 / 4, 2, 2, 4 | [`plain`] |
//! | Q8_0 | 32 / 34 | [`q8_0`] |
//! | Q4_0 | 32 / 18 | [`q4_0`] |
//! | Q4_1 | 32 / 20 | [`q4_1`] |
//! | Q5_0 | 32 / 22 | [`q5_0`] |
//! | Q5_1 | 32 / 24 | [`q5_1`] |
//! | Q4_K | 256 / 144 | [`q4_k`] |
//! | Q5_K | 256 / 176 | [`q5_k`] |
//! | Q6_K | 256 / 210 | [`q6_k`] |
//!
//! Invariants:
//! - [`dequantize_row`] is exactly ggml's dequantization, including its f32
//!   operation order, so values agree bit for bit with ggml's `to_float`;
//! - [`quantize_row`] for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follows ggml's reference quantizers
//!   (`quantize_row_*_ref`); for the K-quants it is a simpler valid encoder (min/max
//!   per sub-block, scales rounded up so every sub-block's range is covered) whose
//!   error bound is stated in its module and tested;
//! - a row is always a whole number of blocks: both functions panic, naming the
//!   dtype and lengths, when the slices do not match.

use half::f16;
use ir::DType;

pub mod plain;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

mod five_bit;
mod k_common;
#[cfg(test)]
mod tests_blocks;
#[cfg(test)]
mod tests_round_trip;

/// Decodes `out.len()` values of `dtype` from `src`, which must hold exactly
/// `out.len() / block_elems` blocks. I32 values become their value as f32.
///
/// Panics when `out.len()` is not a whole number of blocks or `src` has another length.
pub fn dequantize_row(dtype: DType, src: &[u8], out: &mut [f32]) {
    let (elems, bytes) = block_geometry(dtype, "dequantize_row", src.len(), out.len());
    let decode = match dtype {
        DType::F32 => plain::decode_f32,
        DType::F16 => plain::decode_f16,
        DType::BF16 => plain::decode_bf16,
        DType::I32 => plain::decode_i32,
        DType::Q8_0 => q8_0::dequantize_block,
        DType::Q4_0 => q4_0::dequantize_block,
        DType::Q4_1 => q4_1::dequantize_block,
        DType::Q5_0 => q5_0::dequantize_block,
        DType::Q5_1 => q5_1::dequantize_block,
        DType::Q4_K => q4_k::dequantize_block,
        DType::Q5_K => q5_k::dequantize_block,
        DType::Q6_K => q6_k::dequantize_block,
    };
    for (block, values) in src.chunks_exact(bytes).zip(out.chunks_exact_mut(elems)) {
        decode(block, values);
    }
}

/// Encodes the values of `src` as `dtype` into `out`, which must be exactly
/// `src.len() / block_elems` blocks long. Plain types round to nearest (ties to
/// even for F16/BF16; I32 rounds half away from zero and saturates, NaN -> 0).
///
/// Panics when `src.len()` is not a whole number of blocks or `out` has another length.
pub fn quantize_row(dtype: DType, src: &[f32], out: &mut [u8]) {
    let (elems, bytes) = block_geometry(dtype, "quantize_row", out.len(), src.len());
    let encode = match dtype {
        DType::F32 => plain::encode_f32,
        DType::F16 => plain::encode_f16,
        DType::BF16 => plain::encode_bf16,
        DType::I32 => plain::encode_i32,
        DType::Q8_0 => q8_0::quantize_block,
        DType::Q4_0 => q4_0::quantize_block,
        DType::Q4_1 => q4_1::quantize_block,
        DType::Q5_0 => q5_0::quantize_block,
        DType::Q5_1 => q5_1::quantize_block,
        DType::Q4_K => q4_k::quantize_block,
        DType::Q5_K => q5_k::quantize_block,
        DType::Q6_K => q6_k::quantize_block,
    };
    for (values, block) in src.chunks_exact(elems).zip(out.chunks_exact_mut(bytes)) {
        encode(values, block);
    }
}

/// The block size in values and bytes, after checking that `n_bytes` bytes are
/// exactly the blocks of `n_values` values.
fn block_geometry(dtype: DType, what: &str, n_bytes: usize, n_values: usize) -> (usize, usize) {
    let elems = dtype.block_elems() as usize;
    let bytes = dtype.block_bytes() as usize;
    assert!(
        n_values.is_multiple_of(elems),
        "{what}: {n_values} values are not a whole number of {dtype} blocks of {elems}"
    );
    let want = n_values / elems * bytes;
    assert!(
        n_bytes == want,
        "{what}: {n_values} {dtype} values take {want} bytes, the byte slice has {n_bytes}"
    );
    (elems, bytes)
}

/// The value of largest magnitude, with its sign (the first of equal
/// magnitudes; 0 for an empty or all-zero slice): the scale's source in
/// ggml's symmetric quantizers (Q4_0, Q5_0).
fn signed_amax(values: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in values {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The f16 at `bytes[at..at + 2]`, as f32.
fn read_f16(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Writes `value` as f16 (round to nearest even) at `bytes[at..at + 2]`.
fn write_f16(bytes: &mut [u8], at: usize, value: f16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

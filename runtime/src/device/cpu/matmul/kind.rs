//! The weight formats of the integer dot kernels (Q8_0, Q4_0, Q4_1, Q5_0,
//! Q5_1), as const generic parameters of the SIMD kernels, and the fields of
//! their blocks: what the kernels (`qdot`), the activations' layout (`q8`)
//! and the lane repack (`packed`) share, below all three.
//!
//! Invariant: the figures here are ggml's block layouts; every kernel and
//! the repack read blocks through them.

use ir::DType;

/// Q8_0: f16 d, 32 x i8.
pub const Q8_0: u8 = 0;
/// Q4_0: f16 d, 16 bytes of nibbles, value (u - 8) d.
pub const Q4_0: u8 = 1;
/// Q4_1: f16 d, f16 m, 16 bytes of nibbles, value u d + m.
pub const Q4_1: u8 = 2;
/// Q5_0: f16 d, u32 of fifth bits, 16 bytes of nibbles, value (u - 16) d.
pub const Q5_0: u8 = 3;
/// Q5_1: f16 d, f16 m, u32 of fifth bits, 16 bytes of nibbles, value u d + m.
pub const Q5_1: u8 = 4;

/// Bytes per block of `kind`.
pub const fn block_bytes(kind: u8) -> usize {
    match kind {
        Q8_0 => 34,
        Q4_0 => 18,
        Q5_0 => 22,
        Q5_1 => 24,
        _ => 20,
    }
}

/// Q5_0 or Q5_1: quants of 5 bits, the fifth in a u32 per block.
pub const fn five_bit(kind: u8) -> bool {
    kind == Q5_0 || kind == Q5_1
}

/// Q4_1 or Q5_1: an f16 minimum after the scale.
pub const fn has_min(kind: u8) -> bool {
    kind == Q4_1 || kind == Q5_1
}

/// The weight format of a dtype with an integer kernel.
pub fn weight_kind(dtype: DType) -> Option<u8> {
    match dtype {
        DType::Q8_0 => Some(Q8_0),
        DType::Q4_0 => Some(Q4_0),
        DType::Q4_1 => Some(Q4_1),
        DType::Q5_0 => Some(Q5_0),
        DType::Q5_1 => Some(Q5_1),
        _ => None,
    }
}

/// Scale fields (f16 each) before the quants in a block of `kind`: d, and
/// m for Q4_1 and Q5_1.
pub(crate) fn scale_fields(kind: u8) -> usize {
    if has_min(kind) { 2 } else { 1 }
}

/// Bytes of fifth bits after the scale fields in a block of `kind`: the u32
/// `qh` of Q5_0 and Q5_1, none for the others.
pub(crate) fn fifth_bit_bytes(kind: u8) -> usize {
    if five_bit(kind) { 4 } else { 0 }
}

/// Quant bytes in a block of `kind`: 32 for Q8_0, 16 of nibbles for Q4.
pub(crate) fn quant_bytes(kind: u8) -> usize {
    if kind == Q8_0 { 32 } else { 16 }
}

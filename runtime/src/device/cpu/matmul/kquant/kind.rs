//! The K-quant weight formats (Q4_K, Q5_K, Q6_K), as const generic
//! parameters of the kernels, and the format of a dtype.

use ir::DType;

/// Q4_K: 144 bytes per 256 values.
pub const Q4_K: u8 = 0;
/// Q5_K: 176 bytes per 256 values.
pub const Q5_K: u8 = 1;
/// Q6_K: 210 bytes per 256 values.
pub const Q6_K: u8 = 2;

/// Bytes per super-block of `kind`.
pub const fn block_bytes(kind: u8) -> usize {
    match kind {
        Q4_K => 144,
        Q5_K => 176,
        _ => 210,
    }
}

/// The weight format of a K-quant dtype.
pub fn weight_kind(dtype: DType) -> Option<u8> {
    match dtype {
        DType::Q4_K => Some(Q4_K),
        DType::Q5_K => Some(Q5_K),
        DType::Q6_K => Some(Q6_K),
        _ => None,
    }
}

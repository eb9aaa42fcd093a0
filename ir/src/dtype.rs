//! Element types with ggml's block geometry.
//!
//! Invariant: for every dtype, `block_bytes` bytes hold exactly `block_elems`
//! elements, and a row of `ne0` elements is only representable when
//! `ne0 % block_elems == 0`. These sizes are ggml's, so byte offsets and strides
//! computed here agree with ggml and with GGUF files.

use serde::{Deserialize, Serialize};

/// The element type of a tensor.
///
/// Block quantized types store `block_elems` values in `block_bytes` bytes; the
/// numeric formats are documented in `kernels::quant`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary16.
    F16,
    /// bfloat16 (the top half of an f32).
    BF16,
    /// Signed 32-bit integer (token ids, positions, row indices).
    I32,
    /// 32 values: f16 scale + 32 x i8.
    Q8_0,
    /// 32 values: f16 scale + 32 x 4-bit (offset 8).
    Q4_0,
    /// 32 values: f16 scale, f16 min + 32 x 4-bit.
    Q4_1,
    /// 256 values in 8 sub-blocks of 32 with 6-bit scales and mins.
    Q4_K,
    /// 256 values, like Q4_K with a fifth bit per value.
    Q5_K,
    /// 256 values in 16 sub-blocks of 16, 6-bit values, 8-bit scales.
    Q6_K,
    /// 32 values: f16 scale + 32 x 5-bit (offset 16). Declared last so
    /// that adding it kept the derived order of the older dtypes.
    Q5_0,
    /// 32 values: f16 scale, f16 min + 32 x 5-bit.
    Q5_1,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q5_0,
        DType::Q5_1,
    ];

    /// Elements per block (1 for plain types).
    pub const fn block_elems(self) -> u64 {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => 32,
            DType::Q4_K | DType::Q5_K | DType::Q6_K => 256,
        }
    }

    /// Bytes per block (the element size for plain types).
    pub const fn block_bytes(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
        }
    }

    /// True for block-quantized types.
    pub const fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// True for the floating-point plain types (F32, F16, BF16).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes of one row of `ne0` elements, or `None` when `ne0` is not a whole
    /// number of blocks or the row's size does not fit in a `u64`.
    pub const fn row_bytes(self, ne0: u64) -> Option<u64> {
        if !ne0.is_multiple_of(self.block_elems()) {
            return None;
        }
        (ne0 / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// The lower-case name ggml and GGUF tools print (`f32`, `q4_1`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q4_K => "q4_K",
            DType::Q5_K => "q5_K",
            DType::Q6_K => "q6_K",
        }
    }

    /// The dtype for a `ggml_type` number as stored in GGUF tensor infos.
    pub const fn from_ggml_type(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            6 => DType::Q5_0,
            7 => DType::Q5_1,
            8 => DType::Q8_0,
            12 => DType::Q4_K,
            13 => DType::Q5_K,
            14 => DType::Q6_K,
            26 => DType::I32,
            30 => DType::BF16,
            _ => return None,
        })
    }

    /// The `ggml_type` number of this dtype.
    pub const fn ggml_type(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::I32 => 26,
            DType::BF16 => 30,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_geometry_matches_ggml() {
        let expect = [
            (DType::Q8_0, 32, 34),
            (DType::Q4_0, 32, 18),
            (DType::Q4_1, 32, 20),
            (DType::Q5_0, 32, 22),
            (DType::Q5_1, 32, 24),
            (DType::Q4_K, 256, 144),
            (DType::Q5_K, 256, 176),
            (DType::Q6_K, 256, 210),
            (DType::F16, 1, 2),
        ];
        for (t, elems, bytes) in expect {
            assert_eq!((t.block_elems(), t.block_bytes()), (elems, bytes), "{t}");
        }
        assert_eq!(DType::Q4_1.row_bytes(576), Some(360));
        assert_eq!(DType::Q4_1.row_bytes(100), None);
    }

    #[test]
    fn ggml_type_numbers_round_trip() {
        for t in DType::ALL {
            assert_eq!(DType::from_ggml_type(t.ggml_type()), Some(t));
        }
        assert_eq!(DType::from_ggml_type(9), None, "q8_1 is not supported");
    }
}

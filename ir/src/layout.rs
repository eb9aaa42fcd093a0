//! Tensor layouts with ggml semantics.
//!
//! A layout is a dtype, four extents `ne` (`ne[0]` innermost) and four byte
//! strides `nb`. Invariants of a *valid* layout (checked by [`crate::verify`] and the op rules in [`crate::rules`]):
//! - every `ne[i] >= 1`;
//! - `ne[0]` is a whole number of blocks of the dtype;
//! - `nb[0]` is the dtype's block size in bytes (elements of a row are never strided:
//!   ggml rows are packed, only whole rows move), unless the tensor is a
//!   permuted view, where `nb[0]` may be any multiple of it.
//!
//! The contiguous strides are `nb0 = block bytes`, `nb1 = row bytes`,
//! `nb[i] = nb[i-1] * ne[i-1]`.

use crate::dtype::DType;
use serde::{Deserialize, Serialize};

/// Extents in ggml order (`ne[0]` innermost).
pub type Extents = [i64; 4];
/// Byte strides in ggml order.
pub type Strides = [u64; 4];

/// The dtype, extents and byte strides of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Extents, `ne[0]` innermost.
    pub ne: Extents,
    /// Byte strides.
    pub nb: Strides,
}

impl Layout {
    /// The packed (contiguous) layout of `ne`, or `None` when `ne[0]` is not a
    /// whole number of blocks or an extent is below 1.
    pub fn contiguous(dtype: DType, ne: Extents) -> Option<Layout> {
        Some(Layout {
            dtype,
            ne,
            nb: contiguous_strides(dtype, ne)?,
        })
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().map(|&n| n.max(0) as u64).product()
    }

    /// Number of rows (ne1 * ne2 * ne3).
    pub fn n_rows(&self) -> u64 {
        self.ne[1..].iter().map(|&n| n.max(0) as u64).product()
    }

    /// Bytes of one packed row of `ne[0]` elements.
    pub fn row_bytes(&self) -> u64 {
        self.dtype.row_bytes(self.ne[0].max(0) as u64).unwrap_or(0)
    }

    /// Bytes spanned from the first to one past the last element (ggml_nbytes).
    /// For permuted views this is the extent of the memory touched, not the
    /// element count times the element size.
    ///
    /// Saturates at `u64::MAX`: extents and strides come from files, and a
    /// span too large to count is too large for any buffer, so every bounds
    /// check against it fails (rather than wrapping to a small number).
    pub fn span_bytes(&self) -> u64 {
        if self.ne.iter().any(|&n| n <= 0) {
            return 0;
        }
        let bs = self.dtype.block_elems();
        let mut bytes = if bs == 1 {
            self.dtype.block_bytes()
        } else {
            (self.ne[0] as u64 / bs).saturating_mul(self.nb[0])
        };
        let first_dim = if bs == 1 { 0 } else { 1 };
        for i in first_dim..4 {
            bytes = bytes.saturating_add((self.ne[i] as u64 - 1).saturating_mul(self.nb[i]));
        }
        bytes
    }

    /// True when the strides are the packed ones (dims of extent 1 may carry
    /// any stride, as in ggml).
    pub fn is_contiguous(&self) -> bool {
        let Some(expect) = contiguous_strides(self.dtype, self.ne) else {
            return false;
        };
        (0..4).all(|i| self.ne[i] == 1 || self.nb[i] == expect[i])
    }

    /// True when `ne[0]` is not the fastest-moving dimension (ggml_is_transposed).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// True when each row's elements are packed (`nb[0]` is the block size),
    /// so a row can be read as one slice.
    pub fn rows_packed(&self) -> bool {
        self.nb[0] == self.dtype.block_bytes()
    }

    /// The layout with axes moved as ggml_permute does: source axis `i` becomes
    /// result axis `axes[i]`. `axes` must be a permutation of 0..4.
    pub fn permuted(&self, axes: [u8; 4]) -> Option<Layout> {
        if !is_permutation(axes) {
            return None;
        }
        let mut out = *self;
        for (i, &axis) in axes.iter().enumerate() {
            out.ne[axis as usize] = self.ne[i];
            out.nb[axis as usize] = self.nb[i];
        }
        Some(out)
    }

    /// Byte offset of element (i0, i1, i2, i3) for plain (non-block) dtypes,
    /// or of the block holding it for quantized ones.
    pub fn offset_of(&self, idx: [i64; 4]) -> u64 {
        let block = idx[0] as u64 / self.dtype.block_elems();
        block * self.nb[0] + (1..4).map(|i| idx[i] as u64 * self.nb[i]).sum::<u64>()
    }
}

/// The packed strides of `ne` for `dtype`.
pub fn contiguous_strides(dtype: DType, ne: Extents) -> Option<Strides> {
    if ne.iter().any(|&n| n < 1) {
        return None;
    }
    let row = dtype.row_bytes(ne[0] as u64)?;
    let nb1 = row;
    let nb2 = nb1.checked_mul(ne[1] as u64)?;
    let nb3 = nb2.checked_mul(ne[2] as u64)?;
    nb3.checked_mul(ne[3] as u64)?;
    Some([dtype.block_bytes(), nb1, nb2, nb3])
}

/// True when `axes` holds each of 0, 1, 2, 3 exactly once.
pub fn is_permutation(axes: [u8; 4]) -> bool {
    let mut seen = [false; 4];
    for a in axes {
        if a > 3 || seen[a as usize] {
            return false;
        }
        seen[a as usize] = true;
    }
    true
}

/// Formats extents as `[a, b, c, d]` for error messages.
pub fn fmt_ne(ne: &Extents) -> String {
    format!("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_follow_ggml() {
        let l = Layout::contiguous(DType::F32, [64, 8, 128, 1]).unwrap();
        assert_eq!(l.nb, [4, 256, 2048, 262144]);
        assert_eq!(l.span_bytes(), 262144);
        let q = Layout::contiguous(DType::Q4_1, [576, 576, 1, 1]).unwrap();
        assert_eq!(q.nb, [20, 360, 207360, 207360]);
        assert_eq!(q.span_bytes(), 207360);
        assert!(Layout::contiguous(DType::Q8_0, [33, 1, 1, 1]).is_none());
    }

    #[test]
    fn a_span_too_large_to_count_saturates() {
        let mut l = Layout::contiguous(DType::F32, [32, 22, 1, 1]).unwrap();
        l.nb[1] = 4_666_666_666_666_666_666;
        assert_eq!(l.span_bytes(), u64::MAX);
        let mut q = Layout::contiguous(DType::Q4_0, [64, 2, 1, 1]).unwrap();
        q.nb[0] = u64::MAX / 2;
        assert_eq!(q.span_bytes(), u64::MAX);
    }

    #[test]
    fn permute_matches_ggml_reference_graph() {
        // l0.v3 [64, 8, 128] permuted (1, 2, 0, 3) is ggml's [128, 64, 8] with
        // strides [2048, 4, 256, 262144] (references/ggml/llama2l-graph.json N5).
        let v3 = Layout::contiguous(DType::F32, [64, 8, 128, 1]).unwrap();
        let p = v3.permuted([1, 2, 0, 3]).unwrap();
        assert_eq!(p.ne, [128, 64, 8, 1]);
        assert_eq!(p.nb, [2048, 4, 256, 262144]);
        assert!(!p.is_contiguous());
        assert!(p.is_transposed());
        assert_eq!(p.span_bytes(), v3.span_bytes());
        assert!(v3.permuted([0, 0, 1, 2]).is_none());
    }

    #[test]
    fn permute_round_trips() {
        let l = Layout::contiguous(DType::F16, [3, 5, 7, 2]).unwrap();
        let axes = [2, 0, 3, 1];
        let mut inverse = [0u8; 4];
        for (i, &a) in axes.iter().enumerate() {
            inverse[a as usize] = i as u8;
        }
        assert_eq!(l.permuted(axes).unwrap().permuted(inverse).unwrap(), l);
    }

    #[test]
    fn unit_dims_do_not_break_contiguity() {
        let mut l = Layout::contiguous(DType::F32, [16, 1, 4, 1]).unwrap();
        l.nb[1] = 999;
        assert!(l.is_contiguous());
        l.nb[2] = 4;
        assert!(!l.is_contiguous());
    }
}

//! Weight shards: a weight leaf that holds one slice of a tensor stored under
//! another name (tensor parallelism gives each device its own slice of a
//! matrix, loaded into that device's weight arena).
//!
//! A shard names its source (`of`, the name the weight file stores), the
//! source's full extents, the axis it is cut along and where its slice
//! starts; its own extents are the slice's. Along axis 0 of a block-quantized
//! dtype a slice starts and ends on block boundaries (a block is never cut).
//!
//! Invariants (checked by [`WeightShard::problem`], which the graph verifier
//! and the plan checker both run):
//! - `axis < 4`, `0 <= start`, `start + ne[axis] <= full_ne[axis]`;
//! - every other extent equals the source's;
//! - along axis 0, `start` and `ne[0]` are multiples of the dtype's block.

use crate::dtype::DType;
use crate::layout::{Layout, fmt_ne};
use serde::{Deserialize, Serialize};

/// Where a shard's values come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WeightShard {
    /// The stored tensor it is a slice of.
    pub of: String,
    /// That tensor's extents (ggml order).
    pub full_ne: [i64; 4],
    /// The axis the slice is cut along.
    pub axis: u8,
    /// First index of the slice along `axis`.
    pub start: i64,
}

impl WeightShard {
    /// Why a shard of extents `ne` and `dtype` cannot be this slice, if it cannot.
    pub fn problem(&self, dtype: DType, ne: [i64; 4]) -> Option<String> {
        let a = self.axis as usize;
        if a > 3 {
            return Some(format!("shard axis {} must be 0..=3", self.axis));
        }
        let end = self.start.checked_add(ne[a]);
        if self.start < 0 || end.is_none_or(|e| e > self.full_ne[a]) {
            return Some(format!(
                "shard [{}, {}) along axis {a} is outside '{}' {}",
                self.start,
                end.map_or("overflow".into(), |e| e.to_string()),
                self.of,
                fmt_ne(&self.full_ne)
            ));
        }
        if let Some(i) = (0..4).find(|&i| i != a && ne[i] != self.full_ne[i]) {
            return Some(format!(
                "shard {} of '{}' {} differs along axis {i}, which is not its split axis {a}",
                fmt_ne(&ne),
                self.of,
                fmt_ne(&self.full_ne)
            ));
        }
        let block = dtype.block_elems() as i64;
        if a == 0 && (self.start % block != 0 || ne[0] % block != 0) {
            return Some(format!(
                "a {dtype} shard along axis 0 must start and end on blocks of {block} \
                 (start {}, extent {})",
                self.start, ne[0]
            ));
        }
        None
    }

    /// The layout of the whole source tensor (packed).
    pub fn source_layout(&self, dtype: DType) -> Option<Layout> {
        Layout::contiguous(dtype, self.full_ne)
    }

    /// The shard's packed bytes, cut from the source's packed bytes `src`.
    /// `None` when `src` is not the source's size or the shard is invalid.
    pub fn extract(&self, dtype: DType, ne: [i64; 4], src: &[u8]) -> Option<Vec<u8>> {
        if self.problem(dtype, ne).is_some() {
            return None;
        }
        let full = self.source_layout(dtype)?;
        let part = Layout::contiguous(dtype, ne)?;
        if src.len() as u64 != full.span_bytes() {
            return None;
        }
        let a = self.axis as usize;
        // The slice is one contiguous run of bytes per index of the axes
        // above `a` (every axis below `a` is whole).
        let bytes_along = |n: i64| -> usize {
            if a == 0 {
                (n / dtype.block_elems() as i64) as usize * dtype.block_bytes() as usize
            } else {
                n as usize * full.nb[a] as usize
            }
        };
        let (run, skip) = (bytes_along(ne[a]), bytes_along(self.start));
        let step = if a == 3 { 0 } else { full.nb[a + 1] as usize };
        let n_outer: i64 = ne[a + 1..].iter().product();
        let mut out = Vec::with_capacity(part.span_bytes() as usize);
        for o in 0..n_outer as usize {
            let base = o * step + skip;
            out.extend_from_slice(&src[base..base + run]);
        }
        (out.len() as u64 == part.span_bytes()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(axis: u8, start: i64, full_ne: [i64; 4]) -> WeightShard {
        WeightShard {
            of: "w".into(),
            full_ne,
            axis,
            start,
        }
    }

    fn f32_bytes(v: impl Iterator<Item = f32>) -> Vec<u8> {
        v.flat_map(f32::to_le_bytes).collect()
    }

    #[test]
    fn every_axis_cuts_the_values_of_its_slice() {
        let full = [5, 4, 3, 2];
        let n: i64 = full.iter().product();
        let src = f32_bytes((0..n).map(|i| i as f32));
        for axis in 0..4u8 {
            let a = axis as usize;
            for (start, len) in [(0, 1), (1, full[a] - 1), (full[a] - 1, 1)] {
                let mut ne = full;
                ne[a] = len;
                let s = shard(axis, start, full);
                let got = s.extract(DType::F32, ne, &src).unwrap();
                let mut want = vec![];
                for i3 in 0..ne[3] {
                    for i2 in 0..ne[2] {
                        for i1 in 0..ne[1] {
                            for i0 in 0..ne[0] {
                                let mut idx = [i0, i1, i2, i3];
                                idx[a] += start;
                                let flat = idx[0]
                                    + full[0] * (idx[1] + full[1] * (idx[2] + full[2] * idx[3]));
                                want.push(flat as f32);
                            }
                        }
                    }
                }
                assert_eq!(
                    got,
                    f32_bytes(want.into_iter()),
                    "axis {axis} start {start}"
                );
            }
        }
    }

    #[test]
    fn quantized_rows_are_cut_on_block_boundaries_only() {
        let s = shard(0, 32, [96, 2, 1, 1]);
        assert!(s.problem(DType::Q8_0, [32, 2, 1, 1]).is_none());
        let src: Vec<u8> = (0..(3 * 34 * 2) as u32).map(|i| i as u8).collect();
        let got = s.extract(DType::Q8_0, [32, 2, 1, 1], &src).unwrap();
        assert_eq!(&got[..34], &src[34..68]);
        assert_eq!(&got[34..], &src[3 * 34 + 34..3 * 34 + 68]);
        let bad = shard(0, 16, [96, 2, 1, 1]);
        let why = bad.problem(DType::Q8_0, [32, 2, 1, 1]).unwrap();
        assert!(why.contains("blocks of 32"), "{why}");
    }

    #[test]
    fn slices_outside_the_source_or_off_axis_are_named() {
        let s = shard(1, 3, [4, 4, 1, 1]);
        let why = s.problem(DType::F32, [4, 2, 1, 1]).unwrap();
        assert!(why.contains("outside 'w'"), "{why}");
        let s = shard(1, 0, [4, 4, 1, 1]);
        let why = s.problem(DType::F32, [2, 2, 1, 1]).unwrap();
        assert!(why.contains("along axis 0"), "{why}");
        assert!(
            shard(4, 0, [4, 4, 1, 1])
                .problem(DType::F32, [4, 4, 1, 1])
                .is_some()
        );
    }
}

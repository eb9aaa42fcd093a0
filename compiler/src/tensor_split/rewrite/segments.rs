//! Fused matrices cut by segments (the seed's `n_segments`): a fused QKV
//! matrix's Q, K and V rows are each cut by the block's KV heads, so every
//! device holds its heads' rows of all three. Each (segment, device) is a
//! shard of its own (a contiguous slice of the stored rows, `leafs.rs`), and
//! a segmented value holds one split value per segment:
//! - a product of a segmented weight and a whole input is one
//!   column-parallel product per segment, segmented along its rows;
//! - the add of two values segmented alike (the product and its bias) is one
//!   add per segment;
//! - a view reading inside one segment reads that segment's split: the view
//!   is re-expressed over the segment alone (as its own packed tensor) and
//!   cut as any view ([`super::super::axis::view`]);
//! - anything else makes the value whole: each segment all-gathered, then
//!   joined by `concat`s on every device.
//!
//! **Invariant:** a segmented value's segments tile its axis in order, each
//! segment's split is of that segment alone (extents adding up to its
//! length), and the segments of values combined part by part are cut alike.

use super::super::axis;
use super::{R, Rewriter, Value};
use ir::plan::SplitPart;
use ir::{Op, TensorId};

/// A segment's split: its axis, extents and parts.
type SegmentSplit<'v> = (usize, &'v [i64], &'v [Option<TensorId>]);

fn split_of(v: &Value) -> Option<SegmentSplit<'_>> {
    match v {
        Value::Split {
            axis,
            extents,
            parts,
        } => Some((*axis, extents, parts)),
        _ => None,
    }
}

impl Rewriter<'_> {
    /// The rule of `op` over segmented operands, or `None` for the other
    /// rules (and, failing those, making operands whole).
    pub(super) fn segment_rule(
        &mut self,
        id: TensorId,
        op: Op,
        vals: &[Value],
    ) -> R<Option<Value>> {
        let Value::Segmented(segs) = &vals[0] else {
            return Ok(None);
        };
        let segs = segs.clone();
        match (op, vals.get(1)) {
            (Op::MulMat, Some(b)) if Self::is_whole(b) => {
                let b = b.clone();
                let mut out = Vec::with_capacity(segs.len());
                for (k, (start, seg)) in segs.iter().enumerate() {
                    let Some((1, extents, parts)) = split_of(seg) else {
                        return Ok(None);
                    };
                    let mut products = vec![None; self.n];
                    for d in (0..self.n).filter(|&d| parts[d].is_some()) {
                        let srcs = [parts[d].unwrap(), self.on(&b, d)?];
                        products[d] = Some(self.segment_part(id, k, d, Op::MulMat, &srcs)?);
                    }
                    let value =
                        self.split_result_from(id, *start, 0, extents.to_vec(), products)?;
                    out.push((*start, value));
                }
                Ok(Some(Value::Segmented(out)))
            }
            (Op::Add, Some(Value::Segmented(other))) if other.len() == segs.len() => {
                let other = other.clone();
                let mut out = Vec::with_capacity(segs.len());
                for (k, ((start, a), (other_start, b))) in segs.iter().zip(&other).enumerate() {
                    let (Some((axis, extents, pa)), Some((b_axis, b_extents, pb))) =
                        (split_of(a), split_of(b))
                    else {
                        return Ok(None);
                    };
                    if start != other_start || axis != b_axis || extents != b_extents {
                        return Ok(None);
                    }
                    let mut sums = vec![None; self.n];
                    for d in (0..self.n).filter(|&d| pa[d].is_some()) {
                        let srcs = [pa[d].unwrap(), pb[d].ok_or_else(|| self.mismatch(id))?];
                        sums[d] = Some(self.segment_part(id, k, d, Op::Add, &srcs)?);
                    }
                    let value = self.split_result_from(id, *start, axis, extents.to_vec(), sums)?;
                    out.push((*start, value));
                }
                Ok(Some(Value::Segmented(out)))
            }
            (Op::View { offset }, None) => self.segment_view(id, offset, &segs),
            _ => Ok(None),
        }
    }

    /// Device `d`'s node of `op` in segment `k` of old node `id`.
    fn segment_part(
        &mut self,
        id: TensorId,
        k: usize,
        d: usize,
        op: Op,
        srcs: &[TensorId],
    ) -> R<TensorId> {
        let name = self.old.tensor(id).name.clone();
        let why = format!("device {d}'s part of segment {k} of '{name}'");
        self.add_node(id, format!("{name}.seg{k}#{d}"), op, srcs, None, d, why)
    }

    /// View `id` (byte `offset`) of a value segmented along axis 0: when it
    /// reads inside one segment, that segment's split viewed alike.
    fn segment_view(
        &mut self,
        id: TensorId,
        offset: u64,
        segs: &[(i64, Value)],
    ) -> R<Option<Value>> {
        let t = self.old.tensor(id);
        let src = self.old.tensor(t.srcs[0]);
        if !src.layout.is_contiguous() || src.dtype().is_quantized() {
            return Ok(None);
        }
        let (es, src_ne, src_nb) = (src.dtype().block_bytes(), src.ne(), src.layout.nb);
        let (view_ne, view_nb) = (t.ne(), t.layout.nb);
        // The offset as source coordinates.
        let mut at = [0i64; 4];
        let mut rest = offset;
        for j in (0..4).rev() {
            at[j] = (rest / src_nb[j]) as i64;
            rest -= at[j] as u64 * src_nb[j];
        }
        // The segment holding the view's first row.
        let Some((start, len, extents, parts)) = segs.iter().find_map(|(s, v)| {
            let (0, extents, parts) = split_of(v)? else {
                return None;
            };
            let len: i64 = extents.iter().sum();
            (*s..*s + len)
                .contains(&at[0])
                .then_some((*s, len, extents, parts))
        }) else {
            return Ok(None);
        };
        // The segment alone, packed: strides along the rows stay, strides
        // along the outer axes take the segment's row length.
        let mut seg_ne = src_ne;
        seg_ne[0] = len;
        let seg_nb = ir::layout::contiguous_strides(src.dtype(), seg_ne).expect("f32 strides");
        let mut nb = view_nb;
        let mut row_span = at[0] - start;
        for i in (0..4).filter(|&i| view_ne[i] > 1) {
            if view_nb[i] < src_nb[1] {
                row_span += (view_ne[i] - 1) * (view_nb[i] / es) as i64;
                continue;
            }
            let Some(j) = (1..4).rev().find(|&j| view_nb[i] % src_nb[j] == 0) else {
                return Ok(None);
            };
            nb[i] = view_nb[i] / src_nb[j] * seg_nb[j];
        }
        if row_span >= len {
            return Ok(None); // it reads past its segment
        }
        let seg_offset =
            (at[0] - start) as u64 * es + (1..4).map(|j| at[j] as u64 * seg_nb[j]).sum::<u64>();
        let Some(v) = axis::view(seg_ne, es, 0, extents, view_ne, nb, seg_offset) else {
            return Ok(None);
        };
        self.view_parts(id, v, parts)
    }

    /// Segmented value `v` of old tensor `id` whole on every device: each
    /// segment all-gathered, then joined in order by `concat`s.
    pub(super) fn join_segments(&mut self, id: TensorId, v: Value) -> R<Value> {
        if let Some(ts) = self.whole.get(&id) {
            return Ok(Value::Mirrored(ts.clone()));
        }
        let Value::Segmented(segs) = v else {
            unreachable!("called on a segmented value");
        };
        let name = self.old.tensor(id).name.clone();
        let mut gathered: Vec<Vec<TensorId>> = Vec::with_capacity(segs.len());
        let mut axis = 0;
        for (k, (start, seg)) in segs.iter().enumerate() {
            let Some((seg_axis, _, parts)) = split_of(seg) else {
                unreachable!("segments are split values");
            };
            axis = seg_axis; // the same for every segment
            let present: Vec<TensorId> = parts.iter().flatten().copied().collect();
            let whole_name = format!("{name}.seg{k}.gather");
            let ts = self.collective(id, seg, &present, self.n, &whole_name)?;
            // Each holds the segment, not the whole value.
            for &t in &ts {
                let part = SplitPart::Slice {
                    of: name.clone(),
                    axis: axis as u8,
                    start: *start,
                };
                self.mark(t, part);
            }
            gathered.push(ts);
        }
        let mut out = Vec::with_capacity(self.n);
        for d in 0..self.n {
            let mut joined = gathered[0][d];
            for (k, g) in gathered.iter().enumerate().skip(1) {
                let nm = if k + 1 == gathered.len() {
                    format!("{name}.joined#{d}")
                } else {
                    format!("{name}.join{k}#{d}")
                };
                let why = format!("segments of '{name}' joined on device {d}");
                let op = Op::Concat { dim: axis as u8 };
                joined = self.add_node(id, nm, op, &[joined, g[d]], None, d, why)?;
            }
            self.mark(joined, SplitPart::Mirror { of: name.clone() });
            out.push(joined);
        }
        self.whole.insert(id, out.clone());
        Ok(Value::Mirrored(out))
    }
}

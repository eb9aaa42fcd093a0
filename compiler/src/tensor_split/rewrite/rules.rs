//! The per-op rules that keep a split: elementwise and row ops, the
//! re-arrangements that move the axis, row writes and reads.

use super::super::axis;
use super::{R, Rewriter, Value};
use ir::{Layout, Op, TensorId};

impl Rewriter<'_> {
    /// The op-specific rule keeping a split, or `None` to make operands whole.
    pub(super) fn split_rule(&mut self, id: TensorId, op: Op, vals: &[Value]) -> R<Option<Value>> {
        let t = self.old.tensor(id);
        let out_ne = t.ne();
        let dtype = t.dtype();
        let src_ne: Vec<[i64; 4]> = t.srcs.iter().map(|&s| self.old.tensor(s).ne()).collect();
        let have = |parts: &[Option<TensorId>]| -> Vec<bool> {
            parts.iter().map(Option::is_some).collect()
        };
        let same_shape = src_ne.len() == 2 && src_ne[0] == src_ne[1];
        match (op, &vals[0]) {
            // Elementwise of one source, and packing without a new shape.
            (
                op,
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
            ) if op.is_unary() || (op == Op::Cont && out_ne == src_ne[0]) => {
                let (axis, extents, parts) = (*axis, extents.clone(), parts.clone());
                let out = self.per_part(id, op, &have(&parts), |_, d| {
                    Ok((vec![parts[d].unwrap()], None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            (Op::Scale { bias: 0.0, .. }, Value::Partial(parts)) => {
                let parts = parts.clone();
                let out = self.per_part(id, op, &have(&parts), |_, d| {
                    Ok((vec![parts[d].unwrap()], None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            // A partial sum times a whole value (a MoE's routing weights)
            // scales each part: linear, so it stays partial.
            (Op::Mul, Value::Partial(parts)) if vals.get(1).is_some_and(Self::is_whole) => {
                let (parts, w) = (parts.clone(), vals[1].clone());
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    Ok((vec![parts[d].unwrap(), rw.on(&w, d)?], None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            // Re-arrangements move the axis; a partial sum stays partial.
            (
                Op::Reshape | Op::Cont | Op::Permute { .. } | Op::Transpose | Op::View { .. },
                Value::Partial(parts),
            ) => {
                let parts = parts.clone();
                let layout = t.layout;
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let p = parts[d].unwrap();
                    let p = if op == Op::Reshape {
                        rw.packed(id, p)?
                    } else {
                        p
                    };
                    Ok((vec![p], Some(layout)))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            (
                Op::Reshape | Op::Cont,
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
            ) => {
                let Some((to, ext)) = axis::reshape(src_ne[0], *axis, extents, out_ne) else {
                    return Ok(None);
                };
                let parts = parts.clone();
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let p = parts[d].unwrap();
                    let p = if op == Op::Reshape {
                        rw.packed(id, p)?
                    } else {
                        p
                    };
                    let mut ne = out_ne;
                    ne[to] = ext[d];
                    Ok((vec![p], Layout::contiguous(dtype, ne)))
                })?;
                Ok(Some(self.split_result(id, to, ext, out)?))
            }
            (
                Op::Permute { .. } | Op::Transpose,
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
            ) => {
                let to = match op {
                    Op::Permute { axes } => axis::permute(axes, *axis),
                    _ => [1, 0, 2, 3][*axis],
                };
                let (extents, parts) = (extents.clone(), parts.clone());
                let out = self.per_part(id, op, &have(&parts), |_, d| {
                    Ok((vec![parts[d].unwrap()], None))
                })?;
                Ok(Some(self.split_result(id, to, extents, out)?))
            }
            (
                Op::View { offset },
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
            ) => {
                let src = self.old.tensor(t.srcs[0]);
                if !src.layout.is_contiguous() || src.dtype().is_quantized() {
                    return Ok(None);
                }
                let es = src.dtype().block_bytes();
                let Some(v) = axis::view(src.ne(), es, *axis, extents, out_ne, t.layout.nb, offset)
                else {
                    return Ok(None);
                };
                self.view_parts(id, v, &parts.clone())
            }
            _ => self.split_rule_compute(id, op, vals, &src_ne, same_shape),
        }
    }

    /// View `id` of a split value (its `parts`) as [`axis::view`] cut it:
    /// each part's view with its own shape, strides and offset; `None` when
    /// a part is strided.
    pub(super) fn view_parts(
        &mut self,
        id: TensorId,
        v: axis::ViewSplit,
        parts: &[Option<TensorId>],
    ) -> R<Option<Value>> {
        if parts
            .iter()
            .flatten()
            .any(|&p| !self.b.tensor(p).layout.is_contiguous())
        {
            return Ok(None);
        }
        let (name, dtype) = (
            self.old.tensor(id).name.clone(),
            self.old.tensor(id).dtype(),
        );
        let mut out = vec![None; self.n];
        for d in 0..self.n {
            let (Some(p), Some((ne, nb, off))) = (parts[d], v.parts[d]) else {
                continue;
            };
            let layout = Layout { dtype, ne, nb };
            let why = format!("device {d}'s part of '{name}'");
            let op = Op::View { offset: off };
            let part_name = format!("{name}#{d}");
            out[d] = Some(self.add_node(id, part_name, op, &[p], Some(layout), d, why)?);
        }
        Ok(Some(self.split_result(id, v.axis, v.extents, out)?))
    }

    /// Rules of ops that compute (elementwise of two sources, row ops,
    /// products, row writes and reads).
    pub(super) fn split_rule_compute(
        &mut self,
        id: TensorId,
        op: Op,
        vals: &[Value],
        src_ne: &[[i64; 4]],
        same_shape: bool,
    ) -> R<Option<Value>> {
        let have = |parts: &[Option<TensorId>]| -> Vec<bool> {
            parts.iter().map(Option::is_some).collect()
        };
        let whole = |v: &Value| matches!(v, Value::Whole(_) | Value::Mirrored(_));
        let binary = op.is_binary() || matches!(op, Op::Glu { .. } if vals.len() == 2);
        match (op, &vals[0], vals.get(1)) {
            // Elementwise of two sources (src1 broadcast over src0).
            (
                _,
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
                Some(b),
            ) if binary => {
                let (axis, extents, parts) = (*axis, extents.clone(), parts.clone());
                let b = b.clone();
                let other = match &b {
                    Value::Split {
                        axis: ba,
                        extents: be,
                        parts: bp,
                    } if *ba == axis && *be == extents => Other::Parts(bp.clone()), // broadcast elsewhere is fine
                    // Whole and as long along the split axis: each device its slice.
                    v if whole(v) && src_ne[1][axis] == src_ne[0][axis] => Other::Slice,
                    v if whole(v) && src_ne[1][axis] == 1 => Other::Whole,
                    _ => return Ok(None),
                };
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let y = match &other {
                        Other::Parts(bp) => match bp[d] {
                            Some(p) => p,
                            None => return Err(rw.mismatch(id)),
                        },
                        Other::Slice => rw.slice(&b, axis, &extents, d)?,
                        Other::Whole => rw.on(&b, d)?,
                    };
                    Ok((vec![parts[d].unwrap(), y], None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            (
                _,
                a,
                Some(Value::Split {
                    axis,
                    extents,
                    parts,
                }),
            ) if binary && whole(a) && same_shape => {
                let (axis, extents, parts, a) = (*axis, extents.clone(), parts.clone(), a.clone());
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    Ok((
                        vec![rw.slice(&a, axis, &extents, d)?, parts[d].unwrap()],
                        None,
                    ))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            (Op::Add | Op::Sub, Value::Partial(pa), Some(Value::Partial(pb)))
                if same_shape && have(pa) == have(pb) =>
            {
                let (pa, pb) = (pa.clone(), pb.clone());
                let out = self.per_part(id, op, &have(&pa), |_, d| {
                    Ok((vec![pa[d].unwrap(), pb[d].unwrap()], None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            // Row ops: any split but along the rows they reduce or rotate.
            (
                Op::RmsNorm { .. }
                | Op::Norm { .. }
                | Op::SoftMax { .. }
                | Op::SumRows
                | Op::Mean
                | Op::Glu { .. }
                | Op::Rope(_)
                | Op::DiagMaskInf { .. },
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
                second,
            ) => {
                let (axis, extents, parts) = (*axis, extents.clone(), parts.clone());
                let min_axis = match op {
                    Op::DiagMaskInf { .. } => 2,
                    _ => 1,
                };
                // Rope's positions index axis 2.
                if axis < min_axis || (matches!(op, Op::Rope(_)) && axis == 2) {
                    return Ok(None);
                }
                let second = second.cloned();
                // Rope's frequency factors (src2) are read whole on every device.
                let third = vals.get(2).cloned();
                if third.as_ref().is_some_and(|v| !whole(v)) {
                    return Ok(None);
                }
                let how = match &second {
                    None => None,
                    Some(v) if !whole(v) => return Ok(None),
                    Some(_) if matches!(op, Op::Rope(_)) => Some(Other::Whole),
                    Some(_) if src_ne[1][axis] == 1 => Some(Other::Whole),
                    Some(_) if src_ne[1][axis] == src_ne[0][axis] => Some(Other::Slice),
                    Some(_) => return Ok(None),
                };
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let mut s = vec![parts[d].unwrap()];
                    if let (Some(v), Some(h)) = (&second, &how) {
                        s.push(match h {
                            Other::Slice => rw.slice(v, axis, &extents, d)?,
                            _ => rw.on(v, d)?,
                        });
                    }
                    if let Some(v) = &third {
                        s.push(rw.on(v, d)?);
                    }
                    Ok((s, None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            (Op::MulMat, a, Some(b)) => self.mul_mat(id, a.clone(), b.clone(), src_ne),
            (Op::MulMatId, a, Some(b)) => {
                let ids = vals[2].clone();
                self.mul_mat_id(id, a.clone(), b.clone(), ids)
            }
            // Rows written into a split destination, part by part.
            (
                Op::SetRows,
                Value::Split {
                    axis,
                    extents,
                    parts,
                },
                Some(src),
            ) if *axis != 1 => {
                let (axis, extents, parts, src) =
                    (*axis, extents.clone(), parts.clone(), src.clone());
                let idx = vals[2].clone();
                if !whole(&idx) {
                    return Ok(None);
                }
                let src_parts = match &src {
                    Value::Split {
                        axis: sa,
                        extents: se,
                        parts: sp,
                    } if *sa == axis && *se == extents => Some(sp.clone()),
                    v if whole(v) && src_ne[1][axis] == src_ne[0][axis] => None,
                    _ => return Ok(None),
                };
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let s = match &src_parts {
                        Some(sp) => sp[d].ok_or_else(|| rw.mismatch(id))?,
                        None => rw.slice(&src, axis, &extents, d)?,
                    };
                    let dst = parts[d].unwrap();
                    let i = rw.on(&idx, rw.device[rw.root(dst).index()].index())?;
                    Ok((vec![dst, s, i], None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            // Rows looked up in a table cut along its rows: each device gives
            // its rows and zeros for the others, a partial sum.
            (
                Op::GetRows,
                Value::Split {
                    axis: 1,
                    extents,
                    parts,
                },
                Some(idx),
            ) if whole(idx)
                && src_ne[0][2] == 1
                && src_ne[0][3] == 1
                && self.old.tensor(id).dtype() == ir::DType::F32 =>
            {
                let (extents, parts, idx) = (extents.clone(), parts.clone(), idx.clone());
                let name = self.old.tensor(id).name.clone();
                let mut out = vec![None; self.n];
                for d in (0..self.n).filter(|&d| parts[d].is_some()) {
                    let start = extents[..d].iter().sum();
                    let srcs = [parts[d].unwrap(), self.on(&idx, d)?];
                    let why = format!("device {d}'s rows of '{name}' from row {start}");
                    let op = Op::GetRowsPart { start };
                    out[d] =
                        Some(self.add_node(id, format!("{name}#{d}"), op, &srcs, None, d, why)?);
                }
                Ok(Some(self.partial_result(id, out)))
            }
            // Rows gathered from a table split along its columns.
            (
                Op::GetRows,
                Value::Split {
                    axis: 0,
                    extents,
                    parts,
                },
                Some(idx),
            ) if whole(idx) => {
                let (extents, parts, idx) = (extents.clone(), parts.clone(), idx.clone());
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    Ok((vec![parts[d].unwrap(), rw.on(&idx, d)?], None))
                })?;
                Ok(Some(self.split_result(id, 0, extents, out)?))
            }
            _ => Ok(None),
        }
    }
}

/// How a second operand meets a split first one.
enum Other {
    /// Split alike: part by part.
    Parts(Vec<Option<TensorId>>),
    /// Whole, same shape: each device reads its slice.
    Slice,
    /// Whole, broadcast along the split axis: each device reads all of it.
    Whole,
}

//! `mul_mat` over split operands: split rows, partial sums, split heads;
//! `mul_mat_id` (a mixture of experts) over experts split by rows or along K.

use super::{R, Rewriter, Value};
use ir::{Op, TensorId};

impl Rewriter<'_> {
    /// `mul_mat(a, b)` (`a [K, M, A2, A3]`, `b [K, N, B2, B3]`, result
    /// `[M, N, B2, B3]`, `a` broadcast over `b`'s axes 2 and 3).
    pub(super) fn mul_mat(
        &mut self,
        id: TensorId,
        a: Value,
        b: Value,
        src_ne: &[[i64; 4]],
    ) -> R<Option<Value>> {
        let whole = |v: &Value| matches!(v, Value::Whole(_) | Value::Mirrored(_));
        let have = |parts: &[Option<TensorId>]| -> Vec<bool> {
            parts.iter().map(Option::is_some).collect()
        };
        let (an, bn) = (src_ne[0], src_ne[1]);
        let ratio = bn[2] / an[2];
        if let Some(v) = self.weight_products(id, Op::MulMat, &a, &b, &[])? {
            return Ok(Some(v));
        }
        match (&a, &b) {
            // Heads: batched products split along axis 2 (GQA: `ratio` query
            // heads per KV head, kept on one device).
            (
                Value::Split {
                    axis: 2,
                    extents: ea,
                    parts: pa,
                },
                Value::Split {
                    axis: 2,
                    extents: eb,
                    parts: pb,
                },
            ) if ea.iter().zip(eb).all(|(x, y)| x * ratio == *y) => {
                let (eb, pa, pb) = (eb.clone(), pa.clone(), pb.clone());
                let out = self.per_part(id, Op::MulMat, &have(&pb), |rw, d| {
                    Ok((
                        vec![pa[d].ok_or_else(|| rw.mismatch(id))?, pb[d].unwrap()],
                        None,
                    ))
                })?;
                Ok(Some(self.split_result(id, 2, eb, out)?))
            }
            (
                Value::Split {
                    axis: 2,
                    extents: ea,
                    parts: pa,
                },
                b,
            ) if whole(b) => {
                let (pa, b) = (pa.clone(), b.clone());
                let eb: Vec<i64> = ea.iter().map(|e| e * ratio).collect();
                let out = self.per_part(id, Op::MulMat, &have(&pa), |rw, d| {
                    Ok((vec![pa[d].unwrap(), rw.slice(&b, 2, &eb, d)?], None))
                })?;
                Ok(Some(self.split_result(id, 2, eb, out)?))
            }
            (
                a,
                Value::Split {
                    axis: 2,
                    extents: eb,
                    parts: pb,
                },
            ) if whole(a) => {
                let (eb, pb, a) = (eb.clone(), pb.clone(), a.clone());
                if an[2] != 1 && eb.iter().any(|e| e % ratio != 0) {
                    return Ok(None);
                }
                let ea: Vec<i64> = eb.iter().map(|e| e / ratio).collect();
                let out = self.per_part(id, Op::MulMat, &have(&pb), |rw, d| {
                    let x = if an[2] == 1 {
                        rw.on(&a, d)?
                    } else {
                        rw.slice(&a, 2, &ea, d)?
                    };
                    Ok((vec![x, pb[d].unwrap()], None))
                })?;
                Ok(Some(self.split_result(id, 2, eb, out)?))
            }
            // Tokens (or batches) split, the weight whole.
            (
                a,
                Value::Split {
                    axis: axis @ (1 | 3),
                    extents,
                    parts,
                },
            ) if whole(a) => {
                let (axis, extents, parts, a) = (*axis, extents.clone(), parts.clone(), a.clone());
                let out = self.per_part(id, Op::MulMat, &have(&parts), |rw, d| {
                    Ok((vec![rw.on(&a, d)?, parts[d].unwrap()], None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            _ => Ok(None),
        }
    }

    /// `mul_mat_id(experts, b, ids)` (`experts [K, M, n_expert]`, `b [K, b1,
    /// t]`, `ids [n_used, t]`, result `[M, n_used, t]`) with the experts
    /// split as ggml's meta backend splits them: every expert's rows alike
    /// (each device computes its rows of every chosen expert's output), or
    /// along K (partial sums, `b` split alike or sliced). The ids are read
    /// whole on every device, so every device routes alike.
    pub(super) fn mul_mat_id(
        &mut self,
        id: TensorId,
        a: Value,
        b: Value,
        ids: Value,
    ) -> R<Option<Value>> {
        if !matches!(ids, Value::Whole(_) | Value::Mirrored(_)) {
            return Ok(None);
        }
        self.weight_products(id, Op::MulMatId, &a, &b, &[ids])
    }

    /// The arms `mul_mat` and `mul_mat_id` share, a weight `a` split and
    /// its input `b`: the weight's rows split with `b` whole (the result
    /// split along its rows), or split along K with `b` split alike or
    /// whole and sliced (partial sums). `extra` sources (whole) follow `a`
    /// and `b` on every device. `None` when no arm fits.
    fn weight_products(
        &mut self,
        id: TensorId,
        op: Op,
        a: &Value,
        b: &Value,
        extra: &[Value],
    ) -> R<Option<Value>> {
        let whole = |v: &Value| matches!(v, Value::Whole(_) | Value::Mirrored(_));
        let have = |parts: &[Option<TensorId>]| -> Vec<bool> {
            parts.iter().map(Option::is_some).collect()
        };
        let with_extra = |rw: &mut Self, d: usize, mut srcs: Vec<TensorId>| -> R<Vec<TensorId>> {
            for v in extra {
                srcs.push(rw.on(v, d)?);
            }
            Ok(srcs)
        };
        match (a, b) {
            (
                Value::Split {
                    axis: 1,
                    extents,
                    parts,
                },
                b,
            ) if whole(b) => {
                let (extents, parts, b) = (extents.clone(), parts.clone(), b.clone());
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let x = rw.on(&b, d)?;
                    Ok((with_extra(rw, d, vec![parts[d].unwrap(), x])?, None))
                })?;
                Ok(Some(self.split_result(id, 0, extents, out)?))
            }
            (
                Value::Split {
                    axis: 0,
                    extents: ea,
                    parts: pa,
                },
                Value::Split {
                    axis: 0,
                    extents: eb,
                    parts: pb,
                },
            ) if ea == eb => {
                let (pa, pb) = (pa.clone(), pb.clone());
                let out = self.per_part(id, op, &have(&pa), |rw, d| {
                    let y = rw.packed(id, pb[d].ok_or_else(|| rw.mismatch(id))?)?;
                    Ok((with_extra(rw, d, vec![pa[d].unwrap(), y])?, None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            (
                Value::Split {
                    axis: 0,
                    extents,
                    parts,
                },
                b,
            ) if whole(b) => {
                let (extents, parts, b) = (extents.clone(), parts.clone(), b.clone());
                let out = self.per_part(id, op, &have(&parts), |rw, d| {
                    let slice = rw.slice(&b, 0, &extents, d)?;
                    let y = rw.packed(id, slice)?;
                    Ok((with_extra(rw, d, vec![parts[d].unwrap(), y])?, None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            _ => Ok(None),
        }
    }
}

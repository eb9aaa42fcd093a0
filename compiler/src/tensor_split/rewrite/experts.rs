//! Expert parallelism: a mixture of experts' stacked matrices shared out
//! whole between devices (split along the expert axis, 2), so each device
//! computes the (slot, token) rows routed to its own experts.
//!
//! A `mul_mat_id` over experts split along axis 2 becomes one
//! `mul_mat_id_part` per device, giving its rows and zeros for the others'.
//! Its result is a *routed* value: a [`Value::Partial`] whose parts never
//! overlap (each row is nonzero on at most one device), recorded in
//! [`Routing`]. Unlike a plain partial sum, an op `f` with `f(0) = 0`
//! applied element by element keeps a routed value routed (the device that
//! holds a row computes `f` of it, the others `f(0) = 0`), so the FFN's GLU,
//! the down product over the routed activations and the scaling by the
//! router's weights run part by part with no collective between them. The
//! sum over a token's slots (an `add` of two routed views) makes an ordinary
//! partial sum, which one all-reduce completes, as the row split's down
//! product does.
//!
//! Two routed operands of one element-wise op must agree on which device
//! holds each element: both of the original's shape, read at the same
//! positions, from the same routing (the same ids, no view in between).
//! Anything else falls to the partial-sum rules (a routed value is a partial
//! sum).
//!
//! **Invariant:** every part of a routed value is marked
//! `SplitPart::Routed` with its device's experts, and the parts of one value
//! hold disjoint expert ranges covering the experts.

use super::{R, Rewriter, Value};
use ir::plan::SplitPart;
use ir::{Op, TensorId};

/// How a routed value's rows are shared out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Routing {
    /// Experts per device, in device order (the weights' split).
    pub experts: Vec<i64>,
    /// The original ids tensor that routes the rows.
    pub ids: TensorId,
    /// What the element positions follow: `ids` itself for a product's
    /// result (row `(slot, token)` routed by `ids[slot, token]`) and what
    /// keeps its positions, else the view that last re-arranged them.
    pub positions: TensorId,
}

impl Rewriter<'_> {
    /// The expert-parallel rule for old node `id`, or `None` when none fits
    /// (no operand routed, and no product over experts split along axis 2).
    pub(super) fn routed_rule(&mut self, id: TensorId, op: Op, vals: &[Value]) -> R<Option<Value>> {
        let t = self.old.tensor(id);
        let srcs = t.srcs.clone();
        if op == Op::MulMatId {
            return self.expert_parallel_product(id, vals);
        }
        let routed: Vec<Option<Routing>> = srcs.iter().map(|s| self.routing(*s)).collect();
        let Some(first) = routed.iter().flatten().next().cloned() else {
            return Ok(None);
        };
        let whole = |v: &Value| matches!(v, Value::Whole(_) | Value::Mirrored(_));
        let out_ne = t.ne();
        // Re-arrangements keep the zeros where they move the rows.
        if matches!(
            op,
            Op::Reshape | Op::Cont | Op::Permute { .. } | Op::Transpose | Op::View { .. }
        ) {
            let routing = Routing {
                positions: id,
                ..first
            };
            let layout = t.layout;
            let Value::Partial(parts) = &vals[0] else {
                return Ok(None);
            };
            let parts = parts.clone();
            let out = self.routed_parts(id, &routing, |rw, d| {
                let p = parts[d].ok_or_else(|| rw.mismatch(id))?;
                let p = if op == Op::Reshape {
                    rw.packed(id, p)?
                } else {
                    p
                };
                Ok((op, vec![p], Some(layout)))
            })?;
            return Ok(Some(self.routed_result(id, routing, out)));
        }
        if !keeps_zeros(op) {
            return Ok(None);
        }
        // Every routed operand routed alike, at the result's positions; the
        // others whole (read in full on every device).
        for (k, r) in routed.iter().enumerate() {
            match r {
                Some(r) if *r != first || self.old.tensor(srcs[k]).ne() != out_ne => {
                    return Ok(None);
                }
                None if !whole(&vals[k]) => return Ok(None),
                _ => {}
            }
        }
        let vals = vals.to_vec();
        let out = self.routed_parts(id, &first, |rw, d| {
            let mut s = Vec::with_capacity(vals.len());
            for v in &vals {
                s.push(match v {
                    Value::Partial(parts) => parts[d].ok_or_else(|| rw.mismatch(id))?,
                    v => rw.on(v, d)?,
                });
            }
            Ok((op, s, None))
        })?;
        Ok(Some(self.routed_result(id, first, out)))
    }

    /// `mul_mat_id(experts, b, ids)` with the experts split along axis 2:
    /// one `mul_mat_id_part` per device holding experts, `b` routed by the
    /// same split and ids, or whole (made whole when it is neither).
    fn expert_parallel_product(&mut self, id: TensorId, vals: &[Value]) -> R<Option<Value>> {
        let (
            Value::Split {
                axis: 2,
                extents,
                parts: weights,
            },
            b,
            ids,
        ) = (&vals[0], &vals[1], &vals[2])
        else {
            return Ok(None);
        };
        let whole = |v: &Value| matches!(v, Value::Whole(_) | Value::Mirrored(_));
        let old_ids = self.old.tensor(id).srcs[2];
        let routing = Routing {
            experts: extents.clone(),
            ids: old_ids,
            positions: old_ids,
        };
        let b_src = self.old.tensor(id).srcs[1];
        // Routed activations must be a product's rows as they came (slot
        // `e` of token `t` where this product reads it); anything else not
        // whole is made whole (a split is gathered, a partial sum reduced),
        // and so are ids that are not (the experts stay split either way).
        let b_routed = self.routing(b_src).is_some_and(|r| r == routing);
        let b = if b_routed || whole(b) {
            b.clone()
        } else {
            self.materialize(b_src, b.clone())?
        };
        let ids = if whole(ids) {
            ids.clone()
        } else {
            self.materialize(old_ids, ids.clone())?
        };
        let total: i64 = extents.iter().sum();
        let weights = weights.clone();
        let out = self.routed_parts(id, &routing, |rw, d| {
            let first = routing.experts[..d].iter().sum();
            let op = Op::MulMatIdPart {
                first,
                experts: total,
            };
            let x = match &b {
                Value::Partial(parts) if b_routed => parts[d].ok_or_else(|| rw.mismatch(id))?,
                v => rw.on(v, d)?,
            };
            let w = weights[d].ok_or_else(|| rw.mismatch(id))?;
            Ok((op, vec![w, x, rw.on(&ids, d)?], None))
        })?;
        Ok(Some(self.routed_result(id, routing, out)))
    }

    /// The routing of old tensor `s`'s value, if it is routed.
    fn routing(&self, s: TensorId) -> Option<Routing> {
        self.routed.get(&s).cloned()
    }

    /// One node per device holding experts of `routing`: `node(d)` gives
    /// its op, operands and declared layout.
    fn routed_parts(
        &mut self,
        id: TensorId,
        routing: &Routing,
        mut node: impl FnMut(&mut Self, usize) -> R<(Op, Vec<TensorId>, Option<ir::Layout>)>,
    ) -> R<Vec<Option<TensorId>>> {
        let name = self.old.tensor(id).name.clone();
        let mut parts = vec![None; self.n];
        for d in (0..self.n).filter(|&d| routing.experts[d] > 0) {
            let (op, srcs, declared) = node(self, d)?;
            let first: i64 = routing.experts[..d].iter().sum();
            let last = first + routing.experts[d];
            let why =
                format!("device {d}'s rows of '{name}': those routed to experts {first}..{last}");
            parts[d] =
                Some(self.add_node(id, format!("{name}#{d}"), op, &srcs, declared, d, why)?);
        }
        Ok(parts)
    }

    /// A routed result, each part marked with its device's experts; with
    /// one part (one device holds every expert) that part is the value.
    fn routed_result(
        &mut self,
        id: TensorId,
        routing: Routing,
        parts: Vec<Option<TensorId>>,
    ) -> Value {
        if let [only] = parts.iter().flatten().collect::<Vec<_>>()[..] {
            return Value::Whole(*only);
        }
        let of = self.old.tensor(id).name.clone();
        for (d, p) in parts.iter().enumerate() {
            if let Some(p) = p {
                let first = routing.experts[..d].iter().sum();
                let count = routing.experts[d];
                let of = of.clone();
                self.mark(*p, SplitPart::Routed { of, first, count });
            }
        }
        self.routed.insert(id, routing);
        Value::Partial(parts)
    }
}

/// Element-wise ops that map 0 to 0 in every routed operand (each result
/// element reads its operands at its own position, broadcasting a whole
/// operand): so a device's zero rows stay zero.
fn keeps_zeros(op: Op) -> bool {
    match op {
        Op::Scale { bias, .. } => bias == 0.0,
        Op::Clamp { min, max } => min <= 0.0 && 0.0 <= max,
        Op::Sqr | Op::Sqrt | Op::Silu | Op::Gelu | Op::GeluErf | Op::Relu | Op::Tanh => true,
        // act(0) * 0 for every GLU; 0 * x for a product.
        Op::Glu { .. } | Op::Mul => true,
        _ => false,
    }
}

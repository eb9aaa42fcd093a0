//! Making a split or partial value whole: one all-reduce or all-gather
//! participant per device, reading the parts in place; cutting a partial sum
//! by a reduce-scatter instead, when its reader keeps the cut; and the
//! graph's outputs, whole on device 0 under their own names.

use super::super::rules::{partition, split_error};
use super::{R, Rewriter, Value};
use ir::plan::SplitPart;
use ir::{DType, Op, Role, TensorId};

impl Rewriter<'_> {
    /// `v` (the value of old tensor `id`) whole: a partial sum all-reduced,
    /// a split value all-gathered (a split weight read whole instead).
    pub(super) fn materialize(&mut self, id: TensorId, v: Value) -> R<Value> {
        match v {
            Value::Whole(_) | Value::Mirrored(_) => Ok(v),
            Value::Segmented(_) if self.old.tensor(id).role != Role::Weight => {
                self.join_segments(id, v)
            }
            _ if self.old.tensor(id).role == Role::Weight => {
                // Weights never change: read the stored tensor whole.
                if let Some(ts) = self.whole.get(&id) {
                    return Ok(Value::Whole(ts[0]));
                }
                let new = self.whole_leaf(id)?;
                self.whole.insert(id, vec![new]);
                Ok(Value::Whole(new))
            }
            Value::Segmented(_) => unreachable!("a weight is read whole above"),
            Value::Partial(ref parts) | Value::Split { ref parts, .. } => {
                if let Some(ts) = self.whole.get(&id) {
                    return Ok(Value::Mirrored(ts.clone()));
                }
                let present: Vec<TensorId> = parts.iter().flatten().copied().collect();
                let ts = self.collective(id, &v, &present, self.n, "")?;
                self.whole.insert(id, ts.clone());
                Ok(Value::Mirrored(ts))
            }
        }
    }

    /// One participant per device `0..ranks` of an all-reduce (partial) or
    /// all-gather (split) of `present` parts; with `name` empty the results
    /// are `OLD.sum#d` / `OLD.gather#d`, else `NAME#d` (`NAME` with one rank).
    pub(super) fn collective(
        &mut self,
        id: TensorId,
        v: &Value,
        present: &[TensorId],
        ranks: usize,
        name: &str,
    ) -> R<Vec<TensorId>> {
        let old_name = self.old.tensor(id).name.clone();
        let (parts, group) = self.collective_parts(id, present)?;
        let (kind, suffix) = match v {
            Value::Split { .. } => ("all-gather", "gather"),
            _ => ("all-reduce", "sum"),
        };
        let mut out = Vec::with_capacity(ranks);
        for d in 0..ranks {
            let (group, rank, ranks) = (group, d as u32, ranks as u32);
            let op = match v {
                Value::Split { axis, .. } => Op::AllGather {
                    dim: *axis as u8,
                    group,
                    rank,
                    ranks,
                },
                _ => Op::AllReduceSum { group, rank, ranks },
            };
            let name = if name.is_empty() {
                format!("{old_name}.{suffix}#{d}")
            } else if ranks > 1 {
                format!("{name}#{d}")
            } else {
                name.to_string()
            };
            let why = format!("{kind} of '{old_name}' (group {group}, rank {rank} of {ranks})");
            let t = self.add_node(id, name, op, &parts, None, d, why)?;
            if ranks > 1 {
                self.mark(
                    t,
                    SplitPart::Mirror {
                        of: old_name.clone(),
                    },
                );
            }
            out.push(t);
        }
        Ok(out)
    }

    /// The parts `present` of old tensor `id` as a collective reads them
    /// (packed f32), and the collective's new group number.
    fn collective_parts(&mut self, id: TensorId, present: &[TensorId]) -> R<(Vec<TensorId>, u32)> {
        let mut parts = Vec::with_capacity(present.len());
        for &p in present {
            let dtype = self.b.tensor(p).dtype();
            if dtype != DType::F32 {
                return Err(split_error(
                    "--split-mode row",
                    &self.old.tensor(id).name,
                    &format!("its parts are {dtype}; collectives join f32 parts"),
                ));
            }
            parts.push(self.packed(id, p)?);
        }
        let group = self.groups;
        self.groups += 1;
        Ok((parts, group))
    }

    /// `vals` (the operands `srcs` of old node `id`, running `op`) with each
    /// partial sum that `op` can read cut along an axis replaced by its
    /// reduce-scatter; `None` when scattering is off or no operand is cut.
    pub(super) fn scattered_operands(
        &mut self,
        id: TensorId,
        op: Op,
        srcs: &[TensorId],
        vals: &[Value],
    ) -> R<Option<Vec<Value>>> {
        if !self.scatter {
            return Ok(None);
        }
        let mut cut = vals.to_vec();
        let mut any = false;
        for (k, (&s, v)) in srcs.iter().zip(vals).enumerate() {
            let Value::Partial(parts) = v else { continue };
            if let Some(done) = self.scattered.get(&s) {
                cut[k] = done.clone();
                any = true;
                continue;
            }
            let Some((axis, extents)) = self.scatter_axis(id, op, s) else {
                continue;
            };
            let value = self.reduce_scatter(s, parts, axis, extents)?;
            self.scattered.insert(s, value.clone());
            cut[k] = value;
            any = true;
        }
        Ok(any.then_some(cut))
    }

    /// Where to cut partial sum `s` (an operand of `op` at old node `id`): the
    /// outermost axis but the rows (axis 0, which norms and soft_max reduce)
    /// long enough to give every device a part, when `op` keeps a split
    /// along it and its other operands broadcast along it or are as long.
    fn scatter_axis(&self, id: TensorId, op: Op, s: TensorId) -> Option<(usize, Vec<i64>)> {
        let ne = self.old.tensor(s).ne();
        let srcs = &self.old.tensor(id).srcs;
        let out_ne = self.old.tensor(id).ne();
        let row_op = matches!(
            op,
            Op::RmsNorm { .. } | Op::Norm { .. } | Op::SoftMax { .. } | Op::SumRows | Op::Mean
        );
        let keeps = |axis: usize| match op {
            _ if op.is_unary() || row_op => true,
            Op::Add | Op::Sub | Op::Mul | Op::Div => srcs.iter().all(|&o| {
                let e = self.old.tensor(o).ne()[axis];
                e == out_ne[axis] || (o != srcs[0] && e == 1)
            }),
            Op::Cont => out_ne == ne,
            _ => false,
        };
        (1..4).rev().find_map(|axis| {
            if ne[axis] < self.n as i64 || !keeps(axis) {
                return None;
            }
            let extents = partition(ne[axis], self.shares);
            extents.iter().all(|&e| e > 0).then_some((axis, extents))
        })
    }

    /// Partial sum `id` (its `parts`) cut along `axis` by one reduce-scatter
    /// participant per device, device `d` keeping `extents[d]`.
    fn reduce_scatter(
        &mut self,
        id: TensorId,
        parts: &[Option<TensorId>],
        axis: usize,
        extents: Vec<i64>,
    ) -> R<Value> {
        let old_name = self.old.tensor(id).name.clone();
        let present: Vec<TensorId> = parts.iter().flatten().copied().collect();
        let (packed, group) = self.collective_parts(id, &present)?;
        let ranks = self.n as u32;
        let mut out = vec![None; self.n];
        let mut start = 0;
        for (d, &len) in extents.iter().enumerate() {
            let rank = d as u32;
            let op = Op::ReduceScatterSum {
                dim: axis as u8,
                start,
                len,
                group,
                rank,
                ranks,
            };
            let why = format!(
                "reduce-scatter of '{old_name}' (group {group}, rank {rank} of {ranks}): \
                 [{start}, {}) along axis {axis}",
                start + len
            );
            let name = format!("{old_name}.scatter#{d}");
            out[d] = Some(self.add_node(id, name, op, &packed, None, d, why)?);
            start += len;
        }
        self.split_result(id, axis, extents, out)
    }

    /// Output `id` whole on device 0 under its own name.
    pub(super) fn output(&mut self, id: TensorId) -> R<TensorId> {
        let name = self.old.tensor(id).name.clone();
        let v = self.value(id);
        let t = match &v {
            Value::Whole(t) => *t,
            Value::Mirrored(ts) => ts[0],
            Value::Split { parts, .. } | Value::Partial(parts) => {
                let present: Vec<TensorId> = parts.iter().flatten().copied().collect();
                return Ok(self.collective(id, &v, &present, 1, &name)?[0]);
            }
            Value::Segmented(_) => match self.materialize(id, v.clone())? {
                Value::Mirrored(ts) => ts[0],
                Value::Whole(t) => t,
                _ => unreachable!("materialize makes values whole"),
            },
        };
        if self.b.tensor(t).name == name {
            return Ok(t);
        }
        let d = self.device[self.root(t).index()].index();
        self.add_node(
            id,
            name,
            Op::Cont,
            &[t],
            None,
            d,
            "the output, whole".into(),
        )
    }
}

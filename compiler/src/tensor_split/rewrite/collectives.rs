//! Making a split or partial value whole: one all-reduce or all-gather
//! participant per device, reading the parts in place; and the graph's
//! outputs, whole on device 0 under their own names.

use super::super::rules::split_error;
use super::{R, Rewriter, Value};
use ir::plan::SplitPart;
use ir::{DType, Op, Role, TensorId};

impl Rewriter<'_> {
    /// `v` (the value of old tensor `id`) whole: a partial sum all-reduced,
    /// a split value all-gathered (a split weight read whole instead).
    pub(super) fn materialize(&mut self, id: TensorId, v: Value) -> R<Value> {
        match v {
            Value::Whole(_) | Value::Mirrored(_) => Ok(v),
            _ if self.old.tensor(id).role == Role::Weight => {
                // Weights never change: read the stored tensor whole.
                if let Some(ts) = self.whole.get(&id) {
                    return Ok(Value::Whole(ts[0]));
                }
                let new = self.whole_leaf(id)?;
                self.whole.insert(id, vec![new]);
                Ok(Value::Whole(new))
            }
            Value::Partial(ref parts) | Value::Split { ref parts, .. } => {
                if let Some(ts) = self.whole.get(&id) {
                    return Ok(Value::Mirrored(ts.clone()));
                }
                let present: Vec<TensorId> = parts.iter().flatten().copied().collect();
                if let ([only], Value::Partial(_)) = (&present[..], &v) {
                    return Ok(Value::Whole(*only));
                }
                let ts = self.collective(id, &v, &present, self.n, "")?;
                self.whole.insert(id, ts.clone());
                Ok(Value::Mirrored(ts))
            }
        }
    }

    /// One participant per device `0..ranks` of an all-reduce (partial) or
    /// all-gather (split) of `present` parts; with `name` empty the results
    /// are `OLD.sum#d` / `OLD.gather#d`.
    pub(super) fn collective(
        &mut self,
        id: TensorId,
        v: &Value,
        present: &[TensorId],
        ranks: usize,
        name: &str,
    ) -> R<Vec<TensorId>> {
        let old_name = self.old.tensor(id).name.clone();
        let mut parts = Vec::with_capacity(present.len());
        for &p in present {
            let pt = self.b.tensor(p);
            if pt.dtype() != DType::F32 {
                return Err(split_error(
                    "--split-mode row",
                    &old_name,
                    &format!("its parts are {}; collectives join f32 parts", pt.dtype()),
                ));
            }
            parts.push(self.packed(id, p)?);
        }
        let group = self.groups;
        self.groups += 1;
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

//! Leafs: split weights and state become per-device shards and parts; whole
//! ones stay one tensor, with per-device mirrors of small weights and
//! constants read elsewhere.

use super::{R, Rewriter, Value};
use crate::Error;
use ir::plan::SplitPart;
use ir::{Role, TensorId, WeightShard};

impl Rewriter<'_> {
    pub(super) fn leaf(&mut self, id: TensorId) -> R<Value> {
        let t = self.old.tensor(id);
        let Some(split) = self.leafs.get(&id).cloned() else {
            let new = self.whole_leaf(id)?;
            return Ok(Value::Whole(new));
        };
        if !split.segments.is_empty() {
            let mut segs = Vec::with_capacity(split.segments.len());
            let mut start = 0;
            for (k, extents) in split.segments.iter().enumerate() {
                let name = format!("{}.seg{k}", t.name);
                let value = self.leaf_parts(id, &name, split.axis, extents, start)?;
                segs.push((start, value));
                start += extents.iter().sum::<i64>();
            }
            return Ok(Value::Segmented(segs));
        }
        let name = t.name.clone();
        self.leaf_parts(id, &name, split.axis, &split.extents, 0)
    }

    /// Leaf `id`'s parts `NAME#d` along `axis`, device `d` holding
    /// `extents[d]` from `first` plus the devices before it: weight shards
    /// of the stored tensor, or state parts.
    fn leaf_parts(
        &mut self,
        id: TensorId,
        name: &str,
        axis: usize,
        extents: &[i64],
        first: i64,
    ) -> R<Value> {
        let t = self.old.tensor(id);
        let mut parts = vec![None; self.n];
        let mut start = first;
        for (d, &e) in extents.iter().enumerate() {
            if e == 0 {
                continue;
            }
            let mut ne = t.ne();
            ne[axis] = e;
            let part_name = self.fresh_name(Some(id), format!("{name}#{d}"));
            let new = match t.role {
                Role::Weight => {
                    let shard = WeightShard {
                        of: t.name.clone(),
                        full_ne: t.ne(),
                        axis: axis as u8,
                        start,
                    };
                    self.b.weight_shard(part_name, t.dtype(), ne, shard)
                }
                _ => self.b.state(part_name, t.dtype(), ne),
            }
            .map_err(|e| self.internal(id, e))?;
            let why = format!(
                "{} [{start}, {}) of '{}' along axis {}",
                if t.role == Role::Weight {
                    "shard"
                } else {
                    "state part"
                },
                start + e,
                t.name,
                axis
            );
            let new = self.placed(new, d, why);
            let part = self.slice_of(id, axis, start);
            self.mark(new, part);
            parts[d] = Some(new);
            start += e;
        }
        Ok(Value::Split {
            axis,
            extents: extents.to_vec(),
            parts,
        })
    }

    /// The original leaf, unchanged, on device 0.
    pub(super) fn whole_leaf(&mut self, id: TensorId) -> R<TensorId> {
        let t = self.old.tensor(id);
        let name = t.name.clone();
        let new = match t.role {
            Role::Weight => self.b.weight(name, t.dtype(), t.ne()),
            Role::Input => self.b.input(name, t.dtype(), t.ne()),
            Role::State => self.b.state(name, t.dtype(), t.ne()),
            Role::Constant => {
                let init = t.init.clone().expect("a verified constant has an init");
                self.b.constant(name, t.dtype(), t.ne(), init)
            }
            Role::Intermediate | Role::Output => unreachable!("leafs have leaf roles"),
        }
        .map_err(|e| self.internal(id, e))?;
        Ok(self.placed(new, 0, "whole, on the first device".into()))
    }

    /// `t` as read on device `d`: a whole weight or constant gets its own
    /// mirror there (so it is never copied per run); anything else is read
    /// where it is.
    pub(super) fn at(&mut self, t: TensorId, d: usize) -> R<TensorId> {
        if self.device[t.index()].index() == d {
            return Ok(t);
        }
        let tt = self.b.tensor(t);
        let mirrorable =
            tt.is_leaf() && matches!(tt.role, Role::Weight | Role::Constant) && tt.shard.is_none();
        if !mirrorable {
            return Ok(t);
        }
        if let Some(&m) = self.mirrors.get(&(t, d)) {
            return Ok(m);
        }
        let mirror_name = self.fresh_name(None, format!("{}.mirror#{d}", tt.name));
        let (name, dtype, ne, role, init) =
            (mirror_name, tt.dtype(), tt.ne(), tt.role, tt.init.clone());
        let of = tt.name.clone();
        let m = match role {
            Role::Weight => {
                let shard = WeightShard {
                    of: of.clone(),
                    full_ne: ne,
                    axis: 0,
                    start: 0,
                };
                self.b.weight_shard(name, dtype, ne, shard)
            }
            _ => self
                .b
                .constant(name, dtype, ne, init.expect("a constant has an init")),
        }
        .map_err(|e| Error::Internal {
            pass: "tensor-split",
            problem: format!("mirroring '{of}': {e}"),
        })?;
        let m = self.placed(m, d, format!("mirror of '{of}'"));
        self.mark(m, SplitPart::Mirror { of: of.clone() });
        self.mirrors.insert((t, d), m);
        Ok(m)
    }

    /// A whole or mirrored value as read on device `d`.
    pub(super) fn on(&mut self, v: &Value, d: usize) -> R<TensorId> {
        match v {
            Value::Whole(t) => self.at(*t, d),
            Value::Mirrored(ts) => Ok(ts[d]),
            Value::Split { .. } | Value::Partial(_) | Value::Segmented(_) => {
                unreachable!("made whole first")
            }
        }
    }
}

//! The rewrite of [`super::split_tensors`]: every node of the original graph,
//! in id order, becomes per-device nodes according to its operands' split
//! states (see the module doc of [`super`] for the rules).
//!
//! Names: a split or partial value's parts and a mirrored value's copies are
//! `NAME#d` (device 0's mirrored copy keeps `NAME`); a whole value keeps
//! `NAME`; an all-reduce's results are `NAME.sum#d`, an all-gather's
//! `NAME.gather#d`; views slicing a whole operand `NAME.slice{axis}_{start}`;
//! whole weights and constants mirrored onto another device `NAME.mirror#d`.

use super::axis;
use super::rules::{LeafSplit, split_error};
use crate::Error;
use crate::assign::Assignment;
use crate::target::Target;
use ir::plan::{DeviceId, SplitPart};
use ir::{DType, Graph, GraphBuilder, Layout, Op, Role, TensorId, WeightShard};
use std::collections::BTreeMap;

/// A value's split state, as tensors of the new graph.
#[derive(Clone, Debug)]
enum Value {
    /// One tensor, read on any device (copied there by the split pass).
    Whole(TensorId),
    /// One full copy per device.
    Mirrored(Vec<TensorId>),
    /// Device `d` holds the slice of `extents[d]` along `axis` (in device order).
    Split {
        axis: usize,
        extents: Vec<i64>,
        parts: Vec<Option<TensorId>>,
    },
    /// Device `d` holds a full-shape partial sum (or nothing).
    Partial(Vec<Option<TensorId>>),
}

struct Rewriter<'g> {
    old: &'g Graph,
    leafs: &'g BTreeMap<TensorId, LeafSplit>,
    b: GraphBuilder,
    n: usize,
    /// Per new tensor: its device (views and writes are moved to their
    /// root's at the end) and why.
    device: Vec<DeviceId>,
    reason: Vec<String>,
    /// Per new tensor: what it holds of the original value (plan annotation).
    parts: Vec<Option<SplitPart>>,
    /// Per old tensor, once rewritten.
    values: Vec<Option<Value>>,
    /// Old tensors made whole on every device (by a collective), once each.
    whole: BTreeMap<TensorId, Vec<TensorId>>,
    /// Mirrors of whole leafs and slices of whole values, made once each.
    mirrors: BTreeMap<(TensorId, usize), TensorId>,
    slices: BTreeMap<(TensorId, usize, i64, i64), TensorId>,
    /// Packed copies of strided tensors, made once each.
    packs: BTreeMap<TensorId, TensorId>,
    groups: u32,
}

type R<T> = Result<T, Error>;

pub(super) fn rewrite(
    old: &Graph,
    target: &Target,
    leafs: &BTreeMap<TensorId, LeafSplit>,
) -> R<super::Sharded> {
    let mut rw = Rewriter {
        old,
        leafs,
        b: GraphBuilder::new(old.name.clone()),
        n: target.devices.len(),
        device: vec![],
        reason: vec![],
        parts: vec![],
        values: vec![None; old.len()],
        whole: BTreeMap::new(),
        mirrors: BTreeMap::new(),
        slices: BTreeMap::new(),
        packs: BTreeMap::new(),
        groups: 0,
    };
    for id in old.ids() {
        let t = old.tensor(id);
        let value = match t.op {
            None => rw.leaf(id)?,
            Some(op) if op.collective().is_some() => {
                return Err(split_error(
                    "--split-mode row",
                    &t.name,
                    "the graph already has collectives; split an unsplit graph",
                ));
            }
            Some(op) => rw.node(id, op)?,
        };
        rw.values[id.index()] = Some(value);
    }
    for id in old.ids().filter(|&id| old.tensor(id).role == Role::Output) {
        let out = rw.output(id)?;
        rw.b.mark_output(out).map_err(|e| rw.internal(id, e))?;
    }
    let Rewriter {
        b,
        mut device,
        reason,
        parts,
        ..
    } = rw;
    let graph = b.finish().map_err(|e| Error::Internal {
        pass: "tensor-split",
        problem: e.to_string(),
    })?;
    // Views and writes live with the bytes they alias.
    for id in graph.ids() {
        let root = graph.storage_of(id).root;
        device[id.index()] = device[root.index()];
    }
    Ok(super::Sharded {
        graph,
        assignment: Assignment {
            device,
            reason,
            parts,
        },
    })
}

impl Rewriter<'_> {
    fn internal(&self, id: TensorId, e: ir::Error) -> Error {
        Error::Internal {
            pass: "tensor-split",
            problem: format!("rewriting '{}': {e}", self.old.tensor(id).name),
        }
    }

    /// The tensor whose bytes new tensor `t` aliases (itself if none).
    fn root(&self, t: TensorId) -> TensorId {
        self.b.tensor(t).view.map_or(t, |v| v.root)
    }

    fn value(&self, id: TensorId) -> Value {
        self.values[id.index()]
            .clone()
            .expect("sources are rewritten before their users")
    }

    /// Records a new tensor's device and reason.
    fn placed(&mut self, t: TensorId, d: usize, why: String) -> TensorId {
        debug_assert_eq!(t.index(), self.device.len());
        self.device.push(DeviceId(d as u32));
        self.reason.push(why);
        self.parts.push(None);
        t
    }

    /// Annotates new tensor `t` with what it holds of an original value.
    fn mark(&mut self, t: TensorId, part: SplitPart) {
        self.parts[t.index()] = Some(part);
    }

    fn slice_of(&self, old: TensorId, axis: usize, start: i64) -> SplitPart {
        SplitPart::Slice {
            of: self.old.tensor(old).name.clone(),
            axis: axis as u8,
            start,
        }
    }

    #[allow(clippy::too_many_arguments)] // a node: what, where and why, in one call
    fn add_node(
        &mut self,
        old: TensorId,
        name: String,
        op: Op,
        srcs: &[TensorId],
        declared: Option<Layout>,
        d: usize,
        why: String,
    ) -> R<TensorId> {
        let t = self
            .b
            .node(name, op, srcs, declared)
            .map_err(|e| self.internal(old, e))?;
        Ok(self.placed(t, d, why))
    }

    // ---- leafs ----

    fn leaf(&mut self, id: TensorId) -> R<Value> {
        let t = self.old.tensor(id);
        let Some(split) = self.leafs.get(&id).cloned() else {
            let new = self.whole_leaf(id)?;
            return Ok(Value::Whole(new));
        };
        let mut parts = vec![None; self.n];
        let mut start = 0;
        for (d, &e) in split.extents.iter().enumerate() {
            if e == 0 {
                continue;
            }
            let mut ne = t.ne();
            ne[split.axis] = e;
            let name = format!("{}#{d}", t.name);
            let new = match t.role {
                Role::Weight => {
                    let shard = WeightShard {
                        of: t.name.clone(),
                        full_ne: t.ne(),
                        axis: split.axis as u8,
                        start,
                    };
                    self.b.weight_shard(name, t.dtype(), ne, shard)
                }
                _ => self.b.state(name, t.dtype(), ne),
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
                split.axis
            );
            let new = self.placed(new, d, why);
            let part = self.slice_of(id, split.axis, start);
            self.mark(new, part);
            parts[d] = Some(new);
            start += e;
        }
        Ok(Value::Split {
            axis: split.axis,
            extents: split.extents,
            parts,
        })
    }

    /// The original leaf, unchanged, on device 0.
    fn whole_leaf(&mut self, id: TensorId) -> R<TensorId> {
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
    fn at(&mut self, t: TensorId, d: usize) -> R<TensorId> {
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
        let (name, dtype, ne, role, init) = (
            format!("{}.mirror#{d}", tt.name),
            tt.dtype(),
            tt.ne(),
            tt.role,
            tt.init.clone(),
        );
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
    fn on(&mut self, v: &Value, d: usize) -> R<TensorId> {
        match v {
            Value::Whole(t) => self.at(*t, d),
            Value::Mirrored(ts) => Ok(ts[d]),
            Value::Split { .. } | Value::Partial(_) => unreachable!("made whole first"),
        }
    }

    // ---- collectives ----

    /// `v` (the value of old tensor `id`) whole: a partial sum all-reduced,
    /// a split value all-gathered (a split weight read whole instead).
    fn materialize(&mut self, id: TensorId, v: Value) -> R<Value> {
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
    fn collective(
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
    fn output(&mut self, id: TensorId) -> R<TensorId> {
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

    // ---- nodes ----

    fn node(&mut self, id: TensorId, op: Op) -> R<Value> {
        let srcs = self.old.tensor(id).srcs.clone();
        let vals: Vec<Value> = srcs.iter().map(|&s| self.value(s)).collect();
        let all_whole = vals
            .iter()
            .all(|v| matches!(v, Value::Whole(_) | Value::Mirrored(_)));
        if !all_whole && let Some(v) = self.split_rule(id, op, &vals)? {
            return Ok(v);
        }
        let mut whole = Vec::with_capacity(vals.len());
        for (s, v) in srcs.iter().zip(vals) {
            whole.push(self.materialize(*s, v)?);
        }
        self.plain(id, op, &whole)
    }

    /// `op` over whole operands: once (all whole, a write into a whole
    /// destination, a product with a whole weight) or on every device.
    fn plain(&mut self, id: TensorId, op: Op, vals: &[Value]) -> R<Value> {
        let t = self.old.tensor(id);
        let (name, layout) = (t.name.clone(), t.layout);
        let mirrored = vals.iter().any(|v| matches!(v, Value::Mirrored(_)));
        let once_on = match op.writes_into_source().map(|k| &vals[k]) {
            Some(Value::Whole(dst)) => Some(self.device[self.root(*dst).index()].index()),
            _ if !mirrored => Some(match vals.first() {
                Some(Value::Whole(s)) if op.is_view() => self.device[self.root(*s).index()].index(),
                _ => 0,
            }),
            _ if op == Op::MulMat && matches!(vals[0], Value::Whole(_)) => Some(0),
            _ => None,
        };
        if let Some(d) = once_on {
            let srcs = vals
                .iter()
                .map(|v| match v {
                    // A view reads its source where it is.
                    Value::Whole(s) if op.is_view() => Ok(*s),
                    _ => self.on(v, d),
                })
                .collect::<R<Vec<_>>>()?;
            let why = "whole, computed once".to_string();
            let new = self.add_node(id, name, op, &srcs, Some(layout), d, why)?;
            return Ok(Value::Whole(new));
        }
        let mut ts = Vec::with_capacity(self.n);
        for d in 0..self.n {
            let srcs = vals.iter().map(|v| self.on(v, d)).collect::<R<Vec<_>>>()?;
            let nm = if d == 0 {
                name.clone()
            } else {
                format!("{name}#{d}")
            };
            let why = "mirrored: computed on every device".to_string();
            let t = self.add_node(id, nm, op, &srcs, Some(layout), d, why)?;
            self.mark(t, SplitPart::Mirror { of: name.clone() });
            ts.push(t);
        }
        Ok(Value::Mirrored(ts))
    }

    /// A view of whole `v` (old tensor `src`) restricted to device `d`'s
    /// slice of `extents` along `axis`.
    fn slice(&mut self, v: &Value, axis: usize, extents: &[i64], d: usize) -> R<TensorId> {
        let t = self.on(v, d)?;
        let start: i64 = extents[..d].iter().sum();
        let key = (t, axis, start, extents[d]);
        if let Some(&s) = self.slices.get(&key) {
            return Ok(s);
        }
        let tt = self.b.tensor(t);
        let layout = tt.layout;
        let mut ne = layout.ne;
        ne[axis] = extents[d];
        let dtype = layout.dtype;
        let offset = if axis == 0 {
            (start as u64 / dtype.block_elems()) * dtype.block_bytes()
        } else {
            start as u64 * layout.nb[axis]
        };
        let name = format!("{}.slice{axis}_{start}", tt.name);
        let declared = Layout {
            dtype,
            ne,
            nb: layout.nb,
        };
        let s = self
            .b
            .node(name, Op::View { offset }, &[t], Some(declared))
            .map_err(|e| Error::Internal {
                pass: "tensor-split",
                problem: format!("slicing: {e}"),
            })?;
        let s = self.placed(s, d, format!("device {d}'s slice along axis {axis}"));
        let of = self.b.tensor(t).name.clone();
        let axis_u8 = axis as u8;
        self.mark(
            s,
            SplitPart::Slice {
                of,
                axis: axis_u8,
                start,
            },
        );
        self.slices.insert(key, s);
        Ok(s)
    }

    /// Per-device nodes of `op` for each device with a part: `srcs(d)` gives
    /// the operands and the declared layout.
    fn per_part(
        &mut self,
        id: TensorId,
        op: Op,
        have: &[bool],
        mut srcs: impl FnMut(&mut Self, usize) -> R<(Vec<TensorId>, Option<Layout>)>,
    ) -> R<Vec<Option<TensorId>>> {
        let name = self.old.tensor(id).name.clone();
        let mut parts = vec![None; self.n];
        for d in (0..self.n).filter(|&d| have[d]) {
            let (s, declared) = srcs(self, d)?;
            let why = format!("device {d}'s part of '{name}'");
            parts[d] = Some(self.add_node(id, format!("{name}#{d}"), op, &s, declared, d, why)?);
        }
        Ok(parts)
    }

    /// A split result, checked: each part has the original's extents but
    /// `extents[d]` along `axis`.
    fn split_result(
        &mut self,
        id: TensorId,
        axis: usize,
        extents: Vec<i64>,
        parts: Vec<Option<TensorId>>,
    ) -> R<Value> {
        let want = self.old.tensor(id).ne();
        for (d, p) in parts.iter().enumerate() {
            if let Some(p) = p {
                let start = extents[..d].iter().sum();
                let part = self.slice_of(id, axis, start);
                self.mark(*p, part);
                let mut ne = want;
                ne[axis] = extents[d];
                if self.b.tensor(*p).ne() != ne {
                    return Err(Error::Internal {
                        pass: "tensor-split",
                        problem: format!(
                            "part {d} of '{}' is {:?}, expected {ne:?}",
                            self.old.tensor(id).name,
                            self.b.tensor(*p).ne()
                        ),
                    });
                }
            }
        }
        Ok(Value::Split {
            axis,
            extents,
            parts,
        })
    }

    /// A partial result: each part annotated as a partial sum of `id`.
    fn partial_result(&mut self, id: TensorId, parts: Vec<Option<TensorId>>) -> Value {
        let of = self.old.tensor(id).name.clone();
        for p in parts.iter().flatten() {
            self.mark(*p, SplitPart::Partial { of: of.clone() });
        }
        Value::Partial(parts)
    }

    /// A part as a packed tensor (a `cont` on its device when strided).
    /// Made once per tensor: several readers may want the same part packed.
    fn packed(&mut self, id: TensorId, p: TensorId) -> R<TensorId> {
        if self.b.tensor(p).layout.is_contiguous() {
            return Ok(p);
        }
        if let Some(&done) = self.packs.get(&p) {
            return Ok(done);
        }
        let d = self.device[self.root(p).index()].index();
        let name = format!("{}.packed", self.b.tensor(p).name);
        let packed = self.add_node(id, name, Op::Cont, &[p], None, d, "packed".into())?;
        self.parts[packed.index()] = self.parts[p.index()].clone();
        self.packs.insert(p, packed);
        Ok(packed)
    }

    /// The op-specific rule keeping a split, or `None` to make operands whole.
    fn split_rule(&mut self, id: TensorId, op: Op, vals: &[Value]) -> R<Option<Value>> {
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
                let parts = parts.clone();
                if parts
                    .iter()
                    .flatten()
                    .any(|&p| !self.b.tensor(p).layout.is_contiguous())
                {
                    return Ok(None);
                }
                // Each part's view has its own shape, strides and offset.
                let name = t.name.clone();
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
            _ => self.split_rule_compute(id, op, vals, &src_ne, same_shape),
        }
    }

    /// Rules of ops that compute (elementwise of two sources, row ops,
    /// products, row writes and reads).
    fn split_rule_compute(
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
                    Ok((s, None))
                })?;
                Ok(Some(self.split_result(id, axis, extents, out)?))
            }
            (Op::MulMat, a, Some(b)) => self.mul_mat(id, a.clone(), b.clone(), src_ne),
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

    /// `mul_mat(a, b)` (`a [K, M, A2, A3]`, `b [K, N, B2, B3]`, result
    /// `[M, N, B2, B3]`, `a` broadcast over `b`'s axes 2 and 3).
    fn mul_mat(
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
        match (&a, &b) {
            // Column-parallel: the weight's rows split, the input whole.
            (
                Value::Split {
                    axis: 1,
                    extents,
                    parts,
                },
                b,
            ) if whole(b) => {
                let (extents, parts, b) = (extents.clone(), parts.clone(), b.clone());
                let out = self.per_part(id, Op::MulMat, &have(&parts), |rw, d| {
                    Ok((vec![parts[d].unwrap(), rw.on(&b, d)?], None))
                })?;
                Ok(Some(self.split_result(id, 0, extents, out)?))
            }
            // Row-parallel: both split along K alike: partial sums.
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
                let out = self.per_part(id, Op::MulMat, &have(&pa), |rw, d| {
                    let y = rw.packed(id, pb[d].ok_or_else(|| rw.mismatch(id))?)?;
                    Ok((vec![pa[d].unwrap(), y], None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
            // Row-parallel with a whole input: each device reads its slice of K.
            (
                Value::Split {
                    axis: 0,
                    extents,
                    parts,
                },
                b,
            ) if whole(b) => {
                let (extents, parts, b) = (extents.clone(), parts.clone(), b.clone());
                let out = self.per_part(id, Op::MulMat, &have(&parts), |rw, d| {
                    let slice = rw.slice(&b, 0, &extents, d)?;
                    Ok((vec![parts[d].unwrap(), rw.packed(id, slice)?], None))
                })?;
                Ok(Some(self.partial_result(id, out)))
            }
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

    fn mismatch(&self, id: TensorId) -> Error {
        Error::Internal {
            pass: "tensor-split",
            problem: format!(
                "'{}': its operands' parts are not on the same devices",
                self.old.tensor(id).name
            ),
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

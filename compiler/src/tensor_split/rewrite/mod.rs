//! The rewrite of [`super::split_tensors`]: every node of the original graph,
//! in id order, becomes per-device nodes according to its operands' split
//! states (see the module doc of [`super`] for the rules).
//!
//! Names: a split or partial value's parts and a mirrored value's copies are
//! `NAME#d` (device 0's mirrored copy keeps `NAME`); a whole value keeps
//! `NAME`; an all-reduce's results are `NAME.sum#d`, an all-gather's
//! `NAME.gather#d`; views slicing a whole operand `NAME.slice{axis}_{start}`;
//! whole weights and constants mirrored onto another device `NAME.mirror#d`.
//! A made name another tensor of the graph already has (an imported graph
//! names llama.cpp's repeats `NAME#k`) takes the first free `~k` suffix;
//! the original tensors keep theirs.
//!
//! Code map: this file holds the states, the walk and the helpers every rule
//! uses (per-part nodes, slices, packing, checked split results);
//! `leafs.rs` the shards, parts and mirrors of leafs; `rules.rs` the per-op
//! rules keeping a split; `mul_mat.rs` the products; `experts.rs` expert
//! parallelism (experts split along axis 2, routed values); `segments.rs` fused
//! matrices cut by segments (their products, bias adds, and the views that
//! read one segment); `collectives.rs` the all-reduces and all-gathers that
//! make values whole, and the outputs.

use super::rules::{LeafSplit, split_error};
use crate::Error;
use crate::assign::Assignment;
use crate::target::Target;
use ir::plan::{DeviceId, SplitPart};
use ir::{Graph, GraphBuilder, Layout, Op, Role, TensorId};
use std::collections::BTreeMap;

mod collectives;
mod experts;
mod leafs;
mod mul_mat;
mod rules;
mod segments;

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
    /// Segments along one axis (a fused QKV matrix's Q, K and V rows, and
    /// its products), each cut on its own: `(start, value)` with `value` a
    /// `Split` of the segment alone (as if it were its own tensor of the
    /// segment's extent), `start` where the segment begins.
    Segmented(Vec<(i64, Value)>),
}

struct Rewriter<'g> {
    old: &'g Graph,
    leafs: &'g BTreeMap<TensorId, LeafSplit>,
    b: GraphBuilder,
    n: usize,
    /// Each device's share (cuts made here, by reduce-scatters, follow it).
    shares: &'g [f64],
    /// Whether a partial sum may be completed by a reduce-scatter.
    scatter: bool,
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
    /// Partial sums cut by a reduce-scatter, once each.
    scattered: BTreeMap<TensorId, Value>,
    /// Partial values whose parts never overlap (expert parallelism), by
    /// old tensor: how their rows are shared out.
    routed: BTreeMap<TensorId, experts::Routing>,
    /// Mirrors of whole leafs and slices of whole values, made once each.
    mirrors: BTreeMap<(TensorId, usize), TensorId>,
    slices: BTreeMap<(TensorId, usize, i64, i64), TensorId>,
    /// Packed copies of strided tensors, made once each.
    packs: BTreeMap<TensorId, TensorId>,
    groups: u32,
}

type R<T> = Result<T, Error>;

/// Rewrites `old` with `leafs` split over the devices of `target` in
/// proportion to `shares`; `scatter`: partial sums whose reader keeps a cut
/// along some axis are completed by a reduce-scatter instead of an
/// all-reduce.
pub(super) fn rewrite(
    old: &Graph,
    target: &Target,
    leafs: &BTreeMap<TensorId, LeafSplit>,
    shares: &[f64],
    scatter: bool,
) -> R<super::Sharded> {
    let mut rw = Rewriter {
        old,
        leafs,
        b: GraphBuilder::new(old.name.clone()),
        n: target.devices.len(),
        shares,
        scatter,
        scattered: BTreeMap::new(),
        routed: BTreeMap::new(),
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

    fn is_whole(v: &Value) -> bool {
        matches!(v, Value::Whole(_) | Value::Mirrored(_))
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
        let name = self.fresh_name(Some(old), name);
        let t = self
            .b
            .node(name, op, srcs, declared)
            .map_err(|e| self.internal(old, e))?;
        Ok(self.placed(t, d, why))
    }

    /// `name` for a tensor made from original `old` (if any), or `name~k`
    /// (the smallest free k) when another original tensor has that name or a
    /// made one took it.
    fn fresh_name(&self, old: Option<TensorId>, name: String) -> String {
        let free = |n: &str| {
            !self.b.has_name(n) && self.old.find(n).is_none_or(|other| Some(other) == old)
        };
        if free(&name) {
            return name;
        }
        (1..)
            .map(|k| format!("{name}~{k}"))
            .find(|n| free(n))
            .expect("some suffix is free")
    }

    fn node(&mut self, id: TensorId, op: Op) -> R<Value> {
        let srcs = self.old.tensor(id).srcs.clone();
        let mut vals: Vec<Value> = srcs.iter().map(|&s| self.value(s)).collect();
        let all_whole = vals.iter().all(Self::is_whole);
        if !all_whole {
            if let Some(v) = self.routed_rule(id, op, &vals)? {
                return Ok(v);
            }
            if let Some(v) = self.segment_rule(id, op, &vals)? {
                return Ok(v);
            }
            if let Some(v) = self.split_rule(id, op, &vals)? {
                return Ok(v);
            }
            // Partial sums cut by a reduce-scatter where the op keeps the cut.
            if let Some(cut) = self.scattered_operands(id, op, &srcs, &vals)? {
                if let Some(v) = self.split_rule(id, op, &cut)? {
                    return Ok(v);
                }
                vals = cut; // made whole below (the axis test should prevent it)
            }
            if let Some(v) = self.split_weights_kept(id, op, &srcs, &vals)? {
                return Ok(v);
            }
        }
        let mut whole = Vec::with_capacity(vals.len());
        for (s, v) in srcs.iter().zip(vals) {
            whole.push(self.materialize(*s, v)?);
        }
        self.plain(id, op, &whole)
    }

    /// `op` with its activations made whole and its split weights kept as
    /// they are (a split weight read whole would undo its split), when that
    /// lets a rule keep the split; `None` when `op` reads no split weight or
    /// no split activation, or no rule fits then.
    fn split_weights_kept(
        &mut self,
        id: TensorId,
        op: Op,
        srcs: &[TensorId],
        vals: &[Value],
    ) -> R<Option<Value>> {
        let split_weight: Vec<bool> = srcs
            .iter()
            .zip(vals)
            .map(|(s, v)| {
                self.old.tensor(*s).role == Role::Weight
                    && matches!(v, Value::Split { .. } | Value::Segmented(_))
            })
            .collect();
        let split_activation = |k: usize| !split_weight[k] && !Self::is_whole(&vals[k]);
        if !split_weight.contains(&true) || !(0..vals.len()).any(split_activation) {
            return Ok(None);
        }
        let mut activations_whole = Vec::with_capacity(vals.len());
        for (k, (s, v)) in srcs.iter().zip(vals).enumerate() {
            activations_whole.push(if split_weight[k] {
                v.clone()
            } else {
                self.materialize(*s, v.clone())?
            });
        }
        self.split_rule(id, op, &activations_whole)
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
        self.split_result_from(id, 0, axis, extents, parts)
    }

    /// [`Self::split_result`] of a segment that begins at `first` along
    /// `axis` (device `d`'s part is the slice from `first` plus the extents
    /// before it).
    fn split_result_from(
        &mut self,
        id: TensorId,
        first: i64,
        axis: usize,
        extents: Vec<i64>,
        parts: Vec<Option<TensorId>>,
    ) -> R<Value> {
        let want = self.old.tensor(id).ne();
        for (d, p) in parts.iter().enumerate() {
            if let Some(p) = p {
                let start = first + extents[..d].iter().sum::<i64>();
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

    /// A partial result: each part annotated as a partial sum of `id`. With
    /// one part (the other devices got no heads or units) that part is the
    /// whole value.
    fn partial_result(&mut self, id: TensorId, parts: Vec<Option<TensorId>>) -> Value {
        if let [only] = parts.iter().flatten().collect::<Vec<_>>()[..] {
            return Value::Whole(*only);
        }
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

//! Pass `micro-batch` (`ggplan compile --pipeline N`): a graph over a batch
//! of tokens rewritten as N micro-batches run one after the other, so that a
//! layer split can pipeline them (ggml's `n_copies`: device 1 works on
//! micro-batch m while device 0 works on m + 1).
//!
//! # What is cut
//! Every graph input is cut along its outermost axis whose extent is not 1;
//! all inputs must agree on that extent, the batch `T`. Micro-batch `m` gets
//! tokens `start(m) .. start(m) + len(m)` (the first `T mod N` micro-batches
//! one token longer), as a view of each input. Weights, constants and state
//! are not cut. Every tensor of the rewritten graph is then one of:
//! - **shared**: it depends on no input (a weight view, a constant): computed
//!   once, read by every micro-batch;
//! - **cut** along one axis: one tensor per micro-batch, the original's
//!   extent `T` on that axis replaced by `len(m)` and nothing else changed;
//! - **versioned**: one tensor per micro-batch with the original's shape (the
//!   KV cache after a micro-batch's `set_rows`, and views of it).
//!
//! # Rules (the rewrite refuses, naming the node, where one does not hold)
//! - Elementwise ops, `cpy`/`cont`, `permute`/`transpose`, `rope` (positions
//!   cut with the rows) keep the cut axis where the op puts it. Row ops
//!   (norms, `soft_max`, `glu`, reductions along rows) must not have the cut
//!   on axis 0: their rows would mix micro-batches.
//! - `mul_mat(a, b)`: `a` must not be cut (attention over the batch's own
//!   keys mixes micro-batches: build the graph over a KV cache instead) and
//!   `b` not along axis 0 (a sum over tokens).
//! - `get_rows`: the indices may be cut, not the table.
//! - `reshape` and shaped `cont` keep a cut axis when the elements before it
//!   and after it group the same way (`[512, T] <-> [64, 8, T]`).
//! - `view`, `concat`, `diag_mask_inf` refuse a cut source (their offsets and
//!   positions speak of the whole batch).
//! - Every result is checked: a node with a cut source must come out cut on
//!   exactly the axis the rule says, with exactly `len(m)` there (so an
//!   operand the size of the whole batch, like a constant causal mask, is
//!   refused instead of broadcast).
//!
//! # Writes into state, in order
//! An op writing into state (`set_rows`, `cpy`) must be the only writer of
//! that root and its destination must be shared (the state or a view of it).
//! Micro-batch 0 writes into the destination; micro-batch m > 0 writes into
//! micro-batch m − 1's result, so the writes happen in order and every
//! reader of micro-batch m (reading through the write's result, as the graph
//! builders do) depends on the writes of micro-batches 0..=m. No node may read
//! the written root other than through the writer.
//!
//! Meaning: micro-batch m's attention sees the cache rows written by
//! micro-batches 0..=m only. This equals the whole batch's result exactly
//! when every token is masked from the rows of later tokens (causal
//! attention, which `models::llama::step_inputs` makes); outputs of
//! non-causal masks differ.
//!
//! # Outputs
//! A cut output is joined back with `concat` along its cut axis (a chain
//! `((p0 ++ p1) ++ p2) ...`) under its original name, so a pipelined plan has
//! the inputs and outputs of the original graph. A versioned output is
//! micro-batch N − 1's version. Nodes are named `NAME.mbM`.
//!
//! **Invariants** of the result: a verified graph; the original's leafs
//! (same names, roles, layouts) plus one view per (input, micro-batch); nodes
//! micro-batch by micro-batch in the original order (shared nodes once, with
//! micro-batch 0), then the joins; deterministic.

use crate::Error;
use ir::{Graph, GraphBuilder, Layout, Op, Role, Tensor, TensorId};
use std::collections::BTreeMap;

/// Said where a graph mixes the tokens of one batch in ways micro-batches
/// cannot express.
const WHOLE_BATCH_HINT: &str = "only inputs are cut, so positions or a causal mask stored as \
     constants, or attention over the batch's own keys, cannot be pipelined: build the graph \
     over a KV cache (`ggplan graph --gguf MODEL --ctx N`, or the `llama2l_kv` example)";

/// How one original tensor appears in the rewritten graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// One tensor shared by all micro-batches.
    Shared,
    /// One tensor per micro-batch, cut along this axis.
    Axis(usize),
    /// One tensor per micro-batch, with the original's shape.
    Versioned,
}

/// The token ranges of `n` micro-batches of a batch of `t` tokens: the first
/// `t mod n` one token longer. `(start, len)` each.
pub fn micro_batch_ranges(t: i64, n: u32) -> Vec<(i64, i64)> {
    let n = i64::from(n);
    let (base, extra) = (t / n, t % n);
    let mut start = 0;
    (0..n)
        .map(|m| {
            let len = base + i64::from(m < extra);
            let range = (start, len);
            start += len;
            range
        })
        .collect()
}

/// The outermost axis of `ne` whose extent is not 1 (0 when all are 1).
fn outer_axis(ne: &[i64; 4]) -> usize {
    (0..4).rev().find(|&a| ne[a] != 1).unwrap_or(0)
}

/// Rewrites `graph` into `n` micro-batches (see the module doc). `n` = 1
/// returns the graph unchanged.
pub fn micro_batches(graph: &Graph, n: u32) -> Result<Graph, Error> {
    if n <= 1 {
        return Ok(graph.clone());
    }
    let refuse = |tensor: &str, reason: String| Error::Pipeline {
        graph: graph.name.clone(),
        micro_batches: n,
        tensor: tensor.to_string(),
        reason,
    };
    let batch = batch_size(graph).map_err(|(tensor, reason)| refuse(&tensor, reason))?;
    if batch < i64::from(n) {
        return Err(refuse(
            "",
            format!("a batch of {batch} tokens cannot be cut into {n} micro-batches"),
        ));
    }
    let ranges = micro_batch_ranges(batch, n);
    let writers = single_writers(graph).map_err(|(tensor, reason)| refuse(&tensor, reason))?;
    Rewrite {
        graph,
        ranges,
        writers,
        cut: vec![Cut::Shared; graph.len()],
        ids: vec![Vec::new(); graph.len()],
        b: GraphBuilder::new(graph.name.clone()),
    }
    .run()
    .map_err(|(tensor, reason)| refuse(&tensor, reason))
}

/// The batch: the common extent of every input's outermost non-1 axis.
fn batch_size(graph: &Graph) -> Result<i64, (String, String)> {
    let mut batch: Option<(i64, &str)> = None;
    for id in graph.with_role(Role::Input) {
        let t = graph.tensor(id);
        let ne = t.ne();
        let extent = ne[outer_axis(&ne)];
        match batch {
            None => batch = Some((extent, &t.name)),
            Some((b, first)) if b != extent => {
                return Err((
                    t.name.clone(),
                    format!(
                        "inputs disagree on the batch (the extent of their outermost axis): \
                         '{first}' has {b}, '{}' has {extent}",
                        t.name
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    batch
        .map(|(b, _)| b)
        .ok_or_else(|| (String::new(), "the graph has no input to cut".to_string()))
}

/// The node writing into each written root; refuses a root with two writers.
fn single_writers(graph: &Graph) -> Result<BTreeMap<TensorId, TensorId>, (String, String)> {
    let mut writers = BTreeMap::new();
    for id in graph.nodes() {
        let t = graph.tensor(id);
        let Some(dst) = t.op.as_ref().and_then(Op::writes_into_source) else {
            continue;
        };
        let root = graph.storage_of(t.srcs[dst]).root;
        if let Some(first) = writers.insert(root, id) {
            return Err((
                t.name.clone(),
                format!(
                    "'{}' is written by '{}' and '{}': micro-batches can order only one writer \
                     per tensor",
                    graph.tensor(root).name,
                    graph.tensor(first).name,
                    t.name
                ),
            ));
        }
    }
    Ok(writers)
}

/// The rewrite's working state.
struct Rewrite<'g> {
    graph: &'g Graph,
    ranges: Vec<(i64, i64)>,
    /// Written root -> its only writer.
    writers: BTreeMap<TensorId, TensorId>,
    /// Per original tensor: how it is cut.
    cut: Vec<Cut>,
    /// Per original tensor: its new tensor(s), one if shared, else one per micro-batch.
    ids: Vec<Vec<TensorId>>,
    b: GraphBuilder,
}

type Refusal = (String, String);

impl Rewrite<'_> {
    fn run(mut self) -> Result<Graph, Refusal> {
        let graph = self.graph;
        for id in graph.nodes() {
            self.read_around_writer(id)?;
        }
        for id in graph.leafs() {
            self.leaf(id)?;
        }
        for m in 0..self.ranges.len() {
            for id in graph.nodes() {
                self.node(id, m)?;
            }
        }
        for id in graph.nodes() {
            if graph.tensor(id).role == Role::Output {
                self.output(id)?;
            }
        }
        self.b.finish().map_err(|e| (String::new(), e.to_string()))
    }

    /// The new tensor standing for original `id` in micro-batch `m`.
    fn at(&self, id: TensorId, m: usize) -> TensorId {
        let v = &self.ids[id.index()];
        match self.cut[id.index()] {
            Cut::Shared => v[0],
            _ => v[m],
        }
    }

    fn leaf(&mut self, id: TensorId) -> Result<(), Refusal> {
        let t = self.graph.tensor(id);
        let err = |e: ir::Error| (t.name.clone(), e.to_string());
        let (dtype, ne) = (t.dtype(), t.ne());
        let new = match t.role {
            Role::Weight => self.b.weight(&t.name, dtype, ne),
            Role::Input => self.b.input(&t.name, dtype, ne),
            Role::State => self.b.state(&t.name, dtype, ne),
            Role::Constant => {
                let init = t
                    .init
                    .clone()
                    .ok_or_else(|| (t.name.clone(), "a constant without its values".to_string()))?;
                self.b.constant(&t.name, dtype, ne, init)
            }
            Role::Intermediate | Role::Output => {
                return Err((t.name.clone(), "a leaf with a node's role".into()));
            }
        }
        .map_err(err)?;
        if t.role != Role::Input {
            self.ids[id.index()] = vec![new];
            return Ok(());
        }
        let axis = outer_axis(&ne);
        let nb = t.layout.nb;
        let mut views = Vec::with_capacity(self.ranges.len());
        for (m, &(start, len)) in self.ranges.iter().enumerate() {
            let mut part = ne;
            part[axis] = len;
            let offset = start as u64 * nb[axis];
            let view = self
                .b
                .view(
                    format!("{}.mb{m}", t.name),
                    new,
                    part,
                    [nb[1], nb[2], nb[3]],
                    offset,
                )
                .map_err(err)?;
            views.push(view);
        }
        self.cut[id.index()] = Cut::Axis(axis);
        self.ids[id.index()] = views;
        Ok(())
    }

    fn node(&mut self, id: TensorId, m: usize) -> Result<(), Refusal> {
        let t: &Tensor = self.graph.tensor(id);
        let op = t.op.expect("a node has an op");
        let src_cuts: Vec<Cut> = t.srcs.iter().map(|s| self.cut[s.index()]).collect();
        let writes = op.writes_into_source();
        let depends = writes.is_some() || src_cuts.iter().any(|c| *c != Cut::Shared);
        if !depends {
            // Shared: emitted once, with micro-batch 0.
            if m == 0 {
                let srcs: Vec<TensorId> = t.srcs.iter().map(|&s| self.at(s, 0)).collect();
                let declared = declared_layout(t, None, 0);
                let new = self
                    .b
                    .node(&t.name, op, &srcs, declared)
                    .map_err(|e| (t.name.clone(), e.to_string()))?;
                self.ids[id.index()] = vec![new];
            }
            return Ok(());
        }
        let expected = self.expected_cut(t, &op, &src_cuts)?;
        let mut srcs: Vec<TensorId> = t.srcs.iter().map(|&s| self.at(s, m)).collect();
        if let Some(dst) = writes {
            if src_cuts[dst] != Cut::Shared {
                return Err((
                    t.name.clone(),
                    format!(
                        "{} writes into '{}', which differs between micro-batches; only a \
                         write into state (or a view of it) can be ordered",
                        op.name(),
                        self.graph.tensor(t.srcs[dst]).name
                    ),
                ));
            }
            if m > 0 {
                srcs[dst] = self.ids[id.index()][m - 1];
            }
        }
        let len = self.ranges[m].1;
        let axis = match expected {
            Cut::Axis(a) => Some(a),
            _ => None,
        };
        let declared = declared_layout(t, axis, len);
        // A versioned output keeps its name on its last version (the joins
        // name cut outputs); every other node is suffixed.
        let last = m + 1 == self.ranges.len();
        let name = if t.role == Role::Output && last && !matches!(expected, Cut::Axis(_)) {
            t.name.clone()
        } else {
            format!("{}.mb{m}", t.name)
        };
        let new = self
            .b
            .node(&name, op, &srcs, declared)
            .map_err(|e| (t.name.clone(), format!("micro-batch {m}: {e}")))?;
        let mut want = t.ne();
        if let Some(a) = axis {
            want[a] = len;
        }
        let got = self.b.tensor(new).ne();
        if got != want {
            return Err((
                t.name.clone(),
                format!(
                    "micro-batch {m} comes out {} where the cut predicts {}: an operand spans \
                     the whole batch; {WHOLE_BATCH_HINT}",
                    ir::layout::fmt_ne(&got),
                    ir::layout::fmt_ne(&want)
                ),
            ));
        }
        self.cut[id.index()] = expected;
        self.ids[id.index()].push(new);
        Ok(())
    }

    /// Refuses a node that reads a written root other than through its writer.
    fn read_around_writer(&self, id: TensorId) -> Result<(), Refusal> {
        let t = self.graph.tensor(id);
        let op = t.op.as_ref().expect("a node");
        if op.is_view() {
            return Ok(()); // views only name bytes; their readers are checked
        }
        for (i, &s) in t.srcs.iter().enumerate() {
            let root = self.graph.storage_of(s).root;
            let Some(&writer) = self.writers.get(&root) else {
                continue;
            };
            let through_writer = self.depends_on(s, writer);
            let is_dst = writer == id && op.writes_into_source() == Some(i);
            if !through_writer && !is_dst {
                return Err((
                    t.name.clone(),
                    format!(
                        "reads '{}' without going through its write '{}': its micro-batches \
                         could not say which writes they see",
                        self.graph.tensor(root).name,
                        self.graph.tensor(writer).name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// True when `id` is `target` or a view chain over it.
    fn depends_on(&self, mut id: TensorId, target: TensorId) -> bool {
        loop {
            if id == target {
                return true;
            }
            let t = self.graph.tensor(id);
            match &t.op {
                Some(op) if op.is_view() => id = t.srcs[0],
                _ => return false,
            }
        }
    }

    /// How `t`'s result is cut, given its sources' cuts, or why it cannot be.
    fn expected_cut(&self, t: &Tensor, op: &Op, src: &[Cut]) -> Result<Cut, Refusal> {
        let refuse = |why: &str| Err((t.name.clone(), format!("{}: {why}", op.name())));
        let axes: Vec<usize> = src
            .iter()
            .filter_map(|c| match c {
                Cut::Axis(a) => Some(*a),
                _ => None,
            })
            .collect();
        let cut_src = |i: usize| match src.get(i) {
            Some(Cut::Axis(a)) => Some(*a),
            _ => None,
        };
        if axes.is_empty() {
            return Ok(Cut::Versioned);
        }
        if op.writes_into_source().is_some() {
            return Ok(Cut::Versioned);
        }
        let one_axis = || -> Result<usize, Refusal> {
            if axes.iter().all(|&a| a == axes[0]) {
                Ok(axes[0])
            } else {
                Err((
                    t.name.clone(),
                    format!("{}: operands are cut along different axes", op.name()),
                ))
            }
        };
        let same_shape_cont = *op == Op::Cont && t.ne() == self.graph.tensor(t.srcs[0]).ne();
        if op.is_unary() || op.is_binary() || same_shape_cont {
            return Ok(Cut::Axis(one_axis()?));
        }
        match op {
            Op::RmsNorm { .. }
            | Op::Norm { .. }
            | Op::SoftMax { .. }
            | Op::Glu { .. }
            | Op::SumRows
            | Op::Mean
            | Op::Argmax
            | Op::Argsort { .. } => {
                let a = one_axis()?;
                if a == 0 {
                    return refuse("its rows run along the cut axis and would mix micro-batches");
                }
                Ok(Cut::Axis(a))
            }
            Op::MulMat => {
                if cut_src(0).is_some() {
                    return Err((
                        t.name.clone(),
                        format!(
                            "mul_mat: its first operand is cut into micro-batches (attention \
                             over the batch's own keys mixes them); {WHOLE_BATCH_HINT}"
                        ),
                    ));
                }
                match cut_src(1) {
                    Some(0) => refuse("it sums over the cut axis"),
                    Some(a) => Ok(Cut::Axis(a)),
                    None => Ok(Cut::Versioned),
                }
            }
            // Tokens run along the activations' axis 2 and the ids' axis 1.
            Op::MulMatId => match (cut_src(0), cut_src(1), cut_src(2)) {
                (None, Some(2), Some(1)) => Ok(Cut::Axis(2)),
                _ => refuse(
                    "activations (axis 2) and expert ids (axis 1) must be cut together, the \
                     experts whole",
                ),
            },
            Op::GetRows => {
                // One table per token (MoE's chosen probabilities): matrix
                // k of the table serves the indices' column k.
                if cut_src(0) == Some(2) && cut_src(1) == Some(1) {
                    return Ok(Cut::Axis(2));
                }
                if cut_src(0).is_some() {
                    return refuse("its table is cut into micro-batches");
                }
                match cut_src(1) {
                    Some(a) if a < 3 => Ok(Cut::Axis(a + 1)),
                    _ => refuse("its indices are cut along their last axis"),
                }
            }
            Op::Rope(_) => match (cut_src(0), cut_src(1)) {
                (Some(2), Some(0)) => Ok(Cut::Axis(2)),
                (Some(2), None) => Err((
                    t.name.clone(),
                    format!("rope: its positions span the whole batch; {WHOLE_BATCH_HINT}"),
                )),
                _ => refuse("rows and positions must be cut together (rows along axis 2)"),
            },
            Op::View { offset } => {
                let a = one_axis()?;
                match view_axis(self.graph.tensor(t.srcs[0]), t, a, *offset) {
                    Some(b) => Ok(Cut::Axis(b)),
                    None => refuse("the view does not keep the cut axis whole"),
                }
            }
            Op::Permute { axes: p } => Ok(Cut::Axis(p[one_axis()?] as usize)),
            Op::Transpose => Ok(Cut::Axis(match one_axis()? {
                0 => 1,
                1 => 0,
                a => a,
            })),
            Op::Reshape | Op::Cont => {
                let a = one_axis()?;
                let from = self.graph.tensor(t.srcs[0]).ne();
                match regrouped_axis(&from, a, &t.ne()) {
                    Some(b) => Ok(Cut::Axis(b)),
                    None => refuse("the new shape does not keep the cut axis whole"),
                }
            }
            _ => refuse("this op cannot take an operand cut into micro-batches"),
        }
    }

    /// Joins a cut output back under its own name.
    fn output(&mut self, id: TensorId) -> Result<(), Refusal> {
        let t = self.graph.tensor(id);
        let name = t.name.clone();
        let mark = |b: &mut GraphBuilder, new: TensorId| {
            b.mark_output(new)
                .map_err(|e| (name.clone(), e.to_string()))
        };
        match self.cut[id.index()] {
            Cut::Shared => mark(&mut self.b, self.ids[id.index()][0]),
            Cut::Versioned => {
                let last = *self.ids[id.index()].last().expect("versions");
                mark(&mut self.b, last)
            }
            Cut::Axis(axis) => {
                let parts = self.ids[id.index()].clone();
                let mut joined = parts[0];
                for (m, &part) in parts.iter().enumerate().skip(1) {
                    let join_name = if m + 1 == parts.len() {
                        name.clone()
                    } else {
                        format!("{name}.join{m}")
                    };
                    joined = self
                        .b
                        .concat(join_name, joined, part, axis as u8)
                        .map_err(|e| (name.clone(), e.to_string()))?;
                }
                mark(&mut self.b, joined)
            }
        }
    }
}

/// The layout to declare for a rewritten view, reshape or shaped `cont`
/// (`None` for ops whose shape the builder infers): the original's, with
/// extent `len` on the cut axis.
fn declared_layout(t: &Tensor, axis: Option<usize>, len: i64) -> Option<Layout> {
    let op = t.op.as_ref()?;
    if !matches!(op, Op::View { .. } | Op::Reshape | Op::Cont) {
        return None;
    }
    let mut layout = t.layout;
    if let Some(a) = axis {
        layout.ne[a] = len;
    }
    if matches!(op, Op::Reshape | Op::Cont) {
        layout.nb = [0; 4]; // inferred: contiguous
    }
    Some(layout)
}

/// The axis of `view` that is axis `a` of its packed source `src` (same
/// extent, same stride), when every other axis of the view, from its
/// `offset`, stays inside one step of axis `a`: then each micro-batch's view
/// is the same view of that micro-batch's slice (whose strides up to `a` are
/// the source's), with the cut axis shortened. `None` otherwise.
fn view_axis(src: &Tensor, view: &Tensor, a: usize, offset: u64) -> Option<usize> {
    if !src.layout.is_contiguous() || src.dtype().is_quantized() {
        return None;
    }
    let step = src.layout.nb[a];
    let b = (0..4).find(|&b| view.ne()[b] == src.ne()[a] && view.layout.nb[b] == step)?;
    let others: u64 = (0..4)
        .filter(|&c| c != b)
        .map(|c| (view.ne()[c] - 1) as u64 * view.layout.nb[c])
        .sum();
    (offset + others + view.dtype().block_bytes() <= step).then_some(b)
}

/// Where cut axis `a` of a contiguous `from` lands in `to` (same elements):
/// the axis of `to` with the same extent and the same element counts before
/// and after it, if any.
fn regrouped_axis(from: &[i64; 4], a: usize, to: &[i64; 4]) -> Option<usize> {
    let before: i64 = from[..a].iter().product();
    let after: i64 = from[a + 1..].iter().product();
    (0..4).find(|&b| {
        to[b] == from[a]
            && to[..b].iter().product::<i64>() == before
            && to[b + 1..].iter().product::<i64>() == after
    })
}

#[cfg(test)]
mod tests;

//! Pass `schedule`: the execution order of a graph's nodes once every tensor
//! has a device.
//!
//! ggml runs nodes in the order the graph lists them and cuts a split at every
//! device change. This pass reorders, within what the data allows, so that
//! nodes of one device run back to back (fewer splits, fewer copies to wait
//! for) and, as a tie-breaker, so that intermediates die early.
//!
//! # Ordering constraints ([`dependencies`])
//! A node runs after:
//! - every node among its sources (views included: a view is a node);
//! - state hazards: for every root `R` that some node writes into
//!   (`cpy`/`set_rows`, [`ir::Op::writes_into_source`]), the non-view nodes
//!   that *touch* `R` — write into it, or read it directly or through any view
//!   (a source whose [`Graph::storage_of`] root is `R`) — keep their graph id
//!   order wherever one of the pair writes: a write runs after every earlier
//!   toucher, and a read runs after the last earlier write. Two reads between
//!   the same writes may swap (they see the same bytes). View nodes never take
//!   part: they only name bytes; the nodes reading through them do.
//!
//! Every constraint goes from a smaller id to a larger one (sources have
//! smaller ids in a verified graph; a source with a larger id is ignored, with
//! a debug assertion), so the constraints are acyclic and the graph's own id
//! order always satisfies them.
//!
//! # Heuristic (list scheduling)
//! - A view node is emitted as soon as its last constraint is emitted (views of
//!   leafs at the very start), before anything else: it costs nothing and
//!   never decides a device switch.
//! - Otherwise the scheduler keeps a *current device*. While that device has a
//!   ready non-view node it runs one of them; only when none is ready does it
//!   switch, to the device whose smallest ready node id is the smallest.
//! - Among the ready nodes of the current device it takes first the one whose
//!   result reaches another device soonest: its *hand-off*, the smallest id
//!   of a node on another device that depends on it through nodes of its own
//!   device (none: last). Then the one whose inputs from other devices
//!   arrive soonest: its *release*, the largest id of another device's node it
//!   depends on through nodes of its own device (none: 0). Then the one with
//!   the largest net memory gain, then the smallest id. Handing off first lets
//!   the other device start early, and running work in the order its inputs
//!   arrive keeps a device busy while it waits for the rest (pipelined
//!   micro-batches: device 0 finishes micro-batch 0's layers before it starts
//!   micro-batch 1's; the last device runs micro-batch 0's output head while
//!   micro-batch 1 is on its way). On one device every hand-off is "none" and
//!   every release 0, and the order is the memory order below. Net gain = bytes freed −
//!   bytes allocated, where *freed* sums the span bytes of every compute
//!   intermediate root (a non-leaf, non-view, role `Intermediate` tensor) the
//!   node reads (directly or through views) as its last unscheduled reader, and
//!   *allocated* is the node's own span bytes when it owns compute memory (a
//!   non-view node that does not write into a source, role Intermediate or
//!   Output). Outputs, leafs and state are never freed. In-place reuse is not
//!   modelled.
//!
//! On a single device this is a pure memory-greedy topological order: it
//! equals the input order exactly when, at every step, the next node of the
//! input order is ready and has the best (gain, then smallest id) among the
//! ready nodes. It does for the `mlp` and `llama2l` examples (view nodes
//! aside); in `bert2l`, which lists q, k and v before `kq`, `kq` and its
//! softmax (which free q and k) run before v is computed. Views of leafs
//! move to the front.
//!
//! Across devices, grouping wins over memory: staying on a device may keep a
//! tensor alive longer than the input order would.
//!
//! **Invariants** of the returned [`Schedule`]: every node of the graph exactly
//! once, no leaf; every node after all of its [`dependencies`]; the same graph
//! and assignment always give the same order (no hash iteration, ties by id).
//!
//! Cost: O(E + N·W) where W is the largest number of ready nodes on one device
//! (each pick scans the current device's ready set).

use crate::assign::Assignment;
use crate::target::DeviceId;
use ir::{Graph, Role, Tensor, TensorId};
use std::collections::{BTreeMap, BTreeSet};

/// An execution order of a graph's nodes (leafs excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Every node exactly once, each after all of its [`dependencies`].
    pub order: Vec<TensorId>,
}

/// True for view nodes (view, reshape, permute, transpose).
fn is_view_node(t: &Tensor) -> bool {
    t.op.as_ref().is_some_and(|op| op.is_view())
}

/// The root written by a write-into node (`cpy`, `set_rows`), if `t` is one.
fn written_root(graph: &Graph, id: TensorId) -> Option<TensorId> {
    let t = graph.tensor(id);
    let op = t.op.as_ref()?;
    op.writes_into_source()?;
    Some(graph.storage_of(id).root)
}

/// The distinct roots that node `id` reads through its sources, in ascending
/// id order (empty for view nodes and leafs).
fn roots_read(graph: &Graph, id: TensorId) -> Vec<TensorId> {
    let t = graph.tensor(id);
    if t.is_leaf() || is_view_node(t) {
        return Vec::new();
    }
    let mut roots: Vec<TensorId> = t
        .srcs
        .iter()
        .filter(|s| s.index() < graph.len())
        .map(|&s| graph.storage_of(s).root)
        .collect();
    roots.sort_unstable();
    roots.dedup();
    roots
}

/// The nodes each node must run after, indexed by tensor id (empty for leafs),
/// ascending and without repeats: its node sources plus the state-hazard edges
/// described in the module doc. Every entry is smaller than its node's id.
pub fn dependencies(graph: &Graph) -> Vec<Vec<TensorId>> {
    let n = graph.len();
    let mut deps: Vec<Vec<TensorId>> = vec![Vec::new(); n];
    for id in graph.nodes() {
        for &s in &graph.tensor(id).srcs {
            debug_assert!(s < id, "source {s} of {id} is not before it");
            if s < id && !graph.tensor(s).is_leaf() {
                deps[id.index()].push(s);
            }
        }
    }

    // Touchers of every root that is written into, in id order.
    let written: BTreeSet<TensorId> = graph
        .nodes()
        .filter_map(|id| written_root(graph, id))
        .collect();
    let mut touchers: BTreeMap<TensorId, Vec<(TensorId, bool)>> = BTreeMap::new();
    for id in graph.nodes() {
        let writes = written_root(graph, id);
        if let Some(r) = writes {
            touchers.entry(r).or_default().push((id, true));
        }
        for r in roots_read(graph, id) {
            if Some(r) != writes && written.contains(&r) {
                touchers.entry(r).or_default().push((id, false));
            }
        }
    }
    for list in touchers.values() {
        let mut last_write: Option<TensorId> = None;
        let mut reads_since: Vec<TensorId> = Vec::new();
        for &(id, writes) in list {
            let d = &mut deps[id.index()];
            d.extend(last_write);
            if writes {
                d.append(&mut reads_since);
                last_write = Some(id);
            } else {
                reads_since.push(id);
            }
        }
    }

    for d in &mut deps {
        d.sort_unstable();
        d.dedup();
    }
    deps
}

/// What the memory tie-breaker needs to know about each tensor.
struct MemoryModel {
    /// Compute intermediate roots each node reads (ascending, distinct).
    reads: Vec<Vec<TensorId>>,
    /// Unscheduled non-view nodes still reading each compute intermediate root.
    readers_left: Vec<u32>,
    /// Span bytes of each tensor.
    bytes: Vec<u64>,
    /// True when the node owns compute memory (allocates when it runs).
    allocates: Vec<bool>,
}

impl MemoryModel {
    fn new(graph: &Graph) -> MemoryModel {
        let n = graph.len();
        let is_compute_root = |r: TensorId| {
            let t = graph.tensor(r);
            !t.is_leaf() && t.view.is_none() && t.role == Role::Intermediate
        };
        let mut reads = vec![Vec::new(); n];
        let mut readers_left = vec![0u32; n];
        for id in graph.nodes() {
            let r: Vec<TensorId> = roots_read(graph, id)
                .into_iter()
                .filter(|&r| is_compute_root(r))
                .collect();
            for x in &r {
                readers_left[x.index()] += 1;
            }
            reads[id.index()] = r;
        }
        let bytes = graph
            .tensors()
            .iter()
            .map(|t| t.layout.span_bytes())
            .collect();
        let allocates = graph
            .tensors()
            .iter()
            .map(|t| {
                t.op.as_ref().is_some_and(|op| {
                    !op.is_view() && op.writes_into_source().is_none() && t.view.is_none()
                }) && matches!(t.role, Role::Intermediate | Role::Output)
            })
            .collect();
        MemoryModel {
            reads,
            readers_left,
            bytes,
            allocates,
        }
    }

    /// Bytes freed minus bytes allocated if `id` ran now.
    fn gain(&self, id: TensorId) -> i128 {
        let freed: i128 = self.reads[id.index()]
            .iter()
            .filter(|r| self.readers_left[r.index()] == 1)
            .map(|r| i128::from(self.bytes[r.index()]))
            .sum();
        let allocated = if self.allocates[id.index()] {
            i128::from(self.bytes[id.index()])
        } else {
            0
        };
        freed - allocated
    }

    fn ran(&mut self, id: TensorId) {
        for r in &self.reads[id.index()] {
            let left = &mut self.readers_left[r.index()];
            *left = left.saturating_sub(1);
        }
    }
}

/// The list scheduler's state.
struct Scheduler<'a> {
    graph: &'a Graph,
    assignment: &'a Assignment,
    users: Vec<Vec<TensorId>>,
    pending: Vec<usize>,
    ready_views: BTreeSet<TensorId>,
    ready: BTreeMap<DeviceId, BTreeSet<TensorId>>,
    memory: MemoryModel,
    /// Per node: the smallest id of another device's node depending on it
    /// through this device's nodes (`u32::MAX`: none).
    handoff: Vec<u32>,
    /// Per node: the largest id of another device's node it depends on
    /// through this device's nodes (0: none).
    release: Vec<u32>,
    order: Vec<TensorId>,
}

impl Scheduler<'_> {
    /// The device a node runs on (device 0 for an id the assignment lacks).
    fn device(&self, id: TensorId) -> DeviceId {
        self.assignment
            .device
            .get(id.index())
            .copied()
            .unwrap_or(DeviceId(0))
    }

    fn make_ready(&mut self, id: TensorId) {
        if is_view_node(self.graph.tensor(id)) {
            self.ready_views.insert(id);
        } else {
            let d = self.device(id);
            self.ready.entry(d).or_default().insert(id);
        }
    }

    fn emit(&mut self, id: TensorId) {
        self.order.push(id);
        self.memory.ran(id);
        for i in 0..self.users[id.index()].len() {
            let u = self.users[id.index()][i];
            let p = &mut self.pending[u.index()];
            *p -= 1;
            if *p == 0 {
                self.make_ready(u);
            }
        }
    }

    /// Emits ready views (and the views they make ready), smallest id first.
    fn drain_views(&mut self) {
        while let Some(v) = self.ready_views.pop_first() {
            self.emit(v);
        }
    }

    /// The device to run next: the current one while it has a ready node,
    /// else the one whose smallest ready id is smallest.
    fn next_device(&self, current: Option<DeviceId>) -> Option<DeviceId> {
        if let Some(d) = current
            && self.ready.get(&d).is_some_and(|s| !s.is_empty())
        {
            return Some(d);
        }
        self.ready
            .iter()
            .filter_map(|(&d, s)| s.first().map(|&first| (first, d)))
            .min()
            .map(|(_, d)| d)
    }

    /// The ready node of `device` with the earliest hand-off, then the
    /// earliest release, then the largest memory gain, then the smallest id.
    fn pick(&self, device: DeviceId) -> Option<TensorId> {
        let mut best: Option<((u32, u32, i128), TensorId)> = None;
        for &id in self.ready.get(&device)? {
            let i = id.index();
            // Smaller is better in each place; ids ascend, so a tie keeps the smaller id.
            let key = (self.handoff[i], self.release[i], -self.memory.gain(id));
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, id));
            }
        }
        best.map(|(_, id)| id)
    }
}

/// Orders the nodes of `graph` for devices `assignment`: see the module doc
/// for the constraints and the heuristic.
///
/// `assignment.device` is expected to have one entry per tensor; a node
/// without one is treated as on device 0 (debug builds assert).
pub fn schedule_nodes(graph: &Graph, assignment: &Assignment) -> Schedule {
    debug_assert_eq!(
        assignment.device.len(),
        graph.len(),
        "assignment does not cover the graph"
    );
    let deps = dependencies(graph);
    let mut users: Vec<Vec<TensorId>> = vec![Vec::new(); graph.len()];
    let mut pending = vec![0usize; graph.len()];
    for id in graph.nodes() {
        for &d in &deps[id.index()] {
            users[d.index()].push(id);
        }
        pending[id.index()] = deps[id.index()].len();
    }
    let n_nodes = graph.nodes().count();
    let device = |id: TensorId| assignment.device.get(id.index()).copied();
    let mut handoff = vec![u32::MAX; graph.len()];
    let nodes: Vec<TensorId> = graph.nodes().collect();
    for &id in nodes.iter().rev() {
        // Users have larger ids: their hand-offs are known.
        handoff[id.index()] = users[id.index()]
            .iter()
            .map(|&u| {
                if device(u) != device(id) {
                    u.0
                } else {
                    handoff[u.index()]
                }
            })
            .min()
            .unwrap_or(u32::MAX);
    }
    let mut release = vec![0u32; graph.len()];
    for &id in &nodes {
        // Dependencies have smaller ids: their releases are known.
        release[id.index()] = deps[id.index()]
            .iter()
            .map(|&d| {
                if device(d) != device(id) {
                    d.0
                } else {
                    release[d.index()]
                }
            })
            .max()
            .unwrap_or(0);
    }
    let mut s = Scheduler {
        graph,
        assignment,
        users,
        pending,
        ready_views: BTreeSet::new(),
        ready: BTreeMap::new(),
        memory: MemoryModel::new(graph),
        handoff,
        release,
        order: Vec::with_capacity(n_nodes),
    };
    for id in graph.nodes() {
        if s.pending[id.index()] == 0 {
            s.make_ready(id);
        }
    }
    s.drain_views();
    let mut current = None;
    while let Some(d) = s.next_device(current) {
        current = Some(d);
        let Some(id) = s.pick(d) else { break };
        if let Some(set) = s.ready.get_mut(&d) {
            set.remove(&id);
        }
        s.emit(id);
        s.drain_views();
    }
    debug_assert_eq!(s.order.len(), n_nodes, "constraints left nodes unscheduled");
    Schedule { order: s.order }
}

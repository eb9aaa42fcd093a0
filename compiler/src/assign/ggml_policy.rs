//! Policy `ggml`: what ggml_backend_sched would decide, so users can see it.
//!
//! The passes of `ggml_backend_sched_split_graph`, over the nodes in graph
//! order (never reordered), each one only filling what is still unassigned:
//! - **pins**, what llama.cpp assigns before ggml's passes: each block's norm
//!   on its block's device ([`super::llama_norm_pins`]);
//! - **pass 1**, a tensor's own buffer: weights where the weight placement
//!   put them; inputs and constants on the last device (ggml gives graph
//!   inputs to its last backend, the CPU); state (pre-allocated, like a KV
//!   cache) with its block's weights (llama.cpp keeps a layer's cache with
//!   the layer), else on the last device, moved to the first device that runs
//!   every op writing into it if needed; a view or write-into op whose root
//!   is pre-allocated (weight, state) takes the root's device; otherwise the
//!   *first* source that is a weight decides: its device if that device runs
//!   the op, else nothing yet (rope is skipped, as in ggml). With
//!   `--op-offload` (llama.cpp's default; without it ggplan plans as
//!   llama.cpp's `--no-op-offload`): when that weight is in the
//!   last device's host memory, the first CUDA device that runs the op takes
//!   it instead if its batch ([`offload_batch`]) is at least
//!   [`OFFLOAD_MIN_BATCH`] (ggml-cuda's `offload_op`; RPC and CPU devices
//!   never take one), and the weight is copied to it each run;
//! - **pass 2**, expansion: accelerator assignments (every device but the
//!   last) spread down the node list, then up, skipping view ops and
//!   stopping at nodes on the last device; then any assignment spreads down,
//!   then up. A node the spreading device cannot run is left for pass 3;
//! - **pass 3**: each node still unassigned takes the device (priority order
//!   on ties) that runs it and can use the most of its sources' buffers (its
//!   own, or the host's when the device is the CPU and the buffer host-visible);
//! - **pass 4**: views take their root's device, sources still unassigned
//!   their user's.
//!
//! Not modelled: ggml's pass-3 "upgrade" between backends sharing a buffer
//! type (each device here has its own memory), and ggml-cuda's copy of only
//! the experts a batch routes to when it offloads a `mul_mat_id` (the plan
//! copies the whole expert tensor). Where ggml would run a
//! write-into op away from its destination (a destination that is an
//! intermediate on another device), it runs where the destination lives and
//! its reason says so. Reasons name the pass that decided.

use super::{Assignment, WeightPlacement, is_view_op, no_device_for_writes};
use crate::Error;
use crate::placement::layer_of;
use crate::target::{DeviceId, DeviceKind, Target, cannot_run};
use ir::{Graph, Op, Role, Tensor, TensorId};

/// The batch from which ggml's CUDA backend takes an op whose weight is in
/// host memory (`GGML_OP_OFFLOAD_MIN_BATCH`'s default).
pub const OFFLOAD_MIN_BATCH: i64 = 32;

/// The batch ggml-cuda measures an op by (`get_op_batch_size`): a product's
/// columns, the tokens of `mul_mat_id` and rope (axis 2), never a
/// `get_rows` (0), otherwise its rows.
pub fn offload_batch(t: &Tensor) -> i64 {
    let ne = t.ne();
    match t.op {
        Some(Op::GetRows) => 0,
        Some(Op::MulMat) => ne[1],
        Some(Op::MulMatId | Op::Rope(_)) => ne[2],
        _ => ne[1] * ne[2] * ne[3],
    }
}

/// Assigns every tensor as ggml_backend_sched would; see the module doc.
///
/// `op_offload`: ggml's (`--op-offload`), see the module doc.
pub(super) fn assign_like_ggml(
    graph: &Graph,
    target: &Target,
    weights: &WeightPlacement,
    op_offload: bool,
) -> Result<Assignment, Error> {
    let last = DeviceId(target.devices.len().saturating_sub(1) as u32);
    let mut s = Sched {
        graph,
        target,
        last,
        dev: vec![None; graph.len()],
        why: vec![String::new(); graph.len()],
        op_offload,
    };
    s.pass1_leafs(weights)?;
    for (id, pin) in super::llama_norm_pins::norm_pins(graph, target, weights)
        .into_iter()
        .enumerate()
    {
        if let Some((d, why)) = pin {
            s.set(TensorId(id as u32), d, why);
        }
    }
    s.pass1_nodes()?;
    s.expand(true, true);
    s.expand(false, true);
    s.expand(true, false);
    s.expand(false, false);
    s.pass3()?;
    s.pass4();
    s.finish()
}

struct Sched<'a> {
    graph: &'a Graph,
    target: &'a Target,
    last: DeviceId,
    dev: Vec<Option<DeviceId>>,
    why: Vec<String>,
    op_offload: bool,
}

impl Sched<'_> {
    fn name(&self, d: DeviceId) -> &str {
        &self.target.devices[d.index()].name
    }

    fn tensor_name(&self, id: TensorId) -> &str {
        &self.graph.tensor(id).name
    }

    fn set(&mut self, id: TensorId, d: DeviceId, why: String) {
        self.dev[id.index()] = Some(d);
        self.why[id.index()] = why;
    }

    /// The device of `id`'s bytes so far: its own, else its root's.
    fn current(&self, id: TensorId) -> Option<DeviceId> {
        self.dev[id.index()].or(self.dev[self.graph.storage_of(id).root.index()])
    }

    fn pass1_leafs(&mut self, weights: &WeightPlacement) -> Result<(), Error> {
        for leaf in self.graph.leafs() {
            let (d, why) = match self.graph.tensor(leaf).role {
                Role::Weight => match weights.device[leaf.index()] {
                    Some(d) => (d, weights.reason[leaf.index()].clone()),
                    None => (self.last, "weight without a placement".to_string()),
                },
                Role::State => self.state_device(leaf, weights)?,
                _ => (
                    self.last,
                    format!(
                        "graph input, given to the last device ({})",
                        self.name(self.last)
                    ),
                ),
            };
            let why = format!("ggml pass 1: {why}");
            self.set(leaf, d, why);
        }
        Ok(())
    }

    /// A state leaf lives with its block's weights, else on the last device;
    /// then on the first device that runs every op writing into it.
    fn state_device(
        &self,
        state: TensorId,
        weights: &WeightPlacement,
    ) -> Result<(DeviceId, String), Error> {
        let g = self.graph;
        let layer = layer_of(&g.tensor(state).name);
        let with_block = layer.and_then(|l| {
            g.with_role(Role::Weight)
                .find(|&w| layer_of(&g.tensor(w).name) == Some(l))
                .and_then(|w| weights.device[w.index()].map(|d| (l, d)))
        });
        let (wanted, why) = match with_block {
            Some((l, d)) => (
                d,
                format!(
                    "state of block {l}, kept with that block's weights on {}",
                    self.name(d)
                ),
            ),
            None => (
                self.last,
                format!(
                    "state in no block, in host memory on {}",
                    self.name(self.last)
                ),
            ),
        };
        let writers: Vec<TensorId> = g
            .ids()
            .filter(|&id| id != state && g.storage_of(id).root == state && !is_view_op(g, id))
            .collect();
        let runs_all = |d: DeviceId| writers.iter().all(|&w| !cannot_run(g, self.target, d, w));
        if runs_all(wanted) {
            return Ok((wanted, why));
        }
        match self.target.device_ids().find(|&d| runs_all(d)) {
            Some(d) => Ok((
                d,
                format!(
                    "{why}, but {} cannot run the ops writing into it: on {}, the first device that can",
                    self.name(wanted),
                    self.name(d)
                ),
            )),
            None => Err(no_device_for_writes(g, self.target, state)),
        }
    }

    fn pass1_nodes(&mut self) -> Result<(), Error> {
        let g = self.graph;
        for node in g.nodes() {
            let t = g.tensor(node);
            let Some(op) = t.op else { continue };
            if self.dev[node.index()].is_some() {
                continue; // pinned by llama.cpp
            }
            if let Some(view) = t.view {
                let root_role = g.tensor(view.root).role;
                if let (Role::Weight | Role::State, Some(d)) =
                    (root_role, self.dev[view.root.index()])
                {
                    if cannot_run(g, self.target, d, node) {
                        return Err(no_device_for_writes(g, self.target, view.root));
                    }
                    let what = if op.is_view() {
                        "view of"
                    } else {
                        "writes into"
                    };
                    let why = format!(
                        "ggml pass 1: {what} '{}', whose buffer is on {}",
                        self.tensor_name(view.root),
                        self.name(d)
                    );
                    self.set(node, d, why);
                    continue;
                }
            }
            if matches!(op, Op::Rope(_)) {
                continue; // ggml: rope's frequency tensor is too small to decide
            }
            let first_weight = t
                .srcs
                .iter()
                .map(|&s| g.storage_of(s).root)
                .find(|&r| g.tensor(r).role == Role::Weight);
            if let Some(w) = first_weight
                && let Some(d) = self.dev[w.index()]
                && let Some(b) = self.offload_to(node, d)
            {
                let why = format!(
                    "ggml pass 1, op_offload: its first weight source '{}' is in host memory \
                     on {}, and a batch of {} >= {OFFLOAD_MIN_BATCH} goes to {} (the weight \
                     is copied there each run)",
                    self.tensor_name(w),
                    self.name(d),
                    offload_batch(t),
                    self.name(b)
                );
                self.set(node, b, why);
            } else if let Some(w) = first_weight
                && let Some(d) = self.dev[w.index()]
                && !cannot_run(g, self.target, d, node)
            {
                let why = format!(
                    "ggml pass 1: its first weight source '{}' is on {}",
                    self.tensor_name(w),
                    self.name(d)
                );
                self.set(node, d, why);
            }
        }
        Ok(())
    }

    /// The CUDA device that takes `node` from its weight's device `d` under
    /// `op_offload`: only from the last device when it is a CPU (host
    /// memory), the first CUDA device in priority order that runs it, when
    /// its batch reaches [`OFFLOAD_MIN_BATCH`].
    fn offload_to(&self, node: TensorId, d: DeviceId) -> Option<DeviceId> {
        let devices = &self.target.devices;
        if !self.op_offload || d != self.last || !devices[d.index()].is_cpu() {
            return None;
        }
        if offload_batch(self.graph.tensor(node)) < OFFLOAD_MIN_BATCH {
            return None;
        }
        (0..d.index())
            .map(|b| DeviceId(b as u32))
            .filter(|b| matches!(devices[b.index()].kind, DeviceKind::Cuda { .. }))
            .find(|&b| !cannot_run(self.graph, self.target, b, node))
    }

    /// Pass 2, one sweep: `down` the node list or up; `accelerators_only`
    /// stops spreading at nodes on the last device.
    fn expand(&mut self, down: bool, accelerators_only: bool) {
        let g = self.graph;
        let mut nodes: Vec<TensorId> = g.nodes().filter(|&n| !is_view_op(g, n)).collect();
        if !down {
            nodes.reverse();
        }
        let dir = if down { "down" } else { "up" };
        let round = if accelerators_only {
            ""
        } else {
            " (second round: any device spreads)"
        };
        let mut cur: Option<(DeviceId, TensorId)> = None;
        for n in nodes {
            match self.dev[n.index()] {
                Some(d) if accelerators_only && d == self.last => cur = None,
                Some(d) => cur = Some((d, n)),
                None => {
                    if let Some((d, from)) = cur
                        && !cannot_run(g, self.target, d, n)
                    {
                        let why = format!(
                            "ggml pass 2: expanded {dir} from '{}' on {}{round}",
                            self.tensor_name(from),
                            self.name(d)
                        );
                        self.set(n, d, why);
                    }
                }
            }
        }
    }

    fn pass3(&mut self) -> Result<(), Error> {
        let g = self.graph;
        for n in g.nodes().filter(|&n| !is_view_op(g, n)) {
            if self.dev[n.index()].is_some() {
                continue;
            }
            let srcs = &g.tensor(n).srcs;
            let mut best: Option<(DeviceId, usize)> = None;
            for b in self.target.device_ids() {
                if cannot_run(g, self.target, b, n) {
                    continue;
                }
                let usable = srcs
                    .iter()
                    .filter(|&&s| self.current(s).is_some_and(|d| self.buffer_usable(d, b)))
                    .count();
                if best.is_none_or(|(_, k)| usable > k) {
                    best = Some((b, usable));
                }
            }
            let Some((b, k)) = best else {
                // check_support ran first; kept as an error, never a panic.
                return Err(no_device_for_writes(g, self.target, g.storage_of(n).root));
            };
            let why = format!(
                "ggml pass 3: {} runs it and can use {k} of its {} sources' buffers, the most",
                self.name(b),
                srcs.len()
            );
            self.set(n, b, why);
        }
        Ok(())
    }

    /// ggml_backend_sched_buffer_supported: device `b` can use a buffer on `d`.
    fn buffer_usable(&self, d: DeviceId, b: DeviceId) -> bool {
        d == b
            || (self.target.devices[b.index()].is_cpu()
                && self.target.devices[d.index()].host_visible)
    }

    fn pass4(&mut self) {
        let g = self.graph;
        for n in g.nodes() {
            let t = g.tensor(n);
            if let Some(view) = t.view
                && self.dev[n.index()].is_none()
                && let Some(d) = self.dev[view.root.index()]
            {
                let why = format!(
                    "ggml pass 4: view of '{}', on its root's device {}",
                    self.tensor_name(view.root),
                    self.name(d)
                );
                self.set(n, d, why);
            }
            let Some(here) = self.dev[n.index()] else {
                continue;
            };
            for &s in &t.srcs {
                if self.dev[s.index()].is_none() {
                    let d = self.current(s).unwrap_or(here);
                    let why = format!(
                        "ggml pass 4: source of '{}', takes its device {}",
                        t.name,
                        self.name(d)
                    );
                    self.set(s, d, why);
                }
            }
        }
    }

    /// Views and write-into ops live with their root; nothing is left empty.
    fn finish(mut self) -> Result<Assignment, Error> {
        let g = self.graph;
        for id in g.ids() {
            let Some(view) = g.tensor(id).view else {
                continue;
            };
            let Some(root_dev) = self.dev[view.root.index()] else {
                continue;
            };
            if self.dev[id.index()] == Some(root_dev) {
                continue;
            }
            if cannot_run(g, self.target, root_dev, id) {
                return Err(no_device_for_writes(g, self.target, view.root));
            }
            let why = format!(
                "{} (ggml would run it elsewhere and write across devices); it runs where '{}' lives: {}",
                self.why[id.index()],
                self.tensor_name(view.root),
                self.name(root_dev)
            );
            self.set(id, root_dev, why);
        }
        let mut device = Vec::with_capacity(g.len());
        for id in g.ids() {
            device.push(match self.dev[id.index()] {
                Some(d) => d,
                None => {
                    self.why[id.index()] =
                        "ggml: no pass reached it (no user); the last device".to_string();
                    self.last
                }
            });
        }
        Ok(Assignment {
            device,
            reason: self.why,
            parts: Vec::new(),
        })
    }
}

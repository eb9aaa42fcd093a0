//! The plan's tensor table: the graph's tensors, then copies on other devices
//! and views re-created over those copies.
//!
//! Invariant: `owner[t]` is the plan tensor whose bytes `t` reads or writes: a
//! graph view's root, a write-into op's destination root, a re-created view's
//! copy, or `t` itself.

use crate::Error;
use crate::assign::Assignment;
use crate::target::DeviceId;
use ir::plan::{Placement, PlanTensor};
use ir::{Graph, Role, TensorId};
use std::collections::BTreeMap;

/// Plan tensors under construction.
pub(super) struct TensorTable {
    /// The plan's tensors (placements filled in by later steps).
    pub tensors: Vec<PlanTensor>,
    /// For each plan tensor: the tensor owning its bytes.
    pub owner: Vec<u32>,
    /// For each plan tensor that is a view: byte offset into its owner.
    pub view_offset: Vec<u64>,
    /// (graph tensor, device) -> its plan tensor on that device.
    on_device: BTreeMap<(u32, DeviceId), u32>,
}

/// Not yet placed; every tensor gets a real placement before the plan is returned.
const UNPLACED: Placement = Placement::Arena {
    arena: u32::MAX,
    offset: 0,
};

impl TensorTable {
    /// The graph's tensors where the assignment put them.
    pub fn new(graph: &Graph, a: &Assignment) -> TensorTable {
        let mut table = TensorTable {
            tensors: vec![],
            owner: vec![],
            view_offset: vec![],
            on_device: BTreeMap::new(),
        };
        for id in graph.ids() {
            let t = graph.tensor(id);
            let at = graph.storage_of(id);
            table.tensors.push(PlanTensor {
                name: t.name.clone(),
                dtype: t.layout.dtype,
                ne: t.layout.ne,
                nb: t.layout.nb,
                role: t.role,
                device: a.device[id.index()],
                placement: UNPLACED,
                copy_of: None,
                init: t.init.clone(),
                shard: t.shard.clone(),
                part: a.parts.get(id.index()).cloned().flatten(),
                reason: a.reason[id.index()].clone(),
            });
            table.owner.push(at.root.0);
            table.view_offset.push(at.offset);
            table.on_device.insert((id.0, a.device[id.index()]), id.0);
        }
        table
    }

    /// Adds the copy of root `root` on device `to` (once).
    pub fn add_copy(&mut self, graph: &Graph, root: TensorId, to: DeviceId) {
        if self.on_device.contains_key(&(root.0, to)) {
            return;
        }
        let t = graph.tensor(root);
        let id = self.tensors.len() as u32;
        let from = self.tensors[root.index()].device;
        self.tensors.push(PlanTensor {
            name: format!("{}@{}", t.name, to.0),
            dtype: t.layout.dtype,
            ne: t.layout.ne,
            nb: t.layout.nb,
            role: Role::Intermediate,
            device: to,
            placement: UNPLACED,
            copy_of: Some(root.0),
            init: None,
            shard: None,
            part: self.tensors[root.index()].part.clone(),
            reason: format!("copy of '{}' from {from} for readers on {to}", t.name),
        });
        self.owner.push(id);
        self.view_offset.push(0);
        self.on_device.insert((root.0, to), id);
    }

    /// The plan tensor of root `root`'s copy on `to` (added by [`Self::add_copy`]).
    pub fn copy_id(&self, root: TensorId, to: DeviceId) -> u32 {
        self.on_device[&(root.0, to)]
    }

    /// The plan tensor a step on device `d` reads for graph tensor `t`: `t`
    /// itself, its copy, or (for a view) the view re-created over its root's copy.
    pub fn local(&mut self, graph: &Graph, t: TensorId, d: DeviceId) -> Result<u32, Error> {
        if let Some(&id) = self.on_device.get(&(t.0, d)) {
            return Ok(id);
        }
        let at = graph.storage_of(t);
        let root_copy = *self
            .on_device
            .get(&(at.root.0, d))
            .ok_or_else(|| Error::Internal {
                pass: "emit",
                problem: format!(
                    "'{}' is read on {d} but the split pass placed no copy of '{}' there",
                    graph.tensor(t).name,
                    graph.tensor(at.root).name
                ),
            })?;
        let src = graph.tensor(t);
        let id = self.tensors.len() as u32;
        self.tensors.push(PlanTensor {
            name: format!("{}@{}", src.name, d.0),
            dtype: src.layout.dtype,
            ne: src.layout.ne,
            nb: src.layout.nb,
            role: Role::Intermediate,
            device: d,
            placement: UNPLACED,
            copy_of: Some(t.0),
            init: None,
            shard: None,
            part: None,
            reason: format!("view '{}' re-created over the copy on {d}", src.name),
        });
        self.owner.push(root_copy);
        self.view_offset.push(at.offset);
        self.on_device.insert((t.0, d), id);
        Ok(id)
    }

    /// Gives every tensor that does not own its bytes a view placement.
    pub fn place_views(&mut self) {
        for t in 0..self.tensors.len() {
            let owner = self.owner[t];
            if owner as usize != t && self.tensors[t].placement != Placement::Fused {
                self.tensors[t].placement = Placement::View {
                    of: owner,
                    offset: self.view_offset[t],
                };
            }
        }
    }
}

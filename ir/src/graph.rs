//! A compute graph: tensors in a topological order.
//!
//! Invariant: tensor ids are positions in `tensors`, and every source of a
//! tensor has a smaller id, so iterating in id order is a valid execution
//! order. A `Graph` built by [`crate::builder::GraphBuilder`] or parsed by
//! [`crate::text`] has passed [`crate::verify::verify`]; one made with
//! [`Graph::from_tensors`] has not, until verified.

use crate::tensor::{Role, Tensor, TensorId, ViewOf};
use std::collections::BTreeMap;

/// Tensors (leafs and nodes) in a topological order, looked up by id or name.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The graph's name (for messages and file names).
    pub name: String,
    tensors: Vec<Tensor>,
    by_name: BTreeMap<String, TensorId>,
}

impl Graph {
    /// Wraps tensors without checking them; run [`crate::verify::verify`]
    /// before trusting the result. A duplicated name maps to its first tensor.
    pub fn from_tensors(name: impl Into<String>, tensors: Vec<Tensor>) -> Graph {
        let mut by_name = BTreeMap::new();
        for (i, t) in tensors.iter().enumerate() {
            by_name.entry(t.name.clone()).or_insert(TensorId(i as u32));
        }
        Graph {
            name: name.into(),
            tensors,
            by_name,
        }
    }

    /// All tensors, indexed by id.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensor with id `id`. Panics on an id from another graph.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the graph has no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Every id, in topological order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// The id of the tensor called `name`.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.by_name.get(name).copied()
    }

    /// Nodes (tensors computed by an op), in execution order.
    pub fn nodes(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(|&id| !self.tensor(id).is_leaf())
    }

    /// Leafs (weights, inputs, state, constants), in id order.
    pub fn leafs(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(|&id| self.tensor(id).is_leaf())
    }

    /// Tensors with role `role`, in id order.
    pub fn with_role(&self, role: Role) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(move |&id| self.tensor(id).role == role)
    }

    /// The tensor owning `id`'s bytes and the offset into it (itself at 0 when
    /// `id` is not a view).
    pub fn storage_of(&self, id: TensorId) -> ViewOf {
        self.tensor(id).view.unwrap_or(ViewOf {
            root: id,
            offset: 0,
        })
    }
}

//! The reference evaluator: runs a whole graph with the reference kernels.
//!
//! Memory follows ggml's model: every root tensor (a leaf or a non-view node)
//! owns one packed byte buffer; views and write-into ops (`cpy`, `set_rows`)
//! read and write their root's buffer through their own strides and offset.
//! So a `cpy` into a view of a state tensor really updates the state, exactly as
//! it would on a device.
//!
//! Invariants:
//! - nodes run in id order (the graph's topological order), one at a time;
//! - a node's values are computed from its sources' *stored* bytes, so rounding
//!   to the stored dtype happens where ggml rounds it;
//! - leaf binding is strict: a weight or input whose dtype or shape differs from
//!   the graph's is an error naming the tensor, never a silent conversion.

use crate::reference::{Dense, compute, gather, scatter};
use ir::files::TensorSource;
use ir::{Graph, Op, Role, TensorId};
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// Where weight values come from.
pub enum Weights<'a> {
    /// Bound by name from a tensor file; dtype and shape must match the graph.
    File(&'a dyn TensorSource),
    /// Seeded random values (see [`random_leaf`]); the same seed and tensor
    /// name always give the same bytes.
    Random {
        /// Seed mixed with each tensor's name.
        seed: u64,
    },
}

/// Everything the caller provides to run a graph.
pub struct Bindings<'a> {
    /// Weight values.
    pub weights: Weights<'a>,
    /// Input (and optionally initial state) values by tensor name.
    pub inputs: BTreeMap<String, Dense>,
    /// When set, inputs not given are filled with seeded random values
    /// (token ids within the table they index); otherwise they are an error.
    pub random_inputs: Option<u64>,
}

/// Why a graph could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The graph breaks invariants (only possible for graphs made with
    /// `Graph::from_tensors` and never verified); every violation is listed.
    #[error("graph '{graph}' is invalid:\n{}", ir::error::list_violations(.violations))]
    InvalidGraph {
        /// The graph's name.
        graph: String,
        /// What `ir::verify` found.
        violations: Vec<ir::Violation>,
    },
    /// The graph's tensors need more memory than this machine has available.
    #[error(
        "evaluating graph '{graph}' needs {needed} bytes of tensor memory, but only {available} are available"
    )]
    TooLarge {
        /// The graph's name.
        graph: String,
        /// Bytes of all root tensors together.
        needed: u64,
        /// Available memory reported by the OS.
        available: u64,
    },
    /// A plan refers to tensors, arenas or kernels it does not have, or to
    /// bytes outside an arena.
    #[error("the plan is inconsistent: {problem}")]
    InvalidPlan {
        /// What is wrong.
        problem: String,
    },
    /// A weight the graph needs is not in the file.
    #[error("weight '{name}' is not in {file}")]
    MissingWeight {
        /// Tensor name.
        name: String,
        /// The weights file.
        file: String,
    },
    /// The stored tensor a weight shard is cut from is not in the file.
    #[error("weight shard '{name}' is cut from '{of}', which is not in {file}")]
    MissingShardSource {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from.
        of: String,
        /// The weights file.
        file: String,
    },
    /// The stored tensor a weight shard is cut from has another dtype or
    /// shape than the shard says its source has.
    #[error(
        "weight shard '{name}' is cut from '{of}', which is {found} but the shard expects {expected}"
    )]
    ShardSourceMismatch {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from.
        of: String,
        /// What the file stores (dtype and ne).
        found: String,
        /// The shard's dtype and its source's full extents.
        expected: String,
    },
    /// A weight shard whose slice does not fit its source (only possible in
    /// graphs or plans that were never verified or checked).
    #[error("weight shard '{name}' of '{of}': {why}")]
    InvalidShard {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from.
        of: String,
        /// What is wrong with the slice.
        why: String,
    },
    /// A bound tensor's dtype or shape differs from the graph's.
    #[error("{what} '{name}' is {found} but the graph expects {expected}")]
    Mismatch {
        /// `weight` or `input`.
        what: &'static str,
        /// Tensor name.
        name: String,
        /// What was provided (dtype and ne).
        found: String,
        /// What the graph declares.
        expected: String,
    },
    /// An input was not provided and random inputs are off.
    #[error("input '{name}' ({expected}) was not given")]
    MissingInput {
        /// Tensor name.
        name: String,
        /// Its dtype and ne.
        expected: String,
    },
    /// A value given for a tensor the graph does not have, or that is not an input or state.
    #[error("'{name}' is not an input or state tensor of the graph{hint}")]
    NotAnInput {
        /// The name given.
        name: String,
        /// Names it could have meant.
        hint: String,
    },
    /// An I32 value that is not a valid index.
    #[error(
        "input '{name}': value {value} at element {index} is outside 0..{bound} (rows of '{table}')"
    )]
    IndexOutOfRange {
        /// Tensor name.
        name: String,
        /// Offending value.
        value: f64,
        /// Flat element index.
        index: usize,
        /// Exclusive upper bound.
        bound: i64,
        /// The tensor it indexes.
        table: String,
    },
}

/// The memory of an evaluated graph: one buffer per root tensor.
pub struct Memory<'g> {
    graph: &'g Graph,
    buffers: Vec<Vec<u8>>,
}

impl Memory<'_> {
    /// The values of tensor `id` as stored (read through its view, if any);
    /// zeros for a node the run has not reached.
    pub fn read(&self, id: TensorId) -> Dense {
        let at = self.graph.storage_of(id);
        let bytes = &self.buffers[at.root.index()][at.offset as usize..];
        gather(bytes, &self.graph.tensor(id).layout)
    }

    /// The raw bytes of root tensor `id` (empty for views).
    pub fn bytes(&self, id: TensorId) -> &[u8] {
        &self.buffers[id.index()]
    }
}

/// Runs `graph` and returns its memory after the last node.
pub fn evaluate<'g>(graph: &'g Graph, bindings: &Bindings<'_>) -> Result<Memory<'g>, EvalError> {
    evaluate_observed(graph, bindings, |_, _| ControlFlow::Continue(()))
}

/// Like [`evaluate`], calling `observer` with each node's values right after it
/// runs (views included); returning `Break` stops the run there.
pub fn evaluate_observed<'g>(
    graph: &'g Graph,
    bindings: &Bindings<'_>,
    mut observer: impl FnMut(TensorId, &Dense) -> ControlFlow<()>,
) -> Result<Memory<'g>, EvalError> {
    let violations = ir::verify::verify(graph);
    if !violations.is_empty() {
        return Err(EvalError::InvalidGraph {
            graph: graph.name.clone(),
            violations,
        });
    }
    check_input_names(graph, &bindings.inputs)?;
    check_fits_in_memory(graph)?;
    let mut memory = Memory {
        graph,
        buffers: graph.tensors().iter().map(|_| Vec::new()).collect(),
    };
    for id in graph.leafs() {
        memory.buffers[id.index()] = bind::bind_leaf(&leaf_of(graph, id), bindings)?;
        check_indices(graph, id, &memory.read(id))?;
    }
    // Every root gets its (zeroed) bytes up front, so `read` is valid for any
    // tensor even when the observer stops the run early.
    for id in graph.nodes().filter(|&id| graph.tensor(id).view.is_none()) {
        memory.buffers[id.index()] = vec![0u8; graph.tensor(id).layout.span_bytes() as usize];
    }
    for id in graph.nodes() {
        let t = graph.tensor(id);
        let op = t.op.expect("nodes have an op");
        if !op.is_view() {
            let srcs: Vec<Dense> = t.srcs.iter().map(|&s| memory.read(s)).collect();
            let refs: Vec<&Dense> = srcs.iter().collect();
            let values = compute(&op, &refs, &t.layout);
            let at = graph.storage_of(id);
            scatter(
                &values,
                &mut memory.buffers[at.root.index()][at.offset as usize..],
                &t.layout,
            );
        }
        if observer(id, &memory.read(id)).is_break() {
            break;
        }
    }
    Ok(memory)
}

/// Refuses graphs whose buffers cannot be allocated here, instead of letting
/// the allocation abort the process. Skipped where the OS does not say.
fn check_fits_in_memory(graph: &Graph) -> Result<(), EvalError> {
    let needed: u64 = graph
        .ids()
        .filter(|&id| graph.tensor(id).view.is_none())
        .map(|id| graph.tensor(id).layout.span_bytes())
        .fold(0u64, u64::saturating_add);
    match available_memory() {
        Some(available) if needed > available => Err(EvalError::TooLarge {
            graph: graph.name.clone(),
            needed,
            available,
        }),
        _ => Ok(()),
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes (Linux only).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

fn check_input_names(graph: &Graph, inputs: &BTreeMap<String, Dense>) -> Result<(), EvalError> {
    for name in inputs.keys() {
        let ok = graph
            .find(name)
            .is_some_and(|id| matches!(graph.tensor(id).role, Role::Input | Role::State));
        if !ok {
            let names: Vec<&str> = graph
                .ids()
                .map(|id| graph.tensor(id))
                .filter(|t| matches!(t.role, Role::Input | Role::State))
                .map(|t| t.name.as_str())
                .collect();
            let hint = if names.is_empty() {
                String::new()
            } else {
                format!(" (its inputs: {})", names.join(", "))
            };
            return Err(EvalError::NotAnInput {
                name: name.clone(),
                hint,
            });
        }
    }
    Ok(())
}

/// Every value of an index leaf must address an existing row of each tensor
/// it indexes (`get_rows` tables, `set_rows` destinations): the kernels treat a
/// bad index as a broken invariant, so bad input must stop here.
fn check_indices(graph: &Graph, id: TensorId, values: &Dense) -> Result<(), EvalError> {
    for (table, bound) in index_users(graph, id) {
        let bad = values
            .data
            .iter()
            .enumerate()
            .find(|&(_, &v)| !(v >= 0.0 && v < bound as f64 && v.fract() == 0.0));
        if let Some((index, &value)) = bad {
            return Err(EvalError::IndexOutOfRange {
                name: graph.tensor(id).name.clone(),
                value,
                index,
                bound,
                table: graph.tensor(table).name.clone(),
            });
        }
    }
    Ok(())
}

/// For an I32 leaf used as `get_rows`/`set_rows` indices or `mul_mat_id`
/// expert ids: the number of rows (experts) it may index (the smallest
/// table, if several).
fn index_bound(graph: &Graph, id: TensorId) -> Option<i64> {
    index_users(graph, id).map(|(_, rows)| rows).min()
}

/// The tensors `id` indexes rows of (directly or through views of it, as
/// micro-batches read their inputs), with their row counts.
fn index_users(graph: &Graph, id: TensorId) -> impl Iterator<Item = (TensorId, i64)> + '_ {
    let indexes = move |src: TensorId| graph.storage_of(src).root == id;
    graph.nodes().filter_map(move |n| {
        let t = graph.tensor(n);
        let table = match t.op {
            Some(Op::GetRows) if indexes(t.srcs[1]) => t.srcs[0],
            // A part of a row-cut table takes any row of the full table.
            Some(Op::GetRowsPart { .. }) if indexes(t.srcs[1]) => {
                let table = graph.tensor(t.srcs[0]);
                let rows = table
                    .shard
                    .as_ref()
                    .map_or(table.layout.ne[1], |s| s.full_ne[1]);
                return Some((t.srcs[0], rows));
            }
            Some(Op::SetRows) if indexes(t.srcs[2]) => t.srcs[0],
            // Expert ids pick matrices (dim 2) of the stacked experts.
            Some(Op::MulMatId) if indexes(t.srcs[2]) => {
                return Some((t.srcs[0], graph.tensor(t.srcs[0]).layout.ne[2]));
            }
            // A part of an expert-parallel product takes any id of the full set.
            Some(Op::MulMatIdPart { experts, .. }) if indexes(t.srcs[2]) => {
                return Some((t.srcs[0], experts));
            }
            _ => return None,
        };
        Some((table, graph.tensor(table).layout.ne[1]))
    })
}

mod bind;
mod plan;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_parallel;

pub use bind::{constant_leaf, random_leaf, random_weight};
pub use plan::{PlanMemory, evaluate_plan};

/// The binding description of graph leaf `id`.
fn leaf_of(graph: &Graph, id: TensorId) -> bind::Leaf<'_> {
    let t = graph.tensor(id);
    bind::Leaf {
        name: &t.name,
        layout: t.layout,
        role: t.role,
        init: t.init.as_ref(),
        shard: t.shard.as_ref(),
        index_bound: index_bound(graph, id),
    }
}

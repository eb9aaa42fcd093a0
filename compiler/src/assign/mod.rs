//! Pass `assign`: a device for every tensor of the graph, with the reason.
//!
//! Steps, in [`assign_devices`]:
//! 1. check the options against the target and that every non-view node has
//!    some device that runs its (op, src0 dtype) ([`crate::Error::UnsupportedOp`]);
//! 2. place the weights ([`weights`]), the same for both policies but for a
//!    mixture of experts' `--fit` under the cost policy, which prices a
//!    weight placement per candidate and keeps the fastest (`moe_fit.rs`);
//! 3. run the policy: [`Policy::Ggml`] replays ggml_backend_sched's passes
//!    (`ggml_policy.rs`), [`Policy::Cost`] minimises estimated time with
//!    minimum cuts (`cost_policy.rs` and `cost_problem.rs` over `min_cut.rs`,
//!    times from [`crate::cost`]) without copying more than ggml would.
//!
//! Invariants of an [`Assignment`]:
//! - `device[id]` is where tensor `id`'s bytes live: for a view (and for a
//!   write-into op, `cpy`/`set_rows`) it is the device of its root, so a view
//!   never lives apart from the bytes it looks at;
//! - a non-view node runs on `device[id]`, which supports its op and src0 dtype;
//! - a weight is where the weight placement put it (pins first);
//! - every tensor has a non-empty reason; the same inputs give the same
//!   assignment (no hash iteration, ties broken by device priority and id).
//!
//! Layering: `assign` sits above [`crate::placement`] (the options, the pins,
//! the [`Policy`] and the layer-split pricing), which imports nothing from
//! here; both use [`crate::target`] and [`crate::cost`] below them.

mod cost_policy;
mod cost_problem;
mod ggml_policy;
mod llama_norm_pins;
mod max_flow;
mod min_cut;
mod moe_fit;
pub mod weights;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cost;

pub use crate::placement::{Policy, compute_reserve_bytes};
pub use weights::{WeightPlacement, place_weights};

use crate::Error;
use crate::placement::PlacementOptions;
use crate::target::{DeviceId, Target, cannot_run, src0_dtype};
use ir::{Graph, TensorId};

/// The device of every tensor and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// Indexed by tensor id.
    pub device: Vec<DeviceId>,
    /// Indexed by tensor id: one sentence saying why.
    pub reason: Vec<String>,
    /// Indexed by tensor id, for tensor-split graphs only (empty otherwise):
    /// what each tensor holds of the original graph's value.
    pub parts: Vec<Option<ir::plan::SplitPart>>,
}

/// Assigns every tensor of `graph` to a device of `target`.
///
/// Fails when the target or the options are invalid, when a node's op runs
/// on no device, when the ops writing into one tensor share no device, or
/// when a weight fits no device (each error names the tensor).
pub fn assign_devices(
    graph: &Graph,
    target: &Target,
    placement: &PlacementOptions,
    policy: Policy,
) -> Result<Assignment, Error> {
    target.validate()?;
    placement.validate(target)?;
    check_support(graph, target)?;
    if policy == Policy::Cost
        && let Some(a) = moe_fit::fit_by_cost(graph, target, placement)?
    {
        return Ok(a);
    }
    let weights = place_weights(graph, target, placement, policy)?;
    match policy {
        Policy::Ggml => {
            ggml_policy::assign_like_ggml(graph, target, &weights, placement.op_offload)
        }
        Policy::Cost => cost_policy::assign_by_cost(graph, target, &weights, placement.op_offload),
    }
}

/// True for view ops (no kernel, no bytes of their own).
pub(crate) fn is_view_op(graph: &Graph, id: TensorId) -> bool {
    graph.tensor(id).op.is_some_and(|op| op.is_view())
}

/// Every non-view node must run on some device.
fn check_support(graph: &Graph, target: &Target) -> Result<(), Error> {
    for n in graph.nodes() {
        if target.device_ids().all(|d| cannot_run(graph, target, d, n)) {
            let t = graph.tensor(n);
            let names: Vec<&str> = target.devices.iter().map(|d| d.name.as_str()).collect();
            return Err(Error::UnsupportedOp {
                tensor: t.name.clone(),
                op: t.op.map_or("leaf", |op| op.name()).to_string(),
                src0: src0_dtype(graph, n).to_string(),
                target: target.name.clone(),
                devices: names.join(", "),
            });
        }
    }
    Ok(())
}

/// The error for ops writing into `root` that share no device.
pub(crate) fn no_device_for_writes(graph: &Graph, target: &Target, root: TensorId) -> Error {
    let writers: Vec<String> = graph
        .ids()
        .filter(|&id| graph.storage_of(id).root == root && id != root && !is_view_op(graph, id))
        .map(|id| {
            let t = graph.tensor(id);
            let op = t.op.map_or("leaf", |op| op.name());
            format!("'{}' ({op}, src0 {})", t.name, src0_dtype(graph, id))
        })
        .collect();
    Error::NoDeviceForWrites {
        root: graph.tensor(root).name.clone(),
        writers: writers.join(", "),
        target: target.name.clone(),
    }
}

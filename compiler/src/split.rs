//! Pass `split + copies`: cuts a schedule into maximal same-device runs and
//! turns every cross-device read into a copy.
//!
//! # Splits
//! The non-view nodes of the schedule, in order, are cut wherever the device
//! changes: each [`SplitDraft`] is a maximal run of consecutive non-view nodes
//! on one device (`assignment.device[node]`; a write-into node runs on its
//! root's device). **View nodes are not steps**: they compute nothing and are
//! re-created wherever their bytes are (over the root, or over a copy of the
//! root on another device), so they appear in no split and never cause one.
//! The assignment's entry for a view is not consulted: a view's bytes are its
//! root's.
//!
//! # Copies
//! A node of a split on device `d` that reads a tensor (directly or through a
//! view) whose root lives on `h != d` needs the **root** copied from `h` to
//! `d` (views are re-created over the copy, so a copy moves the whole root,
//! even when only a view of it is read). Copies are deduplicated: one copy per
//! (root, destination device) for the whole plan, reused by every later
//! reader on that device — with one exception forced by correctness: when a
//! root is written into (`cpy`/`set_rows`) after a copy of it was taken,
//! readers after the write need the new bytes, so the key is really (root,
//! destination, version), the version counting the writes into the root that
//! precede the reader in the schedule. A root never written into (every
//! intermediate and weight of a plain forward graph) is copied at most once
//! per destination device. A copy always comes from the device holding the
//! root, never from another copy, and never goes to that device.
//!
//! **Placement rule**: a copy goes into the *earliest* split on the destination
//! device that comes after the split producing the version it copies (the
//! root's own node, or the last write into it); a leaf never written into is
//! available from the start, so its copy lands in the first split of the
//! destination device. That split is never later than the reader's own split,
//! so the runtime can start the copy as early as the data allows and overlap it
//! with the splits in between. Weights read on another device are copied like
//! any other tensor, once per run (a later issue may keep them resident).
//!
//! **Invariants** of the result: splits are non-empty, consecutive splits have
//! different devices, and the concatenated node lists are the schedule without
//! its view nodes; every copy has `from != to`, `to` = its split's device,
//! `bytes` = the root's span bytes, and sits in a split no later than the first
//! reader that needs it; copies of a split are sorted by (tensor, from).

use crate::assign::Assignment;
use crate::schedule::{Schedule, dependencies};
use crate::target::DeviceId;
use ir::{Graph, TensorId};
use std::collections::BTreeSet;

/// A copy of a root tensor's bytes to another device, run at the start of a split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CopyDraft {
    /// The root tensor copied (views over it are re-created on the destination).
    pub tensor: TensorId,
    /// The device holding the root's bytes.
    pub from: DeviceId,
    /// The device receiving the copy (the split's own device).
    pub to: DeviceId,
    /// Bytes moved: the root's span bytes.
    pub bytes: u64,
}

/// A maximal run of scheduled non-view nodes on one device, with the copies
/// into that device that run before them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitDraft {
    /// Where the nodes run.
    pub device: DeviceId,
    /// Non-view nodes, in schedule order.
    pub nodes: Vec<TensorId>,
    /// Copies into `device`, sorted by (tensor, from).
    pub copies: Vec<CopyDraft>,
}

/// Why a schedule could not be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// The assignment does not have one device per tensor.
    #[error("graph '{graph}' has {tensors} tensors but the assignment has {devices} devices")]
    AssignmentLength {
        /// The graph's name.
        graph: String,
        /// Tensors in the graph.
        tensors: usize,
        /// Entries in the assignment.
        devices: usize,
    },
    /// The schedule is not an execution order of the graph's nodes.
    #[error("graph '{graph}': invalid schedule: {problem}")]
    Schedule {
        /// The graph's name.
        graph: String,
        /// The first problem found.
        problem: String,
    },
    /// A `cpy`/`set_rows` runs on another device than the root it writes into
    /// (the assign pass must never produce this).
    #[error(
        "node '{node}' runs on {runs_on} but writes into '{root}', which lives on {root_device}"
    )]
    WriteIntoAcrossDevices {
        /// The write-into node.
        node: String,
        /// Its device.
        runs_on: DeviceId,
        /// The root it writes into.
        root: String,
        /// The root's device.
        root_device: DeviceId,
    },
}

/// Checks that `order` holds every node once, no leaf, each after its
/// [`dependencies`].
fn check_schedule(graph: &Graph, order: &[TensorId]) -> Result<(), SplitError> {
    let fail = |problem: String| SplitError::Schedule {
        graph: graph.name.clone(),
        problem,
    };
    let mut step_of: Vec<Option<usize>> = vec![None; graph.len()];
    for (step, &id) in order.iter().enumerate() {
        let Some(t) = graph.tensors().get(id.index()) else {
            return Err(fail(format!("step {step}: unknown tensor {id}")));
        };
        if t.is_leaf() {
            return Err(fail(format!("step {step}: '{}' is a leaf", t.name)));
        }
        if step_of[id.index()].replace(step).is_some() {
            return Err(fail(format!("step {step}: '{}' runs twice", t.name)));
        }
    }
    let deps = dependencies(graph);
    for id in graph.nodes() {
        let name = &graph.tensor(id).name;
        let Some(step) = step_of[id.index()] else {
            return Err(fail(format!("node '{name}' never runs")));
        };
        for &d in &deps[id.index()] {
            if step_of[d.index()].is_none_or(|s| s > step) {
                let dep = &graph.tensor(d).name;
                return Err(fail(format!("'{name}' runs before '{dep}'")));
            }
        }
    }
    Ok(())
}

/// Cuts `schedule` into splits and places the cross-device copies (see the
/// module doc for the rules).
///
/// Fails when the assignment does not cover the graph, when the schedule is
/// not an execution order of the graph (every node once, after its
/// [`dependencies`]), or when a write-into node runs away from the root it
/// writes into (debug builds assert: the assign pass guarantees it).
pub fn split_and_copy(
    graph: &Graph,
    assignment: &Assignment,
    schedule: &Schedule,
) -> Result<Vec<SplitDraft>, SplitError> {
    if assignment.device.len() != graph.len() {
        return Err(SplitError::AssignmentLength {
            graph: graph.name.clone(),
            tensors: graph.len(),
            devices: assignment.device.len(),
        });
    }
    check_schedule(graph, &schedule.order)?;
    let device_of = |id: TensorId| assignment.device[id.index()];
    let root_of = |id: TensorId| graph.storage_of(id).root;

    // Maximal same-device runs of non-view nodes.
    let mut splits: Vec<SplitDraft> = Vec::new();
    for &id in &schedule.order {
        let t = graph.tensor(id);
        if t.op.as_ref().is_some_and(|op| op.is_view()) {
            continue;
        }
        let d = device_of(id);
        if t.op
            .as_ref()
            .is_some_and(|op| op.writes_into_source().is_some())
        {
            let root = root_of(id);
            let root_device = device_of(root);
            debug_assert_eq!(d, root_device, "'{}' writes into another device", t.name);
            if d != root_device {
                return Err(SplitError::WriteIntoAcrossDevices {
                    node: t.name.clone(),
                    runs_on: d,
                    root: graph.tensor(root).name.clone(),
                    root_device,
                });
            }
        }
        match splits.last_mut() {
            Some(s) if s.device == d => s.nodes.push(id),
            _ => splits.push(SplitDraft {
                device: d,
                nodes: vec![id],
                copies: Vec::new(),
            }),
        }
    }

    // Split indices per device, ascending.
    let n_devices = splits
        .iter()
        .map(|s| s.device.index() + 1)
        .max()
        .unwrap_or(0);
    let mut splits_on: Vec<Vec<usize>> = vec![Vec::new(); n_devices];
    for (k, s) in splits.iter().enumerate() {
        splits_on[s.device.index()].push(k);
    }
    // The earliest split on `d` after split `after` (any split when `None`).
    let earliest = |d: DeviceId, after: Option<usize>| -> Option<usize> {
        let on = splits_on.get(d.index())?;
        let i = after.map_or(0, |a| on.partition_point(|&k| k <= a));
        on.get(i).copied()
    };

    // Walk the nodes in order, tracking for every root the split that produced
    // its current version (None: a leaf not yet written) and the version.
    let mut produced_in: Vec<Option<usize>> = vec![None; graph.len()];
    let mut version: Vec<u32> = vec![0; graph.len()];
    let mut made: BTreeSet<(TensorId, DeviceId, u32)> = BTreeSet::new();
    let mut placed: Vec<(usize, CopyDraft)> = Vec::new();
    for (k, split) in splits.iter().enumerate() {
        let d = split.device;
        for &id in &split.nodes {
            let t = graph.tensor(id);
            // A collective's participant reads its parts in place on their
            // devices (the assign pass only groups devices sharing memory).
            let in_place = t.op.is_some_and(|op| op.collective().is_some());
            let srcs = if in_place { &[][..] } else { &t.srcs[..] };
            let mut roots: Vec<TensorId> = srcs.iter().map(|&s| root_of(s)).collect();
            roots.sort_unstable();
            roots.dedup();
            for r in roots {
                let from = device_of(r);
                if from == d || !made.insert((r, d, version[r.index()])) {
                    continue;
                }
                // The reader's own split qualifies, so this always finds one.
                let at = earliest(d, produced_in[r.index()]).unwrap_or(k).min(k);
                placed.push((
                    at,
                    CopyDraft {
                        tensor: r,
                        from,
                        to: d,
                        bytes: graph.tensor(r).layout.span_bytes(),
                    },
                ));
            }
            let own_root = root_of(id);
            if own_root != id {
                // A write into a root: its bytes change here.
                version[own_root.index()] += 1;
            }
            produced_in[own_root.index()] = Some(k);
        }
    }
    for (at, c) in placed {
        splits[at].copies.push(c);
    }
    for s in &mut splits {
        s.copies.sort_unstable();
    }
    Ok(splits)
}

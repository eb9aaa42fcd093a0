//! Policy `cost` (the default): minimise the estimated time
//! (by a model: see [`crate::cost`])
//!
//! ```text
//! sum over kernels of op_time(kernel, its device)
//!   + sum over (tensor, destination device) of copy_time(tensor's device -> destination)
//! ```
//!
//! (times from [`crate::cost`]; one copy per tensor and destination device,
//! however many readers there), subject to op support and the weight placement.
//!
//! **Groups.** Bytes and the ops bound to them move together: a group is a
//! root tensor with its views and the ops writing into it (`cpy`, `set_rows`
//! run on their destination's device, so a KV-cache write runs where the
//! cache lives). A group's time on a device is the sum of its kernels' times;
//! it may go only to devices that run all of them. Views cost nothing.
//!
//! **Fixed groups.** A weight's group is where the weight placement put it.
//! A group whose first kernel reads a weight (its first weight source, as
//! ggml decides; rope excepted) runs on that weight's device when that device
//! runs it: weights are never streamed to another device on every run (ggml's
//! weakness, and memory the placement did not budget); a weight goes through
//! a copy only to an op its own device cannot run. Inputs, constants and
//! state are free: they go wherever feeding their readers costs least.
//!
//! **Two devices** (exact, Stone 1977): one minimum cut, source side = device
//! 0, sink side = device 1 (`min_cut.rs`). Terminal edges carry the other
//! side's device cost: `source -> g` holds g's time on device 1 (cut when g
//! lands on the sink side), `g -> sink` its time on device 0. Groups that
//! can run on one device only, or are fixed, get no choice. A tensor read on
//! the other device costs one
//! copy, counted once per (tensor, destination) with an auxiliary node when
//! it has several reading groups: `u -> a` (copy time) and `a -> reader`
//! (hard) for a copy to device 1; `reader -> a` (hard), `a -> u` for a copy
//! to device 0. A single reader gets the plain edges `u -> r` and `r -> u`.
//!
//! **More devices**: start from each group's fastest device (ties: priority
//! order), then alpha-expansion: for each device `d` in priority order, one
//! cut between "stay" (first) and "move to d" (second); keep the result only
//! if the exact objective drops; repeat until a whole round improves nothing.
//! The cut is exact when links are symmetric in cost (copying to `e` costs the
//! same from either other device); otherwise the one term a cut cannot
//! express ("stay, and some reader stays too") is bounded from above, and the
//! exact evaluation decides.
//!
//! **Copy budget.** The issue promises that `cost` never copies more than
//! `ggml` ((tensor, destination) pairs, and bytes) on the same weight
//! placement. Minimum time alone does not keep that promise: with half of
//! `llama2l`'s blocks offloaded, running block 0's attention on the GPU saves
//! ~68 µs of estimated time (of ~2.4 ms) for one more copy and 720 KB more
//! bytes. So the problem is solved with copy times weighted x1, x2, x4, ...
//! ([`COPY_WEIGHTS`]) and the first answer within ggml's copies and bytes is
//! kept, unless ggml's own assignment is faster (by the model), in which
//! case that one is returned, its reasons saying so. Either way the result
//! is never slower by the model and never copies more than ggml's.
//!
//! Invariants: deterministic (ordered maps, ties to the first choice = the
//! higher-priority device or staying put); every group is on a device that
//! runs all its kernels; the objective never rises during expansion; the
//! result's copies and bytes are at most ggml's on the same weights.

use super::cost_problem::{Problem, ns};
use super::ggml_policy::assign_like_ggml;
use super::{Assignment, WeightPlacement, is_view_op};
use crate::Error;
use crate::cost::{fmt_us, op_time_us};
use crate::target::{DeviceId, Target};
use ir::Graph;

/// The weights tried on copy times, in order, until an answer copies no
/// more than ggml (the last is large enough to put copies first).
pub(super) const COPY_WEIGHTS: [u64; 9] = [1, 2, 4, 8, 16, 64, 256, 4096, 1 << 20];

/// Assigns every tensor by estimated time; see the module doc. The ggml
/// assignment it measures itself against has op_offload when `op_offload`
/// (`--op-offload`).
pub(super) fn assign_by_cost(
    graph: &Graph,
    target: &Target,
    weights: &WeightPlacement,
    op_offload: bool,
) -> Result<Assignment, Error> {
    assign_by_cost_timed(graph, target, weights, op_offload).map(|(a, _)| a)
}

/// [`assign_by_cost`], with the model's time of the result in ns (compute
/// plus copies, unweighted: what `--fit` compares weight placements by).
pub(super) fn assign_by_cost_timed(
    graph: &Graph,
    target: &Target,
    weights: &WeightPlacement,
    op_offload: bool,
) -> Result<(Assignment, u64), Error> {
    let p = Problem::new(graph, target, weights)?;
    // ggml's decisions (with op_offload when asked: its weight copies to
    // an accelerator are then in the copy budget, its assignment a candidate).
    let ggml = assign_like_ggml(graph, target, weights, op_offload)?;
    let ggml_dev: Vec<DeviceId> = p.root.iter().map(|r| ggml.device[r.index()]).collect();
    let budget = p.copy_stats(&ggml_dev);
    let within = |dev: &[DeviceId]| {
        let (pairs, bytes) = p.copy_stats(dev);
        pairs <= budget.0 && bytes <= budget.1
    };
    let found = COPY_WEIGHTS
        .iter()
        .map(|&w| (w, p.solve(w)))
        .find(|(_, dev)| within(dev));
    let ggml_time = p.evaluate(&ggml_dev, 1);
    match found {
        Some((w, dev)) if p.evaluate(&dev, 1) <= ggml_time => {
            let time = p.evaluate(&dev, 1);
            let method = match (target.devices.len(), w) {
                (0 | 1, _) => "single device".to_string(),
                (2, 1) => "min-cut".to_string(),
                (_, 1) => "min-cut expansion".to_string(),
                (n, w) => format!(
                    "{} with copies weighted x{w} to copy no more than ggml ({} copies, {} bytes)",
                    if n == 2 {
                        "min-cut"
                    } else {
                        "min-cut expansion"
                    },
                    budget.0,
                    budget.1
                ),
            };
            Ok((assignment(&p, &dev, &method), time))
        }
        _ => {
            let mut a = ggml;
            let why = format!(
                "cost: ggml's assignment is the fastest found ({}) within its own copies",
                fmt_us(ggml_time as f64 / 1000.0)
            );
            for r in &mut a.reason {
                *r = format!("{why}; {r}");
            }
            Ok((a, ggml_time))
        }
    }
}

/// Devices and reasons for every tensor, from a device per group.
fn assignment(p: &Problem<'_>, dev: &[DeviceId], method: &str) -> Assignment {
    let graph = p.graph;
    let mut device = Vec::with_capacity(graph.len());
    let mut reason = Vec::with_capacity(graph.len());
    for id in graph.ids() {
        let g = p.group[id.index()];
        let d = dev[g];
        let root = p.root[g];
        let why = if id != root {
            let root_name = &graph.tensor(root).name;
            if is_view_op(graph, id) {
                format!(
                    "view of '{root_name}': lives with its root on {}",
                    p.name(d)
                )
            } else {
                let t = ns(op_time_us(p.target, d, graph, id)) as f64 / 1000.0;
                format!(
                    "writes into '{root_name}', so it runs where those bytes live: {} ({})",
                    p.name(d),
                    fmt_us(t)
                )
            }
        } else if let Some((_, why)) = &p.fixed[g] {
            why.clone()
        } else {
            group_reason(p, g, d, method)
        };
        device.push(d);
        reason.push(why);
    }
    Assignment {
        device,
        reason,
        parts: Vec::new(),
    }
}

/// Why group `g` (its root's reason) is on `d`.
fn group_reason(p: &Problem<'_>, g: usize, d: DeviceId, method: &str) -> String {
    let us = |e: DeviceId| p.time[g][e.index()].unwrap_or(0) as f64 / 1000.0;
    if p.kernels[g].is_empty() {
        let role = p.graph.tensor(p.root[g]).role;
        return format!(
            "{method}: {role} with no compute of its own, on {}, where feeding its readers costs least",
            p.name(d)
        );
    }
    let allowed: Vec<DeviceId> = p.target.device_ids().filter(|&e| p.allowed(g, e)).collect();
    if allowed.len() == 1 {
        let ops: Vec<&str> = p.kernels[g]
            .iter()
            .filter_map(|&k| p.graph.tensor(k).op.map(|op| op.name()))
            .collect();
        return format!(
            "only {} runs {} ({})",
            p.name(d),
            ops.join(" + "),
            fmt_us(us(d))
        );
    }
    let others: Vec<String> = allowed
        .iter()
        .filter(|&&e| e != d)
        .map(|&e| format!("{} on {}", fmt_us(us(e)), p.name(e)))
        .collect();
    let fastest = allowed.iter().all(|&e| us(d) <= us(e));
    let copies = if fastest { "" } else { " (copies decide)" };
    format!(
        "{method}: {} on {} vs {}{copies}",
        fmt_us(us(d)),
        p.name(d),
        others.join(", ")
    )
}

//! How long a sharded graph takes, as the cost model sees it: the figure the
//! pass compares its alternatives by (all-reduce or reduce-scatter +
//! all-gather; a group of weights split or kept whole).
//!
//! Each device runs its nodes one after another in id order (the order the
//! rewrite emits them, which the scheduler keeps within a device); a node
//! starts when its device is free and its sources are ready. A source on
//! another device is ready after a copy ([`cost::copy_time_us`]), except for a
//! collective's participant, which reads the parts in place and waits only
//! for the link's latency (its bytes are in its own op time). The estimate is
//! the last finish time.
//!
//! **Invariants:** the figure is a pure function of (graph, devices, target);
//! it is an estimate for comparing plans of one graph, not a prediction of
//! wall-clock time (see [`crate::cost`]).

use crate::cost;
use crate::target::{DeviceId, Target};
use ir::Graph;

/// The estimated run time, in µs, of `graph` with tensor `t` on `device[t]`.
pub(super) fn makespan_us(graph: &Graph, device: &[DeviceId], target: &Target) -> f64 {
    let mut free = vec![0.0f64; target.devices.len()];
    let mut done = vec![0.0f64; graph.len()];
    for id in graph.ids() {
        let t = graph.tensor(id);
        let Some(op) = &t.op else {
            continue; // leafs are ready from the start
        };
        let d = device[id.index()];
        let peer_read = op.collective().is_some();
        let ready = t
            .srcs
            .iter()
            .map(|&s| {
                let from = device[s.index()];
                let bytes = if peer_read {
                    0
                } else {
                    graph.tensor(s).layout.span_bytes()
                };
                done[s.index()] + cost::copy_time_us(target, from, d, bytes)
            })
            .fold(0.0, f64::max);
        if op.is_view() {
            done[id.index()] = ready;
            continue;
        }
        let Some(clock) = free.get_mut(d.index()) else {
            return f64::INFINITY;
        };
        let finish = clock.max(ready) + cost::op_time_us(target, d, graph, id);
        *clock = finish;
        done[id.index()] = finish;
    }
    free.into_iter().fold(0.0, f64::max)
}

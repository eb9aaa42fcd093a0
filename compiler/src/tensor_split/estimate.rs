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

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, GraphBuilder, Op};

    /// `x` on device 0; `a = silu(x)` on device `da`, `b = silu(x)` on `db`.
    fn two_nodes(da: u32, db: u32) -> (Graph, Vec<DeviceId>) {
        let mut b = GraphBuilder::new("two".to_string());
        let x = b.input("x", DType::F32, [4096, 64, 1, 1]).unwrap();
        let a = b.node("a", Op::Silu, &[x], None).unwrap();
        let c = b.node("b", Op::Silu, &[x], None).unwrap();
        b.mark_output(a).unwrap();
        b.mark_output(c).unwrap();
        let g = b.finish().unwrap();
        (g, vec![DeviceId(0), DeviceId(da), DeviceId(db)])
    }

    #[test]
    fn devices_run_side_by_side_and_a_read_across_pays_the_copy() {
        let target = Target::preset("cpu0+cpu1").unwrap();
        let (g, same) = two_nodes(0, 0);
        let (_, apart) = two_nodes(0, 1);
        let one = cost::op_time_us(&target, DeviceId(0), &g, g.find("a").unwrap());
        let bytes = g.tensor(g.find("x").unwrap()).layout.span_bytes();
        let copy = cost::copy_time_us(&target, DeviceId(0), DeviceId(1), bytes);
        assert!(one > 0.0 && copy > 0.0);
        // One device runs both in turn.
        let t = makespan_us(&g, &same, &target);
        assert!((t - 2.0 * one).abs() < 1e-9, "{t} vs {}", 2.0 * one);
        // Two devices side by side, the second after copying x.
        let t = makespan_us(&g, &apart, &target);
        assert!((t - (one + copy)).abs() < 1e-9, "{t} vs {}", one + copy);
    }
}

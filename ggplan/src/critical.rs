//! The critical path of a plan: the chain of splits that bounds one run when
//! splits on different devices overlap as far as the plan's order allows.
//!
//! Splits form a DAG (petgraph): a split follows the previous split on its
//! device (one compute stream each), and every split that wrote a tensor it
//! copies in. Each split weighs its cost-model time (`stats.split_us`: its
//! copies in and its steps). The heaviest path is what a run cannot beat on
//! the model's figures; the sum of all splits is what it takes with no
//! overlap at all.
//!
//! Invariant: defined on damaged plans too (out-of-range indices are
//! skipped); `None` when the plan does not record per-split times.

use crate::Plan;
use ir::plan::Work;
use petgraph::algo::toposort;
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::BTreeMap;

/// The critical path and what it is measured against.
#[derive(Clone, Debug, PartialEq)]
pub struct CriticalPath {
    /// The splits on it, in order.
    pub splits: Vec<usize>,
    /// Its time, µs (cost model).
    pub us: f64,
    /// All splits' time added up, µs: a run with no overlap.
    pub serial_us: f64,
}

/// The critical path of `plan`'s splits (see the module doc).
///
/// ```
/// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/llama2l.ron"))?;
/// let target = ggplan::target::resolve("cpu")?;
/// let plan = ggplan::compile(&graph, &target, &Default::default())?.plan;
/// let path = ggplan::plan::critical_path(&plan).unwrap();
/// assert_eq!(path.splits, [0]);
/// assert_eq!(path.us, path.serial_us);
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn critical_path(plan: &Plan) -> Option<CriticalPath> {
    let n = plan.splits.len();
    if n == 0 || plan.stats.split_us.len() != n {
        return None;
    }
    let mut dag: DiGraph<f64, ()> = DiGraph::with_capacity(n, 2 * n);
    let nodes: Vec<NodeIndex> = plan
        .stats
        .split_us
        .iter()
        .map(|&us| dag.add_node(us))
        .collect();
    let mut writer: BTreeMap<u32, usize> = BTreeMap::new();
    let mut last_on_device: BTreeMap<usize, usize> = BTreeMap::new();
    // Each split's edge from the previous split on its device, added when
    // the walk reaches the split (empty splits included), before its copies.
    let mut entered = 0;
    let mut enter_up_to = |end: usize, dag: &mut DiGraph<f64, ()>| {
        for (i, split) in plan.splits.iter().enumerate().take(end).skip(entered) {
            if let Some(&prev) = last_on_device.get(&split.device.index()) {
                dag.update_edge(nodes[prev], nodes[i], ());
            }
            last_on_device.insert(split.device.index(), i);
        }
        entered = entered.max(end);
    };
    for item in plan.global_order() {
        let i = item.split;
        enter_up_to(i + 1, &mut dag);
        match item.work {
            Work::Copy(c) => {
                if let Some(&w) = writer.get(&c.src) {
                    dag.update_edge(nodes[w], nodes[i], ());
                }
            }
            Work::Step(_) => {
                for &t in item.writes(&plan.kernels) {
                    writer.insert(t, i);
                }
            }
        }
    }
    enter_up_to(plan.splits.len(), &mut dag);
    // Edges only point from earlier splits to later ones, so this never
    // fails; a damaged plan gets no path rather than a panic.
    let order = toposort(&dag, None).ok()?;
    let mut best: Vec<(f64, Option<NodeIndex>)> = vec![(0.0, None); n];
    for &v in &order {
        let (from, via) = dag
            .neighbors_directed(v, petgraph::Direction::Incoming)
            .map(|u| (best[u.index()].0, Some(u)))
            .fold((0.0, None), |a, b| if b.0 > a.0 { b } else { a });
        best[v.index()] = (from + dag[v], via);
    }
    let (mut at, &(us, _)) = best
        .iter()
        .enumerate()
        .fold((0, &best[0]), |a, b| if b.1.0 > a.1.0 { b } else { a });
    let mut splits = vec![at];
    while let Some(prev) = best[at].1 {
        at = prev.index();
        splits.push(at);
    }
    splits.reverse();
    Some(CriticalPath {
        splits,
        us,
        serial_us: plan.stats.split_us.iter().sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_waiting_for_none_of_the_others_is_off_the_path() {
        let mut plan = crate::test_plans::llama2l_offloaded();
        // cpu then cuda0, the second copying from the first: one chain.
        let path = critical_path(&plan).unwrap();
        assert_eq!(path.splits, [0, 1]);
        assert!((path.us - path.serial_us).abs() < 1e-9);
        // A third split on cuda0 that copies nothing in and weighs more than
        // split 0 would follow split 1 on its stream: 0 -> 1 -> 2.
        let mut extra = plan.splits[1].clone();
        extra.copies.clear();
        plan.splits.push(extra);
        plan.stats.split_us.push(1e9);
        assert_eq!(critical_path(&plan).unwrap().splits, [0, 1, 2]);
        // On a device of its own it runs beside the others.
        plan.splits[2].device = ir::plan::DeviceId(7);
        let path = critical_path(&plan).unwrap();
        assert_eq!(path.splits, [2]);
        assert!(path.us < path.serial_us);
        plan.stats.split_us.pop();
        assert_eq!(critical_path(&plan), None, "times missing");
    }
}

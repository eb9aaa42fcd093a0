//! The plan's summary figures, derived from the plan itself.

use super::tensors::TensorTable;
use crate::cost;
use crate::memory::MemoryPlan;
use crate::target::{DeviceId, Target};
use ir::plan::{
    Arena, DeviceStats, FusedKernel, LinkStats, Split, Stats, Step, Usage, Work, global_order,
};
use ir::{Graph, TensorId};
use std::collections::BTreeMap;

/// Stats of a plan under construction.
pub(super) fn compute(
    graph: &Graph,
    target: &Target,
    table: &TensorTable,
    splits: &[Split],
    kernels: &[FusedKernel],
    arenas: &[Arena],
    memory: &BTreeMap<DeviceId, MemoryPlan>,
) -> Stats {
    let devices = memory
        .iter()
        .map(|(&device, m)| DeviceStats {
            device,
            compute_bytes: arenas
                .iter()
                .filter(|a| a.device == device && a.usage == Usage::Compute)
                .map(|a| a.size)
                .sum(),
            compute_lower_bound: m.lower_bound,
            resident_bytes: arenas
                .iter()
                .filter(|a| a.device == device && a.usage != Usage::Compute)
                .map(|a| a.size)
                .sum(),
            algorithm: m.algorithm.to_string(),
        })
        .collect();
    let mut links: BTreeMap<(DeviceId, DeviceId), (u32, u64)> = BTreeMap::new();
    let mut estimated_us = 0.0;
    // Per split: the running estimate before its first item and after its last.
    let mut start: Vec<Option<f64>> = vec![None; splits.len()];
    let mut end = vec![0.0; splits.len()];
    for item in global_order(splits) {
        let device = splits[item.split].device;
        start[item.split].get_or_insert(estimated_us);
        match item.work {
            Work::Copy(c) => {
                let from = table.tensors[c.src as usize].device;
                let e = links.entry((from, device)).or_default();
                e.0 += 1;
                e.1 += c.bytes;
                estimated_us += cost::copy_time_us(target, from, device, c.bytes);
            }
            Work::Step(step) => {
                let nodes: Vec<u32> = match step {
                    Step::Op { dst, .. } => vec![*dst],
                    Step::Fused { kernel } => kernels[*kernel as usize].nodes.clone(),
                    Step::MulMatAdd { product, dst, .. } => vec![*product, *dst],
                    Step::Attention {
                        scores,
                        probs,
                        product,
                        dst,
                        ..
                    } => vec![*scores, *probs, *product, *dst],
                    Step::MulMatGlu {
                        products,
                        inner,
                        dst,
                        ..
                    } => products.iter().chain(inner).chain([dst]).copied().collect(),
                    Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => dsts.clone(),
                };
                let nodes: Vec<TensorId> = nodes.into_iter().map(TensorId).collect();
                estimated_us += cost::step_time_us(target, device, graph, &nodes);
            }
        }
        end[item.split] = estimated_us;
    }
    let split_us = (start.iter().zip(&end))
        .map(|(s, e)| round_ns(s.map_or(0.0, |s| e - s)))
        .collect();
    Stats {
        devices,
        n_splits: splits.len() as u32,
        links: links
            .into_iter()
            .map(|((from, to), (copies, bytes))| LinkStats {
                from,
                to,
                copies,
                bytes,
            })
            .collect(),
        fused_nodes: kernels.iter().map(|k| k.nodes.len() as u32).sum::<u32>()
            + 2 * (splits.iter().flat_map(|s| &s.steps))
                .filter(|st| matches!(st, Step::MulMatAdd { .. }))
                .count() as u32
            + 5 * (splits.iter().flat_map(|s| &s.steps))
                .filter(|st| matches!(st, Step::Attention { .. }))
                .count() as u32
            + (splits.iter().flat_map(|s| &s.steps))
                .map(|st| match st {
                    Step::MulMatGlu { inner, .. } => 3 + inner.len() as u32,
                    Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => {
                        dsts.len() as u32
                    }
                    _ => 0,
                })
                .sum::<u32>(),
        estimated_us: round_ns(estimated_us),
        split_us,
    }
}

/// Microseconds rounded to whole nanoseconds, so a plan's text does not
/// carry the summation's last bits.
fn round_ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

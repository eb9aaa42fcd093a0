//! Family 2, placement and bounds: arenas, alignment, views, fused members,
//! device memory.

use super::ViolationKind::{Bounds, Placement as PlacementKind};
use super::{Checker, span_of};
use crate::plan::{Placement, Usage};
use std::collections::BTreeSet;

pub(super) fn check(c: &mut Checker<'_>) {
    let members = fused_members(c);
    for i in 0..c.plan.tensors.len() as u32 {
        tensor(c, i, &members);
    }
    for &m in &members {
        if let Some(t) = c.tensor(m).filter(|t| t.placement != Placement::Fused) {
            let msg = format!(
                "is computed inside a fused kernel (not its output), so it takes no memory: \
                 its placement must be Fused, not {}",
                t.placement
            );
            c.tensor_problem(PlacementKind, m, msg);
        }
    }
    arenas(c);
}

/// The non-last members of every fused kernel, the product of every
/// `mul_mat` + `add` step, what every `mul_mat` + GLU step computes inside
/// and the intermediates of every attention step.
fn fused_members(c: &Checker<'_>) -> BTreeSet<u32> {
    let mut members: BTreeSet<u32> = (c.plan.splits.iter().flat_map(|s| &s.steps))
        .filter_map(|step| match step {
            crate::plan::Step::MulMatAdd { product, .. } => Some(*product),
            _ => None,
        })
        .collect();
    for step in c.plan.splits.iter().flat_map(|s| &s.steps) {
        members.extend(super::attention::inner(step).into_iter().flatten());
    }
    members.extend(super::product_glu::fused_nodes(c));
    for kernel in &c.plan.kernels {
        if let Some((_, inner)) = kernel.nodes.split_last() {
            members.extend(inner.iter().copied());
        }
    }
    members
}

fn tensor(c: &mut Checker<'_>, i: u32, members: &BTreeSet<u32>) {
    let Some(t) = c.tensor(i) else { return };
    let plan = c.plan;
    match t.placement {
        Placement::Arena { arena, offset } => {
            let Some(a) = plan.arenas.get(arena as usize) else {
                return; // format
            };
            if a.device != t.device {
                let msg = format!(
                    "lives on {} but its arena {arena} is on {}",
                    c.device_name(t.device.0),
                    c.device_name(a.device.0)
                );
                c.tensor_problem(PlacementKind, i, msg);
            }
            let usage = Usage::of(t.role);
            if a.usage != usage {
                let msg = format!(
                    "a {} tensor belongs in a {usage} arena, not arena {arena} ({})",
                    t.role, a.usage
                );
                c.tensor_problem(PlacementKind, i, msg);
            }
            if let Some(dev) = plan.devices.get(a.device.index())
                && dev.alignment.is_power_of_two()
                && offset % dev.alignment != 0
            {
                let msg = format!(
                    "offset {offset} in arena {arena} is not a multiple of {}'s alignment {}",
                    dev.name, dev.alignment
                );
                c.tensor_problem(PlacementKind, i, msg);
            }
            if let Some(span) = span_of(t)
                && offset.checked_add(span).is_none_or(|end| end > a.size)
            {
                let msg = format!(
                    "bytes [{offset}, {offset} + {span}) end past arena {arena}'s {} bytes",
                    a.size
                );
                c.tensor_problem(Bounds, i, msg);
            }
        }
        Placement::View { of, offset } => {
            let Some(owner) = c.tensor(of) else { return };
            if of == i || !matches!(owner.placement, Placement::Arena { .. }) {
                let msg = format!(
                    "is a view of {}, which has no arena bytes of its own ({})",
                    c.describe(of),
                    owner.placement
                );
                return c.tensor_problem(PlacementKind, i, msg);
            }
            if owner.device != t.device {
                let msg = format!(
                    "is on {} but views {} on {}",
                    c.device_name(t.device.0),
                    c.describe(of),
                    c.device_name(owner.device.0)
                );
                c.tensor_problem(PlacementKind, i, msg);
            }
            if let (Some(span), Some(owner_span)) = (span_of(t), span_of(owner))
                && offset.checked_add(span).is_none_or(|end| end > owner_span)
            {
                let msg = format!(
                    "view bytes [{offset}, {offset} + {span}) end past the {owner_span} bytes of {}",
                    c.describe(of)
                );
                c.tensor_problem(Bounds, i, msg);
            }
        }
        Placement::Fused => {
            if !members.contains(&i) {
                let msg = "is placed Fused but is no fused kernel's inner member nor a \
                           fused step's intermediate (a kernel's output needs bytes)";
                c.tensor_problem(PlacementKind, i, msg.to_string());
            }
        }
    }
}

fn arenas(c: &mut Checker<'_>) {
    let plan = c.plan;
    let mut per_device = vec![0u64; plan.devices.len()];
    for (a, arena) in plan.arenas.iter().enumerate() {
        let Some(dev) = plan.devices.get(arena.device.index()) else {
            continue; // format
        };
        if arena.size > dev.max_buffer_bytes {
            let msg = format!(
                "{} bytes exceed device {}'s largest buffer of {} bytes (the compiler chunks arenas)",
                arena.size, dev.name, dev.max_buffer_bytes
            );
            c.problem(Bounds, format!("arena {a}"), msg);
        }
        if let Some(sum) = per_device.get_mut(arena.device.index()) {
            *sum = sum.saturating_add(arena.size);
        }
    }
    for (d, (dev, &sum)) in plan.devices.iter().zip(&per_device).enumerate() {
        if sum > dev.memory_bytes {
            let msg = format!(
                "its arenas total {sum} bytes, more than its memory of {} bytes",
                dev.memory_bytes
            );
            c.problem(Bounds, format!("device '{}' (d{d})", dev.name), msg);
        }
    }
}

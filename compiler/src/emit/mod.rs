//! Pass `emit`: turns the passes' decisions into the [`Plan`] the runtime executes.
//!
//! Inputs: the graph, the target, the assignment, the split drafts (with their
//! copies) and the fusion groups. Output: a plan whose invariants are listed in
//! `ir::plan` and re-proved by `compiler::check`.
//!
//! Invariants this pass establishes:
//! - plan tensors `0..n` are the graph's, in id order; copies and views re-created
//!   over copies follow, in the order splits first need them;
//! - every tensor read by a step lives on the step's device (a cross-device read
//!   goes through the copy the split pass placed);
//! - views are not steps: they are `Placement::View` of the tensor owning the bytes;
//! - compute memory is planned per device over the global step order (copies
//!   count as steps), with in-place reuse where `liveness::in_place_operand` allows;
//! - every device has two streams, compute (`2d`) and copy (`2d + 1`); splits run
//!   on their device's compute stream, copies on their destination's copy stream;
//!   no events yet (the `sync` pass adds them).

mod attention;
mod lifetimes;

pub use lifetimes::compute_liveness;
mod resident;
mod stats;
mod tensors;

use crate::Error;
use crate::fuse::Fusion;
use crate::split::SplitDraft;
use crate::target::Target;
use crate::{assign::Assignment, memory};
use ir::Graph;
use ir::plan::{
    Arena, Copy, FusedKernel, Placement, Plan, PlanDevice, PlanStream, Split, Step, StreamKind,
    Usage,
};
use std::collections::BTreeMap;

type PlanOf<'a> = dyn Fn(&[&'a lifetimes::Buffer]) -> Result<memory::MemoryPlan, Error> + 'a;

/// Splits compute buffers into arenas of at most `max_buffer` bytes: one
/// arena when the whole plan fits; otherwise buffers in order of their first
/// step join the current chunk while its plan still fits, then a new chunk starts.
fn chunk_buffers<'a>(
    all: &[&'a lifetimes::Buffer],
    whole_size: u64,
    max_buffer: u64,
    plan_of: &PlanOf<'a>,
    device: &str,
) -> Result<Vec<(Vec<&'a lifetimes::Buffer>, memory::MemoryPlan)>, Error> {
    if whole_size <= max_buffer {
        return Ok(vec![(all.to_vec(), plan_of(all)?)]);
    }
    let mut order: Vec<&lifetimes::Buffer> = all.to_vec();
    order.sort_by_key(|b| (b.lifetime.first, b.lifetime.tensor));
    let mut chunks = Vec::new();
    let mut current: Vec<&lifetimes::Buffer> = Vec::new();
    for b in order {
        if b.lifetime.size > max_buffer {
            return Err(Error::Memory {
                device: device.to_string(),
                problem: format!(
                    "tensor t{} needs {} bytes, more than the largest buffer ({max_buffer} bytes)",
                    b.lifetime.tensor.0, b.lifetime.size
                ),
            });
        }
        current.push(b);
        if plan_of(&current)?.size > max_buffer {
            current.pop();
            let done = std::mem::take(&mut current);
            let plan = plan_of(&done)?;
            chunks.push((done, plan));
            current.push(b);
        }
    }
    if !current.is_empty() {
        let plan = plan_of(&current)?;
        chunks.push((current, plan));
    }
    Ok(chunks)
}

/// What the plan records about how it was made.
#[derive(Clone, Debug)]
pub struct Header {
    /// The compiler's version.
    pub compiler_version: String,
    /// Fingerprint of the graph's canonical text.
    pub graph_hash: String,
    /// The target's name.
    pub target_name: String,
    /// The options as the command line spelled them.
    pub options: Vec<String>,
}

/// Builds the plan.
pub fn emit_plan(
    graph: &Graph,
    target: &Target,
    assignment: &Assignment,
    splits: &[SplitDraft],
    fusion: &Fusion,
    header: Header,
) -> Result<Plan, Error> {
    let mut table = tensors::TensorTable::new(graph, assignment);
    for split in splits {
        for c in &split.copies {
            table.add_copy(graph, c.tensor, c.to);
        }
    }
    let mut kernels = Vec::new();
    let mut plan_splits = Vec::with_capacity(splits.len());
    for split in splits {
        let d = split.device;
        let copies = split
            .copies
            .iter()
            .map(|c| Copy {
                src: c.tensor.0,
                dst: table.copy_id(c.tensor, c.to),
                bytes: c.bytes,
                stream: copy_stream(c.to),
                wait: Vec::new(),
                record: None,
            })
            .collect();
        let mut steps = Vec::new();
        for &node in &split.nodes {
            let t = graph.tensor(node);
            let Some(op) = t.op else { continue };
            if op.is_view() {
                continue;
            }
            if let Some(group) = fusion.product_many_of(node) {
                // Every product runs at the first one's position.
                if group.products[0] == node {
                    let srcs = (group.reads(graph).into_iter())
                        .map(|s| table.local(graph, s, d))
                        .collect::<Result<_, _>>()?;
                    let dsts = group.products.iter().map(|p| p.0).collect();
                    steps.push(Step::MulMatMany { dsts, srcs });
                }
                continue;
            }
            if let Some(group) = fusion.rope_store_of(node) {
                // Every member runs at the last one's position.
                if group.members.last() == Some(&node) {
                    steps.push(rope_store_step(graph, &mut table, group, d)?);
                }
                continue;
            }
            if let Some(unit) = fusion.product_glu_of(node) {
                // Both products and the unit run as the output's step.
                if unit.dst == node {
                    steps.push(product_glu_step(graph, &mut table, unit, d)?);
                }
                continue;
            }
            if let Some(pair) = fusion.product_add_of(node) {
                // The product runs inside the add's step.
                if pair.add == node {
                    let srcs = pair.reads(graph).map(|s| table.local(graph, s, d));
                    let [w, x, r] = srcs;
                    steps.push(Step::MulMatAdd {
                        product: pair.product.0,
                        dst: node.0,
                        srcs: [w?, x?, r?],
                    });
                }
                continue;
            }
            if let Some(a) = fusion.attention_of(node) {
                // The chain runs inside its result's step.
                if a.dst == node {
                    steps.push(attention::step(graph, a, |s| table.local(graph, s, d))?);
                }
                continue;
            }
            match fusion.group_of(node).map(|g| &fusion.groups[g]) {
                Some(group) if group.nodes.last() != Some(&node) => continue,
                Some(group) => {
                    let inputs = group
                        .inputs
                        .iter()
                        .map(|&i| table.local(graph, i, d))
                        .collect::<Result<_, _>>()?;
                    steps.push(Step::Fused {
                        kernel: kernels.len() as u32,
                    });
                    kernels.push(FusedKernel {
                        inputs,
                        output: node.0,
                        nodes: group.nodes.iter().map(|n| n.0).collect(),
                        body: group.body.clone(),
                    });
                }
                None => {
                    // A collective reads its parts in place, where they are.
                    let in_place = op.collective().is_some();
                    let srcs = t
                        .srcs
                        .iter()
                        .map(|&s| {
                            let at = if in_place {
                                assignment.device[s.index()]
                            } else {
                                d
                            };
                            table.local(graph, s, at)
                        })
                        .collect::<Result<_, _>>()?;
                    steps.push(Step::Op {
                        op,
                        dst: node.0,
                        srcs,
                    });
                }
            }
        }
        plan_splits.push(Split {
            device: d,
            stream: compute_stream(d),
            copies,
            waits: Vec::new(),
            records: Vec::new(),
            steps,
        });
    }
    for group in &fusion.groups {
        for &member in &group.nodes[..group.nodes.len() - 1] {
            table.tensors[member.index()].placement = Placement::Fused;
        }
    }
    for pair in &fusion.products {
        table.tensors[pair.product.index()].placement = Placement::Fused;
    }
    for a in &fusion.attentions {
        for inner in [a.scores, a.probs, a.product, a.permuted] {
            table.tensors[inner.index()].placement = Placement::Fused;
        }
    }
    for unit in &fusion.glus {
        for n in unit.nodes().filter(|&n| n != unit.dst) {
            table.tensors[n.index()].placement = Placement::Fused;
        }
    }

    let mut arenas = Vec::new();
    let mut device_memory = BTreeMap::new();
    let live = lifetimes::compute(&table, &plan_splits, &kernels, graph);
    for device in target.device_ids() {
        let dev = target.get(device).expect("ids come from the target");
        for usage in [Usage::Weights, Usage::State, Usage::Io] {
            for chunk in resident::pack(
                &table,
                device,
                usage,
                dev.alignment,
                dev.max_buffer_bytes,
                &dev.name,
            )? {
                let arena = arenas.len() as u32;
                arenas.push(Arena {
                    device,
                    usage,
                    size: chunk.size,
                });
                for (t, offset) in chunk.offsets {
                    table.tensors[t as usize].placement = Placement::Arena { arena, offset };
                }
            }
        }
        let buffers = live.buffers_on(device, dev.alignment, &table);
        let plan_of = |bufs: &[&lifetimes::Buffer]| {
            let lifetimes: Vec<_> = bufs.iter().map(|b| b.lifetime).collect();
            memory::plan_memory(&lifetimes, dev.alignment).map_err(|e| Error::Memory {
                device: dev.name.clone(),
                problem: e.to_string(),
            })
        };
        let all: Vec<&lifetimes::Buffer> = buffers.iter().collect();
        let mem = plan_of(&all)?;
        for chunk in chunk_buffers(&all, mem.size, dev.max_buffer_bytes, &plan_of, &dev.name)? {
            if chunk.1.size == 0 {
                continue;
            }
            let arena = arenas.len() as u32;
            arenas.push(Arena {
                device,
                usage: Usage::Compute,
                size: chunk.1.size,
            });
            for (b, &offset) in chunk.0.iter().zip(&chunk.1.offsets) {
                for &t in &b.members {
                    table.tensors[t as usize].placement = Placement::Arena { arena, offset };
                }
            }
        }
        let total: u64 = arenas
            .iter()
            .filter(|a| a.device == device)
            .map(|a| a.size)
            .sum();
        if total > dev.memory_bytes {
            let by_usage: Vec<String> = [Usage::Weights, Usage::State, Usage::Io, Usage::Compute]
                .iter()
                .map(|&u| {
                    let bytes: u64 = arenas
                        .iter()
                        .filter(|a| a.device == device && a.usage == u)
                        .map(|a| a.size)
                        .sum();
                    format!("{u} {bytes}")
                })
                .collect();
            return Err(Error::Memory {
                device: dev.name.clone(),
                problem: format!(
                    "the plan needs {total} bytes ({}) but the device has {} bytes; try --fit, --offload-layers or --pin",
                    by_usage.join(", "),
                    dev.memory_bytes
                ),
            });
        }
        device_memory.insert(device, mem);
    }
    table.place_views();

    let devices = target
        .devices
        .iter()
        .map(|d| PlanDevice {
            name: d.name.clone(),
            kind: d.kind,
            memory_bytes: d.memory_bytes,
            alignment: d.alignment,
            max_buffer_bytes: d.max_buffer_bytes,
        })
        .collect();
    let stats = stats::compute(
        graph,
        target,
        &table,
        &plan_splits,
        &kernels,
        &arenas,
        &device_memory,
    );
    let n_graph_tensors = graph.len() as u32;
    Ok(Plan {
        format_version: ir::plan::PLAN_FORMAT_VERSION,
        compiler_version: header.compiler_version,
        graph_name: graph.name.clone(),
        graph_hash: header.graph_hash,
        target_name: header.target_name,
        options: header.options,
        devices,
        n_graph_tensors,
        tensors: table.tensors,
        arenas,
        kernels,
        streams: target
            .device_ids()
            .flat_map(|device| {
                [StreamKind::Compute, StreamKind::Copy].map(|kind| PlanStream { device, kind })
            })
            .collect(),
        n_events: 0,
        splits: plan_splits,
        stats,
    })
}

/// The compute stream of `device`: every device has two streams, compute
/// then copy, in device order.
fn compute_stream(device: ir::plan::DeviceId) -> u32 {
    2 * device.0
}

/// The copy stream of `device` (copies run on their destination's).
fn copy_stream(device: ir::plan::DeviceId) -> u32 {
    2 * device.0 + 1
}

/// The step of a product-GLU unit on device `d`.
fn product_glu_step(
    graph: &Graph,
    table: &mut tensors::TensorTable,
    unit: &crate::fuse::ProductGlu,
    d: ir::plan::DeviceId,
) -> Result<Step, Error> {
    let [wg, wu, x] = unit.reads(graph).map(|s| table.local(graph, s, d));
    Ok(Step::MulMatGlu {
        kind: unit.kind,
        products: [unit.gate.0, unit.up.0],
        inner: unit.inner.iter().map(|n| n.0).collect(),
        dst: unit.dst.0,
        srcs: [wg?, wu?, x?],
    })
}

/// The `RopeStore` step of `group`, its operands local to device `d`.
fn rope_store_step(
    graph: &Graph,
    table: &mut tensors::TensorTable,
    group: &crate::fuse::RopeStore,
    d: ir::plan::DeviceId,
) -> Result<Step, Error> {
    let mut ops = Vec::with_capacity(group.members.len());
    let mut srcs = Vec::new();
    for &m in &group.members {
        let t = graph.tensor(m);
        ops.push(ir::plan::RowOp {
            op: t.op.expect("members are nodes"),
            n_srcs: t.srcs.len() as u32,
        });
        for &s in &t.srcs {
            srcs.push(table.local(graph, s, d)?);
        }
    }
    let dsts = group.members.iter().map(|m| m.0).collect();
    Ok(Step::RopeStore { ops, dsts, srcs })
}

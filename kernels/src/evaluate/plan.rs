//! The reference plan evaluator: runs a compiled plan's steps, in its order,
//! over its own arenas and offsets, with the reference kernels.
//!
//! It is the oracle for the compiler's decisions: if the memory plan let two
//! live tensors share bytes, or a step read a copy before it was made, the
//! outputs differ from [`super::evaluate`]'s on the same graph. Devices are all
//! simulated in host memory; a copy moves bytes between two arenas.
//!
//! Invariants:
//! - every byte range it touches is bounds-checked against its arena; a plan
//!   pointing outside is an [`EvalError::InvalidPlan`], never a panic;
//! - every tensor is read where its bytes are (its owner's arena), so a
//!   collective's participant reads its parts in the other devices' arenas,
//!   as the runtime does in place; any other step reading a tensor held on
//!   another device, or a collective reading one that does not share memory
//!   with its own (a device that is not a CPU), is an
//!   [`EvalError::InvalidPlan`]: simulating all devices in one memory must
//!   not hide a read that real devices could not make;
//! - weight shards are bound as the graph evaluator binds them (their slice
//!   of the source), so plan and graph outputs agree.

use super::bind::{Leaf, bind_leaf};
use super::{Bindings, EvalError};
use crate::reference::attention::{AttentionLayouts, attention};
use crate::reference::fused::eval_fused;
use crate::reference::{Dense, compute, gather, scatter};
use ir::plan::{Placement, Plan, Step};
use ir::{Layout, Op, Role};

/// The arenas of an evaluated plan.
pub struct PlanMemory<'p> {
    plan: &'p Plan,
    arenas: Vec<Vec<u8>>,
}

fn invalid(problem: String) -> EvalError {
    EvalError::InvalidPlan { problem }
}

fn layout_of(plan: &Plan, t: u32) -> Layout {
    plan.tensors[t as usize].layout()
}

/// (arena, byte offset) of tensor `t`, following views; checked against the arena.
fn location(plan: &Plan, arenas: &[Vec<u8>], t: u32) -> Result<(usize, usize), EvalError> {
    let mut at = t;
    let mut extra = 0u64;
    for _ in 0..plan.tensors.len() + 1 {
        let pt = plan
            .tensors
            .get(at as usize)
            .ok_or_else(|| invalid(format!("tensor {at} does not exist")))?;
        match pt.placement {
            Placement::Arena { arena, offset } => {
                let arena = arena as usize;
                let start = offset + extra;
                let span = layout_of(plan, t).span_bytes();
                let len = arenas
                    .get(arena)
                    .map(Vec::len)
                    .ok_or_else(|| invalid(format!("arena {arena} does not exist")))?;
                if start + span > len as u64 {
                    return Err(invalid(format!(
                        "'{}' ends past its arena",
                        plan.tensors[t as usize].name
                    )));
                }
                return Ok((arena, start as usize));
            }
            Placement::View { of, offset } => {
                at = of;
                extra += offset;
            }
            Placement::Fused => {
                return Err(invalid(format!(
                    "'{}' is inside a fused kernel and has no bytes",
                    pt.name
                )));
            }
        }
    }
    Err(invalid(format!(
        "view chain of '{}' loops",
        plan.tensors[t as usize].name
    )))
}

impl PlanMemory<'_> {
    /// The values of plan tensor `t`.
    pub fn read(&self, t: u32) -> Result<Dense, EvalError> {
        let (arena, offset) = location(self.plan, &self.arenas, t)?;
        Ok(gather(
            &self.arenas[arena][offset..],
            &layout_of(self.plan, t),
        ))
    }

    /// The values of the graph tensor called `name`.
    pub fn read_name(&self, name: &str) -> Option<Dense> {
        let t = self.plan.tensors[..self.plan.n_graph_tensors as usize]
            .iter()
            .position(|t| t.name == name)?;
        self.read(t as u32).ok()
    }

    fn write(&mut self, t: u32, values: &Dense) -> Result<(), EvalError> {
        let (arena, offset) = location(self.plan, &self.arenas, t)?;
        scatter(
            values,
            &mut self.arenas[arena][offset..],
            &layout_of(self.plan, t),
        );
        Ok(())
    }
}

/// Refuses a step (`op`, or a fused kernel for `None`) on device `device`
/// that reads a tensor held on another device, unless it is a collective and
/// both devices are CPU devices (one host's memory, read in place).
fn check_reads(plan: &Plan, device: u32, op: Option<&Op>, srcs: &[u32]) -> Result<(), EvalError> {
    let device_of = |t: u32| {
        plan.tensors
            .get(plan.owner(t) as usize)
            .map(|pt| pt.device.0)
    };
    let kind = |d: u32| plan.devices.get(d as usize).map(|pd| pd.kind);
    let reader = op.map_or("a fused kernel", |op| op.name());
    for &src in srcs {
        let Some(held) = device_of(src).filter(|&held| held != device) else {
            continue;
        };
        let collective = op.and_then(Op::collective).is_some();
        let why = match (kind(device), kind(held)) {
            (Some(reader), Some(held)) => {
                match ir::plan::peer_read_refusal(collective, reader, held) {
                    Some(why) => why,
                    None => continue,
                }
            }
            _ => "the device is not in the plan",
        };
        let name = |d: u32| {
            plan.devices
                .get(d as usize)
                .map_or("?", |pd| pd.name.as_str())
        };
        return Err(invalid(format!(
            "{reader} on '{}' reads '{}' on '{}': {why}",
            name(device),
            plan.tensors[src as usize].name,
            name(held)
        )));
    }
    Ok(())
}

/// Runs `plan` and returns its arenas after the last step.
pub fn evaluate_plan<'p>(
    plan: &'p Plan,
    bindings: &Bindings<'_>,
) -> Result<PlanMemory<'p>, EvalError> {
    let graph_tensors = &plan.tensors[..(plan.n_graph_tensors as usize).min(plan.tensors.len())];
    for name in bindings.inputs.keys() {
        if !graph_tensors
            .iter()
            .any(|t| &t.name == name && matches!(t.role, Role::Input | Role::State))
        {
            return Err(EvalError::NotAnInput {
                name: name.clone(),
                hint: String::new(),
            });
        }
    }
    let mut memory = PlanMemory {
        plan,
        arenas: plan
            .arenas
            .iter()
            .map(|a| vec![0u8; a.size as usize])
            .collect(),
    };
    let index_tables = plan.index_tables();
    for (t, pt) in graph_tensors.iter().enumerate() {
        if !pt.role.is_leaf_role() || !matches!(pt.placement, Placement::Arena { .. }) {
            continue;
        }
        let bound = index_tables.get(&(t as u32)).map(|&(rows, _)| rows);
        let leaf = Leaf {
            name: &pt.name,
            layout: layout_of(plan, t as u32),
            role: pt.role,
            init: pt.init.as_ref(),
            shard: pt.shard.as_ref(),
            index_bound: bound,
        };
        let bytes = bind_leaf(&leaf, bindings)?;
        if let Some(bound) = bound {
            let values = gather(&bytes, &leaf.layout);
            if let Some((index, &value)) = values
                .data
                .iter()
                .enumerate()
                .find(|&(_, &v)| !(v >= 0.0 && v < bound as f64 && v.fract() == 0.0))
            {
                return Err(EvalError::IndexOutOfRange {
                    name: pt.name.clone(),
                    value,
                    index,
                    bound,
                    table: String::new(),
                });
            }
        }
        let (arena, offset) = location(plan, &memory.arenas, t as u32)?;
        memory.arenas[arena][offset..offset + bytes.len()].copy_from_slice(&bytes);
    }
    for split in &plan.splits {
        let device = split.device.0;
        for c in &split.copies {
            let values = memory.read(c.src)?;
            memory.write(c.dst, &values)?;
        }
        for step in &split.steps {
            match step {
                // An op; a rope-and-store step's ops in turn, each as its own
                // step would (the checker proved them independent, so the
                // order is immaterial).
                Step::Op { .. } | Step::RopeStore { .. } => {
                    for (op, dst, srcs) in step.ops() {
                        check_reads(plan, device, Some(op), srcs)?;
                        let values: Vec<Dense> = srcs
                            .iter()
                            .map(|&s| memory.read(s))
                            .collect::<Result<_, _>>()?;
                        let refs: Vec<&Dense> = values.iter().collect();
                        let out = compute(op, &refs, &layout_of(plan, dst));
                        memory.write(dst, &out)?;
                    }
                }
                Step::MulMatAdd { product, dst, srcs } => {
                    // The two ops one after the other, the product held here
                    // only (it has no bytes in the plan).
                    check_reads(plan, device, None, srcs)?;
                    let [w, x, r] = srcs.map(|s| memory.read(s));
                    let p = compute(&Op::MulMat, &[&w?, &x?], &layout_of(plan, *product));
                    let out = compute(&Op::Add, &[&p, &r?], &layout_of(plan, *dst));
                    memory.write(*dst, &out)?;
                }
                Step::Attention {
                    scores,
                    probs,
                    product,
                    dst,
                    srcs,
                    scale,
                    max_bias,
                    ..
                } => {
                    // The five ops one after another, the intermediates held
                    // here only (they have no bytes in the plan).
                    check_reads(plan, device, None, srcs)?;
                    let values: Vec<Dense> = srcs
                        .iter()
                        .map(|&s| memory.read(s))
                        .collect::<Result<_, _>>()?;
                    let refs: Vec<&Dense> = values.iter().collect();
                    let [scores, probs, product, dst_layout] =
                        [*scores, *probs, *product, *dst].map(|t| layout_of(plan, t));
                    let layouts = AttentionLayouts {
                        scores: &scores,
                        probs: &probs,
                        product: &product,
                        dst: &dst_layout,
                    };
                    let out = attention(&refs, (*scale, *max_bias), layouts);
                    memory.write(*dst, &out)?;
                }
                Step::MulMatMany { dsts, srcs } => {
                    // Each product, as its own mul_mat would.
                    check_reads(plan, device, None, srcs)?;
                    let (x, weights) = srcs
                        .split_last()
                        .ok_or_else(|| invalid("a mul_mat x N step reads nothing".to_string()))?;
                    let x = memory.read(*x)?;
                    for (&dst, &w) in dsts.iter().zip(weights) {
                        let w = memory.read(w)?;
                        let out = compute(&Op::MulMat, &[&w, &x], &layout_of(plan, dst));
                        memory.write(dst, &out)?;
                    }
                }
                Step::MulMatGlu {
                    kind,
                    products,
                    dst,
                    srcs,
                    ..
                } => {
                    // Both products, then the unit; the products (and any
                    // inner node) are held here only.
                    check_reads(plan, device, None, srcs)?;
                    let [wg, wu, x] = srcs.map(|s| memory.read(s));
                    let x = x?;
                    let gate = compute(&Op::MulMat, &[&wg?, &x], &layout_of(plan, products[0]));
                    let up = compute(&Op::MulMat, &[&wu?, &x], &layout_of(plan, products[1]));
                    let glu = Op::Glu {
                        kind: *kind,
                        swapped: false,
                    };
                    let out = compute(&glu, &[&gate, &up], &layout_of(plan, *dst));
                    memory.write(*dst, &out)?;
                }
                Step::Fused { kernel } => {
                    let k = plan
                        .kernels
                        .get(*kernel as usize)
                        .ok_or_else(|| invalid(format!("kernel {kernel} does not exist")))?;
                    check_reads(plan, device, None, &k.inputs)?;
                    let values: Vec<Dense> = k
                        .inputs
                        .iter()
                        .map(|&s| memory.read(s))
                        .collect::<Result<_, _>>()?;
                    let refs: Vec<&Dense> = values.iter().collect();
                    let out = eval_fused(&k.body, &refs, layout_of(plan, k.output).ne);
                    memory.write(k.output, &out)?;
                }
            }
        }
    }
    Ok(memory)
}

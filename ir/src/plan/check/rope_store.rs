//! A rope-and-store step (`Step::RopeStore`) in family 1: its counts and
//! indices hold together; it runs 2 to [`MAX_OPS`] ops, each a `rope` or a
//! `set_rows` with its operand count, naming at most [`MAX_TENSORS`] distinct
//! tensors besides the destinations its `set_rows` write into (what one CUDA
//! argument block holds); its results are distinct
//! graph tensors; its ropes share one set of angles (parameters, positions
//! and frequency factors); each op is held to its own rule (shape family).
//!
//! Independence, the property that lets a GPU run the ops at once: with
//! `reads(j)` the operands op `j` reads (a `set_rows`'s rows and indices, not
//! the destination it writes into; a rope's every operand) and `writes(j)`
//! its result's bytes, no op reads bytes another writes and no two ops write
//! the same bytes. One exception, a *chained* store: a `set_rows` whose rows
//! are a packed view at offset 0 of an earlier rope's packed result, of its
//! dtype and element count, reads the rope's operands instead (it rotates
//! them itself, element for element in the same order), so the rope's result
//! is written by the rope and never read inside the step. Reads and writes
//! otherwise go through `GlobalItem`, so order, lifetimes, races and events
//! cover every result; a partial sum it reads is refused (`trace`: no op).

use super::race::range_of;
use super::shape::check_op;
use super::{Checker, ViolationKind::Format};
use crate::op::Op;
use crate::plan::{RowOp, Step};

/// The most ops one step runs.
pub const MAX_OPS: usize = 4;
/// The most distinct tensors one step names.
pub const MAX_TENSORS: usize = 12;

/// Family 1 for one step named `name`: counts, index ranges, op kinds,
/// shared angles, independence.
pub(super) fn format(c: &mut Checker<'_>, name: String, step: &Step) {
    let Step::RopeStore { ops, dsts, srcs } = step else {
        return;
    };
    let counted: u64 = ops.iter().map(|o| u64::from(o.n_srcs)).sum();
    if !(2..=MAX_OPS).contains(&ops.len())
        || dsts.len() != ops.len()
        || counted != srcs.len() as u64
    {
        let msg = format!(
            "rope + set_rows runs 2 to {MAX_OPS} ops, one result each, their operand counts \
             adding up to the operands: {} ops, {} results, {counted} counted and {} operands",
            ops.len(),
            dsts.len(),
            srcs.len()
        );
        return c.problem(Format, name, msg);
    }
    for &t in dsts.iter().chain(srcs) {
        if t as usize >= c.plan.tensors.len() {
            let msg = format!("rope + set_rows names t{t}, out of range");
            return c.problem(Format, name, msg);
        }
    }
    for RowOp { op, n_srcs } in ops {
        let fits = match op {
            Op::Rope(_) => (2..=3).contains(n_srcs),
            Op::SetRows => *n_srcs == 3,
            _ => false,
        };
        if !fits {
            let msg = format!(
                "rope + set_rows runs rope (2 or 3 operands) and set_rows (3), not {op} with {n_srcs}"
            );
            return c.problem(Format, name, msg);
        }
    }
    // What the kernel's arguments hold: each result and operand, but not a
    // set_rows's destination operand (its result names those bytes).
    let parts = step.ops();
    let mut named: Vec<u32> = (parts.iter())
        .flat_map(|&(op, dst, s)| {
            let skip = usize::from(*op == Op::SetRows);
            std::iter::once(dst).chain(s.iter().skip(skip).copied())
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    if named.len() > MAX_TENSORS {
        let msg = format!(
            "rope + set_rows names {} distinct tensors, more than the {MAX_TENSORS} one kernel's \
             arguments hold",
            named.len()
        );
        c.problem(Format, name.clone(), msg);
    }
    for (i, &t) in dsts.iter().enumerate() {
        if t >= c.plan.n_graph_tensors || dsts[..i].contains(&t) {
            let msg = "rope + set_rows writes it: it must be a graph tensor, written once";
            c.tensor_problem(Format, t, msg.to_string());
        }
    }
    let ropes: Vec<(&Op, &[u32])> = (parts.iter())
        .filter(|(op, ..)| matches!(op, Op::Rope(_)))
        .map(|&(op, _, s)| (op, &s[1..]))
        .collect();
    if ropes.windows(2).any(|p| p[0] != p[1]) {
        let msg = "rope + set_rows: its ropes differ in parameters, positions or frequency \
                   factors (one kernel computes one set of angles)";
        c.problem(Format, name.clone(), msg.to_string());
    }
    independence(c, &name, &parts);
}

/// Family 1, shapes: each op is held to its own rule.
pub(super) fn shape(c: &mut Checker<'_>, step: &Step) {
    for (op, dst, srcs) in step.ops() {
        check_op(c, op, dst, srcs, false);
    }
}

/// The operands op `j` reads inside the step (see the module doc).
fn reads(c: &Checker<'_>, parts: &[(&Op, u32, &[u32])], j: usize) -> Vec<u32> {
    let (op, _, srcs) = parts[j];
    match op {
        Op::SetRows => match c.plan.chained_rope(parts, j) {
            Some(i) => parts[i].2.iter().chain(&srcs[2..]).copied().collect(),
            None => srcs[1..].to_vec(),
        },
        _ => srcs.to_vec(),
    }
}

/// No op reads what another writes, no two write the same bytes.
fn independence(c: &mut Checker<'_>, name: &str, parts: &[(&Op, u32, &[u32])]) {
    let overlap = |c: &Checker<'_>, a: u32, b: u32| match (range_of(c, a), range_of(c, b)) {
        (Some((x, lo, hi)), Some((y, lo2, hi2))) => x == y && lo < hi2 && lo2 < hi,
        _ => c.owner(a).is_some() && c.owner(a) == c.owner(b),
    };
    for j in 0..parts.len() {
        let read = reads(c, parts, j);
        for (i, &(op, written, _)) in parts.iter().enumerate() {
            if i == j {
                continue;
            }
            if let Some(&t) = read.iter().find(|&&t| overlap(c, t, written)) {
                let msg = format!(
                    "rope + set_rows: op {j} ({}) reads {}, which op {i} ({op}) writes: its ops \
                     run at once",
                    parts[j].0,
                    c.describe(t)
                );
                c.problem(Format, name.to_string(), msg);
            }
            if i < j && overlap(c, parts[j].1, written) {
                let msg = format!(
                    "rope + set_rows: ops {i} and {j} write the same bytes ({} and {})",
                    c.describe(written),
                    c.describe(parts[j].1)
                );
                c.problem(Format, name.to_string(), msg);
            }
        }
    }
}

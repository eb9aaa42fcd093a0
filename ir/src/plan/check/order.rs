//! Family 3, order and devices: reads after writes, the right number of
//! writes per tensor, every access on its split's device.

use super::ViolationKind::{Device, Order};
use super::trace::Access;
use super::{Checker, is_leaf_role};
use crate::plan::Placement;

/// What the walk knows so far.
struct Walk {
    /// Written by an earlier copy or step.
    written: Vec<bool>,
    /// Views that some step writes (the results of `cpy` / `set_rows`): they
    /// hold data only once written, whatever their owner holds.
    written_view: Vec<bool>,
    /// Writes by steps, per tensor.
    by_step: Vec<u32>,
    /// Writes by copies, per tensor.
    by_copy: Vec<u32>,
}

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access]) {
    let n = c.plan.tensors.len();
    let mut walk = Walk {
        written: vec![false; n],
        written_view: vec![false; n],
        by_step: vec![0; n],
        by_copy: vec![0; n],
    };
    for a in accesses.iter().filter(|a| !a.is_copy) {
        for &w in &a.writes {
            if let (Some(t), Some(v)) = (c.tensor(w), walk.written_view.get_mut(w as usize)) {
                *v |= matches!(t.placement, Placement::View { .. });
            }
        }
    }
    for a in accesses {
        for &r in &a.reads {
            read(c, &walk, a, r);
        }
        for &w in &a.writes {
            write(c, &mut walk, a, w);
        }
        for &w in &a.writes {
            if let Some(done) = walk.written.get_mut(w as usize) {
                *done = true;
            }
        }
    }
    write_counts(c, &walk);
}

/// True when tensor `i` is a graph leaf (its bytes hold data from the start).
fn is_leaf(c: &Checker<'_>, i: u32) -> bool {
    i < c.plan.n_graph_tensors && c.tensor(i).is_some_and(|t| is_leaf_role(t.role))
}

/// True when tensor `r`'s bytes hold data now.
fn holds_data(c: &Checker<'_>, walk: &Walk, r: u32) -> bool {
    let idx = r as usize;
    if walk.written.get(idx).copied().unwrap_or(false) {
        return true;
    }
    match c.tensor(r).map(|t| t.placement) {
        Some(Placement::Arena { .. }) => is_leaf(c, r),
        Some(Placement::View { of, .. }) => {
            !walk.written_view.get(idx).copied().unwrap_or(false)
                && (is_leaf(c, of) || walk.written.get(of as usize).copied().unwrap_or(false))
        }
        Some(Placement::Fused) | None => false,
    }
}

fn read(c: &mut Checker<'_>, walk: &Walk, a: &Access, r: u32) {
    let fused = c.tensor(r).is_some_and(|t| t.placement == Placement::Fused);
    if fused && a.kernel.is_none() {
        let msg = format!(
            "is read by {}, but it is a fused intermediate and has no bytes",
            a.label
        );
        c.tensor_problem(Order, r, msg);
    } else if !fused && !holds_data(c, walk, r) {
        let msg = format!("is read by {} before any copy or step wrote it", a.label);
        c.tensor_problem(Order, r, msg);
    }
    let Some(held) = c.device_of(r) else { return };
    if a.is_copy && held == a.device {
        let msg = format!(
            "is copied by {} to {}, where its bytes already are",
            a.label,
            c.device_name(a.device)
        );
        c.tensor_problem(Device, r, msg);
    } else if a.reads_peers && held != a.device && !c.share_memory(held, a.device) {
        let msg = format!(
            "is read in place by {} on {}, but its bytes are on {}, which does not share \
             memory with it (collectives read parts in place only between CPU devices)",
            a.label,
            c.device_name(a.device),
            c.device_name(held)
        );
        c.tensor_problem(Device, r, msg);
    } else if !a.is_copy && !a.reads_peers && held != a.device {
        let msg = format!(
            "is read by {} on {}, but its bytes are on {}",
            a.label,
            c.device_name(a.device),
            c.device_name(held)
        );
        c.tensor_problem(Device, r, msg);
    }
}

fn write(c: &mut Checker<'_>, walk: &mut Walk, a: &Access, w: u32) {
    let Some(t) = c.tensor(w) else { return };
    if let Some(held) = c.device_of(w).filter(|&d| d != a.device) {
        let msg = format!(
            "is written by {} on {}, but its bytes are on {}",
            a.label,
            c.device_name(a.device),
            c.device_name(held)
        );
        c.tensor_problem(Device, w, msg);
    }
    let idx = w as usize;
    if a.is_copy {
        if let Some(n) = walk.by_copy.get_mut(idx) {
            *n += 1;
        }
        return; // a copy into a non-copy tensor is a format violation
    }
    if let Some(n) = walk.by_step.get_mut(idx) {
        *n += 1;
    }
    let problem = if w >= c.plan.n_graph_tensors {
        Some("is a copy tensor: only a copy may fill it")
    } else if is_leaf_role(t.role) {
        Some("is a leaf: its bytes are given, never computed")
    } else if t.placement == Placement::Fused {
        Some("is a fused intermediate: it has no bytes to write")
    } else {
        None
    };
    if let Some(problem) = problem {
        let msg = format!("is written by {}, but it {problem}", a.label);
        c.tensor_problem(Order, w, msg);
    }
}

fn write_counts(c: &mut Checker<'_>, walk: &Walk) {
    let n_graph = c.plan.n_graph_tensors;
    let counts = walk.by_step.iter().zip(&walk.by_copy);
    for (i, (t, (&steps, &copies))) in c.plan.tensors.iter().zip(counts).enumerate() {
        let id = i as u32;
        let problem = if id >= n_graph {
            match t.placement {
                // A copy may be refilled after its original is written into
                // (one copy per version), but it must be filled.
                Placement::Arena { .. } if copies == 0 => {
                    Some("is a copy that no copy fills".to_string())
                }
                Placement::View { .. } if copies > 0 => Some(format!(
                    "is a view re-created over a copy, yet {copies} copies write it"
                )),
                _ => None,
            }
        } else if is_leaf_role(t.role) {
            None // writes were reported as they happened
        } else {
            match t.placement {
                Placement::Arena { .. } if steps != 1 => Some(format!(
                    "is written by {steps} steps; a graph node with bytes needs exactly one"
                )),
                Placement::View { .. } if steps > 1 => Some(format!(
                    "is written by {steps} steps; a view is written at most once"
                )),
                _ => None,
            }
        };
        if let Some(msg) = problem {
            c.tensor_problem(Order, id, msg);
        }
    }
}

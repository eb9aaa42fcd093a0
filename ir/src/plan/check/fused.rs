//! Family 6, fused kernels: membership, the step running each kernel, the
//! body's order and arguments, and extents.
//!
//! Extents of a body: an `Input`, `RmsNorm` or `Norm` has its input's; a unary
//! node its argument's; a binary node, per dim, the larger of its arguments',
//! each of which must divide it (ggml broadcasting).

use super::Checker;
use super::ViolationKind::Fused;
use crate::plan::{Expr, FusedKernel, Placement, Step};
use std::collections::BTreeMap;

pub(super) fn check(c: &mut Checker<'_>) {
    let plan = c.plan;
    let mut runs = vec![0u32; plan.kernels.len()];
    for step in plan.splits.iter().flat_map(|s| &s.steps) {
        if let Step::Fused { kernel } = step
            && let Some(n) = runs.get_mut(*kernel as usize)
        {
            *n += 1;
        }
    }
    let mut member_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (k, (kn, &n)) in plan.kernels.iter().zip(&runs).enumerate() {
        let name = format!("kernel {k}");
        if n != 1 {
            c.problem(
                Fused,
                name.clone(),
                format!("is run by {n} steps; exactly one must run it"),
            );
        }
        if kn.nodes.last() != Some(&kn.output) {
            let msg = format!(
                "its nodes must end with its output t{}, they are {:?}",
                kn.output, kn.nodes
            );
            c.problem(Fused, name.clone(), msg);
        }
        for &node in &kn.nodes {
            if let Some(other) = member_of.insert(node, k) {
                let msg = format!("is a node of kernel {other} and of kernel {k}");
                c.tensor_problem(Fused, node, msg);
            }
        }
        for &t in &kn.inputs {
            if c.tensor(t).is_some_and(|t| t.placement == Placement::Fused) {
                let msg = format!(
                    "is an input of {name}, but it is a fused intermediate and has no bytes"
                );
                c.tensor_problem(Fused, t, msg);
            }
        }
        if kn.inputs.is_empty() {
            c.problem(Fused, name.clone(), "reads no input".to_string());
        }
        if body(c, &name, kn) {
            extents(c, &name, kn);
        }
    }
}

/// Checks order and arguments; true when the body is well formed.
fn body(c: &mut Checker<'_>, name: &str, kn: &FusedKernel) -> bool {
    if kn.body.is_empty() {
        c.problem(Fused, name.to_string(), "has an empty body".to_string());
        return false;
    }
    let mut ok = true;
    for (e, expr) in kn.body.iter().enumerate() {
        let (args, input) = match *expr {
            Expr::Input(i) | Expr::RmsNorm { input: i, .. } | Expr::Norm { input: i, .. } => {
                (vec![], Some(i))
            }
            Expr::Unary(_, a) => (vec![a], None),
            Expr::Binary(_, a, b) => (vec![a, b], None),
        };
        for a in args {
            if a as usize >= e {
                let expr = crate::plan::text::line(expr);
                let msg = format!("body[{e}] {expr} refers to body[{a}], not an earlier node");
                c.problem(Fused, name.to_string(), msg);
                ok = false;
            }
        }
        if let Some(i) = input.filter(|&i| i as usize >= kn.inputs.len()) {
            let msg = format!(
                "body[{e}] {} reads input {i}, but the kernel has {} inputs",
                crate::plan::text::line(expr),
                kn.inputs.len()
            );
            c.problem(Fused, name.to_string(), msg);
            ok = false;
        }
    }
    ok
}

/// Checks extents: inputs broadcast over the output, norms read rows of the
/// output's length, the body's extents and every node's are the output's.
fn extents(c: &mut Checker<'_>, name: &str, kn: &FusedKernel) {
    let Some(out) = c.tensor(kn.output).map(|t| t.ne) else {
        return; // format
    };
    let tensors = &c.plan.tensors;
    let ne_of = |t: u32| {
        let ne = tensors.get(t as usize).map(|t| t.ne);
        ne.filter(|ne| ne.iter().all(|&n| n >= 1))
    };
    if out.iter().any(|&n| n < 1) {
        return; // format
    }
    let mut inputs = Vec::with_capacity(kn.inputs.len());
    for &t in &kn.inputs {
        let Some(ne) = ne_of(t) else { return };
        if (0..4).any(|d| out[d] % ne[d] != 0) {
            let msg = format!(
                "input {} {ne:?} does not broadcast over the output {out:?}",
                c.describe(t)
            );
            c.problem(Fused, name.to_string(), msg);
        }
        inputs.push(ne);
    }
    let mut body: Vec<[i64; 4]> = Vec::with_capacity(kn.body.len());
    for (e, expr) in kn.body.iter().enumerate() {
        let at = |i: u32, v: &[[i64; 4]]| v.get(i as usize).copied();
        let ne = match *expr {
            Expr::Input(i) => at(i, &inputs),
            Expr::RmsNorm { input, .. } | Expr::Norm { input, .. } => {
                let ne = at(input, &inputs);
                if let Some(ne) = ne.filter(|ne| ne[0] != out[0]) {
                    let msg = format!(
                        "body[{e}] normalises rows of {} elements, the output's rows have {}",
                        ne[0], out[0]
                    );
                    c.problem(Fused, name.to_string(), msg);
                }
                ne
            }
            Expr::Unary(_, a) => at(a, &body),
            Expr::Binary(_, a, b) => match (at(a, &body), at(b, &body)) {
                (Some(x), Some(y)) => {
                    let m: [i64; 4] = std::array::from_fn(|d| x[d].max(y[d]));
                    if (0..4).any(|d| m[d] % x[d] != 0 || m[d] % y[d] != 0) {
                        let msg =
                            format!("body[{e}] combines {x:?} and {y:?}, which do not broadcast");
                        c.problem(Fused, name.to_string(), msg);
                    }
                    Some(m)
                }
                _ => None,
            },
        };
        let Some(ne) = ne else { return };
        body.push(ne);
    }
    if let Some(&ne) = body.last().filter(|&&ne| ne != out) {
        let msg = format!("the body computes {ne:?}, the output tensor is {out:?}");
        c.tensor_problem(Fused, kn.output, msg);
    }
    for &node in &kn.nodes {
        if let Some(ne) = ne_of(node).filter(|&ne| ne != out) {
            let msg = format!(
                "is a node of {name}, whose elementwise nodes all have the output's extents {out:?}, but it is {ne:?}"
            );
            c.tensor_problem(Fused, node, msg);
        }
    }
}

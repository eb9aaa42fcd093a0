//! The graph verifier: every invariant a graph must hold, all violations
//! reported at once (not just the first).
//!
//! Invariants checked:
//! 1. names are non-empty and unique;
//! 2. every source id exists and is smaller than its user's (topological order);
//! 3. leafs have a leaf role, no sources, no view, packed strides; only
//!    constants carry an init, and a constant's init fits its shape and dtype;
//! 4. nodes have a node role, and their dtype, extents and strides are exactly
//!    what the op's rules ([`crate::rules`]) derive from their sources;
//! 5. views and write-into ops alias a root (never a view), in bounds of the root;
//! 6. `cpy`/`set_rows` write only into state or intermediate memory, never into
//!    weights, inputs or constants;
//! 7. the graph has at least one output.

use crate::dtype::DType;
use crate::error::Violation;
use crate::graph::Graph;
use crate::layout::fmt_ne;
use crate::rules;
use crate::tensor::{ConstInit, Role, Tensor, ViewOf};
use std::collections::BTreeSet;

/// Checks every invariant of `graph`; an empty result means valid.
pub fn verify(graph: &Graph) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (i, t) in graph.tensors().iter().enumerate() {
        let mut report = |message: String| out.push(violation(i, t, message));
        if t.name.is_empty() {
            report("tensor names must not be empty".into());
        } else if !names.insert(t.name.as_str()) {
            report(format!("name '{}' is used by an earlier tensor", t.name));
        }
        match &t.op {
            None => {
                if let Some(reason) = leaf_problem(t) {
                    report(reason);
                }
            }
            Some(_) => {
                for reason in node_problems(graph, i, t) {
                    report(reason);
                }
            }
        }
    }
    if graph.with_role(Role::Output).next().is_none() {
        out.push(Violation {
            tensor: None,
            name: String::new(),
            op: String::new(),
            line: None,
            message: "no tensor has role Output; nothing would be observable".into(),
        });
    }
    out
}

fn violation(i: usize, t: &Tensor, message: String) -> Violation {
    Violation {
        tensor: Some(i as u32),
        name: t.name.clone(),
        op: t.op.map_or("leaf", |op| op.name()).to_string(),
        line: None,
        message,
    }
}

/// Why a leaf is invalid, if it is (used by the builder too).
pub fn leaf_problem(t: &Tensor) -> Option<String> {
    if !t.role.is_leaf_role() {
        return Some(format!("a leaf cannot have role {}", t.role));
    }
    if !t.srcs.is_empty() || t.view.is_some() {
        return Some("a leaf has no sources and is no view".into());
    }
    if !t.layout.is_contiguous() || t.layout.ne.iter().any(|&n| n < 1) {
        return Some(format!(
            "leafs are packed: {} {} with strides {:?} is not",
            t.layout.dtype,
            fmt_ne(&t.layout.ne),
            t.layout.nb
        ));
    }
    if let Some(shard) = &t.shard {
        if t.role != Role::Weight {
            return Some(format!("only weights are shards, not a {}", t.role));
        }
        if let Some(why) = shard.problem(t.dtype(), t.layout.ne) {
            return Some(why);
        }
    }
    match (&t.init, t.role) {
        (Some(_), r) if r != Role::Constant => {
            Some(format!("only constants have an init, not a {r}"))
        }
        (None, Role::Constant) => Some("a constant needs an init".into()),
        (Some(init), _) => constant_problem(t, init),
        (None, _) => None,
    }
}

fn constant_problem(t: &Tensor, init: &ConstInit) -> Option<String> {
    if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::I32) {
        return Some(format!("constants are f32, f16 or i32, not {}", t.dtype()));
    }
    match init {
        ConstInit::Values(v) if v.len() as u64 != t.layout.n_elements() => Some(format!(
            "{} values given for {} elements",
            v.len(),
            t.layout.n_elements()
        )),
        ConstInit::CausalMask { .. } if t.dtype() == DType::I32 => {
            Some("a causal mask holds -inf, so it cannot be i32".into())
        }
        _ => None,
    }
}

fn node_problems(graph: &Graph, i: usize, t: &Tensor) -> Vec<String> {
    let Some(op) = t.op else { return vec![] };
    let mut problems = Vec::new();
    if t.role.is_leaf_role() {
        problems.push(format!("a node cannot have the leaf role {}", t.role));
    }
    if t.init.is_some() {
        problems.push("only constants have an init".into());
    }
    if t.shard.is_some() {
        problems.push("only weights are shards".into());
    }
    let mut operands = Vec::with_capacity(t.srcs.len());
    for &s in &t.srcs {
        if s.index() >= i {
            problems.push(format!(
                "source t{} is not defined before this tensor (t{i})",
                s.0
            ));
        } else {
            operands.push((s, graph.tensor(s)));
        }
    }
    if operands.len() != t.srcs.len() {
        return problems;
    }
    let derived = match rules::derive(&op, &operands, Some(&t.layout)) {
        Ok(d) => d,
        Err(reason) => {
            let shapes: Vec<String> = operands.iter().map(|(_, s)| s.describe()).collect();
            problems.push(format!("{reason}; operands: {}", shapes.join(", ")));
            return problems;
        }
    };
    let (want, have) = (derived.layout, t.layout);
    if (want.dtype, want.ne) != (have.dtype, have.ne) {
        problems.push(format!(
            "is {} {} but {op} of its sources gives {} {}",
            have.dtype,
            fmt_ne(&have.ne),
            want.dtype,
            fmt_ne(&want.ne)
        ));
    } else if want.nb != have.nb {
        problems.push(format!(
            "strides {:?} differ from the {:?} that {op} gives",
            have.nb, want.nb
        ));
    }
    if derived.view != t.view {
        let aliases = |v: Option<ViewOf>| match v {
            Some(v) => format!("the bytes of {} at +{}", v.root, v.offset),
            None => "no other tensor".to_string(),
        };
        problems.push(format!(
            "aliases {} but {op} of its sources aliases {}",
            aliases(t.view),
            aliases(derived.view)
        ));
    }
    if let Some(v) = derived.view {
        problems.extend(view_bounds_problem(graph.tensors(), v, &t.layout));
    }
    if let Some(dst) = op.writes_into_source() {
        let root = graph.storage_of(t.srcs[dst]).root;
        let role = graph.tensor(root).role;
        if matches!(role, Role::Weight | Role::Input | Role::Constant) {
            problems.push(format!(
                "writes into {role} '{}'; only state and intermediate memory may be written",
                graph.tensor(root).name
            ));
        }
    }
    problems
}

/// Why a view at `v` with `layout` falls outside its root, if it does.
pub fn view_bounds_problem(
    tensors: &[Tensor],
    v: ViewOf,
    layout: &crate::layout::Layout,
) -> Option<String> {
    let root = tensors.get(v.root.index())?;
    if root.view.is_some() {
        return Some(format!("view root '{}' is itself a view", root.name));
    }
    let root_bytes = root.layout.span_bytes();
    let end = v.offset.checked_add(layout.span_bytes());
    match end {
        Some(end) if end <= root_bytes => None,
        _ => Some(format!(
            "view bytes {}..{} fall outside root '{}' ({} bytes)",
            v.offset,
            end.map_or("overflow".to_string(), |e| e.to_string()),
            root.name,
            root_bytes
        )),
    }
}

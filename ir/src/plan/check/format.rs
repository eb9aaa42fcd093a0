//! Family 1, format: version, index ranges, devices, layouts, copies, arity.
//! Later families skip what this one reports as out of range.

use super::{Checker, ViolationKind::Format, span_of};
use crate::plan::{Copy, PLAN_FORMAT_VERSION, Placement, PlanTensor, Step};
use crate::{ConstInit, Role};

pub(super) fn check(c: &mut Checker<'_>) {
    let plan = c.plan;
    if plan.format_version != PLAN_FORMAT_VERSION {
        c.problem(
            Format,
            "plan",
            format!(
                "format_version {} is not the supported {PLAN_FORMAT_VERSION}",
                plan.format_version
            ),
        );
    }
    if plan.n_graph_tensors as usize > plan.tensors.len() {
        c.problem(
            Format,
            "plan",
            format!(
                "n_graph_tensors {} exceeds the {} tensors",
                plan.n_graph_tensors,
                plan.tensors.len()
            ),
        );
    }
    devices(c);
    tensors(c);
    arenas(c);
    kernels(c);
    for (s, split) in plan.splits.iter().enumerate() {
        if split.device.index() >= plan.devices.len() {
            let msg = format!("device {} is out of range", split.device);
            c.problem(Format, format!("split {s}"), msg);
        }
        for copy in &split.copies {
            check_copy(c, s, copy);
        }
        for (k, step) in split.steps.iter().enumerate() {
            check_step(c, s, k, step);
        }
    }
}

fn devices(c: &mut Checker<'_>) {
    for (d, dev) in c.plan.devices.iter().enumerate() {
        let name = format!("device '{}' (d{d})", dev.name);
        if !dev.alignment.is_power_of_two() {
            let msg = format!("alignment {} is not a power of two", dev.alignment);
            c.problem(Format, name.clone(), msg);
        }
        if dev.max_buffer_bytes == 0 {
            c.problem(Format, name.clone(), "max_buffer_bytes is 0".to_string());
        }
        // The runtime shares the host's cores out by these numbers.
        if let crate::plan::DeviceKind::CpuCores { group, groups } = dev.kind
            && group >= groups
        {
            let msg = format!("core group {group} of {groups}: the group must be below the count");
            c.problem(Format, name, msg);
        }
    }
}

fn tensors(c: &mut Checker<'_>) {
    let plan = c.plan;
    let n = plan.tensors.len();
    for (i, t) in plan.tensors.iter().enumerate() {
        let id = i as u32;
        if t.device.index() >= plan.devices.len() {
            let msg = format!("device {} is out of range", t.device);
            c.tensor_problem(Format, id, msg);
        }
        if t.ne.iter().any(|&e| e < 1) {
            c.tensor_problem(Format, id, format!("extents {:?} must all be >= 1", t.ne));
        } else if t.dtype.row_bytes(t.ne[0] as u64).is_none() {
            let msg = format!(
                "ne0 {} is not a whole number of {} blocks (or its row overflows)",
                t.ne[0], t.dtype
            );
            c.tensor_problem(Format, id, msg);
        } else if span_of(t).is_none() {
            let msg = format!("the span of {:?} with strides {:?} overflows", t.ne, t.nb);
            c.tensor_problem(Format, id, msg);
        } else if t.role.is_leaf_role()
            && let packed = crate::layout::contiguous_strides(t.dtype, t.ne)
            && packed != Some(t.nb)
        {
            // Leaves are bound and set as packed bytes (weights, inputs, state).
            let msg = format!(
                "a {} leaf must be packed: strides {:?}, packed {:?} for extents {:?}",
                t.role, t.nb, packed, t.ne
            );
            c.tensor_problem(Format, id, msg);
        }
        match t.placement {
            Placement::Arena { arena, .. } if arena as usize >= plan.arenas.len() => {
                c.tensor_problem(Format, id, format!("arena {arena} is out of range"));
            }
            Placement::View { of, .. } if of as usize >= n => {
                c.tensor_problem(Format, id, format!("view of t{of}, out of range"));
            }
            _ => {}
        }
        constant_init(c, id, t);
        let is_copy = id >= plan.n_graph_tensors;
        match (is_copy, t.copy_of) {
            (false, Some(of)) => {
                let msg = format!("a graph tensor has copy_of t{of}; only copies may");
                c.tensor_problem(Format, id, msg);
            }
            (true, None) => {
                let msg = "a tensor past n_graph_tensors must be a copy (copy_of)";
                c.tensor_problem(Format, id, msg.to_string());
            }
            (true, Some(of)) => match plan.tensors.get(of as usize) {
                None => c.tensor_problem(Format, id, format!("copy_of t{of} is out of range")),
                Some(_) if of == id => {
                    c.tensor_problem(Format, id, "copy_of names itself".to_string());
                }
                Some(src) if src.dtype != t.dtype || src.ne != t.ne => {
                    let msg = format!(
                        "a copy is {} {:?} but its original {} is {} {:?}",
                        t.dtype,
                        t.ne,
                        c.describe(of),
                        src.dtype,
                        src.ne
                    );
                    c.tensor_problem(Format, id, msg);
                }
                Some(_) => recreated_view(c, id, of),
            },
            (false, None) => {}
        }
    }
}

/// A graph constant defines its values (explicit ones: one per element); no
/// other graph tensor has an `init`.
fn constant_init(c: &mut Checker<'_>, id: u32, t: &PlanTensor) {
    if id >= c.plan.n_graph_tensors {
        return;
    }
    match (&t.init, t.role) {
        (None, Role::Constant) => {
            c.tensor_problem(Format, id, "is a constant without an init".to_string());
        }
        (Some(_), role) if role != Role::Constant => {
            let msg = format!("is {role}, but only constants have an init");
            c.tensor_problem(Format, id, msg);
        }
        (Some(ConstInit::Values(values)), _) => {
            let elems =
                t.ne.iter()
                    .try_fold(1u64, |acc, &n| acc.checked_mul(u64::try_from(n).ok()?));
            if elems != Some(values.len() as u64) {
                let msg = format!(
                    "has {} explicit values for extents {:?}",
                    values.len(),
                    t.ne
                );
                c.tensor_problem(Format, id, msg);
            }
        }
        _ => {}
    }
}

/// A copy tensor placed as a view is a graph view `of` re-created over a copy
/// of its owner: it views that copy at the graph view's own offset.
fn recreated_view(c: &mut Checker<'_>, id: u32, of: u32) {
    let Some(Placement::View { of: copy, offset }) = c.tensor(id).map(|t| t.placement) else {
        return;
    };
    let expected = match c.tensor(of).map(|t| t.placement) {
        Some(Placement::View {
            of: owner,
            offset: at,
        }) => c.tensor(copy).and_then(|t| t.copy_of) == Some(owner) && at == offset,
        _ => false,
    };
    if !expected {
        let msg = format!(
            "copies {} as a view of {} at offset {offset}: a re-created view must view a copy \
             of its original's owner at the original's offset",
            c.describe(of),
            c.describe(copy)
        );
        c.tensor_problem(Format, id, msg);
    }
}

fn arenas(c: &mut Checker<'_>) {
    for (a, arena) in c.plan.arenas.iter().enumerate() {
        if arena.device.index() >= c.plan.devices.len() {
            let msg = format!("device {} is out of range", arena.device);
            c.problem(Format, format!("arena {a}"), msg);
        }
    }
}

fn kernels(c: &mut Checker<'_>) {
    let n = c.plan.tensors.len();
    for (k, kernel) in c.plan.kernels.iter().enumerate() {
        let lists = [
            ("input", &kernel.inputs),
            ("node", &kernel.nodes),
            ("output", &vec![kernel.output]),
        ];
        for (what, list) in lists {
            for &t in list.iter().filter(|&&t| t as usize >= n) {
                let msg = format!("{what} t{t} is out of range");
                c.problem(Format, format!("kernel {k}"), msg);
            }
        }
    }
}

/// The original of tensor `i`: follows `copy_of` (at most once per tensor).
fn original(c: &Checker<'_>, mut i: u32) -> u32 {
    for _ in 0..=c.plan.tensors.len() {
        match c.tensor(i).and_then(|t| t.copy_of) {
            Some(of) if of != i => i = of,
            _ => break,
        }
    }
    i
}

fn check_copy(c: &mut Checker<'_>, s: usize, copy: &Copy) {
    let name = format!("split {s}");
    let (Some(_), Some(dst)) = (c.tensor(copy.src), c.tensor(copy.dst)) else {
        let msg = format!(
            "copy t{} -> t{} names a tensor out of range",
            copy.src, copy.dst
        );
        return c.problem(Format, name, msg);
    };
    if dst.copy_of.is_none() {
        let msg = format!(
            "is the destination of a copy from {} but not a copy tensor",
            c.describe(copy.src)
        );
        return c.tensor_problem(Format, copy.dst, msg);
    }
    if original(c, copy.dst) != original(c, copy.src) {
        let msg = format!(
            "a copy of t{} is filled from {}, another tensor",
            original(c, copy.dst),
            c.describe(copy.src)
        );
        c.tensor_problem(Format, copy.dst, msg);
    }
    if let Some(span) = span_of(dst).filter(|&span| span != copy.bytes) {
        let msg = format!(
            "the copy into it moves {} bytes, its span is {span}",
            copy.bytes
        );
        c.tensor_problem(Format, copy.dst, msg);
    }
}

fn check_step(c: &mut Checker<'_>, s: usize, k: usize, step: &Step) {
    let name = format!("split {s} step {k}");
    match step {
        Step::Op { op, dst, srcs } => {
            let n = c.plan.tensors.len();
            for &t in std::iter::once(dst)
                .chain(srcs)
                .filter(|&&t| t as usize >= n)
            {
                c.problem(
                    Format,
                    name.clone(),
                    format!("{op} names t{t}, out of range"),
                );
            }
            if op.is_view() {
                let msg = format!("{op} is a view op: views run no kernel and are not steps");
                c.tensor_problem(Format, *dst, msg);
            }
            let arity = crate::rules::arity(op);
            if !arity.contains(&srcs.len()) {
                let msg = format!(
                    "{op} takes {}..={} sources, the step has {}",
                    arity.start(),
                    arity.end(),
                    srcs.len()
                );
                c.tensor_problem(Format, *dst, msg);
            }
        }
        Step::Fused { kernel } => {
            if *kernel as usize >= c.plan.kernels.len() {
                c.problem(Format, name, format!("kernel {kernel} is out of range"));
            }
        }
        Step::MulMatAdd { product, dst, srcs } => {
            let n = c.plan.n_graph_tensors;
            for &t in [product, dst].into_iter().chain(srcs) {
                if t as usize >= c.plan.tensors.len() {
                    c.problem(
                        Format,
                        name.clone(),
                        format!("mul_mat + add names t{t}, out of range"),
                    );
                }
            }
            // The product is a graph node the step computes, never one it
            // reads or writes.
            if *product >= n || product == dst || srcs.contains(product) {
                let msg = format!(
                    "mul_mat + add computes t{product} as its product, which must be a graph \
                     tensor other than its result and operands"
                );
                c.problem(Format, name, msg);
            }
        }
        Step::Attention { .. } => super::attention::check_format(c, name, step),
        Step::MulMatGlu { .. } => {
            if let Some(f) = super::product_glu::Fields::of(step) {
                super::product_glu::format(c, name, &f);
            }
        }
        Step::MulMatMany { dsts, srcs } => super::product_many::format(c, name, dsts, srcs),
        Step::RopeStore { .. } => super::rope_store::format(c, name, step),
    }
}

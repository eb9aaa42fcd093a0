//! Family 10, partial sums: no non-linear op reads one.
//!
//! A tensor that is a source of an `all_reduce_sum` or `reduce_scatter_sum`
//! participant, or that the
//! plan marks `SplitPart::Partial`, is a partial sum: one device's share of
//! a value that exists only once every part is added up. A linear step keeps
//! it partial (`cont` and `cpy` move values, `scale` without a bias scales
//! them, `add`/`sub` of two partial sums add shares, a routed part of
//! expert parallelism counting as one, `mul` of one partial sum by a whole
//! value scales it) when the plan marks its result partial too; anything else that read
//! it would compute on a share as if it were the value (a `silu` of a part is
//! not a part of the `silu`, and a bias added to every part is added once per
//! device). So no other step (no other op, no `all_gather`, no fused kernel)
//! reads bytes of a partial sum: not the tensor itself, not a view of it,
//! not the tensor whose bytes it views. Copies are refused as well:
//! participants read the parts in place where they are.
//!
//! And a partial sum that the plan hands out is added up: a graph output is
//! never a partial sum that no `all_reduce_sum` or `reduce_scatter_sum`
//! (directly, or through linear
//! steps) reads, since the caller would read one device's share as the value.
//! A partial sum nothing reads (a dead node of the graph) is harmless.
//!
//! Bytes are compared within their owner (the tensor with the arena
//! placement), never across owners: two tensors sharing arena bytes at
//! different times (lifetime reuse, family 4) do not make each other partial.

use super::ViolationKind::Collective;
use super::trace::Access;
use super::{Checker, span_of};
use crate::Op;
use crate::plan::{Placement, SplitPart, Step};
use std::collections::{BTreeMap, BTreeSet};

/// A partial sum's bytes inside its owner.
struct Part {
    /// The partial sum.
    tensor: u32,
    /// The all-reduce groups it is a part of.
    groups: Vec<u32>,
    /// Its bytes `[lo, hi)` inside the owner's.
    lo: u64,
    hi: u64,
}

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access]) {
    // The groups each partial sum is a part of.
    let mut groups: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for step in c.plan.splits.iter().flat_map(|s| &s.steps) {
        if let Step::Op {
            op: Op::AllReduceSum { group, .. } | Op::ReduceScatterSum { group, .. },
            srcs,
            ..
        } = step
        {
            for &s in srcs {
                groups.entry(s).or_default().insert(*group);
            }
        }
    }
    for (i, t) in c.plan.tensors.iter().enumerate() {
        if matches!(t.part, Some(SplitPart::Partial { .. })) {
            groups.entry(i as u32).or_default();
        }
    }
    let mut parts: BTreeMap<u32, Vec<Part>> = BTreeMap::new();
    for (tensor, groups) in groups {
        if let Some((owner, lo, hi)) = bytes_in_owner(c, tensor) {
            let groups = groups.into_iter().collect();
            let part = Part {
                tensor,
                groups,
                lo,
                hi,
            };
            parts.entry(owner).or_default().push(part);
        }
    }
    if parts.is_empty() {
        return;
    }
    // Partial sums some all-reduce or linear step adds up or carries on.
    let mut added_up: BTreeSet<u32> = BTreeSet::new();
    // In global order, so a linear step's result is known partial before
    // anything reads it.
    for a in accesses {
        if a.sums_parts {
            for &r in &a.reads {
                added_up.extend(parts_read(c, &parts, r).map(|p| p.tensor));
            }
            continue;
        }
        let mut read_parts: Vec<(u32, u32, Vec<u32>)> = Vec::new();
        let mut whole_reads = 0;
        for &r in &a.reads {
            // A read with no bytes of its own (a fused intermediate) counts
            // neither way.
            if bytes_in_owner(c, r).is_none() {
                continue;
            }
            match parts_read(c, &parts, r).next() {
                Some(p) => read_parts.push((p.tensor, r, p.groups.clone())),
                // A routed part (expert parallelism) is one device's share
                // too: added to a partial sum it stays one.
                None if super::routed::is_routed_part(c, r) => {}
                None => whole_reads += 1,
            }
        }
        if read_parts.is_empty() {
            continue;
        }
        // A linear step whose result the plan marks partial (so its readers
        // are held to this rule too).
        let marked_partial = a.writes.iter().all(|&w| {
            c.tensor(w)
                .is_some_and(|t| matches!(t.part, Some(SplitPart::Partial { .. })))
        });
        let linear = marked_partial
            && match a.op {
                Some(Op::Cont | Op::Cpy) => true,
                Some(Op::Scale { bias, .. }) => bias == 0.0,
                Some(Op::Add | Op::Sub) => whole_reads == 0,
                // One part times whole values (a token's routing weights)
                // scales the part: (sum of parts) * w is the sum of parts * w.
                Some(Op::Mul) => read_parts.len() == 1 && whole_reads == 1,
                _ => false,
            };
        if linear && !a.is_copy {
            added_up.extend(read_parts.iter().map(|&(tensor, _, _)| tensor));
            // Its result is a partial sum of the same groups.
            for &w in &a.writes {
                if let Some((owner, lo, hi)) = bytes_in_owner(c, w) {
                    let groups = read_parts[0].2.clone();
                    let part = Part {
                        tensor: w,
                        groups,
                        lo,
                        hi,
                    };
                    parts.entry(owner).or_default().push(part);
                }
            }
            continue;
        }
        let mut reported = BTreeSet::new();
        for (tensor, r, groups) in read_parts {
            if reported.insert(tensor) {
                // Refused below: not also reported as never added up.
                added_up.insert(tensor);
                let part = Part {
                    tensor,
                    groups,
                    lo: 0,
                    hi: 0,
                };
                refuse(c, a, &part, r);
            }
        }
    }
    let handed_out: BTreeSet<u32> = (parts.values().flatten())
        .map(|p| p.tensor)
        .filter(|&t| !added_up.contains(&t))
        .filter(|&t| c.tensor(t).is_some_and(|pt| pt.role == crate::Role::Output))
        .collect();
    for t in handed_out {
        c.tensor_problem(
            Collective,
            t,
            "is a graph output but a partial sum that no all_reduce_sum or reduce_scatter_sum \
             adds up: the caller would read one device's share as the value"
                .to_string(),
        );
    }
}

/// The partial sums whose bytes tensor `r` reads.
fn parts_read<'p>(
    c: &Checker<'_>,
    parts: &'p BTreeMap<u32, Vec<Part>>,
    r: u32,
) -> impl Iterator<Item = &'p Part> {
    let bytes = bytes_in_owner(c, r);
    bytes
        .and_then(|(owner, lo, hi)| parts.get(&owner).map(|owned| (owned, lo, hi)))
        .into_iter()
        .flat_map(move |(owned, lo, hi)| owned.iter().filter(move |p| p.lo < hi && lo < p.hi))
}

/// Reports that `a` reads partial sum `part` (through tensor `read`).
fn refuse(c: &mut Checker<'_>, a: &Access, part: &Part, read: u32) {
    let groups: Vec<String> = part.groups.iter().map(u32::to_string).collect();
    let of = match groups.as_slice() {
        [one] => format!("collective group {one}"),
        [rest @ .., last] => format!("collective groups {} and {last}", rest.join(", ")),
        [] => "a collective".to_string(),
    };
    let through = if read == part.tensor {
        String::new()
    } else {
        format!(" through {}", c.describe(read))
    };
    let msg = if a.is_copy {
        format!(
            "is a partial sum (part of {of}) but {} copies it{through}; parts are read in \
             place by the all-reduce, never copied",
            a.label
        )
    } else {
        format!(
            "is a partial sum (part of {of}) but {} reads it{through}; only the collective \
             adding it up (all_reduce_sum, reduce_scatter_sum) may read it",
            a.label
        )
    };
    c.tensor_problem(Collective, part.tensor, msg);
}

/// Tensor `t`'s bytes as `(owner, lo, hi)`: the tensor with the arena
/// placement and the range inside it. `None` for fused intermediates, broken
/// views, empty or overflowing spans and indices out of range.
fn bytes_in_owner(c: &Checker<'_>, t: u32) -> Option<(u32, u64, u64)> {
    let owner = c.owner(t)?;
    let tensor = c.tensor(t)?;
    let lo = match tensor.placement {
        Placement::View { offset, .. } if owner != t => offset,
        _ => 0,
    };
    let hi = lo.checked_add(span_of(tensor)?)?;
    (hi > lo).then_some((owner, lo, hi))
}

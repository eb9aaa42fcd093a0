//! Family 12, expert parallelism: the parts of one routed value tile the
//! experts.
//!
//! A `mul_mat_id_part { first, experts }` computes the slots routed to
//! experts `[first, first + src0.ne2)` of a set of `experts` and rows of
//! zeros for the others, so its parts add up to the whole `mul_mat_id` only
//! when, for one value, their ranges cover the set once. For every such step
//! whose result the plan marks (`SplitPart::Routed`, as the tensor split
//! does):
//! - the mark names the op's own range (`first`, and `count` = src0's
//!   experts);
//!
//! and over the marked results of each value `of`:
//! - every part agrees on `experts` and reads the same ids (the same bytes,
//!   copies of them, or the devices' mirrors of one value, as the plan
//!   marks them), so every device routes alike;
//! - sorted by `first`, the ranges cover `[0, experts)` with no gap and no
//!   overlap: each slot is computed by exactly one part.
//!
//! An unmarked part (a hand-written plan) claims no tiling and is checked by
//! the op's own rules only (family 2).
//!
//! And a routed part (a marked tensor, or a view of one) holds one device's
//! rows and zeros for the others', so only steps that keep that true or add
//! it up read it: element-wise ops mapping 0 to 0 (`scale` without a bias,
//! `sqr`, `sqrt`, `silu`, `gelu`, `gelu_erf`, `relu`, `tanh`, a `clamp`
//! around 0, a GLU, `mul`), `cont` and `cpy`, a `mul_mat_id_part` (its
//! activations), `add`/`sub` (family 10 proves they make a partial sum) and
//! collective participants. No other step, fused kernel or copy reads one.

use super::Checker;
use super::ViolationKind::Collective;
use super::trace::Access;
use crate::Op;
use crate::plan::{Placement, SplitPart, Step};
use std::collections::BTreeMap;

/// One marked part of a routed value.
struct Part {
    tensor: u32,
    first: i64,
    count: i64,
    experts: i64,
    /// Which ids it reads ([`ids_key`]).
    ids: Option<IdsKey>,
}

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access]) {
    check_tiling(c);
    check_readers(c, accesses);
}

/// The second rule of the module doc: who may read a routed part.
fn check_readers(c: &mut Checker<'_>, accesses: &[Access]) {
    for a in accesses {
        if a.reads_peers || a.sums_parts {
            continue;
        }
        let keeps = !a.is_copy
            && match a.op {
                Some(Op::Scale { bias, .. }) => bias == 0.0,
                Some(Op::Clamp { min, max }) => min <= 0.0 && 0.0 <= max,
                Some(
                    Op::Sqr
                    | Op::Sqrt
                    | Op::Silu
                    | Op::Gelu
                    | Op::GeluErf
                    | Op::Relu
                    | Op::Tanh
                    | Op::Glu { .. }
                    | Op::Mul
                    | Op::Cont
                    | Op::Cpy
                    | Op::MulMatIdPart { .. }
                    | Op::Add
                    | Op::Sub,
                ) => true,
                _ => false,
            };
        if keeps {
            continue;
        }
        let read: Vec<u32> = a
            .reads
            .iter()
            .copied()
            .filter(|&r| is_routed_part(c, r))
            .collect();
        for r in read {
            let msg = format!(
                "is a routed part of expert parallelism (its device's rows, zeros for the \
                 others') but {} reads it: only element-wise ops that map 0 to 0, packing, \
                 mul_mat_id_part, add/sub into a partial sum and collectives may",
                a.label
            );
            c.tensor_problem(Collective, r, msg);
        }
    }
}

/// Whether `t` (or the tensor whose bytes it views) is marked a routed part.
pub(super) fn is_routed_part(c: &Checker<'_>, t: u32) -> bool {
    let is = |t: u32| {
        c.tensor(t)
            .is_some_and(|t| matches!(t.part, Some(SplitPart::Routed { .. })))
    };
    is(t) || c.owner(t).is_some_and(is)
}

/// The first rule of the module doc: the parts of one value tile the experts.
fn check_tiling(c: &mut Checker<'_>) {
    let mut by_value: BTreeMap<String, Vec<Part>> = BTreeMap::new();
    for step in c.plan.splits.iter().flat_map(|s| &s.steps) {
        let Step::Op {
            op: Op::MulMatIdPart { first, experts },
            dst,
            srcs,
        } = step
        else {
            continue;
        };
        let Some(Some(SplitPart::Routed {
            of,
            first: f,
            count,
        })) = c.tensor(*dst).map(|t| t.part.clone())
        else {
            continue;
        };
        let held = srcs.first().and_then(|&a| c.tensor(a)).map(|a| a.ne[2]);
        if f != *first || held != Some(count) {
            let held = held.map_or("?".to_string(), |h| h.to_string());
            c.tensor_problem(
                Collective,
                *dst,
                format!(
                    "is marked as experts [{f}, {}) of '{of}', but the mul_mat_id_part writing \
                     it computes experts [{first}, {first} + {held})",
                    f.saturating_add(count)
                ),
            );
            continue;
        }
        let ids = srcs.get(2).and_then(|&i| ids_key(c, i));
        by_value.entry(of).or_default().push(Part {
            tensor: *dst,
            first: *first,
            count,
            experts: *experts,
            ids,
        });
    }
    for (of, mut parts) in by_value {
        parts.sort_by_key(|p| (p.first, p.tensor));
        let (experts, ids) = (parts[0].experts, parts[0].ids.clone());
        let mut next = 0i64;
        for p in &parts {
            let why = if p.experts != experts {
                Some(format!(
                    "its set has {} experts, another part's of '{of}' {experts}",
                    p.experts
                ))
            } else if p.ids != ids || ids.is_none() {
                Some(format!(
                    "it routes by other ids than the other parts of '{of}': every device \
                     must route alike"
                ))
            } else if p.first < next {
                Some(format!(
                    "its experts [{}, {}) overlap another part's of '{of}': those slots \
                     would be added twice",
                    p.first,
                    p.first.saturating_add(p.count)
                ))
            } else if p.first > next {
                Some(format!(
                    "no part of '{of}' holds experts [{next}, {}): those slots would be \
                     left out",
                    p.first
                ))
            } else {
                None
            };
            if let Some(why) = why {
                c.tensor_problem(Collective, p.tensor, why);
                return;
            }
            next = p.first.saturating_add(p.count);
        }
        if next != experts {
            let last = parts.last().map_or(0, |p| p.tensor);
            c.tensor_problem(
                Collective,
                last,
                format!("no part of '{of}' holds experts [{next}, {experts}): those slots would be left out"),
            );
        }
    }
}

/// Which ids a part reads: the bytes' owner (copies followed back to the
/// tensor they copy) or, for a tensor the plan marks as one device's mirror
/// of a value (ids routed on every device alike, each computing its own),
/// that value; and the offset inside the owner.
#[derive(Clone, Debug, PartialEq, Eq)]
enum IdsKey {
    Tensor(u32, u64),
    Mirror(String, u64),
}

fn ids_key(c: &Checker<'_>, ids: u32) -> Option<IdsKey> {
    let offset = match c.tensor(ids)?.placement {
        Placement::View { offset, .. } => offset,
        _ => 0,
    };
    let mut t = c.owner(ids)?;
    for _ in 0..=c.plan.tensors.len() {
        let tensor = c.tensor(t)?;
        match (&tensor.copy_of, &tensor.part) {
            (Some(src), _) => t = c.owner(*src)?,
            (None, Some(SplitPart::Mirror { of })) => {
                return Some(IdsKey::Mirror(of.clone(), offset));
            }
            (None, _) => return Some(IdsKey::Tensor(t, offset)),
        }
    }
    None
}

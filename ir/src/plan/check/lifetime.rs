//! Family 4, lifetimes: tensors of one arena alive at a common step never
//! share bytes, except for in-place reuse.
//!
//! A tensor with arena bytes lives from the first global step touching it (its
//! write) to the last (reads and writes through its views count for it);
//! leafs live over the whole run and Output tensors (or owners of Output
//! views) to its end. In-place reuse: the step writing `b` reads `a` (directly
//! or through a view), `a` dies at that step and is neither a leaf nor kept to
//! the end, and both have the same offset and span.

use super::ViolationKind::Lifetime;
use super::trace::Access;
use super::{Checker, is_leaf_role, span_of};
use crate::Role;
use crate::plan::Placement;

/// One tensor with bytes in an arena, alive over `first..=last`.
#[derive(Clone, Copy)]
struct Entry {
    tensor: u32,
    arena: u32,
    offset: u64,
    end: u64,
    first: usize,
    last: usize,
    /// Kept alive to the end of the run (leaf or output): never reused in place.
    kept: bool,
}

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access]) {
    let n = c.plan.tensors.len();
    let end = accesses.len().saturating_sub(1);
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut kept = vec![false; n];
    let touch = |life: &mut Vec<Option<(usize, usize)>>, owner: Option<u32>, g: usize| {
        if let Some(slot) = owner.and_then(|o| life.get_mut(o as usize)) {
            *slot = Some(slot.map_or((g, g), |(f, l)| (f.min(g), l.max(g))));
        }
    };
    for (g, a) in accesses.iter().enumerate() {
        for &t in a.reads.iter().chain(&a.writes) {
            touch(&mut life, c.owner(t), g);
        }
    }
    for (i, t) in c.plan.tensors.iter().enumerate() {
        let id = i as u32;
        let leaf = id < c.plan.n_graph_tensors && is_leaf_role(t.role);
        let Some(owner) = c.owner(id) else { continue };
        let (Some(slot), Some(keep)) = (life.get_mut(owner as usize), kept.get_mut(owner as usize))
        else {
            continue;
        };
        if leaf && owner == id {
            *slot = Some((0, end));
            *keep = true;
        } else if t.role == Role::Output || leaf {
            if let Some((first, _)) = *slot {
                *slot = Some((first, end));
            }
            *keep = true;
        }
    }
    let mut entries = Vec::new();
    for (i, t) in c.plan.tensors.iter().enumerate() {
        let Placement::Arena { arena, offset } = t.placement else {
            continue;
        };
        let (Some(Some((first, last))), Some(span)) = (life.get(i).copied(), span_of(t)) else {
            continue;
        };
        let Some(end) = offset.checked_add(span).filter(|_| span > 0) else {
            continue;
        };
        let kept = kept.get(i).copied().unwrap_or(false);
        let tensor = i as u32;
        entries.push(Entry {
            tensor,
            arena,
            offset,
            end,
            first,
            last,
            kept,
        });
    }
    entries.sort_by_key(|e| (e.arena, e.tensor));
    let mut conflicts = Vec::new();
    for arena in entries.chunk_by(|a, b| a.arena == b.arena) {
        conflicts.extend(overlapping_pairs(arena));
    }
    conflicts.sort_by_key(|&(a, b)| (a.arena, a.tensor.min(b.tensor), a.tensor.max(b.tensor)));
    for (a, b) in conflicts {
        if !in_place(c, accesses, &a, &b) && !in_place(c, accesses, &b, &a) {
            report(c, accesses, &a, &b);
        }
    }
}

/// One dimension of an entry, as a half-open range.
type Dim = fn(&Entry) -> (u64, u64);

/// Bytes as a half-open range.
fn bytes(e: &Entry) -> (u64, u64) {
    (e.offset, e.end)
}

/// Steps alive as a half-open range.
fn steps(e: &Entry) -> (u64, u64) {
    (e.first as u64, (e.last as u64).saturating_add(1))
}

/// Every pair of `entries` (one arena) overlapping in both bytes and steps.
///
/// A sweep along one dimension visits every pair overlapping in it, so the
/// sweep runs along the dimension with fewer such pairs (counted first in
/// O(n log n)): bytes for resident arenas, whose tensors are all alive
/// together, and steps for compute arenas, whose tensors share bytes over time.
fn overlapping_pairs(entries: &[Entry]) -> Vec<(Entry, Entry)> {
    let (along, across): (Dim, Dim) = if count_pairs(entries, bytes) <= count_pairs(entries, steps)
    {
        (bytes, steps)
    } else {
        (steps, bytes)
    };
    let mut sorted = entries.to_vec();
    sorted.sort_by_key(|e| (along(e).0, e.tensor));
    let mut active: Vec<Entry> = Vec::new();
    let mut out = Vec::new();
    for e in sorted {
        let (start, _) = along(&e);
        active.retain(|a| along(a).1 > start);
        let (lo, hi) = across(&e);
        for a in &active {
            let (alo, ahi) = across(a);
            if alo < hi && lo < ahi {
                out.push((*a, e));
            }
        }
        active.push(e);
    }
    out
}

/// How many pairs of entries overlap along `dim` (half-open, non-empty ranges).
fn count_pairs(entries: &[Entry], dim: Dim) -> u64 {
    let mut starts: Vec<u64> = entries.iter().map(|e| dim(e).0).collect();
    let mut ends: Vec<u64> = entries.iter().map(|e| dim(e).1).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    // Each range overlaps the ranges starting before it that have not ended.
    let mut pairs = 0u64;
    for (i, &s) in starts.iter().enumerate() {
        let ended = ends.partition_point(|&e| e <= s);
        pairs = pairs.saturating_add((i as u64).saturating_sub(ended as u64));
    }
    pairs
}

/// True when `b` takes over `a`'s bytes in place at the step writing `b`.
fn in_place(c: &Checker<'_>, accesses: &[Access], a: &Entry, b: &Entry) -> bool {
    if a.kept || a.offset != b.offset || a.end != b.end || a.last != b.first {
        return false;
    }
    accesses.get(b.first).is_some_and(|step| {
        !step.is_copy
            && step.writes.contains(&b.tensor)
            && step.reads.iter().any(|&r| c.owner(r) == Some(a.tensor))
    })
}

fn report(c: &mut Checker<'_>, accesses: &[Access], a: &Entry, b: &Entry) {
    // Blame the tensor whose life starts later: its write clobbers the other.
    let (early, late) = if (b.first, b.tensor) >= (a.first, a.tensor) {
        (a, b)
    } else {
        (b, a)
    };
    let at = accesses
        .get(late.first)
        .map_or_else(|| format!("step {}", late.first), |s| s.label.clone());
    let msg = format!(
        "bytes [{}, {}) of arena {} overlap bytes [{}, {}) of {}, and both are alive at {} \
         (global steps {}..={} and {}..={})",
        late.offset,
        late.end,
        late.arena,
        early.offset,
        early.end,
        c.describe(early.tensor),
        at,
        late.first,
        late.last,
        early.first,
        early.last
    );
    c.tensor_problem(Lifetime, late.tensor, msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep finds exactly the pairs a brute-force comparison finds, along
    /// either dimension.
    #[test]
    fn sweep_matches_brute_force() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200 {
            let n = 1 + next(40) as u32;
            let entries: Vec<Entry> = (0..n)
                .map(|tensor| {
                    let (offset, first) = (next(64) * 8, next(30) as usize);
                    // Alternate between mostly-disjoint bytes and mostly-disjoint steps.
                    let (span, life) = if round % 2 == 0 {
                        (8, next(30))
                    } else {
                        (64, 1)
                    };
                    Entry {
                        tensor,
                        arena: 0,
                        offset,
                        end: offset + span * (1 + next(4)),
                        first,
                        last: first + life as usize,
                        kept: false,
                    }
                })
                .collect();
            let key = |a: &Entry, b: &Entry| (a.tensor.min(b.tensor), a.tensor.max(b.tensor));
            let mut found: Vec<_> = overlapping_pairs(&entries)
                .iter()
                .map(|(a, b)| key(a, b))
                .collect();
            found.sort_unstable();
            let mut want = Vec::new();
            for (i, a) in entries.iter().enumerate() {
                for b in &entries[i + 1..] {
                    let both = a.offset < b.end
                        && b.offset < a.end
                        && a.first <= b.last
                        && b.first <= a.last;
                    if both {
                        want.push(key(a, b));
                    }
                }
            }
            want.sort_unstable();
            assert_eq!(found, want, "round {round}");
        }
    }
}

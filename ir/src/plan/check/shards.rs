//! Family 11, weight shards: the shards of each stored tensor tile it exactly.
//!
//! A plan tensor with a `shard` is bound at load time to one slice of the
//! stored tensor `shard.of` (see [`crate::WeightShard`]). For every shard:
//! - it is a graph tensor (not a copy) whose role is Weight;
//! - it passes [`crate::WeightShard::problem`]: a valid axis, a slice inside
//!   the source, every other extent the source's, whole blocks along axis 0.
//!
//! For every source, over its shards that pass those checks:
//! - all agree on the source's extents (`full_ne`), the dtype and the axis;
//! - sorted by `start`, their slices `[start, start + ne[axis])` cover
//!   `[0, full_ne[axis])` with no gap and no overlap (every value of the
//!   source is loaded, on exactly one device).
//!
//! A shard the size of its source is a *mirror* (a small weight read whole on
//! several devices, loaded once on each): it passes the checks above and is
//! left out of the tiling. A plain weight named like the source may exist beside its shards (tied
//! embeddings read whole by `get_rows`, say): it is not a shard and is not
//! counted. Shards with extents below 1 are skipped here (family 1 reports
//! them).

use super::Checker;
use super::ViolationKind::Shard;
use crate::Role;
use std::collections::BTreeMap;

pub(super) fn check(c: &mut Checker<'_>) {
    let plan = c.plan;
    let mut by_source: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (i, t) in plan.tensors.iter().enumerate() {
        let Some(shard) = &t.shard else { continue };
        let id = i as u32;
        let why = if id >= plan.n_graph_tensors {
            Some(format!(
                "it is not a graph tensor (t{id} >= n_graph_tensors {}): only graph \
                 weights are shards",
                plan.n_graph_tensors
            ))
        } else if t.role != Role::Weight {
            Some(format!("its role is {}: only weights are shards", t.role))
        } else {
            shard.problem(t.dtype, t.ne)
        };
        match why {
            Some(why) => {
                let msg = format!("is a shard of '{}', but {why}", shard.of);
                c.tensor_problem(Shard, id, msg);
            }
            // A shard as large as its source is a mirror: a whole copy of a
            // small weight on another device, outside any tiling.
            None if t.ne == shard.full_ne => {}
            None if t.ne.iter().all(|&n| n >= 1) => {
                by_source.entry(&shard.of).or_default().push(id);
            }
            None => {} // family 1
        }
    }
    for (of, shards) in by_source {
        if agree(c, of, &shards) {
            tile(c, of, &shards);
        }
    }
}

/// True when every shard of `of` agrees with the first on the source's
/// extents, the dtype and the axis; reports each that does not.
fn agree(c: &mut Checker<'_>, of: &str, shards: &[u32]) -> bool {
    let plan = c.plan;
    let shard_of = |i: u32| {
        let t = plan.tensors.get(i as usize)?;
        Some((t, t.shard.as_ref()?))
    };
    let Some((&first, rest)) = shards.split_first() else {
        return true;
    };
    let Some((t0, s0)) = shard_of(first) else {
        return false;
    };
    let mut ok = true;
    for &i in rest {
        let Some((t, s)) = shard_of(i) else { continue };
        let (here, there) = (c.describe(i), c.describe(first));
        let disagreement = if s.full_ne != s0.full_ne {
            Some(format!(
                "{here} says '{of}' is {:?}, but {there} says {:?}",
                s.full_ne, s0.full_ne
            ))
        } else if t.dtype != t0.dtype {
            Some(format!(
                "{here} is {}, but {there} is {}",
                t.dtype, t0.dtype
            ))
        } else if s.axis != s0.axis {
            Some(format!(
                "{here} cuts '{of}' along axis {}, but {there} along axis {}",
                s.axis, s0.axis
            ))
        } else {
            None
        };
        if let Some(d) = disagreement {
            let msg = format!("shards of '{of}' disagree: {d}");
            c.problem(Shard, format!("source '{of}'"), msg);
            ok = false;
        }
    }
    ok
}

/// Reports every gap and overlap of the shards' slices of `of` (which agree
/// and passed [`crate::WeightShard::problem`], so no end overflows).
fn tile(c: &mut Checker<'_>, of: &str, shards: &[u32]) {
    let plan = c.plan;
    let mut slices: Vec<(i64, i64, u32)> = Vec::with_capacity(shards.len());
    let mut geometry = None;
    for &i in shards {
        let Some(t) = plan.tensors.get(i as usize) else {
            continue;
        };
        let Some(s) = &t.shard else { continue };
        let Some(&n) = t.ne.get(s.axis as usize) else {
            continue;
        };
        let Some(&full) = s.full_ne.get(s.axis as usize) else {
            continue;
        };
        let Some(end) = s.start.checked_add(n) else {
            continue;
        };
        slices.push((s.start, end, i));
        geometry = Some((s.axis, full));
    }
    let Some((axis, full)) = geometry else { return };
    slices.sort_unstable();
    let name = format!("source '{of}'");
    // `covered`: [0, covered) is covered so far, its end reached by `reach`.
    let (mut covered, mut reach) = (0i64, None::<u32>);
    for &(start, end, i) in &slices {
        if start > covered {
            let msg =
                format!("shards of '{of}' along axis {axis} leave [{covered}, {start}) uncovered");
            c.problem(Shard, name.clone(), msg);
        } else if start < covered
            && let Some(prev) = reach
        {
            let msg = format!(
                "shards of '{of}' along axis {axis} overlap on [{start}, {}) ({} and {})",
                end.min(covered),
                c.describe(prev),
                c.describe(i)
            );
            c.problem(Shard, name.clone(), msg);
        }
        if end > covered {
            (covered, reach) = (end, Some(i));
        }
    }
    if covered < full {
        let msg = format!("shards of '{of}' along axis {axis} leave [{covered}, {full}) uncovered");
        c.problem(Shard, name, msg);
    }
}

//! `--collectives auto`: the cheapest plan by the cost model's estimate
//! (`estimate.rs`). Partial sums are completed by all-reduces or by
//! reduce-scatters, whichever plan finishes sooner; with `--split-mode row`
//! each part of the model (attention without a KV cache, FFN, token tables,
//! output head: [`rules::row_groups`]) is then kept whole when the plan is
//! estimated at least [`KEEP_WHOLE_GAIN`] sooner that way, one part at a
//! time, then all remaining parts at once. A part kept whole says so in its
//! leafs' reasons.
//!
//! **Invariants:** the same graph, target and leaf splits give the same
//! choice (the estimate is a pure function; parts are tried in a fixed
//! order); a part holding a KV cache is never kept whole (every plan of a
//! generation shares the cache's layout, whatever its token count).

use super::estimate;
use super::rewrite;
use super::rules::{self, LeafSplit};
use super::{KEEP_WHOLE_GAIN, Sharded};
use crate::Error;
use crate::target::Target;
use ir::{Graph, TensorId};
use std::collections::BTreeMap;

/// The cheapest rewrite of `graph` with `leafs` split by `shares`; `rows_mode`
/// (`--split-mode row`): parts of the model may also be kept whole.
pub(super) fn cheapest(
    graph: &Graph,
    target: &Target,
    mut leafs: BTreeMap<TensorId, LeafSplit>,
    shares: &[f64],
    rows_mode: bool,
) -> Result<Sharded, Error> {
    let rewrite =
        |leafs: &BTreeMap<_, _>, scatter| rewrite::rewrite(graph, target, leafs, shares, scatter);
    let time = |s: &Sharded| estimate::makespan_us(&s.graph, &s.assignment.device, target);
    // The sooner of the two ways to complete partial sums.
    let best = |leafs: &BTreeMap<_, _>| -> Result<(Sharded, f64), Error> {
        let reduced = rewrite(leafs, false)?;
        let scattered = rewrite(leafs, true)?;
        let (r, s) = (time(&reduced), time(&scattered));
        Ok(if s < r { (scattered, s) } else { (reduced, r) })
    };
    let (mut chosen, mut us) = best(&leafs)?;
    if !rows_mode {
        return Ok(chosen);
    }
    // Candidates: the parts of the model without a KV cache.
    let candidates: Vec<_> = rules::row_groups(graph, &leafs)
        .into_iter()
        .filter(|(_, members)| {
            members
                .iter()
                .all(|&id| graph.tensor(id).role == ir::Role::Weight)
        })
        .collect();
    let without = |leafs: &BTreeMap<TensorId, LeafSplit>, members: &[TensorId]| {
        let mut fewer = leafs.clone();
        members.iter().for_each(|id| {
            fewer.remove(id);
        });
        fewer
    };
    let mut kept_whole = Vec::new();
    // One part at a time, then all of them at once (over slow links
    // keeping one part whole still pays for copying its results).
    for (part, members) in &candidates {
        let fewer = without(&leafs, members);
        let (whole, whole_us) = best(&fewer)?;
        if whole_us < us * (1.0 - KEEP_WHOLE_GAIN) {
            kept_whole.push((part.to_string(), members.clone(), us, whole_us));
            (chosen, us, leafs) = (whole, whole_us, fewer);
        }
    }
    let rest: Vec<_> = candidates
        .iter()
        .filter(|(_, m)| m.iter().all(|id| leafs.contains_key(id)))
        .collect();
    if rest.len() > 1 {
        let all: Vec<TensorId> = rest.iter().flat_map(|(_, m)| m.clone()).collect();
        let (whole, whole_us) = best(&without(&leafs, &all))?;
        if whole_us < us * (1.0 - KEEP_WHOLE_GAIN) {
            let names: Vec<&str> = rest.iter().map(|(p, _)| *p).collect();
            let parts = format!(
                "{} and {}",
                names[..names.len() - 1].join(", "),
                names[names.len() - 1]
            );
            kept_whole.push((parts, all, us, whole_us));
            chosen = whole;
        }
    }
    for (part, members, split_us, whole_us) in kept_whole {
        let why = format!(
            "kept whole by the cost model: the plan with the {part} split was \
             estimated at {split_us:.1} us, whole at {whole_us:.1} us"
        );
        for id in members {
            let name = &graph.tensor(id).name;
            if let Some(t) = chosen.graph.find(name) {
                chosen.assignment.reason[t.index()] = why.clone();
            }
        }
    }
    Ok(chosen)
}

/// `--experts auto`: of the plan with the experts cut by rows and the one
/// with whole experts per device, the one the cost model finishes sooner
/// (rows on a tie); the expert tensors' reasons give both estimates.
pub(super) fn experts(
    graph: &Graph,
    target: &Target,
    rows: Sharded,
    whole: Sharded,
) -> Result<Sharded, Error> {
    let time = |s: &Sharded| estimate::makespan_us(&s.graph, &s.assignment.device, target);
    let (rows_us, whole_us) = (time(&rows), time(&whole));
    let (mut chosen, how) = if whole_us < rows_us {
        (whole, "whole experts per device")
    } else {
        (rows, "every expert cut by rows")
    };
    let why = format!(
        "{how}, by the cost model: the plan with whole experts per device was estimated \
         at {whole_us:.1} us, with every expert cut by rows at {rows_us:.1} us"
    );
    for t in graph.ids().map(|id| graph.tensor(id)) {
        if t.role != ir::Role::Weight || !rules::is_stacked_experts(&t.name) {
            continue;
        }
        // The shards of a split weight are NAME#d; a whole one keeps NAME.
        for (id, new) in chosen.graph.ids().map(|id| (id, chosen.graph.tensor(id))) {
            let of = new
                .name
                .split_once('#')
                .map_or(new.name.as_str(), |(n, _)| n);
            if of == t.name {
                let r = &mut chosen.assignment.reason[id.index()];
                *r = format!("{r}; {why}");
            }
        }
    }
    Ok(chosen)
}

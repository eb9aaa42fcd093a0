//! Greedy by breadth (Pisarchyk & Lee 2020): visit steps from the one with the
//! most live bytes down; at each, place its not yet placed buffers, largest
//! first, each in the smallest gap that fits. The fullest steps are packed
//! while the arena is still empty.

use super::gaps::{Fit, place_in_order};
use crate::liveness::Lifetime;
use std::cmp::Reverse;

/// Offsets by breadth order, best fit.
pub(super) fn place(buffers: &[Lifetime]) -> Vec<u64> {
    // The live set only grows at a buffer's first step, so those steps are
    // the only ones whose live bytes can be a local maximum.
    let mut steps: Vec<usize> = buffers.iter().map(|b| b.first).collect();
    steps.sort_unstable();
    steps.dedup();
    let live_at = |s: usize| {
        buffers
            .iter()
            .enumerate()
            .filter(move |(_, b)| b.first <= s && s <= b.last)
    };
    let mut by_breadth: Vec<(u64, usize)> = steps
        .iter()
        .map(|&s| {
            (
                live_at(s).fold(0u64, |acc, (_, b)| acc.saturating_add(b.size)),
                s,
            )
        })
        .collect();
    by_breadth.sort_by_key(|&(bytes, s)| (Reverse(bytes), s));

    let mut queued = vec![false; buffers.len()];
    let mut order = Vec::with_capacity(buffers.len());
    for (_, s) in by_breadth {
        let mut here: Vec<usize> = live_at(s).map(|(i, _)| i).filter(|&i| !queued[i]).collect();
        here.sort_by_key(|&i| (Reverse(buffers[i].size), i));
        for i in here {
            queued[i] = true;
            order.push(i);
        }
    }
    place_in_order(buffers, &order, Fit::Best)
}

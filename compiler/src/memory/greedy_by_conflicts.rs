//! Greedy by conflicts: the buffer that meets the most bytes of other buffers
//! in time goes first (it has the fewest places to go), each in the smallest
//! gap that fits.

use super::gaps::{Fit, place_in_order};
use crate::liveness::Lifetime;
use std::cmp::Reverse;

/// Offsets by (bytes of buffers alive with it desc, size desc, index), best fit.
pub(super) fn place(buffers: &[Lifetime]) -> Vec<u64> {
    let conflict_bytes: Vec<u64> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            buffers
                .iter()
                .enumerate()
                .filter(|&(j, o)| j != i && o.overlaps_in_time(b))
                .fold(0u64, |acc, (_, o)| acc.saturating_add(o.size))
        })
        .collect();
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (Reverse(conflict_bytes[i]), Reverse(buffers[i].size), i));
    place_in_order(buffers, &order, Fit::Best)
}

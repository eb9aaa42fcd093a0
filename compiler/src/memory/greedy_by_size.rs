//! Greedy by size (the TFLite / Pisarchyk & Lee 2020 offset calculation):
//! largest buffer first, each at the lowest offset free of every placed buffer
//! alive at a common step.

use super::gaps::{Fit, place_in_order};
use crate::liveness::Lifetime;

/// Offsets by size order (size desc, then first step, then index), lowest fit.
pub(super) fn place(buffers: &[Lifetime]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].first, i));
    place_in_order(buffers, &order, Fit::Lowest)
}

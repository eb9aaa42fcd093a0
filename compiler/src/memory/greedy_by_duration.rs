//! Greedy by duration: longest-lived buffer first (they constrain the most
//! steps), larger first among equals, each in the smallest gap that fits.

use super::gaps::{Fit, place_in_order};
use crate::liveness::Lifetime;

/// Offsets by (lifetime length desc, size desc, index), best fit.
pub(super) fn place(buffers: &[Lifetime]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| {
        let b = &buffers[i];
        (
            std::cmp::Reverse(b.last - b.first),
            std::cmp::Reverse(b.size),
            i,
        )
    });
    place_in_order(buffers, &order, Fit::Best)
}

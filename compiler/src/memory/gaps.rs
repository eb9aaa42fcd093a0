//! Offset search shared by the greedy algorithms: place buffers one at a time,
//! each in a gap between the already placed buffers it meets in time.

use crate::liveness::Lifetime;

/// Which gap a buffer goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fit {
    /// The lowest offset where it fits.
    Lowest,
    /// The smallest gap where it fits (lowest offset among equal gaps); the top
    /// of the conflicting buffers when no gap fits.
    Best,
}

/// Offsets for `buffers` placed in the order `order` (every index once): each
/// buffer goes where it overlaps no placed buffer alive at a common step.
/// Offsets are 0 or another buffer's end, so they stay aligned.
pub(super) fn place_in_order(buffers: &[Lifetime], order: &[usize], fit: Fit) -> Vec<u64> {
    let mut offsets = vec![0u64; buffers.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        let b = &buffers[i];
        busy.clear();
        busy.extend(
            placed
                .iter()
                .filter(|&&j| buffers[j].size > 0 && buffers[j].overlaps_in_time(b))
                .map(|&j| (offsets[j], offsets[j] + buffers[j].size)),
        );
        busy.sort_unstable();
        offsets[i] = find_offset(&busy, b.size, fit);
        placed.push(i);
    }
    offsets
}

/// An offset for `size` bytes among the busy ranges `busy` (sorted by start).
fn find_offset(busy: &[(u64, u64)], size: u64, fit: Fit) -> u64 {
    let mut end = 0u64;
    let mut best: Option<(u64, u64)> = None;
    for &(start, stop) in busy {
        if start >= end && start - end >= size {
            let gap = start - end;
            match fit {
                Fit::Lowest => return end,
                Fit::Best => {
                    if best.is_none_or(|(g, _)| gap < g) {
                        best = Some((gap, end));
                    }
                }
            }
        }
        end = end.max(stop);
    }
    best.map_or(end, |(_, offset)| offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_and_best_gaps_differ() {
        // Gaps: [0, 10) of 10 bytes, [20, 24) of 4, then the top at 30.
        let busy = [(10, 20), (24, 30)];
        assert_eq!(find_offset(&busy, 4, Fit::Lowest), 0);
        assert_eq!(find_offset(&busy, 4, Fit::Best), 20);
        assert_eq!(find_offset(&busy, 11, Fit::Best), 30);
        assert_eq!(find_offset(&[], 7, Fit::Lowest), 0);
    }
}

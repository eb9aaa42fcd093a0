//! The (slot, token) pairs of one run grouped by expert, and how the threads
//! share the experts' rows.
//!
//! Invariants: [`Groups::sort`] is a stable counting sort (an expert's pairs
//! in pair order; the pairs of no expert here, a `mul_mat_id_part`'s other
//! parts', last as the rest), so every thread that sorts the same ids gets
//! the same groups; [`for_share`] gives each (used expert, row) to exactly one thread,
//! as a function of the groups, `ith` and `nth` only.

use std::ops::Range;

/// Rows of a unit of work: ranges start at multiples of it, so the tiles
/// (4 rows) stay whole inside a range.
pub const ALIGN: usize = 16;

/// The cost of streaming one weight row from memory, in dot products of a
/// row with one column: an estimate (a Q4_K row of 2048, 1152 bytes, at
/// ~20-25 GB/s per core against ~3 ns per super-block and column in the
/// K-quant tiles, `matmul::kquant`'s doc). It only weighs experts of few
/// columns against heavy ones when shares are cut.
pub const ROW_COST: u64 = 2;

/// Pairs `p = slot + n_used * token` sorted by expert.
#[derive(Default)]
pub struct Groups {
    /// The expert of each pair.
    expert: Vec<u32>,
    /// Expert `e`'s pairs are `order[start[e]..start[e + 1]]`; the rest
    /// (no expert here) `order[start[n_expert]..]`.
    start: Vec<u32>,
    /// The pairs in expert order.
    order: Vec<u32>,
    /// The next free place of each expert while sorting.
    next: Vec<u32>,
}

impl Groups {
    /// Sorts pairs `0..n_pairs` (fewer than 2^32) by `expert_of(p)`, which
    /// is below `n_expert`, or `None`: the pair goes to the rest.
    pub fn sort(
        &mut self,
        n_expert: usize,
        n_pairs: usize,
        mut expert_of: impl FnMut(usize) -> Option<usize>,
    ) {
        self.expert.clear();
        self.expert.extend(
            (0..n_pairs).map(|p| expert_of(p).map_or(n_expert, |e| e.min(n_expert)) as u32),
        );
        // Bucket n_expert is the rest.
        self.start.clear();
        self.start.resize(n_expert + 2, 0);
        for &e in &self.expert {
            self.start[e as usize + 1] += 1;
        }
        for e in 0..=n_expert {
            self.start[e + 1] += self.start[e];
        }
        self.next.clear();
        self.next.extend_from_slice(&self.start[..=n_expert]);
        self.order.resize(n_pairs, 0);
        for (p, &e) in self.expert.iter().enumerate() {
            let at = &mut self.next[e as usize];
            self.order[*at as usize] = p as u32;
            *at += 1;
        }
    }

    /// Experts (as sorted).
    pub fn n_expert(&self) -> usize {
        self.start.len().saturating_sub(2)
    }

    /// Pairs of some expert here: the expert order's first `placed()`.
    pub fn placed(&self) -> usize {
        self.start.get(self.n_expert()).map_or(0, |&s| s as usize)
    }

    /// The pairs of no expert here, in pair order.
    pub fn rest(&self) -> &[u32] {
        &self.order[self.placed()..]
    }

    /// Expert `e`'s pairs, in pair order.
    pub fn pairs(&self, e: usize) -> &[u32] {
        &self.order[self.start[e] as usize..self.start[e + 1] as usize]
    }

    /// Where expert `e`'s pairs start in the expert order.
    pub fn first(&self, e: usize) -> usize {
        self.start[e] as usize
    }

    /// The pair at place `at` of the expert order.
    pub fn pair_at(&self, at: usize) -> u32 {
        self.order[at]
    }
}

/// Calls `f(e, rows)` for thread `ith`'s share of `nth`: the used experts'
/// rows (`n` each) in units of [`ALIGN`] rows, each costing `rows * (c +
/// ROW_COST)` for an expert of `c` pairs; a unit goes to the thread whose
/// equal part of the total cost holds the unit's middle. So shares are
/// contiguous in (expert, row) order, balanced to within a unit, and an
/// expert with most of the pairs is cut between threads. Consecutive units
/// of one expert come as one range.
pub fn for_share(
    groups: &Groups,
    n: usize,
    ith: usize,
    nth: usize,
    mut f: impl FnMut(usize, Range<usize>),
) {
    let weight = |e: usize| match groups.pairs(e).len() as u64 {
        0 => 0,
        c => c + ROW_COST,
    };
    let total: u64 = (0..groups.n_expert()).map(|e| n as u64 * weight(e)).sum();
    if total == 0 {
        return;
    }
    // The thread owning a unit that starts at cost `at` and costs `len`.
    let owner = |at: u64, len: u64| {
        let mid2 = u128::from(2 * at + len);
        ((mid2 * nth as u128 / (2 * u128::from(total))) as usize).min(nth - 1)
    };
    let mut before = 0u64;
    for e in 0..groups.n_expert() {
        let w = weight(e);
        if w == 0 {
            continue;
        }
        let unit = |u: usize| {
            let rows = u * ALIGN..((u + 1) * ALIGN).min(n);
            let at = before + rows.start as u64 * w;
            (owner(at, rows.len() as u64 * w), rows)
        };
        let units = n.div_ceil(ALIGN);
        if unit(0).0 <= ith && unit(units - 1).0 >= ith {
            let mut mine: Option<Range<usize>> = None;
            for u in 0..units {
                let (who, rows) = unit(u);
                if who == ith {
                    mine = Some(mine.map_or(rows.clone(), |m| m.start..rows.end));
                } else if who > ith {
                    break;
                }
            }
            if let Some(rows) = mine {
                f(e, rows);
            }
        }
        before += n as u64 * w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(n_expert: usize, ids: &[usize]) -> Groups {
        let mut g = Groups::default();
        g.sort(n_expert, ids.len(), |p| Some(ids[p]));
        g
    }

    #[test]
    fn sort_is_stable_and_counts_every_pair() {
        let g = groups(5, &[3, 0, 3, 4, 0, 3]);
        assert_eq!(g.pairs(0), &[1, 4]);
        assert!(g.pairs(1).is_empty() && g.pairs(2).is_empty());
        assert_eq!(g.pairs(3), &[0, 2, 5]);
        assert_eq!(g.pairs(4), &[3]);
        assert_eq!((g.first(3), g.pair_at(2), g.pair_at(3)), (2, 0, 2));
        // A second sort reuses the buffers and forgets the first.
        let mut g = g;
        g.sort(2, 3, |p| Some([1, 1, 0][p]));
        assert_eq!((g.pairs(0), g.pairs(1)), (&[2u32][..], &[0u32, 1][..]));
        assert!(g.rest().is_empty() && g.placed() == 3);
    }

    /// A part's pairs of other parts' experts come last, in pair order.
    #[test]
    fn pairs_of_no_expert_here_are_the_rest() {
        let mut g = Groups::default();
        let ids = [Some(1), None, Some(0), None, Some(1)];
        g.sort(2, ids.len(), |p| ids[p]);
        assert_eq!((g.pairs(0), g.pairs(1)), (&[2u32][..], &[0u32, 4][..]));
        assert_eq!((g.placed(), g.rest()), (3, &[1u32, 3][..]));
        assert_eq!(g.n_expert(), 2);
    }

    /// Every used expert's every row goes to exactly one thread, in
    /// contiguous, aligned shares; unused experts to none.
    #[test]
    fn shares_cover_each_used_row_once() {
        let loads: [&[usize]; 5] = [
            &[0],
            &[2, 2, 2, 2, 2, 2, 2, 1],
            &[0, 1, 2, 3, 4, 5, 6, 7],
            &[7, 7, 3],
            &[5; 40],
        ];
        for ids in loads {
            let g = groups(8, ids);
            for n in [1, 15, 16, 37, 768] {
                for nth in 1..=4 {
                    let mut seen = vec![0u8; 8 * n];
                    let mut last = (0, 0);
                    for ith in 0..nth {
                        for_share(&g, n, ith, nth, |e, rows| {
                            assert!(!g.pairs(e).is_empty(), "unused expert {e}");
                            assert!(rows.start.is_multiple_of(ALIGN) && !rows.is_empty());
                            assert!((e, rows.start) >= last, "shares out of order");
                            last = (e, rows.end);
                            for i in rows {
                                seen[e * n + i] += 1;
                            }
                        });
                    }
                    for e in 0..8 {
                        let want = u8::from(!g.pairs(e).is_empty());
                        assert!(
                            seen[e * n..(e + 1) * n].iter().all(|&s| s == want),
                            "ids {ids:?} n {n} nth {nth} expert {e}"
                        );
                    }
                }
            }
        }
    }

    /// One expert with every token, and decode (8 experts, one column
    /// each): both threads get work, within one unit of half.
    #[test]
    fn shares_balance_a_heavy_expert_and_decode() {
        for ids in [&[5usize; 37][..], &[0, 1, 2, 3, 4, 5, 6, 7]] {
            let g = groups(8, ids);
            let n = 768;
            let rows: Vec<usize> = (0..2)
                .map(|ith| {
                    let mut r = 0;
                    for_share(&g, n, ith, 2, |_, rows| r += rows.len());
                    r
                })
                .collect();
            let used = ids.iter().collect::<std::collections::BTreeSet<_>>().len();
            assert_eq!(rows[0] + rows[1], used * n);
            assert!(rows[0].abs_diff(rows[1]) <= ALIGN, "{rows:?} for {ids:?}");
        }
    }
}

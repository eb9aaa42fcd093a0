//! How the threads of a run divide one mul_mat: into items of one batch
//! (matrix) times a range of dst rows (along M) or columns (along N), each
//! thread taking a contiguous run of items ([`crate::device::cpu::pool::share`]).
//!
//! Invariant: the items cover every (batch, i, j) exactly once, and ranges
//! start at multiples of `align` (so SIMD tiles stay whole inside a range).

use crate::device::cpu::pool::share;
use std::ops::Range;

/// One division of the work.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    /// Matrices.
    pub batches: usize,
    /// Pieces per matrix.
    pub parts: usize,
    /// Pieces are ranges of dst rows (i, along M) rather than columns (j).
    pub along_m: bool,
    /// The extent being split (M or N).
    len: usize,
    align: usize,
}

impl Split {
    /// A split for `nth` threads: whole matrices when there are enough of them
    /// to balance; otherwise every matrix in `nth` pieces along M, or along N
    /// when N is larger and `m_only` is false.
    pub fn new(
        batches: usize,
        m: usize,
        n: usize,
        nth: usize,
        align: usize,
        m_only: bool,
    ) -> Split {
        let along_m = m_only || m >= n;
        let len = if along_m { m } else { n };
        let whole = nth == 1 || batches.is_multiple_of(nth) || batches >= 4 * nth;
        let parts = if whole {
            1
        } else {
            nth.min(len.div_ceil(align))
        };
        Split {
            batches,
            parts,
            along_m,
            len,
            align,
        }
    }

    /// Number of items.
    pub fn items(&self) -> usize {
        self.batches * self.parts
    }

    /// Item `it`: its batch and its range along M or N.
    pub fn item(&self, it: usize) -> (usize, Range<usize>) {
        let units = share(self.len.div_ceil(self.align), it % self.parts, self.parts);
        let range = units.start * self.align..(units.end * self.align).min(self.len);
        (it / self.parts, range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_cover_each_element_once() {
        for (batches, m, n) in [
            (1, 783, 3),
            (3, 17, 128),
            (9, 1, 1),
            (1, 1, 4096),
            (2, 64, 64),
        ] {
            for nth in 1..=4 {
                let s = Split::new(batches, m, n, nth, 16, false);
                let len = if s.along_m { m } else { n };
                let mut seen = vec![0u8; batches * len];
                for it in 0..s.items() {
                    let (b, r) = s.item(it);
                    assert!(r.start.is_multiple_of(16));
                    for x in r {
                        seen[b * len + x] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{batches} {m} {n} {nth}");
            }
        }
    }
}

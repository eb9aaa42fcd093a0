//! Memory: byte offsets for buffers with lifetimes, in one arena.
//!
//! [`plan_memory`] runs every algorithm of [`ALGORITHMS`] on the same buffers and
//! keeps the smallest arena; ties go to the earlier algorithm in that list, so the
//! choice is deterministic. It also computes the lower bound ([`lower_bound`]):
//! the largest total of aligned sizes alive at one step. No placement can beat it,
//! and it is not always reachable: the best placement can need more (packing
//! intervals is NP-hard).
//!
//! **Invariants** of a [`MemoryPlan`] made from buffers `b` (checked by
//! `tests/memory_plan.rs` with a checker written apart from the algorithms):
//! - two buffers whose lifetimes share a step never share a byte:
//!   `[offset, offset + size)` ranges of aligned sizes are disjoint;
//! - every offset is a multiple of the alignment (every size is aligned up, and
//!   each algorithm places a buffer at 0 or at the end of another buffer);
//! - `size` is the largest `offset + aligned size`, and `size >= lower_bound`;
//! - the same input gives the same plan: no hashing, every sort breaks ties by
//!   buffer index, the algorithms run in a fixed order.
//!
//! Every algorithm is a pure function from aligned buffers to offsets; none of
//! them reads the others' results.

mod gaps;
mod greedy_by_breadth;
mod greedy_by_conflicts;
mod greedy_by_duration;
mod greedy_by_size;
mod in_order;
mod lower_bound;

pub use lower_bound::lower_bound;

use crate::liveness::{Lifetime, Step};
use ir::TensorId;

/// A placement algorithm: offsets (one per buffer, same order) for buffers
/// whose sizes are already multiples of the alignment.
pub type Algorithm = fn(&[Lifetime]) -> Vec<u64>;

/// Every algorithm [`plan_memory`] tries, in tie-breaking order.
pub const ALGORITHMS: [(&str, Algorithm); 5] = [
    ("greedy_by_size", greedy_by_size::place),
    ("greedy_by_breadth", greedy_by_breadth::place),
    ("greedy_by_conflicts", greedy_by_conflicts::place),
    ("greedy_by_duration", greedy_by_duration::place),
    ("in_order_best_fit", in_order::place),
];

/// Buffers from which [`plan_memory`] runs the algorithms in parallel: below
/// it, handing work to other threads costs more than it saves. Measured
/// (2026-11-25, this 2-core host, `ggplan bench-compile`: the 32-layer
/// llama-7B-shaped graph, medians of 15 compiles, three runs alternated with
/// the serial build): emit 1.7-2.7 ms against 2.6 ms, the whole compile
/// 5.5-6.3 ms against 6.3 ms.
const PARALLEL_FROM: usize = 256;

/// Offsets for a set of buffers in one arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each buffer, in the input's order.
    pub offsets: Vec<u64>,
    /// Arena size: the largest offset + aligned size (0 without buffers).
    pub size: u64,
    /// The largest sum of aligned sizes alive at one step.
    pub lower_bound: u64,
    /// The algorithm whose offsets these are.
    pub algorithm: &'static str,
    /// Every algorithm tried and the arena size it needed, in [`ALGORITHMS`] order.
    pub tried: Vec<(&'static str, u64)>,
}

/// Buffers that cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryError {
    /// A buffer ends before it starts.
    BadLifetime {
        /// Position in the input.
        index: usize,
        /// Its tensor.
        tensor: TensorId,
        /// First step.
        first: Step,
        /// Last step.
        last: Step,
    },
    /// The aligned sizes add up to more than 2^64 - 1 bytes.
    TooLarge {
        /// Number of buffers.
        buffers: usize,
    },
}

impl std::fmt::Display for MemoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryError::BadLifetime {
                index,
                tensor,
                first,
                last,
            } => write!(
                f,
                "buffer {index} (tensor {tensor}) ends at step {last} before it starts \
                 at step {first}"
            ),
            MemoryError::TooLarge { buffers } => {
                write!(f, "the {buffers} buffers' aligned sizes overflow 64 bits")
            }
        }
    }
}

impl std::error::Error for MemoryError {}

/// Places `buffers` in one arena: sizes are aligned up to `alignment` (0 acts
/// as 1), every algorithm of [`ALGORITHMS`] runs, the smallest arena wins.
pub fn plan_memory(buffers: &[Lifetime], alignment: u64) -> Result<MemoryPlan, MemoryError> {
    let aligned = align_buffers(buffers, alignment)?;
    let lower_bound = lower_bound(&aligned);
    let run = |&(name, algorithm): &(&'static str, Algorithm)| {
        let offsets = algorithm(&aligned);
        let size = arena_size(&aligned, &offsets);
        (name, offsets, size)
    };
    // The algorithms are independent: on large arenas they run on rayon's
    // pool; `collect` keeps ALGORITHMS order, so the winner (first smallest)
    // and the plan are the same either way.
    let results: Vec<(&'static str, Vec<u64>, u64)> = if aligned.len() >= PARALLEL_FROM {
        use rayon::prelude::*;
        ALGORITHMS.par_iter().map(run).collect()
    } else {
        ALGORITHMS.iter().map(run).collect()
    };
    let tried = results
        .iter()
        .map(|(name, _, size)| (*name, *size))
        .collect();
    let mut best: Option<(&'static str, Vec<u64>, u64)> = None;
    for (name, offsets, size) in results {
        if best.as_ref().is_none_or(|(_, _, s)| size < *s) {
            best = Some((name, offsets, size));
        }
    }
    let (algorithm, offsets, size) = best.unwrap_or(("none", Vec::new(), 0));
    Ok(MemoryPlan {
        offsets,
        size,
        lower_bound,
        algorithm,
        tried,
    })
}

/// The buffers with sizes aligned up, after checking lifetimes and that the
/// total fits in 64 bits (so no offset computed later can overflow).
fn align_buffers(buffers: &[Lifetime], alignment: u64) -> Result<Vec<Lifetime>, MemoryError> {
    let a = alignment.max(1);
    let too_large = MemoryError::TooLarge {
        buffers: buffers.len(),
    };
    let mut total = 0u64;
    let mut out = Vec::with_capacity(buffers.len());
    for (index, b) in buffers.iter().enumerate() {
        if b.first > b.last {
            return Err(MemoryError::BadLifetime {
                index,
                tensor: b.tensor,
                first: b.first,
                last: b.last,
            });
        }
        let size = b.size.div_ceil(a).checked_mul(a).ok_or(too_large.clone())?;
        total = total.checked_add(size).ok_or(too_large.clone())?;
        out.push(Lifetime { size, ..*b });
    }
    Ok(out)
}

/// The largest end of any buffer placed at `offsets`.
fn arena_size(buffers: &[Lifetime], offsets: &[u64]) -> u64 {
    buffers
        .iter()
        .zip(offsets)
        .map(|(b, &o)| o + b.size)
        .max()
        .unwrap_or(0)
}

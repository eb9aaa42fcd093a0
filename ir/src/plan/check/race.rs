//! Family 9, races: two accesses to overlapping bytes of one arena on
//! different streams, at least one a write, must be ordered by events in
//! their global order. Then every schedule the events allow computes what the
//! global order computes: data a copy moves is written before it is read
//! (copies included), and no bytes are reused while a reader on another
//! stream may still read them (cross-stream write after read).
//!
//! Method (independent of the compiler's `sync` pass): per arena, the byte
//! boundaries of every access cut the arena into elementary pieces; walking
//! the accesses in global order, each piece remembers, per stream, the last
//! access that read it and the last that wrote it. An access is checked
//! against those of the other streams on the pieces it covers; the last one
//! per stream suffices, since the earlier ones on that stream happen before it.

use super::ViolationKind::Race;
use super::streams::HappensBefore;
use super::trace::Access;
use super::{Checker, span_of};
use crate::plan::Placement;
use std::collections::BTreeMap;

/// One access's bytes `[lo, hi)` of an arena.
struct Touch {
    access: usize,
    lo: u64,
    hi: u64,
    write: bool,
}

/// Arena and byte range of tensor `t`, through its view if it is one.
pub(super) fn range_of(c: &Checker<'_>, t: u32) -> Option<(u32, u64, u64)> {
    let tensor = c.tensor(t)?;
    let span = span_of(tensor)?;
    let (arena, offset) = match tensor.placement {
        Placement::Arena { arena, offset } => (arena, offset),
        Placement::View { of, offset } => match c.tensor(of)?.placement {
            Placement::Arena {
                arena,
                offset: base,
            } => (arena, base.checked_add(offset)?),
            _ => return None,
        },
        Placement::Fused => return None,
    };
    (span > 0).then_some((arena, offset, offset.checked_add(span)?))
}

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access], hb: &HappensBefore) {
    let mut by_arena: BTreeMap<u32, Vec<Touch>> = BTreeMap::new();
    for (a, access) in accesses.iter().enumerate() {
        let touches = (access.reads.iter().map(|&t| (t, false)))
            .chain(access.writes.iter().map(|&t| (t, true)));
        for (t, write) in touches {
            if let Some((arena, lo, hi)) = range_of(c, t) {
                by_arena.entry(arena).or_default().push(Touch {
                    access: a,
                    lo,
                    hi,
                    write,
                });
            }
        }
    }
    let n_streams = c.plan.streams.len();
    let mut found: Vec<(usize, usize, bool)> = Vec::new();
    for touches in by_arena.values() {
        let mut cuts: Vec<u64> = touches.iter().flat_map(|t| [t.lo, t.hi]).collect();
        cuts.sort_unstable();
        cuts.dedup();
        // Per piece and stream: last reader, last writer.
        let none = (usize::MAX, usize::MAX);
        let mut last = vec![none; (cuts.len() - 1) * n_streams];
        // Touches are already in global order (accesses were walked in order).
        for group in touches.chunk_by(|x, y| x.access == y.access) {
            let a = group[0].access;
            let s = accesses[a].stream as usize;
            for t in group {
                let first = cuts.partition_point(|&x| x < t.lo);
                let end = cuts.partition_point(|&x| x < t.hi);
                for piece in first..end {
                    for other in (0..n_streams).filter(|&o| o != s) {
                        let (reader, writer) = last[piece * n_streams + other];
                        for (p, p_writes) in [(reader, false), (writer, true)] {
                            let conflict = p_writes || t.write;
                            if p != usize::MAX && conflict && !hb.ordered(p, other, a) {
                                found.push((p, a, p_writes));
                            }
                        }
                    }
                }
            }
            for t in group {
                let first = cuts.partition_point(|&x| x < t.lo);
                let end = cuts.partition_point(|&x| x < t.hi);
                for piece in first..end {
                    let slot = &mut last[piece * n_streams + s];
                    if t.write {
                        slot.1 = a;
                    } else {
                        slot.0 = a;
                    }
                }
            }
        }
    }
    found.sort_unstable();
    found.dedup();
    for (p, a, p_writes) in found {
        let kind = if p_writes {
            "after its write"
        } else {
            "a write after its read"
        };
        let msg = format!(
            "touches bytes that {} (stream {}) touched earlier in global order, with no event \
             ordering the two ({kind}): another stream may run them in either order",
            accesses[p].label, accesses[p].stream
        );
        c.problem(
            Race,
            format!("{} (stream {})", accesses[a].label, accesses[a].stream),
            msg,
        );
    }
}

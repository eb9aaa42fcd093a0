//! Pass `sync`: the events that let a plan's streams run concurrently and
//! still compute what its global order computes.
//!
//! Input: an emitted plan (streams set, no events). Output: the same plan with
//! `wait`/`record` on copies and `waits`/`records` on splits, and `n_events`.
//!
//! # Rule
//! The plan's meaning is its global order (splits in order; each split's
//! copies, then its steps). Each stream runs its own work in that order, so
//! two accesses on one stream are ordered already. Two accesses on different
//! streams to overlapping bytes of one arena, at least one of them a write
//! (read after write, write after read, write after write), must be ordered
//! by a chain of events in the direction of the global order. This covers the
//! data a copy moves (the copy waits for the step writing its source; the
//! first reader of the copy waits for the copy) and memory reuse across
//! streams (a step writing bytes that a copy on another stream still reads
//! waits for that copy).
//!
//! # Method
//! One walk in global order. Per (arena, stream), interval maps hold the last
//! access reading and the last access writing every byte range. An access
//! needs, for each other stream, the latest conflicting access there; only
//! the latest matters, since the ones before it on its stream happen before
//! it. Vector clocks (one counter per stream) tell whether the access already
//! happens after it through earlier events; only when not is an event added:
//! the earlier access records one (one event per recording access, shared by
//! all its waiters), and this access waits on it. Candidates are taken latest
//! first, since a wait on a later access often orders the earlier ones
//! through it. The walk is greedy, not minimal in general.
//!
//! **Invariants** of the result: every event is recorded exactly once, by an
//! access earlier in global order than each of its waiters (so no schedule
//! deadlocks); waits and records of a split are sorted by (step, event).

use ir::plan::{Placement, Plan, Record, Wait, Work};
use std::collections::BTreeMap;

/// Bytes `[lo, hi)` of an arena.
#[derive(Clone, Copy)]
struct Bytes {
    arena: u32,
    lo: u64,
    hi: u64,
}

/// Where an access sits in the plan: a copy or a step of a split.
#[derive(Clone, Copy)]
enum Site {
    Copy { split: usize, index: usize },
    Step { split: usize, index: usize },
}

/// One copy or step in global order, with the bytes it touches.
struct Access {
    site: Site,
    stream: usize,
    reads: Vec<Bytes>,
    writes: Vec<Bytes>,
}

/// The last access touching each byte of one (arena, stream), as disjoint
/// segments keyed by start: `start -> (end, access)`.
#[derive(Default)]
struct LastAccess(BTreeMap<u64, (u64, usize)>);

impl LastAccess {
    /// The latest access over any byte of `[lo, hi)`.
    fn latest(&self, lo: u64, hi: u64) -> Option<usize> {
        let first = self.0.range(..lo).next_back().map_or(lo, |(&s, _)| s);
        self.0
            .range(first..hi)
            .filter(|(_, (end, _))| *end > lo)
            .map(|(_, &(_, access))| access)
            .max()
    }

    /// Marks `[lo, hi)` as last touched by `access`.
    fn set(&mut self, lo: u64, hi: u64, access: usize) {
        // Cut the segments straddling lo and hi, then replace what is inside.
        if let Some((&s, &(e, a))) = self.0.range(..lo).next_back()
            && e > lo
        {
            self.0.insert(s, (lo, a));
            self.0.insert(lo, (e, a));
        }
        if let Some((&s, &(e, a))) = self.0.range(..hi).next_back()
            && e > hi
        {
            self.0.insert(s, (hi, a));
            self.0.insert(hi, (e, a));
        }
        let inside: Vec<u64> = self.0.range(lo..hi).map(|(&s, _)| s).collect();
        for s in inside {
            self.0.remove(&s);
        }
        self.0.insert(lo, (hi, access));
    }
}

/// The bytes tensor `t` occupies, if it has any.
fn bytes_of(plan: &Plan, t: u32) -> Option<Bytes> {
    let tensor = plan.tensors.get(t as usize)?;
    let span = tensor.layout().span_bytes();
    let (arena, offset) = match tensor.placement {
        Placement::Arena { arena, offset } => (arena, offset),
        Placement::View { of, offset } => match plan.tensors.get(of as usize)?.placement {
            Placement::Arena {
                arena,
                offset: base,
            } => (arena, base + offset),
            _ => return None,
        },
        Placement::Fused => return None,
    };
    (span > 0).then_some(Bytes {
        arena,
        lo: offset,
        hi: offset + span,
    })
}

/// Every copy and step of `plan` in global order.
fn accesses(plan: &Plan) -> Vec<Access> {
    let bytes = |ts: &mut dyn Iterator<Item = u32>| ts.filter_map(|t| bytes_of(plan, t)).collect();
    plan.global_order()
        .map(|item| {
            let (split, index) = (item.split, item.position);
            let (site, stream) = match item.work {
                Work::Copy(c) => (Site::Copy { split, index }, c.stream),
                Work::Step(_) => (Site::Step { split, index }, plan.splits[split].stream),
            };
            let kernels = &plan.kernels[..];
            Access {
                site,
                stream: stream as usize,
                reads: bytes(&mut item.reads(kernels).iter().copied()),
                writes: bytes(&mut item.writes(kernels).iter().copied()),
            }
        })
        .collect()
}

/// Adds the events of the module doc to `plan`.
pub fn insert_events(mut plan: Plan) -> Plan {
    let n_streams = plan.streams.len();
    let accesses = accesses(&plan);
    // clock[a][s]: accesses of stream s that happen before or at access a.
    let mut clock: Vec<Vec<u32>> = Vec::with_capacity(accesses.len());
    let mut position = vec![0u32; accesses.len()];
    let mut stream_last: Vec<Option<usize>> = vec![None; n_streams];
    let mut event_of: Vec<Option<u32>> = vec![None; accesses.len()];
    let mut waits: Vec<Vec<u32>> = vec![Vec::new(); accesses.len()];
    let mut n_events = 0u32;
    let mut reads: BTreeMap<(u32, usize), LastAccess> = BTreeMap::new();
    let mut writes: BTreeMap<(u32, usize), LastAccess> = BTreeMap::new();

    for (a, access) in accesses.iter().enumerate() {
        let t = access.stream;
        let mut vc = stream_last[t].map_or_else(|| vec![0; n_streams], |p| clock[p].clone());
        // The latest access of each other stream this one conflicts with,
        // latest first: waiting on it often orders the earlier ones too.
        let mut needed: Vec<(usize, usize)> = Vec::new();
        for s in (0..n_streams).filter(|&s| s != t) {
            let mut latest = None;
            for b in access.reads.iter().chain(&access.writes) {
                if let Some(m) = writes.get(&(b.arena, s)) {
                    latest = latest.max(m.latest(b.lo, b.hi));
                }
            }
            for b in &access.writes {
                if let Some(m) = reads.get(&(b.arena, s)) {
                    latest = latest.max(m.latest(b.lo, b.hi));
                }
            }
            needed.extend(latest.map(|p| (p, s)));
        }
        needed.sort_unstable_by(|x, y| y.cmp(x));
        for (p, s) in needed {
            if vc[s] > position[p] {
                continue; // already ordered through earlier events
            }
            let event = *event_of[p].get_or_insert_with(|| {
                n_events += 1;
                n_events - 1
            });
            waits[a].push(event);
            for (mine, theirs) in vc.iter_mut().zip(&clock[p]) {
                *mine = (*mine).max(*theirs);
            }
        }
        position[a] = stream_last[t].map_or(0, |p| position[p] + 1);
        vc[t] = position[a] + 1;
        clock.push(vc);
        stream_last[t] = Some(a);
        for b in &access.reads {
            reads.entry((b.arena, t)).or_default().set(b.lo, b.hi, a);
        }
        for b in &access.writes {
            writes.entry((b.arena, t)).or_default().set(b.lo, b.hi, a);
        }
    }

    for (a, access) in accesses.iter().enumerate() {
        let mut wait = std::mem::take(&mut waits[a]);
        wait.sort_unstable();
        match access.site {
            Site::Copy { split, index } => {
                let copy = &mut plan.splits[split].copies[index];
                copy.wait = wait;
                copy.record = event_of[a];
            }
            Site::Step { split, index } => {
                let split = &mut plan.splits[split];
                let step = index as u32;
                split.waits.extend(wait.into_iter().map(|event| Wait {
                    before: step,
                    event,
                }));
                if let Some(event) = event_of[a] {
                    split.records.push(Record { after: step, event });
                }
            }
        }
    }
    plan.n_events = n_events;
    plan
}

#[cfg(test)]
mod tests {
    use super::LastAccess;

    /// The interval map answers like a byte-by-byte array.
    #[test]
    fn last_access_matches_a_byte_array() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut map = LastAccess::default();
        let mut bytes: Vec<Option<usize>> = vec![None; 256];
        for access in 0..2000 {
            let lo = next(250);
            let hi = lo + 1 + next(256 - lo);
            if next(2) == 0 {
                map.set(lo, hi, access);
                for b in &mut bytes[lo as usize..hi as usize] {
                    *b = Some(access);
                }
            } else {
                let want = bytes[lo as usize..hi as usize]
                    .iter()
                    .flatten()
                    .max()
                    .copied();
                assert_eq!(map.latest(lo, hi), want, "[{lo}, {hi}) after {access}");
            }
        }
    }
}

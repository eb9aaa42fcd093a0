//! Family 10, collectives: the participants of each collective form one group.
//!
//! Participants are the op steps whose op is a collective (`all_reduce_sum`,
//! `all_gather`, `reduce_scatter_sum`), grouped by their `group` number. The group's leader is its
//! lowest rank (the first in global order on a tie); every other participant
//! is compared with it. For each group:
//! - its ranks are `0..ranks`, each exactly once (a rank missing, a rank twice
//!   and a rank outside `0..ranks` are each reported); `ranks` is at most the
//!   plan's device count, since every rank needs its own device;
//! - every participant runs the leader's op (the same kind and, for
//!   `all_gather` and `reduce_scatter_sum`, the same `dim`) over the same
//!   `ranks`;
//! - a reduce-scatter's slices tile its axis in rank order: rank 0 starts at
//!   0, each next rank where the previous one ends, the last one at the
//!   parts' extent (no index summed twice, none left out);
//! - every participant reads the leader's sources, in the same order (the
//!   parts, read in place: family 3 allows that only between devices that
//!   share memory);
//! - no two participants run on one device.
//!
//! Each participant's destination has the dtype and extents the op's shape
//! rule gives for its parts: family 1 (`shape`) checks that for every op step.
//! Who may read the parts of an all-reduce is `partial`'s question.

use super::Checker;
use super::ViolationKind::Collective;
use crate::Op;
use crate::plan::Step;
use std::collections::BTreeMap;

/// One participant of a collective, and where it sits in the plan.
struct Participant<'p> {
    split: usize,
    step: usize,
    device: u32,
    op: &'p Op,
    srcs: &'p [u32],
    rank: u32,
    ranks: u32,
}

impl Participant<'_> {
    /// `rank 1 (split 2 step 0)`, for messages.
    fn who(&self) -> String {
        format!(
            "rank {} (split {} step {})",
            self.rank, self.split, self.step
        )
    }
}

pub(super) fn check(c: &mut Checker<'_>) {
    let mut groups: BTreeMap<u32, Vec<Participant<'_>>> = BTreeMap::new();
    for (s, split) in c.plan.splits.iter().enumerate() {
        for (k, step) in split.steps.iter().enumerate() {
            if let Step::Op { op, srcs, .. } = step
                && let Some(cr) = op.collective()
            {
                groups.entry(cr.group).or_default().push(Participant {
                    split: s,
                    step: k,
                    device: split.device.0,
                    op,
                    srcs,
                    rank: cr.rank,
                    ranks: cr.ranks,
                });
            }
        }
    }
    for (&group, members) in &groups {
        check_group(c, group, members);
    }
}

fn check_group(c: &mut Checker<'_>, group: u32, members: &[Participant<'_>]) {
    // `min_by_key` keeps the first of equal keys: the earliest in global order.
    let Some(leader) = members.iter().min_by_key(|p| p.rank) else {
        return;
    };
    let name = format!(
        "collective group {group} ({} over {} ranks)",
        leader.op, leader.ranks
    );
    for p in members.iter().filter(|p| !std::ptr::eq(*p, leader)) {
        if !same_op(p.op, leader.op) {
            let msg = format!(
                "{} is {}, but {} is {}",
                p.who(),
                op_text(p.op),
                leader.who(),
                op_text(leader.op)
            );
            c.problem(Collective, name.clone(), msg);
        }
        if p.ranks != leader.ranks {
            let msg = format!(
                "{} says {} ranks, but {} says {}",
                p.who(),
                p.ranks,
                leader.who(),
                leader.ranks
            );
            c.problem(Collective, name.clone(), msg);
        }
        if p.srcs != leader.srcs {
            let msg = format!(
                "{} reads {}, but {} reads {}: every participant reads the same parts \
                 in the same order",
                p.who(),
                tensor_list(c, p.srcs),
                leader.who(),
                tensor_list(c, leader.srcs)
            );
            c.problem(Collective, name.clone(), msg);
        }
    }
    ranks(c, &name, leader.ranks, members);
    devices(c, &name, members);
    // Slices are compared only along one axis (a disagreement on it is
    // reported above).
    if matches!(leader.op, Op::ReduceScatterSum { .. })
        && members.iter().all(|p| same_op(p.op, leader.op))
    {
        slices(c, &name, leader, members);
    }
}

/// A reduce-scatter's slices, in rank order, tile the parts' extent along
/// its axis exactly.
fn slices(c: &mut Checker<'_>, name: &str, leader: &Participant<'_>, members: &[Participant<'_>]) {
    let Op::ReduceScatterSum { dim, .. } = *leader.op else {
        return;
    };
    // The parts' extent; a missing or foreign source is reported elsewhere.
    let Some(extent) = leader
        .srcs
        .first()
        .and_then(|&s| c.tensor(s))
        .map(|t| t.layout().ne[usize::from(dim.min(3))])
    else {
        return;
    };
    let mut by_rank: Vec<&Participant<'_>> = members.iter().collect();
    by_rank.sort_by_key(|p| p.rank);
    let mut next = 0i64;
    for p in by_rank {
        let Op::ReduceScatterSum { start, len, .. } = *p.op else {
            continue; // unreachable: every member runs the leader's op
        };
        if start != next {
            let msg = if start < next {
                format!(
                    "{} keeps [{start}, {}) along dim {dim}, overlapping the slice before it, \
                     which ends at {next}",
                    p.who(),
                    start + len
                )
            } else {
                format!(
                    "{} keeps [{start}, {}) along dim {dim}, leaving [{next}, {start}) to no rank",
                    p.who(),
                    start + len
                )
            };
            c.problem(Collective, name.to_string(), msg);
        }
        next = start.saturating_add(len);
    }
    if next != extent {
        let msg = format!(
            "the slices end at {next} along dim {dim}, but the parts' extent is {extent}: \
             every index must be kept by exactly one rank"
        );
        c.problem(Collective, name.to_string(), msg);
    }
}

/// Ranks `0..ranks`, each exactly once.
fn ranks(c: &mut Checker<'_>, name: &str, ranks: u32, members: &[Participant<'_>]) {
    let mut by_rank: BTreeMap<u32, Vec<&Participant<'_>>> = BTreeMap::new();
    for p in members {
        by_rank.entry(p.rank).or_default().push(p);
    }
    for p in by_rank.range(ranks..).flat_map(|(_, at)| at) {
        let msg = format!("{} is outside ranks 0..{ranks}", p.who());
        c.problem(Collective, name.to_string(), msg);
    }
    let n_devices = c.plan.devices.len();
    if ranks as usize > n_devices {
        // Listing the missing ranks of a huge `ranks` would take as long as it is.
        let msg = format!(
            "{ranks} ranks need {ranks} devices, but the plan has {n_devices} \
             (each rank runs on its own)"
        );
        return c.problem(Collective, name.to_string(), msg);
    }
    for rank in 0..ranks {
        let at = by_rank.get(&rank).map_or(&[][..], |v| &v[..]);
        let msg = match at.len() {
            0 => format!("rank {rank} is missing"),
            1 => continue,
            n => format!(
                "rank {rank} appears {} ({})",
                times(n),
                and_list(
                    at.iter()
                        .map(|p| format!("split {} step {}", p.split, p.step))
                )
            ),
        };
        c.problem(Collective, name.to_string(), msg);
    }
}

/// No two participants on one device.
fn devices(c: &mut Checker<'_>, name: &str, members: &[Participant<'_>]) {
    let mut by_device: BTreeMap<u32, Vec<&Participant<'_>>> = BTreeMap::new();
    for p in members {
        by_device.entry(p.device).or_default().push(p);
    }
    for (&d, at) in &by_device {
        if at.len() > 1 {
            let msg = format!(
                "{} {} run on {}: each participant needs its own device",
                and_list(at.iter().map(|p| p.who())),
                if at.len() == 2 { "both" } else { "all" },
                c.device_name(d)
            );
            c.problem(Collective, name.to_string(), msg);
        }
    }
}

/// True when two collectives are the same operation (kind and `dim`), whatever
/// their group and rank.
fn same_op(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::AllReduceSum { .. }, Op::AllReduceSum { .. }) => true,
        (Op::AllGather { dim: x, .. }, Op::AllGather { dim: y, .. }) => x == y,
        (Op::ReduceScatterSum { dim: x, .. }, Op::ReduceScatterSum { dim: y, .. }) => x == y,
        _ => false,
    }
}

/// `all_reduce_sum`, `all_gather along dim 1`.
fn op_text(op: &Op) -> String {
    match op {
        Op::AllGather { dim, .. } | Op::ReduceScatterSum { dim, .. } => {
            format!("{op} along dim {dim}")
        }
        _ => op.to_string(),
    }
}

/// `['p#0' (t9), 'p#1' (t10)]`.
fn tensor_list(c: &Checker<'_>, ts: &[u32]) -> String {
    let names: Vec<String> = ts.iter().map(|&t| c.describe(t)).collect();
    format!("[{}]", names.join(", "))
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// `twice`, `3 times`.
fn times(n: usize) -> String {
    match n {
        2 => "twice".to_string(),
        n => format!("{n} times"),
    }
}

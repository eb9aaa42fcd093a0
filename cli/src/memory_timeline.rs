//! Lifetimes of the tensors of a plan's compute arenas over its global steps,
//! and the bytes alive at each step (what `ggplan memory` draws).
//!
//! Global steps are numbered as everywhere else: split 0's copies, then split
//! 0's steps, then split 1's copies, ... one index each. A tensor with arena
//! bytes lives from the first step touching it (its write) to the last step
//! reading it; reads and writes through views count for the view's owner, and
//! Output tensors (or owners of Output views) live to the last step.
//!
//! Live bytes at a step are the bytes of the arena covered by the tensors alive
//! at it (the union of their ranges), so a result written in place over a
//! dying operand counts once at the step that hands the bytes over.
//!
//! Invariant: the plan is read defensively (indices out of range are skipped),
//! so a damaged plan file draws what it can and never panics.

use ir::Role;
use ir::plan::{DeviceId, Placement, Plan, Step, Usage, Work};

/// How a tensor's rectangle is coloured (in legend order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A graph intermediate.
    Intermediate,
    /// A graph output (kept to the end of the run).
    Output,
    /// A cross-device copy of another tensor.
    Copy,
    /// Any other role found in a compute arena (a damaged or unusual plan).
    Other,
}

impl Kind {
    /// The legend's word for it.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Intermediate => "intermediate",
            Kind::Output => "output",
            Kind::Copy => "copy from another device",
            Kind::Other => "other",
        }
    }
}

/// One tensor with bytes in a compute arena.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Index into the plan's tensors.
    pub tensor: u32,
    /// The tensor's name.
    pub name: String,
    /// Byte offset in the arena.
    pub offset: u64,
    /// Bytes it spans.
    pub bytes: u64,
    /// First global step it is alive at.
    pub first: usize,
    /// Last global step it is alive at (inclusive).
    pub last: usize,
    /// Its colour class.
    pub kind: Kind,
}

/// One compute arena over time.
#[derive(Clone, Debug, PartialEq)]
pub struct ArenaTimeline {
    /// Index into the plan's arenas.
    pub arena: u32,
    /// Its device.
    pub device: DeviceId,
    /// The device's name.
    pub device_name: String,
    /// Arena bytes.
    pub size: u64,
    /// The compute lower bound the plan recorded for the device, if any.
    pub lower_bound: Option<u64>,
    /// Its tensors, in tensor order.
    pub bars: Vec<Bar>,
    /// Tensors placed in the arena that no step touches (drawn nowhere).
    pub untouched: Vec<String>,
    /// Live bytes at every global step.
    pub live: Vec<u64>,
    /// The first step with the most live bytes, and those bytes.
    pub peak: Option<(usize, u64)>,
}

/// Another arena, summarised.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherArena {
    /// The device's name.
    pub device_name: String,
    /// What it holds.
    pub usage: Usage,
    /// Arena bytes.
    pub size: u64,
    /// Tensors placed in it.
    pub tensors: usize,
}

/// The whole plan's memory over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Words for every global step (`split 0 copy 1`, `split 0 step 3 (mul_mat -> l0.kq)`).
    pub steps: Vec<String>,
    /// The global step at which each split starts, with its device's name.
    pub split_starts: Vec<(usize, String)>,
    /// Compute arenas, in arena order.
    pub compute: Vec<ArenaTimeline>,
    /// Every other arena.
    pub others: Vec<OtherArena>,
}

/// What one global step reads and writes.
struct Access {
    reads: Vec<u32>,
    writes: Vec<u32>,
}

fn tensor_name(plan: &Plan, t: u32) -> &str {
    plan.tensors
        .get(t as usize)
        .map_or("?", |t| t.name.as_str())
}

fn device_name(plan: &Plan, d: DeviceId) -> String {
    plan.devices
        .get(d.index())
        .map_or_else(|| d.to_string(), |d| d.name.clone())
}

/// Every copy and step, in execution order, with a label.
fn accesses(plan: &Plan) -> (Vec<Access>, Vec<String>, Vec<(usize, String)>) {
    let mut acc = Vec::new();
    let mut labels = Vec::new();
    let mut starts = Vec::new();
    for item in plan.global_order() {
        let (s, k) = (item.split, item.position);
        while starts.len() <= s {
            starts.push((
                acc.len(),
                device_name(plan, plan.splits[starts.len()].device),
            ));
        }
        let reads = item.reads(&plan.kernels).to_vec();
        let writes: Vec<u32> = item.writes(&plan.kernels).to_vec();
        let dst = writes.first().map_or("?", |&w| tensor_name(plan, w));
        labels.push(match item.work {
            Work::Copy(c) => format!("split {s} copy {k} ({} -> {dst})", tensor_name(plan, c.src)),
            Work::Step(Step::Op { op, .. }) => {
                format!("split {s} step {k} ({} -> {dst})", op.name())
            }
            Work::Step(Step::Fused { kernel }) => {
                format!("split {s} step {k} (fused kernel {kernel} -> {dst})")
            }
            Work::Step(Step::MulMatAdd { .. }) => {
                format!("split {s} step {k} (mul_mat + add -> {dst})")
            }
            Work::Step(Step::Attention { .. }) => {
                format!("split {s} step {k} (attention -> {dst})")
            }
            Work::Step(Step::MulMatGlu { .. }) => {
                format!("split {s} step {k} (mul_mat + glu -> {dst})")
            }
            Work::Step(Step::MulMatMany { dsts, .. }) => {
                format!(
                    "split {s} step {k} (mul_mat x {} -> {dst}, ...)",
                    dsts.len()
                )
            }
            Work::Step(Step::RopeStore { dsts, .. }) => {
                format!(
                    "split {s} step {k} (rope + set_rows x {} -> {dst}, ...)",
                    dsts.len()
                )
            }
        });
        acc.push(Access { reads, writes });
    }
    // Splits with nothing in them (after the last item) start at the end.
    while starts.len() < plan.splits.len() {
        starts.push((
            acc.len(),
            device_name(plan, plan.splits[starts.len()].device),
        ));
    }
    (acc, labels, starts)
}

/// The tensor owning `t`'s bytes (itself for an arena placement), following
/// view chains; `None` for fused tensors, bad indices or cycles.
fn owner(plan: &Plan, mut t: u32) -> Option<u32> {
    for _ in 0..=plan.tensors.len() {
        match plan.tensors.get(t as usize)?.placement {
            Placement::Arena { .. } => return Some(t),
            Placement::View { of, .. } => t = of,
            Placement::Fused => return None,
        }
    }
    None
}

fn span(t: &ir::plan::PlanTensor) -> u64 {
    t.layout().span_bytes()
}

/// Builds the timeline of `plan`.
pub fn timeline(plan: &Plan) -> Timeline {
    let (acc, steps, split_starts) = accesses(plan);
    let end = acc.len().saturating_sub(1);
    let n = plan.tensors.len();
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n];
    for (g, a) in acc.iter().enumerate() {
        for &t in a.reads.iter().chain(&a.writes) {
            if let Some(o) = owner(plan, t) {
                let slot = &mut life[o as usize];
                *slot = Some(slot.map_or((g, g), |(f, l)| (f.min(g), l.max(g))));
            }
        }
    }
    // Outputs (and owners of output views) must survive the run.
    for (i, t) in plan.tensors.iter().enumerate() {
        if t.role == Role::Output
            && let Some(o) = owner(plan, i as u32)
            && let Some((first, _)) = life[o as usize]
        {
            life[o as usize] = Some((first, end));
        }
    }
    let mut compute = Vec::new();
    let mut others = Vec::new();
    for (a, arena) in plan.arenas.iter().enumerate() {
        let members = plan.tensors.iter().enumerate().filter(
            |(_, t)| matches!(t.placement, Placement::Arena { arena, .. } if arena as usize == a),
        );
        if arena.usage != Usage::Compute {
            others.push(OtherArena {
                device_name: device_name(plan, arena.device),
                usage: arena.usage,
                size: arena.size,
                tensors: members.count(),
            });
            continue;
        }
        let mut bars = Vec::new();
        let mut untouched = Vec::new();
        for (i, t) in members {
            let Placement::Arena { offset, .. } = t.placement else {
                continue;
            };
            let bytes = span(t);
            if bytes == 0 {
                continue;
            }
            let Some((first, last)) = life[i] else {
                untouched.push(t.name.clone());
                continue;
            };
            let kind = match t.role {
                _ if t.copy_of.is_some() => Kind::Copy,
                Role::Intermediate => Kind::Intermediate,
                Role::Output => Kind::Output,
                _ => Kind::Other,
            };
            bars.push(Bar {
                tensor: i as u32,
                name: t.name.clone(),
                offset,
                bytes,
                first,
                last,
                kind,
            });
        }
        let live = live_bytes(&bars, acc.len());
        let peak = live
            .iter()
            .enumerate()
            .fold(None, |best: Option<(usize, u64)>, (g, &b)| match best {
                Some((_, pb)) if pb >= b => best,
                _ => Some((g, b)),
            });
        let lower_bound = plan
            .stats
            .devices
            .iter()
            .find(|d| d.device == arena.device)
            .map(|d| d.compute_lower_bound);
        compute.push(ArenaTimeline {
            arena: a as u32,
            device: arena.device,
            device_name: device_name(plan, arena.device),
            size: arena.size,
            lower_bound,
            bars,
            untouched,
            live,
            peak,
        });
    }
    Timeline {
        steps,
        split_starts,
        compute,
        others,
    }
}

/// Bytes covered by the bars alive at each of `n_steps` steps.
fn live_bytes(bars: &[Bar], n_steps: usize) -> Vec<u64> {
    let mut by_start: Vec<&Bar> = bars.iter().collect();
    by_start.sort_by_key(|b| (b.first, b.tensor));
    let mut next = 0;
    let mut active: Vec<&Bar> = Vec::new();
    let mut out = Vec::with_capacity(n_steps);
    for g in 0..n_steps {
        active.retain(|b| b.last >= g);
        while next < by_start.len() && by_start[next].first <= g {
            active.push(by_start[next]);
            next += 1;
        }
        let mut ranges: Vec<(u64, u64)> = active
            .iter()
            .map(|b| (b.offset, b.offset.saturating_add(b.bytes)))
            .collect();
        ranges.sort_unstable();
        let (mut total, mut covered_to) = (0u64, 0u64);
        for (lo, hi) in ranges {
            let lo = lo.max(covered_to);
            if hi > lo {
                total += hi - lo;
                covered_to = hi;
            }
        }
        out.push(total);
    }
    out
}

impl ArenaTimeline {
    /// The bars alive at step `g`, largest first (ties by tensor order).
    pub fn alive_at(&self, g: usize) -> Vec<&Bar> {
        let mut v: Vec<&Bar> = self
            .bars
            .iter()
            .filter(|b| b.first <= g && g <= b.last)
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.tensor.cmp(&b.tensor)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(tensor: u32, offset: u64, bytes: u64, first: usize, last: usize) -> Bar {
        Bar {
            tensor,
            name: format!("t{tensor}"),
            offset,
            bytes,
            first,
            last,
            kind: Kind::Intermediate,
        }
    }

    #[test]
    fn live_bytes_count_shared_bytes_once() {
        // t1 takes over t0's bytes in place at step 2; t2 sits beside them.
        let bars = [
            bar(0, 0, 64, 0, 2),
            bar(1, 0, 64, 2, 3),
            bar(2, 64, 32, 1, 2),
        ];
        assert_eq!(live_bytes(&bars, 5), vec![64, 96, 96, 64, 0]);
    }
}

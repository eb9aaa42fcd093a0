//! The optimisation problem behind policy `cost`: groups, their times per
//! device, the reads between them, and its solvers (one exact cut for two
//! devices, expansion moves beyond). See `cost_policy.rs` for the model.
//!
//! Invariants: a solution gives every group a device that runs all of its
//! kernels and keeps fixed groups where they are fixed; objective values are
//! integer nanoseconds, so equal inputs give equal answers.

use super::min_cut::CutProblem;
use super::{WeightPlacement, is_view_op, no_device_for_writes};
use crate::Error;
use crate::cost::{copy_time_us, fmt_us, op_time_us};
use crate::target::{DeviceId, Target, cannot_run};
use ir::{Graph, Op, Role, TensorId};
use std::collections::{BTreeMap, BTreeSet};

/// Rounds of expansion before giving up on further improvement (each
/// accepted move lowers the objective, so this only bounds pathological cases).
const MAX_ROUNDS: usize = 64;

/// Time in integer nanoseconds (cuts run on integers: exact and repeatable).
pub(super) fn ns(us: f64) -> u64 {
    if us.is_finite() && us >= 0.0 {
        (us * 1000.0).round().min(1e15) as u64
    } else {
        1e15 as u64
    }
}

/// A tensor read by kernels of other groups: one copy per destination device.
struct Read {
    from: usize,
    readers: Vec<usize>,
    bytes: u64,
    /// Copy time in ns from device `a` to `b` at `a * n_devices + b`.
    copy_ns: Vec<u64>,
}

impl Read {
    /// The distinct devices, other than the source's, that read it.
    fn destinations(&self, dev: &[DeviceId]) -> Vec<DeviceId> {
        let mut dests: Vec<DeviceId> = self
            .readers
            .iter()
            .map(|&g| dev[g])
            .filter(|&d| d != dev[self.from])
            .collect();
        dests.sort_unstable();
        dests.dedup();
        dests
    }
}

/// Groups (a root with its views and writers), their kernel times per
/// device, fixed devices and cross-group reads.
pub(super) struct Problem<'a> {
    pub(super) graph: &'a Graph,
    pub(super) target: &'a Target,
    weights: &'a WeightPlacement,
    /// Tensor id -> group.
    pub(super) group: Vec<usize>,
    /// Group -> root tensor.
    pub(super) root: Vec<TensorId>,
    /// Group -> its kernels (non-view nodes), in id order.
    pub(super) kernels: Vec<Vec<TensorId>>,
    /// Group -> device -> time of its kernels; `None` where one cannot run.
    pub(super) time: Vec<Vec<Option<u64>>>,
    /// Group -> the device it must use and why.
    pub(super) fixed: Vec<Option<(DeviceId, String)>>,
    reads: Vec<Read>,
}

impl<'a> Problem<'a> {
    pub(super) fn new(
        graph: &'a Graph,
        target: &'a Target,
        weights: &'a WeightPlacement,
    ) -> Result<Problem<'a>, Error> {
        let mut group_of_root = vec![usize::MAX; graph.len()];
        let (mut group, mut root, mut kernels) =
            (Vec::new(), Vec::new(), Vec::<Vec<TensorId>>::new());
        for id in graph.ids() {
            let r = graph.storage_of(id).root;
            if group_of_root[r.index()] == usize::MAX {
                group_of_root[r.index()] = root.len();
                root.push(r);
                kernels.push(Vec::new());
            }
            let g = group_of_root[r.index()];
            group.push(g);
            if graph.tensor(id).op.is_some() && !is_view_op(graph, id) {
                kernels[g].push(id);
            }
        }
        let mut time = Vec::with_capacity(root.len());
        for (g, ks) in kernels.iter().enumerate() {
            let on = |d: DeviceId| {
                let runs = ks.iter().all(|&k| !cannot_run(graph, target, d, k));
                runs.then(|| {
                    ks.iter()
                        .map(|&k| ns(op_time_us(target, d, graph, k)))
                        .sum()
                })
            };
            let row: Vec<Option<u64>> = target.device_ids().map(on).collect();
            if row.iter().all(Option::is_none) {
                return Err(no_device_for_writes(graph, target, root[g]));
            }
            time.push(row);
        }
        let mut p = Problem {
            graph,
            target,
            weights,
            group,
            root,
            kernels,
            time,
            fixed: Vec::new(),
            reads: Vec::new(),
        };
        p.fixed = (0..p.root.len()).map(|g| p.fixed_device(g)).collect();
        p.reads = p.cross_group_reads();
        Ok(p)
    }

    pub(super) fn name(&self, d: DeviceId) -> &str {
        &self.target.devices[d.index()].name
    }

    /// Weights where placed; a group reading a weight next to it.
    fn fixed_device(&self, g: usize) -> Option<(DeviceId, String)> {
        let r = self.root[g];
        if self.graph.tensor(r).role == Role::Weight {
            let d = self.weights.device[r.index()].unwrap_or(DeviceId(0));
            return Some((d, self.weights.reason[r.index()].clone()));
        }
        for &k in &self.kernels[g] {
            let t = self.graph.tensor(k);
            if matches!(t.op, Some(Op::Rope(_))) {
                continue;
            }
            let weight = t
                .srcs
                .iter()
                .map(|&s| self.graph.storage_of(s).root)
                .find(|&w| self.graph.tensor(w).role == Role::Weight);
            if let Some(w) = weight {
                let d = self.weights.device[w.index()]?;
                self.time[g][d.index()]?;
                let why = format!(
                    "runs next to its weight '{}' on {} ({}): weights stay where they were placed, never copied on every run",
                    self.graph.tensor(w).name,
                    self.name(d),
                    fmt_us(self.time[g][d.index()].unwrap_or(0) as f64 / 1000.0)
                );
                return Some((d, why));
            }
        }
        None
    }

    fn cross_group_reads(&self) -> Vec<Read> {
        let mut readers: BTreeMap<TensorId, BTreeSet<usize>> = BTreeMap::new();
        for ks in &self.kernels {
            for &k in ks {
                let gk = self.group[k.index()];
                for &s in &self.graph.tensor(k).srcs {
                    if self.group[s.index()] != gk {
                        readers.entry(s).or_default().insert(gk);
                    }
                }
            }
        }
        let n = self.target.devices.len();
        readers
            .into_iter()
            .map(|(s, r)| {
                let bytes = self.graph.tensor(s).layout.span_bytes();
                let copy_ns = (0..n * n)
                    .map(|i| {
                        let (a, b) = (DeviceId((i / n) as u32), DeviceId((i % n) as u32));
                        ns(copy_time_us(self.target, a, b, bytes))
                    })
                    .collect();
                Read {
                    from: self.group[s.index()],
                    readers: r.into_iter().collect(),
                    bytes,
                    copy_ns,
                }
            })
            .collect()
    }

    /// A copy's time in ns, times `weight` (1: the plain objective).
    fn copy(&self, read: &Read, from: DeviceId, to: DeviceId, weight: u64) -> u64 {
        let n = self.target.devices.len();
        read.copy_ns[from.index() * n + to.index()].saturating_mul(weight)
    }

    /// The (tensor, destination) pairs a device per group copies, and their bytes.
    pub(super) fn copy_stats(&self, dev: &[DeviceId]) -> (usize, u64) {
        let (mut pairs, mut bytes) = (0, 0);
        for r in &self.reads {
            let dests = r.destinations(dev);
            pairs += dests.len();
            bytes += dests.len() as u64 * r.bytes;
        }
        (pairs, bytes)
    }

    /// A minimum of compute time plus `copy_weight` times copy time: exact
    /// for two devices, a local minimum by expansion moves beyond.
    pub(super) fn solve(&self, copy_weight: u64) -> Vec<DeviceId> {
        match self.target.devices.len() {
            0 | 1 => vec![DeviceId(0); self.root.len()],
            2 => self.two_device_cut(copy_weight),
            _ => self.expansion(copy_weight),
        }
    }

    /// The exact objective of a device per group, in ns, copies weighted.
    pub(super) fn evaluate(&self, dev: &[DeviceId], copy_weight: u64) -> u64 {
        let compute: u64 = (0..dev.len())
            .map(|g| self.time[g][dev[g].index()].unwrap_or(1e15 as u64))
            .fold(0, u64::saturating_add);
        let copies: u64 = self
            .reads
            .iter()
            .map(|r| {
                r.destinations(dev)
                    .into_iter()
                    .map(|d| self.copy(r, dev[r.from], d, copy_weight))
                    .fold(0, u64::saturating_add)
            })
            .fold(0, u64::saturating_add);
        compute.saturating_add(copies)
    }

    pub(super) fn allowed(&self, g: usize, d: DeviceId) -> bool {
        self.time[g][d.index()].is_some()
    }

    /// Two devices: one exact cut, device 0 first.
    fn two_device_cut(&self, copy_weight: u64) -> Vec<DeviceId> {
        let (a, b) = (DeviceId(0), DeviceId(1));
        let choice: Vec<(DeviceId, DeviceId)> = (0..self.root.len())
            .map(
                |g| match (&self.fixed[g], self.allowed(g, a), self.allowed(g, b)) {
                    (Some((d, _)), _, _) => (*d, *d),
                    (None, true, true) => (a, b),
                    (None, true, false) => (a, a),
                    (None, _, _) => (b, b),
                },
            )
            .collect();
        self.cut(&choice, copy_weight)
    }

    /// More devices: fastest device each, then expansion moves.
    fn expansion(&self, copy_weight: u64) -> Vec<DeviceId> {
        let mut dev: Vec<DeviceId> = (0..self.root.len())
            .map(|g| match &self.fixed[g] {
                Some((d, _)) => *d,
                None => self
                    .target
                    .device_ids()
                    .filter(|&d| self.allowed(g, d))
                    .min_by_key(|&d| (self.time[g][d.index()], d))
                    .unwrap_or(DeviceId(0)),
            })
            .collect();
        let mut best = self.evaluate(&dev, copy_weight);
        for _ in 0..MAX_ROUNDS {
            let mut improved = false;
            for d in self.target.device_ids() {
                let choice: Vec<(DeviceId, DeviceId)> = (0..dev.len())
                    .map(|g| match self.fixed[g].is_none() && self.allowed(g, d) {
                        true => (dev[g], d),
                        false => (dev[g], dev[g]),
                    })
                    .collect();
                if choice.iter().all(|(x, y)| x == y) {
                    continue;
                }
                let candidate = self.cut(&choice, copy_weight);
                let cost = self.evaluate(&candidate, copy_weight);
                if cost < best {
                    (dev, best, improved) = (candidate, cost, true);
                }
            }
            if !improved {
                break;
            }
        }
        dev
    }

    /// One binary cut: each group takes `choice[g].0` (first) or `.1` (second).
    fn cut(&self, choice: &[(DeviceId, DeviceId)], w: u64) -> Vec<DeviceId> {
        let mut p = CutProblem::new(choice.len());
        let var = |g: usize| g as u32;
        for (g, &(a, b)) in choice.iter().enumerate() {
            if a != b {
                p.if_first(var(g), self.time[g][a.index()].unwrap_or(0));
                p.if_second(var(g), self.time[g][b.index()].unwrap_or(0));
            }
        }
        for read in &self.reads {
            let u = read.from;
            let (ua, ub) = choice[u];
            // Per destination device (a short list, in first-seen order).
            let mut dests: Vec<(DeviceId, Dest)> = Vec::new();
            for &r in &read.readers {
                let (ra, rb) = choice[r];
                if ra == rb {
                    dest_entry(&mut dests, ra).always = true;
                } else {
                    dest_entry(&mut dests, ra).first.push(var(r));
                    dest_entry(&mut dests, rb).second.push(var(r));
                }
            }
            for (e, d) in dests {
                let (ca, cb) = (self.copy(read, ua, e, w), self.copy(read, ub, e, w));
                let mixed = !d.first.is_empty() && !d.second.is_empty();
                if d.always || mixed {
                    // Needed whatever the readers do (mixed: assumed so, an
                    // upper bound; expansion and two-device cuts never mix).
                    if ua != ub {
                        p.if_first(var(u), ca);
                        p.if_second(var(u), cb);
                    }
                } else if d.second.is_empty() {
                    // c_a·[u first] + c_b·[u second], when any reader stays.
                    p.if_any_first(&d.first, ca);
                    p.if_second_and_any_first(var(u), &d.first, cb.saturating_sub(ca));
                } else {
                    p.if_any_second(&d.second, cb);
                    p.if_first_and_any_second(var(u), &d.second, ca.saturating_sub(cb));
                }
            }
        }
        let (second, _) = p.solve();
        choice
            .iter()
            .zip(second)
            .map(|(&(a, b), s)| if s { b } else { a })
            .collect()
    }
}

/// The readers of one tensor that would be on one destination device.
#[derive(Default)]
struct Dest {
    /// Some reader is there whatever the cut decides.
    always: bool,
    /// Readers there when they take their first choice.
    first: Vec<u32>,
    /// Readers there when they take their second choice.
    second: Vec<u32>,
}

fn dest_entry(dests: &mut Vec<(DeviceId, Dest)>, e: DeviceId) -> &mut Dest {
    let i = match dests.iter().position(|(d, _)| *d == e) {
        Some(i) => i,
        None => {
            dests.push((e, Dest::default()));
            dests.len() - 1
        }
    };
    &mut dests[i].1
}

//! Lifetimes of compute buffers over the plan's global step order, with
//! in-place reuse.
//!
//! Steps are numbered globally: split 0's copies, split 0's steps, split 1's
//! copies, ... A buffer lives from the step writing it to the last step reading
//! it (reads through views count for the owner); graph outputs live to the end.
//!
//! In-place (invariant): a step's result takes over the bytes of one operand
//! only when `liveness::in_place_operand` allows the op (for fused kernels: an
//! input no row normalisation reads), that operand's owner is an intermediate
//! compute buffer dying at this step, it is read as the owner itself or a view
//! at offset 0 with the result's exact packed layout, and no other operand reads
//! the same owner.

use super::tensors::TensorTable;
use crate::assign::Assignment;
use crate::liveness::{InPlace, Lifetime, Liveness, OrderError, Resident, Usage, in_place_operand};
use crate::target::DeviceId;
use ir::layout::contiguous_strides;
use ir::plan::{Expr, FusedKernel, Placement, Split, Step, Work, global_order};
use ir::{Graph, Role, TensorId};

/// One compute buffer: its lifetime and the tensors sharing its bytes.
pub(super) struct Buffer {
    /// Lifetime with aligned size (`tensor` = the first member).
    pub lifetime: Lifetime,
    /// Plan tensors placed at this buffer's offset.
    pub members: Vec<u32>,
}

/// First and last step of every owner, and in-place merges.
pub(super) struct Live {
    first: Vec<usize>,
    last: Vec<usize>,
    parent: Vec<u32>,
    needs_compute: Vec<bool>,
    /// Owners of outputs: their bytes must survive the run, so they donate nothing.
    keep: Vec<bool>,
    /// The in-place merges, in step order: (written tensor, donating owner,
    /// the operand it was read through).
    merges: Vec<(u32, u32, u32)>,
}

/// One step's accesses.
struct Access {
    writes: u32,
    /// Further tensors written (the other results of a `mul_mat` x N step,
    /// which has no donors).
    more_writes: Vec<u32>,
    reads: Vec<u32>,
    /// (operand position, tensor written): the operand may donate its bytes
    /// to that result.
    donors: Vec<(usize, u32)>,
}

fn accesses(table: &TensorTable, splits: &[Split], kernels: &[FusedKernel]) -> Vec<Access> {
    global_order(splits)
        .map(|item| {
            let donors = match item.work {
                // A product-add writes its product into dst before it adds
                // the addend (on a CPU), so no operand may share dst's bytes.
                // An attention reads its operands long after it started
                // writing (a CPU's last kernel writes dst): no donor either.
                // A product-GLU writes its gate product into dst first (on
                // a CPU): the same.
                // A mul_mat x N step writes several results: no donor.
                Work::Copy(_)
                | Work::Step(
                    Step::MulMatAdd { .. }
                    | Step::MulMatGlu { .. }
                    | Step::MulMatMany { .. }
                    | Step::Attention { .. },
                ) => {
                    vec![]
                }
                Work::Step(Step::Op { op, srcs, dst }) => (in_place_operand(op, srcs.len())
                    .into_iter())
                .map(|j| (j, *dst))
                .collect(),
                Work::Step(step @ Step::RopeStore { .. }) => rope_store_donors(table, step),
                Work::Step(Step::Fused { kernel }) => {
                    let k = &kernels[*kernel as usize];
                    let normed: Vec<u32> = k
                        .body
                        .iter()
                        .filter_map(|e| match e {
                            Expr::RmsNorm { input, .. } | Expr::Norm { input, .. } => Some(*input),
                            _ => None,
                        })
                        .collect();
                    (0..k.inputs.len())
                        .filter(|&j| !normed.contains(&(j as u32)))
                        .map(|j| (j, k.output))
                        .collect()
                }
            };
            Access {
                writes: *item.writes(kernels).first().expect("emitted kernels exist"),
                more_writes: item.writes(kernels).get(1..).unwrap_or_default().to_vec(),
                reads: item.reads(kernels).to_vec(),
                donors,
            }
        })
        .collect()
}

/// Computes lifetimes and in-place merges.
pub(super) fn compute(
    table: &TensorTable,
    splits: &[Split],
    kernels: &[FusedKernel],
    graph: &Graph,
) -> Live {
    let n = table.tensors.len();
    let n_graph = graph.len();
    let needs_compute: Vec<bool> = (0..n)
        .map(|t| {
            let pt = &table.tensors[t];
            table.owner[t] as usize == t
                && pt.placement != Placement::Fused
                && (t >= n_graph
                    || matches!(pt.role, Role::Intermediate | Role::Output)
                        && !graph.tensor(TensorId(t as u32)).is_leaf())
        })
        .collect();
    let steps = accesses(table, splits, kernels);
    let end = steps.len().saturating_sub(1);
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (s, a) in steps.iter().enumerate() {
        for &w in [a.writes].iter().chain(&a.more_writes) {
            let w = table.owner[w as usize] as usize;
            first[w] = first[w].min(s);
            last[w] = last[w].max(s);
        }
        for &r in &a.reads {
            let o = table.owner[r as usize] as usize;
            last[o] = last[o].max(s);
        }
    }
    let mut keep = vec![false; n];
    for f in first.iter_mut().filter(|f| **f == usize::MAX) {
        *f = 0;
    }
    // An output (or a view that is an output) keeps its owner's bytes to the end.
    for (t, pt) in table.tensors.iter().enumerate().take(n_graph) {
        if pt.role == Role::Output {
            let o = table.owner[t] as usize;
            last[o] = end;
            keep[o] = true;
        }
    }
    let mut live = Live {
        first,
        last,
        parent: (0..n as u32).collect(),
        needs_compute,
        keep,
        merges: Vec::new(),
    };
    for (s, a) in steps.iter().enumerate() {
        for w in [a.writes].iter().chain(&a.more_writes) {
            let mut candidates = a.donors.iter().filter(|&&(_, to)| to == *w);
            if let Some((j, donor)) =
                candidates.find_map(|&(j, _)| Some((j, live.donor(table, a, (j, *w), s)?)))
            {
                let root = live.find(donor);
                live.parent[*w as usize] = root;
                live.merges.push((*w, donor, a.reads[j]));
            }
        }
    }
    live
}

/// A rope-and-store step's donors: each rope whose result no store in the
/// step reads (a chained store rotates its rope's operand while the rope
/// writes, so that rope works out of place) may rotate its source in place.
fn rope_store_donors(table: &TensorTable, step: &Step) -> Vec<(usize, u32)> {
    let ops = step.ops();
    let stored = |rope: u32| {
        (ops.iter()).any(|&(op, _, srcs)| {
            *op == ir::Op::SetRows
                && srcs
                    .get(1)
                    .is_some_and(|&r| table.owner[r as usize] == rope)
        })
    };
    let mut donors = Vec::new();
    let mut at = 0;
    for &(op, dst, srcs) in &ops {
        if matches!(op, ir::Op::Rope(_)) && !stored(dst) {
            donors.push((at, dst));
        }
        at += srcs.len();
    }
    donors
}

impl Live {
    fn find(&self, mut t: u32) -> u32 {
        while self.parent[t as usize] != t {
            t = self.parent[t as usize];
        }
        t
    }

    /// The owner operand `j` of step `a` (at step `s`) can donate to its
    /// result `dst`, if any.
    fn donor(
        &self,
        table: &TensorTable,
        a: &Access,
        (j, dst): (usize, u32),
        s: usize,
    ) -> Option<u32> {
        let dst = dst as usize;
        let src = *a.reads.get(j)? as usize;
        let o = table.owner[src] as usize;
        let (ts, td) = (&table.tensors[src], &table.tensors[dst]);
        let packed = contiguous_strides(td.dtype, td.ne) == Some(td.nb);
        let ok = self.needs_compute[o]
            && self.needs_compute[dst]
            && o != dst
            && !self.keep[o]
            && self.last[o] == s
            && table.view_offset[src] == 0
            && (ts.dtype, ts.ne, ts.nb) == (td.dtype, td.ne, td.nb)
            && packed
            && (table.tensors[o].dtype, table.tensors[o].ne) == (td.dtype, td.ne)
            && a.reads
                .iter()
                .enumerate()
                .all(|(k, &r)| k == j || table.owner[r as usize] as usize != o);
        ok.then_some(o as u32)
    }

    /// The compute buffers of `device`, merged members together, in id order.
    pub fn buffers_on(&self, device: DeviceId, alignment: u64, table: &TensorTable) -> Vec<Buffer> {
        let mut by_root: std::collections::BTreeMap<u32, Buffer> =
            std::collections::BTreeMap::new();
        for t in 0..table.tensors.len() {
            if !self.needs_compute[t] || table.tensors[t].device != device {
                continue;
            }
            let root = self.find(t as u32);
            let pt = &table.tensors[t];
            let layout = ir::Layout {
                dtype: pt.dtype,
                ne: pt.ne,
                nb: pt.nb,
            };
            let size = layout.span_bytes().div_ceil(alignment.max(1)) * alignment.max(1);
            let b = by_root.entry(root).or_insert_with(|| Buffer {
                lifetime: Lifetime {
                    tensor: TensorId(root),
                    size,
                    first: self.first[t],
                    last: self.last[t],
                },
                members: vec![],
            });
            b.lifetime.size = b.lifetime.size.max(size);
            b.lifetime.first = b.lifetime.first.min(self.first[t]);
            b.lifetime.last = b.lifetime.last.max(self.last[t]);
            b.members.push(t as u32);
        }
        by_root.into_values().collect()
    }
}

/// This analysis on one device: lifetimes of the compute tensors of `graph`
/// run in `order` (one split, no copies, no fusion), the in-place merges, and
/// the leafs of the other arenas. Sizes are aligned up to `alignment`. Steps
/// are the plan's: the order's non-view nodes (views run nothing; a read
/// through a view counts at the step reading the view).
///
/// Fails, listing every problem, when `order` is not an execution order of
/// `graph`'s nodes (an unknown id, a leaf, a repeat, a missing node, or a node
/// before one of its sources). `graph` is expected to have passed `ir::verify`.
pub fn compute_liveness(
    graph: &Graph,
    order: &[TensorId],
    alignment: u64,
) -> Result<Liveness, OrderError> {
    crate::liveness::check_order(graph, order)?;
    let device = DeviceId(0);
    let assignment = Assignment {
        device: vec![device; graph.len()],
        reason: vec![String::new(); graph.len()],
        parts: Vec::new(),
    };
    let table = TensorTable::new(graph, &assignment);
    let steps = (order.iter())
        .filter_map(|&id| {
            let t = graph.tensor(id);
            let op = t.op.filter(|op| !op.is_view())?;
            Some(Step::Op {
                op,
                dst: id.0,
                srcs: t.srcs.iter().map(|s| s.0).collect(),
            })
        })
        .collect();
    let split = Split {
        device,
        stream: 0,
        copies: Vec::new(),
        waits: Vec::new(),
        records: Vec::new(),
        steps,
    };
    let live = compute(&table, std::slice::from_ref(&split), &[], graph);
    let size = |t: usize| {
        let pt = &table.tensors[t];
        let layout = ir::Layout {
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        };
        layout.span_bytes().div_ceil(alignment.max(1)) * alignment.max(1)
    };
    let mut tensors: Vec<Lifetime> = (0..graph.len())
        .filter(|&t| live.needs_compute[t])
        .map(|t| Lifetime {
            tensor: TensorId(t as u32),
            size: size(t),
            first: live.first[t],
            last: live.last[t],
        })
        .collect();
    tensors.sort_by_key(|l| (l.first, l.tensor));
    let mut buffers = live.buffers_on(device, alignment, &table);
    buffers.sort_by_key(|b| (b.lifetime.first, b.lifetime.tensor));
    let mut buffer_of = vec![None; graph.len()];
    for (k, b) in buffers.iter().enumerate() {
        for &m in &b.members {
            buffer_of[m as usize] = Some(k);
        }
    }
    for id in graph.ids() {
        if graph.tensor(id).view.is_some() {
            buffer_of[id.index()] = buffer_of[table.owner[id.index()] as usize];
        }
    }
    let buffers: Vec<Lifetime> = buffers.into_iter().map(|b| b.lifetime).collect();
    let in_place = (live.merges.iter())
        .map(|&(node, reuses, via)| InPlace {
            node: TensorId(node),
            reuses: TensorId(reuses),
            via: TensorId(via),
        })
        .collect();
    let resident = (graph.leafs())
        .map(|id| Resident {
            tensor: id,
            usage: Usage::of(graph.tensor(id).role),
            size: size(id.index()),
        })
        .collect();
    Ok(Liveness {
        n_steps: split.steps.len(),
        tensors,
        buffers,
        buffer_of,
        in_place,
        resident,
    })
}

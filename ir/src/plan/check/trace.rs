//! The plan as a flat list of accesses over a global step counter: split by
//! split, its copies, then its steps ([`Plan::global_order`], which is plain
//! data access and no compiler pass, so the checker stays independent). Families 3 (order), 4 (lifetime), 8 and 9
//! (streams, race) and 10 (partial sums) read it.

use crate::Op;
use crate::plan::{Plan, Step, Work};

/// What one global step reads and writes (only tensor indices in range).
pub(super) struct Access {
    /// The split's device index.
    pub device: u32,
    /// The stream it runs on (as the plan says; may be out of range).
    pub stream: u32,
    /// Events waited on before it runs (as the plan says).
    pub waits: Vec<u32>,
    /// Events recorded after it runs (as the plan says).
    pub records: Vec<u32>,
    /// `split S copy K`, `split S step K (op)`, for messages.
    pub label: String,
    /// True for a copy.
    pub is_copy: bool,
    /// True for a collective's participant, which reads its parts in place
    /// on other devices (allowed where the devices share memory).
    pub reads_peers: bool,
    /// True for an `all_reduce_sum` participant: what it reads are partial
    /// sums, which only such participants may read.
    pub sums_parts: bool,
    /// The op a step runs (`None` for copies and fused kernels).
    pub op: Option<Op>,
    /// The fused kernel a step runs.
    pub kernel: Option<u32>,
    /// Tensors read.
    pub reads: Vec<u32>,
    /// Tensors written.
    pub writes: Vec<u32>,
}

/// Every copy and step of `plan`, in execution order.
pub(super) fn accesses(plan: &Plan) -> Vec<Access> {
    let n = plan.tensors.len();
    let in_range = |t: &u32| (*t as usize) < n;
    plan.global_order()
        .map(|item| {
            let (s, k) = (item.split, item.position);
            let split = &plan.splits[s];
            // A chained store's rows are its rope's result, which the step
            // itself writes: the kernel rotates the rope's operands instead
            // of reading them (`Plan::chained_rope`), so they are no read.
            let chained: Vec<u32> = match item.work {
                Work::Step(step @ Step::RopeStore { .. }) => {
                    let ops = step.ops();
                    (0..ops.len())
                        .filter(|&j| plan.chained_rope(&ops, j).is_some())
                        .map(|j| ops[j].2[1])
                        .collect()
                }
                _ => Vec::new(),
            };
            let reads = (item.reads(&plan.kernels).iter().copied())
                .filter(in_range)
                .filter(|t| !chained.contains(t))
                .collect();
            let writes = (item.writes(&plan.kernels).iter().copied()).filter(in_range).collect();
            match item.work {
                Work::Copy(copy) => Access {
                    device: split.device.0,
                    stream: copy.stream,
                    waits: copy.wait.clone(),
                    records: copy.record.into_iter().collect(),
                    label: format!("split {s} copy {k}"),
                    is_copy: true,
                    reads_peers: false,
                    sums_parts: false,
                    op: None,
                    kernel: None,
                    reads,
                    writes,
                },
                Work::Step(step) => {
                    let at = k as u32;
                    Access {
                        device: split.device.0,
                        stream: split.stream,
                        waits: (split.waits.iter().filter(|w| w.before == at))
                            .map(|w| w.event)
                            .collect(),
                        records: (split.records.iter().filter(|r| r.after == at))
                            .map(|r| r.event)
                            .collect(),
                        label: match step {
                            Step::Op { op, .. } => format!("split {s} step {k} ({op})"),
                            Step::Fused { kernel } => {
                                format!("split {s} step {k} (fused kernel {kernel})")
                            }
                            Step::MulMatAdd { .. } => format!("split {s} step {k} (mul_mat + add)"),
                            Step::Attention { .. } => format!("split {s} step {k} (attention)"),
                            Step::MulMatGlu { .. } => format!("split {s} step {k} (mul_mat + glu)"),
                            Step::MulMatMany { dsts, .. } => {
                                format!("split {s} step {k} (mul_mat x {})", dsts.len())
                            }
                            Step::RopeStore { dsts, .. } => {
                                format!("split {s} step {k} (rope + set_rows x {})", dsts.len())
                            }
                        },
                        is_copy: false,
                        reads_peers: matches!(step, Step::Op { op, .. } if op.collective().is_some()),
                        sums_parts: matches!(
                            step,
                            Step::Op {
                                op: Op::AllReduceSum { .. } | Op::ReduceScatterSum { .. },
                                ..
                            }
                        ),
                        op: match step {
                            Step::Op { op, .. } => Some(*op),
                            // Not an op of its own: a partial sum it reads is
                            // refused (mul_mat of a share is no share of it).
                            Step::Fused { .. }
                            | Step::MulMatAdd { .. }
                            | Step::MulMatGlu { .. }
                            | Step::MulMatMany { .. }
                            | Step::RopeStore { .. }
                            | Step::Attention { .. } => None,
                        },
                        kernel: match step {
                            Step::Fused { kernel } => Some(*kernel),
                            Step::Op { .. }
                            | Step::MulMatAdd { .. }
                            | Step::MulMatGlu { .. }
                            | Step::MulMatMany { .. }
                            | Step::RopeStore { .. }
                            | Step::Attention { .. } => None,
                        },
                        reads,
                        writes,
                    }
                }
            }
        })
        .collect()
}

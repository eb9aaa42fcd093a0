//! The steps of a plan that write into host state (KV caches), found once
//! at load: what `state_journal.rs` saves before a run that can fail mid-run.
//!
//! Invariant: empty unless the plan has a device whose runs can fail
//! halfway; a writer is always on a host device.

use ir::Role;
use ir::plan::{Placement, Step};

/// A step that writes into host state: found once at load
/// ([`state_writers`]), its ranges read before each run.
pub(crate) struct StateWriter {
    /// The host device it runs on.
    pub(crate) device: usize,
    /// Its op (`set_rows` or `cpy`).
    pub(crate) op: ir::Op,
    /// The state tensor (or view of one) it writes into.
    pub(crate) dest: u32,
    /// Its sources.
    pub(crate) srcs: Vec<u32>,
}

/// The tensor owning `t`'s bytes.
pub(crate) fn root_of(plan: &ir::plan::Plan, mut t: u32) -> u32 {
    while let Some(Placement::View { of, .. }) = plan.tensors.get(t as usize).map(|p| &p.placement)
    {
        t = *of;
    }
    t
}

/// Every step of `plan` on a host device (`host[d]`) that writes into a
/// state tensor; empty unless `can_fail_mid_run` (a remote or CUDA device).
pub(crate) fn state_writers(
    plan: &ir::plan::Plan,
    host: &[bool],
    can_fail_mid_run: bool,
) -> Vec<StateWriter> {
    if !can_fail_mid_run {
        return Vec::new();
    }
    let mut writers = Vec::new();
    for split in &plan.splits {
        let device = split.device.index();
        if !host.get(device).copied().unwrap_or(false) {
            continue;
        }
        for (op, _, srcs) in split.steps.iter().flat_map(Step::ops) {
            let Some(&dest) = op.writes_into_source().and_then(|k| srcs.get(k)) else {
                continue;
            };
            let root = root_of(plan, dest) as usize;
            if plan
                .tensors
                .get(root)
                .is_some_and(|t| t.role == Role::State)
            {
                writers.push(StateWriter {
                    device,
                    op: *op,
                    dest,
                    srcs: srcs.to_vec(),
                });
            }
        }
    }
    writers
}

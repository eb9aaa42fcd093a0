//! Undoing a failed run's writes into host state (KV caches).
//!
//! A plan with a remote server or a GPU can fail in the middle of a run: a
//! server dies, a kernel faults. By then the host devices may already have
//! written their part of the run into state (a `set_rows` storing this
//! token's keys). Before such a run, [`Runtime::journal_host_state`] saves the
//! bytes every state write of the run may touch on a host device; when the
//! run fails, [`Runtime::undo`] writes them back, so the host state is what it
//! was before the run, byte for byte, and a retry starts from the same state.
//!
//! What is saved, per step that writes into a state tensor on a host device
//! (`set_rows`, `cpy` into a state view):
//! - a `set_rows` whose row indices are a graph input: the destination rows
//!   those indices name, in every plane (the indices are set before the run;
//!   decode writes one row per cache, so this costs a row per cache);
//! - anything else: the destination's whole span.
//!
//! The steps are found once at load (`state_writers.rs`); a run only reads
//! their index inputs and copies the rows. Saving more bytes than a run
//! writes is harmless: every saved byte is its value before the run.
//! Invariants: a journal is only taken for plans with a device that can fail
//! mid-run (remote or CUDA); it reads and writes host
//! memory through the devices' `get_tensor`/`set_tensor` within the spans the
//! checker proved, and an index outside its table saves nothing (the run
//! refuses it before any step).

use crate::RuntimeError;
use crate::device::TensorBytes;
use crate::runtime::{Runtime, layout_of};
use crate::state_writers::root_of;
use ir::Role;

/// The bytes a run may overwrite in host state, as they were before it.
pub(crate) struct StateJournal {
    /// (device, address, bytes before the run).
    saved: Vec<(usize, usize, Vec<u8>)>,
}

impl Runtime {
    /// Saves what this run may overwrite in host state (see the module doc);
    /// `None` when the plan cannot fail mid-run or writes no host state.
    pub(crate) fn journal_host_state(&self) -> Result<Option<StateJournal>, RuntimeError> {
        let mut saved = Vec::new();
        for w in &self.state_writers {
            for (addr, len) in self.written_ranges(&w.op, w.dest, &w.srcs)? {
                let mut bytes = vec![0u8; len];
                // SAFETY: the range lies in the destination's span, which
                // the checker proved inside its arena.
                let tensor = unsafe { TensorBytes::new(addr as *mut u8, len) };
                self.devices[w.device].get_tensor(tensor, 0, &mut bytes)?;
                saved.push((w.device, addr, bytes));
            }
        }
        Ok((!saved.is_empty()).then_some(StateJournal { saved }))
    }

    /// The (address, length) ranges of `dest` that `op` may write.
    fn written_ranges(
        &self,
        op: &ir::Op,
        dest: u32,
        srcs: &[u32],
    ) -> Result<Vec<(usize, usize)>, RuntimeError> {
        let layout = layout_of(&self.plan, dest);
        let base = self.addr[dest as usize] as usize;
        let whole = vec![(base, layout.span_bytes() as usize)];
        let idx = match (op, srcs.get(2)) {
            (ir::Op::SetRows, Some(&idx)) => idx,
            _ => return Ok(whole),
        };
        let idx_root = root_of(&self.plan, idx) as usize;
        let idx_device = self.plan.tensors[idx as usize].device.index();
        if self.plan.tensors[idx_root].role != Role::Input || !self.host[idx_device] {
            return Ok(whole);
        }
        let idx_layout = layout_of(&self.plan, idx);
        let mut raw = vec![0u8; idx_layout.span_bytes() as usize];
        // SAFETY: the index tensor's span lies in its arena (checker).
        let tensor = unsafe { TensorBytes::new(self.addr[idx as usize], raw.len()) };
        self.devices[idx_device].get_tensor(tensor, 0, &mut raw)?;
        let [_, n_rows, n2, n3] = layout.ne;
        let [_, nb1, nb2, nb3] = layout.nb;
        let span = layout.span_bytes();
        let mut rows: Vec<i64> = (raw.chunks_exact(4))
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .filter(|r| (0..n_rows).contains(r))
            .collect();
        rows.sort_unstable();
        rows.dedup();
        let mut ranges = Vec::new();
        for r in rows {
            for i3 in 0..n3.max(1) {
                for i2 in 0..n2.max(1) {
                    let at = r as u64 * nb1 + i2 as u64 * nb2 + i3 as u64 * nb3;
                    // A row's bytes, or to the span's end (a strided view's
                    // row may be shorter than nb1: more is saved, harmlessly).
                    let len = nb1.min(span.saturating_sub(at));
                    if len > 0 {
                        ranges.push((base + at as usize, len as usize));
                    }
                }
            }
        }
        Ok(ranges)
    }

    /// Writes back what `journal` saved.
    pub(crate) fn undo(&self, journal: StateJournal) {
        for (device, addr, bytes) in journal.saved.into_iter().rev() {
            // SAFETY: saved from this range by `journal_host_state`.
            let tensor = unsafe { TensorBytes::new(addr as *mut u8, bytes.len()) };
            // Host memory, the range it was read from: this cannot fail.
            let restored = self.devices[device].set_tensor(tensor, 0, &bytes);
            debug_assert!(restored.is_ok(), "{restored:?}");
        }
    }
}

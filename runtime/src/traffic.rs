//! The bytes a run must bring from memory: what every step reads of the
//! weights and of the state (the KV cache), which no earlier step of the run
//! wrote and which a cache of a few MiB cannot hold from one token to the
//! next. Divided by the memcpy bandwidth it is the time floor of a
//! memory-bound run (decode): `ggplan bench` and `ggplan generate` print the
//! ratio of the measured time to it.
//!
//! Counting rules, per step and operand whose owner is a weight or state:
//! - `get_rows` reads only the gathered rows of its table (dst's row count
//!   times one row of the table);
//! - the operand an op writes into (`set_rows`' first, `cpy`'s second:
//!   `Op::writes_into_source`) is written, not read: it does not count;
//! - every other read counts the operand's elements in bytes (a view of the
//!   cache counts the rows it covers, so a decode context bucket counts its
//!   window; a transposed view counts its values, not the span between its
//!   first and last byte);
//! - a tensor read by two steps counts twice (each read goes to memory when
//!   the model is larger than the caches, as the output head tied to the
//!   token embedding is);
//! - copies between devices, activations and outputs do not count.

use crate::steps::PreparedStep;
use ir::plan::Plan;
use ir::{Op, Role};

/// Bytes of weights and state the steps read per run (module doc).
pub fn memory_read_bytes(plan: &Plan, steps: &[PreparedStep]) -> u64 {
    let persistent = |t: u32| {
        matches!(
            plan.tensors[plan.owner(t) as usize].role,
            Role::Weight | Role::State
        )
    };
    // Bytes of the values of `t`'s view (whole rows of blocks).
    let values = |t: u32| {
        let pt = &plan.tensors[t as usize];
        let rows = (pt.ne[1].max(0) as u64)
            .saturating_mul(pt.ne[2].max(0) as u64)
            .saturating_mul(pt.ne[3].max(0) as u64);
        let row = pt.dtype.row_bytes(pt.ne[0].max(0) as u64).unwrap_or(0);
        rows.saturating_mul(row)
    };
    let mut bytes = 0u64;
    for step in steps.iter().filter(|s| s.kind != "copy") {
        for (i, &src) in step.srcs.iter().enumerate() {
            let written = step.op.and_then(|op| op.writes_into_source()) == Some(i);
            if !persistent(src) || written {
                continue;
            }
            let rows_of_table = matches!(step.op, Some(Op::GetRows | Op::GetRowsPart { .. }));
            bytes = bytes.saturating_add(if rows_of_table && i == 0 {
                let table = &plan.tensors[src as usize];
                let dst = &plan.tensors[step.dst as usize];
                let rows = (dst.ne[1] * dst.ne[2] * dst.ne[3]).max(0) as u64;
                rows.saturating_mul(
                    table
                        .dtype
                        .row_bytes(table.ne[0].max(0) as u64)
                        .unwrap_or(0),
                )
            } else {
                values(src)
            });
        }
    }
    bytes
}

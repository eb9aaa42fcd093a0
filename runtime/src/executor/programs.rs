//! Stream programs: a plan's work cut per stream, in global order, into the
//! segments the executor hands to devices.
//!
//! Invariants: every prepared step and copy lands in exactly one segment of
//! exactly one program; a compute segment is a run of one split's steps with
//! waits only before its first step and records only after its last; a copy
//! segment is one copy. Prepared steps are numbered as
//! `steps::Preparer::prepare_all` numbers them: split by split, its copies,
//! then its steps.

use ir::plan::{Plan, StreamKind};
use std::ops::Range;

/// A run of steps handed to a device at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Prepared steps (global indices; copies count).
    pub steps: Range<usize>,
    /// Events waited on before it starts.
    pub waits: Vec<u32>,
    /// Events recorded once it is done.
    pub records: Vec<u32>,
}

/// One stream's work, in global order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamProgram {
    /// Index in the plan's streams.
    pub stream: u32,
    /// Its device.
    pub device: usize,
    /// Compute or copy.
    pub kind: StreamKind,
    /// Segments, in order.
    pub segments: Vec<Segment>,
}

/// Cuts `plan` into stream programs (streams with no work are left out).
/// Prepared steps are numbered as `steps::Preparer::prepare_all` numbers
/// them: split by split, its copies, then its steps.
pub fn programs(plan: &Plan) -> Vec<StreamProgram> {
    let mut out: Vec<StreamProgram> = plan
        .streams
        .iter()
        .enumerate()
        .map(|(i, s)| StreamProgram {
            stream: i as u32,
            device: s.device.index(),
            kind: s.kind,
            segments: Vec::new(),
        })
        .collect();
    let mut next = 0usize;
    for split in &plan.splits {
        for copy in &split.copies {
            out[copy.stream as usize].segments.push(Segment {
                steps: next..next + 1,
                waits: copy.wait.clone(),
                records: copy.record.into_iter().collect(),
            });
            next += 1;
        }
        let program = &mut out[split.stream as usize].segments;
        let mut open: Option<Segment> = None;
        for k in 0..split.steps.len() {
            let at = k as u32;
            let waits: Vec<u32> = (split.waits.iter().filter(|w| w.before == at))
                .map(|w| w.event)
                .collect();
            if !waits.is_empty() {
                program.extend(open.take());
            }
            let seg = open.get_or_insert_with(|| Segment {
                steps: next + k..next + k,
                waits,
                records: Vec::new(),
            });
            seg.steps.end = next + k + 1;
            let records: Vec<u32> = (split.records.iter().filter(|r| r.after == at))
                .map(|r| r.event)
                .collect();
            if !records.is_empty() {
                seg.records = records;
                program.extend(open.take());
            }
        }
        program.extend(open.take());
        next += split.steps.len();
    }
    out.retain(|p| !p.segments.is_empty());
    out
}

//! Family 8, streams and events: every split runs on its device's compute
//! stream, every copy on a copy stream of its source's or destination's
//! device, every event is recorded exactly once and only waited on by work
//! that comes later in global order than its record (so the streams can never
//! wait on each other in a cycle), and waits and records sit on steps that
//! exist, sorted.
//!
//! Its result, the happens-before relation as vector clocks, is what the race
//! family proves orders against.

use super::Checker;
use super::ViolationKind::Sync;
use super::trace::Access;
use crate::plan::StreamKind;

/// Happens-before over the global accesses: `clock[a][s]` is the number of
/// accesses of stream `s` that happen before or at access `a`, and
/// `position[a]` the index of access `a` on its own stream. Access `p` happens
/// before access `a` iff `clock[a][stream(p)] > position[p]`.
pub(super) struct HappensBefore {
    pub clock: Vec<Vec<u32>>,
    pub position: Vec<u32>,
}

impl HappensBefore {
    /// True when access `p` (on stream `sp`) happens before or is access `a`.
    pub fn ordered(&self, p: usize, sp: usize, a: usize) -> bool {
        self.clock[a].get(sp).copied().unwrap_or(0) > self.position[p]
    }
}

/// The most (access, stream) clock entries the checker builds (512 MiB).
const MAX_CLOCK_ENTRIES: usize = 1 << 27;

pub(super) fn check(c: &mut Checker<'_>, accesses: &[Access]) -> Option<HappensBefore> {
    let plan = c.plan;
    let n_streams = plan.streams.len();
    let before = c.out.len();
    let mut seen = std::collections::BTreeSet::new();
    for (i, st) in plan.streams.iter().enumerate() {
        if st.device.index() >= plan.devices.len() {
            let msg = format!("names device {}, which the plan does not have", st.device);
            c.problem(Sync, format!("stream {i}"), msg);
        } else if !seen.insert((st.device, st.kind)) {
            let msg = format!(
                "is a second {} stream of {}",
                st.kind,
                c.device_name(st.device.0)
            );
            c.problem(Sync, format!("stream {i}"), msg);
        }
    }
    for (s, split) in plan.splits.iter().enumerate() {
        let who = format!("split {s}");
        match plan.streams.get(split.stream as usize) {
            Some(st) if st.kind == StreamKind::Compute && st.device == split.device => {}
            _ => {
                let msg = format!(
                    "runs on stream {}, which is not the compute stream of {}",
                    split.stream,
                    c.device_name(split.device.0)
                );
                c.problem(Sync, who.clone(), msg);
            }
        }
        for (k, copy) in split.copies.iter().enumerate() {
            let from = c.device_of(copy.src);
            match plan.streams.get(copy.stream as usize) {
                Some(st)
                    if st.kind == StreamKind::Copy
                        && (st.device == split.device || Some(st.device.0) == from) => {}
                _ => {
                    let msg = format!(
                        "runs on stream {}, which is not a copy stream of its source's or \
                         destination's device",
                        copy.stream
                    );
                    c.problem(Sync, format!("{who} copy {k}"), msg);
                }
            }
        }
        let n_steps = split.steps.len() as u32;
        let sorted = |keys: Vec<(u32, u32)>| keys.windows(2).all(|w| w[0] < w[1]);
        if split.waits.iter().any(|w| w.before >= n_steps)
            || split.records.iter().any(|r| r.after >= n_steps)
        {
            let msg = format!("has a wait or record on a step past its {n_steps} steps");
            c.problem(Sync, who.clone(), msg);
        }
        if !sorted(split.waits.iter().map(|w| (w.before, w.event)).collect())
            || !sorted(split.records.iter().map(|r| (r.after, r.event)).collect())
        {
            let msg = "has waits or records out of order or repeated".to_string();
            c.problem(Sync, who, msg);
        }
    }

    // Each event recorded exactly once, before every wait on it. The count
    // comes from the file: it is checked against the records before any
    // table of that size exists.
    let n_events = plan.n_events as usize;
    let n_records: usize = accesses.iter().map(|a| a.records.len()).sum();
    if n_events > n_records {
        let msg = format!("declares {n_events} events but records only {n_records}");
        c.problem(Sync, "events", msg);
        return None;
    }
    let mut recorded_at: Vec<Option<usize>> = vec![None; n_events];
    for (a, access) in accesses.iter().enumerate() {
        for &e in &access.waits {
            match recorded_at.get(e as usize) {
                None => {
                    let msg = format!("waits on event {e}, past the plan's {n_events} events");
                    c.problem(Sync, access.label.clone(), msg);
                }
                Some(None) => {
                    let msg = format!(
                        "waits on event {e}, which nothing earlier in global order records: \
                         its stream could wait forever"
                    );
                    c.problem(Sync, access.label.clone(), msg);
                }
                Some(Some(_)) => {}
            }
        }
        for &e in &access.records {
            match recorded_at.get_mut(e as usize) {
                None => {
                    let msg = format!("records event {e}, past the plan's {n_events} events");
                    c.problem(Sync, access.label.clone(), msg);
                }
                Some(Some(first)) => {
                    let msg = format!(
                        "records event {e}, which {} records already",
                        accesses[*first].label
                    );
                    c.problem(Sync, access.label.clone(), msg);
                }
                Some(slot) => *slot = Some(a),
            }
        }
    }
    for (e, at) in recorded_at.iter().enumerate() {
        if at.is_none() {
            c.problem(Sync, format!("event {e}"), "is never recorded".to_string());
        }
    }
    if c.out.len() > before || accesses.iter().any(|a| a.stream as usize >= n_streams) {
        return None; // no sound order to prove races against
    }
    // One clock entry per (access, stream); streams are at most two per device.
    if accesses.len().saturating_mul(n_streams) > MAX_CLOCK_ENTRIES {
        let msg = format!(
            "has {} accesses on {n_streams} streams, more than the checker's {MAX_CLOCK_ENTRIES} \
             clock entries",
            accesses.len()
        );
        c.problem(Sync, "streams", msg);
        return None;
    }

    let mut clock: Vec<Vec<u32>> = Vec::with_capacity(accesses.len());
    let mut position = Vec::with_capacity(accesses.len());
    let mut last_on: Vec<Option<usize>> = vec![None; n_streams];
    for (a, access) in accesses.iter().enumerate() {
        let s = access.stream as usize;
        let mut vc = match last_on[s] {
            Some(p) => clock[p].clone(),
            None => vec![0u32; n_streams],
        };
        for &e in &access.waits {
            if let Some(Some(r)) = recorded_at.get(e as usize) {
                let theirs: &Vec<u32> = &clock[*r];
                vc.iter_mut()
                    .zip(theirs)
                    .for_each(|(m, t)| *m = (*m).max(*t));
            }
        }
        let pos = last_on[s].map_or(0, |p: usize| position[p] + 1);
        vc[s] = pos + 1;
        position.push(pos);
        clock.push(vc);
        last_on[s] = Some(a);
    }
    Some(HappensBefore { clock, position })
}

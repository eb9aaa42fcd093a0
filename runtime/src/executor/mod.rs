//! The executor: runs a plan's streams concurrently, ordered only by the
//! plan's events. Device-agnostic: it walks each stream's work in global
//! order, waits on and records events, and hands runs of steps and copies to
//! the devices ([`crate::device::Device`]); devices only run them.
//!
//! A compute stream's work is cut into *segments*: maximal runs of one
//! split's steps with waits only before the first and records only after the
//! last, each handed to the device as one job (one barrier per step, no event
//! traffic inside). A copy stream runs one copy per segment.
//!
//! Invariants: every stream thread runs its segments in global order; a
//! segment starts only after every event it waits on was recorded in this
//! run; events are reset before a run starts and every stream has finished
//! when `run` returns; a panic on one stream aborts the others' waits (no
//! hang) and is re-raised on the caller.
//!
//! Fault injection (tests): with a seed, every segment starts after a random
//! delay of up to 200 µs, drawn per stream, so runs explore other
//! interleavings; outputs must not change.

pub mod event;
pub mod trace;

use crate::device::Device;
use crate::device::cpu::CpuDevice;
use crate::steps::PreparedStep;
use event::Event;
use ir::plan::{Plan, StreamKind};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use trace::{Trace, TraceSpan};

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

/// What every stream of one run shares.
#[derive(Clone, Copy)]
struct RunCtx<'a> {
    steps: &'a [PreparedStep],
    devices: &'a [Arc<CpuDevice>],
    /// Fault injection: this run's seed.
    run_seed: Option<u64>,
    start: Instant,
    tracing: bool,
}

/// What a concurrent run needs from the runtime.
pub struct Executor {
    programs: Vec<StreamProgram>,
    events: Vec<Event>,
    abort: AtomicBool,
    /// Fault injection seed (tests), and a counter so every run differs.
    delays: Option<(u64, std::sync::atomic::AtomicU64)>,
}

/// xorshift64*: the delays' random numbers.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

impl Executor {
    /// An executor for `plan` (`delays_seed`: fault injection, for tests).
    pub fn new(plan: &Plan, delays_seed: Option<u64>) -> Executor {
        Executor {
            programs: programs(plan),
            events: (0..plan.n_events).map(|_| Event::default()).collect(),
            abort: AtomicBool::new(false),
            delays: delays_seed.map(|s| (s, std::sync::atomic::AtomicU64::new(0))),
        }
    }

    /// The stream programs.
    pub fn programs(&self) -> &[StreamProgram] {
        &self.programs
    }

    /// True when the plan is one stream with no events: the caller's
    /// single-pool fast path runs it the same way.
    pub fn is_sequential(&self) -> bool {
        self.programs.len() <= 1 && self.events.is_empty()
    }

    /// Runs every stream once; with `trace`, records every segment's steps
    /// and waits (times since `start`).
    pub fn run(
        &self,
        steps: &[PreparedStep],
        devices: &[Arc<CpuDevice>],
        trace: Option<&mut Trace>,
    ) {
        for e in &self.events {
            e.reset();
        }
        self.abort.store(false, Ordering::Release);
        let run = self.delays.as_ref().map(|(seed, n)| {
            let k = n.fetch_add(1, Ordering::Relaxed);
            seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        });
        let ctx = RunCtx {
            steps,
            devices,
            run_seed: run,
            start: Instant::now(),
            tracing: trace.is_some(),
        };
        let ctx = &ctx;
        let spans: Vec<Vec<TraceSpan>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self.programs[1..]
                .iter()
                .map(|p| scope.spawn(move || self.drive(p, ctx)))
                .collect();
            let first = self.drive(&self.programs[0], ctx);
            let mut all = vec![first];
            let mut panic = None;
            for h in handles {
                match h.join() {
                    Ok(s) => all.push(s),
                    Err(p) => panic = panic.or(Some(p)),
                }
            }
            if let Some(p) = panic {
                std::panic::resume_unwind(p);
            }
            all
        });
        if let Some(trace) = trace {
            trace.spans = spans.into_iter().flatten().collect();
        }
    }

    /// Runs one stream's segments; on a panic, aborts every wait and re-raises.
    fn drive(&self, program: &StreamProgram, ctx: &RunCtx<'_>) -> Vec<TraceSpan> {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.drive_inner(program, ctx)
        }));
        match result {
            Ok(spans) => spans,
            Err(p) => {
                self.abort.store(true, Ordering::Release);
                for e in &self.events {
                    e.wake_all();
                }
                std::panic::resume_unwind(p)
            }
        }
    }

    fn drive_inner(&self, program: &StreamProgram, ctx: &RunCtx<'_>) -> Vec<TraceSpan> {
        let RunCtx {
            steps,
            devices,
            run_seed,
            start,
            tracing,
        } = *ctx;
        let device = &devices[program.device];
        if program.kind == StreamKind::Compute && devices.len() > 1 {
            device.pin_caller();
        }
        let mut rng = run_seed.map(|s| s ^ (u64::from(program.stream) + 1) << 32 | 1);
        let mut spans = Vec::new();
        let now = || start.elapsed().as_nanos() as u64;
        for seg in &program.segments {
            let waited = now();
            for &e in &seg.waits {
                if self.events[e as usize].wait(&self.abort).is_err() {
                    return spans; // another stream panicked: its panic is reported
                }
            }
            if tracing && !seg.waits.is_empty() {
                spans.push(TraceSpan::wait(program.stream, &seg.waits, waited, now()));
            }
            if let Some(state) = &mut rng {
                let us = next_random(state) % 200;
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
            let seg_steps = &steps[seg.steps.clone()];
            match program.kind {
                StreamKind::Copy => {
                    let t0 = now();
                    device.copy(&seg_steps[0]);
                    if tracing {
                        let step = seg.steps.start;
                        spans.push(TraceSpan::step(program.stream, step, t0, now()));
                    }
                }
                StreamKind::Compute => {
                    let marks: Vec<std::sync::atomic::AtomicU64> = if tracing {
                        (0..=seg_steps.len()).map(|_| Default::default()).collect()
                    } else {
                        Vec::new()
                    };
                    if tracing {
                        marks[0].store(now(), Ordering::Relaxed);
                    }
                    device.run_steps(seg_steps, &|i| {
                        if tracing {
                            marks[i + 1].store(now(), Ordering::Relaxed);
                        }
                    });
                    for (i, w) in marks.windows(2).enumerate() {
                        let (t0, t1) = (w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed));
                        spans.push(TraceSpan::step(program.stream, seg.steps.start + i, t0, t1));
                    }
                }
            }
            for &e in &seg.records {
                self.events[e as usize].record();
            }
        }
        spans
    }
}

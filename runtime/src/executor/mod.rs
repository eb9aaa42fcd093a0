//! The executor: runs a plan's streams concurrently, ordered only by the
//! plan's events. Device-agnostic: it walks each stream's work in global
//! order, waits on and records events, and hands runs of steps and copies to
//! the devices ([`crate::device::Device`]); devices only run them.
//!
//! A compute stream's work is cut into *segments*: maximal runs of one
//! split's steps with waits only before the first and records only after the
//! last, each handed to the device as one job (one barrier per step, no event
//! traffic inside). A copy stream's segments are one copy each.
//!
//! Threads: one per compute stream (the caller runs the first), started once
//! per executor (a pool: runs do not pay for starting threads), pinned to its
//! device's cores for the run when there are several devices. Copy streams have no thread
//! of their own: a copy between CPU devices is a memcpy that needs a core like
//! any step, and a copy thread would take turns with the compute threads on
//! the same cores (two thread switches per split boundary, measured by the
//! `split_boundaries` bench). A thread that waits for a copy's event runs the
//! copy stream's segments up to it itself (*helping*, see
//! [`concurrency::CopyProgress`]: each copy runs once, in its stream's order,
//! after its own waits); copies nobody
//! waited for run on the caller after the streams finish. A device whose
//! copies run on their own engine (CUDA) will bring a copy stream thread back.
//!
//! Invariants: every compute stream thread runs its segments in global order;
//! every copy stream's segments run in order; a segment starts only after
//! every event it waits on was recorded in this run; a thread helps only with
//! copies that precede its own position in global order, so helping never
//! waits on later work (no deadlock that the plan's order does not already
//! exclude); events are reset before a run starts and every segment has run
//! when `run` returns; a panic on one stream aborts the others' waits (no
//! hang) and is re-raised on the caller.
//!
//! Fault injection (tests): with a seed, every compute segment and every copy
//! starts after a random delay of up to 200 µs, so runs explore other
//! interleavings; outputs must not change.

pub mod event;
pub mod programs;
pub mod trace;

use crate::device::Device;
use crate::device::cpu::ThreadPool;
use crate::steps::PreparedStep;
use concurrency::{Abort, CopyProgress};
use event::{Aborted, Event};
use ir::plan::{Plan, StreamKind};
pub use programs::{Segment, StreamProgram, programs};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use trace::{Trace, TraceSpan};

/// What every stream of one run shares.
#[derive(Clone, Copy)]
struct RunCtx<'a> {
    steps: &'a [PreparedStep],
    devices: &'a [Arc<dyn Device>],
    /// Fault injection: this run's seed.
    run_seed: Option<u64>,
    start: Instant,
    tracing: bool,
}

impl RunCtx<'_> {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// What a concurrent run needs from the runtime.
pub struct Executor {
    programs: Vec<StreamProgram>,
    events: Vec<Event>,
    /// Per program: how far its copies got (unused for compute programs).
    progress: Vec<CopyProgress>,
    /// Per event: the copy segment recording it, as (program, segment).
    recorded_by_copy: Vec<Option<(usize, usize)>>,
    /// The compute programs, in program order: thread `i` of `streams` drives
    /// `compute[i]`.
    compute: Vec<usize>,
    /// One persistent thread per compute program (the caller is the first),
    /// started once, not on every run.
    streams: ThreadPool,
    abort: Abort,
    /// Fault injection seed (tests), and a counter so every run differs.
    delays: Option<(u64, std::sync::atomic::AtomicU64)>,
    /// Delays injected so far (tests assert they were).
    injected: std::sync::atomic::AtomicU64,
    /// Test hook: the prepared step whose thread panics instead of running it.
    panic_at: Option<usize>,
}

/// xorshift64*: the delays' random numbers.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

impl Executor {
    /// An executor for `plan` (`delays_seed` and `panic_at`: fault
    /// injection, for tests).
    pub fn new(plan: &Plan, delays_seed: Option<u64>, panic_at: Option<usize>) -> Executor {
        let programs = programs(plan);
        let mut recorded_by_copy = vec![None; plan.n_events as usize];
        for (p, program) in programs.iter().enumerate() {
            if program.kind != StreamKind::Copy {
                continue;
            }
            for (k, seg) in program.segments.iter().enumerate() {
                for &e in &seg.records {
                    recorded_by_copy[e as usize] = Some((p, k));
                }
            }
        }
        let compute: Vec<usize> = (0..programs.len())
            .filter(|&p| programs[p].kind == StreamKind::Compute)
            .collect();
        Executor {
            streams: ThreadPool::new(compute.len()),
            compute,
            progress: programs.iter().map(|_| CopyProgress::default()).collect(),
            recorded_by_copy,
            programs,
            events: (0..plan.n_events).map(|_| Event::default()).collect(),
            abort: Abort::default(),
            delays: delays_seed.map(|s| (s, std::sync::atomic::AtomicU64::new(0))),
            injected: std::sync::atomic::AtomicU64::new(0),
            panic_at,
        }
    }

    /// How many fault-injection delays were slept since the executor was made.
    pub fn injected_delays(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// One fault-injection delay of up to 200 µs drawn from `state`.
    fn inject_delay(&self, state: &mut u64) {
        let us = next_random(state) % 200;
        self.injected.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_micros(us));
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
        devices: &[Arc<dyn Device>],
        trace: Option<&mut Trace>,
    ) {
        for e in &self.events {
            e.reset();
        }
        for p in &self.progress {
            p.reset();
        }
        self.abort.clear();
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
        // Compute streams get a thread each from the executor's persistent
        // pool (the caller runs the first); copy streams get none (see the
        // module doc). The pool re-raises a stream's panic here once every
        // stream has stopped.
        let compute = &self.compute;
        let per_thread: Vec<Mutex<Vec<TraceSpan>>> =
            compute.iter().map(|_| Mutex::new(Vec::new())).collect();
        self.streams.run(&|thread| {
            let Some(&program) = compute.get(thread.ith) else {
                return; // a plan without compute streams: only copies
            };
            let spans = self.drive(program, ctx);
            *per_thread[thread.ith]
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = spans;
        });
        let mut spans: Vec<Vec<TraceSpan>> = (per_thread.into_iter())
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
        // Copies no stream waited for (e.g. into an output read after the run).
        let mut drained = Vec::new();
        for p in 0..self.programs.len() {
            let segments = self.programs[p].segments.len();
            if self.programs[p].kind == StreamKind::Copy && self.progress[p].finished() < segments {
                let helped = self.help_until(p, segments - 1, ctx, &mut drained, &|| {});
                helped.expect("no stream aborted: every stream finished without a panic");
            }
        }
        spans.push(drained);
        if let Some(trace) = trace {
            trace.spans = spans.into_iter().flatten().collect();
        }
    }

    /// Runs program `p`'s segments; on a panic, aborts every wait and re-raises.
    fn drive(&self, p: usize, ctx: &RunCtx<'_>) -> Vec<TraceSpan> {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut spans = Vec::new();
            // An abort (another stream panicked) ends this one early: the
            // other's panic is what gets reported.
            let _ = self.drive_inner(p, ctx, &mut spans);
            spans
        }));
        match result {
            Ok(spans) => spans,
            Err(p) => {
                self.abort.raise(&self.events);
                std::panic::resume_unwind(p)
            }
        }
    }

    /// The `fault_panic_at` test hook: panics when `steps` holds that step.
    fn maybe_fail(&self, steps: Range<usize>) {
        if let Some(k) = self.panic_at.filter(|k| steps.contains(k)) {
            panic!("injected fault at prepared step {k}");
        }
    }

    /// Waits until event `e` is recorded. When a copy segment records it,
    /// this thread runs that copy stream's segments up to it itself (helping).
    /// `park` runs when a wait outlasts the event's spin (the waiting
    /// stream's device parks its idle kernel threads).
    fn wait_event(
        &self,
        e: u32,
        ctx: &RunCtx<'_>,
        spans: &mut Vec<TraceSpan>,
        park: &dyn Fn(),
    ) -> Result<(), Aborted> {
        match self.recorded_by_copy[e as usize] {
            Some((p, k)) => self.help_until(p, k, ctx, spans, park),
            None => self.events[e as usize].wait_then(&self.abort, &mut || park()),
        }
    }

    /// Returns once copy segment `k` of program `p` finished, running the
    /// stream's unfinished segments up to it in order
    /// ([`CopyProgress::help_until`]); waits on their sources first, helping
    /// recursively. Every source precedes its copy in global order, so the
    /// recursion ends and no thread waits on a later one.
    fn help_until(
        &self,
        p: usize,
        k: usize,
        ctx: &RunCtx<'_>,
        spans: &mut Vec<TraceSpan>,
        park: &dyn Fn(),
    ) -> Result<(), Aborted> {
        let segments = &self.programs[p].segments;
        self.progress[p].help_until(
            k,
            &self.abort,
            spans,
            |spans, next| {
                for &w in &segments[next].waits {
                    self.wait_event(w, ctx, spans, park)?;
                }
                Ok(())
            },
            |spans, next| self.run_copy(p, next, ctx, spans),
        )
    }

    /// Runs copy segment `k` of program `p`, claimed by this thread, and
    /// records its events (the caller marks it finished).
    fn run_copy(&self, p: usize, k: usize, ctx: &RunCtx<'_>, spans: &mut Vec<TraceSpan>) {
        let program = &self.programs[p];
        let seg = &program.segments[k];
        self.maybe_fail(seg.steps.clone());
        if let Some(seed) = ctx.run_seed {
            // Fault injection: a delay drawn from the run and the segment.
            let mut state = seed ^ ((p as u64) << 40 | k as u64).wrapping_mul(0x9e37_79b9) | 1;
            self.inject_delay(&mut state);
        }
        let t0 = ctx.now();
        let copy = &ctx.steps[seg.steps.start];
        // The end that prepared the copy moves its bytes (`crate::steps`).
        ctx.devices[copy.device].copy(copy);
        if ctx.tracing {
            spans.push(TraceSpan::step(
                program.stream,
                seg.steps.start,
                t0,
                ctx.now(),
            ));
        }
        for &e in &seg.records {
            self.events[e as usize].record();
        }
    }

    /// Waits on `waits` (traced as one span on `stream`).
    fn wait_all(
        &self,
        stream: u32,
        waits: &[u32],
        ctx: &RunCtx<'_>,
        spans: &mut Vec<TraceSpan>,
        park: &dyn Fn(),
    ) -> Result<(), Aborted> {
        let waited = ctx.now();
        for &e in waits {
            self.wait_event(e, ctx, spans, park)?;
        }
        if ctx.tracing && !waits.is_empty() {
            spans.push(TraceSpan::wait(stream, waits, waited, ctx.now()));
        }
        Ok(())
    }

    fn drive_inner(
        &self,
        p: usize,
        ctx: &RunCtx<'_>,
        spans: &mut Vec<TraceSpan>,
    ) -> Result<(), Aborted> {
        let program = &self.programs[p];
        let device = &ctx.devices[program.device];
        let _pinned = (ctx.devices.len() > 1).then(|| device.pin_stream_thread());
        let mut rng = (ctx.run_seed).map(|s| s ^ (u64::from(program.stream) + 1) << 32 | 1);
        let mut delay = || {
            if let Some(state) = &mut rng {
                self.inject_delay(state);
            }
        };
        // A long wait (another device computing) or the stream's end leaves
        // this device idle: its kernel threads sleep rather than spin out
        // their budget on cores others need (a server on this host).
        let park = || {
            if let Some(pool) = device.pool() {
                pool.park_idle();
            }
        };
        for seg in &program.segments {
            self.wait_all(program.stream, &seg.waits, ctx, spans, &park)?;
            delay();
            self.maybe_fail(seg.steps.clone());
            let seg_steps = &ctx.steps[seg.steps.clone()];
            let tracing = ctx.tracing;
            let marks: Vec<std::sync::atomic::AtomicU64> = if tracing {
                (0..=seg_steps.len()).map(|_| Default::default()).collect()
            } else {
                Vec::new()
            };
            if tracing {
                marks[0].store(ctx.now(), Ordering::Relaxed);
            }
            device.run_steps(seg_steps, &|i| {
                if tracing {
                    marks[i + 1].store(ctx.now(), Ordering::Relaxed);
                }
            });
            for (i, w) in marks.windows(2).enumerate() {
                let (t0, t1) = (w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed));
                spans.push(TraceSpan::step(program.stream, seg.steps.start + i, t0, t1));
            }
            for &e in &seg.records {
                self.events[e as usize].record();
            }
        }
        if self.compute.len() > 1 {
            park();
        }
        Ok(())
    }
}

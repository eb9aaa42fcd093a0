//! Running a loaded plan: the fast path (one pool job, a barrier after each
//! step, optional per-step timing) and the observed path (one job per step,
//! an [`Observer`] called before and after each).
//!
//! Invariants: `run*` refuse to start while an input is unset; runtimes that
//! share a state store never run at the same time (its run lock).

use crate::RuntimeError;
use crate::executor::trace::{SpanKind, Trace, TraceSpan};
use crate::runtime::{Runtime, describe, layout_of};
use crate::steps::PreparedStep;
use ir::Role;
use ir::plan::Placement;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What an observer says after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop the run after this step.
    Stop,
}

/// A step as an observer sees it.
pub struct StepInfo<'a> {
    /// Global index in execution order (copies count as steps).
    pub index: usize,
    /// The prepared step (kind, tensors, costs).
    pub step: &'a PreparedStep,
}

/// Called around every step of an observed run (like ggml's eval callback).
pub trait Observer {
    /// Before the step runs: its sources hold their inputs.
    fn before(&mut self, _rt: &Runtime, _step: &StepInfo<'_>) {}
    /// After the step ran: its destination holds the result.
    fn after(&mut self, rt: &Runtime, step: &StepInfo<'_>) -> Flow;
}

impl Runtime {
    fn check_inputs(&self) -> Result<(), RuntimeError> {
        if let Some((&t, _)) = self.inputs.iter().find(|(_, set)| !**set) {
            let pt = &self.plan.tensors[t as usize];
            return Err(RuntimeError::InputNotSet {
                name: pt.name.clone(),
                expected: describe(pt.dtype, &pt.ne),
            });
        }
        Ok(())
    }

    /// Runs every step once, the fast way: one job on the pool, a barrier
    /// between steps.
    pub fn run(&mut self) -> Result<(), RuntimeError> {
        self.run_inner(false)
    }

    /// Like [`Runtime::run`], recording the time of every step
    /// ([`Runtime::last_profile`]).
    pub fn run_profiled(&mut self) -> Result<(), RuntimeError> {
        self.run_inner(true)
    }

    /// Runs every step once and returns when each step, copy and event wait
    /// ran on which stream, and when (for `ggplan run --trace`).
    pub fn run_traced(&mut self) -> Result<Trace, RuntimeError> {
        if self.sequential {
            self.run_inner(true)?;
            let stream = self.plan.splits.first().map_or(0, |s| s.stream);
            let mut t = 0;
            let spans = (self.last_profile.iter().enumerate())
                .map(|(i, &ns)| {
                    t += ns;
                    TraceSpan {
                        stream,
                        kind: SpanKind::Step(i),
                        start_ns: t - ns,
                        end_ns: t,
                    }
                })
                .collect();
            return Ok(Trace { spans });
        }
        self.check_inputs()?;
        let state = self.state.clone();
        let _running = state.as_ref().map(|s| s.lock_run());
        // A run that fails on a server or GPU leaves host state as it found
        // it (`state_journal`).
        let journal = self.journal_host_state()?;
        let mut trace = Trace::default();
        self.executor
            .run(&self.steps, &self.devices, Some(&mut trace));
        if let Err(e) = self.take_device_failure() {
            if let Some(journal) = journal {
                self.undo(journal);
            }
            return Err(e);
        }
        Ok(trace)
    }

    fn run_inner(&mut self, profile: bool) -> Result<(), RuntimeError> {
        if !self.sequential {
            let trace = self.run_traced()?;
            if profile {
                self.last_profile.fill(0);
                for span in &trace.spans {
                    if let SpanKind::Step(i) = span.kind {
                        self.last_profile[i] = span.end_ns - span.start_ns;
                    }
                }
            }
            return Ok(());
        }
        self.check_inputs()?;
        let state = self.state.clone();
        let _running = state.as_ref().map(|s| s.lock_run());
        // One device, one stream: the whole plan is one job on it (one
        // barrier per step on a CPU), timed per step when profiling.
        let marks: Vec<AtomicU64> = if profile {
            (0..self.steps.len()).map(|_| AtomicU64::new(0)).collect()
        } else {
            Vec::new()
        };
        let start = Instant::now();
        let mark = |i: usize| {
            if profile {
                marks[i].store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        };
        let device = self.steps.first().map_or(0, |s| s.device);
        self.devices[device].run_steps(&self.steps, &mark);
        if profile {
            let mut prev = 0;
            for (i, m) in marks.iter().enumerate() {
                let now = m.load(Ordering::Relaxed);
                self.last_profile[i] = now - prev;
                prev = now;
            }
        }
        Ok(())
    }

    /// Runs every step with `observer` called before and after each; returns
    /// the number of steps run (fewer than all when the observer stopped it).
    pub fn run_observed(&mut self, observer: &mut dyn Observer) -> Result<usize, RuntimeError> {
        self.check_inputs()?;
        let state = self.state.clone();
        let _running = state.as_ref().map(|s| s.lock_run());
        for i in 0..self.steps.len() {
            let info = StepInfo {
                index: i,
                step: &self.steps[i],
            };
            observer.before(self, &info);
            // One step at a time in global order: the plan's meaning, on
            // the device that prepared the step.
            let step = &self.steps[i];
            let device = &self.devices[step.device];
            if step.kind == "copy" {
                device.copy(step);
            } else {
                device.run_steps(std::slice::from_ref(step), &|_| {});
            }
            let info = StepInfo {
                index: i,
                step: &self.steps[i],
            };
            self.take_device_failure()?;
            if observer.after(self, &info) == Flow::Stop {
                return Ok(i + 1);
            }
        }
        Ok(self.steps.len())
    }

    /// Zeroes the state tensors (this runtime's, or its shared store's).
    pub fn reset_state(&mut self) {
        if let Some(store) = &self.state {
            store.clear();
            for d in &self.devices {
                // A failure (a dead server) is reported by the next run.
                if let Err(e) = d.clear_shared_state() {
                    d.fail(e);
                }
            }
            return;
        }
        let states: Vec<usize> = (self.plan.tensors.iter().enumerate())
            .filter(|(_, pt)| {
                pt.role == Role::State && matches!(pt.placement, Placement::Arena { .. })
            })
            .map(|(t, _)| t)
            .collect();
        let span = |t: usize| layout_of(&self.plan, t as u32).span_bytes() as usize;
        let zeros = vec![0u8; states.iter().map(|&t| span(t)).max().unwrap_or(0)];
        for t in states {
            let device = self.plan.tensors[t].device.index();
            // SAFETY: the tensor's span lies in its device's arena (checker).
            let tensor = unsafe { crate::device::TensorBytes::new(self.addr[t], span(t)) };
            // Through the device, whatever its memory; a failure (a dead
            // server, a GPU error) is reported by the next run.
            if let Err(e) = self.devices[device].set_tensor(tensor, 0, &zeros[..span(t)]) {
                self.keep_failure(device, e);
            }
        }
    }
}

//! A device kind that exists only in tests: a CPU device that records every
//! call the loader and the executor make to it. It is opened by a backend of
//! its own, given at load ([`crate::LoadOptions::backends`]), which is the
//! whole of what a new device kind needs outside its room: nothing in
//! `runtime.rs`, the step preparation or the executor names it.

use super::backend::{DeviceBackend, OpenCtx, Opened};
use super::cpu::{Pinned, ThreadPool};
use super::load::{WeightPlacement, WeightRequest};
use super::registry::CpuBackend;
use super::{CopyEnd, Device, DeviceInfo, DeviceStep, PrepareCtx, TensorBytes};
use crate::RuntimeError;
use crate::device::PreparedStep;
use crate::state::StateStore;
use ir::Layout;
use ir::plan::{Plan, Step, Usage};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// The calls made to recording devices, as `device: call`.
pub(crate) type CallLog = Arc<Mutex<Vec<String>>>;

/// Opens every CPU device of a plan as a [`Recording`] one.
pub(crate) struct RecordingBackend {
    pub(crate) log: CallLog,
}

impl DeviceBackend for RecordingBackend {
    fn name(&self) -> &str {
        "recording"
    }

    fn open(&self, plan: &Plan, ctx: &OpenCtx<'_>) -> Result<Opened, RuntimeError> {
        let (opened, warnings) = CpuBackend.open(plan, ctx)?;
        let wrap = |inner: Arc<dyn Device>| {
            Arc::new(Recording {
                inner,
                log: Arc::clone(&self.log),
            }) as Arc<dyn Device>
        };
        Ok((opened.into_iter().map(|d| d.map(wrap)).collect(), warnings))
    }
}

/// A CPU device whose every call is logged, then passed on.
pub(crate) struct Recording {
    inner: Arc<dyn Device>,
    log: CallLog,
}

impl Recording {
    fn note(&self, call: String) {
        let name = &self.inner.info().name;
        (self.log.lock().unwrap()).push(format!("{name}: {call}"));
    }
}

impl Device for Recording {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn alloc_arena(
        &self,
        arena: usize,
        bytes: u64,
        usage: Usage,
        may_defer: bool,
    ) -> Result<Option<*mut u8>, RuntimeError> {
        self.note(format!("alloc_arena {arena}"));
        self.inner.alloc_arena(arena, bytes, usage, may_defer)
    }

    fn place_weight<'w>(
        &self,
        request: &WeightRequest<'_, 'w>,
    ) -> Result<WeightPlacement<'w>, RuntimeError> {
        let name = &request.plan.tensors[request.tensor as usize].name;
        self.note(format!("place_weight {name}"));
        self.inner.place_weight(request)
    }

    fn bind_state(
        &self,
        store: &StateStore,
        name: &str,
        layout: &Layout,
    ) -> Result<*mut u8, RuntimeError> {
        self.note(format!("bind_state {name}"));
        self.inner.bind_state(store, name, layout)
    }

    fn prepare_step(
        &self,
        ctx: &PrepareCtx<'_>,
        split: usize,
        index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError> {
        self.note(format!("prepare_step {index}"));
        self.inner.prepare_step(ctx, split, index, step)
    }

    fn prepare_copy(
        &self,
        from: CopyEnd<'_>,
        to: CopyEnd<'_>,
        bytes: usize,
    ) -> Result<Box<dyn DeviceStep>, RuntimeError> {
        self.note(format!("prepare_copy {bytes}"));
        self.inner.prepare_copy(from, to, bytes)
    }

    fn finish_prepare(&self, scratch_bytes: usize) -> Result<(), RuntimeError> {
        self.note("finish_prepare".to_string());
        self.inner.finish_prepare(scratch_bytes)
    }

    fn pool(&self) -> Option<&Arc<ThreadPool>> {
        self.inner.pool()
    }

    fn take_notes(&self) -> Vec<String> {
        self.inner.take_notes()
    }

    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync)) {
        self.note(format!("run_steps {}", steps.len()));
        self.inner.run_steps(steps, after_step)
    }

    fn copy(&self, copy: &PreparedStep) {
        self.note("copy".to_string());
        self.inner.copy(copy)
    }

    fn set_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        self.note(format!("set_tensor {}", data.len()));
        self.inner.set_tensor(tensor, offset, data)
    }

    fn get_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), RuntimeError> {
        self.note(format!("get_tensor {}", out.len()));
        self.inner.get_tensor(tensor, offset, out)
    }

    fn synchronize(&self) {
        self.note("synchronize".to_string());
        self.inner.synchronize()
    }

    fn pin_stream_thread(&self) -> Option<Pinned> {
        self.inner.pin_stream_thread()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoadOptions, Runtime, Weights};
    use kernels::testing::plans::collective_pair;

    fn run(options: &LoadOptions) -> (Runtime, Vec<Vec<u32>>) {
        let plan = Arc::new(collective_pair(None));
        let mut rt = Runtime::load(plan, Weights::Random { seed: 4 }, options).unwrap();
        rt.run().unwrap();
        let bits = ["r.0", "r.1", "g.0", "g.1"]
            .iter()
            .map(|n| {
                rt.output_f32(n)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            })
            .collect();
        (rt, bits)
    }

    #[test]
    fn a_device_kind_of_a_tests_own_runs_a_plan_through_its_backend_alone() {
        let log = CallLog::default();
        let options = LoadOptions {
            backends: vec![Arc::new(RecordingBackend {
                log: Arc::clone(&log),
            })],
            ..LoadOptions::default()
        };
        let (recorded, got) = run(&options);
        let (_, want) = run(&LoadOptions::default());
        assert_eq!(
            got, want,
            "the recording devices compute what the CPU ones do"
        );
        for d in recorded.devices() {
            assert!(
                d.as_any().is::<Recording>(),
                "{} was not opened by the test's backend",
                d.info().name
            );
        }
        let log = log.lock().unwrap();
        let calls = |call: &str| log.iter().filter(|l| l.contains(call)).count();
        let plan = recorded.plan();
        let steps: usize = plan.splits.iter().map(|s| s.steps.len()).sum();
        let copies: usize = plan.splits.iter().map(|s| s.copies.len()).sum();
        assert_eq!(calls(": alloc_arena "), plan.arenas.len(), "{log:?}");
        assert_eq!(calls(": prepare_step "), steps, "{log:?}");
        assert_eq!(calls(": prepare_copy "), copies, "{log:?}");
        assert_eq!(calls(": finish_prepare"), plan.devices.len(), "{log:?}");
        assert!(calls(": place_weight ") >= 2, "u and v are placed: {log:?}");
        assert!(calls(": run_steps ") >= plan.devices.len(), "{log:?}");
        for dev in &plan.devices {
            assert!(
                log.iter()
                    .any(|l| l.starts_with(&format!("{}: run_steps", dev.name))),
                "{} ran nothing: {log:?}",
                dev.name
            );
        }
    }
}

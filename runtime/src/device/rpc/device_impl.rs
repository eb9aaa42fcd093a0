//! A remote server as a [`Device`]: what the loader and the executor ask of
//! it, on top of [`RemoteDevice`]'s calls (`device.rs`), its steps
//! (`kernels.rs`) and their preparation (`prepare.rs`).

use super::device::RemoteDevice;
use super::ggml::StepGraph;
use super::kernels::{RemoteCopy, RemoteStep};
use super::prepare;
use crate::RuntimeError;
use crate::device::load::{WeightPlacement, WeightRequest};
use crate::device::{
    CopyEnd, Device, DeviceInfo, DeviceStep, PrepareCtx, PreparedStep, TensorBytes, own_step,
};
use crate::state::StateStore;
use crate::weights::BoundWeight;
use ir::plan::{Step, Usage};
use std::any::Any;
use std::sync::Arc;

impl Device for RemoteDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    /// With servers shared by a job, weights read in place live in the
    /// server's weight cache, so the weights arena is deferred: allocated
    /// only if some weight still needs it (a converted or sliced one).
    fn alloc_arena(
        &self,
        _arena: usize,
        bytes: u64,
        usage: Usage,
        may_defer: bool,
    ) -> Result<Option<*mut u8>, RuntimeError> {
        if may_defer && usage == Usage::Weights {
            return Ok(None);
        }
        // The server's address of the buffer, never dereferenced here.
        let base = self.alloc_remote(bytes, &usage.to_string())?;
        Ok(Some(base as usize as *mut u8))
    }

    /// A weight read in place is uploaded once per job, through the
    /// server's weight cache (in exact precision a block-quantized one as
    /// its F32 values, where every reader allows it); converted or sliced
    /// bytes are written into this runtime's arena.
    fn place_weight<'w>(
        &self,
        request: &WeightRequest<'_, 'w>,
    ) -> Result<WeightPlacement<'w>, RuntimeError> {
        let pt = &request.plan.tensors[request.tensor as usize];
        match request.bind()? {
            BoundWeight::InPlace(b) => {
                let eligible = (self.f32_weights)
                    .get_or_init(|| prepare::f32_weights(request.plan))
                    .get(request.tensor as usize)
                    .copied()
                    .unwrap_or(false);
                let as_f32 = (request.exact && eligible).then_some(pt.dtype);
                let (at, uploaded) =
                    (self.server).bind_weight(&pt.name, b, request.weights, as_f32)?;
                Ok(WeightPlacement::Held {
                    addr: at as usize as *mut u8,
                    bytes: b.len() as u64,
                    uploaded,
                    host_source: as_f32.map(|_| (b.as_ptr() as usize, b.len())),
                })
            }
            BoundWeight::Copy(b) => Ok(WeightPlacement::Write(b)),
        }
    }

    /// Shared state stays on its server, by name, for every runtime of the
    /// job (the remote side of a [`StateStore`]).
    fn bind_state(
        &self,
        _store: &StateStore,
        name: &str,
        layout: &ir::Layout,
    ) -> Result<*mut u8, RuntimeError> {
        Ok(self.server.bind_state(name, layout)? as usize as *mut u8)
    }

    fn prepare_step(
        &self,
        ctx: &PrepareCtx<'_>,
        split: usize,
        index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError> {
        let this = self.this.upgrade().expect("a device preparing is alive");
        prepare::prepare_step(&this, ctx, split, index, step)
    }

    fn prepare_copy(
        &self,
        from: CopyEnd<'_>,
        to: CopyEnd<'_>,
        bytes: usize,
    ) -> Result<Box<dyn DeviceStep>, RuntimeError> {
        Ok(Box::new(prepare::prepare_copy(from, to, bytes)?))
    }

    fn can_fail_mid_run(&self) -> bool {
        true
    }

    /// Records the first failure of a run; later ones are dropped.
    fn fail(&self, e: RuntimeError) {
        self.record_failure(e);
    }

    /// Waits for a graph nothing read after, then takes the run's failure
    /// (the next run starts clean).
    fn take_failure(&self) -> Result<(), RuntimeError> {
        if !self.failed()
            && let Err(e) = self.server.finish()
        {
            self.record_failure(e);
        }
        let taken = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        taken.map_or(Ok(()), Err)
    }

    fn clear_shared_state(&self) -> Result<(), RuntimeError> {
        self.server.clear_states()
    }

    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync)) {
        if !self.failed() {
            let graphs: Vec<&StepGraph> = (steps.iter())
                .map(|s| &*own_step::<RemoteStep>(&self.info.name, &*s.kernel).graph)
                .collect();
            if let Err(e) = self.compute(&graphs) {
                self.record_failure(e);
            }
        }
        for i in 0..steps.len() {
            after_step(i);
        }
    }

    fn copy(&self, copy: &PreparedStep) {
        own_step::<RemoteCopy>(&self.info.name, &*copy.kernel).run();
    }

    fn set_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        let at = tensor.range(&self.info.name, "set_tensor", offset, data.len())?;
        self.write(at as u64, data, "set_tensor")
    }

    fn get_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let at = tensor.range(&self.info.name, "get_tensor", offset, out.len())?;
        self.read(at as u64, out, "get_tensor")
    }

    fn synchronize(&self) {
        if !self.failed()
            && let Err(e) = self.server.client().sync()
        {
            self.record_failure(e);
        }
    }
}

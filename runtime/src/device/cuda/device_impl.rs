//! A CUDA GPU as a [`Device`]: what the loader and the executor ask of it,
//! on top of [`CudaDevice`]'s driver calls (`device.rs`), its steps
//! (`step.rs`) and their preparation (`prepare.rs`).

use super::device::CudaDevice;
use super::prepare;
use super::step::{CudaCopy, CudaStep};
use crate::RuntimeError;
use crate::device::load::{WeightPlacement, WeightRequest};
use crate::device::staging::{Upload, upload_staged};
use crate::device::{
    CopyEnd, Device, DeviceInfo, DeviceStep, PrepareCtx, PreparedStep, TensorBytes, own_step,
};
use crate::state::StateStore;
use crate::weights::BoundWeight;
use ir::Layout;
use ir::plan::{Step, Usage};
use std::any::Any;
use std::sync::Arc;

/// Page-locked staging for `total` bytes of a load: (buffers, bytes each).
/// Four buffers of up to 8 MiB keep reading the file ahead of the copies
/// without pinning much memory (pinning is slow and takes it from the OS);
/// a small load gets buffers its own size.
fn staging_buffers(total: usize) -> (usize, usize) {
    const MAX_EACH: usize = 8 << 20;
    (4, total.div_ceil(4).clamp(1, MAX_EACH))
}

impl Device for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
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
        _may_defer: bool,
    ) -> Result<Option<*mut u8>, RuntimeError> {
        // A device address, never dereferenced on the host.
        let addr = self.alloc_device_arena(arena, bytes, &usage.to_string())?;
        Ok(Some(addr as usize as *mut u8))
    }

    fn place_weight<'w>(
        &self,
        request: &WeightRequest<'_, 'w>,
    ) -> Result<WeightPlacement<'w>, RuntimeError> {
        // Uploaded once at load, from the mapped file.
        Ok(WeightPlacement::Write(match request.bind()? {
            BoundWeight::InPlace(b) => std::borrow::Cow::Borrowed(b),
            BoundWeight::Copy(b) => b,
        }))
    }

    /// Shared state stays on the GPU, by name, for every runtime of the job,
    /// allocated on first use.
    fn bind_state(
        &self,
        store: &StateStore,
        name: &str,
        layout: &Layout,
    ) -> Result<*mut u8, RuntimeError> {
        let addr = store.bind_device(&self.info.name, name, layout, &|bytes| {
            let memory = self.gpu.alloc(bytes, &format!("state '{name}'"))?;
            Ok(Box::new(memory) as Box<dyn crate::state::DeviceState>)
        })?;
        Ok(addr as usize as *mut u8)
    }

    fn prepare_step(
        &self,
        ctx: &PrepareCtx<'_>,
        split: usize,
        _index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError> {
        let this = self.this.upgrade().expect("a device preparing is alive");
        prepare::prepare_step(&this, ctx, split, step)
    }

    fn prepare_copy(
        &self,
        from: CopyEnd<'_>,
        to: CopyEnd<'_>,
        bytes: usize,
    ) -> Result<Box<dyn DeviceStep>, RuntimeError> {
        Ok(Box::new(prepare::prepare_copy(from, to, bytes)?))
    }

    fn finish_prepare(&self, _scratch_bytes: usize) -> Result<(), RuntimeError> {
        self.load_kernels()
    }

    fn can_fail_mid_run(&self) -> bool {
        true
    }

    /// Keeps the first error of a run for [`Device::take_failure`].
    fn fail(&self, e: RuntimeError) {
        self.record_failure(e);
    }

    /// Waits for the GPU (a kernel's failure surfaces here), then returns
    /// (and clears) the run's first error.
    fn take_failure(&self) -> Result<(), RuntimeError> {
        if let Err(e) = self.gpu.synchronize() {
            self.record_failure(e);
        }
        self.take_error()
    }

    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync)) {
        let name = &self.info.name;
        let launch_all = || {
            for step in steps {
                own_step::<CudaStep>(name, &*step.kernel).run();
            }
        };
        if self.step_by_step {
            for (i, step) in steps.iter().enumerate() {
                own_step::<CudaStep>(name, &*step.kernel).run();
                if let Err(e) = self.gpu.synchronize() {
                    self.record_failure(e);
                }
                after_step(i);
            }
            return;
        }
        if !self.use_graphs || self.failed() {
            launch_all();
        } else {
            let key = (steps.as_ptr() as usize, steps.len());
            let mut graphs = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
            if let std::collections::hash_map::Entry::Vacant(slot) = graphs.entry(key) {
                let captured = self.gpu.capture(|| {
                    launch_all();
                    self.take_error()
                });
                match captured {
                    Ok(graph) => {
                        slot.insert(graph);
                    }
                    Err(e) => self.record_failure(e),
                }
            }
            if let Some(graph) = graphs.get(&key)
                && let Err(e) = self.gpu.replay(graph)
            {
                self.record_failure(e);
            }
        }
        if let Err(e) = self.gpu.synchronize() {
            self.record_failure(e);
        }
        for i in 0..steps.len() {
            after_step(i);
        }
    }

    fn copy(&self, copy: &PreparedStep) {
        own_step::<CudaCopy>(&self.info.name, &*copy.kernel).run();
    }

    fn set_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        let at = tensor.range(&self.info.name, "set_tensor", offset, data.len())?;
        self.gpu.upload(at as u64, data)
    }

    fn load_tensors(
        &self,
        items: &[(TensorBytes, &[u8])],
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), RuntimeError> {
        let mut uploads = Vec::with_capacity(items.len());
        for (tensor, bytes) in items {
            let at = tensor.range(&self.info.name, "load", 0, bytes.len())?;
            uploads.push(Upload {
                dst: at as u64,
                bytes,
            });
        }
        let total: usize = items.iter().map(|(_, b)| b.len()).sum();
        if self.use_staging && total > 0 {
            let (count, each) = staging_buffers(total);
            // Without page-locked memory (the OS may cap it) the direct
            // copies below do.
            if let Ok(mut staging) = self.gpu.pinned_staging(count, each) {
                return upload_staged(&mut staging, &uploads, progress);
            }
        }
        // The default: the driver copies from the file's pages itself, one
        // tensor at a time (faster than staging on the H100 host measured;
        // see `use_staging`).
        for u in &uploads {
            self.gpu.upload(u.dst, u.bytes)?;
            progress(u.bytes.len() as u64);
        }
        Ok(())
    }

    fn get_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let at = tensor.range(&self.info.name, "get_tensor", offset, out.len())?;
        self.gpu.download(at as u64, out)
    }

    fn synchronize(&self) {
        if let Err(e) = self.gpu.synchronize() {
            self.record_failure(e);
        }
    }
}

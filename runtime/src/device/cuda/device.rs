//! A CUDA GPU as a device of a loaded plan: arenas in device memory, weights
//! and inputs uploaded, outputs downloaded, steps launched on the GPU's
//! stream (see `step.rs`), kernels compiled once per distinct source.
//!
//! Invariants: `run_steps` returns only when the GPU finished them (a
//! stream synchronize), so the executor's events order host and GPU work; a
//! driver error is kept in the failure slot and reported when the run ends;
//! every set/get is range-checked against the tensor before the driver sees it.

use super::driver::{DeviceMemory, Function, Gpu, Graph, Module};
use super::launch::Kernel;
use super::nvrtc::architecture;
use super::prepare;
use super::sources::{LIBRARY_KERNELS, kernel_module, library_source};
use super::step::{CudaCopy, CudaStep};
use crate::RuntimeError;
use crate::device::load::{WeightPlacement, WeightRequest};
use crate::device::staging::{Upload, upload_staged};
use crate::device::{
    Caps, CopyEnd, Device, DeviceInfo, DeviceStep, PrepareCtx, TensorBytes, own_step,
};
use crate::state::StateStore;
use crate::steps::PreparedStep;
use crate::weights::BoundWeight;
use ir::Layout;
use ir::plan::{Step, Usage};
use std::any::Any;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Page-locked staging for `total` bytes of a load: (buffers, bytes each).
/// Four buffers of up to 8 MiB keep reading the file ahead of the copies
/// without pinning much memory (pinning is slow and takes it from the OS);
/// a small load gets buffers its own size.
fn staging_buffers(total: usize) -> (usize, usize) {
    const MAX_EACH: usize = 8 << 20;
    (4, total.div_ceil(4).clamp(1, MAX_EACH))
}

/// The op library's module and each generated kernel's, by name.
type LoadedKernels = (Arc<Module>, BTreeMap<String, Arc<Module>>);

/// A CUDA device of a loaded plan.
pub struct CudaDevice {
    info: DeviceInfo,
    /// Itself, for the steps it prepares (each holds its device).
    this: std::sync::Weak<CudaDevice>,
    gpu: Arc<Gpu>,
    arch: &'static str,
    arenas: Mutex<Vec<DeviceMemory>>,
    generated: Mutex<BTreeMap<String, String>>,
    modules: OnceLock<LoadedKernels>,
    failure: Mutex<Option<RuntimeError>>,
    /// Each segment's launches captured as a CUDA graph on its first run,
    /// by (address of its first step, steps): a plan is static, so every
    /// later run replays it with one call instead of one launch per step.
    graphs: Mutex<HashMap<(usize, usize), Graph>>,
    /// Capture segments into graphs (`GGPLAN_CUDA_GRAPHS=0` turns it off,
    /// to measure what it saves).
    use_graphs: bool,
    /// Upload weights through page-locked staging (`GGPLAN_CUDA_STAGING=1`).
    /// Off by default: on the H100 host (2026-11-27) SmolLM2's 92.1 MiB took
    /// 42.7 / 49.9 ms staged against 20.1 / 19.7 ms copied directly from the
    /// file's cached pages (alternating loads), so staging is kept for
    /// measuring where it may gain (files read cold, larger models).
    use_staging: bool,
    /// Wait for each step before the next (`GGPLAN_CUDA_PROFILE=1`), so
    /// profiles and traces time every kernel (each plus a synchronize).
    step_by_step: bool,
}

impl CudaDevice {
    /// Opens the plan device `name` on GPU `ordinal`.
    pub fn open(name: &str, ordinal: u32, alignment: u64) -> Result<Arc<CudaDevice>, RuntimeError> {
        let gpu = Gpu::open(ordinal as i32, name)?;
        let cc = gpu.compute_capability;
        let arch = architecture(cc).ok_or_else(|| RuntimeError::NoDevice {
            device: name.to_string(),
            kind: "CUDA GPU".to_string(),
            why: format!(
                "{} has compute capability {}.{}; the CUDA kernels need 7.0 or newer",
                gpu.description, cc.0, cc.1
            ),
        })?;
        let (free, total) = gpu.memory()?;
        let info = DeviceInfo {
            name: name.to_string(),
            description: format!("{} (compute {}.{}, {arch})", gpu.description, cc.0, cc.1),
            memory_total: total,
            memory_free: free,
            alignment: alignment.max(256),
            max_buffer_bytes: total,
            cores: Vec::new(),
            caps: Caps {
                asynchronous: false,
                events: false,
                host_buffer: false,
                buffer_from_host_ptr: false,
            },
        };
        Ok(Arc::new_cyclic(|this| CudaDevice {
            info,
            this: this.clone(),
            gpu,
            arch,
            arenas: Mutex::new(Vec::new()),
            generated: Mutex::new(BTreeMap::new()),
            modules: OnceLock::new(),
            failure: Mutex::new(None),
            graphs: Mutex::new(HashMap::new()),
            use_graphs: std::env::var("GGPLAN_CUDA_GRAPHS").map_or(true, |v| v != "0"),
            use_staging: std::env::var("GGPLAN_CUDA_STAGING").is_ok_and(|v| v == "1"),
            step_by_step: std::env::var("GGPLAN_CUDA_PROFILE").is_ok_and(|v| v == "1"),
        }))
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Allocates arena `arena` (`bytes`, for `usage`) in device memory and
    /// returns its device address; refused before allocating when the GPU
    /// has fewer free bytes, naming the arena and the free bytes.
    fn alloc_device_arena(
        &self,
        arena: usize,
        bytes: u64,
        usage: &str,
    ) -> Result<u64, RuntimeError> {
        let (free, _) = self.gpu.memory()?;
        if bytes > free {
            return Err(RuntimeError::Cuda {
                device: self.info.name.clone(),
                what: format!(
                    "arena {arena} ({usage}) needs {bytes} bytes but the GPU has {free} bytes free"
                ),
            });
        }
        let memory = self.gpu.alloc(bytes, &format!("arena {arena} ({usage})"))?;
        let addr = memory.addr();
        self.lock_arenas().push(memory);
        Ok(addr)
    }

    fn lock_arenas(&self) -> std::sync::MutexGuard<'_, Vec<DeviceMemory>> {
        self.arenas.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a kernel a prepared step launches (generated ones are compiled
    /// together by [`CudaDevice::load_kernels`]).
    pub fn register(&self, kernel: &Kernel) {
        if let Kernel::Generated(g) = kernel {
            let mut generated = self.generated.lock().unwrap_or_else(|e| e.into_inner());
            generated
                .entry(g.name.clone())
                .or_insert_with(|| g.source.clone());
        }
    }

    /// Compiles (or takes from the cache) and loads the op library and the
    /// generated kernels registered so far, each generated kernel its own
    /// module (so each distinct body is compiled and cached once, whatever
    /// plan it appears in). Called once, after preparation.
    pub fn load_kernels(&self) -> Result<(), RuntimeError> {
        let library = self
            .gpu
            .module(&library_source(), self.arch, LIBRARY_KERNELS)?;
        let generated = self.generated.lock().unwrap_or_else(|e| e.into_inner());
        let mut modules = BTreeMap::new();
        for (name, source) in generated.iter() {
            let module = self
                .gpu
                .module(&kernel_module(source), self.arch, &[name.as_str()])?;
            modules.insert(name.clone(), module);
        }
        let _ = self.modules.set((library, modules));
        Ok(())
    }

    /// The function of `kernel`, once the kernels are loaded.
    pub fn function(&self, kernel: &Kernel) -> Result<Function, RuntimeError> {
        let missing = || RuntimeError::Cuda {
            device: self.info.name.clone(),
            what: format!("kernel {} was not loaded", kernel.name()),
        };
        let (library, plan) = self.modules.get().ok_or_else(missing)?;
        match kernel {
            Kernel::Library(name) => library.get(name),
            Kernel::Generated(g) => plan.get(&g.name).and_then(|m| m.get(&g.name)),
        }
        .ok_or_else(missing)
    }

    /// True once a call failed in this run.
    pub fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Returns (and clears) the first error kept since the last take.
    fn take_error(&self) -> Result<(), RuntimeError> {
        let kept = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        kept.map_or(Ok(()), Err)
    }
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
        let addr = self.alloc_device_arena(arena, bytes, &format!("{usage:?}"))?;
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
        let mut slot = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
    }

    /// Waits for the GPU (a kernel's failure surfaces here), then returns
    /// (and clears) the run's first error.
    fn take_failure(&self) -> Result<(), RuntimeError> {
        if let Err(e) = self.gpu.synchronize() {
            self.fail(e);
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
                    self.fail(e);
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
                    Err(e) => self.fail(e),
                }
            }
            if let Some(graph) = graphs.get(&key)
                && let Err(e) = self.gpu.replay(graph)
            {
                self.fail(e);
            }
        }
        if let Err(e) = self.gpu.synchronize() {
            self.fail(e);
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
            self.fail(e);
        }
    }
}

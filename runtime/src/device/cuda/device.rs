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
use super::sources::{LIBRARY_KERNELS, kernel_module, library_source};
use crate::RuntimeError;
use crate::device::{Caps, DeviceInfo};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The op library's module and each generated kernel's, by name.
type LoadedKernels = (Arc<Module>, BTreeMap<String, Arc<Module>>);

/// A CUDA device of a loaded plan.
pub struct CudaDevice {
    pub(super) info: DeviceInfo,
    /// Itself, for the steps it prepares (each holds its device).
    pub(super) this: std::sync::Weak<CudaDevice>,
    pub(super) gpu: Arc<Gpu>,
    pub(super) arch: &'static str,
    pub(super) arenas: Mutex<Vec<DeviceMemory>>,
    pub(super) generated: Mutex<BTreeMap<String, String>>,
    pub(super) modules: OnceLock<LoadedKernels>,
    pub(super) failure: Mutex<Option<RuntimeError>>,
    /// Each segment's launches captured as a CUDA graph on its first run,
    /// by (address of its first step, steps): a plan is static, so every
    /// later run replays it with one call instead of one launch per step.
    pub(super) graphs: Mutex<HashMap<(usize, usize), Graph>>,
    /// Capture segments into graphs (`GGPLAN_CUDA_GRAPHS=0` turns it off,
    /// to measure what it saves).
    pub(super) use_graphs: bool,
    /// Upload weights through page-locked staging (`GGPLAN_CUDA_STAGING=1`).
    /// Off by default: on the H100 host (2026-11-27) SmolLM2's 92.1 MiB took
    /// 42.7 / 49.9 ms staged against 20.1 / 19.7 ms copied directly from the
    /// file's cached pages (alternating loads), so staging is kept for
    /// measuring where it may gain (files read cold, larger models).
    pub(super) use_staging: bool,
    /// Wait for each step before the next (`GGPLAN_CUDA_PROFILE=1`), so
    /// profiles and traces time every kernel (each plus a synchronize).
    pub(super) step_by_step: bool,
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
    pub(super) fn alloc_device_arena(
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

    pub(super) fn lock_arenas(&self) -> std::sync::MutexGuard<'_, Vec<DeviceMemory>> {
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

    /// Keeps `e` if it is the run's first error (for `take_failure`).
    pub fn record_failure(&self, e: RuntimeError) {
        let mut slot = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
    }

    /// True once a call failed in this run.
    pub fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Returns (and clears) the first error kept since the last take.
    pub(super) fn take_error(&self) -> Result<(), RuntimeError> {
        let kept = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        kept.map_or(Ok(()), Err)
    }
}

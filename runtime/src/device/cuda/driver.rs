//! The CUDA driver API as the device needs it, over cudarc's `result`
//! functions (the driver is loaded at run time): a GPU's primary context and
//! its one stream, device memory, copies, modules and launches.
//!
//! Invariants:
//! - nothing of cudarc is called before the probe found a driver
//!   (`probe::probe`), since cudarc panics without one;
//! - one [`Gpu`] per ordinal per process (the primary context and one
//!   non-blocking stream), shared by every runtime that uses it, so the
//!   prefill and decode plans of a job share one ordered stream;
//! - every call binds the context to the calling thread first (executor
//!   threads change);
//! - [`DeviceMemory`] frees its allocation when dropped; kernels and copies
//!   only use addresses inside allocations their runtime holds.

use super::args::KArgs;
use crate::RuntimeError;
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex, Weak};

/// One GPU: its primary context and stream.
pub struct Gpu {
    /// `cuda0`, ...
    pub name: String,
    /// The driver's name for it.
    pub description: String,
    /// (major, minor) compute capability.
    pub compute_capability: (i32, i32),
    device: sys::CUdevice,
    context: sys::CUcontext,
    stream: sys::CUstream,
    /// Modules loaded, by the cache name of their source: each distinct
    /// source is loaded once per process.
    modules: Mutex<HashMap<String, Arc<Module>>>,
}

// SAFETY: the context and stream handles are usable from any thread once
// the context is bound to it (every method binds first); the driver
// serialises calls on one stream.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

fn driver_error(name: &str, what: &str, e: result::DriverError) -> RuntimeError {
    RuntimeError::Cuda {
        device: name.to_string(),
        what: format!("{what} failed: {e:?}"),
    }
}

static OPEN: Mutex<Vec<(i32, Weak<Gpu>)>> = Mutex::new(Vec::new());

impl Gpu {
    /// The GPU with `ordinal`, opened once per process (see the module doc).
    pub fn open(ordinal: i32, name: &str) -> Result<Arc<Gpu>, RuntimeError> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = (open.iter())
            .find(|(o, _)| *o == ordinal)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(gpu);
        }
        let found = match super::probe::probe() {
            super::CudaStatus::Unavailable(why) => {
                return Err(RuntimeError::NoDevice {
                    device: name.to_string(),
                    kind: "CUDA GPU".to_string(),
                    why,
                });
            }
            super::CudaStatus::Found { devices, .. } => devices,
        };
        let Some(found) = found.into_iter().find(|d| d.ordinal == ordinal) else {
            return Err(RuntimeError::NoDevice {
                device: name.to_string(),
                kind: format!("CUDA GPU {ordinal}"),
                why: "the driver lists no GPU with that ordinal".to_string(),
            });
        };
        let err = |what: &'static str| move |e| driver_error(name, what, e);
        let device = result::device::get(ordinal).map_err(err("cuDeviceGet"))?;
        // SAFETY: `device` came from cuDeviceGet.
        let context = unsafe { result::primary_ctx::retain(device) }
            .map_err(err("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: the context was just retained.
        unsafe { result::ctx::set_current(context) }.map_err(err("cuCtxSetCurrent"))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(err("cuStreamCreate"))?;
        let gpu = Arc::new(Gpu {
            name: name.to_string(),
            description: found.name,
            compute_capability: found.compute_capability.unwrap_or((0, 0)),
            device,
            context,
            stream,
            modules: Mutex::new(HashMap::new()),
        });
        open.retain(|(_, w)| w.strong_count() > 0);
        open.push((ordinal, Arc::downgrade(&gpu)));
        Ok(gpu)
    }

    fn err(&self, what: &str) -> impl Fn(result::DriverError) -> RuntimeError + '_ {
        let what = what.to_string();
        move |e| driver_error(&self.name, &what, e)
    }

    /// Makes the context current on this thread.
    pub fn bind(&self) -> Result<(), RuntimeError> {
        // SAFETY: the context stays retained while `self` lives.
        unsafe { result::ctx::set_current(self.context) }.map_err(self.err("cuCtxSetCurrent"))
    }

    /// (free, total) bytes of device memory.
    pub fn memory(&self) -> Result<(u64, u64), RuntimeError> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(self.err("cuMemGetInfo"))?;
        Ok((free as u64, total as u64))
    }

    /// `bytes` of zeroed device memory.
    pub fn alloc(self: &Arc<Gpu>, bytes: u64, usage: &str) -> Result<DeviceMemory, RuntimeError> {
        self.bind()?;
        let n = bytes.max(1) as usize;
        // SAFETY: the context is current; the allocation is freed on drop.
        let ptr = unsafe { result::malloc_sync(n) }.map_err(|e| RuntimeError::Cuda {
            device: self.name.clone(),
            what: format!("could not allocate {bytes} bytes for {usage}: {e:?}"),
        })?;
        let memory = DeviceMemory {
            gpu: Arc::clone(self),
            ptr,
            bytes,
        };
        // SAFETY: `ptr` holds `n` bytes, just allocated.
        unsafe { result::memset_d8_sync(ptr, 0, n) }.map_err(self.err("cuMemsetD8"))?;
        Ok(memory)
    }

    /// Writes `data` at device address `dst` and waits for it.
    pub fn upload(&self, dst: u64, data: &[u8]) -> Result<(), RuntimeError> {
        if data.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst..dst + len` lies in an allocation of ours (callers
        // checked the range); `data` lives until the synchronize below.
        unsafe { result::memcpy_htod_async(dst, data, self.stream) }
            .map_err(self.err("cuMemcpyHtoDAsync"))?;
        self.synchronize()
    }

    /// Reads `out.len()` bytes at device address `src`, after everything
    /// queued before.
    pub fn download(&self, src: u64, out: &mut [u8]) -> Result<(), RuntimeError> {
        if out.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: as in upload; `out` is written before the synchronize returns.
        unsafe { result::memcpy_dtoh_async(out, src, self.stream) }
            .map_err(self.err("cuMemcpyDtoHAsync"))?;
        self.synchronize()
    }

    /// Queues a copy of `bytes` from `src` to `dst`, both on this GPU.
    pub fn copy_within(&self, src: u64, dst: u64, bytes: usize) -> Result<(), RuntimeError> {
        self.bind()?;
        // SAFETY: both ranges lie in allocations of ours (the plan checker
        // proved the copy's size equals both tensors' spans).
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(self.err("cuMemcpyDtoDAsync"))
    }

    /// Queues zeroes over `bytes` at `dst`.
    pub fn zero(&self, dst: u64, bytes: usize) -> Result<(), RuntimeError> {
        self.bind()?;
        // SAFETY: the range lies in an allocation of ours.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream) }
            .map_err(self.err("cuMemsetD8Async"))?;
        self.synchronize()
    }

    /// Waits for everything queued; a kernel's failure surfaces here.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        self.bind()?;
        // SAFETY: the stream lives as long as `self`.
        unsafe { result::stream::synchronize(self.stream) }.map_err(self.err("a kernel or copy"))
    }

    /// The module of `source` (compiled for `arch` through the PTX cache,
    /// loaded once per process), with each of `names` found in it.
    pub fn module(
        &self,
        source: &str,
        arch: &'static str,
        names: &[&str],
    ) -> Result<Arc<Module>, RuntimeError> {
        let key = super::nvrtc::cache_name(source, arch);
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(&key) {
            return Ok(Arc::clone(m));
        }
        let ptx = super::nvrtc::ptx(source, arch, &self.name)?;
        let module = Arc::new(self.load(&ptx, names)?);
        modules.insert(key, Arc::clone(&module));
        Ok(module)
    }

    /// Loads a PTX module and finds each of `names` in it.
    pub fn load(&self, ptx: &str, names: &[&str]) -> Result<Module, RuntimeError> {
        self.bind()?;
        let image = CString::new(ptx).map_err(|_| RuntimeError::Cuda {
            device: self.name.clone(),
            what: "PTX with a NUL byte".to_string(),
        })?;
        // SAFETY: `image` is a NUL-terminated PTX text.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .map_err(self.err("cuModuleLoadData (the driver's PTX compiler)"))?;
        let mut functions = HashMap::new();
        for &name in names {
            let c = CString::new(name).expect("kernel names are identifiers");
            // SAFETY: `module` was just loaded.
            let f = unsafe { result::module::get_function(module, c) }
                .map_err(self.err(&format!("finding kernel {name}")))?;
            functions.insert(name.to_string(), Function(f));
        }
        Ok(Module { functions })
    }

    /// Queues `f` over `grid` blocks of `block` threads with `args`.
    pub fn launch(
        &self,
        f: Function,
        grid: [u32; 3],
        block: u32,
        args: &KArgs,
    ) -> Result<(), RuntimeError> {
        self.bind()?;
        let mut params = [args as *const KArgs as *mut c_void];
        // SAFETY: the kernel takes one `Args` by value, which the driver
        // copies at launch; its tensors are the step's (module invariant).
        unsafe {
            result::launch_kernel(
                f.0,
                (grid[0], grid[1], grid[2]),
                (block, 1, 1),
                0,
                self.stream,
                &mut params,
            )
        }
        .map_err(self.err("cuLaunchKernel"))
    }
}

/// A kernel of a loaded module.
#[derive(Clone, Copy, Debug)]
pub struct Function(sys::CUfunction);

// SAFETY: a function handle is valid in its context from any thread.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

/// A loaded module's kernels by name (the module stays loaded for the
/// process: a few kilobytes per distinct source).
pub struct Module {
    functions: HashMap<String, Function>,
}

impl Module {
    /// The kernel `name`.
    pub fn get(&self, name: &str) -> Option<Function> {
        self.functions.get(name).copied()
    }
}

/// A device allocation, freed on drop.
pub struct DeviceMemory {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
    bytes: u64,
}

impl DeviceMemory {
    /// Its device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // Freeing waits for queued work on the memory; an error here has no
        // one to report to (the run that failed reported it).
        if self.gpu.synchronize().is_ok() {
            // SAFETY: allocated by malloc_sync, freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if self.bind().is_ok() {
            // SAFETY: the stream was created by `open` and is destroyed once;
            // every allocation holds an Arc, so none outlives this.
            let _ = unsafe { result::stream::destroy(self.stream) };
            // SAFETY: `device` came from cuDeviceGet and its context was retained once.
            let _ = unsafe { result::primary_ctx::release(self.device) };
        }
    }
}

impl crate::state::DeviceState for DeviceMemory {
    fn addr(&self) -> u64 {
        self.ptr
    }

    fn zero(&self) -> Result<(), RuntimeError> {
        self.gpu.zero(self.ptr, self.bytes as usize)
    }
}

/// A captured sequence of launches (a CUDA graph), replayed with one call.
pub struct Graph {
    gpu: Arc<Gpu>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles are usable from any thread with the context bound
// (every use binds first).
unsafe impl Send for Graph {}
// SAFETY: as above; replays are serialised by the caller's lock.
unsafe impl Sync for Graph {}

impl Gpu {
    /// Captures the launches `record` queues on this GPU's stream into a
    /// graph (nothing runs while capturing).
    pub fn capture(
        self: &Arc<Gpu>,
        record: impl FnOnce() -> Result<(), RuntimeError>,
    ) -> Result<Graph, RuntimeError> {
        self.bind()?;
        // SAFETY: the stream lives as long as `self`; relaxed mode lets
        // other threads use the driver meanwhile.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(self.err("cuStreamBeginCapture"))?;
        let recorded = record();
        // Always ended, so the stream leaves capture mode even on an error.
        // SAFETY: the stream is capturing (begun above).
        let graph = unsafe { result::stream::end_capture(self.stream) }
            .map_err(self.err("cuStreamEndCapture"))?;
        let destroy = |g| {
            // SAFETY: `g` came from end_capture and is destroyed once.
            let _ = unsafe { result::graph::destroy(g) };
        };
        if let Err(e) = recorded {
            destroy(graph);
            return Err(e);
        }
        // SAFETY: `graph` is a complete captured graph.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Graph {
                gpu: Arc::clone(self),
                graph,
                exec,
            }),
            Err(e) => {
                destroy(graph);
                Err(driver_error(&self.name, "cuGraphInstantiate", e))
            }
        }
    }

    /// Queues one replay of `graph`.
    pub fn replay(&self, graph: &Graph) -> Result<(), RuntimeError> {
        self.bind()?;
        // SAFETY: `graph.exec` was instantiated on this GPU and lives as long as `graph`.
        unsafe { result::graph::launch(graph.exec, self.stream) }.map_err(self.err("cuGraphLaunch"))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.gpu.synchronize().is_ok() {
            // SAFETY: created by `capture`, destroyed once, not running (synchronized).
            unsafe {
                let _ = result::graph::exec_destroy(self.exec);
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}

/// Page-locked host buffers and one event per buffer on a GPU's stream: the
/// [`Stager`](crate::device::staging::Stager) of weight uploads at load.
pub struct PinnedStaging {
    gpu: Arc<Gpu>,
    buffers: Vec<*mut u8>,
    events: Vec<sys::CUevent>,
    bytes: usize,
}

impl Gpu {
    /// `count` page-locked buffers of `bytes` each, with their events; an
    /// error when the driver refuses them (the caller then copies without).
    pub fn pinned_staging(
        self: &Arc<Gpu>,
        count: usize,
        bytes: usize,
    ) -> Result<PinnedStaging, RuntimeError> {
        self.bind()?;
        // Built up one resource at a time, so a failure drops (frees) what
        // was made before it.
        let mut staging = PinnedStaging {
            gpu: Arc::clone(self),
            buffers: Vec::with_capacity(count),
            events: Vec::with_capacity(count),
            bytes,
        };
        for _ in 0..count {
            // SAFETY: the context is current; freed by `Drop` below.
            let p = unsafe { result::malloc_host(bytes, 0) }
                .map_err(self.err("cuMemHostAlloc (page-locked staging)"))?;
            staging.buffers.push(p.cast());
            let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(self.err("cuEventCreate"))?;
            staging.events.push(e);
        }
        Ok(staging)
    }
}

impl crate::device::staging::Stager for PinnedStaging {
    fn buffers(&self) -> usize {
        self.buffers.len()
    }

    fn buffer_bytes(&self) -> usize {
        self.bytes
    }

    fn write(&mut self, buffer: usize, offset: usize, bytes: &[u8]) {
        assert!(
            offset + bytes.len() <= self.bytes,
            "a write past a staging buffer"
        );
        // SAFETY: in bounds (asserted); the staging order waited for every
        // copy out of this buffer before writing it again.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.buffers[buffer].add(offset),
                bytes.len(),
            )
        };
    }

    fn queue_copy(
        &mut self,
        buffer: usize,
        offset: usize,
        len: usize,
        dst: u64,
    ) -> Result<(), RuntimeError> {
        assert!(offset + len <= self.bytes, "a copy past a staging buffer");
        self.gpu.bind()?;
        // SAFETY: the source lies in the page-locked buffer (asserted), which
        // lives until the copies are waited for (Drop synchronizes first);
        // the destination range was checked against its tensor by the caller.
        let src = unsafe { std::slice::from_raw_parts(self.buffers[buffer].add(offset), len) };
        // SAFETY: as above.
        unsafe { result::memcpy_htod_async(dst, src, self.gpu.stream) }
            .map_err(self.gpu.err("cuMemcpyHtoDAsync (staged)"))
    }

    fn record(&mut self, buffer: usize) -> Result<(), RuntimeError> {
        self.gpu.bind()?;
        // SAFETY: the event and the stream live as long as `self`.
        unsafe { result::event::record(self.events[buffer], self.gpu.stream) }
            .map_err(self.gpu.err("cuEventRecord"))
    }

    fn wait(&mut self, buffer: usize) -> Result<(), RuntimeError> {
        self.gpu.bind()?;
        // SAFETY: as above; an event never recorded completes at once.
        unsafe { result::event::synchronize(self.events[buffer]) }
            .map_err(self.gpu.err("a staged weight copy"))
    }
}

impl Drop for PinnedStaging {
    fn drop(&mut self) {
        // Copies out of the buffers may still be queued after an error:
        // wait for the stream before freeing them.
        if self.gpu.synchronize().is_err() {
            // The context failed; freeing page-locked memory it may still
            // copy from is unsafe, so it stays allocated (a failed GPU
            // context ends the job anyway).
            return;
        }
        for &e in &self.events {
            // SAFETY: created by `pinned_staging`, destroyed once.
            let _ = unsafe { result::event::destroy(e) };
        }
        for &p in &self.buffers {
            // SAFETY: allocated by malloc_host, freed once, no copy pending.
            let _ = unsafe { result::free_host(p.cast()) };
        }
    }
}

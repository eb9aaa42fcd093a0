//! Prepared steps on a CUDA device: a kernel launch, and a copy into, out of
//! or between GPUs. The device runs them from its stream's thread; errors go
//! to the device's failure slot, reported when the run ends.
//!
//! Invariant: a copy touches host memory only at the host tensor it was
//! prepared with, for exactly its `bytes` (the plan checker proved the
//! copy's size equals both tensors' spans).

use super::device::CudaDevice;
use super::driver::Function;
use super::launch::Launch;
use crate::device::DeviceStep;
use std::any::Any;
use std::sync::{Arc, OnceLock};

/// One step launched on a GPU.
pub struct CudaStep {
    /// The device it runs on.
    pub device: Arc<CudaDevice>,
    /// What to launch.
    pub launch: Launch,
    /// The function, found on the first run (kernels load after preparation).
    pub function: OnceLock<Function>,
}

impl CudaStep {
    /// A step launching `launch` on `device` (its kernel registered there).
    pub fn new(device: &Arc<CudaDevice>, launch: Launch) -> CudaStep {
        device.register(&launch.kernel);
        CudaStep {
            device: Arc::clone(device),
            launch,
            function: OnceLock::new(),
        }
    }

    fn launch(&self) -> Result<(), crate::RuntimeError> {
        let f = match self.function.get() {
            Some(f) => *f,
            None => {
                // Found on the first run: kernels load after preparation.
                let f = self.device.function(&self.launch.kernel)?;
                let _ = self.function.set(f);
                f
            }
        };
        let l = &self.launch;
        self.device.gpu().launch(f, l.grid, l.block, &l.args)
    }
}

impl CudaStep {
    /// Launches the kernel (unless the run already failed on this device).
    pub fn run(&self) {
        if !self.device.failed()
            && let Err(e) = self.launch()
        {
            self.device.record_failure(e);
        }
    }
}

impl DeviceStep for CudaStep {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn describe(&self) -> String {
        format!(
            "cuda {} on {}",
            self.launch.kernel.name(),
            self.device.gpu().name
        )
    }
}

/// One end of a copy.
pub enum End {
    /// Host memory (a CPU device's arena).
    Host(*mut u8),
    /// A device address on a GPU.
    Gpu(Arc<CudaDevice>, u64),
}

/// A copy with at least one GPU end.
pub struct CudaCopy {
    /// Where the bytes are.
    pub from: End,
    /// Where they go.
    pub to: End,
    /// How many.
    pub bytes: usize,
}

// SAFETY: the host address points into a runtime buffer that outlives the
// kernel; only thread 0 touches it, and the executor orders it by events.
unsafe impl Send for CudaCopy {}
// SAFETY: as above.
unsafe impl Sync for CudaCopy {}

impl CudaCopy {
    fn blame(&self) -> &Arc<CudaDevice> {
        match (&self.from, &self.to) {
            (End::Gpu(d, _), _) | (_, End::Gpu(d, _)) => d,
            (End::Host(_), End::Host(_)) => unreachable!("a CUDA copy has a GPU end"),
        }
    }

    fn transfer(&self) -> Result<(), crate::RuntimeError> {
        match (&self.from, &self.to) {
            (End::Host(src), End::Gpu(dev, at)) => {
                // SAFETY: `src` holds `bytes` bytes of a host arena (module invariant).
                let data = unsafe { std::slice::from_raw_parts(*src, self.bytes) };
                dev.gpu().upload(*at, data)
            }
            (End::Gpu(dev, at), End::Host(dst)) => {
                // SAFETY: as above; no other stream touches it until the copy's event.
                let out = unsafe { std::slice::from_raw_parts_mut(*dst, self.bytes) };
                dev.gpu().download(*at, out)
            }
            (End::Gpu(a, from), End::Gpu(b, to)) if Arc::ptr_eq(a.gpu(), b.gpu()) => {
                a.gpu().copy_within(*from, *to, self.bytes)?;
                a.gpu().synchronize()
            }
            (End::Gpu(a, from), End::Gpu(b, to)) => {
                // Two GPUs: through the host (peer copies are not used yet).
                let mut staging = vec![0u8; self.bytes];
                a.gpu().download(*from, &mut staging)?;
                b.gpu().upload(*to, &staging)
            }
            (End::Host(_), End::Host(_)) => Ok(()),
        }
    }
}

impl CudaCopy {
    /// Moves the bytes (unless the run already failed on the GPU end).
    pub fn run(&self) {
        if !self.blame().failed()
            && let Err(e) = self.transfer()
        {
            self.blame().record_failure(e);
        }
    }
}

impl DeviceStep for CudaCopy {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn describe(&self) -> String {
        format!("cuda copy {} bytes", self.bytes)
    }
}

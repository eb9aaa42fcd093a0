//! Which CUDA devices this machine has, through `cudarc`'s driver API loaded
//! at run time (the registry asks; `ggplan devices` prints it).
//!
//! Invariant: nothing of cudarc is called before `is_culib_present()` says
//! libcuda can be loaded (cudarc panics when it cannot), and the whole probe
//! also runs under `catch_unwind`, so a missing or broken driver is reported
//! as a reason, never as a crash. No context is created: only device queries.
//! A build without the `cuda` feature has no cudarc and reports that reason.

#[cfg(feature = "cuda")]
use cudarc::driver::{result, sys};

/// One CUDA device.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaDevice {
    /// The ordinal (`cuda0` is 0).
    pub ordinal: i32,
    /// The driver's name for it.
    pub name: String,
    /// Total device memory, bytes.
    pub total_mem: Option<u64>,
    /// (major, minor) compute capability.
    pub compute_capability: Option<(i32, i32)>,
    /// Streaming multiprocessors.
    pub multiprocessors: Option<i32>,
}

/// What the probe found.
#[derive(Clone, Debug, PartialEq)]
pub enum CudaStatus {
    /// No usable driver; the reason, in words.
    Unavailable(String),
    /// The driver loaded; its version (e.g. 12090) and the devices.
    Found {
        /// `cuDriverGetVersion`.
        driver_version: Option<i32>,
        /// Every device, by ordinal.
        devices: Vec<CudaDevice>,
    },
}

/// Probes the CUDA driver (in a build without the `cuda` feature: says so).
#[cfg(not(feature = "cuda"))]
pub fn probe() -> CudaStatus {
    CudaStatus::Unavailable(
        "this build has no CUDA support (built without the `cuda` feature)".to_string(),
    )
}

/// Probes the CUDA driver.
#[cfg(feature = "cuda")]
pub fn probe() -> CudaStatus {
    // SAFETY: this only tries to dlopen libcuda under its usual names; loading
    // a driver library runs its initialisers, which is what using CUDA means.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() });
    match present {
        Ok(true) => {}
        Ok(false) => {
            return CudaStatus::Unavailable(
                "no CUDA driver (libcuda.so not found): CUDA devices need the NVIDIA driver"
                    .to_string(),
            );
        }
        Err(_) => {
            return CudaStatus::Unavailable(
                "no CUDA driver (loading libcuda.so failed)".to_string(),
            );
        }
    }
    // cudarc panics when a symbol is missing (a driver older than the API it
    // was built for): keep that panic quiet and turn it into a reason.
    match catch_quietly(query) {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => CudaStatus::Unavailable(format!("the CUDA driver is present but {e}")),
        Err(_) => CudaStatus::Unavailable(
            "the CUDA driver is present but too old for this build (a driver call is missing)"
                .to_string(),
        ),
    }
}

/// Runs `f`, turning a panic into `Err` without printing it: cudarc panics
/// where a library lacks a symbol it was built for. The default hook is
/// swapped out for the call, under a lock, so two callers never restore each
/// other's hook.
#[cfg(feature = "cuda")]
pub(crate) fn catch_quietly<T>(
    f: impl FnOnce() -> T + std::panic::UnwindSafe,
) -> std::thread::Result<T> {
    static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    result
}

#[cfg(feature = "cuda")]
fn query() -> Result<CudaStatus, String> {
    result::init().map_err(|e| format!("cuInit failed: {e}"))?;
    let mut version = 0;
    // SAFETY: `version` is a valid out pointer for the call's duration.
    let driver_version = unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .ok()
        .map(|()| version);
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal)
            .map_err(|e| format!("cuDeviceGet({ordinal}) failed: {e}"))?;
        let attr = |a| {
            // SAFETY: `dev` came from cuDeviceGet above.
            unsafe { result::device::get_attribute(dev, a) }.ok()
        };
        use sys::CUdevice_attribute as A;
        let cc = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .zip(attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
        devices.push(CudaDevice {
            ordinal,
            name: result::device::get_name(dev).unwrap_or_else(|e| format!("? ({e})")),
            // SAFETY: `dev` came from cuDeviceGet above.
            total_mem: unsafe { result::device::total_mem(dev) }
                .ok()
                .map(|b| b as u64),
            compute_capability: cc,
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        });
    }
    Ok(CudaStatus::Found {
        driver_version,
        devices,
    })
}

//! The CUDA backend: opens a plan's GPUs (or, in a build without the
//! `cuda` feature, refuses a plan that names one, with the reason).

use crate::RuntimeError;
use crate::device::backend::{DeviceBackend, OpenCtx, Opened};
use ir::plan::{DeviceKind, Plan};

/// Opens `DeviceKind::Cuda` plan devices.
pub struct CudaBackend;

impl DeviceBackend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    fn open(&self, plan: &Plan, _ctx: &OpenCtx<'_>) -> Result<Opened, RuntimeError> {
        let devices = (plan.devices.iter())
            .map(|dev| match dev.kind {
                DeviceKind::Cuda { ordinal } => open(&dev.name, ordinal, dev.alignment).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        Ok((devices, Vec::new()))
    }
}

#[cfg(feature = "cuda")]
fn open(
    name: &str,
    ordinal: u32,
    alignment: u64,
) -> Result<std::sync::Arc<dyn crate::device::Device>, RuntimeError> {
    Ok(super::CudaDevice::open(name, ordinal, alignment)?)
}

#[cfg(not(feature = "cuda"))]
fn open(
    name: &str,
    _ordinal: u32,
    _alignment: u64,
) -> Result<std::sync::Arc<dyn crate::device::Device>, RuntimeError> {
    Err(RuntimeError::NoDevice {
        device: name.to_string(),
        kind: "CUDA GPU".to_string(),
        why: "this build has no CUDA support (built without the `cuda` feature)".to_string(),
    })
}

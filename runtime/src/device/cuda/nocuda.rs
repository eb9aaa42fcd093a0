//! Stand-ins for a build without the `cuda` feature: a CUDA device that can
//! never be opened (every plan naming one is refused at load with the
//! reason), and the step types that could only be built from one.

use super::launch::Launch;
use crate::RuntimeError;
use crate::cpu::{CpuKernel, ThreadCtx};
use crate::device::{Device, DeviceInfo, TensorBytes};
use crate::memory::AlignedBuffer;
use crate::steps::PreparedStep;
use std::convert::Infallible;
use std::sync::Arc;

/// A CUDA device; none exists in this build.
pub struct CudaDevice {
    never: Infallible,
}

impl CudaDevice {
    /// Refused: this build has no CUDA support.
    pub fn open(
        name: &str,
        _ordinal: u32,
        _alignment: u64,
    ) -> Result<Arc<CudaDevice>, RuntimeError> {
        Err(RuntimeError::NoDevice {
            device: name.to_string(),
            kind: "CUDA GPU".to_string(),
            why: "this build has no CUDA support (built without the `cuda` feature)".to_string(),
        })
    }

    /// Never called (no device exists).
    pub fn alloc_arena(
        &self,
        _arena: usize,
        _bytes: u64,
        _usage: &str,
    ) -> Result<u64, RuntimeError> {
        match self.never {}
    }

    /// Never called (no device exists).
    pub fn load_kernels(&self) -> Result<(), RuntimeError> {
        match self.never {}
    }

    /// Never called (no device exists).
    pub fn take_failure(&self) -> Result<(), RuntimeError> {
        match self.never {}
    }

    /// Never called (no device exists).
    pub fn fail(&self, _e: RuntimeError) {
        match self.never {}
    }

    /// Never called (no device exists).
    pub fn bind_state(
        &self,
        _store: &crate::StateStore,
        _name: &str,
        _layout: &ir::Layout,
    ) -> Result<u64, RuntimeError> {
        match self.never {}
    }
}

impl Device for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        match self.never {}
    }
    fn alloc(&self, _: u64, _: u64, _: &str) -> Result<AlignedBuffer, RuntimeError> {
        match self.never {}
    }
    fn run_steps(&self, _: &[PreparedStep], _: &(dyn Fn(usize) + Sync)) {
        match self.never {}
    }
    fn copy(&self, _: &PreparedStep) {
        match self.never {}
    }
    fn set_tensor(&self, _: TensorBytes, _: usize, _: &[u8]) -> Result<(), RuntimeError> {
        match self.never {}
    }
    fn get_tensor(&self, _: TensorBytes, _: usize, _: &mut [u8]) -> Result<(), RuntimeError> {
        match self.never {}
    }
    fn synchronize(&self) {
        match self.never {}
    }
}

/// A step on a GPU; none exists in this build.
pub struct CudaStep {
    never: Infallible,
}

impl CudaStep {
    /// Never called (no device exists).
    pub fn new(device: &Arc<CudaDevice>, _launch: Launch) -> CudaStep {
        match device.never {}
    }
}

impl CpuKernel for CudaStep {
    unsafe fn run(&self, _: &ThreadCtx<'_>, _: *mut u8) {
        match self.never {}
    }
    fn describe(&self) -> String {
        match self.never {}
    }
}

/// One end of a copy.
pub enum End {
    /// Host memory.
    Host(*mut u8),
    /// A GPU address; none exists in this build.
    Gpu(Arc<CudaDevice>, u64),
}

/// A copy with a GPU end; none exists in this build.
pub struct CudaCopy {
    /// Where the bytes are.
    pub from: End,
    /// Where they go.
    pub to: End,
    /// How many.
    pub bytes: usize,
}

// SAFETY: never constructed with a live GPU end (no device exists).
unsafe impl Send for CudaCopy {}
// SAFETY: as above.
unsafe impl Sync for CudaCopy {}

impl CpuKernel for CudaCopy {
    unsafe fn run(&self, _: &ThreadCtx<'_>, _: *mut u8) {}
    fn describe(&self) -> String {
        format!("cuda copy {} bytes", self.bytes)
    }
}

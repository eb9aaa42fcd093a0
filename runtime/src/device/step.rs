//! A prepared step as everything outside a device holds it: what runs (a
//! [`DeviceStep`] that only its device can run), what it touches and what
//! it costs.
//!
//! Invariant: a step is run only by the device that prepared it
//! ([`PreparedStep::device`]); that device takes its own type back with
//! `own_step`.

use ir::Op;
use std::any::Any;

/// A prepared step or copy as the executor, profiles and traces hold it:
/// only the device that prepared it knows how to run it (it downcasts
/// through [`DeviceStep::as_any`]).
pub trait DeviceStep: Send + Sync {
    /// What runs, in words (`bench` names kernels and their ISA with it).
    fn describe(&self) -> String;

    /// Bytes of per-run scratch the step needs (CPU kernels).
    fn scratch_bytes(&self) -> usize {
        0
    }

    /// The step as `Any`, for its device to take back its own type.
    fn as_any(&self) -> &dyn Any;
}

/// A step ready to run, with the figures a profile prints.
pub struct PreparedStep {
    /// The kernel, which only the device that prepared it runs.
    pub kernel: Box<dyn DeviceStep>,
    /// Split index.
    pub split: usize,
    /// The plan device that prepared it and runs it: its split's device for
    /// a step; for a copy, the end that moves the bytes (module doc), whose
    /// copy stream may belong to the other end.
    pub device: usize,
    /// What it is: an op name, `fused`, `mul_mat_add`, `attention`,
    /// `mul_mat_glu`, `mul_mat_many` (whose `dst` is its first result), or
    /// `copy`.
    pub kind: &'static str,
    /// The op, for an op step.
    pub op: Option<Op>,
    /// The plan's kernel index, for a fused step.
    pub fused_kernel: Option<u32>,
    /// For a `mul_mat` + `add` step: the product computed inside it (no
    /// bytes); `srcs` are the weight, the activations and the addend.
    pub product: Option<u32>,
    /// The plan tensor written.
    pub dst: u32,
    /// The plan tensors read.
    pub srcs: Vec<u32>,
    /// Bytes read and written (each operand's span once).
    pub bytes: u64,
    /// Floating-point operations (2 per multiply-add for mul_mat; one per
    /// output element for the rest).
    pub flops: u64,
    /// True when the reference fallback runs it.
    pub fallback: bool,
}

/// Runs `f` on `step` as the step type `T` its device prepared; a step of
/// another type is a bug in the loader (a device ran what it did not
/// prepare), reported with both names.
pub(crate) fn own_step<'s, T: 'static>(device: &str, step: &'s dyn DeviceStep) -> &'s T {
    step.as_any().downcast_ref::<T>().unwrap_or_else(|| {
        panic!(
            "device '{device}' was handed a step it did not prepare: {}",
            step.describe()
        )
    })
}

//! A kind of device as the registry sees it (ggml's backend registration):
//! something that opens the plan devices it serves. One per room (`cpu`
//! through the registry's host enumeration, `cuda/backend.rs`,
//! `rpc/backend.rs`); a test or an embedder adds its own through
//! [`crate::LoadOptions::backends`].

use super::Device;
use super::cpu::FastKernels;
use crate::LoadOptions;
use crate::RuntimeError;
use ir::plan::Plan;
use std::sync::Arc;

/// What a backend opens a plan's devices with.
pub struct OpenCtx<'a> {
    /// The load's options (threads, a shared pool, remote servers).
    pub options: &'a LoadOptions,
    /// The kernel families CPU steps are prepared with.
    pub kernels: &'a Arc<FastKernels>,
}

/// The plan devices a backend opened (`None` for the ones it does not
/// serve), and what the user should know.
pub type Opened = (Vec<Option<Arc<dyn Device>>>, Vec<String>);

/// Every device of a plan by plan device id, and what the user should know.
pub type OpenedAll = (Vec<Arc<dyn Device>>, Vec<String>);

/// A kind of device (ggml's backend registration): opens the plan devices
/// it serves. A new kind of device is a new backend in its own room under
/// `device/`, added to [`super::registry::builtin_backends`]; a test or an embedder may put
/// backends of its own before those ([`crate::LoadOptions::backends`]).
pub trait DeviceBackend: Send + Sync {
    /// Its name, for messages.
    fn name(&self) -> &str;

    /// Opens the devices of `plan` this backend serves, one entry per plan
    /// device (`None` for the others), or why one of them cannot be opened.
    fn open(&self, plan: &Plan, ctx: &OpenCtx<'_>) -> Result<Opened, RuntimeError>;
}

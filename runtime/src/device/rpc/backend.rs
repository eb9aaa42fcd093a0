//! The RPC backend: opens a plan's remote devices on the servers given at
//! load (`--rpc`), plan device `Remote { server: i }` on server `i`.

use super::{RemoteDevice, RemoteServers};
use crate::RuntimeError;
use crate::device::backend::{DeviceBackend, OpenCtx, Opened};
use ir::plan::{DeviceKind, Plan};
use std::sync::Arc;

/// Opens `DeviceKind::Remote` plan devices.
pub struct RpcBackend;

impl DeviceBackend for RpcBackend {
    fn name(&self) -> &str {
        "rpc"
    }

    /// Refuses by name a plan that needs a server the load does not list.
    fn open(&self, plan: &Plan, ctx: &OpenCtx<'_>) -> Result<Opened, RuntimeError> {
        let rpc = ctx.options.rpc.as_deref();
        let mut out = Vec::with_capacity(plan.devices.len());
        for dev in &plan.devices {
            let DeviceKind::Remote { server } = dev.kind else {
                out.push(None);
                continue;
            };
            let Some(endpoint) = rpc.and_then(|r| r.get(server)) else {
                let given = rpc.map_or(0, RemoteServers::len);
                return Err(RuntimeError::NoDevice {
                    device: dev.name.clone(),
                    kind: format!("remote server {server}"),
                    why: format!(
                        "{given} server(s) given; pass --rpc HOST:PORT,... listing at least {}",
                        server + 1
                    ),
                });
            };
            let device = RemoteDevice::open(&dev.name, Arc::clone(endpoint), dev.alignment)?;
            out.push(Some(device as Arc<dyn crate::device::Device>));
        }
        Ok((out, Vec::new()))
    }
}

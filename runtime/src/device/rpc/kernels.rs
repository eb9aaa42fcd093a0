//! Prepared steps that involve a remote device: a step it computes, and a
//! copy into, out of, or between remote devices.
//!
//! The device runs them from its stream's thread (each is one or two calls
//! to a server); errors go to the remote device's failure slot, which the
//! runtime reports when the run ends.
//!
//! Invariant: a copy touches host memory only at the host tensor it was
//! prepared with, for exactly its `bytes` (the plan checker proved the copy's
//! size equals both tensors' spans).

use super::device::RemoteDevice;
use super::ggml::StepGraph;
use crate::device::DeviceStep;
use std::any::Any;
use std::sync::Arc;

/// One step computed by a remote device. The device sends the graphs of a
/// whole segment at once ([`RemoteDevice::compute`]).
pub struct RemoteStep {
    /// The device computing it.
    pub device: Arc<RemoteDevice>,
    /// Its node and sources, as the server reads them.
    pub graph: Arc<StepGraph>,
}

impl DeviceStep for RemoteStep {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn describe(&self) -> String {
        format!("remote step on {}", self.device.endpoint())
    }
}

/// One end of a copy.
pub enum End {
    /// Host memory (a CPU device's arena).
    Host(*mut u8),
    /// A server address on a remote device.
    Remote(Arc<RemoteDevice>, u64),
}

/// A copy with at least one remote end.
pub struct RemoteCopy {
    /// Where the bytes are.
    pub from: End,
    /// Where they go.
    pub to: End,
    /// How many.
    pub bytes: usize,
}

// SAFETY: the host address points into a runtime buffer that outlives the
// kernel; only thread 0 touches it, and the executor orders it by events.
unsafe impl Send for RemoteCopy {}
// SAFETY: as above.
unsafe impl Sync for RemoteCopy {}

impl RemoteCopy {
    /// The device whose failure slot takes this copy's error.
    fn blame(&self) -> &Arc<RemoteDevice> {
        match (&self.from, &self.to) {
            (End::Remote(d, _), _) | (_, End::Remote(d, _)) => d,
            (End::Host(_), End::Host(_)) => unreachable!("a remote copy has a remote end"),
        }
    }

    fn transfer(&self) -> Result<(), crate::RuntimeError> {
        match (&self.from, &self.to) {
            (End::Host(src), End::Remote(dev, at)) => {
                // SAFETY: `src` holds `bytes` bytes of a host arena (module invariant).
                let data = unsafe { std::slice::from_raw_parts(*src, self.bytes) };
                dev.write(*at, data, "copy to the server")
            }
            (End::Remote(dev, at), End::Host(dst)) => {
                // SAFETY: as above; no other stream touches it until the copy's event.
                let out = unsafe { std::slice::from_raw_parts_mut(*dst, self.bytes) };
                dev.read(*at, out, "copy from the server")
            }
            (End::Remote(a, from), End::Remote(b, to)) if a.same_server(b) => {
                a.copy_within(*from, *to, self.bytes)
            }
            (End::Remote(a, from), End::Remote(b, to)) => {
                // Servers do not talk to each other: through the host.
                let mut staging = vec![0u8; self.bytes];
                a.read(*from, &mut staging, "copy to another server")?;
                b.write(*to, &staging, "copy from another server")
            }
            (End::Host(_), End::Host(_)) => Ok(()),
        }
    }
}

impl RemoteCopy {
    /// Moves the bytes (unless the run already failed on a remote end).
    pub fn run(&self) {
        let blame = self.blame();
        let other_failed = match (&self.from, &self.to) {
            (End::Remote(a, _), End::Remote(b, _)) => a.failed() || b.failed(),
            _ => blame.failed(),
        };
        if !other_failed && let Err(e) = self.transfer() {
            blame.record_failure(e);
        }
    }
}

impl DeviceStep for RemoteCopy {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn describe(&self) -> String {
        format!("remote copy {} bytes", self.bytes)
    }
}

//! The remote device: one plan device whose memory and compute are a ggml
//! RPC server's, and the connections a process holds to its servers.
//!
//! [`RemoteServers`] is the `--rpc host:port,...` list, connected once per
//! job and shared by every runtime of that job (the server serves one client
//! connection at a time, so a second connection from the same process would
//! wait forever). [`RemoteDevice`] is what one runtime holds on one server:
//! the buffers of its arenas (allocated at load, freed when the runtime is
//! dropped, also after a failed load) and the first error of a run.
//!
//! Addresses: a remote arena's "base" is the server's address of its buffer,
//! so the runtime's address table (`addresses.rs`) holds server addresses for
//! remote tensors. They are never dereferenced here: every byte of a remote
//! tensor moves through [`crate::device::Device::set_tensor`] / [`crate::device::Device::get_tensor`] or a
//! remote copy, which find the buffer holding an address ([`RemoteDevice::locate`])
//! and refuse one that no buffer holds.
//!
//! Invariants: one connection per server per process, used under a lock, so
//! each call (request and answer) is atomic and calls reach the server in
//! the order the executor's events impose. Every access to a server's memory
//! is a call on that one connection, which the server serves in order, so
//! `run_steps` returns once the graph is sent: a call made after the
//! executor's event for it (a copy out, an output read, a write into bytes
//! the graph read) is served after the graph; the runtime waits for a
//! graph nothing read after ([`RemoteServer::finish`]) before a run returns. After
//! the first failure a device does no more I/O in that run and the runtime
//! reports the failure (naming the server) when the run ends, so a dead
//! server costs at most one call's timeout, never a hang.

use super::client::RpcClient;
use super::ggml::{RemoteAddr, StepGraph, graph_payload};
use super::tensor::RpcTensor;
use crate::RuntimeError;
use crate::device::{Caps, DeviceInfo};
use crate::weights::Weights;
use ir::layout::fmt_ne;
use ir::{DType, Layout};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long one call may take before the server counts as gone.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One connected RPC server.
pub struct RemoteServer {
    endpoint: String,
    client: Mutex<RpcClient>,
    /// State tensors (KV caches) kept on this server for every runtime of
    /// the job, by name: the remote side of a [`crate::StateStore`].
    states: Mutex<BTreeMap<String, RemoteState>>,
    /// Weights uploaded once for every runtime of the job, by the mapped
    /// file bytes they were read from.
    weights: Mutex<Vec<CachedWeight>>,
    /// What the server last computed, locked after `client`.
    graph: Mutex<GraphState>,
}

/// The server keeps the last graph it computed, so the same graph again
/// (decode: one segment per token) is a 9-byte `GRAPH_RECOMPUTE` instead of
/// every record again; and a graph's end is waited for only when nothing
/// read from the server after it (every answered call comes after it).
#[derive(Default)]
struct GraphState {
    /// The payload of the graph the server holds, while it holds it (a freed
    /// buffer forgets it: the server refuses to recompute after that).
    last: Option<Vec<u8>>,
    /// The client's round-trip count when a graph was last sent.
    sent_at: Option<u64>,
}

/// A weight uploaded to a server: the file bytes it came from (address and
/// length in the mapping, which `_source` keeps mapped, so the address
/// cannot be reused for other bytes) and where it lives on the server.
struct CachedWeight {
    from: (usize, usize),
    /// Held as a dequantized F32 copy (exact precision), not its file bytes.
    as_f32: bool,
    buffer: RemoteBuffer,
    _source: Weights,
}

/// One state tensor kept on a server.
struct RemoteState {
    dtype: DType,
    ne: [i64; 4],
    buffer: RemoteBuffer,
}

impl RemoteServer {
    /// Connects to `endpoint` (`host:port`) and checks its protocol version.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<RemoteServer, RuntimeError> {
        let client = RpcClient::connect(endpoint, timeout)?;
        Ok(RemoteServer {
            endpoint: endpoint.to_string(),
            client: Mutex::new(client),
            states: Mutex::new(BTreeMap::new()),
            weights: Mutex::new(Vec::new()),
            graph: Mutex::new(GraphState::default()),
        })
    }

    fn graph_state(&self) -> MutexGuard<'_, GraphState> {
        self.graph.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a graph to compute on the server's first device, or asks it to
    /// compute the graph it holds when `payload` is that graph; returns
    /// without waiting (the server computes requests in order, so every
    /// later call on the connection sees the result).
    fn compute(&self, payload: Vec<u8>) -> Result<(), RuntimeError> {
        let mut c = self.client();
        let mut g = self.graph_state();
        if g.last.as_ref() == Some(&payload) {
            c.graph_recompute(0)?;
        } else {
            g.last = None;
            c.graph_compute(&payload)?;
            g.last = Some(payload);
        }
        g.sent_at = Some(c.stats().round_trips);
        Ok(())
    }

    /// Waits for the last graph sent, unless a call answered since did.
    pub fn finish(&self) -> Result<(), RuntimeError> {
        let mut c = self.client();
        let mut g = self.graph_state();
        if g.sent_at.take() == Some(c.stats().round_trips) {
            c.sync()?;
        }
        Ok(())
    }

    /// The server address of weight `name` read in place from `source`'s
    /// mapped file at `bytes`: uploaded into a buffer of its own on first
    /// use, found again by every later runtime of the job (prefill and each
    /// decode bucket), so a session uploads each weight once. Returns the
    /// address and whether this call uploaded it.
    ///
    /// With `as_f32` (a block-quantized `dtype`), the server gets the
    /// weight's values dequantized to packed F32 instead, and ggml's kernels
    /// multiply in f32 as our exact precision does, not with 8-bit
    /// activations; the records of its readers say F32 ([`RemoteAddr`]).
    pub fn bind_weight(
        &self,
        name: &str,
        bytes: &[u8],
        source: &Weights,
        as_f32: Option<DType>,
    ) -> Result<(u64, bool), RuntimeError> {
        let from = (bytes.as_ptr() as usize, bytes.len());
        let mut weights = self.weights.lock().unwrap_or_else(|e| e.into_inner());
        let found = weights
            .iter()
            .find(|w| w.from == from && w.as_f32 == as_f32.is_some());
        if let Some(w) = found {
            return Ok((w.buffer.base, false));
        }
        let dequantized;
        let bytes = match as_f32 {
            Some(dtype) => {
                let mut values = vec![
                    0f32;
                    bytes.len() / dtype.block_bytes() as usize
                        * dtype.block_elems() as usize
                ];
                kernels::quant::dequantize_row(dtype, bytes, &mut values);
                dequantized = values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>();
                &dequantized[..]
            }
            None => bytes,
        };
        let mut c = self.client();
        let (handle, size) = c.alloc_buffer(0, bytes.len().max(1) as u64)?;
        let base = c.buffer_base(handle)?;
        let mut record =
            RpcTensor::bytes(handle, base, bytes.len()).ok_or_else(|| RuntimeError::Remote {
                device: String::new(),
                endpoint: self.endpoint.clone(),
                what: format!("set_tensor '{name}'"),
                detail: format!("{} bytes exceed one call's 4 GiB", bytes.len()),
            })?;
        record.name = name.to_string();
        c.set_tensor(&record, 0, bytes)?;
        let buffer = RemoteBuffer { handle, base, size };
        weights.push(CachedWeight {
            from,
            as_f32: as_f32.is_some(),
            buffer,
            _source: source.clone(),
        });
        Ok((base, true))
    }

    /// The server address of state tensor `name` with `layout`, allocated
    /// (zeroed) on first use; every later runtime must declare the same dtype
    /// and extents, as with a host [`crate::StateStore`]. Kept until the
    /// connection closes.
    pub fn bind_state(&self, name: &str, layout: &Layout) -> Result<u64, RuntimeError> {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get(name) {
            if (s.dtype, s.ne) != (layout.dtype, layout.ne) {
                return Err(RuntimeError::Mismatch {
                    what: "state",
                    name: name.to_string(),
                    origin: format!(" kept on the server at {}", self.endpoint),
                    found: format!("{} {}", s.dtype, fmt_ne(&s.ne)),
                    expected: format!("{} {}", layout.dtype, fmt_ne(&layout.ne)),
                });
            }
            return Ok(s.buffer.base);
        }
        let mut c = self.client();
        let (handle, size) = c.alloc_buffer(0, layout.span_bytes().max(1))?;
        let base = c.buffer_base(handle)?;
        c.buffer_clear(handle, 0)?;
        let buffer = RemoteBuffer { handle, base, size };
        states.insert(
            name.to_string(),
            RemoteState {
                dtype: layout.dtype,
                ne: layout.ne,
                buffer,
            },
        );
        Ok(base)
    }

    /// Zeroes every state tensor kept on this server (a new conversation).
    pub fn clear_states(&self) -> Result<(), RuntimeError> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = self.client();
        for s in states.values() {
            c.buffer_clear(s.buffer.handle, 0)?;
        }
        Ok(())
    }

    /// The state or weight buffer holding `addr..end`, if one does.
    fn locate_shared(&self, addr: u64, end: u64) -> Option<RemoteAddr> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let weights = self.weights.lock().unwrap_or_else(|e| e.into_inner());
        (states.values().map(|s| (s.buffer, false)))
            .chain(weights.iter().map(|w| (w.buffer, w.as_f32)))
            .find(|(b, _)| addr >= b.base && end <= b.base + b.size)
            .map(|(b, as_f32)| RemoteAddr {
                buffer: b.handle,
                data: addr,
                as_f32,
            })
    }

    /// `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Bytes and calls on this connection so far (benchmarks: bytes and
    /// round trips per token).
    pub fn stats(&self) -> super::client::RpcStats {
        self.client().stats()
    }

    /// The connection, locked for one or more calls.
    pub fn client(&self) -> MutexGuard<'_, RpcClient> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The servers of `--rpc`, in order: plan device `Remote { server: i }` is
/// the first device of server `i`.
pub struct RemoteServers {
    servers: Vec<Arc<RemoteServer>>,
}

impl RemoteServers {
    /// Connects to every endpoint (each at most once: one server cannot be
    /// two devices). A server that cannot be reached is an error naming it.
    pub fn connect(endpoints: &[String], timeout: Duration) -> Result<RemoteServers, RuntimeError> {
        let mut servers = Vec::with_capacity(endpoints.len());
        for (i, endpoint) in endpoints.iter().enumerate() {
            if endpoints[..i].contains(endpoint) {
                return Err(RuntimeError::Remote {
                    device: format!("rpc{i}"),
                    endpoint: endpoint.clone(),
                    what: "connect".to_string(),
                    detail: "the endpoint is listed twice; each remote device needs its own \
                             server"
                        .to_string(),
                });
            }
            servers.push(Arc::new(RemoteServer::connect(endpoint, timeout)?));
        }
        Ok(RemoteServers { servers })
    }

    /// Server `i`, if listed.
    pub fn get(&self, i: u32) -> Option<&Arc<RemoteServer>> {
        self.servers.get(i as usize)
    }

    /// How many servers are listed.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True when none is listed.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The endpoints, in order.
    pub fn endpoints(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.endpoint.clone()).collect()
    }
}

/// One buffer on the server.
#[derive(Clone, Copy, Debug)]
struct RemoteBuffer {
    handle: u64,
    base: u64,
    size: u64,
}

/// A plan device on a remote server, as one runtime holds it.
pub struct RemoteDevice {
    pub(super) info: DeviceInfo,
    /// Itself, for the steps it prepares (each holds its device).
    pub(super) this: std::sync::Weak<RemoteDevice>,
    pub(super) server: Arc<RemoteServer>,
    /// Per plan tensor: a weight the server may hold as an F32 copy in
    /// exact precision (`prepare::f32_weights`), worked out on first use.
    pub(super) f32_weights: OnceLock<Vec<bool>>,
    buffers: Mutex<Vec<RemoteBuffer>>,
    pub(super) failure: Mutex<Option<RuntimeError>>,
}

impl RemoteDevice {
    /// Plan device `name` on `server`: asks the server for its memory,
    /// alignment and largest buffer, and refuses a plan alignment that is not
    /// a multiple of the server's (the plan's offsets would not be aligned
    /// there).
    pub fn open(
        name: &str,
        server: Arc<RemoteServer>,
        plan_alignment: u64,
    ) -> Result<Arc<RemoteDevice>, RuntimeError> {
        let (alignment, max_size, (free, total)) = {
            let mut c = server.client();
            (c.alignment(0)?, c.max_size(0)?, c.memory(0)?)
        };
        if alignment == 0 || !plan_alignment.is_multiple_of(alignment) {
            return Err(RuntimeError::Remote {
                device: name.to_string(),
                endpoint: server.endpoint.clone(),
                what: "open".to_string(),
                detail: format!(
                    "the server aligns buffers to {alignment} bytes, and the plan's alignment \
                     {plan_alignment} is not a multiple of it; recompile for --target host --rpc"
                ),
            });
        }
        let info = DeviceInfo {
            name: name.to_string(),
            description: format!("ggml RPC server at {}", server.endpoint),
            memory_total: total,
            memory_free: free,
            alignment,
            max_buffer_bytes: max_size,
            cores: Vec::new(),
            caps: Caps {
                asynchronous: false,
                events: false,
                host_buffer: false,
                buffer_from_host_ptr: false,
            },
        };
        Ok(Arc::new_cyclic(|this| RemoteDevice {
            info,
            this: this.clone(),
            server,
            f32_weights: OnceLock::new(),
            buffers: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
        }))
    }

    /// The server's `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.server.endpoint
    }

    fn error(&self, what: impl Into<String>, detail: impl Into<String>) -> RuntimeError {
        RuntimeError::Remote {
            device: self.info.name.clone(),
            endpoint: self.server.endpoint.clone(),
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// Allocates `bytes` on the server for arena `usage` and returns the
    /// server address of its first byte. Refused, with nothing allocated,
    /// when the server has less free memory or cannot allocate.
    pub fn alloc_remote(&self, bytes: u64, usage: &str) -> Result<u64, RuntimeError> {
        let what = format!("alloc_buffer for the {usage} arena");
        if bytes > self.info.max_buffer_bytes {
            return Err(self.error(
                what,
                format!(
                    "{bytes} bytes exceed the server's largest buffer ({} bytes)",
                    self.info.max_buffer_bytes
                ),
            ));
        }
        let mut c = self.server.client();
        let (free, _) = c.memory(0)?;
        if bytes > free {
            return Err(self.error(
                what,
                format!("the arena needs {bytes} bytes but the server has {free} bytes free"),
            ));
        }
        // ggml refuses a zero-sized buffer; an empty arena still gets an address.
        let (handle, size) = c.alloc_buffer(0, bytes.max(1))?;
        let base = match c.buffer_base(handle) {
            Ok(b) => b,
            Err(e) => {
                let _ = c.free_buffer(handle);
                return Err(e);
            }
        };
        // Arenas start zeroed, as host arenas do.
        c.buffer_clear(handle, 0)?;
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RemoteBuffer { handle, base, size });
        Ok(base)
    }

    /// The buffer holding `addr..addr + len`, if one does.
    pub fn locate(&self, addr: u64, len: u64) -> Option<RemoteAddr> {
        let end = addr.checked_add(len)?;
        let buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let own = buffers
            .iter()
            .find(|b| addr >= b.base && end <= b.base + b.size)
            .map(|b| RemoteAddr {
                buffer: b.handle,
                data: addr,
                as_f32: false,
            });
        own.or_else(|| self.server.locate_shared(addr, end))
    }

    /// A record of `len` bytes at server address `addr` (a row of bytes), for
    /// set/get/copy; refused when no buffer of this device holds them.
    fn bytes_record(&self, addr: u64, len: usize, what: &str) -> Result<RpcTensor, RuntimeError> {
        let at = self
            .locate(addr, len as u64)
            .ok_or_else(|| self.error(what, format!("no buffer holds {len} bytes at {addr:#x}")))?;
        RpcTensor::bytes(at.buffer, at.data, len)
            .ok_or_else(|| self.error(what, format!("{len} bytes exceed one call's 4 GiB")))
    }

    /// Writes `data` at server address `addr` (inside one of its buffers).
    pub fn write(&self, addr: u64, data: &[u8], what: &str) -> Result<(), RuntimeError> {
        let record = self.bytes_record(addr, data.len(), what)?;
        self.server.client().set_tensor(&record, 0, data)
    }

    /// Reads `out.len()` bytes at server address `addr`.
    pub fn read(&self, addr: u64, out: &mut [u8], what: &str) -> Result<(), RuntimeError> {
        let record = self.bytes_record(addr, out.len(), what)?;
        self.server.client().get_tensor(&record, 0, out)
    }

    /// Copies `len` bytes between two addresses of this server.
    pub fn copy_within(&self, from: u64, to: u64, len: usize) -> Result<(), RuntimeError> {
        let src = self.bytes_record(from, len, "copy_tensor")?;
        let mut dst = self.bytes_record(to, len, "copy_tensor")?;
        dst.id = 2;
        if self.server.client().copy_tensor(&src, &dst)? {
            Ok(())
        } else {
            Err(self.error("copy_tensor", "the server refused the copy"))
        }
    }

    /// The server it runs on.
    pub fn server(&self) -> &Arc<RemoteServer> {
        &self.server
    }

    /// True when both devices are the same server (a copy between them stays there).
    pub fn same_server(&self, other: &RemoteDevice) -> bool {
        Arc::ptr_eq(&self.server, &other.server)
    }

    /// Records the first failure of a run; later ones are dropped.
    pub fn record_failure(&self, e: RuntimeError) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// True once a call of this run failed (the device does no more I/O).
    pub fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Sends `graphs` as one graph to compute; every later call to the
    /// server sees its results ([`RemoteServer::finish`] waits for them).
    pub fn compute(&self, graphs: &[&StepGraph]) -> Result<(), RuntimeError> {
        if graphs.is_empty() {
            return Ok(());
        }
        self.server.compute(graph_payload(0, graphs))
    }
}

impl Drop for RemoteDevice {
    fn drop(&mut self) {
        let buffers = std::mem::take(&mut *self.buffers.lock().unwrap_or_else(|e| e.into_inner()));
        if buffers.is_empty() {
            return;
        }
        let mut c = self.server.client();
        // The server drops the graph it holds when a buffer is freed.
        self.server.graph_state().last = None;
        for b in buffers {
            // A dead server has freed everything already; nothing to report.
            let _ = c.free_buffer(b.handle);
        }
    }
}

//! [`Runtime`]: a loaded plan, ready to run again and again.
//!
//! Loading, in order: refuse an unknown `format_version`; run the plan
//! checker (`ir::plan::check`) and refuse a plan with any violation; refuse
//! devices this runtime lacks (it runs CPU devices only); refuse arenas that
//! exceed the memory available; allocate one aligned arena per (device,
//! usage); bind weights (in place or copied once), constants and shared state;
//! prepare every step's kernel with its tensors' addresses baked in.
//!
//! A `Runtime` is a session: inputs are set by name (`session_io.rs`), `run`
//! executes every step (`execute.rs`), outputs are read by name, and state
//! tensors (KV caches) keep their values between runs.
//!
//! Invariants: arenas never move after load (kernels hold their addresses);
//! `run` refuses to start while an input was never set; index inputs are
//! range-checked when set, so a kernel never reads outside a table.

use crate::RuntimeError;
use crate::addresses::resolve;
use crate::cpu::ThreadPool;
use crate::cpu::matmul::Precision;
use crate::device::cpu::CpuDevice;
use crate::device::cuda::CudaDevice;
use crate::device::registry::Registry;
use crate::device::rpc::{RemoteDevice, RemoteServers};
use crate::device::{Device, TensorBytes};
use crate::executor::Executor;
use crate::fast::FastKernels;
use crate::memory::{AlignedBuffer, available_bytes};
use crate::state::StateStore;
use crate::steps::{PreparedStep, Preparer};
use crate::weights::{BoundWeight, Weights, bind_weight};
use ir::layout::fmt_ne;
use ir::plan::{PLAN_FORMAT_VERSION, Placement, Plan};
use ir::{DType, Layout, Role};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to load a plan.
#[derive(Clone)]
pub struct LoadOptions {
    /// Threads to run steps on (ignored when `pool` is given).
    pub threads: usize,
    /// A pool to share with other runtimes (generation: prefill and decode).
    pub pool: Option<Arc<ThreadPool>>,
    /// Kernel families (and the JIT cache) to share with other runtimes.
    pub kernels: Option<Arc<FastKernels>>,
    /// A state store to share with other runtimes (their KV cache).
    pub state: Option<Arc<StateStore>>,
    /// Quantized matmuls: fast (8-bit activations) or exact (f32); used when
    /// `kernels` is not given.
    pub precision: Precision,
    /// Called with (steps prepared, steps in all) while kernels are prepared
    /// (JIT compilation included), for progress bars.
    pub on_prepare: Option<Arc<dyn Fn(usize, usize) + Send + Sync>>,
    /// Called with (bytes written, bytes in all) while a load writes weights
    /// and constants into arenas (the weights a GPU or a remote server holds;
    /// a CPU maps its weights in place), for progress bars.
    pub on_upload: Option<Arc<dyn Fn(u64, u64) + Send + Sync>>,
    /// Test hook: with a seed, every segment of a multi-stream run starts
    /// after a random delay (see `executor`), to shake out missing events.
    pub fault_injection: Option<u64>,
    /// Test hook: in a multi-stream run, the thread reaching this prepared
    /// step (or copy) panics instead of running it, to prove that a failing
    /// stream stops the others and the panic reaches the caller.
    pub fault_panic_at: Option<usize>,
    /// The remote servers (`--rpc`), connected once and shared by every
    /// runtime of a job: plan device `Remote { server: i }` runs on server `i`.
    pub rpc: Option<Arc<RemoteServers>>,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pool: None,
            kernels: None,
            state: None,
            precision: Precision::Fast,
            on_prepare: None,
            on_upload: None,
            fault_injection: None,
            fault_panic_at: None,
            rpc: None,
        }
    }
}

/// What loading did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Weight bytes used in place in the mapped file.
    pub weight_bytes_in_place: u64,
    /// Weight bytes copied into the weights arena.
    pub weight_bytes_copied: u64,
    /// Weight bytes uploaded to remote devices and GPUs (once, at load).
    pub weight_bytes_uploaded: u64,
    /// Weight bytes a remote server already held for this job (uploaded by
    /// an earlier runtime sharing its servers).
    pub weight_bytes_cached: u64,
    /// Bytes of repacked weight copies held by the kernels of this runtime
    /// and of every other runtime loaded with the same [`FastKernels`] (each
    /// copy counted once): memory beyond the weights themselves.
    pub weight_bytes_repacked: u64,
    /// Steps that run on the reference fallback (slow), as `step: what`.
    pub fallbacks: Vec<String>,
    /// Time to bind weights.
    pub weights_time: Duration,
    /// Time to prepare kernels (JIT compilation included).
    pub prepare_time: Duration,
    /// What the user should know (core groups sharing cores).
    pub warnings: Vec<String>,
}

/// A loaded plan.
pub struct Runtime {
    pub(crate) plan: Arc<Plan>,
    /// Kept alive: weights used in place point into its mapping.
    pub(crate) _weights: Weights,
    pub(crate) _arenas: Vec<AlignedBuffer>,
    pub(crate) state: Option<Arc<StateStore>>,
    pub(crate) addr: Vec<*mut u8>,
    pub(crate) steps: Vec<PreparedStep>,
    pub(crate) scratch: AlignedBuffer,
    pub(crate) pool: Arc<ThreadPool>,
    /// The plan's devices, by device id.
    pub(crate) devices: Vec<Arc<dyn Device>>,
    /// The plan's CPU devices, by device id (`None` for a remote one).
    pub(crate) cpu_devices: Vec<Option<Arc<CpuDevice>>>,
    /// The plan's remote devices, by device id (`None` for a CPU one).
    pub(crate) remote: Vec<Option<Arc<RemoteDevice>>>,
    /// The plan's CUDA devices, by device id (`None` for another kind).
    pub(crate) cuda: Vec<Option<Arc<CudaDevice>>>,
    /// One stream and no events on host devices: the single-pool fast path.
    pub(crate) sequential: bool,
    /// Weights a remote device holds as F32 copies: their file bytes on the
    /// host (address, length in the mapping `_weights` keeps), which
    /// [`Runtime::tensor_bytes`] reads instead of the server's values.
    pub(crate) f32_weight_sources: BTreeMap<u32, (usize, usize)>,
    /// Streams, segments and events of the plan.
    pub(crate) executor: Executor,
    pub(crate) kernels: Arc<FastKernels>,
    /// Graph input tensors and whether they were set.
    pub(crate) inputs: BTreeMap<u32, bool>,
    /// For tensors used as row indices: (rows of the indexed table, its tensor).
    pub(crate) index_bounds: BTreeMap<u32, (i64, u32)>,
    pub(crate) report: LoadReport,
    /// Per step, nanoseconds of the last run (filled when profiling).
    pub(crate) last_profile: Vec<u64>,
    /// Bytes of weights and state one run reads, counted once at load.
    memory_read_bytes: u64,
    /// Steps writing host state that a run failing on a server or GPU
    /// undoes (`state_journal`); empty for plans that cannot fail mid-run.
    pub(crate) state_writers: Vec<crate::state_journal::StateWriter>,
}

// SAFETY: the raw addresses point into buffers this struct owns (or keeps
// alive through `_weights` and `state`); `run` takes `&mut self`.
unsafe impl Send for Runtime {}
// SAFETY: `&Runtime` only reads tensor bytes.
unsafe impl Sync for Runtime {}

pub(crate) fn describe(dtype: DType, ne: &[i64; 4]) -> String {
    format!("{dtype} {}", fmt_ne(ne))
}

pub(crate) fn layout_of(plan: &Plan, t: u32) -> Layout {
    plan.tensors[t as usize].layout()
}

impl Runtime {
    /// Reads, checks and loads a plan file.
    pub fn load_file(
        path: &std::path::Path,
        weights: Weights,
        options: &LoadOptions,
    ) -> Result<Runtime, RuntimeError> {
        let plan = ir::plan::read_plan(path)?;
        Runtime::load(Arc::new(plan), weights, options)
    }

    /// Checks and loads `plan` (see the module doc for the order of checks).
    pub fn load(
        plan: Arc<Plan>,
        weights: Weights,
        options: &LoadOptions,
    ) -> Result<Runtime, RuntimeError> {
        if plan.format_version != PLAN_FORMAT_VERSION {
            return Err(RuntimeError::PlanVersion {
                found: plan.format_version,
                supported: PLAN_FORMAT_VERSION,
            });
        }
        let violations = ir::plan::check::check_plan(&plan);
        if !violations.is_empty() {
            return Err(RuntimeError::InvalidPlan {
                graph: plan.graph_name.clone(),
                violations,
            });
        }
        let (host_devices, warnings) =
            Registry::enumerate().open(&plan.devices, options.threads, options.pool.as_ref())?;
        let remote = open_remote(&plan, options.rpc.as_deref())?;
        let cuda = open_cuda(&plan)?;
        let mut host_devices = host_devices.into_iter();
        let cpu_devices: Vec<Option<Arc<CpuDevice>>> = (remote.iter().zip(&cuda))
            .map(|(r, c)| {
                if r.is_some() || c.is_some() {
                    None
                } else {
                    host_devices.next()
                }
            })
            .collect();
        let devices: Vec<Arc<dyn Device>> = (cpu_devices.iter().zip(&remote).zip(&cuda))
            .map(|pair| match pair {
                ((Some(cpu), _), _) => Arc::clone(cpu) as Arc<dyn Device>,
                ((None, Some(r)), _) => Arc::clone(r) as Arc<dyn Device>,
                ((None, None), Some(c)) => Arc::clone(c) as Arc<dyn Device>,
                ((None, None), None) => unreachable!("every plan device was opened"),
            })
            .collect();
        let needed: u64 = (plan.arenas.iter())
            .filter(|a| remote[a.device.index()].is_none() && cuda[a.device.index()].is_none())
            .map(|a| a.size)
            .sum();
        if let Some(available) = available_bytes()
            && needed > available
        {
            return Err(RuntimeError::OutOfMemory { needed, available });
        }
        // A remote arena's base is the server's address of its buffer
        // (never dereferenced here: see `device::rpc`).
        let mut bases: Vec<*mut u8> = Vec::with_capacity(plan.arenas.len());
        let mut arenas = Vec::new();
        for (i, a) in plan.arenas.iter().enumerate() {
            let dev = &plan.devices[a.device.index()];
            let usage = format!("{:?}", a.usage);
            if let Some(c) = &cuda[a.device.index()] {
                // A GPU arena's base is a device address (never dereferenced
                // here: see `device::cuda`).
                bases.push(c.alloc_arena(i, a.size, &usage)? as usize as *mut u8);
                continue;
            }
            if let Some(r) = &remote[a.device.index()] {
                // With servers shared by a job, weights read in place live in
                // the server's weight cache; their arena is allocated below
                // only if some weight still needs it.
                let cached = a.usage == ir::plan::Usage::Weights && options.rpc.is_some();
                let base = if cached {
                    0
                } else {
                    r.alloc_remote(a.size, &usage)?
                };
                bases.push(base as usize as *mut u8);
                continue;
            }
            let buffer = devices[a.device.index()]
                .alloc(a.size, dev.alignment, &usage)
                .map_err(|e| match e {
                    RuntimeError::Alloc {
                        bytes,
                        usage,
                        device,
                        ..
                    } => RuntimeError::Alloc {
                        arena: i,
                        bytes,
                        usage,
                        device,
                    },
                    other => other,
                })?;
            bases.push(buffer.as_ptr());
            arenas.push(buffer);
        }
        let mut warnings = warnings;
        warnings.extend(cpu_devices.iter().flatten().flat_map(|d| d.take_notes()));

        // Weights in place and shared state replace their arena addresses.
        let mut report = LoadReport {
            warnings,
            ..LoadReport::default()
        };
        let t0 = Instant::now();
        let n_graph = plan.n_graph_tensors as usize;
        let mut overrides: Vec<Option<*mut u8>> = vec![None; plan.tensors.len()];
        let mut copies: Vec<(u32, std::borrow::Cow<'_, [u8]>)> = Vec::new();
        let exact = options
            .kernels
            .as_ref()
            .map_or(options.precision, |k| k.precision())
            == Precision::Exact;
        let f32_copies = remote_f32_weights(&plan);
        let mut f32_weight_sources = BTreeMap::new();
        for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
            if !matches!(pt.placement, Placement::Arena { .. }) {
                continue;
            }
            let layout = layout_of(&plan, t as u32);
            let on_remote = remote[pt.device.index()].is_some();
            let on_cuda = cuda[pt.device.index()].as_ref();
            match pt.role {
                Role::Weight if on_cuda.is_some() => {
                    // Uploaded once at load, from the mapped file.
                    let bytes = match bind_weight(&weights, &pt.name, &layout, pt.shard.as_ref())? {
                        BoundWeight::InPlace(b) => std::borrow::Cow::Borrowed(b),
                        BoundWeight::Copy(b) => b,
                    };
                    report.weight_bytes_uploaded += bytes.len() as u64;
                    copies.push((t as u32, bytes));
                }
                Role::State if on_cuda.is_some() => {
                    // Shared state stays on the GPU, by name, for every
                    // runtime of the job.
                    if let (Some(store), Some(c)) = (&options.state, on_cuda) {
                        overrides[t] =
                            Some(c.bind_state(store, &pt.name, &layout)? as usize as *mut u8);
                    }
                }
                Role::Weight if on_remote => {
                    // Uploaded at load (a remote device never reads the file):
                    // bytes read in place once per job, through the server's
                    // weight cache; converted or sliced bytes per runtime.
                    let r = remote[pt.device.index()].as_ref().expect("on_remote");
                    match bind_weight(&weights, &pt.name, &layout, pt.shard.as_ref())? {
                        BoundWeight::InPlace(b) if options.rpc.is_some() => {
                            let as_f32 = (exact && f32_copies[t]).then_some(pt.dtype);
                            let (at, uploaded) =
                                r.server().bind_weight(&pt.name, b, &weights, as_f32)?;
                            if as_f32.is_some() {
                                f32_weight_sources.insert(t as u32, (b.as_ptr() as usize, b.len()));
                            }
                            overrides[t] = Some(at as usize as *mut u8);
                            if uploaded {
                                report.weight_bytes_uploaded += b.len() as u64;
                            } else {
                                report.weight_bytes_cached += b.len() as u64;
                            }
                        }
                        BoundWeight::InPlace(b) => {
                            report.weight_bytes_uploaded += b.len() as u64;
                            copies.push((t as u32, std::borrow::Cow::Borrowed(b)));
                        }
                        BoundWeight::Copy(b) => {
                            report.weight_bytes_uploaded += b.len() as u64;
                            copies.push((t as u32, b));
                        }
                    }
                }
                Role::State if on_remote => {
                    // Shared state stays on its server, by name, for every
                    // runtime of the job (a remote StateStore).
                    if options.state.is_some()
                        && let Some(r) = &remote[pt.device.index()]
                    {
                        let at = r.server().bind_state(&pt.name, &layout)?;
                        overrides[t] = Some(at as usize as *mut u8);
                    }
                }
                Role::Weight => {
                    match bind_weight(&weights, &pt.name, &layout, pt.shard.as_ref())? {
                        BoundWeight::InPlace(bytes) => {
                            report.weight_bytes_in_place += bytes.len() as u64;
                            overrides[t] = Some(bytes.as_ptr().cast_mut());
                        }
                        BoundWeight::Copy(bytes) => {
                            report.weight_bytes_copied += bytes.len() as u64;
                            copies.push((t as u32, bytes));
                        }
                    }
                }
                Role::State => {
                    if let Some(store) = &options.state {
                        overrides[t] = Some(store.bind(&pt.name, &layout)?);
                    }
                }
                _ => {}
            }
        }
        // A remote weights arena some weight still needs (a converted or
        // sliced one) is allocated now.
        for (i, a) in plan.arenas.iter().enumerate() {
            let Some(r) = &remote[a.device.index()] else {
                continue;
            };
            let needed = || {
                (plan.tensors[..n_graph].iter().enumerate()).any(|(t, pt)| {
                    overrides[t].is_none()
                        && matches!(pt.placement, Placement::Arena { arena, .. } if arena as usize == i)
                })
            };
            if bases[i].is_null() && needed() {
                bases[i] = r.alloc_remote(a.size, "Weights")? as usize as *mut u8;
            }
        }
        let addr = resolve(&plan, &bases, &overrides);
        for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
            if let (Role::Constant, Some(init), Placement::Arena { .. }) =
                (pt.role, &pt.init, pt.placement)
            {
                let bytes = kernels::evaluate::constant_leaf(init, &layout_of(&plan, t as u32));
                copies.push((t as u32, std::borrow::Cow::Owned(bytes)));
            }
        }
        // Each device writes its own in one call (a GPU stages them).
        let total: u64 = copies.iter().map(|(_, b)| b.len() as u64).sum();
        let mut written = 0u64;
        for (d, device) in devices.iter().enumerate() {
            let items: Vec<(TensorBytes, &[u8])> = (copies.iter())
                .filter(|(t, _)| plan.tensors[*t as usize].device.index() == d)
                .map(|(t, bytes)| {
                    // SAFETY: the tensor's arena slot holds its span (checker),
                    // which equals the stored bytes (binding checked dtype and
                    // extents).
                    let tensor = unsafe { TensorBytes::new(addr[*t as usize], bytes.len()) };
                    (tensor, &bytes[..])
                })
                .collect();
            if items.is_empty() {
                continue;
            }
            device.load_tensors(&items, &mut |n| {
                written += n;
                if let Some(report) = &options.on_upload {
                    report(written, total);
                }
            })?;
        }
        report.weights_time = t0.elapsed();

        let pool = match cpu_devices.iter().flatten().next() {
            Some(cpu) => Arc::clone(cpu.pool()),
            // Only remote devices: their steps are calls, one thread drives them.
            None => Arc::new(ThreadPool::new(1)),
        };
        let kernels = match &options.kernels {
            Some(k) => Arc::clone(k),
            None => Arc::new(FastKernels::new(options.precision)?),
        };
        let t1 = Instant::now();
        let steps = Preparer {
            plan: &plan,
            addr: &addr,
            fast: &kernels,
            on_prepare: options.on_prepare.as_deref(),
            remote: &remote,
            cuda: &cuda,
        }
        .prepare_all()?;
        for c in cuda.iter().flatten() {
            c.load_kernels()?;
        }
        report.prepare_time = t1.elapsed();
        report.weight_bytes_repacked = kernels.repacked_bytes();
        report.fallbacks = steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.fallback)
            .map(|(i, s)| {
                format!(
                    "step {i}: {} -> '{}'",
                    s.kind, plan.tensors[s.dst as usize].name
                )
            })
            .collect();
        let scratch_bytes = steps
            .iter()
            .map(|s| s.kernel.scratch_bytes())
            .max()
            .unwrap_or(0);
        if devices.len() > 1 {
            for (d, device) in cpu_devices.iter().enumerate() {
                let Some(device) = device else { continue };
                let on_device = |s: &&crate::steps::PreparedStep| {
                    plan.splits[s.split].device.index() == d && s.kind != "copy"
                };
                let bytes = steps
                    .iter()
                    .filter(on_device)
                    .map(|s| s.kernel.scratch_bytes());
                device.set_scratch(bytes.max().unwrap_or(0))?;
            }
        }
        let executor = Executor::new(&plan, options.fault_injection, options.fault_panic_at);
        let sequential = executor.is_sequential()
            && remote.iter().all(Option::is_none)
            && cuda.iter().all(Option::is_none);
        let scratch = AlignedBuffer::zeroed(scratch_bytes, 64).ok_or(RuntimeError::Alloc {
            arena: usize::MAX,
            bytes: scratch_bytes as u64,
            usage: "kernel scratch".to_string(),
            device: "cpu".to_string(),
        })?;
        let inputs = plan.tensors[..n_graph]
            .iter()
            .enumerate()
            .filter(|(_, t)| t.role == Role::Input)
            .map(|(t, _)| (t as u32, false))
            .collect();
        let index_bounds = plan.index_tables();
        let n_steps = steps.len();
        let memory_read_bytes = crate::traffic::memory_read_bytes(&plan, &steps);
        let host: Vec<bool> = cpu_devices.iter().map(Option::is_some).collect();
        let can_fail_mid_run =
            remote.iter().flatten().next().is_some() || cuda.iter().flatten().next().is_some();
        let state_writers = crate::state_journal::state_writers(&plan, &host, can_fail_mid_run);
        Ok(Runtime {
            plan,
            _weights: weights,
            _arenas: arenas,
            state: options.state.clone(),
            addr,
            steps,
            scratch,
            pool,
            devices,
            cpu_devices,
            remote,
            cuda,
            sequential,
            f32_weight_sources,
            executor,
            kernels,
            inputs,
            index_bounds,
            report,
            last_profile: vec![0; n_steps],
            memory_read_bytes,
            state_writers,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What loading did.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// The prepared steps, in execution order.
    pub fn steps(&self) -> &[PreparedStep] {
        &self.steps
    }

    /// Bytes of weights and state one run reads ([`crate::traffic`]): with
    /// the memcpy bandwidth, the floor of a memory-bound run.
    pub fn memory_read_bytes(&self) -> u64 {
        self.memory_read_bytes
    }

    /// Threads over every device of the plan.
    pub fn threads(&self) -> usize {
        (self.cpu_devices.iter().flatten())
            .map(|d| d.pool().n_threads())
            .sum::<usize>()
            .max(1)
    }

    /// The plan's devices, by device id.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The plan's CPU devices, by device id (`None` for a remote device).
    pub fn cpu_devices(&self) -> &[Option<Arc<CpuDevice>>] {
        &self.cpu_devices
    }

    /// Waits for what the remote devices still compute, then takes the
    /// first failure of the last run on one (so a later run starts clean).
    /// Keeps `e` in plan device `device`'s failure slot (a remote or CUDA
    /// device), for the next run to report; a CPU device has none and its
    /// calls here only fail on a bug, so the error is dropped.
    pub(crate) fn keep_failure(&self, device: usize, e: RuntimeError) {
        if let Some(r) = &self.remote[device] {
            r.fail(e);
        } else if let Some(c) = &self.cuda[device] {
            c.fail(e);
        }
    }

    pub(crate) fn take_remote_failure(&self) -> Result<(), RuntimeError> {
        let mut first = None;
        for r in self.remote.iter().flatten() {
            // A graph nothing read after is waited for here.
            if !r.failed()
                && let Err(e) = r.server().finish()
            {
                r.fail(e);
            }
            if let Some(e) = r.take_failure() {
                first.get_or_insert(e);
            }
        }
        for c in self.cuda.iter().flatten() {
            // Waits for the GPU: a kernel's failure surfaces here.
            if let Err(e) = c.take_failure() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The thread pool of the first device.
    pub fn pool(&self) -> &Arc<ThreadPool> {
        &self.pool
    }

    /// The kernel families (to share with another runtime).
    pub fn kernels(&self) -> &Arc<FastKernels> {
        &self.kernels
    }

    /// Nanoseconds per step of the last profiled run.
    pub fn last_profile(&self) -> &[u64] {
        &self.last_profile
    }

    /// The graph tensor called `name`.
    pub fn tensor_id(&self, name: &str) -> Result<u32, RuntimeError> {
        self.plan.tensors[..self.plan.n_graph_tensors as usize]
            .iter()
            .position(|t| t.name == name)
            .map(|t| t as u32)
            .ok_or_else(|| RuntimeError::NoSuchTensor {
                name: name.to_string(),
            })
    }

    /// For an I32 index input: the rows of the table it indexes.
    pub fn index_bound(&self, name: &str) -> Option<i64> {
        let t = self.tensor_id(name).ok()?;
        self.index_bounds.get(&t).map(|&(b, _)| b)
    }
}

/// The plan's CUDA devices, by device id: each opened on its GPU.
fn open_cuda(plan: &Plan) -> Result<Vec<Option<Arc<CudaDevice>>>, RuntimeError> {
    (plan.devices.iter())
        .map(|dev| match dev.kind {
            ir::plan::DeviceKind::Cuda { ordinal } => {
                CudaDevice::open(&dev.name, ordinal, dev.alignment).map(Some)
            }
            _ => Ok(None),
        })
        .collect()
}

/// The plan's remote devices, by device id: each opened on its server from
/// `rpc` (refused by name when the plan needs a server `rpc` does not list).
fn open_remote(
    plan: &Plan,
    rpc: Option<&RemoteServers>,
) -> Result<Vec<Option<Arc<RemoteDevice>>>, RuntimeError> {
    let mut out = Vec::with_capacity(plan.devices.len());
    for dev in &plan.devices {
        let ir::plan::DeviceKind::Remote { server } = dev.kind else {
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
        out.push(Some(Arc::new(device)));
    }
    Ok(out)
}

/// Per plan tensor: a block-quantized weight that a remote device may hold as
/// a dequantized F32 copy in exact precision, because every step reading it
/// is a `mul_mat` or `get_rows` taking it whole as src0 (where F32 values
/// compute what our exact kernels compute from the blocks), and nothing
/// views it or copies its bytes elsewhere.
fn remote_f32_weights(plan: &Plan) -> Vec<bool> {
    let mut ok: Vec<bool> = (plan.tensors.iter())
        .map(|t| t.role == Role::Weight && t.dtype.block_elems() > 1)
        .collect();
    let mut refuse = |t: u32| {
        if let Some(x) = ok.get_mut(t as usize) {
            *x = false;
        }
    };
    for pt in &plan.tensors {
        if let Placement::View { of, .. } = pt.placement {
            refuse(of);
        }
    }
    for split in &plan.splits {
        for c in &split.copies {
            refuse(c.src);
        }
        for step in &split.steps {
            match step {
                ir::plan::Step::Op { op, srcs, .. } => {
                    let whole_src0 = matches!(op, ir::Op::MulMat | ir::Op::GetRows);
                    for (i, &s) in srcs.iter().enumerate() {
                        if !(whole_src0 && i == 0) {
                            refuse(s);
                        }
                    }
                }
                ir::plan::Step::Fused { kernel } => {
                    for &s in plan
                        .kernels
                        .get(*kernel as usize)
                        .map_or(&[][..], |k| &k.inputs)
                    {
                        refuse(s);
                    }
                }
            }
        }
    }
    ok
}

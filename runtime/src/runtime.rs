//! [`Runtime`]: a loaded plan, ready to run again and again.
//!
//! Loading, in order: refuse an unknown `format_version`; run the plan
//! checker (`ir::plan::check`) and refuse a plan with any violation; open
//! every plan device through the device backends (`device::registry`),
//! refusing one this runtime cannot open; refuse host arenas that exceed the
//! memory available; let each device allocate its arenas; let each device
//! place its weights (in place, written at load, or held already) and bind
//! shared state; write weights and constants through each device; prepare
//! every step on its device with its tensors' addresses baked in.
//!
//! Nothing here names a kind of device: each is a [`Device`] and decides
//! for itself (see `device/`).
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
use crate::device::Device;
use crate::device::backend::OpenCtx;
use crate::device::cpu::matmul::Precision;
use crate::device::cpu::{FastKernels, ThreadPool};
use crate::device::registry::open_devices;
use crate::executor::Executor;
use crate::load;
pub use crate::load_options::LoadOptions;
use crate::state::StateStore;
use crate::steps::PreparedStep;
use crate::weights::Weights;
use ir::layout::fmt_ne;
use ir::plan::{PLAN_FORMAT_VERSION, Plan};
use ir::{DType, Layout, Role};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    pub(crate) state: Option<Arc<StateStore>>,
    pub(crate) addr: Vec<*mut u8>,
    pub(crate) steps: Vec<PreparedStep>,
    /// The first device's pool (a one-thread pool when no device has one).
    pub(crate) pool: Arc<ThreadPool>,
    /// The plan's devices, by device id; they own the arenas.
    pub(crate) devices: Vec<Arc<dyn Device>>,
    /// Per device id: its memory is host memory (readable in place).
    pub(crate) host: Vec<bool>,
    /// One stream and no events on a device whose runs cannot fail halfway:
    /// the whole plan is one `run_steps` call.
    pub(crate) sequential: bool,
    /// Weights a device holds as converted copies (F32 on a server): their
    /// file bytes on the host (address, length in the mapping `_weights`
    /// keeps), which [`Runtime::tensor_bytes`] reads instead.
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
    pub(crate) state_writers: Vec<crate::state_writers::StateWriter>,
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
        let kernels = match &options.kernels {
            Some(k) => Arc::clone(k),
            None => Arc::new(FastKernels::new(options.precision)?),
        };
        let open = OpenCtx {
            options,
            kernels: &kernels,
        };
        let (devices, warnings) = open_devices(&plan, &open)?;
        let host: Vec<bool> = devices.iter().map(|d| d.info().caps.host_buffer).collect();
        let bases = load::allocate_arenas(&plan, &devices, &host)?;
        let mut report = LoadReport {
            warnings,
            ..LoadReport::default()
        };
        report
            .warnings
            .extend(devices.iter().flat_map(|d| d.take_notes()));

        let t0 = Instant::now();
        let exact = kernels.precision() == Precision::Exact;
        let mut placed = load::place_tensors(&plan, &devices, &host, &weights, options, exact)?;
        report.weight_bytes_in_place = placed.bytes.in_place;
        report.weight_bytes_copied = placed.bytes.copied;
        report.weight_bytes_uploaded = placed.bytes.uploaded;
        report.weight_bytes_cached = placed.bytes.cached;
        let bases = load::allocate_deferred(&plan, &devices, bases, &placed.overrides)?;
        let addr = resolve(&plan, &bases, &placed.overrides);
        load::add_constants(&plan, &mut placed.writes);
        load::write_tensors(&plan, &devices, &addr, &placed.writes, options)?;
        let f32_weight_sources = placed.host_sources;
        report.weights_time = t0.elapsed();

        let pool = match devices.iter().find_map(|d| d.pool()) {
            Some(pool) => Arc::clone(pool),
            // No device with threads (only remote ones): one thread drives them.
            None => Arc::new(ThreadPool::new(1)),
        };
        let t1 = Instant::now();
        let steps = load::prepare_steps(&plan, &addr, &devices, options)?;
        report.prepare_time = t1.elapsed();
        report.weight_bytes_repacked = kernels.repacked_bytes();
        report.fallbacks = (steps.iter().enumerate())
            .filter(|(_, s)| s.fallback)
            .map(|(i, s)| {
                let dst = &plan.tensors[s.dst as usize].name;
                format!("step {i}: {} -> '{dst}'", s.kind)
            })
            .collect();
        let executor = Executor::new(&plan, options.fault_injection, options.fault_panic_at);
        let can_fail_mid_run = devices.iter().any(|d| d.can_fail_mid_run());
        let n_graph = plan.n_graph_tensors as usize;
        let inputs = (plan.tensors[..n_graph].iter().enumerate())
            .filter(|(_, t)| t.role == Role::Input)
            .map(|(t, _)| (t as u32, false))
            .collect();
        Ok(Runtime {
            // Injected delays live in the executor: a fault-injected run
            // never takes the one-pool fast path, which has none.
            sequential: executor.is_sequential()
                && !can_fail_mid_run
                && options.fault_injection.is_none(),
            index_bounds: plan.index_tables(),
            last_profile: vec![0; steps.len()],
            memory_read_bytes: crate::traffic::memory_read_bytes(&plan, &steps),
            state_writers: crate::state_writers::state_writers(&plan, &host, can_fail_mid_run),
            _weights: weights,
            state: options.state.clone(),
            f32_weight_sources,
            plan,
            addr,
            steps,
            pool,
            devices,
            host,
            executor,
            kernels,
            inputs,
            report,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// How many delays [`LoadOptions::fault_injection`] injected since load
    /// (0 without it), so a test can show its runs were really perturbed.
    pub fn injected_delays(&self) -> u64 {
        self.executor.injected_delays()
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
        (self.devices.iter())
            .filter_map(|d| d.pool())
            .map(|p| p.n_threads())
            .sum::<usize>()
            .max(1)
    }

    /// The plan's devices, by device id.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// Keeps `e` in plan device `device`'s failure slot, for the next run
    /// to report (a device whose calls cannot fail drops it).
    pub(crate) fn keep_failure(&self, device: usize, e: RuntimeError) {
        self.devices[device].fail(e);
    }

    /// Waits for what the devices still run, then takes the first failure
    /// of the last run on one (so a later run starts clean).
    pub(crate) fn take_device_failure(&self) -> Result<(), RuntimeError> {
        let mut first = None;
        for d in &self.devices {
            if let Err(e) = d.take_failure() {
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

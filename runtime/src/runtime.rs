//! [`Runtime`]: a loaded plan, ready to run again and again.
//!
//! Loading, in order: refuse an unknown `format_version`; run the plan
//! checker (`ir::plan::check`) and refuse a plan with any violation; refuse
//! devices this runtime lacks (it runs CPU devices only); refuse arenas that
//! exceed the memory available; allocate one aligned arena per (device,
//! usage); bind weights (in place or copied once), constants and shared state;
//! prepare every step's kernel with its tensors' addresses baked in.
//!
//! A `Runtime` is a session: inputs are set by name, `run` executes every
//! step, outputs are read by name, and state tensors (KV caches) keep their
//! values between runs.
//!
//! Invariants: arenas never move after load (kernels hold their addresses);
//! `run` refuses to start while an input was never set; index inputs are
//! range-checked when set, so a kernel never reads outside a table.

use crate::RuntimeError;
use crate::addresses::{original, owner, resolve};
use crate::cpu::ThreadPool;
use crate::cpu::matmul::Precision;
use crate::fast::FastKernels;
use crate::memory::{AlignedBuffer, available_bytes};
use crate::state::StateStore;
use crate::steps::{PreparedStep, Preparer};
use crate::weights::{BoundWeight, Weights, bind_weight};
use ir::layout::fmt_ne;
use ir::plan::{DeviceKind, PLAN_FORMAT_VERSION, Placement, Plan, Step, Usage};
use ir::{DType, Layout, Op, Role};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Steps that run on the reference fallback (slow), as `step: what`.
    pub fallbacks: Vec<String>,
    /// Time to bind weights.
    pub weights_time: Duration,
    /// Time to prepare kernels (JIT compilation included).
    pub prepare_time: Duration,
}

/// What an observer says after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop the run after this step.
    Stop,
}

/// A step as an observer sees it.
pub struct StepInfo<'a> {
    /// Global index in execution order (copies count as steps).
    pub index: usize,
    /// The prepared step (kind, tensors, costs).
    pub step: &'a PreparedStep,
}

/// Called around every step of an observed run (like ggml's eval callback).
pub trait Observer {
    /// Before the step runs: its sources hold their inputs.
    fn before(&mut self, _rt: &Runtime, _step: &StepInfo<'_>) {}
    /// After the step ran: its destination holds the result.
    fn after(&mut self, rt: &Runtime, step: &StepInfo<'_>) -> Flow;
}

/// A loaded plan.
pub struct Runtime {
    plan: Arc<Plan>,
    /// Kept alive: weights used in place point into its mapping.
    _weights: Weights,
    _arenas: Vec<AlignedBuffer>,
    state: Option<Arc<StateStore>>,
    addr: Vec<*mut u8>,
    steps: Vec<PreparedStep>,
    scratch: AlignedBuffer,
    pool: Arc<ThreadPool>,
    kernels: Arc<FastKernels>,
    /// Graph input tensors and whether they were set.
    inputs: BTreeMap<u32, bool>,
    /// For I32 index inputs: (rows of the indexed table, its tensor).
    index_bounds: BTreeMap<u32, (i64, u32)>,
    report: LoadReport,
    /// Per step, nanoseconds of the last run (filled when profiling).
    last_profile: Vec<u64>,
}

// SAFETY: the raw addresses point into buffers this struct owns (or keeps
// alive through `_weights` and `state`); `run` takes `&mut self`.
unsafe impl Send for Runtime {}
// SAFETY: `&Runtime` only reads tensor bytes.
unsafe impl Sync for Runtime {}

fn describe(dtype: DType, ne: &[i64; 4]) -> String {
    format!("{dtype} {}", fmt_ne(ne))
}

fn layout_of(plan: &Plan, t: u32) -> Layout {
    let pt = &plan.tensors[t as usize];
    Layout {
        dtype: pt.dtype,
        ne: pt.ne,
        nb: pt.nb,
    }
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
        for dev in &plan.devices {
            if let DeviceKind::Cuda { ordinal } = dev.kind {
                return Err(RuntimeError::NoDevice {
                    device: dev.name.clone(),
                    kind: format!("CUDA device {ordinal}"),
                    why:
                        "this runtime executes CPU plans only; compile the graph with --target cpu"
                            .to_string(),
                });
            }
        }
        let needed: u64 = plan.arenas.iter().map(|a| a.size).sum();
        if let Some(available) = available_bytes()
            && needed > available
        {
            return Err(RuntimeError::OutOfMemory { needed, available });
        }
        let arenas = plan
            .arenas
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let dev = &plan.devices[a.device.index()];
                AlignedBuffer::zeroed(a.size as usize, dev.alignment as usize).ok_or_else(|| {
                    RuntimeError::Alloc {
                        arena: i,
                        bytes: a.size,
                        usage: format!("{:?}", a.usage),
                        device: dev.name.clone(),
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bases: Vec<*mut u8> = arenas.iter().map(AlignedBuffer::as_ptr).collect();

        // Weights in place and shared state replace their arena addresses.
        let mut report = LoadReport::default();
        let t0 = Instant::now();
        let n_graph = plan.n_graph_tensors as usize;
        let mut overrides: Vec<Option<*mut u8>> = vec![None; plan.tensors.len()];
        let mut copies: Vec<(u32, std::borrow::Cow<'_, [u8]>)> = Vec::new();
        for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
            if !matches!(pt.placement, Placement::Arena { .. }) {
                continue;
            }
            let layout = layout_of(&plan, t as u32);
            match pt.role {
                Role::Weight => match bind_weight(&weights, &pt.name, &layout)? {
                    BoundWeight::InPlace(bytes) => {
                        report.weight_bytes_in_place += bytes.len() as u64;
                        overrides[t] = Some(bytes.as_ptr().cast_mut());
                    }
                    BoundWeight::Copy(bytes) => {
                        report.weight_bytes_copied += bytes.len() as u64;
                        copies.push((t as u32, bytes));
                    }
                },
                Role::State => {
                    if let Some(store) = &options.state {
                        overrides[t] = Some(store.bind(&pt.name, &layout)?);
                    }
                }
                _ => {}
            }
        }
        let addr = resolve(&plan, &bases, &overrides);
        for (t, bytes) in copies {
            // SAFETY: the tensor's arena slot holds its span (checker), which
            // equals the stored bytes (binding checked dtype and extents).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr[t as usize], bytes.len()) };
        }
        for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
            if let (Role::Constant, Some(init), Placement::Arena { .. }) =
                (pt.role, &pt.init, pt.placement)
            {
                let bytes = kernels::evaluate::constant_leaf(init, &layout_of(&plan, t as u32));
                // SAFETY: as for weights: the slot holds the packed span.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr[t], bytes.len()) };
            }
        }
        report.weights_time = t0.elapsed();

        let pool = match &options.pool {
            Some(p) => Arc::clone(p),
            None => Arc::new(ThreadPool::new(options.threads)),
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
        }
        .prepare_all()?;
        report.prepare_time = t1.elapsed();
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
        let index_bounds = index_bounds(&plan);
        let n_steps = steps.len();
        Ok(Runtime {
            plan,
            _weights: weights,
            _arenas: arenas,
            state: options.state.clone(),
            addr,
            steps,
            scratch,
            pool,
            kernels,
            inputs,
            index_bounds,
            report,
            last_profile: vec![0; n_steps],
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

    /// The thread pool.
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

    fn settable(&self, name: &str) -> Result<u32, RuntimeError> {
        let t = self.tensor_id(name)?;
        let pt = &self.plan.tensors[t as usize];
        match pt.role {
            Role::Input | Role::State => Ok(t),
            other => Err(RuntimeError::WrongUse {
                name: name.to_string(),
                why: format!("is {}, not an input or state tensor", role_words(other)),
            }),
        }
    }

    /// Sets input (or state) `name` from its packed bytes in the tensor's dtype.
    pub fn set_input_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), RuntimeError> {
        let t = self.settable(name)?;
        let layout = layout_of(&self.plan, t);
        let expected = layout.span_bytes() as usize;
        if bytes.len() != expected || !layout.is_contiguous() {
            return Err(RuntimeError::Mismatch {
                what: "input",
                name: name.to_string(),
                origin: String::new(),
                found: format!("{} bytes", bytes.len()),
                expected: format!("{} ({expected} bytes)", describe(layout.dtype, &layout.ne)),
            });
        }
        if let Some(&(bound, table)) = self.index_bounds.get(&t) {
            for (index, chunk) in bytes.chunks_exact(4).enumerate() {
                let value = i64::from(i32::from_le_bytes(chunk.try_into().expect("4 bytes")));
                if !(0..bound).contains(&value) {
                    return Err(RuntimeError::IndexOutOfRange {
                        name: name.to_string(),
                        index,
                        value,
                        bound,
                        table: self.plan.tensors[table as usize].name.clone(),
                    });
                }
            }
        }
        // SAFETY: the tensor's bytes hold `expected` bytes (checked layout).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr[t as usize], expected) };
        self.inputs.insert(t, true);
        Ok(())
    }

    fn check_values(&self, name: &str, dtype: DType, n: usize) -> Result<(), RuntimeError> {
        let t = self.settable(name)?;
        let pt = &self.plan.tensors[t as usize];
        let given = format!("{n} {dtype} values");
        let count = pt.ne.iter().product::<i64>() as usize;
        if pt.dtype != dtype || n != count {
            return Err(RuntimeError::Mismatch {
                what: "input",
                name: name.to_string(),
                origin: String::new(),
                found: given,
                expected: format!("{} ({count} values)", describe(pt.dtype, &pt.ne)),
            });
        }
        Ok(())
    }

    /// Sets input `name` to seeded random values, the reference evaluator's
    /// for the same seed (index inputs within the table they index); returns
    /// the values set.
    pub fn set_random_input(
        &mut self,
        name: &str,
        seed: u64,
    ) -> Result<kernels::reference::Dense, RuntimeError> {
        let t = self.settable(name)?;
        let layout = layout_of(&self.plan, t);
        let bound = self.index_bounds.get(&t).map(|&(b, _)| b);
        let bytes = kernels::evaluate::random_leaf(name, &layout, seed, bound);
        self.set_input_bytes(name, &bytes)?;
        Ok(kernels::reference::gather(&bytes, &layout))
    }

    /// The names of the graph's inputs, in tensor order.
    pub fn input_names(&self) -> Vec<String> {
        self.inputs
            .keys()
            .map(|&t| self.plan.tensors[t as usize].name.clone())
            .collect()
    }

    /// Sets an F32 input from values in ggml element order.
    pub fn set_input_f32(&mut self, name: &str, values: &[f32]) -> Result<(), RuntimeError> {
        self.check_values(name, DType::F32, values.len())?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.set_input_bytes(name, &bytes)
    }

    /// Sets an I32 input (token ids, positions) from values in element order.
    pub fn set_input_i32(&mut self, name: &str, values: &[i32]) -> Result<(), RuntimeError> {
        self.check_values(name, DType::I32, values.len())?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.set_input_bytes(name, &bytes)
    }

    /// The bytes of plan tensor `t` (its span), or `None` when it has none.
    pub fn tensor_bytes(&self, t: u32) -> Option<&[u8]> {
        let a = *self.addr.get(t as usize)?;
        if a.is_null() {
            return None;
        }
        let span = layout_of(&self.plan, t).span_bytes() as usize;
        // SAFETY: a tensor's address is valid for its span (checker + load);
        // no kernel runs while `&self` is borrowed.
        Some(unsafe { std::slice::from_raw_parts(a, span) })
    }

    /// The values of plan tensor `t` as f64 in ggml element order.
    pub fn tensor_values(&self, t: u32) -> Option<kernels::reference::Dense> {
        let bytes = self.tensor_bytes(t)?;
        Some(kernels::reference::gather(bytes, &layout_of(&self.plan, t)))
    }

    /// The values of graph tensor `name` as f32, in element order.
    pub fn output_f32(&self, name: &str) -> Result<Vec<f32>, RuntimeError> {
        let t = self.tensor_id(name)?;
        let pt = &self.plan.tensors[t as usize];
        if pt.dtype == DType::F32 && layout_of(&self.plan, t).is_contiguous() {
            let bytes = self.tensor_bytes(t).ok_or_else(|| fused_away(name))?;
            return Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect());
        }
        let values = self.tensor_values(t).ok_or_else(|| fused_away(name))?;
        Ok(values.data.iter().map(|&v| v as f32).collect())
    }

    /// The values of an I32 graph tensor (e.g. argmax ids).
    pub fn output_i32(&self, name: &str) -> Result<Vec<i32>, RuntimeError> {
        let t = self.tensor_id(name)?;
        let values = self.tensor_values(t).ok_or_else(|| fused_away(name))?;
        Ok(values.data.iter().map(|&v| v as i32).collect())
    }

    fn check_inputs(&self) -> Result<(), RuntimeError> {
        if let Some((&t, _)) = self.inputs.iter().find(|(_, set)| !**set) {
            let pt = &self.plan.tensors[t as usize];
            return Err(RuntimeError::InputNotSet {
                name: pt.name.clone(),
                expected: describe(pt.dtype, &pt.ne),
            });
        }
        Ok(())
    }

    /// Runs every step once, the fast way: one job on the pool, a barrier
    /// between steps.
    pub fn run(&mut self) -> Result<(), RuntimeError> {
        self.run_inner(false)
    }

    /// Like [`Runtime::run`], recording the time of every step
    /// ([`Runtime::last_profile`]).
    pub fn run_profiled(&mut self) -> Result<(), RuntimeError> {
        self.run_inner(true)
    }

    fn run_inner(&mut self, profile: bool) -> Result<(), RuntimeError> {
        self.check_inputs()?;
        let state = self.state.clone();
        let _running = state.as_ref().map(|s| s.lock_run());
        let steps = &self.steps;
        let scratch = ScratchPtr(self.scratch.as_ptr());
        let marks: Vec<AtomicU64> = if profile {
            (0..steps.len()).map(|_| AtomicU64::new(0)).collect()
        } else {
            Vec::new()
        };
        let start = Instant::now();
        self.pool.run(&|ctx| {
            for (i, step) in steps.iter().enumerate() {
                // SAFETY: kernels were prepared over this runtime's live
                // buffers; every pool thread runs every step once.
                unsafe { step.kernel.run(ctx, scratch.get()) };
                ctx.barrier();
                if profile && ctx.ith == 0 {
                    marks[i].store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
            }
        });
        if profile {
            let mut prev = 0;
            for (i, m) in marks.iter().enumerate() {
                let now = m.load(Ordering::Relaxed);
                self.last_profile[i] = now - prev;
                prev = now;
            }
        }
        Ok(())
    }

    /// Runs every step with `observer` called before and after each; returns
    /// the number of steps run (fewer than all when the observer stopped it).
    pub fn run_observed(&mut self, observer: &mut dyn Observer) -> Result<usize, RuntimeError> {
        self.check_inputs()?;
        let state = self.state.clone();
        let _running = state.as_ref().map(|s| s.lock_run());
        let scratch = ScratchPtr(self.scratch.as_ptr());
        for i in 0..self.steps.len() {
            let info = StepInfo {
                index: i,
                step: &self.steps[i],
            };
            observer.before(self, &info);
            let kernel = &self.steps[i].kernel;
            self.pool.run(&|ctx| {
                // SAFETY: as in run_inner.
                unsafe { kernel.run(ctx, scratch.get()) };
            });
            let info = StepInfo {
                index: i,
                step: &self.steps[i],
            };
            if observer.after(self, &info) == Flow::Stop {
                return Ok(i + 1);
            }
        }
        Ok(self.steps.len())
    }

    /// Zeroes the state tensors (this runtime's, or its shared store's).
    pub fn reset_state(&mut self) {
        if let Some(store) = &self.state {
            store.clear();
            return;
        }
        for (t, pt) in self.plan.tensors.iter().enumerate() {
            if pt.role == Role::State && matches!(pt.placement, Placement::Arena { .. }) {
                let span = layout_of(&self.plan, t as u32).span_bytes() as usize;
                // SAFETY: the tensor's bytes hold its span; no kernel runs.
                unsafe { std::ptr::write_bytes(self.addr[t], 0, span) };
            }
        }
    }

    /// Bytes of every arena of `usage`.
    pub fn arena_bytes(&self, usage: Usage) -> u64 {
        self.plan
            .arenas
            .iter()
            .filter(|a| a.usage == usage)
            .map(|a| a.size)
            .sum()
    }
}

#[derive(Clone, Copy)]
struct ScratchPtr(*mut u8);

impl ScratchPtr {
    /// A method, so closures capture the whole (Sync) wrapper, not the field.
    fn get(self) -> *mut u8 {
        self.0
    }
}
// SAFETY: the scratch buffer outlives the run; kernels share it by contract.
unsafe impl Send for ScratchPtr {}
// SAFETY: as above.
unsafe impl Sync for ScratchPtr {}

fn fused_away(name: &str) -> RuntimeError {
    RuntimeError::WrongUse {
        name: name.to_string(),
        why: "is computed inside a fused kernel in this plan: it has no bytes to read".to_string(),
    }
}

fn role_words(role: Role) -> &'static str {
    match role {
        Role::Weight => "a weight",
        Role::Input => "an input",
        Role::State => "a state tensor",
        Role::Constant => "a constant",
        Role::Intermediate => "an intermediate",
        Role::Output => "an output",
    }
}

/// For every I32 input used as row indices (by get_rows or set_rows, directly,
/// through a view or through a copy): the fewest rows among the tables it
/// indexes, and that table.
fn index_bounds(plan: &Plan) -> BTreeMap<u32, (i64, u32)> {
    let mut out: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
    let root = |t: u32| original(plan, owner(plan, t));
    for step in plan.splits.iter().flat_map(|s| &s.steps) {
        let (index, table) = match step {
            Step::Op {
                op: Op::GetRows,
                srcs,
                ..
            } => (srcs[1], srcs[0]),
            Step::Op {
                op: Op::SetRows,
                srcs,
                ..
            } => (srcs[2], srcs[0]),
            _ => continue,
        };
        let input = root(index);
        if plan.tensors[input as usize].role != Role::Input {
            continue;
        }
        let rows = plan.tensors[table as usize].ne[1];
        let entry = out.entry(input).or_insert((rows, table));
        if rows < entry.0 {
            *entry = (rows, table);
        }
    }
    out
}

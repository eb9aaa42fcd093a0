//! The compiler's pipeline, visible in one function with a timing per pass.
//!
//! verify graph -> micro-batch (`--pipeline N` only) -> assign (or tensor-split,
//! `--split-mode row`) -> schedule -> split + copies -> fuse -> emit
//! (liveness + memory per device) -> sync (events between streams) -> check. Each pass reads its inputs and
//! returns a new artifact; none mutates another's output.
//!
//! Invariant: the plan is a pure function of (graph, target, options): timings
//! are returned beside it, never written into it.

use crate::assign::{Policy, assign_devices};
use crate::emit::{Header, emit_plan};
use crate::placement::PlacementOptions;
use crate::target::Target;
use crate::tensor_split::{Collectives, TensorSplitOptions, split_tensors};
use crate::{Error, check, fuse, micro_batch, schedule, split, sync};
use ir::Graph;
use ir::plan::{DeviceId, Plan};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// The compiler's version, recorded in every plan (`compiler_version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Calls of [`compile`] in this process: a program that loads precompiled
/// plans can show (and its tests assert) that it compiled none.
static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

/// How many times [`compile`] has been called in this process.
pub fn compilations() -> usize {
    COMPILATIONS.load(Ordering::Relaxed)
}

/// The fingerprint a plan records of the graph it was compiled from
/// (`graph_hash`): of the graph's canonical text, so two graphs that print
/// the same have the same hash.
pub fn graph_hash(graph: &Graph) -> String {
    ir::plan::fingerprint(ir::text::to_ron(graph).as_bytes())
}

/// Everything besides the graph and target that shapes a plan.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Placement algorithm.
    pub policy: Policy,
    /// Weight placement rules.
    pub placement: PlacementOptions,
    /// Micro-batches to cut the batch into (`--pipeline N`; 1 = none), see
    /// [`crate::micro_batch`].
    pub micro_batches: u32,
    /// Tensor parallelism (`--split-mode row`, `--split REGEX=AXIS`), see
    /// [`crate::tensor_split`]; it replaces the assign pass.
    pub tensor_split: Option<TensorSplitOptions>,
    /// The options as the user spelled them (recorded in the plan).
    pub spelled: Vec<String>,
}

impl Default for CompileOptions {
    /// The cost policy, no placement rules (what `ggplan compile` does by default).
    fn default() -> CompileOptions {
        CompileOptions {
            policy: Policy::Cost,
            placement: PlacementOptions::default(),
            micro_batches: 1,
            tensor_split: None,
            spelled: Vec::new(),
        }
    }
}

impl CompileOptions {
    /// These options as `ggplan compile` flags, `--target TARGET` first: what
    /// a plan records in `options`, so that reading a plan tells how to
    /// compile it again.
    pub fn flags(&self, target: &str) -> Vec<String> {
        let mut flags = vec![format!("--target {target}")];
        flags.push(format!(
            "--policy {}",
            match self.policy {
                Policy::Ggml => "ggml",
                Policy::Cost => "cost",
            }
        ));
        let placement = &self.placement;
        flags.extend(
            placement
                .pins
                .iter()
                .map(|p| format!("--pin {}={}", p.pattern.as_str(), p.device)),
        );
        if let Some(n) = placement.offload_layers {
            flags.push(format!("--offload-layers {n}"));
        }
        if placement.fit {
            flags.push("--fit".to_string());
        }
        if placement.op_offload {
            flags.push("--op-offload".to_string());
        }
        if let Some(shares) = &placement.layer_split {
            flags.push("--split-mode layer".to_string());
            if !shares.is_empty() {
                let list: Vec<String> = shares.iter().map(f64::to_string).collect();
                flags.push(format!("--tensor-split {}", list.join(",")));
            }
        }
        if self.micro_batches > 1 {
            flags.push(format!("--pipeline {}", self.micro_batches));
        }
        if let Some(split) = &self.tensor_split {
            if split.rules.is_empty() {
                flags.push("--split-mode row".to_string());
            }
            flags.extend(
                split
                    .rules
                    .iter()
                    .map(|r| format!("--split {}={}", r.pattern.as_str(), r.axis)),
            );
            if !split.shares.is_empty() {
                let list: Vec<String> = split.shares.iter().map(f64::to_string).collect();
                flags.push(format!("--tensor-split {}", list.join(",")));
            }
            if split.collectives != Collectives::Auto {
                flags.push(format!("--collectives {}", split.collectives.name()));
            }
        }
        flags
    }
}

/// How long one pass took.
#[derive(Clone, Debug)]
pub struct PassTiming {
    /// The pass.
    pub pass: &'static str,
    /// Wall time in microseconds.
    pub micros: f64,
}

/// A plan and how long each pass took to make it.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The plan.
    pub plan: Plan,
    /// Per-pass wall times, in pipeline order.
    pub timings: Vec<PassTiming>,
}

/// Compiles `graph` for `target`.
pub fn compile(
    graph: &Graph,
    target: &Target,
    options: &CompileOptions,
) -> Result<Compiled, Error> {
    let mut timings = Vec::new();
    let mut timed = |pass: &'static str, start: Instant| {
        timings.push(PassTiming {
            pass,
            micros: start.elapsed().as_secs_f64() * 1e6,
        });
    };

    let t = Instant::now();
    let violations = ir::verify::verify(graph);
    if !violations.is_empty() {
        return Err(Error::InvalidGraph {
            graph: graph.name.clone(),
            violations,
        });
    }
    target.validate()?;
    options.placement.validate(target)?;
    timed("verify", t);

    // The header names the graph as the user gave it; the plan's tensors are
    // those of the micro-batched graph.
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let graph_hash = graph_hash(graph);
    let t = Instant::now();
    let cut;
    let graph = if options.micro_batches > 1 {
        cut = micro_batch::micro_batches(graph, options.micro_batches)?;
        timed("micro-batch", t);
        &cut
    } else {
        graph
    };

    let t = Instant::now();
    let sharded;
    let (graph, assignment) = match &options.tensor_split {
        Some(split) => {
            if options.micro_batches > 1 {
                return Err(Error::TensorSplit {
                    rule: "--split-mode row".into(),
                    tensor: String::new(),
                    reason: "cannot be combined with --pipeline (tensor split and \
                             micro-batches are two ways to use several devices)"
                        .into(),
                });
            }
            sharded = split_tensors(graph, target, split)?;
            timed("tensor-split", t);
            (&sharded.graph, sharded.assignment.clone())
        }
        None => {
            let placement = PlacementOptions {
                pipelined: options.micro_batches > 1,
                ..options.placement.clone()
            };
            let assignment = assign_devices(graph, target, &placement, options.policy)?;
            timed("assign", t);
            (graph, assignment)
        }
    };

    let t = Instant::now();
    let schedule = schedule::schedule_nodes(graph, &assignment);
    timed("schedule", t);

    let t = Instant::now();
    let splits =
        split::split_and_copy(graph, &assignment, &schedule).map_err(|e| Error::Internal {
            pass: "split",
            problem: e.to_string(),
        })?;
    timed("split", t);

    let t = Instant::now();
    let fusable = |d: DeviceId| target.get(d).is_some_and(|dev| !dev.kind.is_remote());
    let fusion = fuse::fuse_elementwise_where(graph, &assignment, &schedule.order, &fusable);
    timed("fuse", t);

    let t = Instant::now();
    let header = Header {
        compiler_version: VERSION.to_string(),
        graph_hash,
        target_name: target.name.clone(),
        options: options.spelled.clone(),
    };
    let plan = emit_plan(graph, target, &assignment, &splits, &fusion, header)?;
    timed("emit", t);

    let t = Instant::now();
    let plan = sync::insert_events(plan);
    timed("sync", t);

    let t = Instant::now();
    let problems = check::check_plan(&plan, Some(target));
    timed("check", t);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        return Err(Error::Internal {
            pass: "check",
            problem: format!("the plan fails its checker:\n{}", list.join("\n")),
        });
    }
    Ok(Compiled { plan, timings })
}

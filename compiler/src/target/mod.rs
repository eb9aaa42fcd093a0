//! Target descriptions: the devices a plan runs on and the links between them.
//!
//! A [`Target`] is plain data (serde, RON). Nothing here opens a device: a
//! description of `cpu+cuda0` is enough to plan for it on a machine without a
//! GPU. Built-in presets live in [`presets`]; `examples/targets/*.ron` holds the
//! same presets as files plus a small-memory target for `--fit` tests.
//!
//! **Device order is priority order**: `devices[0]` is the device preferred
//! for compute, the last is the fallback. This is the order of ggml's
//! scheduler, which lists backends GPU first and the CPU last, so in
//! `cpu+cuda0` the list is `[cuda0, cpu]` (the target's name does not imply an
//! order). [`DeviceId`] is a position in this list.
//!
//! Invariants of a target that passed [`Target::validate`] (and so of every
//! target [`Target::parse`] or [`Target::preset`] returns):
//! - at least one device; device names unique and non-empty;
//! - the host is either one `Cpu` device or `CpuCores` groups `0..groups`,
//!   each once (all with the same `groups`), never both; CPU devices are
//!   host-visible; CUDA ordinals unique; a target may have no CPU (`cuda0`
//!   alone); remote servers unique, never host-visible, and never running
//!   collectives;
//! - alignment a power of two; `0 < max_buffer_bytes <= memory_bytes`;
//! - every device supports something; throughput rates finite and positive;
//! - links are symmetric (one entry serves both directions) and there is
//!   exactly one link per pair of distinct devices, so [`Target::link`] answers
//!   for every pair; bandwidths finite and > 0, latencies finite and >= 0.

pub mod presets;
pub mod support;
pub mod throughput;
mod validate;

#[cfg(test)]
mod tests;

pub use support::{DTypeSet, OpKind, OpSet, OpSupport};
pub use throughput::{DTypeClass, MatmulGflops, Throughput};

use crate::Error;
use ir::{DType, Graph, Op, TensorId};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use ir::plan::{DeviceId, DeviceKind};

/// One device: what it runs, how much memory it has and how fast it is.
/// The fields mirror what a ggml device and its buffer type expose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Short unique name: `cpu`, `cuda0`, ... (what `--pin RE=DEV` names).
    pub name: String,
    /// CPU or CUDA (with its ordinal).
    pub kind: DeviceKind,
    /// Memory the plan may use on this device, in bytes (ggml `get_memory`).
    pub memory_bytes: u64,
    /// Byte alignment of every tensor offset in this device's buffers
    /// (ggml buffer type `get_alignment`); a power of two.
    pub alignment: u64,
    /// Largest single buffer, in bytes (ggml `get_max_size`); bigger arenas
    /// are split into chunks.
    pub max_buffer_bytes: u64,
    /// The host can read and write this device's buffers directly
    /// (ggml `is_host`): no copy is needed to hand them to the CPU.
    pub host_visible: bool,
    /// The (op, src0 dtype) pairs it runs (ggml `supports_op`).
    pub supports: Vec<OpSupport>,
    /// Throughput estimates for the cost model.
    pub throughput: Throughput,
}

impl Device {
    /// True when this device can run `op` with a src0 of dtype `src0`.
    pub fn supports(&self, op: &Op, src0: DType) -> bool {
        self.supports_kind(op.kind(), src0)
    }

    /// True when this device can run ops of kind `kind` with src0 of dtype `src0`.
    pub fn supports_kind(&self, kind: OpKind, src0: DType) -> bool {
        self.supports.iter().any(|s| s.covers(kind, src0))
    }

    /// True for a CPU device.
    pub fn is_cpu(&self) -> bool {
        self.kind.is_cpu()
    }
}

/// A link between two devices; it serves both directions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// One end (a device name).
    pub from: String,
    /// The other end (a device name).
    pub to: String,
    /// Sustained copy bandwidth in GB/s (10^9 bytes), each direction.
    pub bandwidth_gbps: f64,
    /// Fixed cost of one copy, in µs.
    pub latency_us: f64,
}

impl Link {
    /// True when this link joins `a` and `b`, in either direction.
    pub fn joins(&self, a: &str, b: &str) -> bool {
        (self.from == a && self.to == b) || (self.from == b && self.to == a)
    }
}

/// A machine to plan for: devices in priority order and the links between them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The target's name (`cpu+cuda0`, or a file's own name).
    pub name: String,
    /// Devices, highest priority first; the CPU, if any, is usually last.
    pub devices: Vec<Device>,
    /// Links between devices; one per pair, symmetric.
    pub links: Vec<Link>,
}

impl Target {
    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// The id of the device called `name`.
    pub fn device_id(&self, name: &str) -> Option<DeviceId> {
        let i = self.devices.iter().position(|d| d.name == name)?;
        Some(DeviceId(i as u32))
    }

    /// The device with id `id`, if the id is in range.
    pub fn get(&self, id: DeviceId) -> Option<&Device> {
        self.devices.get(id.index())
    }

    /// Every device id, highest priority first.
    pub fn device_ids(&self) -> impl Iterator<Item = DeviceId> + '_ {
        (0..self.devices.len() as u32).map(DeviceId)
    }

    /// The link between devices `a` and `b` (either order).
    pub fn link(&self, a: &str, b: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.joins(a, b))
    }

    /// True when device `device` can run `op` with a src0 of dtype `src0`
    /// (false for an id out of range).
    pub fn supports(&self, device: DeviceId, op: &Op, src0: DType) -> bool {
        self.get(device).is_some_and(|d| d.supports(op, src0))
    }

    /// The CPU (host) device, if the target has one.
    pub fn cpu(&self) -> Option<DeviceId> {
        self.device_ids()
            .find(|&id| self.devices[id.index()].is_cpu())
    }

    /// The highest-priority device that is not a CPU (where `--offload-layers`
    /// puts weights).
    pub fn first_accelerator(&self) -> Option<DeviceId> {
        self.device_ids()
            .find(|&id| !self.devices[id.index()].is_cpu())
    }

    /// Checks every invariant of the module doc; lists every problem found.
    pub fn validate(&self) -> Result<(), Error> {
        let problems = validate::problems(self);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidTarget {
                target: self.name.clone(),
                problems,
            })
        }
    }

    /// The names of the built-in presets, in the order [`Target::preset`] knows them.
    pub const PRESETS: [&'static str; 10] = presets::NAMES;

    /// The built-in target called `name` (one of [`Target::PRESETS`]).
    pub fn preset(name: &str) -> Option<Target> {
        presets::preset(name)
    }

    /// `--target NAME_OR_PATH`: a preset name, or else a RON target file.
    /// The result is validated.
    pub fn parse(name_or_path: &str) -> Result<Target, Error> {
        if let Some(t) = Target::preset(name_or_path) {
            return Ok(t);
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            return Err(Error::UnknownTarget {
                name: name_or_path.to_string(),
                presets: Target::PRESETS.join(", "),
            });
        }
        Target::read(path)
    }

    /// Reads, parses and validates a RON target file.
    pub fn read(path: &Path) -> Result<Target, Error> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: shown.clone(),
            source,
        })?;
        Target::from_ron(&text, &shown)
    }

    /// Parses and validates a target from RON text; `path` names it in errors.
    pub fn from_ron(text: &str, path: &str) -> Result<Target, Error> {
        let target: Target = ron::from_str(text).map_err(|e| Error::TargetSyntax {
            path: path.to_string(),
            line: e.span.start.line,
            col: e.span.start.col,
            message: e.code.to_string(),
        })?;
        target.validate()?;
        Ok(target)
    }

    /// The canonical RON text of this target (what `examples/targets/` holds):
    /// two-space indents, one field per line, one line per support entry and
    /// per matmul rate set, a final newline. Parsing it gives back `self`.
    pub fn to_ron(&self) -> String {
        let config = ron::ser::PrettyConfig::new()
            .indentor("  ")
            .struct_names(false)
            .depth_limit(4);
        // Plain structs, strings, integers and floats: serialising to a
        // String cannot fail (ir::text::to_ron relies on the same).
        let mut text =
            ron::ser::to_string_pretty(self, config).expect("a target always serialises");
        text.push('\n');
        text
    }
}

/// The dtype support is keyed on: src0's (the tensor's own for an op
/// without sources, which a verified graph never has).
pub(crate) fn src0_dtype(graph: &Graph, node: TensorId) -> DType {
    let t = graph.tensor(node);
    t.srcs
        .first()
        .map_or(t.layout.dtype, |&s| graph.tensor(s).layout.dtype)
}

/// True when `node` is a kernel (a non-view node) that `device` cannot run.
/// Leafs and views run nothing, so every device "runs" them.
pub(crate) fn cannot_run(graph: &Graph, target: &Target, device: DeviceId, node: TensorId) -> bool {
    match &graph.tensor(node).op {
        Some(op) if !op.is_view() => !target.supports(device, op, src0_dtype(graph, node)),
        _ => false,
    }
}

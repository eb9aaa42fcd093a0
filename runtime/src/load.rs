//! The stages of [`crate::Runtime::load`] after the plan is checked and its
//! devices opened, each a loop over the plan's arenas, tensors or devices
//! that asks each tensor's device what to do: allocate its arenas, place its
//! weights and state, write weights and constants, prepare its steps.
//!
//! Nothing here names a kind of device.
//!
//! Invariants: host arenas are refused before any allocation when they
//! exceed the memory available; an arena a device deferred is allocated only
//! if some tensor placed in it is not held elsewhere; every write covers
//! exactly its tensor's span.

use crate::RuntimeError;
use crate::device::{Device, PrepareCtx, TensorBytes, WeightPlacement, WeightRequest};
use crate::load_options::LoadOptions;
use crate::memory::available_bytes;
use crate::steps::{PreparedStep, prepare_all};
use crate::weights::Weights;
use ir::Role;
use ir::plan::{Placement, Plan};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Each arena's base in its device's address space, `None` for one its
/// device defers until the weights are placed; refused first when the host
/// arenas (`host[d]`: device `d` is host memory) exceed the memory available.
pub(crate) fn allocate_arenas(
    plan: &Plan,
    devices: &[Arc<dyn Device>],
    host: &[bool],
) -> Result<Vec<Option<*mut u8>>, RuntimeError> {
    let needed: u64 = (plan.arenas.iter())
        .filter(|a| host[a.device.index()])
        .map(|a| a.size)
        .sum();
    if let Some(available) = available_bytes()
        && needed > available
    {
        return Err(RuntimeError::OutOfMemory { needed, available });
    }
    (plan.arenas.iter().enumerate())
        .map(|(i, a)| devices[a.device.index()].alloc_arena(i, a.size, a.usage, true))
        .collect()
}

/// Weight bytes by where they went (the load report's figures).
#[derive(Default)]
pub(crate) struct WeightBytes {
    pub(crate) in_place: u64,
    pub(crate) copied: u64,
    pub(crate) uploaded: u64,
    pub(crate) cached: u64,
}

/// Where the weights and shared state went.
pub(crate) struct Placed<'w> {
    /// Per plan tensor: an address that replaces its arena slot (a weight
    /// in place or held by its device, shared state).
    pub(crate) overrides: Vec<Option<*mut u8>>,
    /// Bytes to write into arena slots at load, by plan tensor.
    pub(crate) writes: Vec<(u32, Cow<'w, [u8]>)>,
    /// Weights whose values the runtime reads from the file, not the device.
    pub(crate) host_sources: BTreeMap<u32, (usize, usize)>,
    pub(crate) bytes: WeightBytes,
}

/// Asks each weight's and state tensor's device where it goes.
pub(crate) fn place_tensors<'w>(
    plan: &Plan,
    devices: &[Arc<dyn Device>],
    host: &[bool],
    weights: &'w Weights,
    options: &LoadOptions,
    exact: bool,
) -> Result<Placed<'w>, RuntimeError> {
    let mut placed = Placed {
        overrides: vec![None; plan.tensors.len()],
        writes: Vec::new(),
        host_sources: BTreeMap::new(),
        bytes: WeightBytes::default(),
    };
    let n_graph = plan.n_graph_tensors as usize;
    for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
        if !matches!(pt.placement, Placement::Arena { .. }) {
            continue;
        }
        let layout = pt.layout();
        let device = &devices[pt.device.index()];
        match pt.role {
            Role::Weight => {
                let request = WeightRequest {
                    plan,
                    tensor: t as u32,
                    layout,
                    weights,
                    exact,
                };
                let bytes = &mut placed.bytes;
                match device.place_weight(&request)? {
                    WeightPlacement::InPlace(b) => {
                        bytes.in_place += b.len() as u64;
                        placed.overrides[t] = Some(b.as_ptr().cast_mut());
                    }
                    WeightPlacement::Write(b) => {
                        if host[pt.device.index()] {
                            bytes.copied += b.len() as u64;
                        } else {
                            bytes.uploaded += b.len() as u64;
                        }
                        placed.writes.push((t as u32, b));
                    }
                    WeightPlacement::Held {
                        addr,
                        bytes: n,
                        uploaded,
                        host_source,
                    } => {
                        placed.overrides[t] = Some(addr);
                        if uploaded {
                            bytes.uploaded += n;
                        } else {
                            bytes.cached += n;
                        }
                        if let Some(source) = host_source {
                            placed.host_sources.insert(t as u32, source);
                        }
                    }
                }
            }
            Role::State => {
                // Shared state lives in the store (or on its device), by
                // name, for every runtime of the job.
                if let Some(store) = &options.state {
                    placed.overrides[t] = Some(device.bind_state(store, &pt.name, &layout)?);
                }
            }
            _ => {}
        }
    }
    Ok(placed)
}

/// Every arena's base: a deferred one is allocated now if some tensor placed
/// in it has no address of its own, else left null (nothing reads it).
pub(crate) fn allocate_deferred(
    plan: &Plan,
    devices: &[Arc<dyn Device>],
    bases: Vec<Option<*mut u8>>,
    overrides: &[Option<*mut u8>],
) -> Result<Vec<*mut u8>, RuntimeError> {
    let n_graph = plan.n_graph_tensors as usize;
    let needed = |i: usize| {
        (plan.tensors[..n_graph].iter().enumerate()).any(|(t, pt)| {
            overrides[t].is_none()
                && matches!(pt.placement, Placement::Arena { arena, .. } if arena as usize == i)
        })
    };
    let mut out = Vec::with_capacity(bases.len());
    for (i, (base, a)) in bases.into_iter().zip(&plan.arenas).enumerate() {
        let base = match base {
            Some(b) => Some(b),
            None if needed(i) => {
                devices[a.device.index()].alloc_arena(i, a.size, a.usage, false)?
            }
            None => None,
        };
        out.push(base.unwrap_or(std::ptr::null_mut()));
    }
    Ok(out)
}

/// Adds the bytes of every constant placed in an arena to `writes`.
pub(crate) fn add_constants(plan: &Plan, writes: &mut Vec<(u32, Cow<'_, [u8]>)>) {
    let n_graph = plan.n_graph_tensors as usize;
    for (t, pt) in plan.tensors[..n_graph].iter().enumerate() {
        if let (Role::Constant, Some(init), Placement::Arena { .. }) =
            (pt.role, &pt.init, pt.placement)
        {
            let bytes = kernels::evaluate::constant_leaf(init, &pt.layout());
            writes.push((t as u32, Cow::Owned(bytes)));
        }
    }
}

/// Writes `writes` through their devices, one call per device (a GPU may
/// stage them), reporting progress to `options.on_upload`.
pub(crate) fn write_tensors(
    plan: &Plan,
    devices: &[Arc<dyn Device>],
    addr: &[*mut u8],
    writes: &[(u32, Cow<'_, [u8]>)],
    options: &LoadOptions,
) -> Result<(), RuntimeError> {
    let total: u64 = writes.iter().map(|(_, b)| b.len() as u64).sum();
    let mut written = 0u64;
    for (d, device) in devices.iter().enumerate() {
        let items: Vec<(TensorBytes, &[u8])> = (writes.iter())
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
    Ok(())
}

/// Every step prepared on its device, then each device finished with the
/// most scratch its steps need.
pub(crate) fn prepare_steps(
    plan: &Plan,
    addr: &[*mut u8],
    devices: &[Arc<dyn Device>],
    options: &LoadOptions,
) -> Result<Vec<PreparedStep>, RuntimeError> {
    let ctx = PrepareCtx { plan, addr };
    let steps = prepare_all(&ctx, devices, options.on_prepare.as_deref())?;
    for (d, device) in devices.iter().enumerate() {
        let scratch = (steps.iter())
            .filter(|s| s.device == d && s.kind != "copy")
            .map(|s| s.kernel.scratch_bytes())
            .max();
        device.finish_prepare(scratch.unwrap_or(0))?;
    }
    Ok(steps)
}

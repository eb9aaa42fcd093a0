//! Weight placement: the device of every weight, shared by both policies
//! (so comparing policies compares them on the same weight placement), but
//! for a layer split without proportions, which the cost policy prices
//! ([`crate::placement::layer_cost`]) and the ggml policy makes by memory.
//!
//! Precedence, per weight:
//! 1. an explicit `--pin` rule, else `--offload-layers N` or
//!    `--split-mode layer` ([`Pins`]);
//! 2. with `--fit`: devices are filled greedily in priority order, one unit
//!    at a time in graph order, a unit being a block's weights together
//!    ([`layer_of`]) or a weight in no block alone. A unit that does not fit
//!    the current device moves the cursor to the next one, so blocks stay
//!    contiguous per device (one crossing per device boundary); a unit that
//!    fits no device from the cursor on may still go to an earlier one.
//!    A mixture of experts' expert tensors (llama.cpp's names,
//!    `ffn_{up,gate,down}_exps`) are units of their own, placed after every
//!    other unit, block by block from the first, as llama.cpp's `--fit`
//!    places them: every block's attention and shared weights take the
//!    fastest devices before any expert does (experts are read sparsely),
//!    then the first blocks' experts fill what is left; the block whose
//!    experts do not fit whole is split by tensor (up, gate, then down, the
//!    order in which llama.cpp's partial layers keep them);
//! 3. otherwise the first device (highest priority), when all the remaining
//!    weights fit there; else an error that suggests `--fit` or
//!    `--offload-layers`.
//!
//! Memory counted: weights only, plus a **compute reserve** kept free on
//! every device: the largest working set of a single op (its result plus its
//! non-weight operands, [`compute_reserve_bytes`]). Any device that runs that
//! op needs at least this much besides its weights, so the reserve keeps
//! `--fit` from filling a device so full that its ops cannot run; it is a
//! lower bound of the compute arena, which the memory pass sizes for real.
//! Under `--fit` a block's state (its KV cache) counts with its block's
//! weights (but its experts), where its attention runs; without `--fit`,
//! state is not counted here. A weight must also fit the device's largest
//! single buffer.
//!
//! Invariants: every weight gets a device (or the call fails with an error
//! naming the weight, its size and every device's free memory); pinned
//! weights are exactly where [`Pins`] says; a weight is never refused a
//! device for lacking op support: ops its device cannot run read it through
//! a copy (ggml does the same), and its reason says so.

use crate::Error;
use crate::placement::{
    Pins, PlacementOptions, Policy, compute_reserve_bytes, expert_rank, layer_of,
};
use crate::target::{DeviceId, Target, src0_dtype};
use ir::{Graph, Role, TensorId};

/// Where the weights are, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightPlacement {
    /// Indexed by tensor id: the device of each weight; `None` for every other tensor.
    pub device: Vec<Option<DeviceId>>,
    /// Indexed by tensor id: why each weight is there (empty for the others).
    pub reason: Vec<String>,
}

/// Places every weight of `graph` on a device of `target`; see the module doc.
/// Fails on an invalid target, or when a weight fits no device.
pub fn place_weights(
    graph: &Graph,
    target: &Target,
    options: &PlacementOptions,
    policy: Policy,
) -> Result<WeightPlacement, Error> {
    target.validate()?;
    let pins = Pins::new(options, target, graph, policy);
    let reserve = compute_reserve_bytes(graph);
    let mut free: Vec<u64> = target
        .devices
        .iter()
        .map(|d| d.memory_bytes.saturating_sub(reserve))
        .collect();
    let mut device = vec![None; graph.len()];
    let mut reason = vec![String::new(); graph.len()];
    let mut unpinned = Vec::new();
    for w in graph.with_role(Role::Weight) {
        let t = graph.tensor(w);
        let Some((d, why)) = pins.device_for(&t.name) else {
            unpinned.push(w);
            continue;
        };
        let bytes = t.layout.span_bytes();
        let dev = &target.devices[d.index()];
        if bytes > free[d.index()] || bytes > dev.max_buffer_bytes {
            return Err(does_not_fit(graph, target, &free, w, &format!("; {why}")));
        }
        free[d.index()] -= bytes;
        device[w.index()] = Some(d);
        reason[w.index()] = why;
    }
    if options.fit {
        fit_greedily(
            graph,
            target,
            &mut free,
            &unpinned,
            &mut device,
            &mut reason,
        )?;
    } else if !unpinned.is_empty() {
        first_device(
            graph,
            target,
            &free,
            reserve,
            &unpinned,
            &mut device,
            &mut reason,
        )?;
    }
    note_unsupported_users(graph, target, &device, &mut reason);
    Ok(WeightPlacement { device, reason })
}

/// `--fit`: units (a block's weights, or one weight in no block) in graph
/// order fill the devices in priority order.
fn fit_greedily(
    graph: &Graph,
    target: &Target,
    free: &mut [u64],
    unpinned: &[TensorId],
    device: &mut [Option<DeviceId>],
    reason: &mut [String],
) -> Result<(), Error> {
    // Units in order of their first weight; a block's weights together, its
    // experts apart and after every other unit.
    let mut units: Vec<Unit> = Vec::new();
    for &w in unpinned {
        let name = &graph.tensor(w).name;
        let layer = layer_of(name);
        let experts = layer.is_some() && expert_rank(name).is_some();
        let same = |u: &Unit| layer.is_some() && u.layer == layer && u.experts == experts;
        match units.iter_mut().find(|u| same(u)) {
            Some(unit) => unit.weights.push(w),
            None => units.push(Unit {
                layer,
                experts,
                weights: vec![w],
            }),
        }
    }
    units.sort_by_key(|u| u.experts); // stable: graph order within each kind
    // A block's state (its KV cache) lives where its attention runs: room for
    // it is kept beside the block's other weights.
    let mut state_of: std::collections::BTreeMap<u32, u64> = Default::default();
    for t in graph.with_role(Role::State) {
        if let Some(l) = layer_of(&graph.tensor(t).name) {
            *state_of.entry(l).or_default() += graph.tensor(t).layout.span_bytes();
        }
    }
    let bytes_of = |w: &TensorId| graph.tensor(*w).layout.span_bytes();
    let mut cursor = 0;
    let mut queue: std::collections::VecDeque<Unit> = units.into();
    while let Some(unit) = queue.pop_front() {
        let (layer, weights) = (unit.layer, &unit.weights);
        let state = match (layer, unit.experts) {
            (Some(l), false) => state_of.get(&l).copied().unwrap_or(0),
            _ => 0,
        };
        let total: u64 = weights.iter().map(bytes_of).sum::<u64>() + state;
        let largest = weights.iter().map(bytes_of).max().unwrap_or(0);
        let fits = |d: usize, free: &[u64]| {
            total <= free[d] && largest <= target.devices[d].max_buffer_bytes
        };
        // A block's experts that miss the current device go tensor by tensor.
        if unit.experts && weights.len() > 1 && !fits(cursor, free) {
            let mut parts = weights.clone();
            parts.sort_by_key(|&w| expert_rank(&graph.tensor(w).name));
            for w in parts.into_iter().rev() {
                queue.push_front(Unit {
                    weights: vec![w],
                    ..unit.clone()
                });
            }
            continue;
        }
        let Some(d) = (cursor..free.len())
            .chain(0..cursor)
            .find(|&d| fits(d, free))
        else {
            let first = weights[0];
            let context = match layer {
                Some(l) => format!(", with the rest of block {l}: {total} bytes in all"),
                None => String::new(),
            };
            return Err(does_not_fit(graph, target, free, first, &context));
        };
        if d >= cursor {
            cursor = d;
        }
        free[d] -= total;
        let dev = &target.devices[d];
        let what = match (layer, unit.experts, weights.len()) {
            (Some(l), true, 1) => format!(
                "this expert tensor of block {l} ({}; experts go after every block's other weights, the rest of its block's experts did not fit here)",
                mib(total)
            ),
            (Some(l), true, _) => format!(
                "block {l}'s experts ({}; experts go after every block's other weights)",
                mib(total)
            ),
            (Some(l), false, _) if state > 0 => {
                format!("block {l}'s weights and state ({})", mib(total))
            }
            (Some(l), false, _) => format!("block {l}'s weights ({})", mib(total)),
            (None, ..) => format!("this weight ({})", mib(total)),
        };
        let why = format!(
            "--fit: {what} fit {} ({} left of {} after a compute reserve), the first device in priority order with room",
            dev.name,
            mib(free[d]),
            mib(dev.memory_bytes)
        );
        for w in weights {
            device[w.index()] = Some(DeviceId(d as u32));
            reason[w.index()] = why.clone();
        }
    }
    Ok(())
}

/// One unit of `--fit`: a block's weights (its experts apart), or a weight
/// in no block.
#[derive(Clone, Debug)]
struct Unit {
    layer: Option<u32>,
    /// A block's expert tensors (or some of them).
    experts: bool,
    weights: Vec<TensorId>,
}

/// No `--fit`: every unpinned weight on the first device, if they all fit.
fn first_device(
    graph: &Graph,
    target: &Target,
    free: &[u64],
    reserve: u64,
    unpinned: &[TensorId],
    device: &mut [Option<DeviceId>],
    reason: &mut [String],
) -> Result<(), Error> {
    let bytes_of = |w: &TensorId| graph.tensor(*w).layout.span_bytes();
    // A weight too big for every device is the clearest error.
    for &w in unpinned {
        let b = bytes_of(&w);
        let anywhere =
            (0..free.len()).any(|d| b <= free[d] && b <= target.devices[d].max_buffer_bytes);
        if !anywhere {
            return Err(does_not_fit(graph, target, free, w, ""));
        }
    }
    let total: u64 = unpinned.iter().map(bytes_of).sum();
    let dev = &target.devices[0];
    let too_big = unpinned.iter().any(|w| bytes_of(w) > dev.max_buffer_bytes);
    if too_big || total > free[0] {
        return Err(Error::WeightsExceedFirstDevice {
            device: dev.name.clone(),
            bytes: total,
            free: free[0],
            memory: dev.memory_bytes,
            reserve,
        });
    }
    let why = format!(
        "all weights fit {} ({} of {} free after a compute reserve), the highest-priority device",
        dev.name,
        mib(total),
        mib(free[0])
    );
    for &w in unpinned {
        device[w.index()] = Some(DeviceId(0));
        reason[w.index()] = why.clone();
    }
    Ok(())
}

/// Adds to a weight's reason every user its device cannot run.
fn note_unsupported_users(
    graph: &Graph,
    target: &Target,
    device: &[Option<DeviceId>],
    reason: &mut [String],
) {
    for n in graph.nodes() {
        let t = graph.tensor(n);
        let Some(op) = t.op.filter(|op| !op.is_view()) else {
            continue;
        };
        let src0 = src0_dtype(graph, n);
        for &s in &t.srcs {
            let w = graph.storage_of(s).root;
            let Some(d) = device[w.index()] else {
                continue;
            };
            if graph.tensor(w).role == Role::Weight && !target.supports(d, &op, src0) {
                let dev = &target.devices[d.index()].name;
                let note = format!(
                    "; {dev} cannot run its user '{}' ({op}, src0 {src0}), which runs elsewhere and reads it through a copy",
                    t.name
                );
                if !reason[w.index()].contains(&note) {
                    reason[w.index()].push_str(&note);
                }
            }
        }
    }
}

fn does_not_fit(graph: &Graph, target: &Target, free: &[u64], w: TensorId, context: &str) -> Error {
    let t = graph.tensor(w);
    let free = target
        .devices
        .iter()
        .zip(free)
        .map(|(d, f)| {
            format!(
                "{} has {f} bytes free of {} (largest buffer {})",
                d.name, d.memory_bytes, d.max_buffer_bytes
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Error::WeightDoesNotFit {
        tensor: t.name.clone(),
        bytes: t.layout.span_bytes(),
        context: context.to_string(),
        target: target.name.clone(),
        free,
    }
}

/// Bytes as MiB with one decimal, for reasons.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

//! Weight placement options, and which device they pin each weight to.
//!
//! Options as data: `--pin REGEX=DEVICE` rules (llama.cpp's `-ot`),
//! `--offload-layers N` (llama.cpp's `-ngl`), `--split-mode layer` and
//! `--fit`. The assign pass asks
//! [`pinned_device`] (or a [`Pins`] built once) about every weight; a weight
//! they do not pin is the policy's to place.
//!
//! Precedence, for one weight:
//! 1. the first pin rule whose regex matches the name (regex *search*, as
//!    llama.cpp's `-ot`: anchor with `^…$` for whole names);
//! 2. with `layer_split`: the device of the weight's unit (input layer,
//!    block, output head): by the proportions, else by [`layer_cost`] under
//!    the cost policy or by memory under the ggml policy;
//! 3. with `offload_layers = Some(N)`, N > 0: the weights of the last N blocks,
//!    plus the output head (`output`, `output_norm`, `lm_head`, `model.norm`,
//!    with any `.weight`/`.bias` suffix), go on the first accelerator; every
//!    other weight (earlier blocks, the token embedding and the rest of the
//!    input layer) stays on the CPU, as llama.cpp keeps its input layer there.
//!    A tied output head *is* the token embedding, so it stays on the CPU too.
//!    `Some(0)` pins everything to the CPU, like `-ngl 0`;
//! 4. otherwise no pin.
//!
//! Difference from llama.cpp: its current `-ngl N` counts the output layer as
//! one of the N (`-ngl 1` offloads only the head, `-ngl n_layer + 1` everything);
//! here N counts blocks only and the head always comes with them.
//!
//! `fit` is only recorded here: `assign::weights` acts on it (as many
//! layers as fit under each device's memory).
//!
//! Invariants: a [`PinRule`] from [`PinRule::parse`] names a device of its
//! target; [`PlacementOptions::validate`] refuses `offload_layers` on a target
//! without both a CPU and an accelerator. Unvalidated options never panic: a
//! rule naming a missing device is skipped, and offloading then pins nothing.
//!
//! Layering: this module sits below [`crate::assign`] and imports nothing
//! from it (assign re-exports [`Policy`] and [`compute_reserve_bytes`]).

pub mod layer_cost;
mod llama_split;
mod moe_pins;
pub use moe_pins::{expert_rank, moe_pins};
pub mod units;

use crate::Error;
use crate::cost::fmt_us;
use crate::target::{DeviceId, Target};
use ir::{Graph, Role};
use layer_cost::UnitCosts;
use regex::Regex;
use units::Units;

/// Which placement algorithm to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// Reproduce ggml_backend_sched's greedy passes.
    Ggml,
    /// Minimise estimated time (compute + copies), exact for two devices.
    Cost,
}

/// The bytes kept free on every device for compute: the largest result
/// plus non-weight operands of any one non-view node (see the `assign::weights` module doc).
pub fn compute_reserve_bytes(graph: &Graph) -> u64 {
    graph
        .nodes()
        .filter(|&n| !graph.tensor(n).op.is_some_and(|op| op.is_view()))
        .map(|n| {
            let t = graph.tensor(n);
            let operands: u64 = t
                .srcs
                .iter()
                .filter(|&&s| graph.tensor(graph.storage_of(s).root).role != Role::Weight)
                .map(|&s| graph.tensor(s).layout.span_bytes())
                .sum();
            t.layout.span_bytes() + operands
        })
        .max()
        .unwrap_or(0)
}

/// One `--pin REGEX=DEVICE` rule.
#[derive(Clone, Debug)]
pub struct PinRule {
    /// Matched anywhere in a weight's name.
    pub pattern: Regex,
    /// The device name (validated against a target by [`PinRule::parse`]).
    pub device: String,
}

impl PinRule {
    /// Parses `REGEX=DEVICE`, split at the last `=` (device names have none,
    /// so a pattern may contain `=`), and checks the device exists in `target`.
    pub fn parse(rule: &str, target: &Target) -> Result<PinRule, Error> {
        let problem = |problem: String| Error::Pin {
            rule: rule.to_string(),
            problem,
        };
        let Some((pattern, device)) = rule.rsplit_once('=') else {
            return Err(problem(
                "expected REGEX=DEVICE, but there is no '='".to_string(),
            ));
        };
        if pattern.is_empty() {
            return Err(problem(
                "the regex before '=' is empty (it would match every weight)".to_string(),
            ));
        }
        let pattern = Regex::new(pattern).map_err(|e| problem(format!("bad regex: {e}")))?;
        if target.device(device).is_none() {
            let known: Vec<&str> = target.devices.iter().map(|d| d.name.as_str()).collect();
            return Err(problem(format!(
                "target '{}' has no device '{device}' (it has: {})",
                target.name,
                known.join(", ")
            )));
        }
        Ok(PinRule {
            pattern,
            device: device.to_string(),
        })
    }
}

impl std::fmt::Display for PinRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.pattern.as_str(), self.device)
    }
}

/// How the user wants weights placed.
#[derive(Clone, Debug, Default)]
pub struct PlacementOptions {
    /// `--pin` rules, in command-line order; the first match wins.
    pub pins: Vec<PinRule>,
    /// `--offload-layers N`: the last N blocks (and the output head) on the
    /// first accelerator, the rest on the CPU.
    pub offload_layers: Option<u32>,
    /// `--fit`: place as many layers as fit each device's memory (acted on
    /// by `assign::weights`).
    pub fit: bool,
    /// `--split-mode layer [--tensor-split P0,P1,...]`: whole blocks (and the
    /// input layer and output head as units of their own) spread over the
    /// target's devices in priority order, each device's share of the matmul
    /// work in proportion to `P` (llama.cpp's `-sm layer -ts`). When `P` is
    /// empty: the split with the least estimated time under the cost policy
    /// ([`layer_cost`]), in proportion to device memory under the ggml policy
    /// (llama.cpp's rule).
    pub layer_split: Option<Vec<f64>>,
    /// The batch is cut into micro-batches (`--pipeline N`; the compile
    /// pipeline sets it). The cost policy's layer split prices one pass run
    /// device after device, which a pipelined plan is not, so such a plan
    /// keeps the split by memory.
    pub pipelined: bool,
    /// `--op-offload`: `--policy ggml` models ggml's `op_offload` (llama.cpp's
    /// default; without the flag it plans as `--no-op-offload`), and the
    /// cost policy measures itself against that assignment.
    pub op_offload: bool,
}

impl PlacementOptions {
    /// Checks the options against `target`: every pin names one of its
    /// devices, and `offload_layers` has a CPU and an accelerator to split between.
    pub fn validate(&self, target: &Target) -> Result<(), Error> {
        for pin in &self.pins {
            PinRule::parse(&pin.to_string(), target)?;
        }
        if let Some(proportions) = &self.layer_split {
            let problem = |problem: String| Error::Pin {
                rule: "--split-mode layer".to_string(),
                problem,
            };
            if self.offload_layers.is_some() {
                return Err(problem(
                    "--offload-layers and --split-mode layer both place blocks; give one".into(),
                ));
            }
            if proportions.len() > target.devices.len() {
                return Err(problem(format!(
                    "--tensor-split has {} proportions but target '{}' has {} devices",
                    proportions.len(),
                    target.name,
                    target.devices.len()
                )));
            }
            let valid = proportions.iter().all(|p| p.is_finite() && *p >= 0.0);
            if !valid || (!proportions.is_empty() && proportions.iter().sum::<f64>() <= 0.0) {
                return Err(problem(format!(
                    "--tensor-split {proportions:?}: proportions must be finite, >= 0, \
                     and not all 0"
                )));
            }
        }
        if let Some(layers) = self.offload_layers {
            let lacks = |what| Error::OffloadLayers {
                layers,
                problem: format!(
                    "target '{}' has no {what} to split weights with",
                    target.name
                ),
            };
            target.cpu().ok_or_else(|| lacks("CPU"))?;
            target
                .first_accelerator()
                .ok_or_else(|| lacks("accelerator"))?;
        }
        Ok(())
    }
}

/// The block index in a tensor name, for every naming style we meet:
/// `blk.N.` (GGUF), `lN.` at the start (ggplan's examples),
/// `encoder.layer.N.` (Hugging Face BERT) and `layers.N.` (Hugging Face
/// llama, Meta). The first three may follow a prefix (`model.layers.3.…`,
/// `bert.encoder.layer.0.…`); the block number must be followed by more name.
/// Also llama.cpp's KV cache, `cache_k_lN` and `cache_v_lN` (whole name), as
/// an imported capture names it.
pub fn layer_of(name: &str) -> Option<u32> {
    let seg: Vec<&str> = name.split('.').collect();
    let number = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if let Some(n) = ["cache_k_l", "cache_v_l"]
        .iter()
        .find_map(|p| name.strip_prefix(p).and_then(number))
    {
        return Some(n);
    }
    if seg.len() >= 2
        && let Some(n) = seg[0].strip_prefix('l').and_then(number)
    {
        return Some(n);
    }
    for i in 0..seg.len() {
        let at = match (seg[i], seg.get(i + 1)) {
            ("blk" | "layers", _) => i + 1,
            ("encoder", Some(&"layer")) => i + 2,
            _ => continue,
        };
        if at + 1 < seg.len()
            && let Some(n) = number(seg[at])
        {
            return Some(n);
        }
    }
    None
}

/// Number of blocks: one more than the largest block index among the graph's
/// weights (0 when no weight is in a block).
pub fn n_layers(graph: &Graph) -> u32 {
    graph
        .with_role(Role::Weight)
        .filter_map(|id| layer_of(&graph.tensor(id).name))
        .max()
        .map_or(0, |l| l.saturating_add(1))
}

/// True for the output head's weights: `output`, `output_norm`, `lm_head`,
/// `model.norm`, alone or followed by `.suffix`.
pub(crate) fn is_output_head(name: &str) -> bool {
    ["output", "output_norm", "lm_head", "model.norm"]
        .iter()
        .any(|h| {
            name.strip_prefix(h)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
}

/// The options resolved against one target and graph, to ask about many weights.
pub struct Pins<'a> {
    options: &'a PlacementOptions,
    target: &'a Target,
    policy: Policy,
    units: Units,
    /// Where each layer-split unit's middle sits in the model's work, in
    /// `[0, 1)` (see [`unit_positions`]).
    unit_positions: Vec<f64>,
    /// The cost policy's layer split, when it decides one (see [`layer_cost`]).
    cost_split: Option<CostSplit>,
}

/// The device of each unit chosen by [`layer_cost`], and why, in one sentence.
struct CostSplit {
    devices: Vec<usize>,
    why: String,
}

/// Multiply-adds per token of each unit ([`Units::unit`]): the elements of every
/// weight that is the matrix of a `mul_mat` (each element is one multiply-add
/// per token). Attention over the context and elementwise work are left out:
/// per token they are small beside the matrices, and they grow the same way
/// in every block.
fn unit_costs(graph: &Graph, units: &Units) -> Vec<f64> {
    let mut costs = vec![0.0; units.count()];
    let mut counted = std::collections::HashSet::new();
    for id in graph.nodes() {
        let t = graph.tensor(id);
        if !matches!(t.op, Some(ir::Op::MulMat)) {
            continue;
        }
        let root = graph.storage_of(t.srcs[0]).root;
        let w = graph.tensor(root);
        if w.role == Role::Weight && counted.insert(root) {
            costs[units.unit(&w.name)] += w.layout.n_elements() as f64;
        }
    }
    costs
}

/// Where each unit sits in the model's work, in `[0, 1)`: the share of all
/// matmul work before it plus half its own (its middle). Without matmuls,
/// units count equally.
fn unit_positions(costs: &[f64]) -> Vec<f64> {
    let total: f64 = costs.iter().sum();
    let mut before = 0.0;
    costs
        .iter()
        .enumerate()
        .map(|(unit, &cost)| {
            let at = if total > 0.0 {
                (before + cost / 2.0) / total
            } else {
                (unit as f64 + 0.5) / costs.len() as f64
            };
            before += cost;
            at
        })
        .collect()
}

impl<'a> Pins<'a> {
    /// Resolves `options` for `target` and `graph` under `policy` (counts the
    /// graph's blocks and their work once; prices the layer split when the
    /// cost policy chooses it).
    pub fn new(
        options: &'a PlacementOptions,
        target: &'a Target,
        graph: &Graph,
        policy: Policy,
    ) -> Pins<'a> {
        let units = Units::of(graph);
        let mut pins = Pins {
            options,
            target,
            policy,
            unit_positions: unit_positions(&unit_costs(graph, &units)),
            units,
            cost_split: None,
        };
        let by_cost = options.layer_split.as_ref().is_some_and(|p| p.is_empty());
        if by_cost && policy == Policy::Cost && !options.pipelined && target.devices.len() > 1 {
            pins.cost_split = pins.split_by_cost(graph);
        }
        pins
    }

    /// The layer split with the least estimated time, with the estimate of
    /// llama.cpp's split by memory beside it in the reason; `None` when no
    /// contiguous split fits (the memory split then stands, and reports what
    /// does not fit).
    fn split_by_cost(&self, graph: &Graph) -> Option<CostSplit> {
        let costs = UnitCosts::of(graph, self.target, &self.units);
        let devices = layer_cost::best_split(graph, self.target, &costs)?;
        let shares = self.memory_shares();
        let cpu = self.target.cpu().map(|d| d.index());
        let by_memory: Option<Vec<usize>> = (0..self.units.count())
            .map(|u| llama_split::unit_device(&self.units, u, &shares, cpu).map(|(d, _)| d))
            .collect();
        let estimate = fmt_us(costs.time_us(self.target, &devices));
        let against = by_memory.map_or(String::new(), |m| {
            let us = fmt_us(costs.time_us(self.target, &m));
            format!(" against {us} for llama.cpp's split by device memory")
        });
        let why = format!(
            "the cost model's layer split ({}) is estimated at {estimate} per run{against} \
             (--split-mode layer, --policy cost)",
            layer_cost::describe(self.target, &devices)
        );
        Some(CostSplit { devices, why })
    }

    /// Every device's memory, as layer-split proportions.
    fn memory_shares(&self) -> Vec<f64> {
        let memory = self.target.devices.iter().map(|d| d.memory_bytes as f64);
        memory.collect()
    }

    /// Where the options put the weight `name`, and why; `None` when they
    /// leave it to the policy. See the module doc for the precedence.
    pub fn device_for(&self, name: &str) -> Option<(DeviceId, String)> {
        for (i, pin) in self.options.pins.iter().enumerate() {
            if pin.pattern.is_match(name)
                && let Some(id) = self.target.device_id(&pin.device)
            {
                return Some((
                    id,
                    format!("pinned to {} by --pin rule {} '{pin}'", pin.device, i + 1),
                ));
            }
        }
        if let Some(proportions) = &self.options.layer_split {
            return self.layer_split_device(name, proportions);
        }
        let n = self.options.offload_layers?;
        let cpu = self.target.cpu()?;
        let gpu = self.target.first_accelerator()?;
        let total = self.units.n_layers;
        let first = total.saturating_sub(n);
        let layer = layer_of(name);
        let is_head = self.units.is_head(name);
        let gpu_side = n > 0 && layer.map_or(is_head, |l| l >= first);
        let id = if gpu_side { gpu } else { cpu };
        let dev = &self.target.devices[id.index()].name;
        let why = match layer {
            Some(l) if gpu_side => {
                format!("block {l} is among the last {n} of {total} blocks: offloaded to {dev}")
            }
            Some(l) => {
                format!("block {l} is not among the last {n} of {total} blocks: stays on {dev}")
            }
            None if is_head => {
                format!("the output head goes where the last blocks go: {dev}")
            }
            None => format!(
                "in no block and not the output head, so part of the input layer (token embedding and the like), which stays on {dev} as llama.cpp keeps it"
            ),
        };
        Some((id, format!("{why} (--offload-layers {n})")))
    }
}

impl Pins<'_> {
    /// `--split-mode layer`: the model is cut into units (the input layer,
    /// each block, the output head), each placed whole. Under `--policy ggml`
    /// by llama.cpp's rule ([`llama_split`]: input layer on the CPU, blocks
    /// counted, the head as one more). Otherwise a unit goes to the first
    /// device whose cumulative share of the proportions reaches the unit's
    /// middle, measured in matmul work (see [`unit_costs`]): proportions are
    /// shares of the work per token, so a large output head weighs what it
    /// costs.
    fn layer_split_device(&self, name: &str, proportions: &[f64]) -> Option<(DeviceId, String)> {
        let unit = self.units.unit(name);
        let what = self.units.describe(name);
        if let Some(split) = &self.cost_split {
            let device = split.devices[unit];
            let dev = &self.target.devices[device].name;
            let why = format!("{what} goes to {dev}: {}", split.why);
            return Some((DeviceId(device as u32), why));
        }
        let shares: Vec<f64> = if proportions.is_empty() {
            self.memory_shares()
        } else {
            let padded = proportions.iter().copied().chain(std::iter::repeat(0.0));
            padded.take(self.target.devices.len()).collect()
        };
        let by = if proportions.is_empty() {
            "device memory".to_string()
        } else {
            format!("--tensor-split {proportions:?}")
        };
        let (device, at) = if self.policy == Policy::Ggml {
            let cpu = self.target.cpu().map(|d| d.index());
            let (device, at) = llama_split::unit_device(&self.units, unit, &shares, cpu)?;
            let at = match at {
                Some((position, layers)) => format!("at layer {position} of {layers}"),
                None => "kept on the CPU".to_string(),
            };
            (device, format!("{at}, llama.cpp's rule"))
        } else {
            let at = self.unit_positions[unit];
            let device = share_device(&shares, at)?;
            (
                device,
                format!("its middle at {:.0}% of the matmul work", at * 100.0),
            )
        };
        let dev = &self.target.devices[device].name;
        Some((
            DeviceId(device as u32),
            format!("{what} ({at}) goes to {dev} by {by} (--split-mode layer)"),
        ))
    }
}

/// The device whose cumulative share of `shares` first reaches `at` (a
/// position in `[0, 1)` of the model's work), skipping devices with no share;
/// `None` when every share is 0.
fn share_device(shares: &[f64], at: f64) -> Option<usize> {
    let total: f64 = shares.iter().sum();
    let mut cumulative = 0.0;
    for (k, s) in shares.iter().enumerate() {
        cumulative += s / total;
        if *s > 0.0 && at <= cumulative {
            return Some(k);
        }
    }
    shares.iter().rposition(|&s| s > 0.0)
}

/// Where `options` put the weight `weight_name` of `graph` on `target` under
/// `policy`, and why (`None`: not pinned). Counts the graph's blocks on every
/// call; to ask about many weights, build [`Pins`] once.
pub fn pinned_device(
    options: &PlacementOptions,
    target: &Target,
    graph: &Graph,
    policy: Policy,
    weight_name: &str,
) -> Option<(DeviceId, String)> {
    Pins::new(options, target, graph, policy).device_for(weight_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, Layout, Tensor};

    fn target(name: &str) -> Target {
        Target::preset(name).expect("a preset")
    }

    fn pin_error(rule: &str) -> String {
        let e = PinRule::parse(rule, &target("cpu+cuda0"));
        e.expect_err(rule).to_string()
    }

    /// Weights only, named as in a GGUF llama with `blocks` blocks (not
    /// verified: `n_layers` reads names and roles only).
    fn gguf_graph(blocks: u32) -> Graph {
        let mut names = vec!["token_embd.weight".to_string()];
        for b in 0..blocks {
            names.push(format!("blk.{b}.attn_q.weight"));
            names.push(format!("blk.{b}.ffn_down.weight"));
        }
        names.extend(["output_norm.weight".into(), "output.weight".into()]);
        let layout = Layout::contiguous(DType::F32, [32, 1, 1, 1]).expect("packed");
        let weight = |name| Tensor {
            name,
            layout,
            role: Role::Weight,
            op: None,
            srcs: vec![],
            view: None,
            init: None,
            shard: None,
        };
        Graph::from_tensors("gguf", names.into_iter().map(weight).collect())
    }

    fn offload(n: u32) -> PlacementOptions {
        let offload_layers = Some(n);
        PlacementOptions {
            offload_layers,
            ..Default::default()
        }
    }

    /// The device each name lands on ("-" when not pinned), and its reason.
    fn place(t: &Target, g: &Graph, o: &PlacementOptions, names: &[&str]) -> Vec<String> {
        let pins = Pins::new(o, t, g, Policy::Cost);
        let at = |n: &&str| {
            pins.device_for(n)
                .map(|(id, _)| t.devices[id.index()].name.clone())
        };
        names
            .iter()
            .map(|n| at(n).unwrap_or_else(|| "-".into()))
            .collect()
    }

    fn why(t: &Target, g: &Graph, o: &PlacementOptions, name: &str) -> String {
        pinned_device(o, t, g, Policy::Cost, name)
            .expect("pinned")
            .1
    }

    #[test]
    fn pin_errors_name_the_problem() {
        assert!(pin_error("blk.*cpu").contains("no '='"));
        assert!(pin_error("=cpu").contains("regex before '=' is empty"));
        let bad = pin_error("blk\\.(1[6-9]=cpu");
        assert!(
            bad.contains("bad regex") && bad.contains("unclosed group"),
            "{bad}"
        );
        let dev = pin_error("blk\\.=cuda7");
        assert!(
            dev.contains("no device 'cuda7' (it has: cuda0, cpu)"),
            "{dev}"
        );
        let ok = PinRule::parse("a=b=cpu", &target("cpu")).expect("split at the last '='");
        assert_eq!(ok.to_string(), "a=b=cpu");
        assert_eq!((ok.pattern.as_str(), ok.device.as_str()), ("a=b", "cpu"));
    }

    #[test]
    fn pins_first_then_offload_on_gguf_names() {
        let (t, g) = (target("cpu+cuda0+cuda1"), gguf_graph(4));
        let mut o = offload(2);
        for rule in ["attn_q=cpu", "blk\\.1\\.=cuda1"] {
            o.pins.push(PinRule::parse(rule, &t).expect("valid rule"));
        }
        let names = [
            "blk.3.attn_q.weight",   // rule 1, over --offload-layers
            "blk.1.attn_q.weight",   // rules 1 and 2 match: the first wins
            "blk.1.ffn_down.weight", // rule 2 (rule 1 does not match)
            "blk.0.ffn_down.weight", // not among the last 2 blocks
            "blk.2.ffn_down.weight", // among them: the first accelerator
            "output_norm.weight",
            "output.weight",
            "token_embd.weight",
        ];
        let want = [
            "cpu", "cpu", "cuda1", "cpu", "cuda0", "cuda0", "cuda0", "cpu",
        ];
        assert_eq!(place(&t, &g, &o, &names), want);
        let w = why(&t, &g, &o, "blk.3.attn_q.weight");
        assert_eq!(w, "pinned to cpu by --pin rule 1 'attn_q=cpu'");
        let w = why(&t, &g, &o, "blk.0.ffn_down.weight");
        assert!(
            w.starts_with("block 0 is not among the last 2 of 4 blocks: stays on cpu"),
            "{w}"
        );
        assert!(why(&t, &g, &o, "output.weight").ends_with("(--offload-layers 2)"));
        let none = PlacementOptions::default();
        assert_eq!(
            pinned_device(&none, &t, &g, Policy::Cost, "output.weight"),
            None
        );
    }

    #[test]
    fn offload_layers_on_the_llama2l_example() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/graphs/llama2l.ron"
        );
        let g = ir::text::read_graph(std::path::Path::new(path)).expect("example graph");
        assert_eq!(n_layers(&g), 2);
        let t = target("cpu+cuda0");
        let names = [
            "tok_embd",
            "l0.wq",
            "l1.wq",
            "l1.ffn_down",
            "output_norm",
            "output",
        ];
        let at = |n| place(&t, &g, &offload(n), &names);
        assert_eq!(at(1), ["cpu", "cpu", "cuda0", "cuda0", "cuda0", "cuda0"]);
        assert_eq!(at(2), ["cpu", "cuda0", "cuda0", "cuda0", "cuda0", "cuda0"]);
        assert_eq!(at(99), at(2));
        assert_eq!(at(0), ["cpu"; 6]);
        let w = why(&t, &g, &offload(1), "tok_embd");
        assert!(
            w.contains("token embedding") && w.contains("llama.cpp"),
            "{w}"
        );
        let w = why(&t, &g, &offload(1), "l1.wq");
        assert_eq!(
            w,
            "block 1 is among the last 1 of 2 blocks: offloaded to cuda0 (--offload-layers 1)"
        );
    }

    #[test]
    fn offload_layers_needs_a_cpu_and_an_accelerator() {
        for (name, missing) in [("cpu", "has no accelerator"), ("cuda0", "has no CPU")] {
            let e = offload(1).validate(&target(name)).expect_err(name);
            assert!(e.to_string().contains(missing), "{e}");
        }
        assert!(offload(1).validate(&target("cpu+cuda0")).is_ok());
        // Pins are checked against the target the options are used with.
        let mut o = PlacementOptions::default();
        o.pins
            .push(PinRule::parse("x=cuda0", &target("cpu+cuda0")).expect("valid"));
        assert!(o.validate(&target("cpu")).is_err(), "cpu has no cuda0");
        assert_eq!(place(&target("cpu"), &gguf_graph(1), &o, &["x"]), ["-"]);
    }

    #[test]
    fn layer_of_every_naming_style() {
        let cases = [
            ("blk.12.attn_q.weight", Some(12)),
            ("l0.wq", Some(0)),
            ("l17.ffn_norm.weight", Some(17)),
            ("encoder.layer.3.attention.self.query.weight", Some(3)),
            ("bert.encoder.layer.5.output.dense.bias", Some(5)),
            ("model.layers.30.self_attn.q_proj.weight", Some(30)),
            ("layers.7.attention.wq.weight", Some(7)),
            ("blk.4", None),
            ("l3", None),
            ("lm_head.weight", None),
            ("layers.x.wq", None),
            ("embeddings.LayerNorm.weight", None),
            ("blk.99999999999.x", None),
            ("cache_k_l0", Some(0)),
            ("cache_v_l29", Some(29)),
            ("cache_k_l", None),
            ("cache_k_l3 (view)", None),
        ];
        for (name, want) in cases {
            assert_eq!(layer_of(name), want, "{name}");
        }
        assert!(is_output_head("output") && is_output_head("output_norm.weight"));
        assert!(is_output_head("model.norm.weight") && !is_output_head("outputs.weight"));
    }

    /// A llama-shaped graph whose output head (64 x 1000) outweighs its two
    /// 64 x 64 blocks, with the token embedding read by `get_rows` only.
    fn heavy_head_graph() -> Graph {
        let mut b = ir::GraphBuilder::new("heavy_head");
        let tokens = b.input("tokens", DType::I32, [4, 1, 1, 1]).expect("in");
        let embd = b.weight("token_embd.weight", DType::F32, [64, 1000, 1, 1]);
        let mut h = b.get_rows("x", embd.expect("w"), tokens).expect("rows");
        for l in 0..2 {
            let w = b.weight(format!("blk.{l}.ffn.weight"), DType::F32, [64, 64, 1, 1]);
            h = b.mul_mat(format!("h{l}"), w.expect("w"), h).expect("mm");
        }
        let head = b
            .weight("output.weight", DType::F32, [64, 1000, 1, 1])
            .expect("w");
        let logits = b.mul_mat("logits", head, h).expect("mm");
        b.mark_output(logits).expect("out");
        b.finish().expect("valid")
    }

    #[test]
    fn a_layer_split_weighs_units_by_their_matmul_work() {
        let t = target("cpu0+cpu1");
        let g = heavy_head_graph();
        let split = |p: Vec<f64>| PlacementOptions {
            layer_split: Some(p),
            ..Default::default()
        };
        let names = [
            "token_embd.weight",
            "blk.0.ffn.weight",
            "blk.1.ffn.weight",
            "output.weight",
        ];
        // The head is 88% of the work: alone on cpu1, every block on cpu0
        // (counting blocks would put block 1 and the head together on cpu1).
        let one_one = split(vec![1.0, 1.0]);
        assert_eq!(
            place(&t, &g, &one_one, &names),
            ["cpu0", "cpu0", "cpu0", "cpu1"]
        );
        assert_eq!(place(&t, &g, &split(vec![10.0, 1.0]), &names), ["cpu0"; 4]);
        assert_eq!(place(&t, &g, &split(vec![0.0, 1.0]), &names), ["cpu1"; 4]);
        let head = why(&t, &g, &one_one, "output.weight");
        assert!(
            head.contains("the output head") && head.contains("56%"),
            "{head}"
        );
        // Without matmuls every unit counts the same: 4 units, 2 per device.
        let names = [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "blk.1.attn_q.weight",
            "output.weight",
        ];
        let g = gguf_graph(2);
        assert_eq!(
            place(&t, &g, &one_one, &names),
            ["cpu0", "cpu0", "cpu1", "cpu1"]
        );
    }

    #[test]
    fn without_proportions_the_cost_policy_prices_the_layer_split() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/graphs/llama2l.ron"
        );
        let g = ir::text::read_graph(std::path::Path::new(path)).expect("example graph");
        let t = target("cpu+rpc0");
        let o = PlacementOptions {
            layer_split: Some(vec![]),
            ..Default::default()
        };
        let names = ["tok_embd", "l0.wq", "l1.wq", "output"];
        // llama.cpp's rule, by memory (the preset's server and CPU hold the
        // same): the input layer on the CPU; blocks at 0/3 and 1/3 of three
        // layers (the head counts as one) on rpc0, the head at 2/3 on cpu.
        let ggml = Pins::new(&o, &t, &g, Policy::Ggml);
        let at = |p: &Pins, n: &str| t.devices[p.device_for(n).expect(n).0.index()].name.clone();
        let by_memory: Vec<String> = names.iter().map(|n| at(&ggml, n)).collect();
        assert_eq!(by_memory, ["cpu", "rpc0", "rpc0", "cpu"]);
        let (_, why) = ggml.device_for("l1.wq").expect("placed");
        assert_eq!(
            why,
            "block 1 of 2 (at layer 1 of 3, llama.cpp's rule) goes to rpc0 by device memory \
             (--split-mode layer)"
        );
        // The cost model: the CPU is faster and has room, so it takes it all.
        let cost = Pins::new(&o, &t, &g, Policy::Cost);
        assert!(names.iter().all(|n| at(&cost, n) == "cpu"));
        let (_, why) = cost.device_for("l1.wq").expect("placed");
        assert!(
            why.starts_with("block 1 of 2 goes to cpu: the cost model's layer split (cpu: the input layer, blocks 0-1, the output head) is estimated at ")
                && why.contains(" for llama.cpp's split by device memory (--split-mode layer, --policy cost)"),
            "{why}"
        );
        // Pipelined plans and given proportions keep their rules.
        let pipelined = PlacementOptions {
            pipelined: true,
            ..o.clone()
        };
        let p = Pins::new(&pipelined, &t, &g, Policy::Cost);
        assert_eq!(at(&p, "tok_embd"), "rpc0");
        let given = PlacementOptions {
            layer_split: Some(vec![1.0, 1.0]),
            ..o
        };
        let p = Pins::new(&given, &t, &g, Policy::Cost);
        assert_eq!(at(&p, "tok_embd"), "rpc0");
    }
}

//! llama.cpp's `--cpu-moe` and `--n-cpu-moe N` as pin rules: the expert
//! tensors of a mixture of experts (`ffn_{up,down,gate}_exps`, and the
//! `_chexps` of chunked experts, llama.cpp's names) of every block, or of
//! blocks `0..N`, stay on the host CPU (the target's first CPU device),
//! exactly as llama.cpp's buffer overrides for those flags match them.
//!
//! Refused by name: a target without a CPU device, a graph without expert
//! tensors, and `N` above the graph's block count.

use super::{PinRule, n_layers};
use crate::Error;
use crate::target::Target;
use ir::Graph;
use ir::plan::DeviceKind;
use regex::Regex;

/// llama.cpp's `LLM_FFN_EXPS_REGEX`: the expert tensors of any block.
const EXPERTS: &str = r"\.ffn_(up|down|gate)_(ch|)exps";

/// For an expert tensor of a mixture of experts (a name with a segment
/// `ffn_{up,gate,down}_exps` or `_chexps`, what `EXPERTS` matches): its
/// part, in the order in which `--fit` keeps a block's experts on a device
/// that cannot hold them all (llama.cpp's partial layers): up 0, gate 1,
/// down 2.
pub fn expert_rank(name: &str) -> Option<u8> {
    ["ffn_up_", "ffn_gate_", "ffn_down_"]
        .iter()
        .position(|p| {
            name.split('.').any(|seg| {
                seg.strip_prefix(p)
                    .is_some_and(|r| r == "exps" || r == "chexps")
            })
        })
        .map(|i| i as u8)
}

/// The pin rules `--cpu-moe` (`cpu_moe`) and `--n-cpu-moe N` (`n_cpu_moe`)
/// stand for on `graph` and `target` (none when neither is given).
pub fn moe_pins(
    graph: &Graph,
    target: &Target,
    cpu_moe: bool,
    n_cpu_moe: Option<u32>,
) -> Result<Vec<PinRule>, Error> {
    let flag = match (cpu_moe, n_cpu_moe) {
        (false, None) => return Ok(Vec::new()),
        (true, _) => "--cpu-moe".to_string(),
        (false, Some(n)) => format!("--n-cpu-moe {n}"),
    };
    let problem = |problem: String| Error::Pin {
        rule: flag.clone(),
        problem,
    };
    let cpu = (target.devices.iter())
        .find(|d| {
            matches!(
                d.kind,
                DeviceKind::Cpu | DeviceKind::CpuCores { .. } | DeviceKind::CpuNode { .. }
            )
        })
        .ok_or_else(|| problem(format!("target '{}' has no CPU device", target.name)))?;
    let has_experts =
        (graph.with_role(ir::Role::Weight)).any(|w| expert_rank(&graph.tensor(w).name).is_some());
    if !has_experts {
        return Err(problem(format!(
            "graph '{}' has no expert tensors (names matching {EXPERTS})",
            graph.name
        )));
    }
    let pattern = match n_cpu_moe.filter(|_| !cpu_moe) {
        None => EXPERTS.to_string(),
        Some(n) => {
            let blocks = n_layers(graph);
            if n == 0 || n > blocks {
                return Err(problem(format!(
                    "N must be in 1..={blocks} (graph '{}' has {blocks} blocks)",
                    graph.name
                )));
            }
            let list: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            format!(r"^blk\.({})\.ffn_(up|down|gate)_(ch|)exps", list.join("|"))
        }
    };
    Ok(vec![PinRule {
        pattern: Regex::new(&pattern).expect("a valid regex"),
        device: cpu.name.clone(),
    }])
}

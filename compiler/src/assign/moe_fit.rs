//! `--fit` for a mixture of experts under `--policy cost`: which blocks run
//! off the accelerators, chosen by estimated time instead of by rule.
//!
//! llama.cpp's `--fit` (also `--policy ggml`'s, in [`super::weights`])
//! gives every block's attention and shared weights the accelerators first
//! and sends the experts that do not fit to host memory, so each such block
//! crosses from its accelerator to the host and back on every run (the
//! experts' input there, their sum back). That is right when the accelerator
//! is much faster than the host (a GPU: attention reads all its weights on
//! every token, the experts only the routed few), and costly when the
//! crossings are slow beside the compute they save (RPC servers over a
//! network): a block run whole on the host crosses nothing.
//!
//! Candidates, for `k` in `0..=n_layers`: the first `k` blocks whole (every
//! weight of theirs) on the target's last device, the host CPU, where the
//! input layer runs (llama.cpp's `-ngl` keeps its first blocks there too),
//! and the rest placed by llama.cpp's `--fit` rule in what is left; `k = 0`
//! is llama.cpp's placement. Each candidate whose weights fit is assigned by
//! the cost policy and priced by its objective (compute plus copies); the
//! least estimated time wins, ties to the smaller `k`. The weights' reasons
//! give the choice with its estimate and llama.cpp's beside it.
//!
//! Applies when: `--fit`, a graph with expert tensors, no layer split and no
//! `--offload-layers`, and a target of several devices whose last is a CPU.
//! Otherwise [`fit_by_cost`] returns `None` and the caller places weights as
//! llama.cpp does.
//!
//! Invariants: deterministic (candidates priced in order, the first least
//! time kept); the user's `--pin` rules (and `--cpu-moe`, `--n-cpu-moe`)
//! keep precedence, the candidate's rule coming after them; the result is
//! never estimated slower than llama.cpp's placement, which is a candidate.

use super::cost_policy::assign_by_cost_timed;
use super::{Assignment, place_weights};
use crate::Error;
use crate::cost::fmt_us;
use crate::placement::{PinRule, PlacementOptions, Policy, expert_rank, layer_of, n_layers};
use crate::target::Target;
use ir::{Graph, Role};
use rayon::prelude::*;
use regex::Regex;

/// One candidate: the first `blocks` blocks whole on the host, its
/// assignment and estimated ns.
struct Candidate {
    blocks: u32,
    assignment: Assignment,
    ns: u64,
}

/// The cost policy's `--fit` for a mixture of experts (see the module doc):
/// the assignment of the fastest candidate, or `None` when it does not
/// apply. Fails as llama.cpp's placement fails when that does not fit.
pub(super) fn fit_by_cost(
    graph: &Graph,
    target: &Target,
    placement: &PlacementOptions,
) -> Result<Option<Assignment>, Error> {
    let host = match target.devices.last() {
        Some(d) if d.is_cpu() && target.devices.len() > 1 => d.name.clone(),
        _ => return Ok(None),
    };
    let has_experts =
        (graph.with_role(Role::Weight)).any(|w| expert_rank(&graph.tensor(w).name).is_some());
    if !placement.fit
        || !has_experts
        || placement.layer_split.is_some()
        || placement.offload_layers.is_some()
    {
        return Ok(None);
    }
    let layers = n_layers(graph);
    let price = |blocks: u32| -> Result<Candidate, Error> {
        let options = with_blocks_on(graph, placement, blocks, &host);
        let weights = place_weights(graph, target, &options, Policy::Cost)?;
        let (assignment, ns) = assign_by_cost_timed(graph, target, &weights, placement.op_offload)?;
        Ok(Candidate {
            blocks,
            assignment,
            ns,
        })
    };
    // llama.cpp's placement first: when it fails, so does `--fit`.
    let llama = price(0)?;
    // The others are independent; priced in parallel, compared in order.
    let others: Vec<Candidate> = (1..=layers)
        .into_par_iter()
        .map(price)
        .collect::<Vec<_>>()
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    let best = others
        .iter()
        .fold(&llama, |best, c| if c.ns < best.ns { c } else { best });
    let why = explain(best, &llama, &others, layers, &host);
    let blocks = best.blocks;
    let mut a = if blocks == 0 {
        llama.assignment
    } else {
        others
            .into_iter()
            .find(|c| c.blocks == blocks)
            .expect("the best is a candidate")
            .assignment
    };
    // The candidate's pin rule comes after the user's: its reasons name it.
    let own_rule = format!("--pin rule {} '", placement.pins.len() + 1);
    for w in graph.with_role(Role::Weight) {
        let name = &graph.tensor(w).name;
        let reason = &mut a.reason[w.index()];
        if blocks > 0 && reason.contains(&own_rule) {
            *reason = format!("--fit, --policy cost: {why}");
        } else if expert_rank(name).is_some() {
            reason.push_str(&format!("; --fit, --policy cost: {why}"));
        }
    }
    Ok(Some(a))
}

/// `placement` with one more pin rule after the user's: every weight of
/// blocks `0..blocks` on `host` (none for 0).
fn with_blocks_on(
    graph: &Graph,
    placement: &PlacementOptions,
    blocks: u32,
    host: &str,
) -> PlacementOptions {
    let mut options = placement.clone();
    let names: Vec<String> = graph
        .with_role(Role::Weight)
        .map(|w| &graph.tensor(w).name)
        .filter(|n| layer_of(n).is_some_and(|l| l < blocks))
        .map(|n| regex::escape(n))
        .collect();
    if !names.is_empty() {
        options.pins.push(PinRule {
            pattern: Regex::new(&format!("^(?:{})$", names.join("|"))).expect("escaped names"),
            device: host.to_string(),
        });
    }
    options
}

/// One sentence: what was chosen, its estimate, and llama.cpp's.
fn explain(
    best: &Candidate,
    llama: &Candidate,
    others: &[Candidate],
    layers: u32,
    host: &str,
) -> String {
    let us = |c: &Candidate| fmt_us(c.ns as f64 / 1000.0);
    if best.blocks == 0 {
        let runner_up = others
            .iter()
            .min_by_key(|c| c.ns)
            .map_or(String::new(), |c| {
                let whole = blocks_phrase(c.blocks);
                format!(
                    "; the best with blocks whole on {host}: {} for {whole}",
                    us(c)
                )
            });
        return format!(
            "llama.cpp's placement (every block's attention on the accelerators first, the \
             experts that do not fit on {host}) is the fastest found, estimated {} per run{runner_up}",
            us(llama)
        );
    }
    let which = if best.blocks == layers {
        format!(
            "all {layers} blocks run whole on {host} (attention and experts: no crossing to an accelerator and back for them), the weights outside blocks as llama.cpp's --fit"
        )
    } else {
        format!(
            "{} of {layers} run whole on {host} (attention and experts: no crossing to an \
             accelerator and back for them), the rest as llama.cpp's --fit",
            blocks_phrase(best.blocks)
        )
    };
    format!(
        "{which}; estimated {} per run against {} for llama.cpp's placement (every block's \
         attention on the accelerators first, the experts that do not fit on {host})",
        us(best),
        us(llama)
    )
}

/// "block 0", "the first 3 blocks".
fn blocks_phrase(blocks: u32) -> String {
    match blocks {
        1 => "block 0".to_string(),
        n => format!("the first {n} blocks"),
    }
}

//! One generation step through the reference evaluator: the inputs a cached
//! llama graph takes for a step, and the logits and state it leaves.

use ir::{Graph, Role};
use kernels::evaluate::{Bindings, evaluate};
use kernels::reference::Dense;
use models::llama::{self, step_inputs};
use std::collections::BTreeMap;

/// A column of integers as the evaluator's dense input.
pub fn i32_input(v: impl IntoIterator<Item = i64>) -> Dense {
    let data: Vec<f64> = v.into_iter().map(|x| x as f64).collect();
    Dense::new([data.len() as i64, 1, 1, 1], data)
}

/// `state` plus the inputs of a step feeding `tokens` after `n_past` cached
/// ones, to a graph attending over the first `attend` of `n_ctx` cache rows.
pub fn step_bindings(
    tokens: &[i64],
    n_past: i64,
    (n_ctx, attend): (i64, i64),
    state: BTreeMap<String, Dense>,
) -> BTreeMap<String, Dense> {
    let n = tokens.len() as i64;
    let step = step_inputs(n_past, n, n_ctx, attend).unwrap_or_else(|e| panic!("{e}"));
    let mut inputs = state;
    inputs.insert(llama::TOKENS.into(), i32_input(tokens.iter().copied()));
    inputs.insert(
        llama::POSITIONS.into(),
        i32_input(step.pos.iter().map(|&p| p.into())),
    );
    inputs.insert(
        llama::KV_IDX.into(),
        i32_input(step.kv_idx.iter().map(|&p| p.into())),
    );
    let mask = step.kq_mask.iter().map(|&m| f64::from(m)).collect();
    inputs.insert(llama::KQ_MASK.into(), Dense::new([attend, n, 1, 1], mask));
    inputs
}

/// Evaluates `g` under `bindings`; returns the logits and every state
/// tensor's values after the run, by name.
pub fn logits_and_state(g: &Graph, bindings: &Bindings) -> (Vec<f64>, BTreeMap<String, Dense>) {
    let memory = evaluate(g, bindings).unwrap_or_else(|e| panic!("{e}"));
    let logits = memory.read(g.find(llama::LOGITS).unwrap()).data;
    let state = g
        .with_role(Role::State)
        .map(|id| (g.tensor(id).name.clone(), memory.read(id)))
        .collect();
    (logits, state)
}

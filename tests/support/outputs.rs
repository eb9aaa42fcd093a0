//! What the cross-crate tests compare: every output of one run by name, as
//! values or as bits, and the NMSE between two sets of values.

use runtime::Runtime;
use std::collections::BTreeMap;

/// Normalised mean squared error of `got` against `want` (the plain squared
/// error when `want` is all zeros).
pub fn nmse(want: &[f64], got: &[f64]) -> f64 {
    let num: f64 = want.iter().zip(got).map(|(w, g)| (w - g) * (w - g)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 { num } else { num / den }
}

/// [`nmse`] of f32 values.
pub fn nmse_f32(want: &[f32], got: &[f32]) -> f64 {
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    nmse(&widen(want), &widen(got))
}

/// Every output of one run of `rt`, by name, after setting every input to
/// seeded random values (seed 4).
pub fn outputs(rt: &mut Runtime) -> BTreeMap<String, Vec<f32>> {
    for name in rt.input_names() {
        rt.set_random_input(&name, 4).unwrap();
    }
    rt.run().unwrap();
    let plan = rt.plan().clone();
    plan.tensors[..plan.n_graph_tensors as usize]
        .iter()
        .filter(|t| t.role == ir::Role::Output)
        .map(|t| (t.name.clone(), rt.output_f32(&t.name).unwrap()))
        .collect()
}

/// The outputs' bits, for runs that must agree exactly.
pub fn bits(v: &BTreeMap<String, Vec<f32>>) -> Vec<Vec<u32>> {
    v.values()
        .map(|x| x.iter().map(|f| f.to_bits()).collect())
        .collect()
}

/// Runs every step of `rt` in isolation against the reference kernels and
/// panics naming the first over its DESIGN.md threshold (`what` says which
/// plan); returns how many steps were checked.
pub fn assert_every_step_passes(rt: &mut Runtime, what: &str) -> usize {
    let steps = runtime::check::check_steps(rt, &mut |_| {}).unwrap();
    if let Some(c) = steps.iter().find(|c| !c.passed()) {
        panic!(
            "{what}: step {:?} {} '{}' NMSE {:e} over {:e}",
            c.step, c.kind, c.tensor, c.nmse, c.threshold
        );
    }
    steps.len()
}

//! `--check` for `ggplan run`: the fast runtime against the reference.
//!
//! - outputs: the reference plan evaluator runs the same plan on the same
//!   weights and inputs; each output's NMSE must stay under the loosest
//!   threshold of the ops the plan runs (errors accumulate through them);
//! - all steps: every step is checked in isolation, as ggml's
//!   test-backend-ops does: the reference kernel runs on the very inputs the
//!   fast kernel read, and the step's own threshold applies. A result stored
//!   as F16 or a quantized type is compared after rounding the reference the
//!   same way.

use anyhow::Result;
use clap::ValueEnum;
use ir::Role;
use ir::plan::Plan;
use kernels::reference::{Dense, compute, gather, scatter};
use kernels::testing::{nmse, nmse_threshold};
use runtime::{Flow, Observer, Runtime, StepInfo, Weights};
use std::collections::BTreeMap;

/// What `--check` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckMode {
    /// Every output, against the reference evaluator of the whole plan.
    Outputs,
    /// Every step in isolation, then every output.
    All,
}

fn layout_of(plan: &Plan, t: u32) -> ir::Layout {
    let pt = &plan.tensors[t as usize];
    ir::Layout {
        dtype: pt.dtype,
        ne: pt.ne,
        nb: pt.nb,
    }
}

/// `values` as they read back after being stored with `layout`.
fn rounded(values: &Dense, layout: &ir::Layout) -> Dense {
    let mut bytes = vec![0u8; layout.span_bytes() as usize];
    scatter(values, &mut bytes, layout);
    gather(&bytes, layout)
}

struct StepChecker {
    inputs: Vec<Dense>,
    failures: usize,
    checked: usize,
}

impl Observer for StepChecker {
    fn before(&mut self, rt: &Runtime, step: &StepInfo<'_>) {
        self.inputs = step
            .step
            .srcs
            .iter()
            .map(|&s| {
                rt.tensor_values(s)
                    .unwrap_or_else(|| Dense::zeros([1, 1, 1, 1]))
            })
            .collect();
    }

    fn after(&mut self, rt: &Runtime, step: &StepInfo<'_>) -> Flow {
        let plan = rt.plan();
        let s = step.step;
        let layout = layout_of(plan, s.dst);
        let refs: Vec<&Dense> = self.inputs.iter().collect();
        let (expected, threshold) = match (s.op, s.fused_kernel) {
            (Some(op), _) => (compute(&op, &refs, &layout), nmse_threshold(op.name())),
            (None, Some(k)) => {
                let body = &plan.kernels[k as usize].body;
                let out = kernels::reference::fused::eval_fused(body, &refs, layout.ne);
                (out, nmse_threshold("fused"))
            }
            (None, None) => (self.inputs[0].clone(), 0.0),
        };
        let expected = rounded(&expected, &layout);
        let actual = rt
            .tensor_values(s.dst)
            .unwrap_or_else(|| Dense::zeros(layout.ne));
        let e = nmse(&expected.data, &actual.data);
        let ok = e <= threshold;
        self.checked += 1;
        if !ok {
            self.failures += 1;
        }
        println!(
            "  step {:>4}  {:<12} {:<32} NMSE {:>10.3e}  (max {:.0e})  {}",
            step.index,
            s.kind,
            format!("'{}'", plan.tensors[s.dst as usize].name),
            e,
            threshold,
            if ok { "ok" } else { "FAIL" }
        );
        Flow::Continue
    }
}

/// Runs `rt` observed, checking every step in isolation; true when all pass.
pub fn check_steps(rt: &mut Runtime) -> Result<bool> {
    println!("checking every step against the reference kernels on the same inputs:");
    let mut checker = StepChecker {
        inputs: Vec::new(),
        failures: 0,
        checked: 0,
    };
    rt.run_observed(&mut checker)?;
    println!(
        "steps: {} checked, {} over threshold",
        checker.checked, checker.failures
    );
    Ok(checker.failures == 0)
}

/// Compares every output with the reference plan evaluator; true when all pass.
pub fn check_outputs(
    rt: &Runtime,
    weights: &Weights,
    inputs: BTreeMap<String, Dense>,
) -> Result<bool> {
    let plan = rt.plan();
    let bindings = kernels::evaluate::Bindings {
        weights: match weights {
            Weights::File(f) => kernels::evaluate::Weights::File(f.as_ref()),
            Weights::Random { seed } => kernels::evaluate::Weights::Random { seed: *seed },
        },
        inputs,
        random_inputs: None,
    };
    let memory = kernels::evaluate::evaluate_plan(plan, &bindings)?;
    let threshold = rt
        .steps()
        .iter()
        .map(|s| nmse_threshold(s.kind))
        .fold(nmse_threshold("fused"), f64::max);
    println!("checking outputs against the reference evaluator (max NMSE {threshold:.0e}):");
    let mut ok = true;
    for pt in plan.tensors[..plan.n_graph_tensors as usize].iter() {
        if pt.role != Role::Output {
            continue;
        }
        let (Some(expected), Ok(t)) = (memory.read_name(&pt.name), rt.tensor_id(&pt.name)) else {
            continue;
        };
        let actual = rt.tensor_values(t).unwrap_or_else(|| Dense::zeros(pt.ne));
        let e = nmse(&expected.data, &actual.data);
        let pass = e <= threshold;
        ok &= pass;
        println!(
            "  {:<32} NMSE {e:>10.3e}  {}",
            format!("'{}'", pt.name),
            if pass { "ok" } else { "FAIL" }
        );
    }
    Ok(ok)
}

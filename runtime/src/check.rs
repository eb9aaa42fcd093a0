//! Checking a run against the reference (`ggplan run --check`, and tests).
//!
//! - [`check_steps`]: every step in isolation, as ggml's test-backend-ops
//!   does: the reference kernel runs on the very inputs the fast kernel read,
//!   under the step's own NMSE threshold (a GELU on a remote ggml device:
//!   1e-6, for ggml's f16 table). A result stored as F16 or a
//!   quantized type is compared after rounding the reference the same way.
//!   Steps that promise exact bits are held to them (NMSE 0 or infinite):
//!   copies and `all_gather` move bytes; `all_reduce_sum` is the f32 sum of
//!   its parts in part order, the bits every participant must agree on (a
//!   mirrored value must be identical on every device). A collective's parts
//!   are read where they are held, on the other devices, as its kernel reads
//!   them.
//! - [`check_outputs`]: the reference plan evaluator runs the same plan on the
//!   same weights and inputs; each output must stay under the loosest
//!   threshold of the ops the plan runs (errors accumulate through them).

use crate::{Flow, Observer, Runtime, RuntimeError, StepInfo, Weights};
use ir::plan::{Plan, Step};
use ir::{Op, Role};
use kernels::reference::{Dense, compute, gather, scatter};
use kernels::testing::{nmse, nmse_threshold};

/// ggml's CPU backend (what an RPC server runs) computes GELU from a table
/// indexed by each input rounded to f16 (`GGML_GELU_FP16`): an NMSE near
/// 1e-7 against the exact function, measured 0.9e-7 to 1.1e-7 on Gemma 3's
/// GEGLU. Such steps get soft_max's 1e-6 instead of DESIGN.md's 1e-7.
const GGML_GELU_TABLE_NMSE: f64 = 1e-6;

/// The NMSE a step of `op` on plan device `device` must stay under.
fn step_threshold(plan: &ir::plan::Plan, device: usize, op: &Op) -> f64 {
    let table_gelu = matches!(
        op,
        Op::Gelu
            | Op::Glu {
                kind: ir::GluKind::GeGlu,
                ..
            }
    );
    if table_gelu && plan.devices[device].kind.is_remote() {
        GGML_GELU_TABLE_NMSE
    } else {
        nmse_threshold(op.name())
    }
}
use std::collections::BTreeMap;

/// One comparison.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Step index (for a step), or `None` (for an output).
    pub step: Option<usize>,
    /// Op name, `fused`, `copy`, or `output`.
    pub kind: String,
    /// The tensor compared.
    pub tensor: String,
    /// Its NMSE against the reference.
    pub nmse: f64,
    /// The threshold it must not exceed.
    pub threshold: f64,
    /// The largest absolute difference from the reference (infinite when
    /// either side has a NaN or the lengths differ). NMSE is relative to the
    /// reference's size, so it cannot judge a result that is itself rounding
    /// noise (a difference of two equal values); this can.
    pub max_abs_error: f64,
}

impl Comparison {
    /// Within the threshold (NaN never is).
    pub fn passed(&self) -> bool {
        self.nmse <= self.threshold
    }
}

/// The largest `|a - b|` over the pairs; infinite for a NaN or a length mismatch.
fn max_abs_error(reference: &[f64], actual: &[f64]) -> f64 {
    if reference.len() != actual.len() {
        return f64::INFINITY;
    }
    reference
        .iter()
        .zip(actual)
        .fold(0.0, |worst: f64, (a, b)| {
            let d = (a - b).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                worst.max(d)
            }
        })
}

/// `values` as they read back after being stored with `layout`.
fn rounded(values: &Dense, layout: &ir::Layout) -> Dense {
    let mut bytes = vec![0u8; layout.span_bytes() as usize];
    scatter(values, &mut bytes, layout);
    gather(&bytes, layout)
}

/// The f32 sum of `parts`, added in part order from the first: what an
/// all-reduce's participant computes, to the bit (its parts are f32, so
/// their f64 values are exact).
fn ordered_f32_sum(parts: &[&Dense]) -> Dense {
    let mut sum: Vec<f32> = parts[0].data.iter().map(|&v| v as f32).collect();
    for part in &parts[1..] {
        for (acc, &v) in sum.iter_mut().zip(&part.data) {
            *acc += v as f32;
        }
    }
    Dense {
        ne: parts[0].ne,
        data: sum.into_iter().map(f64::from).collect(),
    }
}

struct StepChecker<'a> {
    inputs: Vec<Dense>,
    out: Vec<Comparison>,
    each: &'a mut dyn FnMut(&Comparison),
}

impl Observer for StepChecker<'_> {
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
        let layout = plan.tensors[s.dst as usize].layout();
        let refs: Vec<&Dense> = self.inputs.iter().collect();
        // `exact`: the step promises these bits, not just these values.
        let glu = (s.kind == "mul_mat_glu")
            .then(|| product_glu_expected(plan, s, &refs, &layout))
            .flatten()
            .or_else(|| {
                // mul_mat x N: its first result (`dst`), from the first
                // weight and the activations; the others through outputs.
                let (Some(&w), Some(&x)) = (refs.first(), refs.last()) else {
                    return None;
                };
                (s.kind == "mul_mat_many").then(|| {
                    let out = compute(&Op::MulMat, &[w, x], &layout);
                    (out, nmse_threshold("mul_mat_many"), false)
                })
            });
        let (mut expected, mut threshold, mut exact) = match (s.op, s.fused_kernel, s.product) {
            // mul_mat + add: the product at its own layout, then the add.
            (_, _, Some(product)) if refs.len() == 3 => {
                let product_layout = plan.tensors[product as usize].layout();
                let product = compute(&Op::MulMat, &refs[..2], &product_layout);
                let sum = compute(&Op::Add, &[&product, refs[2]], &layout);
                (sum, nmse_threshold("mul_mat_add"), false)
            }
            (Some(op @ Op::AllGather { .. }), _, _) => (compute(&op, &refs, &layout), 0.0, true),
            (Some(Op::AllReduceSum { .. }), _, _) => (ordered_f32_sum(&refs), 0.0, true),
            // The same ordered sum, then this participant's slice of it.
            (Some(op @ Op::ReduceScatterSum { .. }), _, _) => {
                let sum = ordered_f32_sum(&refs);
                (compute(&op, &[&sum], &layout), 0.0, true)
            }
            (Some(op), _, _) => (
                compute(&op, &refs, &layout),
                step_threshold(plan, s.device, &op),
                false,
            ),
            (None, Some(k), _) => {
                let body = &plan.kernels[k as usize].body;
                let out = kernels::reference::fused::eval_fused(body, &refs, layout.ne);
                (out, nmse_threshold("fused"), false)
            }
            (None, None, _) if s.kind == "attention" => {
                let step = &plan.splits[s.split].steps;
                let out = (step.iter()).find_map(|st| attention_reference(plan, st, s.dst, &refs));
                (
                    out.expect("an attention step writes it"),
                    nmse_threshold("attention"),
                    false,
                )
            }
            (None, None, _) => (self.inputs[0].clone(), 0.0, true),
        };
        if let Some(glu) = glu {
            (expected, threshold, exact) = glu;
        }
        let expected = rounded(&expected, &layout);
        let actual = rt
            .tensor_values(s.dst)
            .unwrap_or_else(|| Dense::zeros(layout.ne));
        let nmse = if exact {
            // Equal values (infinities of a mask included) or it failed,
            // whatever NMSE would say of them.
            let same = expected.data.len() == actual.data.len()
                && (expected.data.iter().zip(&actual.data))
                    .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            if same { 0.0 } else { f64::INFINITY }
        } else {
            nmse(&expected.data, &actual.data)
        };
        let c = Comparison {
            step: Some(step.index),
            kind: s.kind.to_string(),
            tensor: plan.tensors[s.dst as usize].name.clone(),
            nmse,
            threshold,
            max_abs_error: max_abs_error(&expected.data, &actual.data),
        };
        (self.each)(&c);
        self.out.push(c);
        Flow::Continue
    }
}

/// Runs `rt` observed, comparing every step with the reference in isolation;
/// `each` sees every comparison as it is made.
pub fn check_steps(
    rt: &mut Runtime,
    each: &mut dyn FnMut(&Comparison),
) -> Result<Vec<Comparison>, RuntimeError> {
    let mut checker = StepChecker {
        inputs: Vec::new(),
        out: Vec::new(),
        each,
    };
    rt.run_observed(&mut checker)?;
    Ok(checker.out)
}

/// The threshold for a whole plan's outputs: the loosest of its steps'.
pub fn output_threshold(rt: &Runtime) -> f64 {
    rt.steps()
        .iter()
        .map(|s| nmse_threshold(s.kind))
        .fold(nmse_threshold("fused"), f64::max)
}

/// Compares every output of the last run with the reference plan evaluator
/// on `weights` and `inputs` (every input's values, by name).
pub fn check_outputs(
    rt: &Runtime,
    weights: &Weights,
    inputs: BTreeMap<String, Dense>,
) -> Result<Vec<Comparison>, RuntimeError> {
    let plan = rt.plan();
    let bindings = kernels::evaluate::Bindings {
        weights: match weights {
            Weights::File(f) => kernels::evaluate::Weights::File(f.as_ref()),
            Weights::Random { seed } => kernels::evaluate::Weights::Random { seed: *seed },
        },
        inputs,
        random_inputs: None,
    };
    let memory = kernels::evaluate::evaluate_plan(plan, &bindings)
        .map_err(|e| RuntimeError::Reference(e.to_string()))?;
    let threshold = output_threshold(rt);
    let mut out = Vec::new();
    for pt in plan.tensors[..plan.n_graph_tensors as usize].iter() {
        if pt.role != Role::Output {
            continue;
        }
        let (Some(expected), Ok(t)) = (memory.read_name(&pt.name), rt.tensor_id(&pt.name)) else {
            continue;
        };
        let actual = rt.tensor_values(t).unwrap_or_else(|| Dense::zeros(pt.ne));
        out.push(Comparison {
            step: None,
            kind: "output".to_string(),
            tensor: pt.name.clone(),
            nmse: nmse(&expected.data, &actual.data),
            threshold,
            max_abs_error: max_abs_error(&expected.data, &actual.data),
        });
    }
    Ok(out)
}

/// The reference of `step` when it is the attention step writing `dst`.
fn attention_reference(plan: &Plan, step: &Step, dst: u32, refs: &[&Dense]) -> Option<Dense> {
    let Step::Attention {
        scores,
        probs,
        product,
        dst: written,
        scale,
        max_bias,
        ..
    } = step
    else {
        return None;
    };
    if *written != dst {
        return None;
    }
    let [scores, probs, product, dst] =
        [*scores, *probs, *product, dst].map(|t| plan.tensors[t as usize].layout());
    let layouts = kernels::reference::attention::AttentionLayouts {
        scores: &scores,
        probs: &probs,
        product: &product,
        dst: &dst,
    };
    Some(kernels::reference::attention::attention(
        refs,
        (*scale, *max_bias),
        layouts,
    ))
}

/// What a `mul_mat` + GLU step should write: both products at their own
/// layouts, then the unit (`None` when `s` is no such step of the plan).
fn product_glu_expected(
    plan: &ir::plan::Plan,
    s: &crate::device::PreparedStep,
    refs: &[&Dense],
    layout: &ir::Layout,
) -> Option<(Dense, f64, bool)> {
    let step = (plan.splits.get(s.split)?.steps.iter())
        .find(|st| matches!(st, ir::plan::Step::MulMatGlu { dst, .. } if *dst == s.dst))?;
    let ir::plan::Step::MulMatGlu { kind, products, .. } = step else {
        return None;
    };
    let &[wg, wu, x] = refs else { return None };
    let at = |t: u32| plan.tensors[t as usize].layout();
    let gate = compute(&Op::MulMat, &[wg, x], &at(products[0]));
    let up = compute(&Op::MulMat, &[wu, x], &at(products[1]));
    let glu = Op::Glu {
        kind: *kind,
        swapped: false,
    };
    let out = compute(&glu, &[&gate, &up], layout);
    Some((out, nmse_threshold("mul_mat_glu"), false))
}

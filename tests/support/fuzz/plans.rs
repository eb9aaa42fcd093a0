//! Fuzz bodies for plans: plan text (parse, print back canonically), and
//! structure-aware edits of compiled plans. Every plan that passes the
//! checker is loaded and run on the CPU runtime with random weights, so a
//! plan that the checker lets through but that would make the runtime touch
//! memory outside its arenas shows up (under AddressSanitizer in `fuzz/`).

use super::seeds;
use arbitrary::Unstructured;
use ir::plan::{Placement, Plan, Step};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::{Arc, OnceLock};

/// Harness limits (not ggplan's): a plan larger than this would make one
/// fuzz execution take seconds. Such inputs are skipped, not failed.
const MAX_ARENA_BYTES: u64 = 1 << 20;
/// Elements of any one tensor (zero strides can make a view large without
/// bytes behind it).
const MAX_TENSOR_ELEMENTS: i128 = 1 << 20;
const MAX_STEPS: usize = 2_000;

/// Plan text: parse; an accepted plan prints canonically (printing what was
/// parsed and parsing it again gives the same text) and runs if it checks.
pub fn plan_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(plan) = ir::plan::parse_plan(text, "fuzz.ron") else {
        return;
    };
    let printed = ir::plan::plan_to_ron(&plan);
    let reparsed = ir::plan::parse_plan(&printed, "printed.ron")
        .unwrap_or_else(|e| panic!("a printed plan must parse: {e}\n{printed}"));
    assert_eq!(
        ir::plan::plan_to_ron(&reparsed),
        printed,
        "printing is canonical"
    );
    run_if_checked(plan);
}

/// A compiled plan (chosen by the first byte) with up to eight edits drawn
/// from the rest: offsets, arenas, shapes, strides, dtypes, devices, views,
/// steps, copies, events, splits, fused kernels and op parameters.
pub fn plan_edit(data: &[u8]) {
    plan_edit_outcome(data);
}

/// What became of a plan a body was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PlanOutcome {
    /// The fuzzer's bytes did not make a plan.
    NoPlan,
    /// The checker refused it.
    Refused,
    /// Over the harness's size limits.
    TooLarge,
    /// The runtime refused to load it (a device is absent, ...).
    NotLoaded,
    /// Loaded and run (the run may have returned an error).
    Ran,
}

/// [`plan_edit`], saying what became of the edited plan (the tests check
/// that edits reach the runtime, so the target is not only a checker test).
pub fn plan_edit_outcome(data: &[u8]) -> PlanOutcome {
    match edited_plan(data) {
        Some(plan) => run_if_checked(plan),
        None => PlanOutcome::NoPlan,
    }
}

/// The plan [`plan_edit`] makes from `data` (to print a failing input's plan).
pub fn edited_plan(data: &[u8]) -> Option<Plan> {
    static BASES: OnceLock<Vec<Plan>> = OnceLock::new();
    let bases = BASES.get_or_init(|| seeds::plans().into_iter().map(|(_, p)| p).collect());
    let mut u = Unstructured::new(data);
    let which = u.choose_index(bases.len()).ok()?;
    let mut plan = bases[which].clone();
    let n_edits = 1 + u.choose_index(8).unwrap_or(0);
    for _ in 0..n_edits {
        if edit(&mut plan, &mut u).is_none() {
            break;
        }
    }
    Some(plan)
}

/// Kernel families (and their JIT cache) shared by every run of a process:
/// compiling the same kernels once per input would dominate the run time.
pub(crate) fn shared_options(threads: usize) -> LoadOptions {
    static KERNELS: OnceLock<Arc<runtime::FastKernels>> = OnceLock::new();
    let kernels = KERNELS.get_or_init(|| {
        Arc::new(runtime::FastKernels::new(runtime::Precision::Fast).expect("kernels load"))
    });
    LoadOptions {
        threads,
        kernels: Some(kernels.clone()),
        ..LoadOptions::default()
    }
}

/// Loads and runs `plan` when the checker accepts it and it is small enough
/// for the harness. Errors are fine (a CUDA device is absent, an index is out
/// of range); panics and memory errors are bugs.
fn run_if_checked(plan: Plan) -> PlanOutcome {
    if !ir::plan::check::check_plan(&plan).is_empty() {
        return PlanOutcome::Refused;
    }
    let arena_bytes = plan
        .arenas
        .iter()
        .fold(0u64, |s, a| s.saturating_add(a.size));
    let elements = |ne: &[i64; 4]| ne.iter().map(|&n| i128::from(n.max(0))).product::<i128>();
    let steps: usize = plan.splits.iter().map(|s| s.steps.len()).sum();
    if arena_bytes > MAX_ARENA_BYTES
        || steps > MAX_STEPS
        || plan
            .tensors
            .iter()
            .any(|t| elements(&t.ne) > MAX_TENSOR_ELEMENTS)
    {
        return PlanOutcome::TooLarge;
    }
    let Ok(mut rt) = Runtime::load(
        Arc::new(plan),
        Weights::Random { seed: 1 },
        &shared_options(1),
    ) else {
        return PlanOutcome::NotLoaded;
    };
    for name in rt.input_names() {
        let _ = rt.set_random_input(&name, 2);
    }
    let _ = rt.run();
    PlanOutcome::Ran
}

/// One edit; `None` when the fuzzer's bytes ran out.
fn edit(plan: &mut Plan, u: &mut Unstructured<'_>) -> Option<()> {
    let nt = plan.tensors.len();
    match u.choose_index(16).ok()? {
        0 => {
            let t = u.choose_index(nt).ok()?;
            match &mut plan.tensors[t].placement {
                Placement::Arena { offset, .. } | Placement::View { offset, .. } => {
                    *offset = nudge(*offset, u)?
                }
                Placement::Fused => {}
            }
        }
        1 => {
            let t = u.choose_index(nt).ok()?;
            let to = u32::try_from(u.choose_index(nt + plan.arenas.len()).ok()?).ok()?;
            match &mut plan.tensors[t].placement {
                Placement::Arena { arena, .. } => *arena = to,
                Placement::View { of, .. } => *of = to,
                p @ Placement::Fused => {
                    *p = Placement::Arena {
                        arena: 0,
                        offset: 0,
                    }
                }
            }
        }
        2 => {
            let t = u.choose_index(nt).ok()?;
            let axis = u.choose_index(4).ok()?;
            let ne = &mut plan.tensors[t].ne[axis];
            *ne = nudge(*ne as u64, u)? as i64;
        }
        3 => {
            let t = u.choose_index(nt).ok()?;
            let axis = u.choose_index(4).ok()?;
            let nb = &mut plan.tensors[t].nb[axis];
            *nb = nudge(*nb, u)?;
        }
        4 => {
            let t = u.choose_index(nt).ok()?;
            plan.tensors[t].dtype = *u.choose(&ir::DType::ALL).ok()?;
        }
        5 => {
            let t = u.choose_index(nt).ok()?;
            let d = u.choose_index(plan.devices.len()).ok()?;
            plan.tensors[t].device = ir::plan::DeviceId(d as u32);
        }
        6 => {
            let a = u.choose_index(plan.arenas.len()).ok()?;
            plan.arenas[a].size = nudge(plan.arenas[a].size, u)?;
        }
        7 => {
            let (s, i) = pick_step(plan, u)?;
            let step = plan.splits[s].steps.remove(i);
            // Half the time the step moves instead of disappearing.
            if u.arbitrary::<bool>().ok()? {
                let to = u.choose_index(plan.splits.len()).ok()?;
                let at = u.choose_index(plan.splits[to].steps.len() + 1).ok()?;
                plan.splits[to].steps.insert(at, step);
            }
        }
        8 => {
            let (s, i) = pick_step(plan, u)?;
            let n = u32::try_from(nt).ok()?;
            match &mut plan.splits[s].steps[i] {
                Step::Op { dst, srcs, .. } => {
                    let slot = u.choose_index(srcs.len() + 1).ok()?;
                    let to = u.int_in_range(0..=n).ok()?;
                    match srcs.get_mut(slot) {
                        Some(src) => *src = to,
                        None => *dst = to,
                    }
                }
                Step::Fused { kernel } => *kernel = u.int_in_range(0..=*kernel + 1).ok()?,
                Step::MulMatAdd { product, dst, srcs } => {
                    let to = u.int_in_range(0..=n).ok()?;
                    match u.choose_index(5).ok()? {
                        0 => *product = to,
                        1 => *dst = to,
                        k => srcs[k - 2] = to,
                    }
                }
                Step::Attention {
                    scores,
                    probs,
                    product,
                    permuted,
                    dst,
                    srcs,
                    scale,
                    ..
                } => {
                    let to = u.int_in_range(0..=n).ok()?;
                    // An id of any of its tensors, the mask dropped or
                    // added, or the scale changed.
                    match u.choose_index(7 + srcs.len()).ok()? {
                        0 => *scores = to,
                        1 => *probs = to,
                        2 => *product = to,
                        3 => *permuted = to,
                        4 => *dst = to,
                        5 if srcs.len() == 4 => drop(srcs.pop()),
                        5 => srcs.push(to),
                        6 => *scale = -*scale,
                        k => srcs[k - 7] = to,
                    }
                }
                Step::MulMatMany { dsts, srcs } => {
                    let to = u.int_in_range(0..=n).ok()?;
                    let slot = u.choose_index(dsts.len() + srcs.len() + 1).ok()?;
                    if slot < dsts.len() {
                        dsts[slot] = to;
                    } else if slot < dsts.len() + srcs.len() {
                        srcs[slot - dsts.len()] = to;
                    } else {
                        dsts.push(to);
                    }
                }
                Step::RopeStore { ops, dsts, srcs } => {
                    // An id, an operand count, or an op's kind.
                    let to = u.int_in_range(0..=n).ok()?;
                    let slot = u.choose_index(dsts.len() + srcs.len() + 2).ok()?;
                    if slot < dsts.len() {
                        dsts[slot] = to;
                    } else if slot < dsts.len() + srcs.len() {
                        srcs[slot - dsts.len()] = to;
                    } else if slot == dsts.len() + srcs.len() {
                        let k = u.choose_index(ops.len()).ok()?;
                        ops[k].n_srcs = u.int_in_range(0..=4).ok()?;
                    } else {
                        let k = u.choose_index(ops.len()).ok()?;
                        ops[k].op = match ops[k].op {
                            ir::Op::SetRows => ir::Op::Cpy,
                            _ => ir::Op::SetRows,
                        };
                    }
                }
                Step::MulMatGlu {
                    products,
                    inner,
                    dst,
                    srcs,
                    ..
                } => {
                    let to = u.int_in_range(0..=n).ok()?;
                    match u.choose_index(7).ok()? {
                        k @ 0..=1 => products[k] = to,
                        2 => *dst = to,
                        3 => inner.push(to),
                        k => srcs[k - 4] = to,
                    }
                }
            }
        }
        9 => {
            let (s, i) = pick_step(plan, u)?;
            if let Step::Op { op, .. } = &mut plan.splits[s].steps[i] {
                *op = edit_op(op, u)?;
            }
        }
        10 => {
            let s = u.choose_index(plan.splits.len()).ok()?;
            let split = &mut plan.splits[s];
            if split.copies.is_empty() {
                return Some(());
            }
            let c = u.choose_index(split.copies.len()).ok()?;
            let copy = &mut split.copies[c];
            match u.choose_index(5).ok()? {
                0 => copy.src = u.int_in_range(0..=nt as u32).ok()?,
                1 => copy.dst = u.int_in_range(0..=nt as u32).ok()?,
                2 => copy.bytes = nudge(copy.bytes, u)?,
                3 => copy.wait.clear(),
                _ => {
                    split.copies.remove(c);
                }
            }
        }
        11 => {
            let s = u.choose_index(plan.splits.len()).ok()?;
            let split = &mut plan.splits[s];
            match u.choose_index(4).ok()? {
                0 if !split.waits.is_empty() => {
                    let w = u.choose_index(split.waits.len()).ok()?;
                    split.waits.remove(w);
                }
                1 if !split.records.is_empty() => {
                    let r = u.choose_index(split.records.len()).ok()?;
                    split.records[r].after = nudge(split.records[r].after.into(), u)? as u32;
                }
                2 if !split.waits.is_empty() => {
                    let w = u.choose_index(split.waits.len()).ok()?;
                    split.waits[w].before = nudge(split.waits[w].before.into(), u)? as u32;
                }
                _ => split.stream = u.int_in_range(0..=plan.streams.len() as u32).ok()?,
            }
        }
        12 => {
            let a = u.choose_index(plan.splits.len()).ok()?;
            let b = u.choose_index(plan.splits.len()).ok()?;
            plan.splits.swap(a, b);
        }
        13 => {
            let s = u.choose_index(plan.splits.len()).ok()?;
            let d = u.choose_index(plan.devices.len()).ok()?;
            plan.splits[s].device = ir::plan::DeviceId(d as u32);
        }
        14 => {
            if plan.kernels.is_empty() {
                return Some(());
            }
            let k = u.choose_index(plan.kernels.len()).ok()?;
            let kernel = &mut plan.kernels[k];
            match u.choose_index(3).ok()? {
                0 if !kernel.inputs.is_empty() => {
                    let i = u.choose_index(kernel.inputs.len()).ok()?;
                    kernel.inputs[i] = u.int_in_range(0..=nt as u32).ok()?;
                }
                1 => kernel.output = u.int_in_range(0..=nt as u32).ok()?,
                _ if !kernel.body.is_empty() => {
                    let e = u.choose_index(kernel.body.len()).ok()?;
                    let n = kernel.body.len() as u32;
                    kernel.body[e] = match kernel.body[e] {
                        ir::plan::Expr::Input(_) => {
                            ir::plan::Expr::Input(u.int_in_range(0..=n).ok()?)
                        }
                        ir::plan::Expr::Unary(f, _) => {
                            ir::plan::Expr::Unary(f, u.int_in_range(0..=n).ok()?)
                        }
                        ir::plan::Expr::Binary(f, a, _) => {
                            ir::plan::Expr::Binary(f, a, u.int_in_range(0..=n).ok()?)
                        }
                        other => other,
                    };
                }
                _ => {}
            }
        }
        _ => {
            let d = u.choose_index(plan.devices.len()).ok()?;
            let dev = &mut plan.devices[d];
            if u.arbitrary::<bool>().ok()? {
                dev.alignment = nudge(dev.alignment, u)?;
            } else {
                dev.max_buffer_bytes = nudge(dev.max_buffer_bytes, u)?;
            }
        }
    }
    Some(())
}

/// A (split, step) index pair, when the plan has a step.
fn pick_step(plan: &Plan, u: &mut Unstructured<'_>) -> Option<(usize, usize)> {
    let s = u.choose_index(plan.splits.len()).ok()?;
    let n = plan.splits[s].steps.len();
    (n > 0).then_some(())?;
    Some((s, u.choose_index(n).ok()?))
}

/// A value near `v` (off by one, by an alignment, doubled, halved, zero) or
/// an arbitrary one.
fn nudge(v: u64, u: &mut Unstructured<'_>) -> Option<u64> {
    Some(match u.choose_index(8).ok()? {
        0 => v.wrapping_add(1),
        1 => v.wrapping_sub(1),
        2 => v.wrapping_add(32),
        3 => v.wrapping_sub(32),
        4 => v.wrapping_mul(2),
        5 => v / 2,
        6 => 0,
        _ => u.arbitrary().ok()?,
    })
}

/// The op with one number in its parameters changed (through its RON text,
/// so every op's parameters are reachable without listing them).
fn edit_op(op: &ir::Op, u: &mut Unstructured<'_>) -> Option<ir::Op> {
    let text = ron::to_string(op).ok()?;
    let digits: Vec<usize> = text
        .char_indices()
        .filter(|(_, c)| c.is_ascii_digit())
        .map(|(i, _)| i)
        .collect();
    if digits.is_empty() {
        return Some(*op);
    }
    let at = digits[u.choose_index(digits.len()).ok()?];
    let replacement = *u
        .choose(&["0", "1", "7", "9", "-1", "4096", "99999999999"])
        .ok()?;
    let edited = format!("{}{replacement}{}", &text[..at], &text[at + 1..]);
    Some(ron::from_str(&edited).unwrap_or(*op))
}

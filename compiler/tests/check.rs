//! The plan checker on hand-made plans (`check/plans.rs`): valid ones pass,
//! each broken invariant is reported with its kind, several problems are all
//! reported, and no text (truncated or mutated) makes parse + check panic.

#[path = "check/plans.rs"]
mod plans;

use compiler::Target;
use compiler::check::{PlanViolation, ViolationKind as K, check_plan};
use ir::plan::{Expr, PLAN_FORMAT_VERSION, Placement, Plan, parse_plan, plan_to_ron};
use ir::{DType, Op, Role};
use plans::{
    CPU2, chain_plan, cpu_cuda, devices, fused_plan, minimal_plan, op, resync, two_device_plan,
};

fn listed(v: &[PlanViolation]) -> String {
    v.iter().map(|x| format!("  [{}] {x}\n", x.what)).collect()
}

/// Checks `p`; asserts that a `kind` violation is found and, with `count`,
/// that exactly that many violations are.
fn expect(p: &Plan, target: Option<&Target>, kind: K, count: Option<usize>) -> Vec<PlanViolation> {
    let v = check_plan(p, target);
    assert!(
        v.iter().any(|x| x.what == kind),
        "expected a {kind} violation, got:\n{}",
        listed(&v)
    );
    if let Some(n) = count {
        assert_eq!(v.len(), n, "{}", listed(&v));
    }
    v
}

#[test]
fn valid_hand_made_plans_pass() {
    let cpu = Target::preset("cpu").expect("preset");
    for (name, p) in [
        ("minimal", minimal_plan()),
        ("chain", chain_plan()),
        ("fused", fused_plan()),
    ] {
        let v = check_plan(&p, Some(&cpu));
        assert!(v.is_empty(), "{name}:\n{}", listed(&v));
    }
    for target in [Some(cpu_cuda()), None] {
        let v = check_plan(&two_device_plan(), target.as_ref());
        assert!(v.is_empty(), "two devices:\n{}", listed(&v));
    }
}

#[test]
fn overlapping_bytes_with_overlapping_lifetimes() {
    let mut p = chain_plan();
    // b (alive at steps 1..=2) onto a (alive 0..=2, read by y at step 2).
    p.tensors[4].placement = Placement::Arena {
        arena: 2,
        offset: 0,
    };
    let v = expect(&p, None, K::Lifetime, Some(1));
    assert_eq!(v[0].tensor, Some(4));
    assert!(
        v[0].to_string().starts_with("tensor 'b' (t4): "),
        "{}",
        v[0]
    );
    assert!(v[0].message.contains("'a' (t2)"), "{}", v[0]);
}

#[test]
fn in_place_reuse_is_refused_over_an_output() {
    let mut p = chain_plan();
    p.tensors[2].role = Role::Output; // a must survive the run: y may not take its bytes
    let v = expect(&p, None, K::Lifetime, Some(1));
    assert_eq!(v[0].tensor, Some(5));
}

#[test]
fn a_read_before_its_copy() {
    let mut p = two_device_plan();
    // The copy of y to the cpu moves into split 0, before y is computed.
    let copy = p.splits[2].copies.remove(0);
    p.splits[0].copies.push(copy);
    let v = expect(&p, None, K::Order, None);
    let order: Vec<_> = v.iter().filter(|x| x.what == K::Order).collect();
    assert_eq!(order.len(), 1, "{}", listed(&v));
    assert_eq!(order[0].tensor, Some(3));
    assert!(order[0].message.contains("split 0 copy 0"), "{}", order[0]);
}

#[test]
fn a_copy_may_be_refilled_but_must_be_filled() {
    let mut p = two_device_plan();
    let copy = p.splits[1].copies[0].clone();
    p.splits[1].copies.push(copy); // refilled (as after a write into its original)
    (p.stats.links[0].copies, p.stats.links[0].bytes) = (2, 1024);
    let p = resync(p);
    let v = check_plan(&p, None);
    assert!(v.is_empty(), "{}", listed(&v));

    let mut p = two_device_plan();
    p.splits[1].copies.clear();
    p.stats.links.remove(0);
    let p = resync(p);
    let v = expect(&p, None, K::Order, Some(2));
    assert!(v.iter().all(|x| x.tensor == Some(6)), "{}", listed(&v));
}

#[test]
fn a_step_on_the_wrong_device() {
    let mut p = two_device_plan();
    p.splits[1].device = CPU2; // mul_mat on the cpu, its weight on cuda0
    let v = expect(&p, None, K::Device, None);
    let weight = v.iter().any(|x| x.what == K::Device && x.tensor == Some(1));
    assert!(
        weight,
        "the weight is read on the wrong device:\n{}",
        listed(&v)
    );
}

#[test]
fn placement_and_bounds() {
    let mut p = chain_plan();
    p.tensors[4].placement = Placement::Arena {
        arena: 2,
        offset: 520,
    };
    let v = expect(&p, None, K::Placement, Some(1));
    assert!(v[0].message.contains("alignment 64"), "{}", v[0]);

    let mut p = chain_plan();
    p.arenas[2].size = 600; // b at 512 needs 768
    p.stats.devices[0].compute_bytes = 600;
    let v = expect(&p, None, K::Bounds, Some(1));
    assert_eq!(v[0].tensor, Some(4));

    let mut p = chain_plan();
    p.tensors[4].placement = Placement::Arena {
        arena: 0,
        offset: 0,
    }; // b in the io arena
    expect(&p, None, K::Placement, None);

    // A weight with a gap between its elements: leaves are bound as packed
    // bytes, so strides other than the packed ones are refused (found by the
    // plan_edit fuzz target: the binder wrote past the tensor's span).
    let mut p = chain_plan();
    p.tensors[1].nb = [8, 128, 128, 128];
    let v = expect(&p, None, K::Format, None);
    assert!(
        v.iter().any(|x| x.message.contains("leaf must be packed")),
        "{}",
        listed(&v)
    );

    // A stride too large for the shape rules, on a unit axis where it spans
    // nothing: the step is refused as unchecked instead of passing unchecked.
    let mut p = chain_plan();
    p.tensors[5].nb[3] = 1 << 60;
    let v = expect(&p, None, K::Format, None);
    assert!(
        v.iter().any(|x| x.message.contains("too large to check")),
        "{}",
        listed(&v)
    );

    let mut p = minimal_plan();
    (p.devices[0].memory_bytes, p.devices[0].max_buffer_bytes) = (400, 400); // 2 x 256 bytes
    let v = expect(&p, None, K::Bounds, Some(1));
    assert!(v[0].name.contains("device 'cpu'"), "{}", v[0]);
}

#[test]
fn unknown_format_version_is_refused_by_the_parser_and_reported_by_the_checker() {
    let text = plan_to_ron(&minimal_plan());
    let field = format!("format_version: {PLAN_FORMAT_VERSION},");
    assert!(text.contains(&field), "{text}");
    let err =
        parse_plan(&text.replace(&field, "format_version: 99,"), "bad.ron").expect_err("refused");
    assert!(err.to_string().contains("99"), "{err}");
    let mut p = minimal_plan();
    p.format_version = 99;
    expect(&p, None, K::Format, Some(1));
}

#[test]
fn bad_view_targets() {
    let mut p = chain_plan();
    p.tensors[3].placement = Placement::View { of: 3, offset: 0 }; // av views itself
    let v = expect(&p, None, K::Placement, None);
    assert!(v.iter().any(|x| x.tensor == Some(3)), "{}", listed(&v));

    let mut p = chain_plan();
    p.tensors[3].placement = Placement::View { of: 2, offset: 64 }; // past a's 256 bytes
    expect(&p, None, K::Bounds, Some(1));

    let mut p = chain_plan();
    p.tensors[3].placement = Placement::View { of: 77, offset: 0 };
    expect(&p, None, K::Format, None);

    let mut p = two_device_plan();
    p.tensors[8].placement = Placement::View { of: 6, offset: 0 }; // yv@cpu over h@cuda0
    expect(&p, None, K::Format, None);
}

#[test]
fn an_unsupported_op_on_cuda0() {
    // y = cont(x) of a q4_0 x on cuda0: the preset runs only mul_mat and get_rows on q4_0.
    let mut p = minimal_plan();
    p.devices = devices("cuda0");
    for t in &mut p.tensors {
        (t.dtype, t.ne, t.nb) = (DType::Q4_0, [32, 4, 1, 1], [18, 18, 72, 72]);
    }
    p.splits[0].steps[0] = op(Op::Cont, 1, &[0]);
    let v = check_plan(&p, None);
    assert!(v.is_empty(), "{}", listed(&v));
    let v = expect(&p, Some(&cpu_cuda()), K::Support, Some(1));
    assert!(
        v[0].message.contains("cont") && v[0].message.contains("cuda0"),
        "{}",
        v[0]
    );
}

#[test]
fn stats_that_disagree_with_the_plan() {
    let mut p = two_device_plan();
    p.stats.links[0].bytes = 1;
    expect(&p, None, K::Stats, Some(1));
    let mut p = two_device_plan();
    p.stats.links.pop();
    p.stats.n_splits = 2;
    p.stats.devices[1].compute_bytes = 1024;
    let v = expect(&p, None, K::Stats, Some(3));
    assert!(v.iter().all(|x| x.what == K::Stats), "{}", listed(&v));
}

#[test]
fn malformed_fused_kernels() {
    let mut p = fused_plan();
    p.kernels[0].body.swap(2, 3); // silu before the mul it reads
    expect(&p, None, K::Fused, None);

    let mut p = fused_plan();
    p.kernels[0].body[0] = Expr::Norm { input: 5, eps: 0.0 };
    expect(&p, None, K::Fused, None);

    let mut p = fused_plan();
    p.tensors[2].placement = Placement::Arena {
        arena: 2,
        offset: 0,
    }; // n needs no bytes
    expect(&p, None, K::Placement, None);

    let mut p = fused_plan();
    p.kernels[0].nodes.pop(); // nodes no longer end with the output
    let v = expect(&p, None, K::Fused, None);
    assert!(v.iter().any(|x| x.what == K::Placement), "{}", listed(&v));

    let mut p = fused_plan();
    (p.tensors[1].ne, p.tensors[1].nb) = ([16, 3, 1, 1], [4, 64, 192, 192]); // w no longer broadcasts
    p.arenas[1].size = 192;
    let v = expect(&p, None, K::Fused, None);
    assert!(v.iter().all(|x| x.what == K::Fused), "{}", listed(&v));

    let mut p = fused_plan();
    p.kernels[0].inputs[1] = 2; // reads n, which the kernel itself computes
    expect(&p, None, K::Fused, Some(1));
}

#[test]
fn three_problems_are_all_reported() {
    let mut p = chain_plan();
    p.tensors[4].placement = Placement::Arena {
        arena: 2,
        offset: 520,
    };
    p.stats.n_splits = 2;
    p.tensors[0].copy_of = Some(1);
    let mut found: Vec<K> = check_plan(&p, None).iter().map(|x| x.what).collect();
    found.sort();
    assert_eq!(
        found,
        [K::Format, K::Placement, K::Stats],
        "{}",
        listed(&check_plan(&p, None))
    );
}

/// Every number of `text` replaced, one at a time, by small, boundary and huge values.
fn number_mutations(text: &str, out: &mut Vec<String>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let end = (i..bytes.len())
            .find(|&j| !bytes[j].is_ascii_digit())
            .unwrap_or(bytes.len());
        for value in [
            "0",
            "1",
            "3",
            "5",
            "63",
            "4294967295",
            "18446744073709551615",
        ] {
            out.push(format!("{}{value}{}", &text[..i], &text[end..]));
        }
        i = end;
    }
}

#[test]
fn truncated_and_mutated_text_never_panics() {
    let target = cpu_cuda();
    let mut texts = Vec::new();
    for p in [two_device_plan(), fused_plan(), chain_plan()] {
        let text = plan_to_ron(&p);
        let cuts = (0..text.len())
            .step_by(3)
            .filter(|&n| text.is_char_boundary(n));
        texts.extend(cuts.map(|n| text[..n].to_string()));
        number_mutations(&text, &mut texts);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64; // seeded single-byte mutations
        for _ in 0..400 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let mut t = text.clone().into_bytes();
            t[(seed >> 33) as usize % text.len()] = b"0129-(),:[]xF"[(seed >> 20) as usize % 13];
            texts.push(String::from_utf8_lossy(&t).into_owned());
        }
    }
    let mut parsed = 0;
    for text in &texts {
        if let Ok(p) = parse_plan(text, "fuzz.ron") {
            parsed += 1;
            let _ = check_plan(&p, Some(&target));
            let _ = check_plan(&p, None);
        }
    }
    assert!(
        parsed > 100,
        "only {parsed} of {} texts parsed",
        texts.len()
    );
}

/// The events `two_device_plan` gets from the `sync` pass, spelled out, so the
/// edits below know what they remove.
#[test]
fn two_device_events_order_every_cross_stream_access() {
    let p = two_device_plan();
    // relu (cpu compute) -> copy of h (cuda0 copy) -> mul_mat (cuda0 compute)
    // -> copy of y (cpu copy) -> scale (cpu compute).
    assert_eq!(p.n_events, 4, "{}", plan_to_ron(&p));
    assert_eq!(p.splits[0].records.len(), 1);
    assert_eq!(
        p.splits[1].copies[0].wait,
        vec![p.splits[0].records[0].event]
    );
    assert_eq!(p.splits[1].waits.len(), 1);
    assert_eq!(
        p.splits[2].copies[0].wait,
        vec![p.splits[1].records[0].event]
    );
    assert_eq!(p.splits[2].waits.len(), 1);
}

#[test]
fn a_deleted_wait_is_a_race() {
    // The step reading the copy no longer waits for it.
    let mut p = two_device_plan();
    p.splits[1].waits.clear();
    let v = check_plan(&p, None);
    // The race itself, and those only this wait ordered transitively.
    assert!(
        v.iter().any(|x| x.what == K::Race
            && x.name.contains("split 1 step 0")
            && x.message.contains("split 1 copy 0")),
        "{}",
        listed(&v)
    );
    assert!(v.iter().all(|x| x.what == K::Race), "{}", listed(&v));

    // The copy no longer waits for the step writing its source.
    let mut p = two_device_plan();
    p.splits[1].copies[0].wait.clear();
    let v = check_plan(&p, None);
    assert!(
        v.iter()
            .any(|x| x.what == K::Race && x.message.contains("split 0 step 0")),
        "{}",
        listed(&v)
    );
    // Every wait of the plan is needed: deleting any one is refused.
    let p = two_device_plan();
    let n_waits: usize = p
        .splits
        .iter()
        .map(|s| s.waits.len() + s.copies.iter().map(|c| c.wait.len()).sum::<usize>())
        .sum();
    assert_eq!(n_waits, 4);
    for k in 0..n_waits {
        let mut q = p.clone();
        let mut seen = 0;
        for s in &mut q.splits {
            for c in &mut s.copies {
                c.wait.retain(|_| {
                    seen += 1;
                    seen - 1 != k
                });
            }
            s.waits.retain(|_| {
                seen += 1;
                seen - 1 != k
            });
        }
        let v = check_plan(&q, None);
        assert!(
            v.iter().any(|x| x.what == K::Race),
            "wait {k}: {}",
            listed(&v)
        );
    }
}

#[test]
fn a_write_after_a_read_on_another_stream_needs_an_event() {
    // The cpu copy of y reads y on cuda0; a later cuda0 step that writes over
    // y's bytes must wait for that copy to finish.
    let mut p = two_device_plan();
    let mut again = p.splits[1].clone();
    again.copies.clear();
    again.waits.clear();
    again.records.clear();
    again.steps = vec![op(Op::Relu, 5, &[3])]; // writes yv, over y's bytes
    p.splits.push(again);
    p.stats.n_splits += 1;
    let v = check_plan(&p, None);
    assert!(
        v.iter()
            .any(|x| x.what == K::Race && x.message.contains("a write after its read")),
        "{}",
        listed(&v)
    );
    let v = check_plan(&resync(p), None);
    assert!(v.iter().all(|x| x.what != K::Race), "{}", listed(&v));
}

#[test]
fn malformed_events_and_streams() {
    // An event recorded twice.
    let mut p = two_device_plan();
    let e = p.splits[0].records[0].event;
    p.splits[1].copies[0].record = Some(e);
    expect(&p, None, K::Sync, None);

    // A wait on an event recorded later in global order: a possible deadlock.
    let mut p = two_device_plan();
    let late = p.splits[2].copies[0].record.expect("recorded");
    p.splits[1].copies[0].wait.push(late);
    let v = expect(&p, None, K::Sync, None);
    assert!(
        v.iter().any(|x| x.message.contains("wait forever")),
        "{}",
        listed(&v)
    );

    // A split on a copy stream, a copy on a compute stream.
    let mut p = two_device_plan();
    p.splits[0].stream += 1;
    p.splits[1].copies[0].stream -= 1;
    let v = expect(&p, None, K::Sync, Some(2));
    assert!(v[0].message.contains("compute stream"), "{}", listed(&v));

    // A record past the split's steps, and more events than records.
    let mut p = two_device_plan();
    p.splits[0].records[0].after = 7;
    p.n_events = 1000;
    expect(&p, None, K::Sync, None);
}

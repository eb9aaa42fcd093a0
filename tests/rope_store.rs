//! A block's rotary embeddings and KV-cache stores run as one step
//! (`rope + set_rows`, `Step::RopeStore`) on the CPU runtime: for llama-family
//! graphs (decode and a five-token run over the cache, normal and NeoX rope,
//! Llama 3's frequency factors, Qwen 3's per-head norms before the rope, F16
//! and F32 caches, grouped-query heads), the fused plan computes, bit for bit,
//! what the same plan computes with each fused step written back as its ops,
//! outputs and caches alike, at 1 and 3 threads; every step also passes
//! against the reference. The checker refuses a step whose ops are not rope
//! or `set_rows`, whose ops read what another writes, or whose counts
//! disagree; a version-4 plan is refused with the command that remakes it.

use ggplan_tests::fused_steps::{count_steps, cpu_plan, load_random};
use ggplan_tests::llama_config::tiny_llama;
use ggplan_tests::outputs::{assert_every_step_passes, bits, outputs};
use ir::plan::{Plan, Step};
use ir::{DType, Graph, Role, RopeMode, RopeParams};
use models::llama::{CacheConfig, LlamaConfig, QkNorm};
use runtime::{Precision, Runtime};

/// A two-block random llama graph of `n_tokens` new tokens over a 16-row
/// cache of `kv_dtype`.
fn llama(n_tokens: i64, mode: RopeMode, factors: bool, qk_norm: QkNorm, kv_dtype: DType) -> Graph {
    let cfg = LlamaConfig {
        n_embd: 96,
        n_head: 6,
        n_ff: 64,
        n_vocab: 50,
        rope: RopeParams::plain(mode, 16, 1e4),
        rope_factors: factors,
        qk_norm,
        ..tiny_llama(n_tokens)
    };
    let cache = CacheConfig {
        n_ctx: 16,
        kv_dtype,
    };
    models::llama::build_cached(&cfg, &cache).unwrap()
}

fn rope_stores(plan: &Plan) -> usize {
    count_steps(plan, |s| matches!(s, Step::RopeStore { .. }))
}

/// `plan` with every rope-and-store step written back as its ops, in order.
fn unfused(plan: &Plan) -> Plan {
    let mut plan = plan.clone();
    for split in &mut plan.splits {
        let mut steps = Vec::new();
        for step in &split.steps {
            match step {
                Step::RopeStore { .. } => {
                    steps.extend(step.ops().into_iter().map(|(op, dst, srcs)| Step::Op {
                        op: *op,
                        dst,
                        srcs: srcs.to_vec(),
                    }))
                }
                other => steps.push(other.clone()),
            }
        }
        split.steps = steps;
    }
    assert!(ir::plan::check::check_plan(&plan).is_empty());
    plan
}

fn load(plan: Plan, threads: usize) -> Runtime {
    load_random(plan, Precision::Fast, threads, 29)
}

/// One run's outputs and every cache's bits.
fn run(rt: &mut Runtime) -> Vec<Vec<u32>> {
    let mut got = bits(&outputs(rt));
    let plan = rt.plan().clone();
    for (t, _) in (plan.tensors.iter().enumerate()).filter(|(_, t)| t.role == Role::State) {
        let values = rt.tensor_values(t as u32).expect("a cache");
        got.push(values.data.iter().map(|&v| (v as f32).to_bits()).collect());
    }
    got
}

#[test]
fn a_rope_store_step_computes_its_ops_bits_for_every_llama_family_block() {
    let cases = [
        (1, RopeMode::Normal, false, QkNorm::None, DType::F16),
        (1, RopeMode::Neox, true, QkNorm::None, DType::F32),
        (5, RopeMode::Neox, false, QkNorm::PerHead, DType::F16),
        (5, RopeMode::Normal, true, QkNorm::None, DType::F32),
    ];
    for (n_tokens, mode, factors, qk_norm, kv) in cases {
        let what = format!("{n_tokens} tokens, {mode:?}, factors {factors}, {qk_norm:?}, {kv}");
        let fused = cpu_plan(&llama(n_tokens, mode, factors, qk_norm, kv));
        assert_eq!(rope_stores(&fused), 2, "{what}: one per block");
        // Each block's four ops (V stored, K rotated and stored, Q rotated).
        let ops = (fused.splits.iter().flat_map(|s| &s.steps)).map(|s| s.ops().len());
        assert!(ops.filter(|&n| n == 4).count() >= 2, "{what}");
        let apart = unfused(&fused);
        assert_eq!(rope_stores(&apart), 0);
        for threads in [1, 3] {
            let mut rt = load(fused.clone(), threads);
            for name in rt.input_names() {
                rt.set_random_input(&name, 4).unwrap();
            }
            assert_every_step_passes(&mut rt, &what);
            let got = run(&mut load(fused.clone(), threads));
            let want = run(&mut load(apart.clone(), threads));
            assert_eq!(got, want, "{what}, {threads} threads");
        }
    }
}

/// The first rope-and-store step of a decode plan, and where it is.
fn first_rope_store(plan: &Plan) -> (usize, usize) {
    for (s, split) in plan.splits.iter().enumerate() {
        if let Some(k) = (split.steps.iter()).position(|st| matches!(st, Step::RopeStore { .. })) {
            return (s, k);
        }
    }
    panic!("no rope + set_rows step")
}

#[test]
fn the_checker_refuses_rope_store_steps_that_break_its_rules() {
    let plan = cpu_plan(&llama(1, RopeMode::Normal, false, QkNorm::None, DType::F16));
    assert!(ir::plan::check::check_plan(&plan).is_empty());
    let (s, k) = first_rope_store(&plan);
    let refused = |edit: &dyn Fn(&mut Step), what: &str| {
        let mut p = plan.clone();
        edit(&mut p.splits[s].steps[k]);
        let v = ir::plan::check::check_plan(&p);
        assert!(
            v.iter().any(|v| v.to_string().contains(what)),
            "expected '{what}' in {v:#?}"
        );
    };
    // An op that is neither rope nor set_rows.
    refused(
        &|st| {
            if let Step::RopeStore { ops, .. } = st {
                ops[0].op = ir::Op::Cpy;
            }
        },
        "runs rope (2 or 3 operands) and set_rows (3)",
    );
    // Counts that disagree with the operands.
    refused(
        &|st| {
            if let Step::RopeStore { ops, .. } = st {
                ops[0].n_srcs = 2;
            }
        },
        "their operand counts adding up",
    );
    // One op reading what another writes: the first op's rows made the
    // last rope's result.
    refused(
        &|st| {
            if let Step::RopeStore { dsts, srcs, .. } = st {
                let last = *dsts.last().unwrap();
                srcs[1] = last;
            }
        },
        "which op 3",
    );
    // A result written twice.
    refused(
        &|st| {
            if let Step::RopeStore { dsts, .. } = st {
                dsts[3] = dsts[1];
            }
        },
        "written once",
    );
}

#[test]
fn a_version_4_plan_is_refused_with_the_command_that_remakes_it() {
    let plan = cpu_plan(&llama(1, RopeMode::Normal, false, QkNorm::None, DType::F16));
    let text = ir::plan::plan_to_ron(&plan);
    let back = ir::plan::parse_plan(&text, "p.ron").unwrap();
    assert_eq!(back, plan, "the step round-trips through the text");
    let old = text.replace("format_version: 5", "format_version: 4");
    let e = ir::plan::parse_plan(&old, "p.ron").unwrap_err().to_string();
    assert!(
        e.contains("rotary embeddings") && e.contains("ggplan compile"),
        "{e}"
    );
}

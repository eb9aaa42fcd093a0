//! Tensor parallelism (`--split-mode row`, `--split REGEX=AXIS`): the example
//! graphs with every large matrix split over 2 and 4 CPU core groups compute
//! what one device computes (NMSE <= 1e-10, as the issue asks), on the
//! runtime with the devices' streams concurrent and under injected delays
//! (the same bits every run: every all-reduce participant adds its parts in
//! the same order), and in the reference plan evaluator. Compiling twice
//! gives the same bytes; bad rules are refused with the rule and the tensor
//! named.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use compiler::tensor_split::{Collectives, SplitRule, TensorSplitOptions};
use ggplan_tests::example_graph_files;
use ggplan_tests::outputs::{bits, nmse_f32 as nmse, outputs};
use ir::plan::{Plan, Step};
use runtime::{LoadOptions, Runtime, Weights};
use std::collections::BTreeMap;
use std::sync::Arc;

fn options(split: TensorSplitOptions) -> CompileOptions {
    CompileOptions {
        tensor_split: Some(split),
        ..CompileOptions::default()
    }
}

fn row(shares: &[f64]) -> TensorSplitOptions {
    row_with(shares, Collectives::Auto)
}

fn row_with(shares: &[f64], collectives: Collectives) -> TensorSplitOptions {
    TensorSplitOptions {
        shares: shares.to_vec(),
        rules: vec![],
        collectives,
        experts: Default::default(),
    }
}

/// Op steps of `plan` whose op passes `which`.
fn steps_where(plan: &Plan, which: impl Fn(&ir::Op) -> bool) -> usize {
    plan.splits
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|s| matches!(s, Step::Op { op, .. } if which(op)))
        .count()
}

/// Participants of reduce-scatters.
fn scatters(plan: &Plan) -> usize {
    steps_where(plan, |op| matches!(op, ir::Op::ReduceScatterSum { .. }))
}

fn compile_for(graph: &ir::Graph, target: &str, opts: &CompileOptions) -> Result<Plan, String> {
    let target = Target::preset(target).unwrap();
    compile(graph, &target, opts)
        .map(|c| c.plan)
        .map_err(|e| e.to_string())
}

fn load(plan: Plan, threads: usize, delays: Option<u64>) -> Runtime {
    let options = LoadOptions {
        threads,
        fault_injection: delays,
        ..LoadOptions::default()
    };
    Runtime::load(Arc::new(plan), Weights::Random { seed: 3 }, &options).unwrap()
}

/// Asserts that every output of `got` is `want`'s within NMSE 1e-10 (the
/// issue's bound for a split against one device).
fn assert_outputs_match(
    want: &BTreeMap<String, Vec<f32>>,
    got: &BTreeMap<String, Vec<f32>>,
    what: &str,
) {
    for (name, values) in got {
        let e = nmse(&want[name], values);
        assert!(e <= 1e-10, "{what}: '{name}' NMSE {e:e}");
    }
}

/// The splits each built-graph test runs: 2 devices, 3:1 shares, 4 devices
/// (target, devices, shares).
const SPLITS: [(&str, usize, &[f64]); 3] = [
    ("cpu0+cpu1", 2, &[]),
    ("cpu0+cpu1", 2, &[3.0, 1.0]),
    ("cpu0+cpu1+cpu2+cpu3", 4, &[]),
];

/// Collective participants.
fn collectives(plan: &Plan) -> usize {
    steps_where(plan, |op| op.collective().is_some())
}

/// An example graph by name (`examples/graphs/NAME.ron`).
fn example(name: &str) -> ir::Graph {
    ir::text::read_graph(&examples::graph_path(name)).unwrap()
}

/// The example graphs with transformer blocks (mlp has none to split by role).
fn block_graphs() -> Vec<ir::Graph> {
    example_graph_files()
        .iter()
        .map(|p| ir::text::read_graph(p).unwrap())
        .filter(|g| compiler::placement::n_layers(g) > 0)
        .collect()
}

#[test]
fn row_split_plans_match_one_device_and_survive_injected_delays() {
    let graphs = block_graphs();
    assert!(graphs.len() >= 3, "llama2l, llama2l_kv, bert2l");
    for graph in graphs {
        let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
        let want = outputs(&mut load(single, 1, None));
        for (target, devices, shares, how) in [
            ("cpu0+cpu1", 2, vec![], Collectives::AllReduce),
            ("cpu0+cpu1", 2, vec![3.0, 1.0], Collectives::AllReduce),
            ("cpu0+cpu1+cpu2+cpu3", 4, vec![], Collectives::AllReduce),
            ("cpu0+cpu1", 2, vec![], Collectives::ReduceScatter),
            ("cpu0+cpu1", 2, vec![3.0, 1.0], Collectives::ReduceScatter),
            ("cpu0+cpu1+cpu2+cpu3", 4, vec![], Collectives::ReduceScatter),
        ] {
            let what = format!("{} on {target} shares {shares:?} {how:?}", graph.name);
            let plan = compile_for(&graph, target, &options(row_with(&shares, how))).unwrap();
            assert!(collectives(&plan) > 0, "{what}: no collective");
            // Every graph here has a block with more than one token, so
            // its partial sums can be cut.
            assert_eq!(
                scatters(&plan) > 0,
                how == Collectives::ReduceScatter,
                "{what}: reduce-scatters"
            );
            let used: std::collections::BTreeSet<_> =
                plan.splits.iter().map(|s| s.device).collect();
            assert_eq!(used.len(), devices, "{what}: every device computes");
            let got = outputs(&mut load(plan.clone(), devices, None));
            assert_outputs_match(&want, &got, &what);
            let reference = bits(&got);
            let mut rt = load(plan, devices, Some(11));
            for run in 0..20 {
                assert_eq!(bits(&outputs(&mut rt)), reference, "{what}: run {run}");
            }
            assert!(rt.injected_delays() >= 20 * devices as u64, "{what}");
        }
    }
}

/// Both devices of a row split compute at the same time (each its rows of
/// every cut product); best of 10 traced runs, a sequential executor gives 0.
/// The llama examples only: bert2l's row split is about 1 ms of work in 11
/// splits of ~100 us, where event hand-offs dominate and a busy 2-core host
/// measured 0.01 to 0.21.
#[test]
fn row_split_devices_compute_at_the_same_time() {
    for graph in block_graphs()
        .into_iter()
        .filter(|g| g.name.starts_with("llama"))
    {
        let opts = options(row_with(&[], Collectives::AllReduce));
        let plan = compile_for(&graph, "cpu0+cpu1", &opts).unwrap();
        let mut rt = load(plan, 2, None);
        outputs(&mut rt); // sets the inputs
        let share = ggplan_tests::overlap::best_compute_overlap(&mut rt, 10);
        eprintln!(
            "{} row split on cpu0+cpu1: best overlap {share:.2}",
            graph.name
        );
        assert!(
            share >= ggplan_tests::overlap::MIN_OVERLAP,
            "{}: the devices overlapped for {share:.2}",
            graph.name
        );
    }
}

#[test]
fn row_split_plans_evaluate_like_the_graph_in_the_reference_evaluator() {
    use kernels::evaluate::{Bindings, Weights, evaluate, evaluate_plan};
    for graph in block_graphs() {
        let bindings = Bindings {
            weights: Weights::Random { seed: 5 },
            inputs: BTreeMap::new(),
            random_inputs: Some(1),
        };
        let reference = evaluate(&graph, &bindings).unwrap();
        let plan = compile_for(&graph, "cpu0+cpu1+cpu2+cpu3", &options(row(&[]))).unwrap();
        let run = evaluate_plan(&plan, &bindings).unwrap();
        for out in graph.with_role(ir::Role::Output) {
            let name = &graph.tensor(out).name;
            let (w, g) = (
                &reference.read(out).data,
                &run.read_name(name).unwrap().data,
            );
            let e = ggplan_tests::outputs::nmse(w, g);
            assert!(e <= 1e-10, "{}: '{name}' NMSE {e:e}", graph.name);
        }
    }
}

#[test]
fn compiling_a_split_twice_gives_the_same_bytes() {
    for graph in block_graphs() {
        let opts = options(row(&[3.0, 1.0]));
        let a = compile_for(&graph, "cpu0+cpu1", &opts).unwrap();
        let b = compile_for(&graph, "cpu0+cpu1", &opts).unwrap();
        assert_eq!(
            ir::plan::plan_to_ron(&a),
            ir::plan::plan_to_ron(&b),
            "{}",
            graph.name
        );
    }
}

#[test]
fn shares_set_each_devices_slice_of_every_split_weight() {
    let graph = example("llama2l");
    let plan = compile_for(&graph, "cpu0+cpu1", &options(row(&[3.0, 1.0]))).unwrap();
    let shard = |name: &str| plan.tensors.iter().find(|t| t.name == name).unwrap();
    // FFN rows: 1536 = 3 * 512 on cpu0 and 512 on cpu1 (f32: units of one row).
    assert_eq!(shard("l0.ffn_up.weight#0").ne[1], 1152);
    assert_eq!(shard("l0.ffn_up.weight#1").ne[1], 384);
    // The down matrix is cut along its input alike and makes partial sums.
    assert_eq!(shard("l0.ffn_down#0").ne[0], 1152);
    // Heads (8 of 64): 6 and 2.
    assert_eq!(shard("l0.wq#0").ne[1], 6 * 64);
    assert_eq!(shard("l0.wo#1").ne[0], 2 * 64);
}

#[test]
fn explicit_rules_split_what_they_name() {
    let graph = example("mlp");
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    let weights: Vec<&ir::Tensor> = graph
        .ids()
        .map(|id| graph.tensor(id))
        .filter(|t: &&ir::Tensor| t.role == ir::Role::Weight && ir::Tensor::ne(t)[1] > 1)
        .collect();
    let first = &weights[0].name;
    let rule = SplitRule::parse(&format!("^{}$=1", first.replace('.', "\\."))).unwrap();
    let split = TensorSplitOptions {
        shares: vec![],
        rules: vec![rule],
        collectives: Collectives::Auto,
        experts: Default::default(),
    };
    let plan = compile_for(&graph, "cpu0+cpu1", &options(split)).unwrap();
    assert!(plan.tensors.iter().any(|t| t.name == format!("{first}#1")));
    let got = outputs(&mut load(plan, 2, None));
    assert_outputs_match(&want, &got, "mlp");
}

#[test]
fn bad_splits_are_refused_naming_the_rule_and_tensor() {
    let graph = example("llama2l");
    let refuse = |target: &str, split: TensorSplitOptions| {
        compile_for(&graph, target, &options(split)).unwrap_err()
    };
    let rule = |s: &str| TensorSplitOptions {
        shares: vec![],
        rules: vec![SplitRule::parse(s).unwrap()],
        collectives: Collectives::Auto,
        experts: Default::default(),
    };
    let e = refuse("cpu0+cpu1", rule("no_such_tensor=1"));
    assert!(
        e.contains("--split no_such_tensor=1") && e.contains("matches no weight"),
        "{e}"
    );
    let e = refuse("cpu0+cpu1", rule("l0.attn_norm.weight=1"));
    assert!(
        e.contains("'l0.attn_norm.weight'") && e.contains("fewer than the 2 devices"),
        "{e}"
    );
    let e = refuse("cpu0+cpu1", row(&[1.0, 2.0, 3.0]));
    assert!(
        e.contains("--tensor-split") && e.contains("3 shares for 2 devices"),
        "{e}"
    );
    let e = refuse("cpu+cuda0", row(&[]));
    assert!(e.contains("not a CPU device"), "{e}");
    let e = refuse("cpu", row(&[]));
    assert!(e.contains("one device"), "{e}");
    assert!(SplitRule::parse("x=7").is_err());
}

#[test]
fn smollm2_split_by_rows_continues_the_prompt_as_llama_cpp_does() {
    // Exact precision (f32 products): the split only reorders sums, so the
    // greedy continuation is llama.cpp's, token for token. (With 8-bit
    // activations every reordering moves some activations across a rounding
    // boundary, so split and unsplit runs drift apart like two quantizations
    // of one model; see the issue note.)
    let Some(path) = ggplan_tests::models::smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not installed (scripts/setup.sh installs it)");
        return;
    };
    let want = ggplan_tests::references::smollm2_greedy32();
    let prompt = ggplan_tests::references::SMOLLM2_PROMPT;
    for (target, shares) in [("cpu0+cpu1", vec![]), ("cpu0+cpu1+cpu2+cpu3", vec![])] {
        let mut compile = CompileOptions {
            tensor_split: Some(row(&shares)),
            ..CompileOptions::default()
        };
        compile.spelled = compile.flags(target);
        let options = ggplan::GenerateOptions {
            ctx: 64,
            min_bucket: 64,
            precision: runtime::Precision::Exact,
            target: Some(target.into()),
            compile,
            ..Default::default()
        };
        let mut generator = ggplan::Generator::open(&path, options).unwrap();
        let generation = generator.generate(prompt, want.len(), &mut |_| {}).unwrap();
        assert_eq!(generation.generated_ids, want, "{target}");
    }
}

#[test]
fn minilm_split_by_rows_embeds_as_one_device_does() {
    let Some(dir) = ggplan_tests::models::minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not installed (scripts/setup.sh installs it)");
        return;
    };
    let cfg = models::bert::BertConfig::from_hf_dir(&dir, 12).unwrap();
    let graph = models::bert::build_encoder(&cfg).unwrap();
    let weights = Weights::open(dir.join("model.safetensors")).unwrap();
    let tokens: Vec<i32> = (0..12).map(|j| 101 + (j * 997) % 20000).collect();
    let run = |plan: Plan, threads: usize| {
        let options = LoadOptions {
            threads,
            precision: runtime::Precision::Exact,
            ..LoadOptions::default()
        };
        let mut rt = Runtime::load(Arc::new(plan), weights.clone(), &options).unwrap();
        rt.set_input_i32(models::bert::TOKENS, &tokens).unwrap();
        rt.run().unwrap();
        rt.output_f32(models::bert::EMBEDDING).unwrap()
    };
    let want = run(
        compile_for(&graph, "cpu", &CompileOptions::default()).unwrap(),
        1,
    );
    for (target, n) in [("cpu0+cpu1", 2), ("cpu0+cpu1+cpu2+cpu3", 4)] {
        let plan = compile_for(&graph, target, &options(row(&[]))).unwrap();
        assert!(collectives(&plan) > 0, "{target}");
        let e = nmse(&want, &run(plan, n));
        assert!(e <= 1e-10, "MiniLM on {target}: NMSE {e:e}");
    }
}

#[test]
fn the_split_plan_says_what_is_cut_how_and_where_each_collective_sits() {
    // Review with `cargo insta review`: the shards of every split weight and
    // cache per device, the mirrors, and each all-reduce / all-gather with
    // its participants, besides the usual splits, copies and events.
    for (name, target, shares) in [
        ("llama2l_kv_row_2", "cpu0+cpu1", vec![3.0, 1.0]),
        ("bert2l_row_4", "cpu0+cpu1+cpu2+cpu3", vec![]),
    ] {
        let file = name.split("_row").next().unwrap();
        let graph = example(file);
        let mut opts = options(row(&shares));
        opts.spelled = opts.flags(target);
        let plan = compile_for(&graph, target, &opts).unwrap();
        ggplan::assert_plan_snapshot!(name, plan);
    }
    // A fused QKV matrix's segments: each device's Q, K and V rows (split
    // as the mode says: `auto` keeps a block this small whole).
    let target = "cpu0+cpu1";
    let mut opts = options(row_with(&[], Collectives::AllReduce));
    opts.spelled = opts.flags(target);
    let plan = compile_for(&fused_qkv_block(7, false), target, &opts).unwrap();
    ggplan::assert_plan_snapshot!("fused_qkv_row_2", plan);
}

#[test]
fn the_cost_model_keeps_parts_whole_over_slow_links_and_the_outputs_stay_the_same() {
    // Links of 5 ms per collective: every all-reduce costs more than the
    // work a split saves, so `auto` keeps parts of the model whole (forced
    // collectives split everything the mode names, as before).
    let mut slow = Target::preset("cpu0+cpu1").unwrap();
    for link in &mut slow.links {
        link.latency_us = 5000.0;
    }
    for graph in block_graphs() {
        let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
        let want = outputs(&mut load(single, 1, None));
        let plan = compile(&graph, &slow, &options(row(&[]))).unwrap().plan;
        let kept: Vec<&str> = plan
            .tensors
            .iter()
            .filter(|t| t.reason.starts_with("kept whole by the cost model"))
            .map(|t| t.name.as_str())
            .collect();
        let forced = compile(
            &graph,
            &slow,
            &options(row_with(&[], Collectives::AllReduce)),
        )
        .unwrap()
        .plan;
        assert!(
            !kept.is_empty() && collectives(&plan) < collectives(&forced),
            "{}: kept whole {kept:?}, {} collectives against {} forced",
            graph.name,
            collectives(&plan),
            collectives(&forced)
        );
        // Parts holding a KV cache stay split.
        assert!(
            plan.tensors
                .iter()
                .all(|t| !(t.name.contains("cache") && t.reason.starts_with("kept whole"))),
            "{}",
            graph.name
        );
        let got = outputs(&mut load(plan, 2, None));
        assert_outputs_match(&want, &got, &graph.name);
    }
}

#[test]
fn a_tied_head_is_cut_by_rows_and_its_lookups_add_up_to_the_rows() {
    use ir::DType;
    use ir::op::{RopeMode, RopeParams};
    use models::llama::{LlamaConfig, LlamaNames, build_prefill};
    // Tied embeddings (SmolLM2's layout) with a vocabulary that 2, 3:1 and 4
    // devices cut unevenly, and quantized blocks.
    let config = LlamaConfig {
        n_layer: 2,
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        n_ff: 256,
        n_vocab: 301,
        n_tokens: 9,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 32, 10000.0),
        weight_dtype: DType::Q8_0,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::Q8_0,
        output_dtype: DType::F32,
        tied_output: true,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    };
    let graph = build_prefill(&config).unwrap();
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    for (target, devices, shares) in SPLITS {
        let what = format!("tied llama on {target} shares {shares:?}");
        let plan = compile_for(&graph, target, &options(row(shares))).unwrap();
        let parts = steps_where(&plan, |op| matches!(op, ir::Op::GetRowsPart { .. }));
        assert_eq!(parts, devices, "{what}: one lookup part per device");
        let table = plan
            .tensors
            .iter()
            .find(|t| t.name == "token_embd.weight#1")
            .unwrap();
        assert_eq!(table.shard.as_ref().unwrap().axis, 1, "{what}: rows cut");
        let got = outputs(&mut load(plan, devices, None));
        assert_outputs_match(&want, &got, &what);
    }
}

/// One attention block with a fused QKV matrix and bias (phi-2's layout):
/// 4 query heads over 2 KV heads of width 16, `t` tokens; Q and K read as
/// `[16, heads, t]` views of the fused product, V as a `[32, t]` view;
/// `whole_too`: the biased product is also a graph output (read whole).
fn fused_qkv_block(t: i64, whole_too: bool) -> ir::Graph {
    use ir::op::{RopeMode, RopeParams};
    use ir::{DType, GraphBuilder};
    let mut b = GraphBuilder::new("fused_qkv");
    let x = b.input("x", DType::F32, [64, t, 1, 1]).unwrap();
    let pos = b.input("pos", DType::I32, [t, 1, 1, 1]).unwrap();
    let w = b
        .weight("blk.0.attn_qkv.weight", DType::F32, [64, 128, 1, 1])
        .unwrap();
    let bias = b
        .weight("blk.0.attn_qkv.bias", DType::F32, [128, 1, 1, 1])
        .unwrap();
    let wo = b
        .weight("blk.0.attn_output.weight", DType::F32, [64, 64, 1, 1])
        .unwrap();
    let qkv = b.mul_mat("blk.0.qkv", w, x).unwrap();
    let qkv = b.add("blk.0.qkv_b", qkv, bias).unwrap();
    let row = 128 * 4;
    let (rt, rt4) = (row * t as u64, row * t as u64);
    let q = b
        .view("blk.0.q3", qkv, [16, 4, t, 1], [64, row, rt], 0)
        .unwrap();
    let k = b
        .view("blk.0.k3", qkv, [16, 2, t, 1], [64, row, rt], 64 * 4)
        .unwrap();
    let v = b
        .view("blk.0.v", qkv, [32, t, 1, 1], [row, rt, rt4], 96 * 4)
        .unwrap();
    let rope = RopeParams::plain(RopeMode::Neox, 16, 10000.0);
    let q = b.cont("blk.0.q", q).unwrap();
    let q = b.rope("blk.0.q_rope", q, pos, rope).unwrap();
    let q = b.permute("blk.0.q_perm", q, [0, 2, 1, 3]).unwrap();
    let k = b.cont("blk.0.k", k).unwrap();
    let k = b.rope("blk.0.k_rope", k, pos, rope).unwrap();
    let k = b.permute("blk.0.k_perm", k, [0, 2, 1, 3]).unwrap();
    let v = b.cont("blk.0.v_c", v).unwrap();
    let v = b.reshape("blk.0.v3", v, [16, 2, t, 1]).unwrap();
    let v = b.permute("blk.0.v_perm", v, [1, 2, 0, 3]).unwrap();
    let v = b.cont("blk.0.v_t", v).unwrap();
    let kq = b.mul_mat("blk.0.kq", k, q).unwrap();
    let kq = b
        .soft_max("blk.0.kq_soft_max", kq, None, 0.25, 0.0)
        .unwrap();
    let kqv = b.mul_mat("blk.0.kqv", v, kq).unwrap();
    let kqv = b.permute("blk.0.kqv_perm", kqv, [0, 2, 1, 3]).unwrap();
    let merged = b
        .cont_shaped("blk.0.kqv_merged", kqv, [64, t, 1, 1])
        .unwrap();
    let out = b.mul_mat("blk.0.attn_out", wo, merged).unwrap();
    let y = b.add("y", out, x).unwrap();
    b.mark_output(y).unwrap();
    if whole_too {
        b.mark_output(qkv).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn a_fused_qkv_matrix_is_cut_by_segments_and_computes_what_one_device_does() {
    let graph = fused_qkv_block(7, false);
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    for (target, devices, shares) in SPLITS {
        let what = format!("fused QKV on {target} shares {shares:?}");
        let plan = compile_for(
            &graph,
            target,
            &options(row_with(shares, Collectives::AllReduce)),
        )
        .unwrap();
        // Device 0's rows of each segment: its KV heads' Q, K and V rows.
        let shard = |name: &str| {
            plan.tensors
                .iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("{what}: no '{name}'"))
        };
        let heads0 = if shares.is_empty() { 1 } else { 2 };
        assert_eq!(shard("blk.0.attn_qkv.weight.seg0#0").ne[1], 32 * heads0);
        assert_eq!(shard("blk.0.attn_qkv.weight.seg1#0").ne[1], 16 * heads0);
        assert_eq!(
            shard("blk.0.attn_qkv.weight.seg2#0")
                .shard
                .as_ref()
                .unwrap()
                .start,
            96
        );
        // The fused product is never gathered: each device reads its own heads.
        assert!(
            !plan
                .tensors
                .iter()
                .any(|t| t.name.contains("qkv") && t.name.contains("gather")),
            "{what}: the fused product was gathered"
        );
        // One all-reduce (the attention output's partial sums), nothing
        // else; with 3:1 shares of 2 KV heads device 0 holds them all.
        let expect = if shares.is_empty() { devices } else { 0 };
        assert_eq!(collectives(&plan), expect, "{what}: collectives");
        let got = outputs(&mut load(plan, devices, None));
        assert_outputs_match(&want, &got, &what);
    }
}

#[test]
fn a_segmented_value_read_whole_is_gathered_segment_by_segment() {
    // The fused product is also an output: each segment all-gathered and the
    // three joined, on 2 and 4 devices, with either collective.
    let graph = fused_qkv_block(5, true);
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    for (target, devices) in [("cpu0+cpu1", 2), ("cpu0+cpu1+cpu2+cpu3", 4)] {
        for how in [Collectives::AllReduce, Collectives::ReduceScatter] {
            let what = format!("fused QKV read whole on {target} {how:?}");
            let plan = compile_for(&graph, target, &options(row_with(&[], how))).unwrap();
            assert!(
                plan.tensors
                    .iter()
                    .any(|t| t.name == "blk.0.qkv_b.joined#1"),
                "{what}: segments joined on every device"
            );
            let mut rt = load(plan, devices, Some(5));
            let got = outputs(&mut rt);
            assert_outputs_match(&want, &got, &what);
            assert!(rt.injected_delays() >= devices as u64, "{what}");
        }
    }
}

/// Llama 3's rope frequency factors (`rope_freqs.weight`, rope's third
/// source): every device's heads rotate with the whole factors, and the split
/// computes what one device does.
#[test]
fn rope_frequency_factors_are_read_whole_by_every_part() {
    use ir::DType;
    use ir::op::{RopeMode, RopeParams};
    use models::llama::{LlamaConfig, LlamaNames, build_prefill};
    let config = LlamaConfig {
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_ff: 96,
        n_vocab: 77,
        n_tokens: 7,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 16, 500000.0),
        weight_dtype: DType::F32,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: true,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    };
    let graph = build_prefill(&config).unwrap();
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    for (target, devices, shares) in SPLITS {
        let what = format!("llama 3 on {target} shares {shares:?}");
        let plan = compile_for(&graph, target, &options(row(shares))).unwrap();
        // Alone or in a rope + set_rows step.
        let ropes_with_factors = (plan.splits.iter().flat_map(|s| &s.steps))
            .flat_map(|s| s.ops())
            .filter(|(op, _, srcs)| matches!(op, ir::Op::Rope(_)) && srcs.len() == 3)
            .count();
        assert!(
            ropes_with_factors >= 4,
            "{what}: {ropes_with_factors} ropes read the factors"
        );
        let got = outputs(&mut load(plan, devices, None));
        assert_outputs_match(&want, &got, &what);
    }
}

/// A graph that already names a weight `w#1` (an imported graph names
/// llama.cpp's repeated names so): the parts of the split weight `w` keep
/// clear of it (`w#1~1`), the weight keeps its name (weights bind by name),
/// and the split computes what one device does.
#[test]
fn part_names_keep_clear_of_the_graphs_own_names() {
    use ir::{DType, GraphBuilder};
    let mut b = GraphBuilder::new("repeats");
    let x = b.input("x", DType::F32, [64, 5, 1, 1]).unwrap();
    let w = b.weight("w", DType::F32, [64, 96, 1, 1]).unwrap();
    let w1 = b.weight("w#1", DType::F32, [96, 64, 1, 1]).unwrap();
    let y = b.mul_mat("y", w, x).unwrap();
    let y = b.silu("y_act", y).unwrap();
    let z = b.mul_mat("z", w1, y).unwrap();
    b.mark_output(z).unwrap();
    let graph = b.finish().unwrap();
    let single = compile_for(&graph, "cpu", &CompileOptions::default()).unwrap();
    let want = outputs(&mut load(single, 1, None));
    let split = TensorSplitOptions {
        shares: vec![],
        rules: vec![SplitRule::parse("^w$=1").unwrap()],
        collectives: Collectives::Auto,
        experts: Default::default(),
    };
    let plan = compile_for(&graph, "cpu0+cpu1", &options(split)).unwrap();
    let names: Vec<&str> = plan.tensors.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"w#1~1") && names.contains(&"w#1"),
        "{names:?}"
    );
    let got = outputs(&mut load(plan, 2, None));
    assert_outputs_match(&want, &got, "repeats on cpu0+cpu1");
}

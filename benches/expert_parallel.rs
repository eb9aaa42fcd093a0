//! Expert parallelism side by side, beside the machine's ceilings measured in
//! the same run: two blocks of Qwen3-30B-A3B's shape (2048 wide, 32 query and
//! 4 KV heads of 128, 128 experts of 768, 8 per token; random weights, a
//! 512-token vocabulary so the head does not dominate), prefill of 128 tokens
//! and a one-token step, with the experts in Q4_K (llama.cpp's Q4_K_M
//! experts: the down matrix's 768 inputs are 3 blocks of 256, which a cut
//! along K over two devices shares out 512 and 256) and in Q8_0 (24 blocks of
//! 32: an even cut). On `cpu` with 2 threads against `cpu0+cpu1 --split-mode
//! row` (one core each) with every expert cut by rows (ggml's meta backend)
//! and with whole experts per device (`--experts whole`), and which of the
//! two `--experts auto` picks. The runtimes take turns in blocks of runs (so
//! drifts of a shared machine hit all); medians and ratios are printed.
//!
//! Run: `cargo bench --bench expert_parallel`.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use compiler::tensor_split::{ExpertSplit, TensorSplitOptions};
use ggplan_tests::race::race;
use ir::plan::Plan;
use ir::{DType, Graph, RopeMode, RopeParams};
use models::llama::{LlamaConfig, LlamaNames, Moe, QkNorm};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;

const BLOCKS: usize = 5;

fn graph(n_tokens: i64, experts: DType) -> Graph {
    let cfg = LlamaConfig {
        n_layer: 2,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 128,
        n_ff: 6144,
        n_vocab: 512,
        n_tokens,
        rms_eps: 1e-6,
        rope: RopeParams::plain(RopeMode::Neox, 128, 1e6),
        weight_dtype: experts,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::Q8_0,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: QkNorm::PerHead,
        gemma3: None,
        moe: Some(Moe {
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
            renormalise: true,
        }),
        last_logits_only: false,
        names: LlamaNames::Gguf,
    };
    models::llama::build_prefill(&cfg).unwrap()
}

fn plan(graph: &Graph, experts: Option<ExpertSplit>) -> Plan {
    let (target, tensor_split) = match experts {
        Some(experts) => (
            "cpu0+cpu1",
            Some(TensorSplitOptions {
                experts,
                ..TensorSplitOptions::default()
            }),
        ),
        None => ("cpu", None),
    };
    let options = CompileOptions {
        tensor_split,
        ..CompileOptions::default()
    };
    compile(graph, &Target::preset(target).unwrap(), &options)
        .unwrap()
        .plan
}

fn main() {
    println!("{}", runtime::ceiling::measure());
    for experts in [DType::Q4_K, DType::Q8_0] {
        for (what, t, per_block) in [("prefill, 128 tokens", 128, 2), ("one token", 1, 20)] {
            let g = graph(t, experts);
            let auto = plan(&g, Some(ExpertSplit::Auto));
            let plans = [
                plan(&g, None),
                plan(&g, Some(ExpertSplit::Rows)),
                plan(&g, Some(ExpertSplit::Whole)),
            ];
            let labels = [
                "cpu 2 threads",
                "cpu0+cpu1 row, experts by rows",
                "cpu0+cpu1 row, whole experts",
            ];
            // The two differ in the experts' products (auto's reasons add
            // both estimates, so the files differ either way).
            let parts = |p: &Plan| {
                (p.splits.iter().flat_map(|s| &s.steps))
                    .flat_map(|s| s.ops())
                    .filter(|(op, _, _)| matches!(op, ir::Op::MulMatIdPart { .. }))
                    .count()
            };
            let picked = if parts(&auto) > 0 {
                labels[2]
            } else {
                labels[1]
            };
            let mut rts: Vec<Runtime> = plans
                .iter()
                .map(|p| {
                    let options = LoadOptions {
                        threads: 2,
                        ..LoadOptions::default()
                    };
                    let weights = Weights::Random { seed: 11 };
                    let mut rt = Runtime::load(Arc::new(p.clone()), weights, &options).unwrap();
                    for name in rt.input_names() {
                        rt.set_random_input(&name, 3).unwrap();
                    }
                    rt
                })
                .collect();
            let ms = race(&mut rts, BLOCKS, per_block);
            println!("2 blocks of Qwen3-30B-A3B's shape, {experts} weights, {what}:");
            for (label, &m) in labels.iter().zip(&ms) {
                println!(
                    "  {label}: {m:.3} ms ({:.0} tokens/s): {:.2}x cpu",
                    t as f64 / m * 1e3,
                    ms[0] / m
                );
            }
            println!("  --experts auto picks: {picked}");
        }
    }
}

//! Pipeline parallelism side by side, beside the machine's ceilings measured
//! in the same run: a 128-token prefill over a KV cache on `cpu` with 2
//! threads, and on `cpu0+cpu1` (one core each) as a layer split with 1, 2, 4
//! and 8 micro-batches. Graphs: `llama2l_kv` (random F32 weights) and, when
//! installed (`scripts/setup.sh`), SmolLM2-135M (Q4_1). Prints the median
//! time per run, its ratio to `cpu`, and each device's busy share of one run
//! (the rest is the pipeline's bubble). Goal: 4 micro-batches within 1.10x
//! of `cpu`, idle per device at most 10%.
//!
//! Run: `cargo bench --bench pipeline [-- llama2l_kv|smollm2]`.

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ir::Graph;
use ir::files::gguf::GgufFile;
use ir::plan::Plan;
use models::llama::{CacheConfig, LlamaConfig, build_cached};
use runtime::executor::trace::{SpanKind, Trace};
use runtime::{LoadOptions, Runtime, Weights};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

const TOKENS: i64 = 128;
const RUNS: usize = 7;

fn plan(graph: &Graph, target: &str, micro_batches: u32) -> Plan {
    // Equal shares of the layers, as the pipelined plans get by memory.
    let n = Target::preset(target).unwrap().devices.len();
    let layer_split = (target != "cpu").then(|| vec![1.0; n]);
    let options = CompileOptions {
        placement: PlacementOptions {
            layer_split,
            ..PlacementOptions::default()
        },
        micro_batches,
        tensor_split: None,
        ..CompileOptions::default()
    };
    compile(graph, &Target::preset(target).unwrap(), &options)
        .unwrap()
        .plan
}

/// Causal prompt inputs: token j at position and cache row j, seeing rows 0..=j.
fn set_inputs(rt: &mut Runtime, vocab: i64) {
    let step = models::llama::step_inputs(0, TOKENS, TOKENS, TOKENS).unwrap();
    let tokens: Vec<i32> = (0..TOKENS)
        .map(|j| ((j * 37 + 11) % vocab) as i32)
        .collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.set_input_i32("pos", &step.pos).unwrap();
    rt.set_input_i32("kv_idx", &step.kv_idx).unwrap();
    rt.set_input_f32("kq_mask", &step.kq_mask).unwrap();
}

/// Median ms per run, and each device's busy share of one traced run.
fn time(plan: Plan, weights: &Weights, vocab: i64) -> (f64, Vec<(String, f64)>) {
    let options = LoadOptions {
        threads: 2,
        ..LoadOptions::default()
    };
    let mut rt = Runtime::load(Arc::new(plan), weights.clone(), &options).unwrap();
    set_inputs(&mut rt, vocab);
    rt.run().unwrap();
    let mut ms: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            rt.run().unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let trace: Trace = rt.run_traced().unwrap();
    let wall = trace.spans.iter().map(|s| s.end_ns).max().unwrap_or(1) as f64;
    let mut busy: BTreeMap<String, f64> = BTreeMap::new();
    for s in &trace.spans {
        let stream = &rt.plan().streams[s.stream as usize];
        if matches!(s.kind, SpanKind::Step(_)) && stream.kind == ir::plan::StreamKind::Compute {
            let device = rt.plan().devices[stream.device.index()].name.clone();
            *busy.entry(device).or_default() += (s.end_ns - s.start_ns) as f64 / wall;
        }
    }
    (ms[RUNS / 2], busy.into_iter().collect())
}

fn compare(name: &str, graph: &Graph, weights: &Weights, vocab: i64) {
    let (base, _) = time(plan(graph, "cpu", 1), weights, vocab);
    println!("{name}: cpu, 2 threads: {base:.1} ms");
    for n in [1, 2, 4, 8] {
        let (ms, busy) = time(plan(graph, "cpu0+cpu1", n), weights, vocab);
        let shares: Vec<String> = busy
            .iter()
            .map(|(d, b)| format!("{d} busy {:.0}%", b * 100.0))
            .collect();
        println!(
            "{name}: cpu0+cpu1 layer split, {n} micro-batch(es): {ms:.1} ms ({:.2}x cpu; {})",
            ms / base,
            shares.join(", ")
        );
    }
}

fn main() {
    // Optional filters (`cargo bench --bench pipeline -- smollm2`): run only
    // the graphs whose name contains one of them (ignoring case).
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.to_lowercase())
        .collect();
    let want = |name: &str| {
        let name = name.to_lowercase();
        filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
    };
    println!("{}", runtime::ceiling::measure());
    if want("llama2l_kv") {
        let llama = ir::text::read_graph(&examples::graph_path("llama2l_kv")).unwrap();
        compare("llama2l_kv", &llama, &Weights::Random { seed: 7 }, 8000);
    }
    if !want("smollm2") {
        return;
    }
    let Some(path) = ggplan_tests::models::smollm2_gguf() else {
        println!("SmolLM2: not installed (scripts/setup.sh installs it); skipped");
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let config = LlamaConfig::from_gguf(&file, TOKENS).unwrap();
    let cache = CacheConfig {
        n_ctx: TOKENS,
        kv_dtype: ir::DType::F32,
    };
    let graph = build_cached(&config, &cache).unwrap();
    let weights = Weights::open(&path).unwrap();
    compare("SmolLM2-135M Q4_1", &graph, &weights, config.n_vocab);
}

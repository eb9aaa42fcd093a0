//! Tensor parallelism side by side, beside the machine's ceilings measured in
//! the same run: SmolLM2-135M (Q4_1, when installed by `scripts/setup.sh`)
//! decode (one token over a 512-row cache, attending the first 128 rows, as
//! `generate`'s first bucket does) and prefill of 128 tokens, on `cpu` with
//! 2 threads against `cpu0+cpu1 --split-mode row` (one core each, every
//! matrix and the KV cache split, two all-reduces per block); prefill also
//! with `--collectives reduce-scatter` (each partial sum cut by tokens, the
//! norms on slices, an all-gather before each product), and which of the two
//! `auto` picks. The runtimes take turns in blocks of runs (so drifts of a
//! shared machine hit all); the medians and their ratios are printed, then
//! each device's bytes
//! (weights and state, compute arena) against the unsplit plan and against
//! ggml's meta-backend rule (every device holds a full-size compute buffer).
//! Goals (issue): decode >= 1.0x, prefill >= 0.95x; each device's total <=
//! unsplit / n + mirrored + 5%.
//!
//! Run: `cargo bench --bench tensor_split`.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use compiler::tensor_split::{Collectives, TensorSplitOptions};
use ggplan_tests::race::race;
use ir::files::gguf::GgufFile;
use ir::plan::{Plan, Usage};
use ir::{Graph, Role};
use models::llama::{CacheConfig, LlamaConfig, build_cached_attending};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;

const CTX: i64 = 512;
const BLOCKS: usize = 6;

/// The plan on `cpu`, or on `cpu0+cpu1` split by rows with `collectives`.
fn plan(graph: &Graph, split: Option<Collectives>) -> Plan {
    let (target, tensor_split) = match split {
        Some(collectives) => (
            "cpu0+cpu1",
            Some(TensorSplitOptions {
                collectives,
                experts: Default::default(),
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

/// A causal step of `t` tokens after `past` cached ones, attending `attend` rows.
fn set_inputs(rt: &mut Runtime, past: i64, t: i64, attend: i64, vocab: i64) {
    let step = models::llama::step_inputs(past, t, CTX, attend).unwrap();
    let tokens: Vec<i32> = (0..t).map(|j| ((j * 37 + 11) % vocab) as i32).collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.set_input_i32("pos", &step.pos).unwrap();
    rt.set_input_i32("kv_idx", &step.kv_idx).unwrap();
    rt.set_input_f32("kq_mask", &step.kq_mask).unwrap();
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Per device: (resident bytes, compute bytes).
fn memory(plan: &Plan) -> Vec<(String, u64, u64)> {
    plan.devices
        .iter()
        .enumerate()
        .map(|(d, dev)| {
            let sum = |compute: bool| -> u64 {
                plan.arenas
                    .iter()
                    .filter(|a| a.device.index() == d && (a.usage == Usage::Compute) == compute)
                    .map(|a| a.size)
                    .sum()
            };
            (dev.name.clone(), sum(false), sum(true))
        })
        .collect()
}

/// Bytes of weights read whole on every device (mirrors and their sources).
fn mirrored_bytes(plan: &Plan) -> u64 {
    plan.tensors
        .iter()
        .filter(|t| t.role == Role::Weight && t.shard.as_ref().is_some_and(|s| s.full_ne == t.ne))
        .map(|t| {
            (t.ne.iter().product::<i64>() as u64) * t.dtype.block_bytes() / t.dtype.block_elems()
        })
        .sum()
}

fn main() {
    println!("{}", runtime::ceiling::measure());
    let Some(path) = ggplan_tests::models::smollm2_gguf() else {
        println!("SmolLM2: not installed (scripts/setup.sh installs it); skipped");
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let weights = Weights::open(&path).unwrap();
    let cache = CacheConfig {
        n_ctx: CTX,
        kv_dtype: ir::DType::F32,
    };
    for (what, t, attend, past, per_block) in [
        (
            "decode, 1 token attending 128 of 512 cache rows",
            1,
            128,
            100,
            100,
        ),
        ("prefill, 128 tokens (cache of 512 rows)", 128, CTX, 0, 4),
    ] {
        let config = LlamaConfig::from_gguf(&file, t).unwrap();
        let graph = build_cached_attending(&config, &cache, attend).unwrap();
        let auto = plan(&graph, Some(Collectives::Auto));
        let mut plans = vec![
            plan(&graph, None),
            plan(&graph, Some(Collectives::AllReduce)),
        ];
        let mut labels = vec!["cpu 2 threads", "cpu0+cpu1 --split-mode row"];
        let scatter = plan(&graph, Some(Collectives::ReduceScatter));
        let ron = ir::plan::plan_to_ron;
        if ron(&scatter) != ron(&plans[1]) {
            plans.push(scatter);
            labels[1] = "cpu0+cpu1 row, all-reduce";
            labels.push("cpu0+cpu1 row, reduce-scatter");
        }
        let picked = match plans.iter().position(|p| ron(p) == ron(&auto)) {
            Some(i) => labels[i],
            None => "neither (a bug)",
        };
        let mut rts: Vec<Runtime> = plans
            .iter()
            .map(|p| {
                let options = LoadOptions {
                    threads: 2,
                    ..LoadOptions::default()
                };
                let mut rt = Runtime::load(Arc::new(p.clone()), weights.clone(), &options).unwrap();
                set_inputs(&mut rt, past, t, attend, config.n_vocab);
                rt
            })
            .collect();
        let ms = race(&mut rts, BLOCKS, per_block);
        let per_s = |ms: f64| t as f64 / ms * 1e3;
        println!("SmolLM2 {what}:");
        for (label, &m) in labels.iter().zip(&ms) {
            println!(
                "  {label}: {m:.3} ms ({:.0} tokens/s): {:.2}x cpu",
                per_s(m),
                ms[0] / m
            );
        }
        println!("  --collectives auto picks: {picked}");
        let unsplit = memory(&plans[0]);
        let (_, u_res, u_comp) = &unsplit[0];
        let n = plans[1].devices.len() as u64;
        let mirrored = mirrored_bytes(&plans[1]) / n.max(1);
        println!(
            "  memory, unsplit: {:.2} MiB resident + {:.2} MiB compute; per device goal \
             <= {:.2} MiB (unsplit / {n} + mirrored + 5%)",
            mib(*u_res),
            mib(*u_comp),
            mib((u_res + u_comp) / n + mirrored) * 1.05
        );
        for (k, split) in plans.iter().enumerate().skip(1) {
            println!("  {}:", labels[k]);
            for (name, res, comp) in memory(split) {
                println!(
                    "    {name}: {:.2} MiB resident + {:.2} MiB compute = {:.2} MiB; ggml's \
                     meta rule (full compute buffer): {:.2} MiB",
                    mib(res),
                    mib(comp),
                    mib(res + comp),
                    mib(res + u_comp)
                );
            }
        }
    }
}

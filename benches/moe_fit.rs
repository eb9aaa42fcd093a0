//! `--fit` for a mixture of experts on `host` plus two `ggml-rpc-server`s
//! on loopback (llama.cpp's `--rpc`; the servers first, the host CPU last):
//! the cost policy's choice against llama.cpp's `--fit` placement (every
//! block's attention on the servers first, the experts that do not fit in
//! host memory), each run by ggplan's runtime and by llama.cpp's own client
//! (`llama-bench` with `-ngl`/`-ts`/`-ot` giving every weight the device our
//! plan gives it) on the same servers, beside the machine's ceilings and the
//! links measured in the same run.
//!
//! Model: a random Qwen 3 MoE GGUF (`tests/support/random_gguf.py qwen3moe
//! --moe-shape 256,8,32,4,256`: 8 blocks 256 wide, 32 experts of 256, 4 per
//! token, F32, SmolLM2's vocabulary), written under `target/moe-fit/`.
//! Memory budgets: each server gets room for half of the weights outside the
//! blocks' experts (the token table excepted: it stays on the CPU, as
//! llama.cpp's input layer does) plus the experts of `m` blocks, for `m` in
//! [`BUDGETS`]; `--fit` then places the rest. Workloads: prefill of 128
//! tokens (llama.cpp: `-p 128`) and decode of one token after 100 (`-n 32
//! -d 100`), an F16 KV cache, `-fa off`; logits of the last token only.
//!
//! Everything shares the host's cores: our runtime (2 threads on the CPU
//! device), each server (1 thread), `llama-bench -t 2`.
//!
//! Run: `cargo bench --bench moe_fit` (about ten minutes; needs
//! `scripts/setup.sh` for SmolLM2's vocabulary and gguf-py,
//! `scripts/rpc-servers.sh build` and `scripts/rpc-llama-bench.sh build`).

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PinRule, PlacementOptions, Policy, expert_rank, layer_of};
use compiler::target::Target;
use ggplan_tests::race::{median, race};
use ggplan_tests::rpc_server::RpcServer;
use ggplan_tests::workspace_root;
use ir::files::gguf::GgufFile;
use ir::plan::Plan;
use ir::{Graph, Role};
use models::llama::{CacheConfig, LlamaConfig, build_cached_attending};
use runtime::device::rpc::RemoteServers;
use runtime::{LoadOptions, Runtime, Weights};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const SHAPE: &str = "256,8,32,4,256";
const CTX: i64 = 256;
/// Blocks of experts each server has room for, one budget each.
const BUDGETS: [u64; 3] = [1, 2, 3];
const THREADS: usize = 2;
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One workload: `t` tokens after `past`, attending `attend` cache rows;
/// runs per turn and turns in the timed race.
struct Workload {
    name: &'static str,
    t: i64,
    past: i64,
    attend: i64,
    per_turn: usize,
    llama: &'static [&'static str],
}

const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "prefill 128",
        t: 128,
        past: 0,
        attend: 128,
        per_turn: 2,
        llama: &["-p", "128", "-n", "0", "-r", "5"],
    },
    Workload {
        name: "decode",
        t: 1,
        past: 100,
        attend: 128,
        per_turn: 20,
        llama: &["-p", "0", "-n", "32", "-d", "100", "-r", "3"],
    },
];

fn main() {
    println!("{}", runtime::ceiling::measure());
    let Some(gguf) = model() else { return };
    let servers: Vec<RpcServer> = match (0..2).map(|_| RpcServer::start(1)).collect() {
        Ok(s) => s,
        Err(e) => {
            println!("servers: {e}; skipped");
            return;
        }
    };
    let endpoints: Vec<String> = servers.iter().map(|s| s.endpoint().to_string()).collect();
    let mut base = ggplan::target::host_target(false, &mut |n| println!("host: {n}")).unwrap();
    ggplan::target::add_remote_devices(&mut base, &endpoints, &mut |n| println!("{n}")).unwrap();
    let names: Vec<&str> = base.devices.iter().map(|d| d.name.as_str()).collect();
    println!("target: {} (priority order)", names.join(", "));

    let file = GgufFile::open(&gguf).unwrap();
    let weights = Weights::open(&gguf).unwrap();
    let cache = CacheConfig {
        n_ctx: CTX,
        kv_dtype: ir::DType::F16,
    };
    // 1. ggplan's runtime, both placements taking turns. A server serves one
    // client at a time: llama.cpp's runs come after this connection closes.
    let rpc = Arc::new(RemoteServers::connect(&endpoints, CALL_TIMEOUT).unwrap());
    let mut rows = Vec::new();
    for (wi, w) in WORKLOADS.iter().enumerate() {
        let mut config = LlamaConfig::from_gguf(&file, w.t).unwrap();
        config.last_logits_only = true;
        let graph = build_cached_attending(&config, &cache, w.attend).unwrap();
        for &m in &BUDGETS {
            let target = with_budget(&base, &graph, m);
            let plans = [
                plan(&graph, &target, Policy::Ggml),
                plan(&graph, &target, Policy::Cost),
            ];
            let mut rts: Vec<Runtime> = (plans.iter())
                .map(|p| runtime_for(p, &weights, &rpc, w, config.n_vocab))
                .collect();
            let ms = race(&mut rts, 5, w.per_turn);
            for (i, who) in ["llama.cpp's --fit", "ours"].into_iter().enumerate() {
                println!(
                    "ggplan {} budget {m} blocks of experts per server, placement {who}: {}; \
                     {:.2} ms ({:.1} tokens/s)",
                    w.name,
                    describe(&plans[i]),
                    ms[i],
                    w.t as f64 / ms[i] * 1e3,
                );
                rows.push((wi, m, who, llama_flags(&plans[i], &endpoints), ms[i]));
            }
            println!("  why (ours): {}", expert_reason(&plans[1]));
        }
    }
    drop(rpc);

    // 2. llama.cpp's client, each placement given by its flags.
    let mut table = Vec::new();
    for (wi, m, who, flags, ms) in rows {
        let w = &WORKLOADS[wi];
        let tag = format!("m{m}-{}", if who == "ours" { "ours" } else { "llama" });
        let theirs = llama_bench(&gguf, &flags, w, &tag);
        println!(
            "llama.cpp {} budget {m}, placement {who}: {}",
            w.name,
            theirs.as_ref().map_or_else(
                |e| e.clone(),
                |t| format!("{t:.2} ms ({:.1} tokens/s)", w.t as f64 / t * 1e3)
            )
        );
        table.push(format!(
            "| {} | {m} | {who} | {ms:.2} | {} |",
            w.name,
            theirs
                .as_ref()
                .map_or("—".to_string(), |t| format!("{t:.2}"))
        ));
    }
    println!("\n| workload | experts per server (blocks) | placement | ggplan ms | llama.cpp ms |");
    println!("|---|---|---|---|---|");
    for row in table {
        println!("{row}");
    }
}

/// The random model, written once under `target/moe-fit/`; `None` (with a
/// note) when SmolLM2 (its vocabulary) or gguf-py is missing.
fn model() -> Option<PathBuf> {
    let Some(vocab) = ggplan_tests::models::smollm2_gguf() else {
        println!("SmolLM2 (the vocabulary) is not installed (scripts/setup.sh); skipped");
        return None;
    };
    let dir = workspace_root().join("target/moe-fit");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("qwen3moe-{}.gguf", SHAPE.replace(',', "x")));
    if path.is_file() {
        return Some(path);
    }
    let status = Command::new(workspace_root().join(".models/venv/bin/python"))
        .arg(workspace_root().join("tests/support/random_gguf.py"))
        .args(["qwen3moe".as_ref(), path.as_os_str()])
        .arg("--tokenizer-from")
        .arg(&vocab)
        .args(["--moe-shape", SHAPE])
        .status();
    match status {
        Ok(s) if s.success() => Some(path),
        other => {
            println!("random_gguf.py failed ({other:?}); skipped");
            None
        }
    }
}

fn bytes(graph: &Graph, keep: impl Fn(&str) -> bool) -> u64 {
    (graph.with_role(Role::Weight))
        .map(|w| graph.tensor(w))
        .filter(|t| keep(&t.name))
        .map(|t| t.layout.span_bytes())
        .sum()
}

/// `base` with each server's memory: the reserve, half the weights outside
/// the experts and the token table, and `m` blocks' experts.
fn with_budget(base: &Target, graph: &Graph, m: u64) -> Target {
    let mut t = base.clone();
    let experts = bytes(graph, |n| expert_rank(n).is_some());
    let blocks = u64::from(compiler::placement::n_layers(graph));
    let rest = bytes(graph, |n| {
        expert_rank(n).is_none() && !n.starts_with("token_embd")
    });
    let room = compiler::assign::compute_reserve_bytes(graph)
        + rest / 2
        + m * experts / blocks
        + (1 << 20);
    for d in t.devices.iter_mut().filter(|d| !d.is_cpu()) {
        d.memory_bytes = room;
        d.max_buffer_bytes = d.max_buffer_bytes.min(room);
    }
    t
}

fn plan(graph: &Graph, target: &Target, policy: Policy) -> Plan {
    let cpu = target
        .devices
        .iter()
        .find(|d| d.is_cpu())
        .unwrap()
        .name
        .clone();
    let options = CompileOptions {
        policy,
        placement: PlacementOptions {
            fit: true,
            // The input layer stays on the host, as llama.cpp keeps it.
            pins: vec![PinRule::parse(&format!(r"^token_embd\.weight$={cpu}"), target).unwrap()],
            ..PlacementOptions::default()
        },
        ..CompileOptions::default()
    };
    compile(graph, target, &options).unwrap().plan
}

fn runtime_for(
    plan: &Plan,
    weights: &Weights,
    rpc: &Arc<RemoteServers>,
    w: &Workload,
    vocab: i64,
) -> Runtime {
    let options = LoadOptions {
        threads: THREADS,
        rpc: Some(Arc::clone(rpc)),
        ..LoadOptions::default()
    };
    let mut rt = Runtime::load(Arc::new(plan.clone()), weights.clone(), &options).unwrap();
    let step = models::llama::step_inputs(w.past, w.t, CTX, w.attend).unwrap();
    let tokens: Vec<i32> = (0..w.t).map(|j| ((j * 37 + 11) % vocab) as i32).collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.set_input_i32("pos", &step.pos).unwrap();
    rt.set_input_i32("kv_idx", &step.kv_idx).unwrap();
    rt.set_input_f32("kq_mask", &step.kq_mask).unwrap();
    rt
}

/// The device of every weight of `plan`, by name.
fn weight_devices(plan: &Plan) -> Vec<(&str, &str)> {
    (plan.tensors.iter())
        .filter(|t| t.role == Role::Weight)
        .map(|t| {
            (
                t.name.as_str(),
                plan.devices[t.device.index()].name.as_str(),
            )
        })
        .collect()
}

/// Blocks whose attention runs on the host, blocks whose experts do, and
/// the plan's splits.
fn describe(plan: &Plan) -> String {
    let on_cpu = |part: &str| -> Vec<u32> {
        let mut v: Vec<u32> = weight_devices(plan)
            .into_iter()
            .filter(|(n, d)| n.contains(part) && *d == "cpu")
            .filter_map(|(n, _)| layer_of(n))
            .collect();
        v.dedup();
        v
    };
    format!(
        "attention of blocks {:?} and experts of blocks {:?} on the host, {} splits",
        on_cpu("attn_q.weight"),
        on_cpu("_exps"),
        plan.splits.len()
    )
}

fn expert_reason(plan: &Plan) -> String {
    (plan.tensors.iter())
        .find(|t| t.name.contains("ffn_up_exps"))
        .map_or(String::new(), |t| t.reason.clone())
}

/// llama-bench's flags for the placement of `plan`: `-ngl` and `-ts` put
/// each block's layer (its KV cache) where its attention is, `-ot` gives
/// every weight its device (first match wins in llama.cpp, and each
/// pattern names whole tensor names, so they cannot overlap).
fn llama_flags(plan: &Plan, endpoints: &[String]) -> Vec<String> {
    let devices = weight_devices(plan);
    let n_layer = devices
        .iter()
        .filter_map(|(n, _)| layer_of(n))
        .max()
        .map_or(0, |l| l + 1);
    let attention = |l: u32| {
        let name = format!("blk.{l}.attn_q.weight");
        devices
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
            .unwrap()
    };
    let on_host = (0..n_layer).take_while(|&l| attention(l) == "cpu").count() as u32;
    assert!(
        (on_host..n_layer).all(|l| attention(l) != "cpu"),
        "blocks on the host are the first ones"
    );
    let mut per_server = vec![0u32; endpoints.len()];
    for l in on_host..n_layer {
        let d = attention(l);
        per_server[d.trim_start_matches("rpc").parse::<usize>().unwrap()] += 1;
    }
    *per_server.last_mut().unwrap() += 1; // the output layer
    let buft = |d: &str| match d.strip_prefix("rpc") {
        // llama.cpp names a server's buffer type by its device and endpoint.
        Some(i) => format!("RPC0[{}]", endpoints[i.parse::<usize>().unwrap()]),
        None => "CPU".to_string(),
    };
    let mut overrides = Vec::new();
    let mut names_of: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (n, d) in &devices {
        names_of.entry(d).or_default().push(n.replace('.', r"\."));
    }
    for (d, names) in names_of {
        overrides.push(format!("^({})$={}", names.join("|"), buft(d)));
    }
    let ts: Vec<String> = per_server.iter().map(|n| n.to_string()).collect();
    vec![
        "--rpc".into(),
        endpoints.join(","),
        "-ngl".into(),
        (n_layer - on_host + 1).to_string(),
        "-ts".into(),
        ts.join("/"),
        "-ot".into(),
        overrides.join(";"),
    ]
}

/// llama-bench's median ms per run (prefill) or per token (decode), or why not.
fn llama_bench(gguf: &Path, flags: &[String], w: &Workload, tag: &str) -> Result<f64, String> {
    let binary = workspace_root().join(".rpc/bin/llama-bench");
    if !binary.is_file() {
        return Err("not measured (scripts/rpc-llama-bench.sh build makes llama-bench)".into());
    }
    let log_dir = workspace_root().join("target/moe-fit");
    let log = log_dir.join(format!("llama-bench-{tag}-{}.log", w.t));
    let out = Command::new(&binary)
        .args(flags)
        .arg("-m")
        .arg(gguf)
        .args(["-t", &THREADS.to_string(), "-fa", "off", "-o", "json"])
        .args(w.llama)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
        .output()
        .map_err(|e| format!("cannot start llama-bench: {e}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stdout);
        let said: Vec<&str> = said.lines().take(3).collect();
        return Err(format!(
            "llama-bench failed ({}): {}; see {}",
            out.status,
            said.join(" / "),
            log.display()
        ));
    }
    let tests: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let samples = tests[0]["samples_ns"].as_array().ok_or("no samples")?;
    let per = if w.t == 1 { 32.0 } else { 1.0 };
    let ms: Vec<f64> = samples
        .iter()
        .filter_map(|v| v.as_f64())
        .map(|ns| ns / 1e6 / per)
        .collect();
    Ok(median(ms))
}

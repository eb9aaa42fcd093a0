//! Llama 3, Qwen 3, Qwen 3 MoE, Mixtral and OLMoE against llama.cpp, on tiny random GGUFs that gguf-py
//! writes (`tests/support/random_gguf.py`: 2 blocks, 64 wide, F32, SmolLM2's
//! vocabulary) and llama.cpp decodes through the capture tool with an F32
//! KV cache:
//!
//! - Llama 3 (`rope_freqs.weight`, rope's frequency factors), Qwen 3 (q/k
//!   head norms, NeoX rope), Qwen 3 MoE (Qwen 3's attention, 8 experts of
//!   which each token's router picks 2), Mixtral (llama's attention, the
//!   same experts) and OLMoE (whole-projection q/k norms, weights not
//!   renormalised): `ggplan generate` from the GGUF
//!   (ggplan's builder) gives llama.cpp's 32 greedy tokens in exact precision
//!   and its prompt logits within NMSE 1e-9;
//! - the builder's graph computes what llama.cpp's imported graph computes,
//!   node for node on the same shapes (order and spellings aside);
//! - `generate` with llama.cpp's own graphs (`--prefill-graph` from a capture
//!   of 5 tokens, so the prompt runs as three batches and a decode step,
//!   `--decode-graph` from a one-token capture) gives the same 32 tokens and
//!   prompt logits, Qwen 3 MoE included;
//! - the imported capture, compiled for `cpu` and for `cpu0+cpu1` by layers
//!   and by rows, gives llama.cpp's logits within NMSE 1e-9 (OLMoE's whole-
//!   projection q/k norms mix heads, so its row split is refused); the MoE
//!   models also with whole experts per core group (expert parallelism:
//!   `--split '_exps\.weight$=2'`, and `--split-mode row --experts whole`);
//! - on two loopback RPC servers (`-ts 1,2`, which puts one block on each
//!   and makes llama.cpp hold Llama 3's factors twice), `--policy ggml` makes
//!   llama.cpp's splits and copies, its plan gives llama.cpp's logits, and
//!   every step the servers' ggml kernels compute agrees in isolation with
//!   ggplan's reference kernels (`run --check=all`: op by op against ggml's
//!   CPU backend, on the model's own shapes: MoE's `mul_mat_id`, `argsort`
//!   and `clamp` among them).

mod common;

use common::llama_cpp::{
    F32_GREEDY, PROMPT, assert_same_decisions, builder_computes_as_llama_cpp, capture,
    generate_agrees, generate_matches, ggml_on_two_servers, import_compile_run,
    imported_graph_flags, nmse, random_gguf, s,
};
use common::{ggplan_ok, scratch_dir};
use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::references::read_npy_f64;
use ggplan_tests::rpc_server::RpcServer;
use std::path::Path;

/// Exact precision against llama.cpp's F32 graph: only summation order differs.
const MAX_NMSE: f64 = 1e-9;
/// Everything the module doc lists, for one architecture.
fn agrees_with_llama_cpp(arch: &str) {
    let Some(smollm2) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir(&format!("random-{arch}"));
    let gguf = random_gguf(arch, &dir, &smollm2);
    let cap = dir.join("one.json");
    capture(&gguf, &cap, &F32_GREEDY);
    let (_, llama) = read_npy_f64(&dir.join("one.json.logits.npy"));

    generate_agrees(arch, &gguf, &cap, &llama, MAX_NMSE);
    generate_with_imported_graphs(arch, (&gguf, &smollm2), &cap, &llama);
    // The builder's graph computes what llama.cpp's does (F32 cache).
    let f32_cache = ["-ctk", "f32", "-ctv", "f32"];
    assert!(builder_computes_as_llama_cpp(&gguf, &dir, &f32_cache, &[]) > 0);

    // The import, on one device and split over two core groups; a mixture
    // of experts also with whole experts per core group (expert
    // parallelism): only the experts split, and with the rows of the rest.
    let row = ["--target", "cpu0+cpu1", "--split-mode", "row"];
    let experts_only = ["--target", "cpu0+cpu1", "--split", r"_exps\.weight$=2"];
    let row_experts = [&row[..], &["--experts", "whole"]].concat();
    let mut placements = vec![
        ("cpu", &["--target", "cpu"][..]),
        (
            "layer",
            &["--target", "cpu0+cpu1", "--split-mode", "layer"][..],
        ),
        ("row", &row[..]),
    ];
    if matches!(arch, "qwen3moe" | "mixtral" | "olmoe") {
        placements.push(("experts", &experts_only[..]));
        if arch != "olmoe" {
            placements.push(("row-experts", &row_experts[..]));
        }
    }
    for (name, args) in placements {
        if arch == "olmoe" && name == "row" {
            // OLMoE norms each token's queries and keys over all heads at
            // once, so they cannot be split by heads as the others are.
            let graph = s(&dir.join("layer.graph.ron"));
            let out = s(&dir.join("row.plan.ron"));
            let printed =
                common::ggplan_error(&[&["compile", &graph][..], &row, &["-o", &out]].concat());
            assert!(printed.contains("cannot find block 0's heads"), "{printed}");
            continue;
        }
        let ours = import_compile_run(&cap, &gguf, name, args, &[]);
        let e = nmse(&ours, &llama);
        println!("{arch} imported, {name}: NMSE {e:e}");
        assert!(e <= MAX_NMSE, "{arch} imported, {name}: NMSE {e:e}");
        if name.contains("experts") {
            // Every expert product is a part: no device runs a whole one,
            // and the MoE FFN needs one all-reduce per block (two blocks).
            let plan = ir::plan::read_plan(&dir.join(format!("{name}.plan.ron"))).unwrap();
            let ops: Vec<ir::Op> = (plan.splits.iter().flat_map(|s| &s.steps))
                .flat_map(|s| s.ops().into_iter().map(|(op, _, _)| *op))
                .collect();
            let parts = ops
                .iter()
                .filter(|op| matches!(op, ir::Op::MulMatIdPart { .. }));
            assert_eq!(
                parts.count(),
                12,
                "{arch} {name}: three per block and device"
            );
            assert!(!ops.contains(&ir::Op::MulMatId), "{arch} {name}");
        }
    }

    // Two RPC servers: llama.cpp's decisions and logits.
    let servers: Vec<RpcServer> = (0..2).map(|_| RpcServer::start(1).unwrap()).collect();
    let endpoints = format!("{},{}", servers[0].endpoint(), servers[1].endpoint());
    let cap_rpc = dir.join("rpc.json");
    capture(
        &gguf,
        &cap_rpc,
        &["--rpc", &endpoints, "-ngl", "99", "-ts", "1,2"],
    );
    let compile = ggml_on_two_servers("1,2,0");
    // --check=all: every step the servers' ggml kernels computed (rope with
    // factors, the head norms, ...) in isolation against ggplan's reference.
    let run = ["--rpc", &endpoints, "--check=all"].map(String::from);
    let ours = import_compile_run(&cap_rpc, &gguf, "rpc", &compile, &run);
    let (_, llama_rpc) = read_npy_f64(&dir.join("rpc.json.logits.npy"));
    let e = nmse(&ours, &llama_rpc);
    assert!(e <= MAX_NMSE, "{arch} on RPC servers: NMSE {e:e}");
    assert_same_decisions(&dir.join("rpc.plan.ron"), &cap_rpc, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `generate` with llama.cpp's own graphs: the capture of the first 5
/// prompt tokens as the prefill graph (the 16-token prompt runs as three
/// such batches and one decode step) and a one-token capture as the decode
/// graph give llama.cpp's 32 greedy tokens and its prompt logits, MoE
/// included. A decode graph of several tokens and another model's GGUF
/// (`other`) are refused.
fn generate_with_imported_graphs(
    arch: &str,
    (gguf, other): (&Path, &Path),
    cap: &Path,
    llama: &[f64],
) {
    let dir = cap.parent().unwrap();
    let graphs = imported_graph_flags(gguf, dir, 5);
    let flags: Vec<&str> = graphs.iter().map(String::as_str).collect();
    let label = format!("{arch} from imported graphs");
    generate_matches(&label, gguf, cap, llama, MAX_NMSE, (PROMPT, 32), &flags);
    // A decode graph of more than one token is refused, naming the count.
    let wrong = ["--prefill-graph", &graphs[3], "--decode-graph", &graphs[3]];
    let printed = common::ggplan_error(
        &[
            &["generate", "--gguf", &s(gguf), "--prompt", "a"],
            &wrong[..],
        ]
        .concat(),
    );
    assert!(
        printed.contains("decodes 5 tokens per run, not 1"),
        "{printed}"
    );
    // Another model's GGUF: its weights are refused by name and shape.
    let other = s(other);
    let printed = common::ggplan_error(
        &[&["generate", "--gguf", &other, "--prompt", "a"], &flags[..]].concat(),
    );
    assert!(printed.contains("weight 'token_embd.weight'"), "{printed}");
}

/// Llama 3: rope divides each pair's angle by `rope_freqs.weight`; on the
/// servers llama.cpp loads the factors into each block's buffer (two
/// tensors, imported as a weight and its mirror).
#[test]
fn llama3_with_rope_frequency_factors_agrees_with_llama_cpp() {
    agrees_with_llama_cpp("llama3");
}

/// Qwen 3: every query and key head RMS-normed before a NeoX rope.
#[test]
fn qwen3_with_head_norms_agrees_with_llama_cpp() {
    agrees_with_llama_cpp("qwen3");
}

/// Qwen 3 MoE (8 experts, 2 per token): each token's experts chosen by
/// `argsort` of the router's soft_max, their weights' sum clamped, the
/// experts' products by `mul_mat_id` (the builder's graph and the import).
#[test]
fn qwen3_moe_agrees_with_llama_cpp() {
    agrees_with_llama_cpp("qwen3moe");
}

/// Mixtral (a `llama` file with 8 experts, 2 per token): llama's attention
/// with Qwen 3 MoE's routing, experts as wide as `feed_forward_length`.
#[test]
fn mixtral_agrees_with_llama_cpp() {
    agrees_with_llama_cpp("mixtral");
}

/// OLMoE (8 experts, 2 per token, their probabilities not renormalised):
/// each token's whole query and key projections RMS-normed before the heads
/// are split, NeoX rope.
#[test]
fn olmoe_agrees_with_llama_cpp() {
    agrees_with_llama_cpp("olmoe");
}

/// llama.cpp's `--cpu-moe` (`-ot exps=CPU`) on one RPC server: ggplan's
/// `--cpu-moe` under `--policy ggml` makes llama.cpp's 6 splits (the expert
/// products back on the CPU in every block) and its copies per link, and the
/// plan gives llama.cpp's logits; `--n-cpu-moe N` pins the first N blocks'
/// experts; N above the block count and a graph without experts are refused.
#[test]
fn cpu_moe_keeps_the_experts_on_the_cpu_as_llama_cpp_does() {
    let Some(smollm2) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir("random-cpu-moe");
    let gguf = random_gguf("qwen3moe", &dir, &smollm2);
    let server = RpcServer::start(1).unwrap();
    let cap = dir.join("moe.json");
    let mut flags = F32_GREEDY.to_vec();
    flags.extend(["--rpc", server.endpoint(), "-ngl", "99", "-ot", "exps=CPU"]);
    capture(&gguf, &cap, &flags);
    let compile = [
        "--target",
        "cpu+rpc0",
        "--split-mode",
        "layer",
        "--tensor-split",
        "1,0",
        "--policy",
        "ggml",
    ];
    let with_flag = [&compile[..], &["--cpu-moe"]].concat();
    let run = ["--rpc".to_string(), server.endpoint().to_string()];
    let ours = import_compile_run(&cap, &gguf, "moe", &with_flag, &run);
    let (_, llama) = read_npy_f64(&dir.join("moe.json.logits.npy"));
    let e = nmse(&ours, &llama);
    assert!(e <= MAX_NMSE, "--cpu-moe on the server: NMSE {e:e}");
    assert_same_decisions(&dir.join("moe.plan.ron"), &cap, 6);

    // The first block's experts only; then the refusals.
    let graph = s(&dir.join("moe.graph.ron"));
    let one = s(&dir.join("one.plan.ron"));
    let mut args = vec!["compile", &graph];
    args.extend(compile);
    args.extend(["--n-cpu-moe", "1", "-o", &one]);
    ggplan_ok(&args);
    let text = std::fs::read_to_string(&one).unwrap();
    let pinned_to_cpu = |name: &str| {
        let at = text.find(&format!("name: \"{name}\"")).unwrap();
        let line = &text[at..at + text[at..].find('\n').unwrap()];
        line.contains("pinned to cpu")
    };
    assert!(
        pinned_to_cpu("blk.0.ffn_up_exps.weight"),
        "block 0's experts"
    );
    assert!(!pinned_to_cpu("blk.1.ffn_up_exps.weight"), "block 1's");
    let out = s(&dir.join("bad.plan.ron"));
    let mut args = vec!["compile", &graph, "--target", "cpu+rpc0"];
    args.extend(["--n-cpu-moe", "3", "-o", &out]);
    let printed = common::ggplan_error(&args);
    assert!(
        printed.contains("--n-cpu-moe 3") && printed.contains("1..=2"),
        "{printed}"
    );
    let llama3 = random_gguf("llama3", &dir, &smollm2);
    let cap3 = dir.join("llama3.json");
    capture(&llama3, &cap3, &[]);
    let graph3 = dir.join("llama3.graph.ron");
    ggplan_ok(&["import", &s(&cap3), "-o", &s(&graph3)]);
    let printed = common::ggplan_error(&[
        "compile",
        &s(&graph3),
        "--target",
        "cpu+rpc0",
        "--cpu-moe",
        "-o",
        &out,
    ]);
    assert!(printed.contains("has no expert tensors"), "{printed}");
    assert!(!dir.join("bad.plan.ron").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

//! Llama 3 and Qwen 3 against llama.cpp, on tiny random GGUFs that gguf-py
//! writes (`tests/support/random_gguf.py`: 2 blocks, 64 wide, F32, SmolLM2's
//! vocabulary) and llama.cpp decodes through the capture tool with an F32
//! KV cache:
//!
//! - Llama 3 (`rope_freqs.weight`, rope's frequency factors) and Qwen 3 (q/k
//!   head norms, NeoX rope): `ggplan generate` from the GGUF gives llama.cpp's
//!   32 greedy tokens in exact precision and its prompt logits within NMSE 1e-9;
//! - the imported capture, compiled for `cpu` and for `cpu0+cpu1` by layers
//!   and by rows, gives llama.cpp's logits within NMSE 1e-9;
//! - on two loopback RPC servers (`-ts 1,2`, which puts one block on each
//!   and makes llama.cpp hold Llama 3's factors twice), `--policy ggml` makes
//!   llama.cpp's splits and copies and its plan gives llama.cpp's logits.

mod common;

use common::{ggplan_ok, scratch_dir};
use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::references::read_npy_f64;
use ggplan_tests::rpc_server::RpcServer;
use ggplan_tests::workspace_root;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROMPT: &str = "Once upon a time, in a small village by the sea, there lived a";
/// Exact precision against llama.cpp's F32 graph: only summation order differs.
const MAX_NMSE: f64 = 1e-9;

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Writes the random `arch` GGUF (`llama3` or `qwen3`) into `dir`.
fn random_gguf(arch: &str, dir: &Path, tokenizer: &Path) -> PathBuf {
    let out = dir.join(format!("{arch}.gguf"));
    let run = Command::new(workspace_root().join(".models/venv/bin/python"))
        .arg(workspace_root().join("tests/support/random_gguf.py"))
        .args([
            arch,
            &s(&out),
            "--tokenizer-from",
            &s(tokenizer),
            "--seed",
            "1",
        ])
        .output()
        .expect("python runs (scripts/setup.sh installs .models/venv)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// llama.cpp's decode of the prompt and 32 greedy tokens after it, F32 cache.
fn capture(gguf: &Path, out: &Path, flags: &[&str]) {
    let run = Command::new(workspace_root().join(".rpc/bin/llama-capture"))
        .arg(gguf)
        .arg(out)
        .args(["--prompt", PROMPT, "-t", "2", "-fa", "off"])
        .args(["-ctk", "f32", "-ctv", "f32", "--greedy", "32"])
        .args(flags)
        .output()
        .expect("llama-capture runs (scripts/llama-capture.sh build)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

fn nmse(ours: &[f64], llama: &[f64]) -> f64 {
    let err: f64 = ours.iter().zip(llama).map(|(a, b)| (a - b) * (a - b)).sum();
    err / llama.iter().map(|b| b * b).sum::<f64>()
}

fn capture_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Imports `cap` with its inputs, compiles it with `compile_args` and runs
/// it on `gguf` (with `run_args`): the logits.
fn import_compile_run(
    cap: &Path,
    gguf: &Path,
    name: &str,
    compile_args: &[&str],
    run_args: &[String],
) -> Vec<f64> {
    let dir = cap.parent().unwrap();
    let graph = dir.join(format!("{name}.graph.ron"));
    let inputs = dir.join(format!("{name}.inputs"));
    let plan = dir.join(format!("{name}.plan.ron"));
    let out = dir.join(format!("{name}.out"));
    ggplan_ok(&["import", &s(cap), "-o", &s(&graph), "--inputs", &s(&inputs)]);
    let mut compile = vec!["compile".to_string(), s(&graph)];
    compile.extend(compile_args.iter().map(|a| a.to_string()));
    compile.extend(["-o".into(), s(&plan)]);
    ggplan_ok(&compile.iter().map(String::as_str).collect::<Vec<_>>());
    let mut run = vec!["run".into(), s(&plan), "--weights".into(), s(gguf)];
    for entry in std::fs::read_dir(&inputs).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        run.extend(["--input".into(), format!("{stem}={}", s(&path))]);
    }
    run.extend(run_args.iter().cloned());
    run.extend([
        "--precision".into(),
        "exact".into(),
        "--save".into(),
        s(&out),
    ]);
    ggplan_ok(&run.iter().map(String::as_str).collect::<Vec<_>>());
    let (shape, logits) = read_npy_f64(&out.join("result_output.npy"));
    assert_eq!(shape, [16, 49152]);
    logits
}

/// Everything the module doc lists, for one architecture.
fn agrees_with_llama_cpp(arch: &str) {
    let Some(smollm2) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir(&format!("random-{arch}"));
    let gguf = random_gguf(arch, &dir, &smollm2);
    let cap = dir.join("one.json");
    capture(&gguf, &cap, &[]);
    let (_, llama) = read_npy_f64(&dir.join("one.json.logits.npy"));

    // The builder, from the GGUF.
    let dump = dir.join("prompt_logits.npy");
    let printed = ggplan_ok(&[
        "generate",
        "--gguf",
        &s(&gguf),
        "--prompt",
        PROMPT,
        "--max-tokens",
        "32",
        "--ctx",
        "64",
        "--precision",
        "exact",
        "--kv",
        "f32",
        "--json",
        "--dump-logits",
        &s(&dump),
    ]);
    let json_line = printed.lines().find(|l| l.starts_with('{')).unwrap();
    let got: serde_json::Value = serde_json::from_str(json_line).unwrap();
    let want = capture_json(&cap);
    assert_eq!(got["prompt_ids"], want["tokens"], "{arch}: prompt tokens");
    assert_eq!(
        got["generated_ids"], want["greedy"],
        "{arch}: greedy tokens"
    );
    let (_, ours) = read_npy_f64(&dump);
    let e = nmse(&ours, &llama);
    assert!(e <= MAX_NMSE, "{arch} generate: prompt logits NMSE {e:e}");

    // The import, on one device and split over two core groups.
    for (name, args) in [
        ("cpu", &["--target", "cpu"][..]),
        (
            "layer",
            &["--target", "cpu0+cpu1", "--split-mode", "layer"][..],
        ),
        ("row", &["--target", "cpu0+cpu1", "--split-mode", "row"][..]),
    ] {
        let ours = import_compile_run(&cap, &gguf, name, args, &[]);
        let e = nmse(&ours, &llama);
        assert!(e <= MAX_NMSE, "{arch} imported, {name}: NMSE {e:e}");
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
    let compile = [
        "--target",
        "cpu+rpc0+rpc1",
        "--split-mode",
        "layer",
        "--tensor-split",
        "1,2,0",
        "--policy",
        "ggml",
    ];
    let run = ["--rpc".to_string(), endpoints.clone()];
    let ours = import_compile_run(&cap_rpc, &gguf, "rpc", &compile, &run);
    let (_, llama_rpc) = read_npy_f64(&dir.join("rpc.json.logits.npy"));
    let e = nmse(&ours, &llama_rpc);
    assert!(e <= MAX_NMSE, "{arch} on RPC servers: NMSE {e:e}");
    let shown = ggplan_ok(&[
        "show",
        &s(&dir.join("rpc.plan.ron")),
        "--against",
        &s(&cap_rpc),
    ]);
    assert!(
        shown.contains("splits                 3                          3")
            && !shown.contains("(differs)"),
        "{arch}: {shown}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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

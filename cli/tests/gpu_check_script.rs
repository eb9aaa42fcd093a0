//! `scripts/gpu-check.sh all`, the checks a lent GPU host runs, run here on
//! the CPU (`GPU_CHECK_DEVICE=cpu`: `cpu` for `cuda0`, `cpu0+cpu1` for
//! `cpu+cuda0`) so that its assertions are known to pass on a correct build
//! and to fail on a wrong result, before a GPU lease is spent on them:
//!
//! - a selection covering every kind of assertion (SmolLM2's tokens and
//!   logits against the references, a bench, `run --check=all` on the example
//!   plans, the Q4_K_M comparison) passes, one summary line each, exit 0; the
//!   checks that need CUDA's tools say SKIP;
//! - the same SmolLM2 check against a reference with one token changed fails:
//!   exit 1, its FAIL line, and the figures that show why.
//!
//! Needs the real model and the set-up venv's numpy (skipped with a note
//! without them, a failure under `GGPLAN_REQUIRE_MODELS=1`).

mod common;

use common::scratch_dir;
use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::references::references;
use ggplan_tests::workspace_root;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `scripts/gpu-check.sh all OUT` on the CPU with `only` selecting the
/// checks and `refs` the SmolLM2 references; returns its output and summary.
fn gpu_check(gguf: &Path, refs: &Path, only: &str, out: &Path) -> (Output, String) {
    let root = workspace_root();
    let run = Command::new(root.join("scripts/gpu-check.sh"))
        .args(["all", &out.display().to_string()])
        .env("GPU_CHECK_DEVICE", "cpu")
        .env("GPU_CHECK_BIN", env!("CARGO_BIN_EXE_ggplan"))
        .env("GPU_CHECK_MODEL", gguf)
        .env("GPU_CHECK_REFS", refs)
        .env("GPU_CHECK_PYTHON", root.join(".models/venv/bin/python"))
        .env("GPU_CHECK_ONLY", only)
        .env("GPU_CHECK_RUNS", "2")
        .env_remove("RUST_LOG")
        .output()
        .expect("bash runs the script");
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap_or_default();
    (run, summary)
}

/// The set-up venv's Python with numpy, or a skip note.
fn numpy_available() -> bool {
    let python = workspace_root().join(".models/venv/bin/python");
    let found = Command::new(&python)
        .args(["-c", "import numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!(
            "skipped: {} with numpy missing; run scripts/setup.sh",
            python.display()
        );
    }
    found
}

#[test]
fn gpu_check_passes_on_a_correct_build_and_fails_on_a_wrong_token() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    if !numpy_available() {
        assert!(
            std::env::var_os("GGPLAN_REQUIRE_MODELS").is_none_or(|v| v != "1"),
            "GGPLAN_REQUIRE_MODELS=1 but the venv's numpy is missing"
        );
        return;
    }
    let refs = references().join("smollm2");
    let dir = scratch_dir("gpu-check");

    // Every kind of assertion; the checks that need CUDA's tools say SKIP.
    let expected = [
        ("ceiling", "SKIP"),
        ("smollm2_gpu", "PASS"),
        ("bench_decode", "PASS"),
        ("examples", "PASS"),
        ("memcheck", "SKIP"),
        ("q4km", "PASS"),
    ];
    let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    let only = format!("^({})$", names.join("|"));
    let (run, summary) = gpu_check(&gguf, &refs, &only, &dir.join("pass"));
    let printed = common::text(&run);
    assert!(run.status.success(), "{printed}\n{summary}");
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(lines.len(), expected.len() + 1, "{summary}");
    for (line, (name, word)) in lines.iter().zip(expected) {
        let head = format!("{word} {name}");
        assert!(line.starts_with(&head), "{line}\n{summary}");
    }
    assert!(summary.contains("tokens 32/32 as llama.cpp"), "{summary}");
    assert!(summary.contains("top-1 16/16"), "{summary}");
    assert!(summary.contains("same 32 tokens: True"), "{summary}");
    assert!(summary.contains("tokens/s"), "the bench figure: {summary}");
    assert_eq!(lines.last(), Some(&"failed checks: 0"));
    let log = std::fs::read_to_string(dir.join("pass/gpu-check.log")).expect("the log");
    assert!(log.contains("-- llama2l on cpu0+cpu1"), "{log}");

    // One generated token changed in the reference: the check must fail.
    let wrong = dir.join("wrong-refs");
    std::fs::create_dir_all(&wrong).unwrap();
    let text = std::fs::read_to_string(refs.join("greedy32_llamacpp_f32.json")).unwrap();
    let mut greedy: serde_json::Value = serde_json::from_str(&text).unwrap();
    greedy["generated_ids"][31] = serde_json::json!(7);
    std::fs::write(wrong.join("greedy32_llamacpp_f32.json"), greedy.to_string()).unwrap();
    std::fs::copy(
        refs.join("logits_torch_fp64.npy"),
        wrong.join("logits_torch_fp64.npy"),
    )
    .unwrap();
    let (run, summary) = gpu_check(&gguf, &wrong, "^smollm2_gpu$", &dir.join("fail"));
    let printed = common::text(&run);
    assert_eq!(run.status.code(), Some(1), "{printed}\n{summary}");
    assert!(summary.starts_with("FAIL smollm2_gpu"), "{summary}");
    assert!(summary.contains("tokens 31/32 as llama.cpp"), "{summary}");
    assert!(summary.ends_with("failed checks: 1\n"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

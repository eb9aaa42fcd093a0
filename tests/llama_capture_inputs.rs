//! The inputs `generate --prefill-graph` computes for an imported graph
//! (`models::capture::BatchInputs`) are, byte for byte, the ones llama.cpp
//! set for the batch it captured: token ids, positions, the key and value
//! cache indices and the attention mask, for SmolLM2's soft_max attention
//! (transposed V cache: one index per value element; F32 mask) and its
//! flash attention (V rows; F16 mask), at 16 tokens and at one, and the
//! output row `out_ids` picks when only the last token's logits are asked
//! for (`--last-logits`).

use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::workspace_root;
use ir::{DType, Role};
use models::capture::{BatchInputs, Capture, import, read_capture};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROMPT: &str = "Once upon a time, in a small village by the sea, there lived a";

/// Captures SmolLM2's first `tokens` prompt tokens with `flags` into `dir`.
fn capture(gguf: &Path, dir: &Path, tokens: usize, flags: &[&str]) -> Capture {
    let out = dir.join(format!("t{tokens}{}.json", flags.join("")));
    let run = Command::new(workspace_root().join(".rpc/bin/llama-capture"))
        .arg(gguf)
        .arg(&out)
        .args(["--prompt", PROMPT, "--tokens", &tokens.to_string()])
        .args(["-t", "1", "--ctx", "256"])
        .args(flags)
        .output()
        .expect("llama-capture runs (scripts/llama-capture.sh build)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    read_capture(&out).unwrap_or_else(|e| panic!("{e}"))
}

/// The bytes llama.cpp set for the capture tensor `c`, in the graph's
/// dtype `dtype` (cache indices are I64 in ggml, I32 once imported).
fn captured_bytes(capture: &Capture, c: usize, dtype: DType) -> Vec<u8> {
    let t = &capture.tensors[c];
    let data = t
        .data
        .as_ref()
        .unwrap_or_else(|| panic!("no values for '{}'", t.name));
    match (t.dtype.as_str(), dtype) {
        ("i64", DType::I32) => (data.chunks_exact(8))
            .flat_map(|b| (i64::from_le_bytes(b.try_into().unwrap()) as i32).to_le_bytes())
            .collect(),
        _ => data.clone(),
    }
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ggplan-batch-inputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn generation_sets_the_inputs_llama_cpp_set() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch();
    for (tokens, flags) in [
        (16, &["-fa", "off"][..]),
        (1, &["-fa", "off"][..]),
        (16, &["-fa", "on"][..]),
        (1, &["-fa", "on"][..]),
        // The last token's logits only: `out_ids` selects its row.
        (16, &["-fa", "off", "--last-logits"][..]),
    ] {
        let capture = capture(&gguf, &dir, tokens, flags);
        let imported = import(&capture, "smollm2").unwrap_or_else(|e| panic!("{e}"));
        let graph = &imported.graph;
        let batch = BatchInputs::of(graph, &|_| None).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        assert_eq!(batch.n_tokens(), tokens);
        assert_eq!(batch.last_row_only(), flags.contains(&"--last-logits"));
        assert_eq!(batch.n_kv(), 256, "{flags:?}: the mask covers the context");
        let ids: Vec<u32> = capture.tokens.iter().map(|&t| t as u32).collect();
        let ours = batch.values(&ids, 0).unwrap();
        let inputs: Vec<_> = graph.with_role(Role::Input).collect();
        assert_eq!(ours.len(), inputs.len(), "{flags:?}: every input set");
        for id in inputs {
            let t = graph.tensor(id);
            let c = imported.captured[id.index()].expect("an input comes from the capture");
            let want = captured_bytes(&capture, c, t.layout.dtype);
            let (_, got) = (ours.iter().find(|(name, _)| *name == t.name))
                .unwrap_or_else(|| panic!("{flags:?}: '{}' not set", t.name));
            assert!(
                *got == want,
                "{tokens} tokens {flags:?}: '{}' differs from llama.cpp's",
                t.name
            );
        }
        // One batch past the context is refused, not wrapped around.
        let err = batch.values(&ids, 256 - tokens + 1).unwrap_err();
        assert!(err.contains("do not fit the 256 cache rows"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

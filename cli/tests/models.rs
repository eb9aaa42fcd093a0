//! `ggplan generate` and `ggplan embed` on the real models, against the
//! references in `../shared/references/` (skipped with a note when
//! `scripts/setup.sh` has not installed the models):
//!
//! - SmolLM2-135M-Instruct, exact products and an F32 cache: the 32-token
//!   greedy continuation and its text equal llama.cpp's (F32 weights and cache),
//!   the prompt ids equal the reference's, and `--dump-logits` writes the prompt
//!   logits within 1e-3 of PyTorch fp64;
//! - all-MiniLM-L6-v2: `embed --save` writes [2, 384] embeddings with cosine
//!   similarity >= 0.99999 to PyTorch fp64's.

mod common;

use common::ggplan;
use ggplan_tests::models::{minilm_dir, smollm2_gguf};
use ggplan_tests::references::{read_json as json, read_npy_f64 as f32s, references};

#[test]
fn generate_reproduces_llama_cpp_greedy_continuation() {
    let Some(gguf) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 not installed (scripts/setup.sh)");
        return;
    };
    let refs = references().join("smollm2");
    let want = json(&refs.join("greedy32_llamacpp_f32.json"));
    let prompt = json(&refs.join("top20_torch_fp64.json"))["prompt_text_prefix"]
        .as_str()
        .expect("the reference prompt")
        .to_string();
    let dump = std::env::temp_dir().join(format!("ggplan-logits-{}.npy", std::process::id()));
    let out = ggplan(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        &prompt,
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
        dump.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(got["prompt_ids"], want["prompt_ids"]);
    assert_eq!(got["generated_ids"], want["generated_ids"]);
    assert_eq!(
        format!("{prompt}{}", got["text"].as_str().unwrap()),
        want["text"].as_str().unwrap()
    );
    assert!(got["decode_tokens_per_s"].as_f64().unwrap() > 0.0);

    let (shape, logits) = f32s(&dump);
    let (want_shape, want_logits) = f32s(&refs.join("logits_torch_fp64.npy"));
    assert_eq!(shape, want_shape);
    let diff = logits
        .iter()
        .zip(&want_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(diff <= 1e-3, "prompt logits differ by {diff:.3e}");
    let _ = std::fs::remove_file(&dump);
}

#[test]
fn generate_refuses_a_prompt_longer_than_the_context() {
    let Some(gguf) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 not installed (scripts/setup.sh)");
        return;
    };
    let out = ggplan(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "one two three four five six seven eight nine ten",
        "--ctx",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("longer than the context of 4"), "{err}");
}

#[test]
fn embed_matches_sentence_transformers() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not installed (scripts/setup.sh)");
        return;
    };
    let refs = references().join("minilm");
    let reference = json(&refs.join("reference.json"));
    let sentences: Vec<&str> = reference["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let save = std::env::temp_dir().join(format!("ggplan-embed-{}.npy", std::process::id()));
    let mut args = vec![
        "embed",
        "--hf",
        dir.to_str().unwrap(),
        "--save",
        save.to_str().unwrap(),
    ];
    args.extend(&sentences);
    let out = ggplan(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cosine similarity"), "{stdout}");
    let (shape, got) = f32s(&save);
    let (want_shape, want) = f32s(&refs.join("embeddings_torch_fp64.npy"));
    assert_eq!(shape, want_shape);
    let dim = shape[1] as usize;
    for (i, (a, b)) in got.chunks(dim).zip(want.chunks(dim)).enumerate() {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cosine = dot / (norm(a) * norm(b));
        assert!(cosine >= 0.99999, "sentence {i}: cosine {cosine}");
    }
    let _ = std::fs::remove_file(&save);
}

//! `ggplan generate` and `ggplan embed` on the real models, against the
//! references in `../shared/references/` (skipped with a note when
//! `scripts/setup.sh` has not installed the models):
//!
//! - SmolLM2-135M-Instruct, exact products and an F32 cache: the 32-token
//!   greedy continuation and its text equal llama.cpp's (F32 weights and cache),
//!   the prompt ids equal the reference's, and `--dump-logits` writes the prompt
//!   logits within 1e-3 of PyTorch fp64; decoding in context buckets (plans
//!   attending over 32 and 64 cache rows) gives the same continuation, and
//!   the same tokens as one full-context decode plan in fast precision with
//!   F32 and F16 caches;
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

/// `ggplan generate --json` on the reference prompt with `extra` arguments;
/// the JSON object and stderr.
fn generate_json(gguf: &str, max_tokens: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let refs = references().join("smollm2");
    let prompt = json(&refs.join("top20_torch_fp64.json"))["prompt_text_prefix"]
        .as_str()
        .expect("the reference prompt")
        .to_string();
    let mut args = vec![
        "-v",
        "generate",
        "--gguf",
        gguf,
        "--prompt",
        &prompt,
        "--max-tokens",
        max_tokens,
        "--json",
    ];
    args.extend(extra);
    let out = ggplan(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}{stderr}");
    (serde_json::from_str(stdout.trim()).unwrap(), stderr)
}

/// (attend, first_position) of each decode plan a `--json` run loaded.
fn decode_plans(got: &serde_json::Value) -> Vec<(i64, i64)> {
    got["decode_plans"]
        .as_array()
        .expect("decode_plans")
        .iter()
        .map(|p| {
            let field = |k: &str| p[k].as_i64().expect("an integer");
            (field("attend"), field("first_position"))
        })
        .collect()
}

#[test]
fn generate_in_context_buckets_equals_one_full_context_plan() {
    let Some(gguf) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 not installed (scripts/setup.sh)");
        return;
    };
    let gguf = gguf.to_str().unwrap();
    let want = json(&references().join("smollm2/greedy32_llamacpp_f32.json"));

    // Exact, F32 cache: decode buckets of 32 and 64 rows (the 16-token
    // prompt fills a bucket of 16 exactly) still give llama.cpp's continuation.
    let exact = ["--ctx", "64", "--precision", "exact", "--kv", "f32"];
    let (buckets, log) = generate_json(gguf, "32", &[&exact[..], &["--min-bucket", "16"]].concat());
    assert_eq!(buckets["generated_ids"], want["generated_ids"]);
    assert_eq!(decode_plans(&buckets), [(32, 16), (64, 32)]);
    for (attend, position) in [(32, 16), (64, 32)] {
        let line = format!("decode bucket switch at position {position}: plan over {attend} of 64");
        assert!(log.contains(&line), "no '{line}' in:\n{log}");
    }
    let (full, _) = generate_json(gguf, "32", &[&exact[..], &["--min-bucket", "64"]].concat());
    assert_eq!(full["generated_ids"], want["generated_ids"]);
    assert_eq!(decode_plans(&full), [(64, 16)]);

    // Fast (8-bit activations, where a last-bit difference can change a later
    // token), a 512-row context: the same tokens with buckets 32, 64 as with
    // one plan over all 512 rows.
    for kv in ["f32", "f16"] {
        let fast = ["--ctx", "512", "--precision", "fast", "--kv", kv];
        let with =
            |min: &str| generate_json(gguf, "48", &[&fast[..], &["--min-bucket", min]].concat()).0;
        let (buckets, full) = (with("32"), with("512"));
        assert_eq!(decode_plans(&buckets), [(32, 16), (64, 32)], "{kv}");
        assert_eq!(decode_plans(&full), [(512, 16)], "{kv}");
        assert_eq!(buckets["generated_ids"], full["generated_ids"], "{kv}");
    }
}

#[test]
fn generate_refuses_a_smallest_bucket_that_is_not_a_power_of_two() {
    let Some(gguf) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 not installed (scripts/setup.sh)");
        return;
    };
    let out = ggplan(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "Hi",
        "--min-bucket",
        "100",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("power of two, not 100"), "{err}");
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

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
//!   similarity >= 0.99999 to PyTorch fp64's, from the Hugging Face folder and
//!   from the folder converted to GGUF as llama.cpp's converter would.
//!
//! `graph` and `embed` on a tiny random BERT GGUF, and their errors on bad
//! GGUF files (unknown architecture, a decoder given to `embed`, an unknown
//! tokenizer model, a missing tensor), run everywhere.

mod common;

use common::{ggplan, ggplan_error, scratch_dir, text};
use ggplan_tests::bert_gguf::{Convert, HfBert, write_bert_gguf};
use ggplan_tests::gguf_writer::Meta;
use ggplan_tests::models::{minilm_dir, smollm2_gguf};
use ggplan_tests::references::{read_json as json, read_npy_f64 as f32s, references};
use std::path::Path;

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
    let err = ggplan_error(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "Hi",
        "--min-bucket",
        "100",
    ]);
    assert!(err.contains("power of two, not 100"), "{err}");
}

#[test]
fn generate_refuses_a_prompt_longer_than_the_context() {
    let Some(gguf) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 not installed (scripts/setup.sh)");
        return;
    };
    let err = ggplan_error(&[
        "generate",
        "--gguf",
        gguf.to_str().unwrap(),
        "--prompt",
        "one two three four five six seven eight nine ten",
        "--ctx",
        "4",
    ]);
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

/// `model` written as llama.cpp's converter would write it, into `dir`.
fn bert_gguf(dir: &std::path::Path, name: &str, model: &HfBert, how: &Convert) -> String {
    let path = dir.join(name);
    write_bert_gguf(&path, model, how);
    path.to_str().unwrap().to_owned()
}

#[test]
fn embed_gguf_matches_sentence_transformers() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not installed (scripts/setup.sh)");
        return;
    };
    let scratch = scratch_dir("embed-gguf");
    let gguf = bert_gguf(
        &scratch,
        "minilm.gguf",
        &HfBert::read(&dir),
        &Convert::default(),
    );
    let refs = references().join("minilm");
    let reference = json(&refs.join("reference.json"));
    let sentences: Vec<&str> = reference["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let save = scratch.join("emb.npy");
    let mut args = vec!["embed", "--gguf", &gguf, "--save", save.to_str().unwrap()];
    args.extend(&sentences);
    let out = ggplan(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("(12 tokens)"), "{stdout}");
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
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn graph_and_embed_read_a_bert_gguf() {
    let scratch = scratch_dir("tiny-bert-gguf");
    let gguf = bert_gguf(&scratch, "tiny.gguf", &HfBert::tiny(5), &Convert::default());
    let ron = scratch.join("tiny.ron");
    let out = ggplan(&[
        "graph",
        "--gguf",
        &gguf,
        "--tokens",
        "6",
        "-o",
        ron.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let graph = std::fs::read_to_string(&ron).unwrap();
    assert!(
        graph.contains("\"blk.1.layer_output_norm.bias\""),
        "{graph}"
    );

    let err = ggplan_error(&["graph", "--gguf", &gguf, "--decode", "-o", "x.ron"]);
    assert!(err.contains("not BERT encoders"), "{err}");

    let out = ggplan(&["embed", "--gguf", &gguf, "Hello worlds!", "unbelievable"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"Hello worlds!\" (6 tokens)") && stdout.contains("cosine similarity"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn bad_gguf_files_are_named_errors() {
    let scratch = scratch_dir("bad-bert-gguf");
    let tiny = HfBert::tiny(5);
    let set = |key: &str, value: Meta| Convert {
        set: vec![(key.to_owned(), value)],
        ..Convert::default()
    };
    let unknown = bert_gguf(
        &scratch,
        "t5.gguf",
        &tiny,
        &set("general.architecture", Meta::Str("t5")),
    );
    for args in [
        ["graph", "--gguf", &unknown, "-o", "x.ron"].as_slice(),
        ["embed", "--gguf", &unknown, "a"].as_slice(),
    ] {
        let err = ggplan_error(args);
        assert!(
            err.contains("t5.gguf: architecture 't5' is not supported")
                && err.contains(
                    "llama, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3 (decoders), bert (encoders)"
                ),
            "{args:?}: {err}"
        );
    }

    let llama = bert_gguf(
        &scratch,
        "llama.gguf",
        &tiny,
        &set("general.architecture", Meta::Str("llama")),
    );
    let err = ggplan_error(&["embed", "--gguf", &llama, "a"]);
    assert!(err.contains("is a decoder"), "{err}");

    let rwkv = bert_gguf(
        &scratch,
        "rwkv.gguf",
        &tiny,
        &set("tokenizer.ggml.model", Meta::Str("rwkv")),
    );
    let err = ggplan_error(&["embed", "--gguf", &rwkv, "a"]);
    assert!(err.contains("tokenizer.ggml.model is \"rwkv\""), "{err}");

    let missing = bert_gguf(
        &scratch,
        "missing.gguf",
        &tiny,
        &Convert {
            drop_tensors: vec!["blk.0.attn_q.bias".into()],
            ..Convert::default()
        },
    );
    let err = ggplan_error(&["embed", "--gguf", &missing, "a"]);
    assert!(
        err.contains("missing.gguf: missing tensor 'blk.0.attn_q.bias'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn quantize_never_replaces_a_file_unasked() {
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/gguf/llama-tiny.gguf")
        .display()
        .to_string();
    let scratch = scratch_dir("quantize-force");
    let out = scratch.join("tiny.q8_0.gguf").display().to_string();
    let args = ["quantize", &input, &out, "--type", "q8_0"];
    let first = ggplan(&args);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("11 tensors as q8_0"),
        "{}",
        text(&first)
    );
    // A second run without --force: exit 1, the file as it was.
    std::fs::write(&out, b"the user's file").unwrap();
    let err = ggplan_error(&args);
    assert!(
        err.contains("tiny.q8_0.gguf exists; pass --force to replace it"),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"the user's file");
    let forced = ggplan(&[&args[..], &["--force"]].concat());
    assert!(forced.status.success(), "{}", text(&forced));
    assert!(std::fs::read(&out).unwrap().starts_with(b"GGUF"));
    let err = ggplan_error(&["quantize", &input, &out, "--type", "q3_k", "--force"]);
    assert!(err.contains("unknown --type \"q3_k\" (known: "), "{err}");
    let _ = std::fs::remove_dir_all(&scratch);
}

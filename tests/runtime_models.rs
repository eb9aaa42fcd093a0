//! The real models through the compiler and the CPU runtime (JIT kernels,
//! SIMD quantized matmuls, weights mapped in place from the files), against
//! the PyTorch float64 references in `../shared/references/`:
//!
//! - SmolLM2-135M-Instruct, Q4_1: with `Precision::Exact` (weights
//!   dequantized, f32 products) the 16-token prefill logits are within 1e-3 of
//!   `logits_torch_fp64.npy` with the same top-1 at every position; with
//!   `Precision::Fast` (8-bit activations, as llama.cpp) top-1 agrees on at
//!   least 15 of 16 positions (references/README.md's bar);
//! - all-MiniLM-L6-v2: every reference sentence's embedding has cosine
//!   similarity >= 0.99999 with PyTorch fp64's.
//!
//! Without the model files (scripts/setup.sh installs them) each test prints
//! a skip line and passes.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::models::{minilm_dir, smollm2_gguf};
use ggplan_tests::references::{argmax, read_json, read_npy_f64, references, token_ids};
use ir::files::gguf::GgufFile;
use models::bert::{self, BertConfig};
use models::llama::{self, LlamaConfig};
use runtime::{LoadOptions, Precision, Runtime, Weights};
use std::sync::Arc;

fn load(graph: &ir::Graph, weights: &Weights, precision: Precision) -> Runtime {
    let plan = compile(
        graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .plan;
    let options = LoadOptions {
        threads: 2,
        precision,
        ..LoadOptions::default()
    };
    let rt =
        Runtime::load(Arc::new(plan), weights.clone(), &options).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        rt.load_report().fallbacks.is_empty(),
        "reference fallbacks: {:?}",
        rt.load_report().fallbacks
    );
    rt
}

#[test]
fn smollm2_prefill_on_the_runtime_matches_torch_fp64() {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not found (GGPLAN_SMOLLM2_GGUF); run scripts/setup.sh");
        return;
    };
    let reference = read_json(&references().join("smollm2/top20_torch_fp64.json"));
    let tokens: Vec<i32> = token_ids(&reference["token_ids"])
        .iter()
        .map(|&t| t as i32)
        .collect();
    let n_tokens = tokens.len();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let cfg = LlamaConfig::from_gguf(&file, n_tokens as i64).unwrap_or_else(|e| panic!("{e}"));
    let graph = llama::build_prefill(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let weights = Weights::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let (_, want) = read_npy_f64(&references().join("smollm2/logits_torch_fp64.npy"));
    let n_vocab = cfg.n_vocab as usize;

    for (precision, min_agree, max_abs) in [
        (Precision::Exact, n_tokens, Some(1e-3)),
        (Precision::Fast, 15, None),
    ] {
        let mut rt = load(&graph, &weights, precision);
        assert!(
            rt.load_report().weight_bytes_in_place > 0,
            "GGUF tensors are 32-byte aligned: used in place"
        );
        rt.set_input_i32(llama::TOKENS, &tokens).unwrap();
        rt.run().unwrap();
        let logits = rt.output_f32(llama::LOGITS).unwrap();
        let mut agree = 0;
        let mut diff = 0.0f64;
        for (got, want) in logits.chunks(n_vocab).zip(want.chunks(n_vocab)) {
            let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
            agree += usize::from(argmax(&got) == argmax(want));
            diff = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(diff, f64::max);
        }
        eprintln!(
            "SmolLM2 on the runtime, {precision:?}: max abs diff {diff:.3e}, top-1 {agree}/{n_tokens}"
        );
        assert!(
            agree >= min_agree,
            "{precision:?}: top-1 agrees on {agree}/{n_tokens}"
        );
        if let Some(tol) = max_abs {
            assert!(
                diff <= tol,
                "{precision:?}: max abs diff {diff:.3e} > {tol:e}"
            );
        }
    }
}

#[test]
fn minilm_embeddings_on_the_runtime_match_torch_fp64() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not found (GGPLAN_MINILM_DIR); run scripts/setup.sh");
        return;
    };
    let reference = read_json(&references().join("minilm/reference.json"));
    let (shape, want) = read_npy_f64(&references().join("minilm/embeddings_torch_fp64.npy"));
    let n_embd = shape[1] as usize;
    let weights = Weights::open(dir.join("model.safetensors")).unwrap_or_else(|e| panic!("{e}"));
    let sentences = reference["token_ids"].as_array().expect("token_ids");
    for (i, (ids, want)) in sentences.iter().zip(want.chunks(n_embd)).enumerate() {
        let tokens: Vec<i32> = token_ids(ids).iter().map(|&t| t as i32).collect();
        let cfg =
            BertConfig::from_hf_dir(&dir, tokens.len() as i64).unwrap_or_else(|e| panic!("{e}"));
        let graph = bert::build_encoder(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let mut rt = load(&graph, &weights, Precision::Exact);
        rt.set_input_i32(bert::TOKENS, &tokens).unwrap();
        rt.run().unwrap();
        let got: Vec<f64> = rt
            .output_f32(bert::EMBEDDING)
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let dot: f64 = got.iter().zip(want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cosine = dot / (norm(&got) * norm(want));
        eprintln!(
            "MiniLM sentence {i} on the runtime: 1 - cosine = {:.2e}",
            1.0 - cosine
        );
        assert!(cosine >= 0.99999, "sentence {i}: cosine {cosine}");
    }
}

//! Greedy generation with SmolLM2-135M-Instruct through the cached graphs
//! (`models::llama::build_cached`) and the reference evaluator, against the
//! references in `../shared/references/smollm2/`:
//!
//! - the cached prefill of the 16-token prompt matches PyTorch fp64's logits
//!   (`logits_torch_fp64.npy`) to 1e-3 max abs, as the plain prefill does;
//! - each of `DECODE_STEPS` decode steps, fed llama.cpp's greedy token (F32
//!   weights and F32 cache, `greedy32_llamacpp_f32.json`) with the KV cache
//!   carried over from the previous run, picks llama.cpp's next token.
//!
//! Skips with a printed note when the model is not installed (scripts/setup.sh).

use ggplan_tests::generation::{logits_and_state, step_bindings};
use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::workspace_root;
use ir::files::gguf::GgufFile;
use ir::files::npy::{NpyData, read_npy};
use ir::{DType, Graph};
use kernels::evaluate::{Bindings, Weights};
use kernels::reference::Dense;
use models::llama::{self, CacheConfig, LlamaConfig};
use std::collections::BTreeMap;
use std::time::Instant;

/// Decode steps checked (each costs a full pass over the weights in the
/// scalar reference evaluator).
const DECODE_STEPS: usize = 3;
const LOGITS_TOL: f64 = 1e-3;

fn ids(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .expect("an array of token ids")
        .iter()
        .map(|t| t.as_i64().expect("token ids are integers"))
        .collect()
}

/// Column `j` of logits `[n_vocab, n]`.
fn argmax(logits: &[f64], n_vocab: usize, j: usize) -> i64 {
    let col = &logits[j * n_vocab..(j + 1) * n_vocab];
    let mut best = 0;
    for (i, &v) in col.iter().enumerate() {
        if v > col[best] {
            best = i;
        }
    }
    best as i64
}

/// One step: `tokens` at `n_past` over `state`; returns the logits and the new state.
fn step(
    g: &Graph,
    file: &GgufFile,
    n_ctx: i64,
    n_past: i64,
    tokens: &[i64],
    state: BTreeMap<String, Dense>,
) -> (Vec<f64>, BTreeMap<String, Dense>) {
    let bindings = Bindings {
        weights: Weights::File(file),
        inputs: step_bindings(tokens, n_past, (n_ctx, n_ctx), state),
        random_inputs: None,
    };
    logits_and_state(g, &bindings)
}

#[test]
fn smollm2_greedy_decode_with_the_cache_follows_llama_cpp() {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not found (GGPLAN_SMOLLM2_GGUF); run scripts/setup.sh");
        return;
    };
    let refs = workspace_root().join("../shared/references/smollm2");
    let greedy_path = refs.join("greedy32_llamacpp_f32.json");
    let text = std::fs::read_to_string(&greedy_path)
        .unwrap_or_else(|e| panic!("{}: {e}", greedy_path.display()));
    let greedy: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (prompt, generated) = (ids(&greedy["prompt_ids"]), ids(&greedy["generated_ids"]));

    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let cache = CacheConfig {
        n_ctx: 64,
        kv_dtype: DType::F32,
    };
    let cfg = LlamaConfig::from_gguf(&file, prompt.len() as i64).unwrap_or_else(|e| panic!("{e}"));
    let n_vocab = cfg.n_vocab as usize;
    let prefill = llama::build_cached(&cfg, &cache).unwrap_or_else(|e| panic!("{e}"));
    let decode = llama::build_cached(&LlamaConfig { n_tokens: 1, ..cfg }, &cache)
        .unwrap_or_else(|e| panic!("{e}"));

    let start = Instant::now();
    let (logits, mut state) = step(&prefill, &file, cache.n_ctx, 0, &prompt, BTreeMap::new());
    eprintln!(
        "SmolLM2 cached prefill of {} tokens: {:.1} s",
        prompt.len(),
        start.elapsed().as_secs_f64()
    );
    let torch = read_npy(refs.join("logits_torch_fp64.npy")).unwrap_or_else(|e| panic!("{e}"));
    let NpyData::F32(want) = torch.data else {
        panic!("logits_torch_fp64.npy is stored as float32");
    };
    let max_diff = logits
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - f64::from(*w)).abs())
        .fold(0.0, f64::max);
    eprintln!("SmolLM2 cached prefill vs torch fp64: max abs diff {max_diff:.3e}");
    assert_eq!(logits.len(), want.len());
    assert!(max_diff <= LOGITS_TOL, "max abs diff {max_diff:e}");
    assert_eq!(argmax(&logits, n_vocab, prompt.len() - 1), generated[0]);

    for i in 0..DECODE_STEPS {
        let start = Instant::now();
        let n_past = (prompt.len() + i) as i64;
        let (logits, next) = step(
            &decode,
            &file,
            cache.n_ctx,
            n_past,
            &generated[i..=i],
            state,
        );
        state = next;
        let top = argmax(&logits, n_vocab, 0);
        eprintln!(
            "SmolLM2 decode step {i} at position {n_past}: token {top} (llama.cpp {}), {:.1} s",
            generated[i + 1],
            start.elapsed().as_secs_f64()
        );
        assert_eq!(top, generated[i + 1], "decode step {i}");
    }
}

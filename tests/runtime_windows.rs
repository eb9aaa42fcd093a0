//! Decode plans over a window of the KV cache on the CPU runtime
//! (`models::llama::build_cached_attending`, what `ggplan generate`'s context
//! buckets load): a sequence decoded with each step in the smallest window
//! (doubling from 8 rows) that holds it gives, to the bit, the logits of the
//! same sequence decoded with one plan over the whole cache, for F32 and F16
//! caches, quantized (Q4_1) and float weights, both precisions, 1 to 3
//! threads. Each sequence has its own state store; the window plans share
//! theirs, as generation's plans do.
//!
//! Bit for bit matters: with 8-bit activations (`Precision::Fast`) a
//! difference in the last bit can move a value across a quantization step and
//! change a greedy token many steps later (seen on SmolLM2 when the prefill
//! took a window, which is why `generate`'s prefill attends over the whole
//! cache).

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ir::{DType, RopeMode, RopeParams};
use models::llama::{self, CacheConfig, LlamaConfig, LlamaNames, step_inputs};
use runtime::{LoadOptions, Precision, Runtime, StateStore, Weights};
use std::sync::Arc;

const N_CTX: i64 = 1024;
const PROMPT: [i32; 5] = [3, 17, 5, 29, 11];
/// Decoded tokens: positions 5..40 cross the windows 8, 16, 32 and 64.
const STEPS: usize = 300;

/// Two layers, 4 query heads over 2 KV heads of width 32.
fn config(n_tokens: i64, weight_dtype: DType) -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 256,
        n_vocab: 96,
        n_tokens,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 64, 10000.0),
        weight_dtype,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

fn load(graph: &ir::Graph, options: &LoadOptions) -> Runtime {
    let plan = compile(
        graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .plan;
    Runtime::load(Arc::new(plan), Weights::Random { seed: 11 }, options)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn feed(rt: &mut Runtime, tokens: &[i32], n_past: i64, attend: i64) {
    let step = step_inputs(n_past, tokens.len() as i64, N_CTX, attend).unwrap();
    rt.set_input_i32(llama::TOKENS, tokens).unwrap();
    rt.set_input_i32(llama::POSITIONS, &step.pos).unwrap();
    rt.set_input_i32(llama::KV_IDX, &step.kv_idx).unwrap();
    rt.set_input_f32(llama::KQ_MASK, &step.kq_mask).unwrap();
}

/// Logits of every step (the prompt's last, then each decoded token's),
/// greedy, the prefill attending over the whole cache and each decode step
/// over `window(n_past + 1)` rows.
fn decode(
    weights: DType,
    cache: CacheConfig,
    precision: Precision,
    threads: usize,
    window: impl Fn(i64) -> i64,
) -> Vec<Vec<f32>> {
    let options = LoadOptions {
        threads,
        precision,
        state: Some(Arc::new(StateStore::new())),
        ..LoadOptions::default()
    };
    let prefill = llama::build_cached(&config(PROMPT.len() as i64, weights), &cache).unwrap();
    let mut rt = load(&prefill, &options);
    feed(&mut rt, &PROMPT, 0, N_CTX);
    rt.run().unwrap();
    let logits = rt.output_f32(llama::LOGITS).unwrap();
    let n_vocab = logits.len() / PROMPT.len();
    let mut all = vec![logits[logits.len() - n_vocab..].to_vec()];
    let mut current: Option<(i64, Runtime)> = None;
    let first = PROMPT.len() as i64;
    for n_past in first..first + STEPS as i64 {
        let next = argmax(all.last().unwrap());
        let attend = window(n_past + 1);
        if current.as_ref().map(|c| c.0) != Some(attend) {
            let g = llama::build_cached_attending(&config(1, weights), &cache, attend).unwrap();
            current = Some((attend, load(&g, &options)));
        }
        let rt = &mut current.as_mut().unwrap().1;
        feed(rt, &[next], n_past, attend);
        rt.run().unwrap();
        all.push(rt.output_f32(llama::LOGITS).unwrap());
    }
    all
}

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as i32
}

#[test]
fn decoding_in_windows_gives_the_full_cache_logits_bit_for_bit() {
    let doubling = |rows: i64| (3..).map(|p| 1i64 << p).find(|&w| w >= rows).unwrap();
    // 3 threads split the 4 heads' scores along the cache rows.
    for (kv_dtype, weights, precision, threads) in [
        (DType::F32, DType::F32, Precision::Fast, 1),
        (DType::F32, DType::Q4_1, Precision::Fast, 3),
        (DType::F16, DType::Q4_1, Precision::Fast, 2),
        (DType::F16, DType::Q4_1, Precision::Exact, 1),
    ] {
        let cache = CacheConfig {
            n_ctx: N_CTX,
            kv_dtype,
        };
        let label =
            format!("{kv_dtype} cache, {weights} weights, {precision:?}, {threads} threads");
        let full = decode(weights, cache, precision, threads, |_| N_CTX);
        let windows = decode(weights, cache, precision, threads, doubling);
        for (step, (w, f)) in windows.iter().zip(&full).enumerate() {
            let max = w
                .iter()
                .zip(f)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                w == f,
                "{label}: step {step} (window {}) differs by up to {max:e}",
                doubling(PROMPT.len() as i64 + step as i64)
            );
        }
    }
}

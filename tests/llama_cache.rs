//! The cached llama graphs (`models::llama::build_cached`) against the prefill
//! graph with the reference evaluator: a prompt through the prefill-shaped
//! cached graph, then decode steps of one token each with the KV cache carried
//! between runs (state read back from the evaluator's memory and bound as the
//! next run's state), must give the logits of one prefill over all the tokens.
//! The compiled plans of both cached graphs (one device, and split over two)
//! must compute the same logits and cache contents as the graphs.
//!
//! Tolerances (NMSE = sum (a - b)^2 / sum b^2 over all logits):
//! - F32 cache: `F32_NMSE` = 1e-10; the two graphs compute the same values in a
//!   different grouping, so only f32 rounding of intermediates can differ;
//! - F16 cache: `F16_NMSE` = 1e-5; K and V are rounded to f16 (relative error
//!   up to 2^-11) before attention. Measured: 3.3e-8 (llama GQA) and 6.2e-8
//!   (qwen2-like).
//!   The test also requires the F16 run to differ from the F32 one, so the
//!   cache is really stored in f16.

use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ggplan_tests::generation::{self, i32_input, logits_and_state};
use ir::{DType, Graph, Role, RopeMode, RopeParams};
use kernels::evaluate::evaluate_plan;
use kernels::evaluate::{Bindings, Weights, evaluate};
use kernels::reference::Dense;
use models::llama::{self, CacheConfig, LlamaConfig, LlamaNames, build_cached, build_prefill};
use std::collections::BTreeMap;

const F32_NMSE: f64 = 1e-10;
const F16_NMSE: f64 = 1e-5;
const SEED: u64 = 7;
const TOKENS: [i64; 8] = [3, 17, 5, 29, 11, 0, 38, 22];
const PROMPT: usize = 5;

/// Two layers, GQA with 4 query heads over 2 KV heads.
fn small() -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 32,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 8,
        n_ff: 48,
        n_vocab: 40,
        n_tokens: TOKENS.len() as i64,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 8, 10000.0),
        weight_dtype: DType::F32,
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

/// qwen2's variant: NeoX rope, q/k/v biases, tied output.
fn qwen2_like() -> LlamaConfig {
    LlamaConfig {
        rope: RopeParams::plain(RopeMode::Neox, 8, 1e6),
        qkv_bias: true,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        tied_output: true,
        ..small()
    }
}

fn cache(kv_dtype: DType) -> CacheConfig {
    CacheConfig {
        n_ctx: 16,
        kv_dtype,
    }
}

/// Logits `[n_vocab, TOKENS.len()]` of one prefill over all of `TOKENS`.
fn prefill_logits(cfg: &LlamaConfig) -> Vec<f64> {
    let g = build_prefill(cfg).unwrap();
    let inputs = BTreeMap::from([(llama::TOKENS.to_owned(), i32_input(TOKENS))]);
    run(&g, inputs).0
}

/// Evaluates `g` with random weights; returns the logits and every state
/// tensor's values after the run, by name.
fn run(g: &Graph, inputs: BTreeMap<String, Dense>) -> (Vec<f64>, BTreeMap<String, Dense>) {
    let bindings = Bindings {
        weights: Weights::Random { seed: SEED },
        inputs,
        random_inputs: None,
    };
    logits_and_state(g, &bindings)
}

/// The inputs of a step of `TOKENS[n_past..n_past + n]` over `state`, for a
/// graph attending over the first `attend` of `n_ctx` cache rows.
fn step_bindings(
    n_past: usize,
    n: usize,
    window: (i64, i64),
    state: BTreeMap<String, Dense>,
) -> BTreeMap<String, Dense> {
    generation::step_bindings(&TOKENS[n_past..n_past + n], n_past as i64, window, state)
}

/// Logits of `TOKENS` generated as a `PROMPT`-token prefill then one decode
/// step per remaining token, the cache carried over from `initial` state
/// (zeros where not given), every graph attending over the whole cache.
fn generated_logits(
    cfg: &LlamaConfig,
    cache: CacheConfig,
    initial: BTreeMap<String, Dense>,
) -> Vec<f64> {
    generated_logits_in_windows(cfg, cache, initial, |_| cache.n_ctx)
}

/// [`generated_logits`] with each step's graph attending over the first
/// `window(rows)` cache rows, `rows` being the tokens cached after the step.
fn generated_logits_in_windows(
    cfg: &LlamaConfig,
    cache: CacheConfig,
    initial: BTreeMap<String, Dense>,
    window: impl Fn(i64) -> i64,
) -> Vec<f64> {
    let graph = |n_tokens: usize, attend: i64| {
        let cfg = LlamaConfig {
            n_tokens: n_tokens as i64,
            ..cfg.clone()
        };
        llama::build_cached_attending(&cfg, &cache, attend).unwrap()
    };
    let mut state = initial;
    let mut logits = Vec::new();
    let mut n_past = 0;
    let steps = std::iter::once(PROMPT).chain(std::iter::repeat_n(1, TOKENS.len() - PROMPT));
    for n in steps {
        let attend = window((n_past + n) as i64);
        let g = graph(n, attend);
        let inputs = step_bindings(n_past, n, (cache.n_ctx, attend), state);
        let (out, next_state) = run(&g, inputs);
        logits.extend(out);
        state = next_state;
        n_past += n;
    }
    logits
}

fn nmse(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let err: f64 = got.iter().zip(want).map(|(a, b)| (a - b).powi(2)).sum();
    let norm: f64 = want.iter().map(|b| b * b).sum();
    err / norm
}

fn check(cfg: &LlamaConfig, label: &str) {
    let want = prefill_logits(cfg);
    assert!(want.iter().all(|v| v.is_finite()));
    let exact = generated_logits(cfg, cache(DType::F32), BTreeMap::new());
    let e = nmse(&exact, &want);
    eprintln!("{label}: F32 cache NMSE {e:.2e}");
    assert!(
        e < F32_NMSE,
        "{label}: F32 cache NMSE {e:e} >= {F32_NMSE:e}"
    );
    let half = generated_logits(cfg, cache(DType::F16), BTreeMap::new());
    let h = nmse(&half, &want);
    eprintln!("{label}: F16 cache NMSE {h:.2e}");
    assert!(
        h < F16_NMSE,
        "{label}: F16 cache NMSE {h:e} >= {F16_NMSE:e}"
    );
    assert!(
        h > e,
        "{label}: the F16 cache changes nothing; is it really f16?"
    );
}

#[test]
fn cached_prefill_and_decode_steps_match_one_prefill() {
    check(&small(), "llama GQA 4/2");
}

#[test]
fn cached_qwen2_variant_matches_one_prefill() {
    check(&qwen2_like(), "qwen2-like (neox, biases, tied)");
}

#[test]
fn stale_cache_rows_are_masked_out() {
    // A cache full of large values (as a longer, earlier sequence would leave
    // it) must not change anything: every row not yet written is masked.
    let cfg = small();
    let c = cache(DType::F32);
    let kv_width = cfg.n_head_kv * cfg.head_dim;
    let mut garbage = BTreeMap::new();
    for il in 0..cfg.n_layer {
        for (name, ne) in [
            (llama::cache_k_name(il), [kv_width, c.n_ctx, 1, 1]),
            (llama::cache_v_name(il), [c.n_ctx, kv_width, 1, 1]),
        ] {
            let n = (ne[0] * ne[1]) as usize;
            let data = (0..n).map(|i| 100.0 + (i % 7) as f64 * 37.0).collect();
            garbage.insert(name, Dense::new(ne, data));
        }
    }
    let clean = generated_logits(&cfg, c, BTreeMap::new());
    let stale = generated_logits(&cfg, c, garbage.clone());
    assert_eq!(stale, clean);

    // The garbage does reach attention when the mask lets it: a prefill step
    // whose mask hides nothing sees it.
    let g = build_cached(&LlamaConfig { n_tokens: 2, ..cfg }, &c).unwrap();
    let unmasked = |state: BTreeMap<String, Dense>| {
        let mut inputs = state;
        inputs.insert(llama::TOKENS.into(), i32_input([3, 17]));
        inputs.insert(llama::POSITIONS.into(), i32_input([0, 1]));
        inputs.insert(llama::KV_IDX.into(), i32_input([0, 1]));
        inputs.insert(llama::KQ_MASK.into(), Dense::zeros([c.n_ctx, 2, 1, 1]));
        run(&g, inputs).0
    };
    assert_ne!(unmasked(garbage), unmasked(BTreeMap::new()));
}

#[test]
fn attending_over_a_window_of_the_cache_changes_no_logit() {
    // Windows doubling from 2 rows (2, 4, 8, then the whole 16-row cache),
    // each step in the smallest that holds its tokens: the same logits, to
    // the bit, as attending over every row (the rows left out are masked).
    let c = cache(DType::F32);
    let doubling = |rows: i64| (1..).map(|p| 1i64 << p).find(|&w| w >= rows).unwrap();
    for cfg in [small(), qwen2_like()] {
        let full = generated_logits(&cfg, c, BTreeMap::new());
        let windows = generated_logits_in_windows(&cfg, c, BTreeMap::new(), doubling);
        assert_eq!(windows, full);
        // The exact window (no spare row at all) too.
        let tight = generated_logits_in_windows(&cfg, c, BTreeMap::new(), |rows| rows);
        assert_eq!(tight, full);
    }
}

#[test]
fn cached_graphs_compile_and_their_plans_compute_them() {
    // The compiler's view of the cache: state written through set_rows and
    // read through views, on one device and split across two.
    let cfg = small();
    let c = cache(DType::F16);
    let prefill = build_cached(
        &LlamaConfig {
            n_tokens: 5,
            ..cfg.clone()
        },
        &c,
    )
    .unwrap();
    let decode = build_cached(
        &LlamaConfig {
            n_tokens: 1,
            ..cfg.clone()
        },
        &c,
    )
    .unwrap();
    let window = llama::build_cached_attending(
        &LlamaConfig {
            n_tokens: 1,
            ..cfg.clone()
        },
        &c,
        8,
    )
    .unwrap();
    let full = (c.n_ctx, c.n_ctx);
    let (_, state) = run(&prefill, step_bindings(0, 5, full, BTreeMap::new()));
    let offload = PlacementOptions {
        offload_layers: Some(1),
        ..Default::default()
    };
    for (g, inputs) in [
        (&prefill, step_bindings(0, 5, full, BTreeMap::new())),
        (&decode, step_bindings(5, 1, full, state.clone())),
        (&window, step_bindings(5, 1, (c.n_ctx, 8), state)),
    ] {
        let bindings = || Bindings {
            weights: Weights::Random { seed: SEED },
            inputs: inputs.clone(),
            random_inputs: None,
        };
        let want = evaluate(g, &bindings()).unwrap();
        for (target, placement, policy) in [
            ("cpu", PlacementOptions::default(), Policy::Ggml),
            ("cpu+cuda0", offload.clone(), Policy::Cost),
        ] {
            let name = format!(
                "{} tokens over {} rows on {target}",
                g.tensor(g.find(llama::LOGITS).unwrap()).ne()[1],
                g.tensor(g.find(llama::KQ_MASK).unwrap()).ne()[0]
            );
            let opts = CompileOptions {
                policy,
                placement,
                micro_batches: 1,
                tensor_split: None,
                spelled: vec![],
            };
            let plan = compile(g, &Target::preset(target).unwrap(), &opts)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .plan;
            let have = evaluate_plan(&plan, &bindings()).unwrap_or_else(|e| panic!("{name}: {e}"));
            for id in g.with_role(Role::Output).chain(g.with_role(Role::State)) {
                let t = &g.tensor(id).name;
                let got = have
                    .read_name(t)
                    .unwrap_or_else(|| panic!("{name}: no {t}"));
                // Fused kernels skip the f32 rounding between ops, hence not exact.
                let e = nmse(&got.data, &want.read(id).data);
                assert!(e <= F32_NMSE, "{name}: '{t}' NMSE {e:e}");
            }
        }
    }
}

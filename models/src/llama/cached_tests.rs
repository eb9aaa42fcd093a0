//! Structure of the cached graphs and the step inputs (the values are checked
//! against the prefill graph with the reference evaluator in
//! tests/llama_cache.rs).

use super::*;
use ir::{Op, Role, RopeMode};

/// Two layers, 4 query heads over 2 KV heads of width 8.
fn small(n_tokens: i64) -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 32,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 8,
        n_ff: 48,
        n_vocab: 40,
        n_tokens,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 8, 10000.0),
        weight_dtype: DType::F32,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

const F32_CACHE: CacheConfig = CacheConfig {
    n_ctx: 16,
    kv_dtype: DType::F32,
};

/// (name, dtype, ne) of every tensor with `role`.
fn leafs(g: &Graph, role: Role) -> Vec<(String, DType, [i64; 4])> {
    g.with_role(role)
        .map(|id| {
            let t = g.tensor(id);
            (t.name.clone(), t.dtype(), t.ne())
        })
        .collect()
}

#[test]
fn prefill_and_decode_graphs_declare_the_same_state() {
    for kv_dtype in [DType::F32, DType::F16] {
        let cache = CacheConfig {
            kv_dtype,
            ..F32_CACHE
        };
        let prefill = build_cached(&small(5), &cache).unwrap();
        let decode = build_cached(&small(1), &cache).unwrap();
        let state = leafs(&prefill, Role::State);
        assert_eq!(state, leafs(&decode, Role::State));
        assert_eq!(
            state,
            vec![
                (cache_k_name(0), kv_dtype, [16, 16, 1, 1]),
                (cache_v_name(0), kv_dtype, [16, 16, 1, 1]),
                (cache_k_name(1), kv_dtype, [16, 16, 1, 1]),
                (cache_v_name(1), kv_dtype, [16, 16, 1, 1]),
            ]
        );
        assert_eq!(
            leafs(&decode, Role::Input),
            vec![
                (TOKENS.into(), DType::I32, [1, 1, 1, 1]),
                (POSITIONS.into(), DType::I32, [1, 1, 1, 1]),
                (KV_IDX.into(), DType::I32, [1, 1, 1, 1]),
                (KQ_MASK.into(), DType::F32, [16, 1, 1, 1]),
            ]
        );
        assert_eq!(leafs(&prefill, Role::Weight), leafs(&decode, Role::Weight));
        let out = prefill.find(LOGITS).unwrap();
        assert_eq!(prefill.tensor(out).ne(), [40, 5, 1, 1]);
        assert_eq!(prefill.tensor(out).role, Role::Output);
    }
}

#[test]
fn attention_reads_the_cache_through_its_writes_without_packing_it() {
    let g = build_cached(&small(3), &F32_CACHE).unwrap();
    let by = |name: &str| g.tensor(g.find(name).unwrap());
    let root = |name: &str| {
        let at = g.storage_of(g.find(name).unwrap());
        (g.tensor(at.root).name.clone(), at.offset)
    };
    // kq reads K through the set_rows result, as a strided view of the cache.
    let kq = by("l1.kq");
    assert_eq!(g.tensor(kq.srcs[0]).name, "l1.k_cached");
    let k_cached = by("l1.k_cached");
    assert_eq!(g.tensor(k_cached.srcs[0]).op, Some(Op::SetRows));
    assert_eq!(k_cached.ne(), [8, 16, 2, 1]);
    assert_eq!(k_cached.layout.nb[..3], [4, 64, 32]);
    assert_eq!(root("l1.k_cached"), ("l1.cache_k".into(), 0));
    // kqv reads V straight from the cache: no cont of cache memory anywhere.
    let kqv = by("l1.kqv");
    assert_eq!(g.tensor(kqv.srcs[0]).name, "l1.v_cached");
    assert_eq!(by("l1.v_cached").ne(), [16, 8, 2, 1]);
    assert!(by("l1.v_cached").layout.is_contiguous());
    assert_eq!(root("l1.v_cached"), ("l1.cache_v".into(), 0));
    for id in g.nodes() {
        let t = g.tensor(id);
        if t.op == Some(Op::Cont) {
            let src = g.storage_of(t.srcs[0]).root;
            assert_ne!(
                g.tensor(src).role,
                Role::State,
                "'{}' packs a cache",
                t.name
            );
        }
    }
    assert_eq!(by("l0.kq").ne(), [16, 3, 4, 1]);
    assert_eq!(by("l0.kqv").ne(), [8, 3, 4, 1]);
}

#[test]
fn unsupported_caches_are_refused_by_name() {
    let q8 = CacheConfig {
        kv_dtype: DType::Q8_0,
        ..F32_CACHE
    };
    let err = build_cached(&small(1), &q8).unwrap_err().to_string();
    assert!(err.contains("l0.cache_k") && err.contains("q8_0"), "{err}");
    let err = build_cached(&small(17), &F32_CACHE)
        .unwrap_err()
        .to_string();
    assert!(err.contains("17") && err.contains("n_ctx = 16"), "{err}");
}

#[test]
fn qkv_biases_follow_their_projections() {
    let cfg = LlamaConfig {
        qkv_bias: true,
        rope_factors: false,
        qk_norm: QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        rope: RopeParams::plain(RopeMode::Neox, 8, 1e6),
        ..small(2)
    };
    for g in [
        build_prefill(&cfg).unwrap(),
        build_cached(&cfg, &F32_CACHE).unwrap(),
    ] {
        for (w, node, n) in [
            ("blk.1.attn_q.bias", "l1.q_bias", 32),
            ("blk.1.attn_k.bias", "l1.k_bias", 16),
            ("blk.1.attn_v.bias", "l1.v_bias", 16),
        ] {
            let bias = g.find(w).unwrap_or_else(|| panic!("no weight {w}"));
            assert_eq!(g.tensor(bias).ne(), [n, 1, 1, 1]);
            let add = g.tensor(g.find(node).unwrap());
            assert_eq!((add.op, add.srcs[1]), (Some(Op::Add), bias));
        }
    }
    let plain = build_prefill(&small(2)).unwrap();
    assert!(plain.find("l0.q_bias").is_none() && plain.find("blk.0.attn_q.bias").is_none());
}

#[test]
fn step_inputs_mask_causally_and_hide_unfilled_rows() {
    let s = step_inputs(3, 2, 6, 6).unwrap();
    assert_eq!(s.pos, [3, 4]);
    assert_eq!(s.kv_idx, [3, 4]);
    let ninf = f32::NEG_INFINITY;
    assert_eq!(
        s.kq_mask,
        [
            0.0, 0.0, 0.0, 0.0, ninf, ninf, // query at 3: rows 0..=3
            0.0, 0.0, 0.0, 0.0, 0.0, ninf, // query at 4: rows 0..=4; row 5 unfilled
        ]
    );
    let first = step_inputs(0, 1, 4, 4).unwrap();
    assert_eq!(first.kq_mask, [0.0, ninf, ninf, ninf]);
    let full = step_inputs(0, 4, 4, 4).unwrap();
    assert_eq!(full.pos, [0, 1, 2, 3]);
    assert_eq!(full.kq_mask[15], 0.0);
}

#[test]
fn step_inputs_refuse_a_context_overflow_naming_both_numbers() {
    let err = step_inputs(14, 3, 16, 16).unwrap_err();
    assert_eq!(
        err,
        StepError::ContextOverflow {
            n_past: 14,
            n_tokens: 3,
            n_ctx: 16
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("17") && msg.contains("n_ctx = 16"), "{msg}");
    assert!(matches!(
        step_inputs(-1, 1, 4, 4),
        Err(StepError::BadCount(_))
    ));
    assert!(matches!(
        step_inputs(0, 0, 4, 4),
        Err(StepError::BadCount(_))
    ));
    assert!(step_inputs(15, 1, 16, 16).is_ok());
}

#[test]
fn a_window_of_the_whole_cache_is_the_plain_cached_graph() {
    for t in [1, 5] {
        let plain = build_cached(&small(t), &F32_CACHE).unwrap();
        let window = build_cached_attending(&small(t), &F32_CACHE, F32_CACHE.n_ctx).unwrap();
        assert_eq!(ir::text::to_ron(&window), ir::text::to_ron(&plain));
    }
}

#[test]
fn a_smaller_window_reads_a_prefix_of_the_full_sized_cache() {
    let f16 = CacheConfig {
        kv_dtype: DType::F16,
        ..F32_CACHE
    };
    let g = build_cached_attending(&small(3), &f16, 4).unwrap();
    assert_eq!(ir::verify::verify(&g), vec![]);
    // The state is the full cache, as in every other plan sharing it.
    let full = build_cached(&small(1), &f16).unwrap();
    assert_eq!(leafs(&g, Role::State), leafs(&full, Role::State));
    let by = |name: &str| g.tensor(g.find(name).unwrap());
    let root = |name: &str| {
        let at = g.storage_of(g.find(name).unwrap());
        (g.tensor(at.root).name.clone(), at.offset)
    };
    assert_eq!(by(KQ_MASK).ne(), [4, 3, 1, 1]);
    // K: the first 4 slots, strided over heads as before (f16: es = 2).
    let k = by("l1.k_cached");
    assert_eq!(k.ne(), [8, 4, 2, 1]);
    assert_eq!(k.layout.nb[..3], [2, 32, 16]);
    assert_eq!(root("l1.k_cached"), ("l1.cache_k".into(), 0));
    // V (transposed): the first 4 elements of each 16-slot row.
    let v = by("l1.v_cached");
    assert_eq!((v.op, v.ne()), (Some(Op::View { offset: 0 }), [4, 8, 2, 1]));
    assert_eq!(v.layout.nb[..3], [2, 32, 256]);
    assert_eq!(g.tensor(v.srcs[0]).op, Some(Op::SetRows));
    assert_eq!(root("l1.v_cached"), ("l1.cache_v".into(), 0));
    // Writes still index the whole cache.
    let set = by("l1.k_cache_set");
    assert_eq!(set.ne(), [16, 16, 1, 1]);
    assert_eq!(by("l0.kq").ne(), [4, 3, 4, 1]);
    assert_eq!(by("l0.kqv").ne(), [8, 3, 4, 1]);
}

#[test]
fn windows_outside_the_cache_or_smaller_than_the_batch_are_refused_by_name() {
    for attend in [0, 17] {
        let err = build_cached_attending(&small(1), &F32_CACHE, attend)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(KQ_MASK) && err.contains(&format!("attend = {attend}")),
            "{err}"
        );
    }
    let err = build_cached_attending(&small(5), &F32_CACHE, 4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("5 tokens") && err.contains("attend = 4"),
        "{err}"
    );
}

#[test]
fn step_inputs_over_a_window_mask_its_rows_and_refuse_what_does_not_fit() {
    let ninf = f32::NEG_INFINITY;
    let s = step_inputs(2, 1, 16, 4).unwrap();
    assert_eq!((s.pos, s.kv_idx), (vec![2], vec![2]));
    assert_eq!(s.kq_mask, [0.0, 0.0, 0.0, ninf]);
    assert_eq!(
        step_inputs(3, 2, 16, 4),
        Err(StepError::WindowOverflow {
            n_past: 3,
            n_tokens: 2,
            attend: 4
        })
    );
    let msg = step_inputs(3, 2, 16, 4).unwrap_err().to_string();
    assert!(msg.contains("5") && msg.contains("attend = 4"), "{msg}");
    assert_eq!(
        step_inputs(0, 1, 16, 32),
        Err(StepError::WindowBeyondContext {
            attend: 32,
            n_ctx: 16
        })
    );
    // Past the cache itself, the context overflow is what is reported.
    assert!(matches!(
        step_inputs(16, 1, 16, 8),
        Err(StepError::ContextOverflow { .. })
    ));
    assert!(matches!(
        step_inputs(0, 1, 16, 0),
        Err(StepError::BadCount(_))
    ));
}

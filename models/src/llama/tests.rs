use super::*;
use ir::{Role, RopeMode};

/// SmolLM2-135M's shapes (9 query heads over 3 KV heads), two layers.
fn smollm2_like(n_tokens: i64) -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 576,
        n_head: 9,
        n_head_kv: 3,
        head_dim: 64,
        n_ff: 1536,
        n_vocab: 49152,
        n_tokens,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 64, 100000.0),
        weight_dtype: DType::Q4_1,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::Q8_0,
        output_dtype: DType::Q8_0,
        tied_output: true,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

fn ne(g: &Graph, name: &str) -> [i64; 4] {
    let id = g.find(name).unwrap_or_else(|| panic!("no tensor '{name}'"));
    g.tensor(id).ne()
}

#[test]
fn gqa_shapes_follow_ggml_broadcast() {
    let g = build_prefill(&smollm2_like(16)).unwrap();
    assert_eq!(ne(&g, "blk.1.attn_k.weight"), [576, 192, 1, 1]);
    assert_eq!(ne(&g, "l1.q_perm"), [64, 16, 9, 1]);
    assert_eq!(ne(&g, "l1.k_perm"), [64, 16, 3, 1]);
    assert_eq!(ne(&g, "l1.v_t"), [16, 64, 3, 1]);
    assert_eq!(ne(&g, "l1.kq"), [16, 16, 9, 1]);
    assert_eq!(ne(&g, "l1.kqv"), [64, 16, 9, 1]);
    assert_eq!(ne(&g, "l1.kqv_merged"), [576, 16, 1, 1]);
    assert_eq!(ne(&g, LOGITS), [49152, 16, 1, 1]);
    let logits = g.tensor(g.find(LOGITS).unwrap());
    assert_eq!(
        g.tensor(logits.srcs[0]).name,
        "token_embd.weight",
        "tied output"
    );
    assert_eq!(
        g.with_role(Role::Output).collect::<Vec<_>>(),
        vec![g.find(LOGITS).unwrap()]
    );
}

#[test]
fn weights_carry_gguf_names_and_dtypes() {
    let g = build_prefill(&smollm2_like(4)).unwrap();
    let weights: Vec<(String, DType)> = g
        .with_role(Role::Weight)
        .map(|id| (g.tensor(id).name.clone(), g.tensor(id).dtype()))
        .collect();
    assert_eq!(weights.len(), 1 + 2 * 9 + 1, "no output.weight when tied");
    assert_eq!(weights[0], ("token_embd.weight".into(), DType::Q8_0));
    assert_eq!(weights[1], ("blk.0.attn_norm.weight".into(), DType::F32));
    assert_eq!(weights[2], ("blk.0.attn_q.weight".into(), DType::Q4_1));
    assert_eq!(weights[9], ("blk.0.ffn_down.weight".into(), DType::Q4_1));
    assert_eq!(weights[19], ("output_norm.weight".into(), DType::F32));

    let untied = build_prefill(&LlamaConfig {
        tied_output: false,
        ..smollm2_like(4)
    })
    .unwrap();
    let out = untied
        .find("output.weight")
        .expect("untied output projection");
    assert_eq!(untied.tensor(out).ne(), [576, 49152, 1, 1]);
}

#[test]
fn example_names_do_not_collide_with_nodes() {
    let cfg = LlamaConfig {
        names: LlamaNames::Example,
        ..smollm2_like(8)
    };
    let g = build_prefill(&cfg).unwrap();
    assert!(g.find("l0.attn_norm.weight").is_some());
    let node = g.tensor(g.find("l0.attn_norm").unwrap());
    assert!(
        !node.is_leaf(),
        "l0.attn_norm is the normalised activation, as in ggml"
    );
}

#[test]
fn heads_that_do_not_group_fail_at_kq() {
    let cfg = LlamaConfig {
        n_head_kv: 4,
        ..smollm2_like(8)
    };
    match build_prefill(&cfg) {
        Err(Error::Op {
            op: "mul_mat",
            name,
            ..
        }) => assert_eq!(name, "l0.kq"),
        other => panic!("expected a mul_mat error at l0.kq, got {other:?}"),
    }
}

#[test]
fn positions_and_mask_are_constants() {
    let g = build_prefill(&smollm2_like(5)).unwrap();
    let pos = g.tensor(g.find(POSITIONS).unwrap());
    assert_eq!(
        (pos.role, pos.dtype(), pos.ne()),
        (Role::Constant, DType::I32, [5, 1, 1, 1])
    );
    let mask = g.tensor(g.find(KQ_MASK).unwrap());
    assert_eq!(mask.init, Some(ConstInit::CausalMask { n_past: 0 }));
    assert_eq!(mask.ne(), [5, 5, 1, 1]);
    let tokens = g.tensor(g.find(TOKENS).unwrap());
    assert_eq!((tokens.role, tokens.dtype()), (Role::Input, DType::I32));
}

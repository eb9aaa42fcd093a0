use super::*;
use ir::Role;

/// all-MiniLM-L6-v2's shapes, two layers, 12 tokens.
fn minilm_like() -> BertConfig {
    BertConfig {
        n_layer: 2,
        n_embd: 384,
        n_head: 12,
        n_ff: 1536,
        n_vocab: 30522,
        n_ctx_train: 512,
        n_types: 2,
        n_tokens: 12,
        eps: 1e-12,
        weight_dtype: DType::F32,
        l2_normalize: true,
    }
}

#[test]
fn output_is_one_pooled_normalised_vector() {
    let g = build_encoder(&minilm_like()).unwrap();
    let outputs: Vec<_> = g.with_role(Role::Output).collect();
    assert_eq!(outputs, vec![g.find(EMBEDDING).unwrap()]);
    let out = g.tensor(outputs[0]);
    assert_eq!((out.dtype(), out.ne()), (DType::F32, [384, 1, 1, 1]));
    assert_eq!(out.op, Some(ir::Op::Div));
    let mean = g.tensor(g.find("pool.mean").unwrap());
    assert_eq!(
        mean.ne(),
        [1, 384, 1, 1],
        "mean over the 12 tokens of each feature"
    );
    let kq = g.tensor(g.find("l1.kq_soft_max").unwrap());
    assert_eq!(kq.ne(), [12, 12, 12, 1]);
    assert_eq!(kq.srcs.len(), 1, "no mask");
    let scale = 1.0 / 32f32.sqrt();
    assert_eq!(
        kq.op,
        Some(ir::Op::SoftMax {
            scale,
            max_bias: 0.0
        }),
        "head_dim 32"
    );
}

#[test]
fn weights_carry_hugging_face_names() {
    let g = build_encoder(&minilm_like()).unwrap();
    let weights: Vec<&str> = g
        .with_role(Role::Weight)
        .map(|id| g.tensor(id).name.as_str())
        .collect();
    assert_eq!(weights.len(), 5 + 2 * 16);
    let shape = |name: &str| {
        g.tensor(g.find(name).unwrap_or_else(|| panic!("no '{name}'")))
            .ne()
    };
    assert_eq!(
        shape("embeddings.word_embeddings.weight"),
        [384, 30522, 1, 1]
    );
    assert_eq!(
        shape("embeddings.position_embeddings.weight"),
        [384, 512, 1, 1]
    );
    assert_eq!(
        shape("embeddings.token_type_embeddings.weight"),
        [384, 2, 1, 1]
    );
    assert_eq!(shape("embeddings.LayerNorm.bias"), [384, 1, 1, 1]);
    assert_eq!(
        shape("encoder.layer.1.attention.self.query.weight"),
        [384, 384, 1, 1]
    );
    assert_eq!(
        shape("encoder.layer.1.attention.output.LayerNorm.weight"),
        [384, 1, 1, 1]
    );
    assert_eq!(
        shape("encoder.layer.1.intermediate.dense.weight"),
        [384, 1536, 1, 1]
    );
    assert_eq!(
        shape("encoder.layer.1.intermediate.dense.bias"),
        [1536, 1, 1, 1]
    );
    assert_eq!(
        shape("encoder.layer.1.output.dense.weight"),
        [1536, 384, 1, 1]
    );
    assert_eq!(
        shape("encoder.layer.1.output.LayerNorm.bias"),
        [384, 1, 1, 1]
    );
}

#[test]
fn unnormalised_output_is_the_mean() {
    let g = build_encoder(&BertConfig {
        l2_normalize: false,
        ..minilm_like()
    })
    .unwrap();
    let out = g.tensor(g.find(EMBEDDING).unwrap());
    assert_eq!((out.op, out.ne()), (Some(ir::Op::Reshape), [384, 1, 1, 1]));
    assert!(g.find("embd.l2").is_none());
}

#[test]
fn too_many_tokens_is_an_error_naming_the_positions() {
    let err = build_encoder(&BertConfig {
        n_tokens: 513,
        ..minilm_like()
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("embeddings.position_embeddings.weight"),
        "{err}"
    );
}

#[test]
fn heads_that_do_not_divide_the_width_fail() {
    let err = build_encoder(&BertConfig {
        n_head: 7,
        ..minilm_like()
    })
    .unwrap_err();
    assert!(matches!(err, Error::Op { op: "reshape", .. }), "{err}");
}

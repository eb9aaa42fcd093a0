use super::*;
use ir::{Graph, Role};

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
        embd_dtype: DType::F32,
        pooling: Pooling::Mean,
        l2_normalize: true,
        names: BertNames::HuggingFace,
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

#[test]
fn gguf_names_follow_llama_cpp_and_keep_the_graph() {
    let hf = build_encoder(&minilm_like()).unwrap();
    let gguf = build_encoder(&BertConfig {
        names: BertNames::Gguf,
        embd_dtype: DType::F16,
        weight_dtype: DType::F16,
        ..minilm_like()
    })
    .unwrap();
    let weights = |g: &Graph| -> Vec<(String, DType, [i64; 4])> {
        g.with_role(Role::Weight)
            .map(|id| {
                let t = g.tensor(id);
                (t.name.clone(), t.dtype(), t.ne())
            })
            .collect()
    };
    let names: Vec<String> = weights(&gguf).into_iter().map(|w| w.0).collect();
    assert_eq!(
        names[..7],
        [
            "token_embd.weight",
            "position_embd.weight",
            "token_types.weight",
            "token_embd_norm.weight",
            "token_embd_norm.bias",
            "blk.0.attn_q.weight",
            "blk.0.attn_q.bias",
        ]
    );
    for stem in [
        "attn_k",
        "attn_v",
        "attn_output",
        "attn_output_norm",
        "ffn_up",
        "ffn_down",
        "layer_output_norm",
    ] {
        for suffix in ["weight", "bias"] {
            let name = format!("blk.1.{stem}.{suffix}");
            assert!(names.contains(&name), "{name} in {names:?}");
        }
    }
    // Same shapes in the same order; the token table and the layer matrices
    // take their dtypes, everything else stays F32.
    for ((hn, hd, hne), (gn, gd, gne)) in weights(&hf).into_iter().zip(weights(&gguf)) {
        assert_eq!(hne, gne, "{hn} vs {gn}");
        let matrix = gn == "token_embd.weight"
            || (hne[1] > 1 && gn.starts_with("blk.") && !gn.contains("norm"));
        assert_eq!(gd, if matrix { DType::F16 } else { hd }, "{gn}");
    }
    // The nodes are the same, name for name.
    let nodes = |g: &Graph| -> Vec<(String, Option<ir::Op>)> {
        g.tensors()
            .iter()
            .filter(|t| !t.is_leaf())
            .map(|t| (t.name.clone(), t.op))
            .collect()
    };
    assert_eq!(nodes(&hf), nodes(&gguf));
}

#[test]
fn cls_pooling_reads_the_first_token() {
    for l2 in [true, false] {
        let g = build_encoder(&BertConfig {
            pooling: Pooling::Cls,
            l2_normalize: l2,
            ..minilm_like()
        })
        .unwrap();
        assert!(g.find("pool.mean").is_none());
        let cls = g.tensor(g.find("pool.cls").unwrap());
        assert_eq!(cls.ne(), [384, 1, 1, 1]);
        assert_eq!(cls.op, Some(ir::Op::View { offset: 0 }));
        let out = g.tensor(g.find(EMBEDDING).unwrap());
        assert_eq!(out.ne(), [384, 1, 1, 1]);
        let want = if l2 { ir::Op::Div } else { ir::Op::Cont };
        assert_eq!(out.op, Some(want));
    }
}

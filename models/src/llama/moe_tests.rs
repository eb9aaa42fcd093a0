//! Qwen 3 MoE and Mixtral: the config read from a tiny `qwen3moe` or `llama` GGUF (tensors of
//! zeros; only shapes and metadata matter), every refusal naming its key or
//! tensor, and the builder's MoE FFN against a direct f64 computation of
//! llama.cpp's routing on the reference evaluator.

use super::*;
use crate::Error as ModelError;
use ir::RopeMode;
use ir::files::gguf::{GgufFile, GgufValue};
use ir::files::gguf_write::{GgufTensorData, write_gguf};
use kernels::evaluate::{Bindings, Weights, evaluate};
use std::collections::BTreeMap;

/// 1 block, 8 wide, 2 query heads over 1 KV head of 4, 4 experts of width 6,
/// 2 per token, vocabulary 16.
const N_EXPERT: u64 = 4;

/// What a test changes in the tiny file: keys set (`Some`) or removed
/// (`None`), tensors reshaped (`Some`) or removed, tensors added.
#[derive(Default)]
struct Edits {
    keys: Vec<(&'static str, Option<GgufValue>)>,
    tensors: Vec<(&'static str, Option<Vec<u64>>)>,
    add: Vec<(&'static str, Vec<u64>)>,
}

fn tiny_qwen3moe(name: &str, edits: Edits) -> GgufFile {
    tiny_moe("qwen3moe", name, edits)
}

/// Mixtral as llama.cpp reads it: a `llama` file with experts, no head norms,
/// experts as wide as `feed_forward_length` (no key of their own).
fn tiny_mixtral(name: &str, edits: Edits) -> GgufFile {
    tiny_moe("llama", name, edits)
}

/// The tiny MoE file of `arch` (`qwen3moe`, `llama` or `olmoe`; the last two
/// have experts `feed_forward_length` wide): see the constants.
fn tiny_moe(arch: &str, name: &str, edits: Edits) -> GgufFile {
    let qwen = arch == "qwen3moe";
    let norms = arch != "llama";
    let key = |k: &str| format!("{arch}.{k}");
    let mut keys: Vec<(String, GgufValue)> = vec![
        (
            "general.architecture".into(),
            GgufValue::String(arch.into()),
        ),
        (key("block_count"), GgufValue::U32(1)),
        (key("embedding_length"), GgufValue::U32(8)),
        (key("attention.head_count"), GgufValue::U32(2)),
        (key("attention.head_count_kv"), GgufValue::U32(1)),
        (key("attention.key_length"), GgufValue::U32(4)),
        (
            key("feed_forward_length"),
            GgufValue::U32(if qwen { 20 } else { 6 }),
        ),
        (
            key("attention.layer_norm_rms_epsilon"),
            GgufValue::F32(1e-6),
        ),
        (key("rope.freq_base"), GgufValue::F32(1e6)),
        (key("expert_count"), GgufValue::U32(N_EXPERT as u32)),
        (key("expert_used_count"), GgufValue::U32(2)),
    ];
    if qwen {
        keys.push((key("expert_feed_forward_length"), GgufValue::U32(6)));
    }
    for (key, value) in edits.keys {
        keys.retain(|(k, _)| k != key);
        if let Some(v) = value {
            keys.push((key.into(), v));
        }
    }
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![8, 16]),
        ("blk.0.attn_norm.weight".into(), vec![8]),
        ("blk.0.attn_q.weight".into(), vec![8, 8]),
        ("blk.0.attn_k.weight".into(), vec![8, 4]),
        ("blk.0.attn_v.weight".into(), vec![8, 4]),
        ("blk.0.attn_output.weight".into(), vec![8, 8]),
        ("blk.0.ffn_norm.weight".into(), vec![8]),
        ("blk.0.ffn_gate_inp.weight".into(), vec![8, N_EXPERT]),
        ("blk.0.ffn_gate_exps.weight".into(), vec![8, 6, N_EXPERT]),
        ("blk.0.ffn_up_exps.weight".into(), vec![8, 6, N_EXPERT]),
        ("blk.0.ffn_down_exps.weight".into(), vec![6, 8, N_EXPERT]),
        ("output_norm.weight".into(), vec![8]),
    ];
    if norms {
        tensors.push(("blk.0.attn_q_norm.weight".into(), vec![4]));
        tensors.push(("blk.0.attn_k_norm.weight".into(), vec![4]));
    }
    for (name, ne) in edits.tensors {
        let i = (tensors.iter().position(|(n, _)| n == name))
            .unwrap_or_else(|| panic!("no tensor {name} to edit"));
        match ne {
            Some(ne) => tensors[i].1 = ne,
            None => {
                tensors.remove(i);
            }
        }
    }
    tensors.extend(edits.add.into_iter().map(|(n, ne)| (n.to_string(), ne)));
    let bytes: Vec<Vec<u8>> = (tensors.iter())
        .map(|(_, ne)| vec![0u8; 4 * ne.iter().product::<u64>() as usize])
        .collect();
    let data: Vec<GgufTensorData<'_>> = (tensors.iter().zip(&bytes))
        .map(|((name, ne), data)| GgufTensorData {
            name,
            dtype: DType::F32,
            ne,
            data,
        })
        .collect();
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "ggplan-{arch}-{}-{n}-{name}.gguf",
        std::process::id()
    ));
    write_gguf(&path, &keys, &data).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    // The map stays valid after the name is removed (Unix semantics).
    let _ = std::fs::remove_file(&path);
    file
}

fn refusal(name: &str, edits: Edits) -> (ModelError, String) {
    let file = tiny_qwen3moe(name, edits);
    let err = LlamaConfig::from_gguf(&file, 3).expect_err("the file must be refused");
    let text = err.to_string();
    (err, text)
}

#[test]
fn a_qwen3moe_file_reads_its_experts_and_binds() {
    let file = tiny_qwen3moe("good", Edits::default());
    let cfg = LlamaConfig::from_gguf(&file, 3).unwrap_or_else(|e| panic!("{e}"));
    let moe = Moe {
        n_expert: 4,
        n_expert_used: 2,
        n_ff_exp: 6,
        renormalise: true,
    };
    assert_eq!(cfg.moe, Some(moe));
    assert_eq!(cfg.rope.mode, RopeMode::Neox);
    assert!(cfg.qk_norm == QkNorm::PerHead && cfg.tied_output);
    let g = build_prefill(&cfg).unwrap();
    let ops = |kind| {
        (g.nodes())
            .filter(|&id| g.tensor(id).op.as_ref().map(ir::Op::kind) == Some(kind))
            .count()
    };
    assert_eq!(ops(ir::OpKind::MulMatId), 3, "gate, up and down experts");
    assert_eq!(ops(ir::OpKind::Argsort), 1);
    assert!(g.find("l0.ffn_moe_out").is_some() && g.find("l0.ffn_out").is_none());
    // The cached graphs bind the same weights.
    let cache = CacheConfig {
        n_ctx: 8,
        kv_dtype: DType::F32,
    };
    build_cached(&LlamaConfig { n_tokens: 1, ..cfg }, &cache).unwrap();
}

#[test]
fn a_llama_file_with_experts_is_mixtral() {
    let file = tiny_mixtral("mixtral", Edits::default());
    let cfg = LlamaConfig::from_gguf(&file, 3).unwrap_or_else(|e| panic!("{e}"));
    let moe = Moe {
        n_expert: 4,
        n_expert_used: 2,
        n_ff_exp: 6,
        renormalise: true,
    };
    assert_eq!(cfg.moe, Some(moe), "experts feed_forward_length wide");
    assert_eq!(cfg.rope.mode, RopeMode::Normal);
    assert_eq!(cfg.qk_norm, QkNorm::None);
    let g = build_prefill(&cfg).unwrap();
    let experts = (g.nodes())
        .filter(|&id| g.tensor(id).op.as_ref().map(ir::Op::kind) == Some(ir::OpKind::MulMatId))
        .count();
    assert_eq!(experts, 3, "gate, up and down experts");

    // The width key is read only to check it: llama.cpp ignores it for llama.
    let same = Edits {
        keys: vec![("llama.expert_feed_forward_length", Some(GgufValue::U32(6)))],
        ..Edits::default()
    };
    LlamaConfig::from_gguf(&tiny_mixtral("same-width", same), 3).unwrap();
    let other = Edits {
        keys: vec![("llama.expert_feed_forward_length", Some(GgufValue::U32(3)))],
        ..Edits::default()
    };
    let file = tiny_mixtral("other-width", other);
    let text = LlamaConfig::from_gguf(&file, 3).unwrap_err().to_string();
    assert!(
        text.contains("'llama.expert_feed_forward_length' is 3")
            && text.contains("feed_forward_length (6) wide"),
        "{text}"
    );
    // Keys beside the experts' are refused as for qwen3moe.
    let scale = Edits {
        keys: vec![("llama.expert_weights_scale", Some(GgufValue::F32(2.0)))],
        ..Edits::default()
    };
    let text = (LlamaConfig::from_gguf(&tiny_mixtral("scale", scale), 3))
        .unwrap_err()
        .to_string();
    assert!(text.contains("'llama.expert_weights_scale'"), "{text}");
}

/// OLMoE: NeoX rope, each token's whole query and key projections
/// RMS-normed (weights of `n_head · head_dim` and `n_head_kv · head_dim`),
/// experts `feed_forward_length` wide whose weights are not renormalised; a
/// file saying they are, or without `output.weight`, is refused by name.
#[test]
fn an_olmoe_file_norms_whole_projections_and_keeps_its_weights() {
    let olmoe = |name: &str, mut edits: Edits| {
        edits.tensors.extend([
            ("blk.0.attn_q_norm.weight", Some(vec![8])),
            ("blk.0.attn_k_norm.weight", Some(vec![4])),
        ]);
        edits.add.push(("output.weight", vec![8, 16]));
        tiny_moe("olmoe", name, edits)
    };
    let cfg = LlamaConfig::from_gguf(&olmoe("olmoe", Edits::default()), 3)
        .unwrap_or_else(|e| panic!("{e}"));
    let moe = Moe {
        n_expert: 4,
        n_expert_used: 2,
        n_ff_exp: 6,
        renormalise: false,
    };
    assert_eq!(cfg.moe, Some(moe));
    assert_eq!(
        (cfg.rope.mode, cfg.qk_norm),
        (RopeMode::Neox, QkNorm::Whole)
    );
    assert!(!cfg.tied_output);
    let g = build_prefill(&cfg).unwrap();
    // The norms read the 2-D projections, before the heads are split.
    let q_norm = g.tensor(g.find("l0.q_norm").unwrap());
    assert_eq!(q_norm.ne(), [8, 3, 1, 1]);
    assert!(
        g.find("l0.ffn_moe_weights_sum").is_none(),
        "no renormalising"
    );

    let says_norm = Edits {
        keys: vec![("olmoe.expert_weights_norm", Some(GgufValue::Bool(true)))],
        ..Edits::default()
    };
    let text = (LlamaConfig::from_gguf(&olmoe("norm", says_norm), 3))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("olmoe.expert_weights_norm is true") && text.contains("does not renormalise"),
        "{text}"
    );
    let tied = tiny_moe(
        "olmoe",
        "tied",
        Edits {
            tensors: vec![
                ("blk.0.attn_q_norm.weight", Some(vec![8])),
                ("blk.0.attn_k_norm.weight", Some(vec![4])),
            ],
            ..Edits::default()
        },
    );
    let err = LlamaConfig::from_gguf(&tied, 3).unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingTensor { tensor, .. } if tensor == "output.weight"),
        "{err}"
    );
}

#[test]
fn the_expert_width_defaults_to_the_ffn_width_over_the_experts_used() {
    let edits = Edits {
        keys: vec![
            ("qwen3moe.expert_feed_forward_length", None),
            ("qwen3moe.feed_forward_length", Some(GgufValue::U32(12))),
            ("qwen3moe.expert_weights_norm", Some(GgufValue::Bool(true))),
        ],
        ..Edits::default()
    };
    let cfg = LlamaConfig::from_gguf(&tiny_qwen3moe("default-width", edits), 2)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.moe.map(|m| m.n_ff_exp), Some(6), "12 / 2 experts used");
}

#[test]
fn expert_keys_the_builder_does_not_model_are_refused_by_name() {
    let key = |k: &'static str, v| Edits {
        keys: vec![(k, v)],
        ..Edits::default()
    };
    let cases = [
        (
            key("qwen3moe.expert_weights_scale", Some(GgufValue::F32(2.5))),
            "'qwen3moe.expert_weights_scale'",
        ),
        (
            key("qwen3moe.expert_shared_count", Some(GgufValue::U32(1))),
            "'qwen3moe.expert_shared_count'",
        ),
        (
            key("qwen3moe.expert_weights_norm", Some(GgufValue::Bool(false))),
            "qwen3moe.expert_weights_norm is false",
        ),
        (
            key("qwen3moe.expert_used_count", Some(GgufValue::U32(5))),
            "'qwen3moe.expert_used_count' is 5, more than the 4 experts",
        ),
        (
            key("qwen3moe.expert_used_count", Some(GgufValue::U32(0))),
            "'qwen3moe.expert_used_count' is 0",
        ),
        (
            key(
                "qwen3moe.expert_used_count",
                Some(GgufValue::Array(vec![GgufValue::U32(2)])),
            ),
            "'qwen3moe.expert_used_count' should be",
        ),
        (
            key("qwen3moe.expert_count", None),
            "'qwen3moe.expert_count'",
        ),
    ];
    for (i, (edits, want)) in cases.into_iter().enumerate() {
        let (_, text) = refusal(&format!("key{i}"), edits);
        assert!(text.contains(want), "{want}: {text}");
    }
}

#[test]
fn expert_tensors_that_disagree_are_refused_by_name() {
    let tensor = |name: &'static str, ne: Option<Vec<u64>>| Edits {
        tensors: vec![(name, ne)],
        ..Edits::default()
    };
    // A router with 3 experts where the metadata says 4.
    let (err, text) = refusal(
        "router",
        tensor("blk.0.ffn_gate_inp.weight", Some(vec![8, 3])),
    );
    assert!(
        matches!(&err, ModelError::BadTensor { tensor, .. } if tensor == "blk.0.ffn_gate_inp.weight")
            && text.contains("qwen3moe.expert_count is 4"),
        "{text}"
    );
    // Stacked experts of another count or width.
    let (err, text) = refusal(
        "up",
        tensor("blk.0.ffn_up_exps.weight", Some(vec![8, 6, 3])),
    );
    assert!(
        matches!(&err, ModelError::BadTensor { tensor, .. } if tensor == "blk.0.ffn_up_exps.weight"),
        "{text}"
    );
    let (err, text) = refusal("down", tensor("blk.0.ffn_down_exps.weight", None));
    assert!(
        matches!(&err, ModelError::MissingTensor { tensor, .. } if tensor == "blk.0.ffn_down_exps.weight"),
        "{text}"
    );
    // A dense FFN beside the experts (a shared expert, say) is not modelled.
    let dense = Edits {
        add: vec![("blk.0.ffn_gate.weight", vec![8, 20])],
        ..Edits::default()
    };
    let (err, text) = refusal("dense", dense);
    assert!(
        matches!(&err, ModelError::UnusedTensors { tensors, .. } if tensors == &["blk.0.ffn_gate.weight"]),
        "{text}"
    );
}

/// The graph's FFN output for every token equals llama.cpp's routing
/// computed here in f64 from the same (random) weights and normed input:
/// softmax over the router's logits, the top k, their weights over their
/// sum (OLMoE: as they are), the SwiGLU experts weighted and summed. Every
/// `k` from 1 (the `cont` path) to all experts, both ways.
#[test]
fn the_moe_ffn_computes_llama_cpps_routing() {
    for (k, renormalise) in (1..=N_EXPERT as i64).flat_map(|k| [(k, true), (k, false)]) {
        let file = tiny_qwen3moe(&format!("eval{k}"), Edits::default());
        let mut cfg = LlamaConfig::from_gguf(&file, 5).unwrap_or_else(|e| panic!("{e}"));
        cfg.moe = cfg.moe.map(|m| Moe {
            n_expert_used: k,
            renormalise,
            ..m
        });
        let g = build_prefill(&cfg).unwrap();
        let bindings = Bindings {
            weights: Weights::Random { seed: 7 },
            inputs: BTreeMap::new(),
            random_inputs: Some(3),
        };
        let mem = evaluate(&g, &bindings).unwrap_or_else(|e| panic!("{e}"));
        let read = |name: &str| mem.read(g.find(name).unwrap()).data;
        let x = read("l0.ffn_norm");
        let router = read("blk.0.ffn_gate_inp.weight");
        let [gate, up, down] =
            ["gate", "up", "down"].map(|w| read(&format!("blk.0.ffn_{w}_exps.weight")));
        let got = read("l0.ffn_moe_out");
        let (e, f, n) = (8, 6, N_EXPERT as usize);
        let mut want = Vec::new();
        for xt in x.chunks(e) {
            let dot = |w: &[f64], row: usize| (0..e).map(|i| w[row * e + i] * xt[i]).sum::<f64>();
            let logits: Vec<f64> = (0..n).map(|r| dot(&router, r)).collect();
            let max = logits.iter().copied().fold(f64::MIN, f64::max);
            let exp: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
            let probs: Vec<f64> = exp.iter().map(|v| v / exp.iter().sum::<f64>()).collect();
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
            let chosen = &order[..k as usize];
            let total: f64 = match renormalise {
                true => chosen.iter().map(|&c| probs[c]).sum(),
                false => 1.0,
            };
            let mut out = vec![0.0; e];
            for &c in chosen {
                let hidden: Vec<f64> = (0..f)
                    .map(|j| {
                        let g = dot(&gate, c * f + j);
                        g / (1.0 + (-g).exp()) * dot(&up, c * f + j)
                    })
                    .collect();
                for (o, slot) in out.iter_mut().enumerate() {
                    let d = &down[(c * e + o) * f..][..f];
                    let y: f64 = d.iter().zip(&hidden).map(|(a, b)| a * b).sum();
                    *slot += probs[c] / total * y;
                }
            }
            want.extend(out);
        }
        let err: f64 = got.iter().zip(&want).map(|(a, b)| (a - b).powi(2)).sum();
        let nmse = err / want.iter().map(|v| v * v).sum::<f64>();
        assert!(
            nmse < 1e-10,
            "k = {k}, renormalise {renormalise}: NMSE {nmse:e}"
        );
    }
}

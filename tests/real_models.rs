//! The builders, the file readers and the reference evaluator on real models,
//! against the PyTorch float64 references in `../shared/references/`:
//!
//! - SmolLM2-135M-Instruct (Q4_1 GGUF): the prefill logits of the 16-token
//!   prompt match `logits_torch_fp64.npy` to 1e-3 max abs, with the same top-1
//!   token at every position;
//! - all-MiniLM-L6-v2 (safetensors): each reference sentence's embedding has
//!   cosine similarity >= 0.99999 with `embeddings_torch_fp64.npy`'s row.
//!
//! The model files are installed by `scripts/setup.sh` (see
//! `ggplan_tests::models`); without them those tests print a skip line and pass.
//! The config loaders' error paths are tested here too, on small files written
//! by the tests, so they run everywhere.

use ggplan_tests::gguf_writer::{Meta, Scratch, write_gguf};
use ggplan_tests::models::{minilm_dir, smollm2_gguf};
use ggplan_tests::references::{argmax, read_json, read_npy_f64, references, token_ids};
use ir::files::gguf::GgufFile;
use ir::files::safetensors_file::SafetensorsFile;
use ir::{DType, Graph, RopeMode, RopeParams};
use kernels::evaluate::{Bindings, Weights, evaluate};
use kernels::reference::Dense;
use models::bert::{self, BertConfig, BertNames, Pooling};
use models::llama::{self, LlamaConfig, LlamaNames};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Max abs difference allowed between our logits and PyTorch fp64's.
const LOGITS_TOL: f64 = 1e-3;
/// Min cosine similarity between our embeddings and PyTorch fp64's.
const COSINE_MIN: f64 = 0.99999;

/// Evaluates `graph` with weights from `file` and `tokens` as the `tokens`
/// input; returns the values of the tensor called `output`.
fn run(graph: &Graph, file: &dyn ir::files::TensorSource, tokens: &[i64], output: &str) -> Dense {
    let ids = Dense::new(
        [tokens.len() as i64, 1, 1, 1],
        tokens.iter().map(|&t| t as f64).collect(),
    );
    let bindings = Bindings {
        weights: Weights::File(file),
        inputs: BTreeMap::from([("tokens".to_owned(), ids)]),
        random_inputs: None,
    };
    let memory = evaluate(graph, &bindings).unwrap_or_else(|e| panic!("evaluate: {e}"));
    memory.read(graph.find(output).expect("output exists"))
}

#[test]
fn smollm2_prefill_logits_match_torch_fp64() {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not found (GGPLAN_SMOLLM2_GGUF); run scripts/setup.sh");
        return;
    };
    let reference = read_json(&references().join("smollm2/top20_torch_fp64.json"));
    let tokens = token_ids(&reference["token_ids"]);
    let n_tokens = tokens.len() as i64;

    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let cfg = LlamaConfig::from_gguf(&file, n_tokens).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cfg,
        LlamaConfig {
            n_layer: 30,
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
            qk_norm: models::llama::QkNorm::None,
            gemma3: None,
            moe: None,
            last_logits_only: false,
            names: LlamaNames::Gguf,
        },
        "SmolLM2's hyperparameters (see ../shared/references/README.md)"
    );
    let graph = llama::build_prefill(&cfg).unwrap_or_else(|e| panic!("{e}"));

    let start = Instant::now();
    let logits = run(&graph, &file, &tokens, llama::LOGITS);
    eprintln!(
        "SmolLM2 prefill of {n_tokens} tokens: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let n_vocab = cfg.n_vocab as usize;
    assert_eq!(logits.ne, [cfg.n_vocab, n_tokens, 1, 1]);

    // float32 [n_tokens, n_vocab] row-major = ggml ne [n_vocab, n_tokens].
    let (shape, want) = read_npy_f64(&references().join("smollm2/logits_torch_fp64.npy"));
    assert_eq!(shape, [n_tokens as u64, n_vocab as u64]);
    let mut max_diff = 0.0f64;
    let mut worst = (0, 0);
    let mut agree = 0;
    let mut disagreements = Vec::new();
    for (pos, (got, want)) in logits
        .data
        .chunks(n_vocab)
        .zip(want.chunks(n_vocab))
        .enumerate()
    {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let d = (g - w).abs();
            if d > max_diff || d.is_nan() {
                max_diff = d;
                worst = (pos, i);
            }
        }
        let (top_got, top_want) = (argmax(got), argmax(want));
        let top_json = reference["top20"][pos]["ids"][0].as_u64();
        assert_eq!(top_json, Some(top_want as u64), "npy and json agree");
        if top_got == top_want {
            agree += 1;
        } else {
            disagreements.push(format!(
                "position {pos}: ours {top_got} ({:.4}), torch {top_want} ({:.4})",
                got[top_got], want[top_want]
            ));
        }
    }
    eprintln!(
        "SmolLM2 logits vs torch fp64: max abs diff {max_diff:.3e} (position {}, token {}), \
         top-1 agrees on {agree}/{n_tokens} positions",
        worst.0, worst.1
    );
    assert!(
        disagreements.is_empty(),
        "top-1 differs:\n{}",
        disagreements.join("\n")
    );
    assert!(
        max_diff <= LOGITS_TOL,
        "max abs diff {max_diff:.3e} > {LOGITS_TOL:e} at position {}, token {}",
        worst.0,
        worst.1
    );
}

#[test]
fn minilm_embeddings_match_torch_fp64() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not found (GGPLAN_MINILM_DIR); run scripts/setup.sh");
        return;
    };
    let reference = read_json(&references().join("minilm/reference.json"));
    let sentences = reference["token_ids"].as_array().expect("token_ids");
    let (shape, want) = read_npy_f64(&references().join("minilm/embeddings_torch_fp64.npy"));
    let file =
        SafetensorsFile::open(dir.join("model.safetensors")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape[0] as usize, sentences.len());
    let n_embd = shape[1] as usize;

    let start = Instant::now();
    let mut cosines = Vec::new();
    for (i, (ids, want)) in sentences.iter().zip(want.chunks(n_embd)).enumerate() {
        let tokens = token_ids(ids);
        let cfg =
            BertConfig::from_hf_dir(&dir, tokens.len() as i64).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.n_embd as usize, n_embd);
        let graph = bert::build_encoder(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let got = run(&graph, &file, &tokens, bert::EMBEDDING);
        assert_eq!(got.ne, [cfg.n_embd, 1, 1, 1]);
        let dot: f64 = got.data.iter().zip(want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cosine = dot / (norm(&got.data) * norm(want));
        let max_abs = got
            .data
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        eprintln!(
            "MiniLM sentence {i} ({} tokens): cosine {cosine:.12} (1 - cosine = {:.2e}), \
             max abs diff {max_abs:.3e}",
            tokens.len(),
            1.0 - cosine
        );
        cosines.push(cosine);
    }
    eprintln!(
        "MiniLM: {} sentences in {:.1} s",
        cosines.len(),
        start.elapsed().as_secs_f64()
    );
    for (i, c) in cosines.iter().enumerate() {
        assert!(*c >= COSINE_MIN, "sentence {i}: cosine {c} < {COSINE_MIN}");
    }
}

/// A tiny llama GGUF (1 layer, 8 wide, 2 heads over 1 KV head, vocab 16,
/// F32, tied output) declaring architecture `arch`, without `drop_key`.
fn tiny_llama(dir: &Path, arch: &'static str, drop_key: Option<&str>) -> GgufFile {
    let mut kvs = vec![
        ("general.architecture", Meta::Str(arch)),
        ("llama.block_count", Meta::U32(1)),
        ("llama.embedding_length", Meta::U32(8)),
        ("llama.attention.head_count", Meta::U32(2)),
        ("llama.attention.head_count_kv", Meta::U32(1)),
        ("llama.feed_forward_length", Meta::U32(12)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-6)),
    ];
    kvs.retain(|(k, _)| Some(*k) != drop_key);
    let names = LlamaNames::Gguf;
    let mut tensors = vec![(names.token_embd(), [8, 16]), (names.output_norm(), [8, 1])];
    for w in llama::BlockWeight::ALL {
        use llama::BlockWeight as B;
        let ne = match w {
            B::AttnNorm | B::FfnNorm => [8, 1],
            B::Wq | B::Wo => [8, 8],
            B::Wk | B::Wv => [8, 4],
            B::FfnGate | B::FfnUp => [8, 12],
            B::FfnDown => [12, 8],
        };
        tensors.push((names.block(0, w), ne));
    }
    let path = dir.join(format!("tiny-{arch}.gguf"));
    write_gguf(&path, &kvs, &tensors);
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn llama_config_from_gguf_reads_defaults_and_names_missing_keys() {
    let scratch = Scratch::new("gguf");
    let file = tiny_llama(&scratch.0, "llama", None);
    let cfg = LlamaConfig::from_gguf(&file, 5).unwrap();
    assert_eq!(
        cfg,
        LlamaConfig {
            n_layer: 1,
            n_embd: 8,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            n_ff: 12,
            n_vocab: 16,
            n_tokens: 5,
            rms_eps: 1e-6,
            rope: RopeParams::plain(RopeMode::Normal, 4, 10000.0),
            weight_dtype: DType::F32,
            matrix_dtypes: Default::default(),
            embd_dtype: DType::F32,
            output_dtype: DType::F32,
            tied_output: true,
            qkv_bias: false,
            rope_factors: false,
            qk_norm: models::llama::QkNorm::None,
            gemma3: None,
            moe: None,
            last_logits_only: false,
            names: LlamaNames::Gguf,
        }
    );
    // The config binds: every weight of the graph is in the file with its dtype and shape.
    let graph = llama::build_prefill(&cfg).unwrap();
    run(&graph, &file, &[1, 2, 3, 4, 5], llama::LOGITS);

    let file = tiny_llama(&scratch.0, "gpt2", None);
    let err = LlamaConfig::from_gguf(&file, 5).unwrap_err().to_string();
    assert!(
        err.contains("'gpt2'") && err.contains("tiny-gpt2.gguf") && err.contains("qwen2"),
        "{err}"
    );

    let file = tiny_llama(&scratch.0, "llama", Some("llama.feed_forward_length"));
    let err = LlamaConfig::from_gguf(&file, 5).unwrap_err().to_string();
    assert!(
        err.contains("'llama.feed_forward_length'") && err.contains("tiny-llama.gguf"),
        "{err}"
    );
}

fn minilm_config_json() -> serde_json::Map<String, Value> {
    let text = r#"{"architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": 384,
        "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6,
        "position_embedding_type": "absolute", "type_vocab_size": 2, "vocab_size": 30522}"#;
    serde_json::from_str(text).unwrap()
}

fn bert_config_err(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let scratch = Scratch::new("hf");
    let mut json = minilm_config_json();
    edit(&mut json);
    std::fs::write(
        scratch.0.join("config.json"),
        Value::Object(json).to_string(),
    )
    .unwrap();
    BertConfig::from_hf_dir(&scratch.0, 9)
        .unwrap_err()
        .to_string()
}

#[test]
fn bert_config_from_hf_dir_reads_config_json_and_names_bad_keys() {
    let scratch = Scratch::new("hf-ok");
    std::fs::write(
        scratch.0.join("config.json"),
        Value::Object(minilm_config_json()).to_string(),
    )
    .unwrap();
    let cfg = BertConfig::from_hf_dir(&scratch.0, 9).unwrap();
    assert_eq!(
        cfg,
        BertConfig {
            n_layer: 6,
            n_embd: 384,
            n_head: 12,
            n_ff: 1536,
            n_vocab: 30522,
            n_ctx_train: 512,
            n_types: 2,
            n_tokens: 9,
            eps: 1e-12,
            weight_dtype: DType::F32,
            embd_dtype: DType::F32,
            pooling: Pooling::Mean,
            l2_normalize: true,
            names: BertNames::HuggingFace,
        }
    );

    let err = bert_config_err(|j| {
        j.remove("intermediate_size");
    });
    assert!(
        err.contains("'intermediate_size'") && err.contains("config.json"),
        "{err}"
    );
    let err = bert_config_err(|j| {
        j.insert("hidden_act".into(), "gelu_new".into());
    });
    assert!(
        err.contains("'hidden_act'") && err.contains("gelu_new"),
        "{err}"
    );
    let err = bert_config_err(|j| {
        j.insert("hidden_size".into(), "384".into());
    });
    assert!(err.contains("'hidden_size'"), "{err}");
}

/// A sentence-transformers folder: config.json, modules.json (pooling, then
/// normalisation) and `1_Pooling/config.json` with `pooling`.
fn st_folder(name: &str, pooling: &str) -> Scratch {
    let scratch = Scratch::new(name);
    let dir = &scratch.0;
    std::fs::write(
        dir.join("config.json"),
        Value::Object(minilm_config_json()).to_string(),
    )
    .unwrap();
    let modules = r#"[{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;
    std::fs::write(dir.join("modules.json"), modules).unwrap();
    std::fs::create_dir(dir.join("1_Pooling")).unwrap();
    std::fs::write(dir.join("1_Pooling/config.json"), pooling).unwrap();
    scratch
}

#[test]
fn bert_config_from_hf_dir_reads_the_pooling_module() {
    let cls = st_folder(
        "hf-cls",
        r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
    );
    let cfg = BertConfig::from_hf_dir(&cls.0, 9).unwrap();
    assert_eq!((cfg.pooling, cfg.l2_normalize), (Pooling::Cls, true));

    let max = st_folder(
        "hf-max",
        r#"{"pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": true}"#,
    );
    let err = BertConfig::from_hf_dir(&max.0, 9).unwrap_err().to_string();
    assert!(
        err.contains("'pooling_mode_max_tokens' is true") && err.contains("1_Pooling/config.json"),
        "{err}"
    );
    let both = st_folder(
        "hf-both",
        r#"{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true}"#,
    );
    let err = BertConfig::from_hf_dir(&both.0, 9).unwrap_err().to_string();
    assert!(err.contains("only one pooling mode"), "{err}");
}

#[test]
fn smollm2_layer_split_by_cost_fills_a_small_gpu_then_the_cpu() {
    // SmolLM2 (tied output head) with a GPU holding about half its weights:
    // the cost policy's layer split puts what fits on the faster GPU, the
    // rest on the CPU, in contiguous runs of blocks, and the plan passes the
    // checker (compile runs it).
    let Some(path) = smollm2_gguf() else {
        panic!("SmolLM2 GGUF not installed: run scripts/setup.sh");
    };
    let file = GgufFile::open(&path).unwrap();
    let cfg = LlamaConfig::from_gguf(&file, 16).unwrap();
    let graph = llama::build_prefill(&cfg).unwrap();
    let weights: u64 = (graph.with_role(ir::Role::Weight))
        .map(|w| graph.tensor(w).layout.span_bytes())
        .sum();
    let mut target = compiler::Target::preset("cpu+cuda0").unwrap();
    let gpu = target
        .devices
        .iter()
        .position(|d| d.name == "cuda0")
        .unwrap();
    target.devices[gpu].memory_bytes = weights / 2;
    target.devices[gpu].max_buffer_bytes = weights / 2;
    let options = compiler::pipeline::CompileOptions {
        placement: compiler::PlacementOptions {
            layer_split: Some(Vec::new()),
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = compiler::pipeline::compile(&graph, &target, &options)
        .unwrap()
        .plan;
    let mut block_devices = Vec::new();
    let mut on_gpu = 0;
    for t in &plan.tensors {
        if t.role != ir::Role::Weight {
            continue;
        }
        let device = t.device.index();
        if device == gpu {
            on_gpu += t.nb[3] * t.ne[3] as u64;
        }
        if let Some(block) = compiler::layer_of(&t.name) {
            block_devices.push((block, device));
        }
    }
    assert!(
        on_gpu > 0 && on_gpu <= weights / 2,
        "{on_gpu} of {weights} bytes on the GPU"
    );
    block_devices.sort_unstable();
    block_devices.dedup();
    let devices: Vec<usize> = block_devices.iter().map(|&(_, d)| d).collect();
    assert_eq!(devices.len(), cfg.n_layer, "each block on one device");
    assert!(
        devices.contains(&gpu) && devices.iter().any(|&d| d != gpu),
        "{devices:?}"
    );
    // Contiguous runs in target order.
    assert!(devices.windows(2).all(|w| w[0] <= w[1]), "{devices:?}");
}

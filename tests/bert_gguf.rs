//! BERT encoders from GGUF files as llama.cpp's converter writes them
//! (`ggplan_tests::bert_gguf` plays the converter, into a scratch folder per
//! test):
//!
//! - a tiny random BERT (runs everywhere): the GGUF config binds, and its
//!   graph computes exactly what the Hugging Face-named graph computes on the
//!   same values, in F32 and F16, with mean and `[CLS]` pooling; every bad
//!   file (unknown architecture, missing or mis-shaped tensor, unknown
//!   tokenizer model, unsupported pooling, causal attention, missing key) is
//!   an error naming what is wrong;
//! - all-MiniLM-L6-v2 converted to GGUF: its WordPiece vocabulary gives the
//!   reference token ids (and the ids of `tokenizer.json` on tricky text),
//!   and its embeddings have cosine >= 0.99999 to PyTorch fp64's through the
//!   reference evaluator and the runtime (F32); the F16 conversion is held to
//!   cosine >= 0.9999 on the runtime.
//!
//! Without the MiniLM folder (scripts/setup.sh installs it) the real-model
//! tests print a skip line and pass.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::bert_gguf::{Convert, HfBert, write_bert_gguf};
use ggplan_tests::gguf_writer::{Meta, Scratch, TensorData, write_gguf_tensors};
use ggplan_tests::models::minilm_dir;
use ggplan_tests::references::{read_json, read_npy_f64, references, token_ids};
use ir::files::gguf::GgufFile;
use ir::{DType, Graph};
use kernels::evaluate::{Bindings, Weights, evaluate};
use kernels::reference::Dense;
use models::bert::{self, BertConfig, BertNames, Pooling};
use models::{Family, Tokenizer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Min cosine similarity between our embeddings and PyTorch fp64's (F32
/// weights), as for the Hugging Face folder.
const COSINE_MIN: f64 = 0.99999;
/// The same for the F16 conversion: the weights themselves are rounded.
const COSINE_MIN_F16: f64 = 0.9999;

fn convert(dir: &Path, file: &str, model: &HfBert, how: &Convert) -> PathBuf {
    let path = dir.join(file);
    write_bert_gguf(&path, model, how);
    path
}

fn open(path: &Path) -> GgufFile {
    GgufFile::open(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The model's tensors under their Hugging Face names, as one GGUF file (a
/// tensor source the Hugging Face-named graph binds to).
fn hf_named_file(dir: &Path, model: &HfBert) -> GgufFile {
    let tensors: Vec<TensorData> = model
        .tensors
        .iter()
        .map(|t| TensorData {
            name: t.name.clone(),
            dtype: DType::F32,
            ne: t.ne.clone(),
            data: t.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        })
        .collect();
    let path = dir.join("hf-named.gguf");
    write_gguf_tensors::<&str>(&path, &[], &tensors);
    open(&path)
}

/// Evaluates `graph` (reference kernels, f64) on `tokens`; the memory of
/// every tensor.
fn run<'g>(
    graph: &'g Graph,
    file: &dyn ir::files::TensorSource,
    tokens: &[i64],
) -> kernels::evaluate::Memory<'g> {
    let ids = Dense::new(
        [tokens.len() as i64, 1, 1, 1],
        tokens.iter().map(|&t| t as f64).collect(),
    );
    let bindings = Bindings {
        weights: Weights::File(file),
        inputs: BTreeMap::from([(bert::TOKENS.to_owned(), ids)]),
        random_inputs: None,
    };
    evaluate(graph, &bindings).unwrap_or_else(|e| panic!("evaluate: {e}"))
}

fn embedding(graph: &Graph, file: &dyn ir::files::TensorSource, tokens: &[i64]) -> Vec<f64> {
    let memory = run(graph, file, tokens);
    memory.read(graph.find(bert::EMBEDDING).unwrap()).data
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

const TINY_TOKENS: [i64; 6] = [2, 5, 6, 7, 8, 3];

#[test]
fn tiny_gguf_config_binds_and_computes_what_the_hf_graph_computes() {
    let scratch = Scratch::new("bert-tiny");
    let model = HfBert::tiny(7);
    let hf_file = hf_named_file(&scratch.0, &model);
    for f16 in [false, true] {
        let how = Convert {
            f16,
            ..Convert::default()
        };
        let file = open(&convert(
            &scratch.0,
            &format!("tiny-{f16}.gguf"),
            &model,
            &how,
        ));
        assert_eq!(Family::of(&file).unwrap(), Family::Bert);
        let cfg = BertConfig::from_gguf(&file, TINY_TOKENS.len() as i64)
            .unwrap_or_else(|e| panic!("{e}"));
        let dtype = if f16 { DType::F16 } else { DType::F32 };
        assert_eq!(
            cfg,
            BertConfig {
                n_layer: 2,
                n_embd: 8,
                n_head: 2,
                n_ff: 12,
                n_vocab: 15,
                n_ctx_train: 16,
                n_types: 2,
                n_tokens: 6,
                eps: 1e-12,
                weight_dtype: dtype,
                embd_dtype: dtype,
                pooling: Pooling::Mean,
                l2_normalize: true,
                names: BertNames::Gguf,
            }
        );
        let got = embedding(&bert::build_encoder(&cfg).unwrap(), &file, &TINY_TOKENS);
        let hf_cfg = BertConfig {
            names: BertNames::HuggingFace,
            weight_dtype: DType::F32,
            embd_dtype: DType::F32,
            ..cfg
        };
        let want = embedding(
            &bert::build_encoder(&hf_cfg).unwrap(),
            &hf_file,
            &TINY_TOKENS,
        );
        if f16 {
            let c = cosine(&got, &want);
            assert!(c > 0.999 && c < 1.0, "F16 weights are rounded: cosine {c}");
        } else {
            assert_eq!(got, want, "same values, same graph, same result");
        }
    }
}

#[test]
fn tiny_gguf_cls_pooling_is_the_first_tokens_state() {
    let scratch = Scratch::new("bert-cls");
    let model = HfBert {
        pooling: Some(2),
        ..HfBert::tiny(11)
    };
    let file = open(&convert(
        &scratch.0,
        "cls.gguf",
        &model,
        &Convert::default(),
    ));
    let cfg = BertConfig::from_gguf(&file, 6).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.pooling, Pooling::Cls);
    let graph = bert::build_encoder(&cfg).unwrap();
    let memory = run(&graph, &file, &TINY_TOKENS);
    let states = memory.read(graph.find("l1.l_out").unwrap());
    let first = &states.data[..8];
    let norm = first.iter().map(|x| x * x).sum::<f64>().sqrt();
    let got = memory.read(graph.find(bert::EMBEDDING).unwrap()).data;
    // F32 tensors hold f32-rounded values.
    for (g, s) in got.iter().zip(first) {
        assert!((g - s / norm).abs() < 1e-6, "{got:?} vs {first:?} / {norm}");
    }
}

/// The error of reading the tiny model converted with `how`: the config's,
/// else the tokenizer's.
fn tiny_error(name: &str, how: Convert) -> String {
    let scratch = Scratch::new("bert-bad");
    let path = convert(&scratch.0, &format!("{name}.gguf"), &HfBert::tiny(3), &how);
    let file = open(&path);
    let err = match BertConfig::from_gguf(&file, 6) {
        Err(e) => e.to_string(),
        Ok(_) => Tokenizer::from_gguf(&file)
            .expect_err("the file is bad")
            .to_string(),
    };
    assert!(
        err.contains(&format!("{name}.gguf")),
        "names the file: {err}"
    );
    err
}

fn set(key: &str, value: Meta) -> Convert {
    Convert {
        set: vec![(key.to_owned(), value)],
        ..Convert::default()
    }
}

#[test]
fn tiny_gguf_errors_name_what_is_wrong() {
    let err = tiny_error(
        "missing-tensor",
        Convert {
            drop_tensors: vec!["blk.1.ffn_down.weight".into()],
            ..Convert::default()
        },
    );
    assert!(
        err.contains("missing tensor 'blk.1.ffn_down.weight'"),
        "{err}"
    );

    let err = tiny_error(
        "misshaped",
        Convert {
            reshape: vec![("blk.0.attn_k.weight".into(), vec![8, 4])],
            ..Convert::default()
        },
    );
    assert!(
        err.contains("tensor 'blk.0.attn_k.weight' is f32 [8, 4")
            && err.contains("but the model needs f32 [8, 8"),
        "{err}"
    );

    let err = tiny_error(
        "mixed-dtypes",
        Convert {
            f16: true,
            keep_f32: vec!["blk.1.attn_v.weight".into()],
            ..Convert::default()
        },
    );
    assert!(
        err.contains("'blk.1.attn_v.weight' is f32") && err.contains("mixed dtypes"),
        "{err}"
    );

    let err = tiny_error(
        "nomic",
        set("general.architecture", Meta::Str("nomic-bert")),
    );
    assert!(
        err.contains("architecture 'nomic-bert' is not supported (supported: bert)"),
        "{err}"
    );

    let err = tiny_error("rwkv-vocab", set("tokenizer.ggml.model", Meta::Str("rwkv")));
    assert!(
        err.contains("tokenizer.ggml.model is \"rwkv\"") && err.contains("\"bert\" (WordPiece)"),
        "{err}"
    );

    let err = tiny_error("last-pooling", set("bert.pooling_type", Meta::U32(3)));
    assert!(
        err.contains("key 'bert.pooling_type' is 3 (last); supported: 1 (mean), 2 (cls)"),
        "{err}"
    );
    let err = tiny_error(
        "no-pooling",
        Convert {
            remove: vec!["bert.pooling_type".into()],
            ..Convert::default()
        },
    );
    assert!(err.contains("missing key 'bert.pooling_type'"), "{err}");

    let err = tiny_error("causal", set("bert.attention.causal", Meta::Bool(true)));
    assert!(err.contains("bert.attention.causal is true"), "{err}");

    let err = tiny_error(
        "no-eps",
        Convert {
            remove: vec!["bert.attention.layer_norm_epsilon".into()],
            ..Convert::default()
        },
    );
    assert!(
        err.contains("missing key 'bert.attention.layer_norm_epsilon'"),
        "{err}"
    );

    let err = tiny_error(
        "no-unk",
        Convert {
            remove: vec!["tokenizer.ggml.unknown_token_id".into()],
            ..Convert::default()
        },
    );
    assert!(
        err.contains("tokenizer.ggml.unknown_token_id: missing"),
        "{err}"
    );

    // The architecture dispatch lists every architecture it knows.
    let scratch = Scratch::new("bert-family");
    let how = set("general.architecture", Meta::Str("t5"));
    let file = open(&convert(&scratch.0, "t5.gguf", &HfBert::tiny(3), &how));
    let err = Family::of(&file).unwrap_err().to_string();
    assert!(
        err.contains("'t5'") && err.contains("llama") && err.contains("bert"),
        "{err}"
    );
}

/// A converted MiniLM, or `None` (with a skip line) when not installed.
fn minilm() -> Option<(PathBuf, HfBert)> {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not found (GGPLAN_MINILM_DIR); run scripts/setup.sh");
        return None;
    };
    let model = HfBert::read(&dir);
    Some((dir, model))
}

#[test]
fn minilm_gguf_vocabulary_gives_the_reference_ids() {
    let Some((dir, model)) = minilm() else { return };
    let scratch = Scratch::new("minilm-vocab");
    let file = open(&convert(
        &scratch.0,
        "minilm.gguf",
        &model,
        &Convert::default(),
    ));
    let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.vocab_size(), 30522);
    let reference = read_json(&references().join("minilm/reference.json"));
    let sentences = reference["sentences"].as_array().unwrap();
    for (sentence, ids) in sentences
        .iter()
        .zip(reference["token_ids"].as_array().unwrap())
    {
        let want: Vec<u32> = token_ids(ids).iter().map(|&i| i as u32).collect();
        assert_eq!(tok.encode(sentence.as_str().unwrap()).unwrap(), want);
    }
    let hf = Tokenizer::from_hf_file(&dir.join("tokenizer.json")).unwrap();
    for text in [
        "Hello, world! Don't panic: 3.14159 isn't π.",
        "naïve café — Ελληνικά, 日本語のテキスト, русский текст",
        "  multiple   spaces\tand\ttabs\n[MASK] and [SEP] in text  ",
        "unbelievably antidisestablishmentarianism xyzzyqq",
        "emoji 😀👍🏽 and ✨sparkles✨",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, hf.encode(text).unwrap(), "{text:?}");
        assert_eq!(tok.decode(&ids).unwrap(), hf.decode(&ids).unwrap());
    }
}

#[test]
fn minilm_gguf_embeddings_match_torch_fp64() {
    let Some((dir, model)) = minilm() else { return };
    let scratch = Scratch::new("minilm-eval");
    let file = open(&convert(
        &scratch.0,
        "minilm.gguf",
        &model,
        &Convert::default(),
    ));
    let reference = read_json(&references().join("minilm/reference.json"));
    let (shape, want) = read_npy_f64(&references().join("minilm/embeddings_torch_fp64.npy"));
    let n_embd = shape[1] as usize;
    for (i, (ids, want)) in reference["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want.chunks(n_embd))
        .enumerate()
    {
        let tokens = token_ids(ids);
        let n = tokens.len() as i64;
        let cfg = BertConfig::from_gguf(&file, n).unwrap_or_else(|e| panic!("{e}"));
        let hf = BertConfig::from_hf_dir(&dir, n).unwrap();
        assert_eq!(
            cfg,
            BertConfig {
                names: BertNames::Gguf,
                ..hf
            },
            "the GGUF holds the folder's hyperparameters"
        );
        let got = embedding(&bert::build_encoder(&cfg).unwrap(), &file, &tokens);
        let c = cosine(&got, want);
        eprintln!(
            "MiniLM GGUF (F32) sentence {i}, reference evaluator: 1 - cosine = {:.2e}",
            1.0 - c
        );
        assert!(c >= COSINE_MIN, "sentence {i}: cosine {c}");
    }
}

#[test]
fn minilm_gguf_on_the_runtime_matches_torch_fp64_in_f32_and_f16() {
    let Some((_, model)) = minilm() else { return };
    let scratch = Scratch::new("minilm-runtime");
    let reference = read_json(&references().join("minilm/reference.json"));
    let (shape, want) = read_npy_f64(&references().join("minilm/embeddings_torch_fp64.npy"));
    let n_embd = shape[1] as usize;
    for (f16, min) in [(false, COSINE_MIN), (true, COSINE_MIN_F16)] {
        let how = Convert {
            f16,
            ..Convert::default()
        };
        let path = convert(&scratch.0, &format!("minilm-{f16}.gguf"), &model, &how);
        let file = open(&path);
        let tok = Tokenizer::from_gguf(&file).unwrap();
        let weights = runtime::Weights::open(&path).unwrap_or_else(|e| panic!("{e}"));
        for (i, (sentence, want)) in reference["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want.chunks(n_embd))
            .enumerate()
        {
            let ids: Vec<i32> = tok
                .encode(sentence.as_str().unwrap())
                .unwrap()
                .iter()
                .map(|&t| t as i32)
                .collect();
            let cfg = BertConfig::from_gguf(&file, ids.len() as i64).unwrap();
            assert_eq!(cfg.weight_dtype, if f16 { DType::F16 } else { DType::F32 });
            let graph = bert::build_encoder(&cfg).unwrap();
            let mut rt = load(&graph, &weights);
            rt.set_input_i32(bert::TOKENS, &ids).unwrap();
            rt.run().unwrap();
            let got: Vec<f64> = rt
                .output_f32(bert::EMBEDDING)
                .unwrap()
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let c = cosine(&got, want);
            eprintln!(
                "MiniLM GGUF ({}) sentence {i} on the runtime: 1 - cosine = {:.2e}",
                if f16 { "F16" } else { "F32" },
                1.0 - c
            );
            assert!(c >= min, "f16 {f16}, sentence {i}: cosine {c} < {min}");
        }
    }
}

fn load(graph: &Graph, weights: &runtime::Weights) -> runtime::Runtime {
    let plan = compile(
        graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .plan;
    let options = runtime::LoadOptions {
        threads: 2,
        precision: runtime::Precision::Exact,
        ..runtime::LoadOptions::default()
    };
    let rt = runtime::Runtime::load(Arc::new(plan), weights.clone(), &options)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        rt.load_report().fallbacks.is_empty(),
        "reference fallbacks: {:?}",
        rt.load_report().fallbacks
    );
    rt
}

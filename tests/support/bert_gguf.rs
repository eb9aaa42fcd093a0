//! A BERT GGUF for tests, written as llama.cpp's converter
//! (`convert_hf_to_gguf.py`, class `BertModel`, with gguf-py's
//! `SpecialVocab`) writes it from a Hugging Face folder. CI has no BERT GGUF
//! file, so the tests make one: from the installed all-MiniLM-L6-v2 folder
//! ([`HfBert::read`]) or from a tiny random model ([`HfBert::tiny`]).
//!
//! What the converter does, and this module repeats (facts, not its code):
//! - metadata: `general.architecture` = `bert`; `bert.block_count`,
//!   `.context_length`, `.embedding_length`, `.feed_forward_length`,
//!   `.attention.head_count` (u32), `.attention.layer_norm_epsilon` (f32),
//!   `general.file_type` (0 all F32, 1 mostly F16), `.attention.causal` =
//!   false, `.pooling_type` (u32: 1 mean, 2 cls; only for a
//!   sentence-transformers folder), `tokenizer.ggml.token_type_count`;
//! - the vocabulary, `tokenizer.ggml.model` = `bert`: one token per id up to
//!   `vocab_size` (`[PAD{i}]`, type 5, for ids the tokenizer lacks), type 3
//!   (control) for special added tokens, 4 for other added tokens, else 1;
//!   rewritten into phantom-space form (control tokens kept, `##piece` ->
//!   `piece`, `word` -> `▁word`); `tokenizer.ggml.pre` from a sha256 of the
//!   ids the tokenizer gives a fixed text: MiniLM's (bert-base-uncased) is
//!   `0876d13b…`, the hash the converter lists for both bge-small and
//!   jina-v2-en, and its later check, `jina-v2-en`, wins (ggplan does not
//!   read the key);
//! - special ids from `tokenizer_config.json` (`{unk,sep,pad,cls,mask}_token`
//!   looked up among `tokenizer.json`'s added tokens) and `config.json`
//!   (`pad_token_id`); without BOS/EOS tokens, `[CLS]` becomes BOS and
//!   `[SEP]` EOS, and the `[CLS] $A [SEP]` template sets `add_bos_token` and
//!   `add_eos_token`. Keys: `tokenizer.ggml.bos_token_id`, `.eos_token_id`,
//!   `.unknown_token_id`, `.seperator_token_id` (sic), `.padding_token_id`,
//!   `.cls_token_id`, `.mask_token_id`;
//! - tensors in the safetensors file's (sorted) order, renamed (see
//!   `models::bert::names`), `embeddings.position_ids` and the pooler
//!   dropped; with F16, 1-D tensors, `*_norm.weight`, biases,
//!   `position_embd` and `token_types` stay F32, every other matrix
//!   (`token_embd` included) becomes F16.

use crate::TestRng;
use crate::gguf_writer::{Meta, TensorData, write_gguf_tensors};
use ir::DType;
use ir::files::TensorSource;
use ir::files::safetensors_file::SafetensorsFile;
use models::bert::{BertNames, LayerPart};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// A tensor of a Hugging Face BERT folder: name, ggml extents (innermost
/// first; as many as the tensor has dimensions) and f32 values.
#[derive(Clone, Debug)]
pub struct HfTensor {
    /// Its Hugging Face name.
    pub name: String,
    /// ggml extents.
    pub ne: Vec<u64>,
    /// The values, ne0 fastest.
    pub values: Vec<f32>,
}

/// What the converter reads from a Hugging Face BERT folder.
#[derive(Clone, Debug)]
pub struct HfBert {
    /// `general.name`.
    pub name: String,
    /// `config.json`.
    pub config: Map<String, Value>,
    /// The tensors, sorted by name.
    pub tensors: Vec<HfTensor>,
    /// Token of each id (`tokenizer.json`'s vocabulary and added tokens).
    pub vocab: BTreeMap<u32, String>,
    /// Added tokens: id -> special.
    pub added: BTreeMap<u32, bool>,
    /// Special token ids by kind (`unk`, `sep`, `pad`, `cls`, `mask`).
    pub special: BTreeMap<&'static str, u32>,
    /// gguf-py's pooling type, when the folder has a pooling module.
    pub pooling: Option<u32>,
}

/// How [`write_bert_gguf`] departs from a faithful conversion, to make bad
/// files for the error tests.
#[derive(Clone, Debug, Default)]
pub struct Convert {
    /// Matrices as F16 (the converter's `--outtype f16`), else all F32.
    pub f16: bool,
    /// Metadata set to a value (replacing the converter's, or added).
    pub set: Vec<(String, Meta)>,
    /// Metadata keys left out.
    pub remove: Vec<String>,
    /// GGUF tensor names left out.
    pub drop_tensors: Vec<String>,
    /// GGUF tensors given other extents (data zero-filled).
    pub reshape: Vec<(String, Vec<u64>)>,
    /// GGUF tensors kept F32 in an F16 conversion.
    pub keep_f32: Vec<String>,
}

impl HfBert {
    /// Reads a Hugging Face BERT folder (config.json, model.safetensors,
    /// tokenizer.json, tokenizer_config.json, modules.json when present).
    pub fn read(dir: &Path) -> HfBert {
        let config = json_object(&dir.join("config.json"));
        let file =
            SafetensorsFile::open(dir.join("model.safetensors")).unwrap_or_else(|e| panic!("{e}"));
        let tensors = file
            .tensor_names()
            .into_iter()
            .map(|name| {
                let t = file.tensor(name).expect("listed tensors exist");
                assert_eq!(
                    t.dtype,
                    DType::F32,
                    "{name}: the converter test reads F32 folders"
                );
                let values = t
                    .data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                HfTensor {
                    name: name.to_owned(),
                    ne: rank_extents(name, t.ne),
                    values,
                }
            })
            .collect();

        let tokenizer = json_object(&dir.join("tokenizer.json"));
        let mut vocab = BTreeMap::new();
        for (token, id) in tokenizer["model"]["vocab"]
            .as_object()
            .expect("WordPiece vocab")
        {
            vocab.insert(id.as_u64().expect("ids") as u32, token.clone());
        }
        let mut added = BTreeMap::new();
        let mut by_content = BTreeMap::new();
        for t in tokenizer["added_tokens"].as_array().expect("added_tokens") {
            let id = t["id"].as_u64().expect("id") as u32;
            let content = t["content"].as_str().expect("content").to_owned();
            added.insert(id, t["special"].as_bool().unwrap_or(false));
            vocab.insert(id, content.clone());
            by_content.insert(content, id);
        }
        let mut special = BTreeMap::new();
        let tokenizer_config = dir.join("tokenizer_config.json");
        if tokenizer_config.is_file() {
            let tc = json_object(&tokenizer_config);
            for kind in ["unk", "sep", "pad", "cls", "mask"] {
                if let Some(id) = tc
                    .get(&format!("{kind}_token"))
                    .and_then(Value::as_str)
                    .and_then(|c| by_content.get(c))
                {
                    special.insert(kind, *id);
                }
            }
        }
        if let Some(pad) = config.get("pad_token_id").and_then(Value::as_u64) {
            special.entry("pad").or_insert(pad as u32);
        }
        HfBert {
            name: dir
                .file_name()
                .map_or("bert".into(), |n| n.to_string_lossy().into_owned()),
            config,
            tensors,
            vocab,
            added,
            special,
            pooling: pooling_type(dir),
        }
    }

    /// A 2-layer BERT with random weights (8 wide, 2 heads, n_ff 12, 16
    /// positions, 2 token types) and a 15-token WordPiece vocabulary:
    /// `[PAD] [UNK] [CLS] [SEP] [MASK] hello world ##s ! un ##believ ##able
    /// cafe [unused0] s`, with mean pooling.
    pub fn tiny(seed: u64) -> HfBert {
        let words = [
            "[PAD]",
            "[UNK]",
            "[CLS]",
            "[SEP]",
            "[MASK]",
            "hello",
            "world",
            "##s",
            "!",
            "un",
            "##believ",
            "##able",
            "cafe",
            "[unused0]",
            "s",
        ];
        let (e, ff, n_ctx, n_layer) = (8u64, 12u64, 16u64, 2usize);
        let config = serde_json::json!({
            "architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": e,
            "intermediate_size": ff, "layer_norm_eps": 1e-12, "max_position_embeddings": n_ctx,
            "model_type": "bert", "num_attention_heads": 2, "num_hidden_layers": n_layer,
            "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": words.len()
        });
        let mut rng = TestRng::new(seed);
        let mut tensor = |name: String, ne: Vec<u64>, lo: f64, hi: f64| {
            let n = ne.iter().product::<u64>() as usize;
            let values = rng.vec(n, lo, hi).into_iter().map(|v| v as f32).collect();
            HfTensor { name, ne, values }
        };
        let names = BertNames::HuggingFace;
        let mut tensors = vec![
            tensor(
                names.word_embeddings().into(),
                vec![e, words.len() as u64],
                -1.0,
                1.0,
            ),
            tensor(
                names.position_embeddings().into(),
                vec![e, n_ctx],
                -0.5,
                0.5,
            ),
            tensor(names.token_type_embeddings().into(), vec![e, 2], -0.5, 0.5),
            tensor(names.embeddings_norm(false), vec![e], 0.5, 1.5),
            tensor(names.embeddings_norm(true), vec![e], -0.1, 0.1),
        ];
        for il in 0..n_layer {
            for part in LayerPart::ALL {
                let (ne, out) = match part {
                    LayerPart::AttnNorm | LayerPart::OutputNorm => (vec![e], e),
                    LayerPart::Intermediate => (vec![e, ff], ff),
                    LayerPart::Output => (vec![ff, e], e),
                    _ => (vec![e, e], e),
                };
                let (lo, hi) = if part.is_norm() {
                    (0.5, 1.5)
                } else {
                    (-0.5, 0.5)
                };
                tensors.push(tensor(names.layer_weight(il, part), ne, lo, hi));
                tensors.push(tensor(names.layer_bias(il, part), vec![out], -0.1, 0.1));
            }
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let vocab = (0u32..).zip(words.iter().map(|w| w.to_string())).collect();
        let special = BTreeMap::from([("pad", 0), ("unk", 1), ("cls", 2), ("sep", 3), ("mask", 4)]);
        HfBert {
            name: "tiny-bert".into(),
            config: config.as_object().expect("an object").clone(),
            tensors,
            vocab,
            added: (0..5).map(|id| (id, true)).collect(),
            special,
            pooling: Some(1),
        }
    }

    fn hparam(&self, key: &str) -> u32 {
        let v = self.config.get(key).and_then(Value::as_u64);
        v.unwrap_or_else(|| panic!("config.json: {key}")) as u32
    }
}

/// Writes `model` to `path` as llama.cpp's converter would, departing from
/// it as `how` says.
pub fn write_bert_gguf(path: &Path, model: &HfBert, how: &Convert) {
    let mut kvs = metadata(model, how.f16);
    for (key, value) in &how.set {
        match kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.clone(),
            None => kvs.push((key.clone(), value.clone())),
        }
    }
    kvs.retain(|(k, _)| !how.remove.contains(k));

    let mut tensors = Vec::new();
    for t in &model.tensors {
        let Some(name) = gguf_name(&t.name) else {
            continue;
        };
        if how.drop_tensors.contains(&name) {
            continue;
        }
        let dtype = if how.f16 && stays_f16(&name, t.ne.len()) && !how.keep_f32.contains(&name) {
            DType::F16
        } else {
            DType::F32
        };
        let (ne, values) = match how.reshape.iter().find(|(n, _)| *n == name) {
            Some((_, ne)) => (ne.clone(), vec![0.0; ne.iter().product::<u64>() as usize]),
            None => (t.ne.clone(), t.values.clone()),
        };
        let mut data = vec![0u8; values.len() * dtype.block_bytes() as usize];
        kernels::quant::quantize_row(dtype, &values, &mut data);
        tensors.push(TensorData {
            name,
            dtype,
            ne,
            data,
        });
    }
    write_gguf_tensors(path, &kvs, &tensors);
}

/// The converter's metadata for `model`.
fn metadata(model: &HfBert, f16: bool) -> Vec<(String, Meta)> {
    let arch = |k: &str| format!("bert.{k}");
    let eps = model.config["layer_norm_eps"]
        .as_f64()
        .expect("layer_norm_eps") as f32;
    let mut kvs = vec![
        ("general.architecture".to_owned(), Meta::Str("bert")),
        ("general.type".to_owned(), Meta::Str("model")),
        ("general.name".to_owned(), Meta::String(model.name.clone())),
        (
            arch("block_count"),
            Meta::U32(model.hparam("num_hidden_layers")),
        ),
        (
            arch("context_length"),
            Meta::U32(model.hparam("max_position_embeddings")),
        ),
        (
            arch("embedding_length"),
            Meta::U32(model.hparam("hidden_size")),
        ),
        (
            arch("feed_forward_length"),
            Meta::U32(model.hparam("intermediate_size")),
        ),
        (
            arch("attention.head_count"),
            Meta::U32(model.hparam("num_attention_heads")),
        ),
        (arch("attention.layer_norm_epsilon"), Meta::F32(eps)),
        ("general.file_type".to_owned(), Meta::U32(u32::from(f16))),
        (arch("attention.causal"), Meta::Bool(false)),
    ];
    if let Some(pooling) = model.pooling {
        kvs.push((arch("pooling_type"), Meta::U32(pooling)));
    }
    let type_count = model
        .config
        .get("type_vocab_size")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    kvs.push((
        "tokenizer.ggml.token_type_count".into(),
        Meta::U32(type_count as u32),
    ));

    let n_vocab = model.hparam("vocab_size");
    let mut tokens = Vec::new();
    let mut types = Vec::new();
    for id in 0..n_vocab {
        let (token, kind) = match model.vocab.get(&id) {
            None => (format!("[PAD{id}]"), 5),
            Some(t) => match model.added.get(&id) {
                Some(true) => (t.clone(), 3),
                Some(false) => (t.clone(), 4),
                None => (t.clone(), 1),
            },
        };
        tokens.push(phantom(&token, kind));
        types.push(kind);
    }
    kvs.push(("tokenizer.ggml.model".into(), Meta::Str("bert")));
    kvs.push(("tokenizer.ggml.pre".into(), Meta::Str("jina-v2-en")));
    kvs.push(("tokenizer.ggml.tokens".into(), Meta::Strs(tokens)));
    kvs.push(("tokenizer.ggml.token_type".into(), Meta::I32s(types)));

    let s = &model.special;
    let mut ids: Vec<(&str, u32)> = Vec::new();
    ids.extend(s.get("cls").map(|&id| ("bos", id)));
    ids.extend(s.get("sep").map(|&id| ("eos", id)));
    for (kind, key) in [
        ("unk", "unknown"),
        ("sep", "seperator"),
        ("pad", "padding"),
        ("cls", "cls"),
        ("mask", "mask"),
    ] {
        ids.extend(s.get(kind).map(|&id| (key, id)));
    }
    for (key, id) in ids {
        kvs.push((format!("tokenizer.ggml.{key}_token_id"), Meta::U32(id)));
    }
    if s.contains_key("cls") && s.contains_key("sep") {
        kvs.push(("tokenizer.ggml.add_bos_token".into(), Meta::Bool(true)));
        kvs.push(("tokenizer.ggml.add_eos_token".into(), Meta::Bool(true)));
    }
    kvs.push(("general.quantization_version".into(), Meta::U32(2)));
    kvs
}

/// llama.cpp's phantom-space spelling of a WordPiece token of GGUF type `kind`.
fn phantom(token: &str, kind: i32) -> String {
    if kind == 3 {
        token.to_owned()
    } else if let Some(piece) = token.strip_prefix("##") {
        piece.to_owned()
    } else {
        format!("\u{2581}{token}")
    }
}

/// The GGUF name of a Hugging Face BERT tensor, or `None` for the tensors the
/// converter drops.
pub fn gguf_name(hf: &str) -> Option<String> {
    let hf = hf.strip_prefix("bert.").unwrap_or(hf);
    if hf == "embeddings.position_ids" || hf.starts_with("pooler.") {
        return None;
    }
    let (hf_names, gguf) = (BertNames::HuggingFace, BertNames::Gguf);
    let tables = [
        (hf_names.word_embeddings(), gguf.word_embeddings()),
        (hf_names.position_embeddings(), gguf.position_embeddings()),
        (
            hf_names.token_type_embeddings(),
            gguf.token_type_embeddings(),
        ),
    ];
    if let Some((_, g)) = tables.iter().find(|(h, _)| *h == hf) {
        return Some((*g).to_owned());
    }
    for bias in [false, true] {
        if hf == hf_names.embeddings_norm(bias) {
            return Some(gguf.embeddings_norm(bias));
        }
    }
    let rest = hf.strip_prefix("encoder.layer.")?;
    let (il, rest) = rest.split_once('.')?;
    let il: usize = il.parse().ok()?;
    for part in LayerPart::ALL {
        if rest == format!("{}.weight", part.hf_path()) {
            return Some(gguf.layer_weight(il, part));
        }
        if rest == format!("{}.bias", part.hf_path()) {
            return Some(gguf.layer_bias(il, part));
        }
    }
    panic!("the converter cannot map tensor {hf:?}")
}

/// Whether the converter's F16 output stores tensor `name` of `n_dims`
/// dimensions as F16 (else F32).
fn stays_f16(name: &str, n_dims: usize) -> bool {
    let always_f32 = n_dims <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || name == BertNames::Gguf.position_embeddings()
        || name == BertNames::Gguf.token_type_embeddings();
    !always_f32
}

/// The extents of a safetensors tensor with as many entries as it has
/// dimensions: embedding tables are matrices; other tensors lose trailing
/// unit extents (biases and norms are vectors).
fn rank_extents(name: &str, ne: [i64; 4]) -> Vec<u64> {
    let ne: Vec<u64> = ne.iter().map(|&n| n as u64).collect();
    let rank = if name.contains("embeddings.") && !name.contains("LayerNorm") {
        2
    } else {
        ne.iter().rposition(|&n| n != 1).map_or(1, |i| i + 1)
    };
    ne[..rank.max(1)].to_vec()
}

/// gguf-py's pooling type from a sentence-transformers folder: 1 for mean,
/// 2 for `[CLS]`; `None` without a pooling module.
fn pooling_type(dir: &Path) -> Option<u32> {
    let modules = dir.join("modules.json");
    let modules: Value = serde_json::from_str(&std::fs::read_to_string(modules).ok()?).ok()?;
    let path = modules
        .as_array()?
        .iter()
        .find(|m| m["type"] == "sentence_transformers.models.Pooling")?["path"]
        .as_str()?;
    let pooling = json_object(&dir.join(path).join("config.json"));
    if pooling["pooling_mode_mean_tokens"] == true {
        Some(1)
    } else if pooling["pooling_mode_cls_token"] == true {
        Some(2)
    } else {
        panic!("{}: only mean and cls pooling convert", dir.display())
    }
}

fn json_object(path: &Path) -> Map<String, Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => map,
        other => panic!("{}: not a JSON object: {other:?}", path.display()),
    }
}

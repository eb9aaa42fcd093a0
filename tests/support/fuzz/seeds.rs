//! The seed corpus: small valid inputs of every kind, made by code so they
//! can be re-made byte for byte (`fuzz/seeds/` holds them, and
//! `tests/fuzz_corpus.rs` checks the folder against this file).

use super::Scratch;
use crate::bert_gguf::{Convert, HfBert, write_bert_gguf};
use crate::gguf_writer::{Meta, TensorData, write_gguf_tensors};
use crate::random_graph::random_graph;
use crate::{TestRng, workspace_root};
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ir::DType;
use ir::files::npy::{write_npy_f32, write_npy_i32};
use models::llama::{BlockWeight, LlamaNames};

/// Every seed: (target, file name, bytes), in a fixed order.
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut add = |target: &'static str, name: String, bytes: Vec<u8>| {
        seeds.push((target, name, bytes));
    };
    for (name, text) in graph_texts() {
        add("graph_text", format!("{name}.ron"), text.into_bytes());
    }
    for (name, plan) in plans() {
        add(
            "plan_text",
            format!("{name}.ron"),
            ir::plan::plan_to_ron(&plan).into_bytes(),
        );
    }
    for (name, bytes) in tokenizer_ggufs() {
        add("gguf", format!("{name}.gguf"), bytes);
    }
    add("gguf", "llama-tiny.gguf".into(), tiny_llama_gguf());
    add(
        "hf_folder",
        "bert-tiny.bin".into(),
        hf_folder_input(&HfBert::tiny(1)),
    );
    for (name, bytes) in npy_files() {
        add("npy", name, bytes);
    }
    add(
        "tokenizer",
        "bpe-text.bin".into(),
        b"\x00Hello world, 12 caf\xc3\xa9s! \xf0\x9f\x98\x80".to_vec(),
    );
    add(
        "tokenizer",
        "wordpiece-text.bin".into(),
        b"\x03hello worlds! unbelievable".to_vec(),
    );
    add(
        "tokenizer",
        "bpe-ids.bin".into(),
        vec![0x80, 1, 0, 72, 0, 2, 1, 255, 255],
    );
    // Structure-aware targets read choices from their bytes: any bytes are a
    // valid start.
    let mut rng = TestRng::new(7);
    for i in 0..4 {
        let bytes: Vec<u8> = (0..64).map(|_| rng.below(256) as u8).collect();
        add("plan_edit", format!("choices{i}.bin"), bytes.clone());
        add("differential", format!("choices{i}.bin"), bytes);
    }
    for (name, bytes) in rpc_answer_seeds() {
        add("rpc_answers", format!("{name}.bin"), bytes);
    }
    for (name, text) in captures() {
        add("capture", format!("{name}.json"), text.into_bytes());
    }
    seeds
}

/// A 7.0.0 server's correct answers to the `rpc_answers` script (read whole,
/// and a few bytes at a time), a 7.1.0 server's, a refused allocation, a
/// `GET_TENSOR` answer declaring 2^64 - 1 bytes, and the correct answers cut
/// short in the handshake, in a header, in `GET_TENSOR`'s data and before
/// the last byte.
fn rpc_answer_seeds() -> Vec<(String, Vec<u8>)> {
    use super::rpc::{PREFIX_BYTES, script_answers, script_input};
    let answers = script_answers([7, 0, 0], 64);
    let correct = script_input(64, 0, &answers);
    let mut refused = answers.clone();
    refused[5][8..16].fill(0);
    let mut huge = answers.clone();
    huge[7] = u64::MAX.to_le_bytes().to_vec();
    let mut seeds = vec![
        ("7.0.0".to_owned(), correct.clone()),
        (
            "7.0.3-chunked".to_owned(),
            script_input(300, 5, &script_answers([7, 0, 3], 300)),
        ),
        (
            "7.1.0".to_owned(),
            script_input(64, 0, &script_answers([7, 1, 0], 64)),
        ),
        ("alloc-refused".to_owned(), script_input(64, 0, &refused)),
        ("get-huge".to_owned(), script_input(64, 0, &huge)),
    ];
    let at = |calls: usize| PREFIX_BYTES + answers[..calls].iter().map(Vec::len).sum::<usize>();
    for cut in [
        PREFIX_BYTES + 20,
        at(1) + 4,
        at(7) + 8 + 30,
        correct.len() - 1,
    ] {
        seeds.push((format!("truncated-{cut}"), correct[..cut].to_vec()));
    }
    seeds
}

/// The example graphs small enough to mutate quickly, and two random graphs.
fn graph_texts() -> Vec<(String, String)> {
    let mut texts = vec![(
        "mlp".to_owned(),
        std::fs::read_to_string(workspace_root().join("examples/graphs/mlp.ron"))
            .expect("examples/graphs/mlp.ron"),
    )];
    let mut rng = TestRng::new(11);
    for case in 0..2 {
        let graph = random_graph(&mut rng, case);
        texts.push((format!("random{case}"), ir::text::to_ron(&graph)));
    }
    texts
}

/// A two-block llama decode step over an 8-row F16 cache, 64 wide: its plan
/// holds every fused step (attention, products of one input, product + GLU,
/// product + add, rope + set_rows, elementwise groups).
fn tiny_llama_decode() -> ir::Graph {
    let cache = models::llama::CacheConfig {
        n_ctx: 8,
        kv_dtype: DType::F16,
    };
    models::llama::build_cached(&crate::llama_config::tiny_llama(1), &cache)
        .expect("a valid config")
}

/// Base plans: the mlp example and a random graph on one CPU, on two core
/// groups with a layer split, on two core groups with every weight split
/// along axis 0 (shards, partial sums, an all-reduce), and on CPU + GPU
/// (refused by a CPU runtime); a llama decode step on one CPU (every fused
/// step).
pub fn plans() -> Vec<(String, ir::plan::Plan)> {
    let mlp = ir::text::read_graph(&workspace_root().join("examples/graphs/mlp.ron"))
        .expect("examples/graphs/mlp.ron");
    let random = random_graph(&mut TestRng::new(5), 0);
    let layer = CompileOptions {
        placement: PlacementOptions {
            // Equal shares: the cost policy alone keeps these small graphs
            // on one device, and the seed is for a two-device plan.
            layer_split: Some(vec![1.0, 1.0]),
            ..Default::default()
        },
        ..Default::default()
    };
    let tensor_split = CompileOptions {
        tensor_split: Some(compiler::tensor_split::TensorSplitOptions {
            shares: Vec::new(),
            rules: vec![compiler::tensor_split::SplitRule::parse(".=0").expect("a rule")],
            collectives: compiler::tensor_split::Collectives::Auto,
            experts: Default::default(),
        }),
        ..Default::default()
    };
    let setups = [
        ("cpu", "cpu", CompileOptions::default()),
        ("cpu0+cpu1", "cpu0+cpu1", layer),
        ("cpu0+cpu1", "cpu0+cpu1.split", tensor_split),
        ("cpu+cuda0", "cpu+cuda0", CompileOptions::default()),
    ];
    let mut plans = Vec::new();
    for graph in [&mlp, &random] {
        for (target, label, options) in &setups {
            let t = Target::preset(target).expect("preset");
            let plan = compile(graph, &t, options)
                .unwrap_or_else(|e| panic!("{label}: {e}"))
                .plan;
            plans.push((format!("{}.{label}", graph.name), plan));
        }
    }
    let llama = tiny_llama_decode();
    let cpu = Target::preset("cpu").expect("preset");
    let plan = (compile(&llama, &cpu, &CompileOptions::default()))
        .expect("the llama decode step compiles")
        .plan;
    plans.push(("llama_decode.cpu".to_string(), plan));
    plans
}

/// Metadata of a byte-level BPE vocabulary: a control token, the 256 byte
/// characters, four merges.
fn bpe_metadata(pre: &str) -> Vec<(String, Meta)> {
    const MERGES: &[(&str, &str)] = &[("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2")];
    let mut tokens = vec!["<|endoftext|>".to_owned()];
    tokens.extend((0..=255u8).map(byte_char));
    tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
    let mut types = vec![3];
    types.resize(tokens.len(), 1);
    vec![
        ("tokenizer.ggml.model".into(), Meta::Str("gpt2")),
        ("tokenizer.ggml.pre".into(), Meta::String(pre.to_owned())),
        ("tokenizer.ggml.tokens".into(), Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type".into(), Meta::I32s(types)),
        (
            "tokenizer.ggml.merges".into(),
            Meta::Strs(MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Meta::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), Meta::U32(0)),
    ]
}

/// A SentencePiece vocabulary (`tokenizer.ggml.model = llama`, Gemma's
/// form): control tokens, the 256 byte tokens, and pieces whose scores make
/// merges of different priority and ties (`▁` stands for a space).
fn spm_metadata() -> Vec<(String, Meta)> {
    const PIECES: &[(&str, f32)] = &[
        ("▁", -1.0),
        ("t", -2.0),
        ("h", -2.0),
        ("e", -2.0),
        ("he", -3.0),
        ("▁t", -3.0),
        ("▁the", -1.5),
        ("1", -4.0),
        ("12", -4.0),
        ("é", -5.0),
    ];
    let mut tokens = vec![
        "<pad>".to_owned(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
    ];
    let mut types = vec![3, 3, 3, 2];
    let mut scores = vec![0.0; 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in PIECES {
        tokens.push((*piece).to_owned());
        types.push(1);
        scores.push(*score);
    }
    tokens.push("<start_of_turn>".into());
    types.push(3);
    scores.push(0.0);
    vec![
        ("tokenizer.ggml.model".into(), Meta::Str("llama")),
        ("tokenizer.ggml.pre".into(), Meta::Str("default")),
        ("tokenizer.ggml.tokens".into(), Meta::Strs(tokens)),
        ("tokenizer.ggml.scores".into(), Meta::F32s(scores)),
        ("tokenizer.ggml.token_type".into(), Meta::I32s(types)),
        ("tokenizer.ggml.bos_token_id".into(), Meta::U32(2)),
        ("tokenizer.ggml.eos_token_id".into(), Meta::U32(1)),
        ("tokenizer.ggml.unknown_token_id".into(), Meta::U32(3)),
        ("tokenizer.ggml.add_space_prefix".into(), Meta::Bool(false)),
    ]
}

/// Vocabulary size of [`bpe_metadata`].
const BPE_VOCAB: u64 = 1 + 256 + 4;

/// The byte-level character of `byte` (GPT-2's fixed byte-to-character map).
fn byte_char(byte: u8) -> String {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(byte) {
        char::from(byte).to_string()
    } else {
        let rank = (0..byte).filter(|&b| !printable(b)).count();
        char::from_u32(0x100 + rank as u32)
            .expect("a character")
            .to_string()
    }
}

fn file_bytes(write: impl FnOnce(&std::path::Path)) -> Vec<u8> {
    let scratch = Scratch::path("seed");
    write(&scratch.0);
    std::fs::read(&scratch.0).expect("seed written")
}

/// GGUF files whose tokenizer the `tokenizer` target uses: byte-level BPE with
/// three pre-tokenizers (no weights), SentencePiece (Gemma's form), and the
/// tiny BERT with WordPiece.
pub fn tokenizer_ggufs() -> Vec<(&'static str, Vec<u8>)> {
    let bpe = |pre: &str| {
        let mut kvs = vec![("general.architecture".to_owned(), Meta::Str("llama"))];
        kvs.extend(bpe_metadata(pre));
        file_bytes(|p| write_gguf_tensors(p, &kvs, &[]))
    };
    vec![
        ("bpe-smollm", bpe("smollm")),
        ("bpe-llama-bpe", bpe("llama-bpe")),
        ("bpe-qwen2", bpe("qwen2")),
        (
            "spm",
            file_bytes(|p| {
                let mut kvs = vec![("general.architecture".to_owned(), Meta::Str("gemma3"))];
                kvs.extend(spm_metadata());
                write_gguf_tensors(p, &kvs, &[])
            }),
        ),
        (
            "wordpiece",
            file_bytes(|p| write_bert_gguf(p, &HfBert::tiny(1), &Convert::default())),
        ),
    ]
}

/// A one-block llama (8 wide, 2 heads over 1 KV head, n_ff 12) with the BPE
/// vocabulary, its block matrices Q4_1 (as SmolLM2's file), the rest F32.
fn tiny_llama_gguf() -> Vec<u8> {
    let mut kvs: Vec<(String, Meta)> = vec![
        ("general.architecture".into(), Meta::Str("llama")),
        ("llama.block_count".into(), Meta::U32(1)),
        ("llama.context_length".into(), Meta::U32(64)),
        ("llama.embedding_length".into(), Meta::U32(32)),
        ("llama.attention.head_count".into(), Meta::U32(2)),
        ("llama.attention.head_count_kv".into(), Meta::U32(1)),
        ("llama.feed_forward_length".into(), Meta::U32(64)),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Meta::F32(1e-6),
        ),
        ("llama.rope.freq_base".into(), Meta::F32(10000.0)),
    ];
    kvs.extend(bpe_metadata("smollm"));
    let names = LlamaNames::Gguf;
    let mut rng = TestRng::new(3);
    let mut tensor = |name: String, dtype: DType, ne: [u64; 2]| {
        let values: Vec<f32> = (0..ne[0] * ne[1])
            .map(|_| rng.uniform(-0.5, 0.5) as f32)
            .collect();
        let mut data =
            vec![0; dtype.row_bytes(ne[0]).expect("whole blocks") as usize * ne[1] as usize];
        kernels::quant::quantize_row(dtype, &values, &mut data);
        TensorData {
            name,
            dtype,
            ne: ne.to_vec(),
            data,
        }
    };
    let mut tensors = vec![tensor(names.token_embd(), DType::F32, [32, BPE_VOCAB])];
    for w in BlockWeight::ALL {
        use BlockWeight as B;
        let (dtype, ne) = match w {
            B::AttnNorm | B::FfnNorm => (DType::F32, [32, 1]),
            B::Wq | B::Wo => (DType::Q4_1, [32, 32]),
            B::Wk | B::Wv => (DType::Q4_1, [32, 16]),
            B::FfnGate | B::FfnUp => (DType::Q4_1, [32, 64]),
            B::FfnDown => (DType::Q4_1, [64, 32]),
        };
        tensors.push(tensor(names.block(0, w), dtype, ne));
    }
    tensors.push(tensor(names.output_norm(), DType::F32, [32, 1]));
    file_bytes(|p| write_gguf_tensors(p, &kvs, &tensors))
}

/// A Hugging Face folder in the `hf_folder` target's framing.
pub fn hf_folder_input(model: &HfBert) -> Vec<u8> {
    let config = serde_json::to_vec(&model.config).expect("config serializes");
    let modules = br#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#;
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = model
        .tensors
        .iter()
        .map(|t| {
            let shape = t.ne.iter().rev().map(|&n| n as usize).collect();
            let data = t.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (t.name.clone(), shape, data)
        })
        .collect();
    let views = bytes.iter().map(|(name, shape, data)| {
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                .expect("a consistent view");
        (name.clone(), view)
    });
    let weights = safetensors::tensor::serialize(views, None).expect("safetensors serializes");
    let mut out = Vec::new();
    for part in [&config[..], &modules[..]] {
        out.extend((part.len() as u16).to_le_bytes());
        out.extend(part);
    }
    out.extend(weights);
    out
}

/// `.npy` files of each element type the runtime reads.
fn npy_files() -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "f32-2x3.npy".into(),
            file_bytes(|p| {
                write_npy_f32(p, &[2, 3], &[1.0, -2.5, 3.25, f32::NAN, 0.0, 1e-30]).expect("npy")
            }),
        ),
        (
            "i32-4.npy".into(),
            file_bytes(|p| write_npy_i32(p, &[4], &[1, -2, 3, 1 << 30]).expect("npy")),
        ),
        (
            "scalar.npy".into(),
            file_bytes(|p| write_npy_f32(p, &[], &[7.0]).expect("npy")),
        ),
    ]
}

/// Captures of llama.cpp's decode as `scripts/llama-capture.sh` writes them,
/// small: a product; a cache write through `set_rows` with I64 indices read
/// through a scheduler copy, then a view of the cache; flash attention; a
/// mixture of experts' routing and products.
fn captures() -> Vec<(&'static str, String)> {
    let tensor =
        |id: usize, name: &str, op: &str, ty: &str, ne: [i64; 4], flags: u32, src: &[usize]| {
            let elem = match ty {
                "i64" => 8,
                "f16" => 2,
                _ => 4,
            };
            let nb = [
                elem,
                elem * ne[0],
                elem * ne[0] * ne[1],
                elem * ne[0] * ne[1] * ne[2],
            ];
            let op_params = [0i32; 16];
            serde_json::json!({
                "id": id, "name": name, "op": op, "desc": op, "type": ty, "ne": ne, "nb": nb,
                "op_params": op_params, "flags": flags, "src": src, "buffer": "CPU",
                "node": op != "NONE",
            })
        };
    let file = |tensors: Vec<serde_json::Value>, nodes: &[usize]| {
        serde_json::json!({
            "format": "ggplan-llama-capture", "version": 1, "model": "tiny.gguf",
            "architecture": "llama", "args": [], "n_vocab": 4, "n_ctx": 8, "tokens": [1, 2],
            "positions": [0, 1], "logits": {"file": "tiny.json.logits.npy", "shape": [2, 4]},
            "tensors": tensors, "nodes": nodes,
            "splits": [{"buffer": "CPU", "first": 0, "end": nodes.len(), "inputs": []}],
            "copies": [], "reserve": ["sched_reserve: graph: nodes = 1, splits = 1"],
        })
        .to_string()
    };
    let product = file(
        vec![
            tensor(0, "w", "NONE", "f32", [4, 4, 1, 1], 0, &[]),
            tensor(1, "x", "NONE", "f32", [4, 2, 1, 1], 1, &[]),
            tensor(2, "y", "MUL_MAT", "f32", [4, 2, 1, 1], 2, &[0, 1]),
        ],
        &[2],
    );
    let mut idx = tensor(1, "idx", "NONE", "i64", [2, 1, 1, 1], 1, &[]);
    idx["data_hex"] = "03000000000000000500000000000000".into();
    let mut copy = tensor(2, "CPU#idx#0", "NONE", "i64", [2, 1, 1, 1], 3, &[]);
    copy["copy_of"] = 1.into();
    let mut set = tensor(
        4,
        "cache_k_l0 (view)",
        "SET_ROWS",
        "f32",
        [4, 8, 1, 1],
        0,
        &[3, 2, 0],
    );
    set["view_src"] = 0.into();
    set["view_offs"] = 0.into();
    let mut view = tensor(5, "k", "VIEW", "f32", [4, 2, 1, 1], 2, &[4]);
    view["view_src"] = 0.into();
    view["view_offs"] = 16.into();
    let cache_write = file(
        vec![
            tensor(0, "cache_k_l0", "NONE", "f32", [4, 8, 1, 1], 0, &[]),
            idx,
            copy,
            tensor(3, "x", "NONE", "f32", [4, 2, 1, 1], 1, &[]),
            set,
            view,
        ],
        &[4, 5],
    );
    // llama.cpp's flash attention (2 heads over 1 KV head, 2 tokens, 8 cache
    // rows), which the import lowers to several ops.
    let flash_attn = file(
        vec![
            tensor(0, "q", "NONE", "f32", [4, 2, 2, 1], 1, &[]),
            tensor(1, "k", "NONE", "f16", [4, 8, 1, 1], 1, &[]),
            tensor(2, "v", "NONE", "f16", [4, 8, 1, 1], 1, &[]),
            tensor(3, "mask", "NONE", "f16", [8, 2, 1, 1], 1, &[]),
            tensor(
                4,
                "attn",
                "FLASH_ATTN_EXT",
                "f32",
                [4, 2, 2, 1],
                2,
                &[0, 1, 2, 3],
            ),
        ],
        &[4],
    );
    // A mixture of experts' routing: the top 2 of 4 experts per token
    // (argsort, then a strided view of its first two columns), their
    // products (mul_mat_id) and a clamp.
    let mut order = tensor(3, "order", "ARGSORT", "i32", [4, 2, 1, 1], 0, &[2]);
    order["op_params"][0] = 1.into();
    let mut topk = tensor(4, "topk", "VIEW", "i32", [2, 2, 1, 1], 0, &[3]);
    topk["nb"] = serde_json::json!([4, 16, 32, 32]);
    topk["view_src"] = 3.into();
    topk["view_offs"] = 0.into();
    let mut clamp = tensor(6, "c", "CLAMP", "f32", [3, 2, 2, 1], 2, &[5]);
    clamp["op_params"][0] = i32::from_le_bytes(6.1035156e-5f32.to_le_bytes()).into();
    clamp["op_params"][1] = i32::from_le_bytes(f32::INFINITY.to_le_bytes()).into();
    let moe = file(
        vec![
            tensor(0, "exps", "NONE", "f32", [4, 3, 4, 1], 0, &[]),
            tensor(1, "x", "NONE", "f32", [4, 1, 2, 1], 1, &[]),
            tensor(2, "logits", "NONE", "f32", [4, 2, 1, 1], 1, &[]),
            order,
            topk,
            tensor(5, "y", "MUL_MAT_ID", "f32", [3, 2, 2, 1], 0, &[0, 1, 4]),
            clamp,
        ],
        &[3, 4, 5, 6],
    );
    vec![
        ("product", product),
        ("cache-write", cache_write),
        ("flash-attn", flash_attn),
        ("moe", moe),
    ]
}

//! Fuzz bodies for the file readers and what is built from them: GGUF (every
//! accessor, the model builders, the tokenizer), Hugging Face folders
//! (config.json + model.safetensors), `.npy`, tokenizer encode/decode, and
//! captures of llama.cpp's decode (read, then imported).

use super::Scratch;
use super::seeds;
use ir::DType;
use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufValue};
use ir::files::npy::{NpyData, read_npy, write_npy_f32, write_npy_i32};
use ir::files::safetensors_file::SafetensorsFile;
use models::bert::{BertConfig, build_encoder};
use models::llama::{CacheConfig, LlamaConfig, build_cached_attending, build_prefill};
use models::{Family, StreamDecoder, Tokenizer};
use std::sync::OnceLock;

/// Tokens the model builders are asked for: small, so graphs stay cheap.
const N_TOKENS: i64 = 3;

/// A graph built from accepted files must verify.
fn assert_verifies(graph: &ir::Graph, what: &str) {
    let problems = ir::verify::verify(graph);
    assert!(
        problems.is_empty(),
        "{what}: built graph fails to verify: {problems:?}"
    );
}

/// Every tensor a source hands out holds exactly its shape's bytes.
fn assert_tensors_sized(source: &dyn TensorSource) {
    for name in source.tensor_names() {
        let t = source.tensor(name).expect("listed tensor is returned");
        let row = t
            .dtype
            .row_bytes(t.ne[0] as u64)
            .expect("tensor rows are whole blocks");
        let expected = row as u128 * t.ne[1..].iter().map(|&n| n as u128).product::<u128>();
        assert_eq!(
            t.data.len() as u128,
            expected,
            "tensor '{name}' {:?} {}",
            t.dtype,
            t.data.len()
        );
    }
}

fn touch_value(v: &GgufValue) {
    let _ = (
        v.type_name(),
        v.as_i64(),
        v.as_u64(),
        v.as_f64(),
        v.as_bool(),
        v.as_str(),
    );
    if let Some(items) = v.as_array() {
        items.iter().take(64).for_each(touch_value);
    }
}

/// GGUF bytes: open; every metadata accessor; every tensor; the builder of
/// the file's family (prefill and generation graphs for llama, the encoder
/// for BERT); the tokenizer and a round trip through it.
pub fn gguf(data: &[u8]) {
    let scratch = Scratch::file("input.gguf", data);
    let Ok(file) = GgufFile::open(scratch.as_path()) else {
        return;
    };
    let _ = (
        file.version(),
        file.alignment(),
        file.data_offset(),
        file.architecture(),
    );
    for (key, value) in file.metadata() {
        touch_value(value);
        let _ = (
            file.get_u32(key),
            file.get_u64(key),
            file.get_i64(key),
            file.get_f32(key),
        );
        let _ = (file.get_bool(key), file.get_str(key), file.get_array(key));
    }
    for info in file.tensor_infos() {
        assert_eq!(file.tensor_info(&info.name), Some(info));
    }
    assert_tensors_sized(&file);
    match Family::of(&file) {
        Ok(Family::Llama) => {
            if let Ok(cfg) = LlamaConfig::from_gguf(&file, N_TOKENS) {
                if let Ok(g) = build_prefill(&cfg) {
                    assert_verifies(&g, "llama prefill");
                }
                let cache = CacheConfig {
                    n_ctx: 8,
                    kv_dtype: DType::F16,
                };
                if let Ok(g) = build_cached_attending(&cfg, &cache, 4) {
                    assert_verifies(&g, "llama cached");
                }
            }
        }
        Ok(Family::Bert) => {
            if let Ok(cfg) = BertConfig::from_gguf(&file, N_TOKENS)
                && let Ok(g) = build_encoder(&cfg)
            {
                assert_verifies(&g, "bert encoder");
            }
        }
        Err(_) => {}
    }
    if let Ok(tok) = Tokenizer::from_gguf(&file) {
        exercise_tokenizer(&tok, "Hello world, 12 cafés!", false);
    }
}

/// A Hugging Face folder: `[u16 LE n][n bytes of config.json][u16 LE m][m
/// bytes of modules.json, absent when m = 0][model.safetensors]`.
pub fn hf_folder(data: &[u8]) {
    let Some((config, rest)) = take_part(data) else {
        return;
    };
    let Some((modules, weights)) = take_part(rest) else {
        return;
    };
    let dir = Scratch::dir("hf");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.as_path().join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    };
    write("config.json", config);
    if !modules.is_empty() {
        write("modules.json", modules);
    }
    write("model.safetensors", weights);
    if let Ok(file) = SafetensorsFile::open(dir.as_path().join("model.safetensors")) {
        let _ = (file.metadata().len(), file.unusable_tensor_names());
        assert_tensors_sized(&file);
    }
    if let Ok(cfg) = BertConfig::from_hf_dir(dir.as_path(), N_TOKENS)
        && let Ok(g) = build_encoder(&cfg)
    {
        assert_verifies(&g, "bert encoder (Hugging Face)");
    }
}

/// One length-prefixed part and what follows it.
fn take_part(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = data.split_first_chunk::<2>()?;
    let len = u16::from_le_bytes(*len) as usize;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// `.npy` bytes: read; what reads back as f32 or i32 is written and read
/// again, unchanged.
pub fn npy(data: &[u8]) {
    let input = Scratch::file("input.npy", data);
    let Ok(array) = read_npy(input.as_path()) else {
        return;
    };
    let n = array.shape.iter().map(|&d| d as u128).product::<u128>();
    assert_eq!(
        n,
        array.data.len() as u128,
        "shape {:?} against the element count",
        array.shape
    );
    let _ = array.data.descr();
    let again = Scratch::path("again.npy");
    let written = match &array.data {
        NpyData::F32(v) => write_npy_f32(&again.0, &array.shape, v),
        NpyData::I32(v) => write_npy_i32(&again.0, &array.shape, v),
        _ => return,
    };
    written.expect("an array read back writes");
    let reread = read_npy(&again.0).expect("a written array reads back");
    assert_eq!(reread.shape, array.shape);
    match (&reread.data, &array.data) {
        // NaN payloads survive, but NaN != NaN: compare bits.
        (NpyData::F32(a), NpyData::F32(b)) => {
            assert!(
                a.iter()
                    .map(|x| x.to_bits())
                    .eq(b.iter().map(|x| x.to_bits()))
            )
        }
        (a, b) => assert_eq!(a, b),
    }
}

/// The tokenizers of the seed GGUF files: byte-level BPE with each
/// pre-tokenizer, SentencePiece, and WordPiece.
fn tokenizers() -> &'static [(&'static str, Tokenizer)] {
    static TOKENIZERS: OnceLock<Vec<(&'static str, Tokenizer)>> = OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        seeds::tokenizer_ggufs()
            .into_iter()
            .map(|(name, bytes)| {
                let file = Scratch::file(&format!("{name}.gguf"), &bytes);
                let gguf = GgufFile::open(file.as_path()).unwrap_or_else(|e| panic!("{name}: {e}"));
                let tok = Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{name}: {e}"));
                (name, tok)
            })
            .collect()
    })
}

/// Arbitrary bytes through a tokenizer: `[which tokenizer][text or ids]`.
/// Text is encoded and decoded (byte-level BPE gives the text back unless it
/// spells a control token); ids (u16 LE, in range or not) are decoded and
/// stream-decoded, which must agree.
pub fn tokenizer(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let all = tokenizers();
    let (name, tok) = &all[which as usize % all.len()];
    if which & 0x80 == 0 {
        let text = String::from_utf8_lossy(rest);
        exercise_tokenizer(tok, &text, name.starts_with("bpe"));
    } else {
        let ids: Vec<u32> = rest
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        decode_both_ways(tok, &ids, name.starts_with("bpe"));
    }
}

/// Encodes `text` and decodes the ids; `byte_level` tokenizers must give the
/// text back (unless it spells a control token, which decoding leaves out).
fn exercise_tokenizer(tok: &Tokenizer, text: &str, byte_level: bool) {
    let Ok(ids) = tok.encode(text) else {
        return;
    };
    for &id in &ids {
        assert!(
            (id as usize) < tok.vocab_size(),
            "encode gave id {id} of {}",
            tok.vocab_size()
        );
    }
    let decoded = decode_both_ways(tok, &ids, byte_level).expect("ids from encode decode");
    if byte_level && !text.contains("<|") {
        assert_eq!(
            decoded, text,
            "byte-level BPE round trip of {text:?} via {ids:?}"
        );
    }
}

/// Decodes `ids` at once and one by one: both refuse or both accept, and for
/// byte-level BPE (`exact`) the pieces concatenate to the whole (the
/// invariant of [`StreamDecoder`]).
fn decode_both_ways(tok: &Tokenizer, ids: &[u32], exact: bool) -> Option<String> {
    let whole = tok.decode(ids);
    let mut stream = StreamDecoder::new(tok);
    let mut pieces = String::new();
    for &id in ids {
        match stream.push(id) {
            Ok(piece) => pieces.push_str(&piece),
            Err(_) => {
                assert!(
                    whole.is_err(),
                    "stream refused id {id}, decode accepted {ids:?}"
                );
                return None;
            }
        }
    }
    pieces.push_str(&stream.finish());
    let whole = whole.expect("stream accepted every id");
    if exact {
        assert_eq!(pieces, whole, "stream decoding of {ids:?}");
    }
    Some(whole)
}

/// A capture of llama.cpp's decode (JSON): read; an accepted capture is
/// imported, and an imported graph verifies.
pub fn capture(data: &[u8]) {
    let input = Scratch::file("capture.json", data);
    let Ok(capture) = models::capture::read_capture(input.as_path()) else {
        return;
    };
    if let Ok(imported) = models::capture::import(&capture, "fuzz") {
        assert_verifies(&imported.graph, "imported capture");
    }
}

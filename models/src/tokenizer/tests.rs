//! Tokenizer tests on small GGUF files written here (they run everywhere):
//! a byte-level BPE vocabulary of the 256 byte characters plus a few merges,
//! round trips, digit splitting, BOS, control tokens, streaming, and every
//! load error. The real SmolLM2 and MiniLM tokenizers are tested against the
//! references in the workspace's `tests/tokenizers.rs`.

use super::*;
use ir::files::gguf::{GGUF_MAGIC, GgufFile, GgufValue};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

/// GGUF value type id of `v`.
fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::String(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    let put_str = |out: &mut Vec<u8>, s: &str| {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    };
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.extend(x.to_le_bytes()),
        GgufValue::U16(x) => out.extend(x.to_le_bytes()),
        GgufValue::I16(x) => out.extend(x.to_le_bytes()),
        GgufValue::U32(x) => out.extend(x.to_le_bytes()),
        GgufValue::I32(x) => out.extend(x.to_le_bytes()),
        GgufValue::F32(x) => out.extend(x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(u8::from(*x)),
        GgufValue::String(s) => put_str(out, s),
        GgufValue::Array(items) => {
            out.extend(items.first().map_or(8, type_id).to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        GgufValue::U64(x) => out.extend(x.to_le_bytes()),
        GgufValue::I64(x) => out.extend(x.to_le_bytes()),
        GgufValue::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// Writes a GGUF v3 file with metadata `kvs` and no tensors, and opens it.
pub(super) fn write_gguf(name: &str, kvs: &[(&str, GgufValue)]) -> GgufFile {
    let mut out = GGUF_MAGIC.to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_value(&mut out, &GgufValue::String((*key).to_owned()));
        out.extend(type_id(value).to_le_bytes());
        put_value(&mut out, value);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    // Tests run in parallel and several build the same vocabulary: the
    // counter keeps their files apart.
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "ggplan-tokenizer-{}-{n}-{name}.gguf",
        std::process::id()
    ));
    std::fs::write(&path, out).unwrap();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    // The map stays valid after the name is removed (Unix semantics).
    let _ = std::fs::remove_file(&path);
    file
}

pub(super) fn strings(items: &[String]) -> GgufValue {
    GgufValue::Array(items.iter().cloned().map(GgufValue::String).collect())
}

/// The byte-level character of `byte` (how BPE vocabularies spell bytes).
fn byte_char(byte: u8) -> String {
    // The mapping is fixed: printable bytes map to themselves, the others to
    // U+0100 onwards in byte order.
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(byte) {
        char::from(byte).to_string()
    } else {
        let rank = (0..byte).filter(|&b| !printable(b)).count();
        char::from_u32(0x100 + rank as u32).unwrap().to_string()
    }
}

/// Control token at id 0, then the 256 byte characters, then merged tokens.
const MERGES: &[(&str, &str)] = &[("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2")];

/// Tokenizer metadata of the tiny vocabulary, with `pre` as pre-tokenizer.
fn tiny_kvs(pre: &str) -> Vec<(&'static str, GgufValue)> {
    let mut tokens = vec!["<|endoftext|>".to_owned()];
    tokens.extend((0..=255u8).map(byte_char));
    tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
    let mut types = vec![GgufValue::I32(3)];
    types.extend((1..tokens.len()).map(|_| GgufValue::I32(1)));
    let merges: Vec<String> = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
    vec![
        ("general.architecture", GgufValue::String("llama".into())),
        ("tokenizer.ggml.model", GgufValue::String("gpt2".into())),
        ("tokenizer.ggml.pre", GgufValue::String(pre.into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.token_type", GgufValue::Array(types)),
        ("tokenizer.ggml.merges", strings(&merges)),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(0)),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(0)),
    ]
}

fn tiny(pre: &str) -> Tokenizer {
    let file = write_gguf(&format!("tiny-{pre}"), &tiny_kvs(pre));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
}

/// Id of the token spelled `s` in the tiny vocabulary.
fn id_of(s: &str) -> u32 {
    if let Some(i) = MERGES.iter().position(|(a, b)| format!("{a}{b}") == s) {
        return 257 + i as u32;
    }
    let bytes = s.as_bytes();
    assert_eq!(bytes.len(), 1, "{s:?} is not a tiny-vocabulary token");
    1 + u32::from(bytes[0])
}

#[test]
fn byte_characters_are_the_byte_level_alphabet() {
    let ours: std::collections::BTreeSet<char> = (0..=255u8)
        .flat_map(|b| byte_char(b).chars().collect::<Vec<_>>())
        .collect();
    let theirs: std::collections::BTreeSet<char> = ByteLevel::alphabet().into_iter().collect();
    assert_eq!(ours.len(), 256);
    assert_eq!(ours, theirs);
}

const TRICKY: &[&str] = &[
    "",
    "the theme",
    "  two  spaces,\tthen a tab\n\nand newlines\r\n",
    "digits 12345 and 2024-06-01",
    "naïve café, Ελληνικά, 日本語, русский",
    "emoji 😀👍🏽 and a family 👨‍👩‍👧 flag 🇫🇷",
    "trailing space ",
    "'s 'll 've don't",
];

#[test]
fn tiny_vocabulary_round_trips_every_tricky_string() {
    for pre in ["smollm", "gpt-2", "llama-bpe", "qwen2", "starcoder"] {
        let tok = tiny(pre);
        assert_eq!(tok.vocab_size(), 1 + 256 + MERGES.len());
        assert_eq!(tok.eos_id(), Some(0));
        for s in TRICKY {
            let ids = tok.encode(s).unwrap();
            assert_eq!(tok.decode(&ids).unwrap(), *s, "{pre}: {ids:?}");
        }
    }
}

#[test]
fn merges_apply_within_pieces_and_digits_split_as_the_pre_tokenizer_says() {
    let smollm = tiny("smollm");
    assert_eq!(
        smollm.encode("the the").unwrap(),
        [id_of("t"), id_of("he"), id_of("Ġthe")]
    );
    // smollm isolates every digit first, so the "1 2" merge never applies.
    assert_eq!(smollm.encode("12").unwrap(), [id_of("1"), id_of("2")]);
    // GPT-2 keeps digit runs together, so it does.
    assert_eq!(tiny("gpt-2").encode("12").unwrap(), [id_of("12")]);
    // Qwen2 splits digits one by one too; Llama 3 groups up to three.
    assert_eq!(
        tiny("qwen2").encode("12").unwrap(),
        [id_of("1"), id_of("2")]
    );
    assert_eq!(tiny("llama-bpe").encode("12").unwrap(), [id_of("12")]);
    // GPT-2 gives a space to the following word; Llama 3 likewise.
    assert_eq!(tiny("llama-bpe").encode(" the").unwrap(), [id_of("Ġthe")]);
}

#[test]
fn bos_is_added_only_when_the_file_says_so() {
    assert_eq!(tiny("smollm").encode("a").unwrap(), [id_of("a")]);
    let mut kvs = tiny_kvs("smollm");
    kvs.push(("tokenizer.ggml.add_bos_token", GgufValue::Bool(true)));
    let tok = Tokenizer::from_gguf(&write_gguf("bos", &kvs)).unwrap();
    assert_eq!(tok.encode("a").unwrap(), [0, id_of("a")]);
    assert_eq!(tok.decode(&[0, id_of("a")]).unwrap(), "a");
}

#[test]
fn control_tokens_in_text_are_one_id_and_left_out_of_decoded_text() {
    let tok = tiny("smollm");
    let ids = tok.encode("a<|endoftext|>b").unwrap();
    assert_eq!(ids, [id_of("a"), 0, id_of("b")]);
    assert_eq!(tok.decode(&ids).unwrap(), "ab");
}

#[test]
fn generation_ends_at_eos_eot_eom_and_llama_cpps_end_texts() {
    let mut kvs = tiny_kvs("gpt-2");
    set(
        &mut kvs,
        "tokenizer.ggml.eos_token_id",
        GgufValue::U32(id_of("he")),
    );
    kvs.push(("tokenizer.ggml.eot_token_id", GgufValue::U32(id_of("12"))));
    kvs.push(("tokenizer.ggml.eom_token_id", GgufValue::U32(id_of("12"))));
    let tok = Tokenizer::from_gguf(&write_gguf("tiny-eog", &kvs)).unwrap();
    // `<|endoftext|>` (id 0) by its text, EOS, and EOT = EOM once.
    let mut want = vec![0, id_of("he"), id_of("12")];
    want.sort();
    assert_eq!(tok.end_of_generation_ids(), want);
    assert!(tok.is_end_of_generation(id_of("12")));
    assert!(!tok.is_end_of_generation(id_of("t")));

    // Without EOS, EOT or EOM keys: the end-of-text token alone.
    let mut kvs = tiny_kvs("gpt-2");
    kvs.retain(|(k, _)| *k != "tokenizer.ggml.eos_token_id");
    let tok = Tokenizer::from_gguf(&write_gguf("tiny-eog-text", &kvs)).unwrap();
    assert_eq!(tok.end_of_generation_ids(), [0]);
}

#[test]
fn decode_rejects_ids_outside_the_vocabulary() {
    let tok = tiny("smollm");
    let err = tok.decode(&[1, 261]).unwrap_err().to_string();
    assert!(
        err.contains("token id 261") && err.contains("261)"),
        "{err}"
    );
    let mut stream = StreamDecoder::new(&tok);
    assert!(stream.push(9999).is_err());
    assert_eq!(stream.push(id_of("a")).unwrap(), "a");
}

#[test]
fn stream_decoder_holds_bytes_until_characters_are_whole() {
    let tok = tiny("smollm");
    let text = "hi 😀! 日本 👨‍👩‍👧x";
    let ids = tok.encode(text).unwrap();
    // Every non-ASCII byte is its own token here, so characters span tokens.
    assert!(ids.len() > text.chars().count());
    let mut stream = StreamDecoder::new(&tok);
    let mut out = String::new();
    let mut held = 0;
    for &id in &ids {
        let piece = stream.push(id).unwrap();
        assert!(!piece.contains(char::REPLACEMENT_CHARACTER), "{piece:?}");
        held += usize::from(piece.is_empty());
        out.push_str(&piece);
    }
    out.push_str(&stream.finish());
    assert_eq!(out, text);
    assert!(
        held >= 3,
        "multi-byte characters were held back {held} times"
    );
}

#[test]
fn stream_decoder_finish_flushes_an_incomplete_character() {
    let tok = tiny("smollm");
    let mut stream = StreamDecoder::new(&tok);
    assert_eq!(stream.push(id_of("a")).unwrap(), "a");
    // The first two of 😀's four bytes (F0 9F 98 80).
    assert_eq!(stream.push(1 + 0xF0).unwrap(), "");
    assert_eq!(stream.push(1 + 0x9F).unwrap(), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert_eq!(stream.finish(), "");
    assert_eq!(stream.push(id_of("b")).unwrap(), "b");
}

/// The error of loading the tiny tokenizer with `edit` applied to its
/// metadata.
fn load_error(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, GgufValue)>)) -> String {
    let mut kvs = tiny_kvs("smollm");
    edit(&mut kvs);
    let file = write_gguf(name, &kvs);
    let err = Tokenizer::from_gguf(&file).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{name}.gguf")),
        "names the file: {err}"
    );
    err
}

fn set(kvs: &mut [(&'static str, GgufValue)], key: &str, value: GgufValue) {
    kvs.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
}

#[test]
fn load_errors_name_the_file_key_and_value() {
    let err = load_error("rwkv", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.model",
            GgufValue::String("rwkv".into()),
        )
    });
    assert!(
        err.contains("tokenizer.ggml.model is \"rwkv\"") && err.contains("\"bert\" (WordPiece)"),
        "{err}"
    );

    let err = load_error("unknown-pre", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.pre",
            GgufValue::String("mystery".into()),
        )
    });
    assert!(
        err.contains("\"mystery\"") && err.contains("smollm"),
        "{err}"
    );

    let err = load_error("no-tokens", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.tokens")
    });
    assert!(err.contains("tokenizer.ggml.tokens: missing"), "{err}");

    let err = load_error("no-model", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.model")
    });
    assert!(err.contains("tokenizer.ggml.model: missing"), "{err}");

    let err = load_error("tokens-not-strings", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.tokens",
            GgufValue::Array(vec![GgufValue::U32(1)]),
        )
    });
    assert!(err.contains("element 0 is a u32"), "{err}");

    let err = load_error("bad-merge", |kvs| {
        set(kvs, "tokenizer.ggml.merges", strings(&["ab".to_owned()]))
    });
    assert!(err.contains("element 0 (\"ab\")"), "{err}");

    let err = load_error("merge-out-of-vocab", |kvs| {
        set(kvs, "tokenizer.ggml.merges", strings(&["x zz".to_owned()]))
    });
    assert!(err.contains("cannot build the BPE tokenizer"), "{err}");

    let err = load_error("eos-out-of-range", |kvs| {
        set(kvs, "tokenizer.ggml.eos_token_id", GgufValue::U32(5000))
    });
    assert!(
        err.contains("tokenizer.ggml.eos_token_id") && err.contains("5000"),
        "{err}"
    );

    let err = load_error("eot-out-of-range", |kvs| {
        kvs.push(("tokenizer.ggml.eot_token_id", GgufValue::U32(4000)));
    });
    assert!(
        err.contains("tokenizer.ggml.eot_token_id") && err.contains("4000"),
        "{err}"
    );

    let err = load_error("types-short", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.token_type",
            GgufValue::Array(vec![GgufValue::I32(1)]),
        )
    });
    assert!(err.contains("1 entries for 261 tokens"), "{err}");

    let err = load_error("bos-wanted", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.bos_token_id");
        kvs.push(("tokenizer.ggml.add_bos_token", GgufValue::Bool(true)));
    });
    assert!(
        err.contains("tokenizer.ggml.bos_token_id: missing, but"),
        "{err}"
    );
}

#[test]
fn hf_file_errors_name_the_file() {
    let path =
        std::env::temp_dir().join(format!("ggplan-tokenizer-{}-bad.json", std::process::id()));
    std::fs::write(&path, "{ not json").unwrap();
    let err = Tokenizer::from_hf_file(&path).unwrap_err().to_string();
    let _ = std::fs::remove_file(&path);
    assert!(
        err.contains("bad.json") && err.contains("cannot load"),
        "{err}"
    );
    let missing = Path::new("/nonexistent/tokenizer.json");
    let err = Tokenizer::from_hf_file(missing).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/tokenizer.json"), "{err}");
}

//! The GGUF WordPiece tokenizer on a tiny phantom-space vocabulary written
//! here (runs everywhere): ids as a BERT `tokenizer.json` gives them, control
//! tokens, unknown words, decoding, and every load error. The real MiniLM
//! vocabulary converted to GGUF is tested against the reference ids in the
//! workspace's `tests/bert_gguf.rs`.

use super::gguf_wordpiece::unphantom;
use super::tests::{strings, write_gguf};
use super::*;
use ir::files::gguf::GgufValue;

/// The vocabulary in WordPiece spelling with its GGUF token types
/// (3 = control, 5 = unused).
const VOCAB: &[(&str, i32)] = &[
    ("[PAD]", 3),
    ("[UNK]", 3),
    ("[CLS]", 3),
    ("[SEP]", 3),
    ("[MASK]", 3),
    ("hello", 1),
    ("world", 1),
    ("##s", 1),
    ("!", 1),
    ("un", 1),
    ("##believ", 1),
    ("##able", 1),
    ("cafe", 1),
    ("[unused0]", 5),
    ("s", 1),
];

/// llama.cpp's converter's spelling of a WordPiece token: control tokens as
/// they are, continuations without `##`, word starts after U+2581.
fn phantom(token: &str, kind: i32) -> String {
    if kind == 3 {
        token.to_owned()
    } else if let Some(piece) = token.strip_prefix("##") {
        piece.to_owned()
    } else {
        format!("\u{2581}{token}")
    }
}

/// The tokenizer metadata llama.cpp's converter writes for [`VOCAB`].
fn tiny_kvs() -> Vec<(&'static str, GgufValue)> {
    let tokens: Vec<String> = VOCAB.iter().map(|(t, k)| phantom(t, *k)).collect();
    let types = VOCAB.iter().map(|(_, k)| GgufValue::I32(*k)).collect();
    vec![
        ("general.architecture", GgufValue::String("bert".into())),
        ("tokenizer.ggml.model", GgufValue::String("bert".into())),
        ("tokenizer.ggml.pre", GgufValue::String("jina-v2-en".into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.token_type", GgufValue::Array(types)),
        ("tokenizer.ggml.unknown_token_id", GgufValue::U32(1)),
        ("tokenizer.ggml.seperator_token_id", GgufValue::U32(3)),
        ("tokenizer.ggml.padding_token_id", GgufValue::U32(0)),
        ("tokenizer.ggml.cls_token_id", GgufValue::U32(2)),
        ("tokenizer.ggml.mask_token_id", GgufValue::U32(4)),
    ]
}

fn load(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, GgufValue)>)) -> Tokenizer {
    let mut kvs = tiny_kvs();
    edit(&mut kvs);
    Tokenizer::from_gguf(&write_gguf(name, &kvs)).unwrap_or_else(|e| panic!("{e}"))
}

fn load_error(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, GgufValue)>)) -> String {
    let mut kvs = tiny_kvs();
    edit(&mut kvs);
    let err = Tokenizer::from_gguf(&write_gguf(name, &kvs))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{name}.gguf")),
        "names the file: {err}"
    );
    err
}

#[test]
fn unphantom_inverts_the_converter() {
    for (token, kind) in VOCAB {
        assert_eq!(unphantom(&phantom(token, *kind), i64::from(*kind)), *token);
    }
}

#[test]
fn encodes_as_bert_with_cls_and_sep() {
    let tok = load("wp", |_| {});
    assert_eq!(tok.vocab_size(), VOCAB.len());
    assert_eq!(tok.encode("Hello worlds!").unwrap(), [2, 5, 6, 7, 8, 3]);
    // Lower-cased, accents stripped; a word start differs from a continuation.
    assert_eq!(
        tok.encode("Unbelievable CAFÉ s").unwrap(),
        [2, 9, 10, 11, 12, 14, 3]
    );
    // A word with no pieces is one unknown token; control tokens in text are
    // one id each.
    assert_eq!(tok.encode("xyz hello").unwrap(), [2, 1, 5, 3]);
    assert_eq!(tok.encode("[MASK] hello").unwrap(), [2, 4, 5, 3]);
    assert_eq!(tok.encode("").unwrap(), [2, 3]);
    assert_eq!(
        tok.decode(&[2, 5, 6, 7, 8, 3]).unwrap(),
        "hello worlds!",
        "pieces joined, special tokens left out"
    );
}

#[test]
fn cls_and_sep_fall_back_to_bos_and_eos() {
    let tok = load("wp-bos", |kvs| {
        kvs.retain(|(k, _)| {
            !matches!(
                *k,
                "tokenizer.ggml.cls_token_id" | "tokenizer.ggml.seperator_token_id"
            )
        });
        kvs.push(("tokenizer.ggml.bos_token_id", GgufValue::U32(2)));
        kvs.push(("tokenizer.ggml.eos_token_id", GgufValue::U32(3)));
    });
    assert_eq!(tok.encode("hello").unwrap(), [2, 5, 3]);
    assert_eq!(tok.eos_id(), Some(3));
}

#[test]
fn load_errors_name_the_key() {
    let err = load_error("wp-no-unk", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.unknown_token_id")
    });
    assert!(
        err.contains("tokenizer.ggml.unknown_token_id: missing"),
        "{err}"
    );
    let err = load_error("wp-no-cls", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.cls_token_id")
    });
    assert!(
        err.contains(
            "tokenizer.ggml.cls_token_id: missing (and so is tokenizer.ggml.bos_token_id)"
        ),
        "{err}"
    );
    let err = load_error("wp-sep-out", |kvs| {
        kvs.iter_mut()
            .find(|(k, _)| *k == "tokenizer.ggml.seperator_token_id")
            .unwrap()
            .1 = GgufValue::U32(99);
    });
    assert!(
        err.contains("tokenizer.ggml.seperator_token_id") && err.contains("id 99"),
        "{err}"
    );
    let err = load_error("wp-no-tokens", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.tokens")
    });
    assert!(err.contains("tokenizer.ggml.tokens: missing"), "{err}");
}

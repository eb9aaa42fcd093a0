//! The GGUF SentencePiece tokenizer on a tiny vocabulary written here (runs
//! everywhere): merges by score, ties to the left, byte fallback, special
//! tokens in text, `add_space_prefix` both ways, BOS and EOS, decoding and
//! streaming, and the load errors. Gemma 3 270M's real vocabulary is tested
//! against llama.cpp's ids in `spm_gemma3_tests.rs`.

use super::tests::{strings, write_gguf};
use super::*;
use ir::files::gguf::GgufValue;

/// The vocabulary: text, score, GGUF token type (1 normal, 2 unknown,
/// 3 control, 4 user-defined, 6 byte). Ids are positions.
const VOCAB: &[(&str, f32, i32)] = &[
    ("<unk>", 0.0, 2),
    ("<s>", 0.0, 3),
    ("</s>", 0.0, 3),
    ("<start_of_turn>", 0.0, 3),
    ("<b>", 0.0, 4),
    ("x<", 0.0, 4),
    // The four bytes of 🦀 (F0 9F A6 80); no other byte has a token.
    ("<0xF0>", 0.0, 6),
    ("<0x9F>", 0.0, 6),
    ("<0xA6>", 0.0, 6),
    ("<0x80>", 0.0, 6),
    ("\u{2581}", -10.0, 1),
    ("a", -10.0, 1),
    ("b", -10.0, 1),
    ("c", -10.0, 1),
    ("t", -10.0, 1),
    ("h", -10.0, 1),
    ("e", -10.0, 1),
    ("x", -10.0, 1),
    ("y", -10.0, 1),
    ("ab", -5.0, 1),
    ("bc", -1.0, 1),
    // Two different tokens of equal score: the leftmost pair merges first.
    ("xy", -2.0, 1),
    ("yx", -2.0, 1),
    ("xx", -3.0, 1),
    ("\u{2581}t", -1.0, 1),
    ("he", -2.0, 1),
    // Reached only through "▁t" + "he": "▁th" is not a token.
    ("\u{2581}the", -4.0, 1),
];

/// Id of the token spelled `text` (spaces as `▁`).
fn id(text: &str) -> u32 {
    let text = text.replace(' ', "\u{2581}");
    VOCAB
        .iter()
        .position(|(t, _, _)| *t == text)
        .unwrap_or_else(|| panic!("{text:?} is not in the tiny vocabulary")) as u32
}

/// Ids of the tokens spelled `texts`.
fn ids(texts: &[&str]) -> Vec<u32> {
    texts.iter().map(|t| id(t)).collect()
}

/// Tokenizer metadata of [`VOCAB`]: BOS `<s>`, EOS `</s>`, unknown `<unk>`,
/// no BOS added, no space prefix (as Gemma 3 has it).
fn tiny_kvs() -> Vec<(&'static str, GgufValue)> {
    let tokens: Vec<String> = VOCAB.iter().map(|(t, _, _)| (*t).to_owned()).collect();
    let scores = VOCAB.iter().map(|(_, s, _)| GgufValue::F32(*s)).collect();
    let types = VOCAB.iter().map(|(_, _, k)| GgufValue::I32(*k)).collect();
    vec![
        ("general.architecture", GgufValue::String("gemma3".into())),
        ("tokenizer.ggml.model", GgufValue::String("llama".into())),
        ("tokenizer.ggml.pre", GgufValue::String("default".into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.scores", GgufValue::Array(scores)),
        ("tokenizer.ggml.token_type", GgufValue::Array(types)),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(1)),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(2)),
        ("tokenizer.ggml.unknown_token_id", GgufValue::U32(0)),
        ("tokenizer.ggml.add_bos_token", GgufValue::Bool(false)),
        ("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false)),
    ]
}

/// The tiny tokenizer with `edit` applied to its metadata.
fn tiny_with(edit: impl FnOnce(&mut Vec<(&'static str, GgufValue)>)) -> Tokenizer {
    let mut kvs = tiny_kvs();
    edit(&mut kvs);
    Tokenizer::from_gguf(&write_gguf("spm", &kvs)).unwrap_or_else(|e| panic!("{e}"))
}

fn tiny() -> Tokenizer {
    tiny_with(|_| {})
}

fn set(kvs: &mut Vec<(&'static str, GgufValue)>, key: &'static str, value: GgufValue) {
    kvs.retain(|(k, _)| *k != key);
    kvs.push((key, value));
}

#[test]
fn the_highest_score_merges_first() {
    let tok = tiny();
    assert_eq!(tok.vocab_size(), VOCAB.len());
    assert_eq!(tok.eos_id(), Some(id("</s>")));
    // "bc" (-1) beats "ab" (-5), although "ab" is further left.
    assert_eq!(tok.encode("abc").unwrap(), ids(&["a", "bc"]));
    assert_eq!(tok.encode("ab").unwrap(), ids(&["ab"]));
    // "▁the" is reached through "▁t" (-1), then "he" (-2), then "▁t"+"he".
    assert_eq!(tok.encode(" the").unwrap(), ids(&[" the"]));
    assert_eq!(tok.encode("the").unwrap(), ids(&["t", "he"]));
    assert_eq!(tok.encode("the the").unwrap(), ids(&["t", "he", " the"]));
    assert!(tok.encode("").unwrap().is_empty());
}

#[test]
fn equal_scores_merge_the_leftmost_pair() {
    let tok = tiny();
    // "xy" and "yx" score alike: whichever pair is further left merges.
    assert_eq!(tok.encode("yxy").unwrap(), ids(&["yx", "y"]));
    assert_eq!(tok.encode("xyx").unwrap(), ids(&["xy", "x"]));
    assert_eq!(tok.encode("xxx").unwrap(), ids(&["xx", "x"]));
    assert_eq!(tok.encode("xxxx").unwrap(), ids(&["xx", "xx"]));
}

#[test]
fn characters_outside_the_vocabulary_fall_back_to_bytes() {
    let tok = tiny();
    let crab = ids(&["<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"]);
    let mut want = ids(&["a"]);
    want.extend(&crab);
    want.extend(ids(&["b"]));
    assert_eq!(tok.encode("a🦀b").unwrap(), want);
    // é is C3 A9, neither of which has a byte token: one unknown per byte.
    assert_eq!(tok.encode("é").unwrap(), [0, 0]);
    assert_eq!(tok.decode(&want).unwrap(), "a🦀b");
}

#[test]
fn special_tokens_in_text_are_one_id_each_longest_first() {
    let tok = tiny();
    assert_eq!(
        tok.encode("<start_of_turn>the</s>").unwrap(),
        ids(&["<start_of_turn>", "t", "he", "</s>"])
    );
    assert_eq!(tok.encode("ab<b>ab").unwrap(), ids(&["ab", "<b>", "ab"]));
    assert_eq!(tok.encode("<unk>").unwrap(), [0]);
    // llama.cpp cuts the longer "<b>" out first, so the shorter "x<", which
    // starts further left, no longer matches.
    assert_eq!(tok.encode("x<b>").unwrap(), ids(&["x", "<b>"]));
    assert_eq!(tok.encode("x<a").unwrap(), [id("x<"), id("a")]);
    // Control tokens are left out of decoded text, user-defined ones kept.
    assert_eq!(
        tok.decode(&ids(&[
            "<s>",
            "<start_of_turn>",
            "ab",
            "<b>",
            "</s>",
            "<unk>"
        ]))
        .unwrap(),
        "ab<b>"
    );
}

#[test]
fn add_space_prefix_puts_a_space_before_the_text_and_after_specials() {
    let without = tiny();
    let with = tiny_with(|kvs| kvs.retain(|(k, _)| *k != "tokenizer.ggml.add_space_prefix"));
    assert_eq!(without.encode("the").unwrap(), ids(&["t", "he"]));
    assert_eq!(with.encode("the").unwrap(), ids(&[" the"]));
    assert_eq!(
        with.encode("the<b>the").unwrap(),
        ids(&[" the", "<b>", " the"])
    );
    assert_eq!(
        with.encode("<start_of_turn>the").unwrap(),
        ids(&["<start_of_turn>", " the"])
    );
    assert!(with.encode("").unwrap().is_empty());
    // Decoding drops the space the prefix added, and only that one.
    assert_eq!(with.decode(&ids(&[" the", " the"])).unwrap(), "the the");
    assert_eq!(without.decode(&ids(&[" the", " the"])).unwrap(), " the the");
}

#[test]
fn bos_is_added_unless_the_file_says_no_and_eos_when_it_says_yes() {
    assert_eq!(tiny().encode("ab").unwrap(), ids(&["ab"]));
    let default = tiny_with(|kvs| kvs.retain(|(k, _)| *k != "tokenizer.ggml.add_bos_token"));
    assert_eq!(default.encode("ab").unwrap(), ids(&["<s>", "ab"]));
    assert_eq!(default.encode("").unwrap(), ids(&["<s>"]));
    let both = tiny_with(|kvs| {
        set(kvs, "tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
        set(kvs, "tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
    });
    assert_eq!(both.encode("ab").unwrap(), ids(&["<s>", "ab", "</s>"]));
    assert_eq!(both.decode(&both.encode("ab").unwrap()).unwrap(), "ab");
}

#[test]
fn decode_round_trips_text_without_special_tokens() {
    let texts = ["", " ", "  the  the ", "abc yxy xxx", "🦀 the🦀", "tt"];
    for prefix in [false, true] {
        let tok = tiny_with(|kvs| {
            set(
                kvs,
                "tokenizer.ggml.add_space_prefix",
                GgufValue::Bool(prefix),
            );
            set(kvs, "tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
        });
        for text in texts {
            let encoded = tok.encode(text).unwrap();
            assert_eq!(tok.decode(&encoded).unwrap(), text, "{prefix}: {encoded:?}");
        }
    }
}

#[test]
fn stream_decoder_holds_byte_tokens_until_the_character_is_whole() {
    let tok = tiny();
    let mut stream = StreamDecoder::new(&tok);
    assert_eq!(stream.push(id("ab")).unwrap(), "ab");
    for byte in ["<0xF0>", "<0x9F>", "<0xA6>"] {
        assert_eq!(stream.push(id(byte)).unwrap(), "");
    }
    assert_eq!(stream.push(id("<0x80>")).unwrap(), "🦀");
    assert_eq!(stream.push(id(" the")).unwrap(), " the");
    assert_eq!(stream.push(id("<0xF0>")).unwrap(), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert!(tok.decode(&[VOCAB.len() as u32]).is_err());
}

/// The error of loading the tiny tokenizer with `edit` applied.
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
fn load_errors_name_the_file_and_the_key() {
    let err = load_error("no-scores", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.scores")
    });
    assert!(
        err.contains("metadata key tokenizer.ggml.scores: missing"),
        "{err}"
    );

    let err = load_error("short-scores", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.scores",
            GgufValue::Array(vec![GgufValue::F32(0.0); 3]),
        )
    });
    assert!(
        err.contains("tokenizer.ggml.scores: 3 entries for 27 tokens"),
        "{err}"
    );

    let err = load_error("string-scores", |kvs| {
        set(kvs, "tokenizer.ggml.scores", strings(&["x".to_owned()]))
    });
    assert!(
        err.contains("tokenizer.ggml.scores: element 0 is a string, not a number"),
        "{err}"
    );

    let err = load_error("nan-score", |kvs| {
        let mut scores: Vec<GgufValue> = VOCAB.iter().map(|_| GgufValue::F32(0.0)).collect();
        scores[5] = GgufValue::F32(f32::NAN);
        set(kvs, "tokenizer.ggml.scores", GgufValue::Array(scores));
    });
    assert!(
        err.contains("tokenizer.ggml.scores: element 5 is NaN"),
        "{err}"
    );

    let err = load_error("bad-byte", |kvs| {
        let mut types: Vec<GgufValue> = VOCAB.iter().map(|(_, _, k)| GgufValue::I32(*k)).collect();
        types[11] = GgufValue::I32(6);
        set(kvs, "tokenizer.ggml.token_type", GgufValue::Array(types));
    });
    assert!(
        err.contains("token 11 (\"a\") has type 6 (byte), but its text is not <0xXX>"),
        "{err}"
    );

    let err = load_error("eos-wanted", |kvs| {
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.eos_token_id");
        set(kvs, "tokenizer.ggml.tokens", strings(&["<unk>".to_owned()]));
        set(
            kvs,
            "tokenizer.ggml.scores",
            GgufValue::Array(vec![GgufValue::F32(0.0)]),
        );
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.token_type");
        kvs.retain(|(k, _)| *k != "tokenizer.ggml.bos_token_id");
        set(kvs, "tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
    });
    assert!(
        err.contains("tokenizer.ggml.eos_token_id: missing, but tokenizer.ggml.add_eos_token"),
        "{err}"
    );

    let err = load_error("rwkv", |kvs| {
        set(
            kvs,
            "tokenizer.ggml.model",
            GgufValue::String("rwkv".into()),
        )
    });
    assert!(
        err.contains("tokenizer.ggml.model is \"rwkv\"")
            && err.contains("\"llama\" (SentencePiece BPE)"),
        "{err}"
    );
}

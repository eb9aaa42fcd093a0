//! Tests of the GGUF writer: a round trip through [`GgufFile`] of every value
//! type and two tensors, the layout invariants, and rejected inputs that leave
//! no file behind.

use super::*;
use crate::files::gguf::GgufFile;
use crate::files::test_support::temp_path;
use crate::files::{StoredTensor, TensorSource};

/// One value of every GGUF type, nested arrays and an empty array included.
fn every_value_kind() -> Vec<(String, GgufValue)> {
    let kvs = [
        ("general.architecture", GgufValue::String("llama".into())),
        ("t.u8", GgufValue::U8(250)),
        ("t.i8", GgufValue::I8(-7)),
        ("t.u16", GgufValue::U16(65000)),
        ("t.i16", GgufValue::I16(-32000)),
        ("t.u32", GgufValue::U32(4_000_000_000)),
        ("t.i32", GgufValue::I32(-2_000_000_000)),
        ("t.f32", GgufValue::F32(-1.5e-3)),
        ("t.bool", GgufValue::Bool(true)),
        ("t.string", GgufValue::String("héllo\nwörld".into())),
        ("t.u64", GgufValue::U64(u64::MAX - 3)),
        ("t.i64", GgufValue::I64(i64::MIN + 5)),
        ("t.f64", GgufValue::F64(std::f64::consts::PI)),
        (
            "t.strings",
            GgufValue::Array(vec![
                GgufValue::String("a".into()),
                GgufValue::String(String::new()),
            ]),
        ),
        (
            "t.nested",
            GgufValue::Array(vec![
                GgufValue::Array(vec![GgufValue::I32(1), GgufValue::I32(-2)]),
                GgufValue::Array(vec![]),
            ]),
        ),
        ("t.empty", GgufValue::Array(vec![])),
        ("general.alignment", GgufValue::U32(64)),
    ];
    kvs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

#[test]
fn every_value_kind_and_two_tensors_read_back_equal() {
    let path = temp_path("write-roundtrip", "gguf");
    let metadata = every_value_kind();
    let f32_bytes: Vec<u8> = (0..6 * 3)
        .flat_map(|i| (i as f32 * 0.25 - 2.0).to_le_bytes())
        .collect();
    // Two Q8_0 blocks (34 bytes each): odd sizes, so padding is exercised.
    let q8_bytes: Vec<u8> = (0..68u32).map(|i| (i * 7 % 251) as u8).collect();
    let tensors = [
        GgufTensorData {
            name: "a.weight",
            dtype: DType::F32,
            ne: &[6, 3],
            data: &f32_bytes,
        },
        GgufTensorData {
            name: "b.weight",
            dtype: DType::Q8_0,
            ne: &[64],
            data: &q8_bytes,
        },
    ];
    write_gguf(&path, &metadata, &tensors).unwrap();

    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.metadata().len(), metadata.len());
    for (key, value) in &metadata {
        assert_eq!(file.get(key), Some(value), "{key}");
    }
    assert_eq!(file.tensor_names(), ["a.weight", "b.weight"]);
    for t in &tensors {
        let info = file.tensor_info(t.name).unwrap();
        assert_eq!(info.n_dims as usize, t.ne.len());
        assert_eq!(info.offset % 64, 0, "{}", t.name);
        let stored = file.tensor(t.name).unwrap();
        let mut ne = [1i64; 4];
        for (slot, &d) in ne.iter_mut().zip(t.ne) {
            *slot = d as i64;
        }
        let want = StoredTensor {
            name: t.name,
            dtype: t.dtype,
            ne,
            data: t.data,
        };
        assert_eq!(stored, want);
    }
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len % 64, 0, "the file is padded to the alignment");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn without_general_alignment_data_is_aligned_to_32() {
    let path = temp_path("write-default-align", "gguf");
    let data = [1u8, 2, 3, 4];
    let t = |name| GgufTensorData {
        name,
        dtype: DType::F32,
        ne: &[1],
        data: &data,
    };
    write_gguf(&path, &[], &[t("x"), t("y")]).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    assert_eq!(file.tensor_info("y").unwrap().offset, 32);
    std::fs::remove_file(&path).unwrap();
}

/// Writes must fail with `want` in the message, and leave nothing behind.
fn assert_rejected(metadata: &[(String, GgufValue)], tensors: &[GgufTensorData<'_>], want: &str) {
    let path = temp_path("write-rejected", "gguf");
    let err = write_gguf(&path, metadata, tensors)
        .unwrap_err()
        .to_string();
    assert!(err.contains(want), "{err:?} lacks {want:?}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(!path.exists());
    let dir = path.parent().unwrap();
    let stem = path.file_name().unwrap().to_string_lossy().into_owned();
    let leftovers = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(&stem))
        .count();
    assert_eq!(leftovers, 0, "a temporary file was left behind");
}

#[test]
fn bad_inputs_are_errors_that_leave_no_file() {
    let kv = |k: &str, v| (k.to_owned(), v);
    let four = [0u8; 4];
    let scalar = |name, data| GgufTensorData {
        name,
        dtype: DType::F32,
        ne: &[1],
        data,
    };
    assert_rejected(
        &[kv("k", GgufValue::U8(1)), kv("k", GgufValue::U8(2))],
        &[],
        "appears twice",
    );
    assert_rejected(
        &[kv(
            "k",
            GgufValue::Array(vec![GgufValue::U8(1), GgufValue::I8(2)]),
        )],
        &[],
        "mixing element types u8 and i8",
    );
    assert_rejected(
        &[kv("general.alignment", GgufValue::U32(48))],
        &[],
        "invalid general.alignment",
    );
    assert_rejected(
        &[],
        &[scalar("t", &four), scalar("t", &four)],
        "duplicate tensor name",
    );
    assert_rejected(&[], &[scalar("t", &four[..3])], "needs 4 bytes but 3");
    let q = GgufTensorData {
        name: "q",
        dtype: DType::Q4_0,
        ne: &[16],
        data: &[],
    };
    assert_rejected(&[], &[q], "not a multiple of the q4_0 block size");
    let deep = GgufTensorData {
        name: "deep",
        dtype: DType::F32,
        ne: &[1, 1, 1, 1, 1],
        data: &four,
    };
    assert_rejected(&[], &[deep], "at most 4");
}

#[test]
fn a_missing_folder_is_an_io_error_naming_the_file() {
    let path = temp_path("no-such-dir", "d").join("out.gguf");
    let err = write_gguf(&path, &[], &[]).unwrap_err().to_string();
    assert!(err.contains("cannot create"), "{err}");
}

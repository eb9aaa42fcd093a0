//! A minimal GGUF v3 writer for tests: metadata of a few types and zero-filled
//! F32 tensors, enough to exercise the config loaders on small synthetic files.

use std::path::Path;

/// A GGUF metadata value for [`write_gguf`].
pub enum Meta {
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 8.
    Str(&'static str),
}

/// Writes a GGUF v3 file with `kvs` and F32 tensors of the given 2-D ggml
/// shapes (values all zero, data aligned to 32 bytes).
pub fn write_gguf(path: &Path, kvs: &[(&str, Meta)], tensors: &[(String, [u64; 2])]) {
    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_str(&mut out, key);
        match value {
            Meta::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                put_str(&mut out, s);
            }
        }
    }
    let mut offset = 0u64;
    for (name, ne) in tensors {
        put_str(&mut out, name);
        out.extend(2u32.to_le_bytes());
        out.extend(ne[0].to_le_bytes());
        out.extend(ne[1].to_le_bytes());
        out.extend(0u32.to_le_bytes()); // F32
        out.extend(offset.to_le_bytes());
        offset += (ne[0] * ne[1] * 4).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32) + offset as usize, 0);
    std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

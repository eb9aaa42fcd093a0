//! A GGUF v3 writer: metadata in the caller's order, tensors with their bytes,
//! in the layout [`super::gguf`] reads (see its module doc for the byte layout).
//!
//! Invariants of a written file:
//! - it is version 3, little-endian, and [`super::gguf::GgufFile::open`] accepts
//!   it: keys and tensor names are unique, every tensor's bytes are exactly
//!   `dtype.row_bytes(ne0) * ne1 * ne2 * ne3` long, and its offset is a multiple
//!   of the alignment (`general.alignment` when the metadata has it, else
//!   [`DEFAULT_ALIGNMENT`]);
//! - tensors are stored in the order given, each starting at the next multiple of
//!   the alignment after the previous one, and the file is zero-padded to a
//!   multiple of the alignment (the layout gguf-py writes);
//! - nothing is left at `path` unless the whole file was written: bytes go to a
//!   temporary file in the same folder, which is renamed onto `path` only after
//!   the last byte is flushed (and removed on any error).
//!
//! Every input is validated before the first byte is written, so bad input is a
//! [`FileError`] naming `path` and what is wrong, never a panic.
//!
//! An empty [`GgufValue::Array`] does not know its element type; it is written as
//! an empty array of strings (type 8, the commonest array type in GGUF files).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::gguf::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GgufValue};
use super::{FileError, ggml_shape_and_size};
use crate::dtype::DType;

/// The GGUF version this writer produces.
pub const GGUF_WRITE_VERSION: u32 = 3;

/// One tensor to write: name, element type, ggml shape and its bytes.
#[derive(Clone, Copy, Debug)]
pub struct GgufTensorData<'a> {
    /// The tensor's name (unique in the file).
    pub name: &'a str,
    /// The element type of `data`.
    pub dtype: DType,
    /// ggml extents, innermost first; its length (0 to 4) is the file's
    /// `n_dims`.
    pub ne: &'a [u64],
    /// Exactly `dtype.row_bytes(ne[0]) * ne[1] * ...` bytes.
    pub data: &'a [u8],
}

/// Writes a GGUF v3 file at `path` with `metadata` (in the order given) and
/// `tensors` (in the order given), atomically (see the module doc).
///
/// Errors, all naming `path`: a duplicate key or an array mixing element types
/// ([`FileError::BadMetadata`]), a bad `general.alignment`
/// ([`FileError::BadAlignment`]), a duplicate tensor name, a shape that is not a
/// whole number of blocks or does not match the byte count
/// ([`FileError::BadShape`], [`FileError::TooManyDims`]), and I/O failures.
pub fn write_gguf(
    path: impl AsRef<Path>,
    metadata: &[(String, GgufValue)],
    tensors: &[GgufTensorData<'_>],
) -> Result<(), FileError> {
    let path = path.as_ref();
    let alignment = check_metadata(path, metadata)?;
    let header = encode_header(path, metadata, tensors, alignment)?;
    let temp = temp_path_for(path);
    let result = write_body(path, &temp, &header, tensors, alignment).and_then(|()| {
        std::fs::rename(&temp, path).map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            op: "rename the temporary file onto",
            source,
        })
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Checks keys are unique and arrays are uniform; returns the alignment.
fn check_metadata(path: &Path, metadata: &[(String, GgufValue)]) -> Result<u64, FileError> {
    let bad = |key: &str, reason: String| FileError::BadMetadata {
        path: path.to_path_buf(),
        key: key.to_owned(),
        reason,
    };
    let mut seen = BTreeSet::new();
    for (key, value) in metadata {
        if !seen.insert(key.as_str()) {
            return Err(bad(key, "appears twice".to_owned()));
        }
        check_uniform(value).map_err(|reason| bad(key, reason))?;
    }
    let Some((_, value)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match value.as_u64() {
        Some(a) if a.is_power_of_two() => Ok(a),
        _ => Err(FileError::BadAlignment {
            path: path.to_path_buf(),
            alignment: format!("{value:?}"),
        }),
    }
}

/// An array's elements must share one type (recursively, as GGUF stores one
/// element type per array).
fn check_uniform(value: &GgufValue) -> Result<(), String> {
    let GgufValue::Array(items) = value else {
        return Ok(());
    };
    if let Some(first) = items.first()
        && let Some(other) = items.iter().find(|v| v.type_name() != first.type_name())
    {
        return Err(format!(
            "is an array mixing element types {} and {}",
            first.type_name(),
            other.type_name()
        ));
    }
    items.iter().try_for_each(check_uniform)
}

/// GGUF's number for a value's type.
fn type_id(value: &GgufValue) -> u32 {
    match value {
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

/// Type id of a string, used for the element type of empty arrays.
const STRING_TYPE_ID: u32 = 8;

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends a value's encoding (without its type id).
fn put_value(out: &mut Vec<u8>, value: &GgufValue) {
    match value {
        GgufValue::U8(v) => out.push(*v),
        GgufValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::String(v) => put_string(out, v),
        GgufValue::Array(items) => {
            let elem_type = items.first().map_or(STRING_TYPE_ID, type_id);
            out.extend_from_slice(&elem_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        GgufValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// Everything before the data section, padded to the alignment; validates the
/// tensors on the way.
fn encode_header(
    path: &Path,
    metadata: &[(String, GgufValue)],
    tensors: &[GgufTensorData<'_>],
    alignment: u64,
) -> Result<Vec<u8>, FileError> {
    let mut out = Vec::new();
    out.extend_from_slice(GGUF_MAGIC);
    out.extend_from_slice(&GGUF_WRITE_VERSION.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_string(&mut out, key);
        out.extend_from_slice(&type_id(value).to_le_bytes());
        put_value(&mut out, value);
    }
    let mut names = BTreeSet::new();
    let mut offset = 0u64;
    for t in tensors {
        if !names.insert(t.name) {
            return Err(FileError::DuplicateTensor {
                path: path.to_path_buf(),
                tensor: t.name.to_owned(),
            });
        }
        let (_, size) = ggml_shape_and_size(path, t.name, t.dtype, t.ne)?;
        if size != t.data.len() as u64 {
            return Err(FileError::BadShape {
                path: path.to_path_buf(),
                tensor: t.name.to_owned(),
                shape: t.ne.to_vec(),
                reason: format!(
                    "{} data needs {size} bytes but {} were given",
                    t.dtype,
                    t.data.len()
                ),
            });
        }
        put_string(&mut out, t.name);
        out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
        for &d in t.ne {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.dtype.ggml_type().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset = padded(offset + size, alignment);
    }
    out.resize(padded(out.len() as u64, alignment) as usize, 0);
    Ok(out)
}

/// `n` rounded up to a multiple of `alignment` (a power of two).
fn padded(n: u64, alignment: u64) -> u64 {
    n.next_multiple_of(alignment)
}

/// Writes the header and every tensor's bytes (each padded) to `temp`; errors
/// name `path`, the file the caller asked for.
fn write_body(
    path: &Path,
    temp: &Path,
    header: &[u8],
    tensors: &[GgufTensorData<'_>],
    alignment: u64,
) -> Result<(), FileError> {
    let io = |op: &'static str| {
        move |source| FileError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    };
    let file = File::create(temp).map_err(io("create"))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    w.write_all(header).map_err(io("write"))?;
    let zeros = vec![0u8; alignment as usize];
    for t in tensors {
        w.write_all(t.data).map_err(io("write"))?;
        let pad = padded(t.data.len() as u64, alignment) - t.data.len() as u64;
        w.write_all(&zeros[..pad as usize]).map_err(io("write"))?;
    }
    let file = w.into_inner().map_err(|e| io("write")(e.into_error()))?;
    file.sync_all().map_err(io("sync"))
}

/// `dir/.name.tmp-<pid>-<n>` for `dir/name`: unique per process and call.
fn temp_path_for(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

#[cfg(test)]
mod tests;

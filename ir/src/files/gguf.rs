//! A GGUF (v2 and v3, little-endian) reader over a read-only memory map.
//!
//! Layout read, all integers little-endian:
//! ```text
//! "GGUF" | version u32 | n_tensors u64 | n_kv u64
//! n_kv x       (key: string, value_type u32, value)
//! n_tensors x  (name: string, n_dims u32, ne: n_dims x u64, ggml_type u32, offset u64)
//! padding up to general.alignment (default 32) | data section
//! string = len u64 + UTF-8 bytes; array = elem_type u32 + count u64 + count values
//! ```
//!
//! Invariants of an opened [`GgufFile`]:
//! - every metadata key and tensor name is unique and valid UTF-8;
//! - every tensor has a known [`DType`], at most 4 dimensions, `ne0` a whole
//!   number of blocks, an offset that is a multiple of the alignment, and data
//!   that lies entirely inside the file (checked once, at open);
//! - the data section starts at the first multiple of the alignment after the
//!   tensor infos.
//!
//! Parsing never panics and never trusts a count: before allocating for `n`
//! items it checks that `n` items of the smallest possible encoding fit in the
//! bytes that remain, and array nesting is limited to [`MAX_ARRAY_NESTING`]
//! levels. Metadata arrays are stored as `Vec<GgufValue>`, so they take at most
//! ~32x their encoded size in memory (a 49152-token vocabulary: a few MB).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{FileError, StoredTensor, TensorSource, escape_bytes, ggml_shape_and_size};
use crate::dtype::DType;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest array-of-array nesting accepted (real files use 1).
pub const MAX_ARRAY_NESTING: usize = 8;

/// A metadata value, one variant per GGUF value type.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7 (stored as one byte, 0 or 1).
    Bool(bool),
    /// Type 8.
    String(String),
    /// Type 9; elements all share one type (arrays may nest). An empty array
    /// does not remember its element type.
    Array(Vec<GgufValue>),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

impl GgufValue {
    /// The GGUF name of this value's type (`"u32"`, `"string"`, `"array"`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::F32(_) => "f32",
            GgufValue::Bool(_) => "bool",
            GgufValue::String(_) => "string",
            GgufValue::Array(_) => "array",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F64(_) => "f64",
        }
    }

    /// The value as a signed integer, for any integer type whose value fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            GgufValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an unsigned integer, for any integer type holding a
    /// non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// The value as a float, for float types and integers (converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::U64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value of a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// Where and how one tensor is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Dimensions declared in the file (0 to 4).
    pub n_dims: u32,
    /// ggml shape, innermost first, padded with 1s.
    pub ne: [i64; 4],
    /// Byte offset of the data, relative to the start of the data section.
    pub offset: u64,
    /// Byte size of the data.
    pub size: u64,
}

/// An open GGUF file: parsed metadata and tensor infos over a memory map.
pub struct GgufFile {
    path: PathBuf,
    mmap: Mmap,
    layout: GgufLayout,
}

/// Everything parsed from the header, independent of how the bytes are held.
#[derive(Debug)]
struct GgufLayout {
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    index: BTreeMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.layout.version)
            .field("n_kv", &self.layout.metadata.len())
            .field("n_tensors", &self.layout.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens, maps and validates a GGUF file (see the module doc for what is
    /// checked).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, FileError> {
        let path = path.as_ref();
        let mmap = super::map_read_only(path)?;
        let layout = parse_layout(&mmap, path)?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            mmap,
            layout,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.layout.version
    }

    /// The data alignment in bytes (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.layout.alignment
    }

    /// Absolute byte offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.layout.data_offset
    }

    /// All metadata, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.layout.metadata
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.layout.metadata.get(key)
    }

    /// An integer value that fits in `u32` (any stored integer width).
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get_u64(key).and_then(|v| u32::try_from(v).ok())
    }

    /// A non-negative integer value (any stored integer width).
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An integer value that fits in `i64` (any stored integer width).
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// A float value (f32 or f64, or an integer converted).
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f64().map(|v| v as f32)
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Option<&[GgufValue]> {
        self.get(key)?.as_array()
    }

    /// `general.architecture` (`"llama"`, `"bert"`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// Every tensor info, in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.layout.tensors
    }

    /// The info of the tensor called `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        let &i = self.layout.index.get(name)?;
        self.layout.tensors.get(i)
    }
}

impl TensorSource for GgufFile {
    fn tensor(&self, name: &str) -> Option<StoredTensor<'_>> {
        let info = self.tensor_info(name)?;
        // Bounds were checked at open; `get` keeps this panic-free regardless.
        let start = usize::try_from(self.layout.data_offset.checked_add(info.offset)?).ok()?;
        let end = start.checked_add(usize::try_from(info.size).ok()?)?;
        Some(StoredTensor {
            name: &info.name,
            dtype: info.dtype,
            ne: info.ne,
            data: self.mmap.get(start..end)?,
        })
    }

    /// Names in file order.
    fn tensor_names(&self) -> Vec<&str> {
        self.layout
            .tensors
            .iter()
            .map(|t| t.name.as_str())
            .collect()
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Parses and validates the header of the GGUF file `bytes`.
fn parse_layout(bytes: &[u8], path: &Path) -> Result<GgufLayout, FileError> {
    let mut p = Parser {
        bytes,
        pos: 0,
        path,
        what: String::new(),
    };
    let version = p.read_preamble()?;
    p.what = "the tensor count".to_owned();
    let n_tensors = p.u64()?;
    p.what = "the metadata count".to_owned();
    let n_kv = p.u64()?;

    let metadata = p.read_metadata(n_kv)?;
    let alignment = alignment_of(&metadata, path)?;
    let tensors = p.read_tensor_infos(n_tensors)?;
    let index = index_tensors(&tensors, path)?;

    let data_offset = (p.pos as u64)
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| p.corrupt(p.pos, "data section offset overflows".to_owned()))?;
    for info in &tensors {
        check_tensor_placement(info, data_offset, alignment, bytes.len() as u64, path)?;
    }
    Ok(GgufLayout {
        version,
        metadata,
        tensors,
        index,
        alignment,
        data_offset,
    })
}

/// Reads `general.alignment`, which must be a power of two when present.
fn alignment_of(metadata: &BTreeMap<String, GgufValue>, path: &Path) -> Result<u64, FileError> {
    let Some(value) = metadata.get("general.alignment") else {
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

/// Maps names to positions, rejecting duplicates.
fn index_tensors(
    tensors: &[GgufTensorInfo],
    path: &Path,
) -> Result<BTreeMap<String, usize>, FileError> {
    let mut index = BTreeMap::new();
    for (i, t) in tensors.iter().enumerate() {
        if index.insert(t.name.clone(), i).is_some() {
            return Err(FileError::DuplicateTensor {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
            });
        }
    }
    Ok(index)
}

/// Checks a tensor's offset is aligned and its data lies inside the file.
fn check_tensor_placement(
    info: &GgufTensorInfo,
    data_offset: u64,
    alignment: u64,
    file_size: u64,
    path: &Path,
) -> Result<(), FileError> {
    if !info.offset.is_multiple_of(alignment) {
        return Err(FileError::Misaligned {
            path: path.to_path_buf(),
            tensor: info.name.clone(),
            offset: info.offset,
            alignment,
        });
    }
    let start = data_offset.saturating_add(info.offset);
    if start.saturating_add(info.size) > file_size {
        return Err(FileError::DataOutOfBounds {
            path: path.to_path_buf(),
            tensor: info.name.clone(),
            offset: start,
            size: info.size,
            file_size,
        });
    }
    Ok(())
}

/// Bytes of the smallest possible encoding of a value of GGUF type `type_id`,
/// or `None` for an unknown type.
fn min_encoded_size(type_id: u32) -> Option<u64> {
    Some(match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8, // a string is at least its u64 length
        9 => 12,          // element type u32 + count u64
        _ => return None,
    })
}

/// A bounds-checked little-endian reader. `what` describes the field being
/// read, for error messages.
struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
    what: String,
}

impl<'a> Parser<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn corrupt(&self, offset: usize, reason: String) -> FileError {
        FileError::Corrupt {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            reason,
        }
    }

    /// The next `n` bytes, or a truncation error naming `self.what`.
    fn take(&mut self, n: u64) -> Result<&'a [u8], FileError> {
        let slice = usize::try_from(n)
            .ok()
            .and_then(|n| self.bytes.get(self.pos..self.pos.checked_add(n)?));
        match slice {
            Some(s) => {
                self.pos += s.len();
                Ok(s)
            }
            None => Err(FileError::Truncated {
                path: self.path.to_path_buf(),
                offset: self.pos as u64,
                needed: n,
                file_size: self.bytes.len() as u64,
                what: self.what.clone(),
            }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FileError> {
        let s = self.take(N as u64)?;
        // `take` returned exactly N bytes.
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, FileError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, FileError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, FileError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, FileError> {
        self.array().map(u64::from_le_bytes)
    }

    fn string(&mut self) -> Result<String, FileError> {
        let len = self.u64()?;
        let start = self.pos;
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.corrupt(start, format!("invalid UTF-8 in {}: {e}", self.what))),
        }
    }

    /// Checks that `count` items of at least `min_size` bytes each fit in the
    /// rest of the file; call right after reading the count.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<usize, FileError> {
        let remaining = self.remaining();
        match usize::try_from(count) {
            Ok(n) if count <= remaining / min_size => Ok(n),
            _ => Err(FileError::CountTooLarge {
                path: self.path.to_path_buf(),
                what: what.to_owned(),
                count,
                offset: self.pos as u64 - 8,
                remaining,
            }),
        }
    }

    /// Magic and version; returns the version.
    fn read_preamble(&mut self) -> Result<u32, FileError> {
        self.what = "the magic".to_owned();
        let magic = self.array::<4>()?;
        if &magic != GGUF_MAGIC {
            return Err(FileError::BadMagic {
                path: self.path.to_path_buf(),
                format: "GGUF",
                found: escape_bytes(&magic),
                expected: "GGUF",
            });
        }
        self.what = "the version".to_owned();
        let version = self.u32()?;
        if !(2..=3).contains(&version) {
            return Err(FileError::UnsupportedGgufVersion {
                path: self.path.to_path_buf(),
                version,
            });
        }
        Ok(version)
    }

    fn read_metadata(&mut self, n_kv: u64) -> Result<BTreeMap<String, GgufValue>, FileError> {
        // key length u64 + value type u32 + at least one value byte.
        let n_kv = self.check_count(n_kv, 13, "metadata key-value")?;
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key_at = self.pos;
            self.what = format!("the key of metadata entry #{i}");
            let key = self.string()?;
            self.what = format!("the value of metadata key {key:?}");
            let type_id = self.u32()?;
            let value = self.value(type_id, 0)?;
            if metadata.contains_key(&key) {
                return Err(self.corrupt(key_at, format!("duplicate metadata key {key:?}")));
            }
            metadata.insert(key, value);
        }
        Ok(metadata)
    }

    fn value(&mut self, type_id: u32, depth: usize) -> Result<GgufValue, FileError> {
        let at = self.pos;
        Ok(match type_id {
            0 => GgufValue::U8(self.u8()?),
            1 => GgufValue::I8(i8::from_le_bytes(self.array()?)),
            2 => GgufValue::U16(self.u16()?),
            3 => GgufValue::I16(i16::from_le_bytes(self.array()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.u8()? {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.corrupt(at, format!("bool byte {b} in {}", self.what))),
            },
            8 => GgufValue::String(self.string()?),
            9 => self.array_value(depth)?,
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array()?)),
            _ => {
                let reason = format!("unknown value type {type_id} in {}", self.what);
                return Err(self.corrupt(at.saturating_sub(4), reason));
            }
        })
    }

    fn array_value(&mut self, depth: usize) -> Result<GgufValue, FileError> {
        let at = self.pos;
        if depth >= MAX_ARRAY_NESTING {
            let reason = format!(
                "arrays nested deeper than {MAX_ARRAY_NESTING} levels in {}",
                self.what
            );
            return Err(self.corrupt(at, reason));
        }
        let elem_type = self.u32()?;
        let Some(min_size) = min_encoded_size(elem_type) else {
            let reason = format!("unknown array element type {elem_type} in {}", self.what);
            return Err(self.corrupt(at, reason));
        };
        let count = self.u64()?;
        let count =
            self.check_count(count, min_size, &format!("array element in {}", self.what))?;
        // Grow with the bytes actually read rather than trusting `count` alone.
        let mut items = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            items.push(self.value(elem_type, depth + 1)?);
        }
        Ok(GgufValue::Array(items))
    }

    fn read_tensor_infos(&mut self, n_tensors: u64) -> Result<Vec<GgufTensorInfo>, FileError> {
        // name length u64 + n_dims u32 + type u32 + offset u64.
        let n = self.check_count(n_tensors, 24, "tensor info")?;
        let mut tensors = Vec::with_capacity(n);
        for i in 0..n {
            tensors.push(self.read_tensor_info(i)?);
        }
        Ok(tensors)
    }

    fn read_tensor_info(&mut self, i: usize) -> Result<GgufTensorInfo, FileError> {
        self.what = format!("the name of tensor info #{i}");
        let name = self.string()?;
        self.what = format!("the tensor info of {name:?}");
        let n_dims = self.u32()?;
        if n_dims > 4 {
            return Err(FileError::TooManyDims {
                path: self.path.to_path_buf(),
                tensor: name,
                n_dims: n_dims.into(),
            });
        }
        let mut dims = Vec::with_capacity(4);
        for _ in 0..n_dims {
            dims.push(self.u64()?);
        }
        let type_id = self.u32()?;
        let offset = self.u64()?;
        let dtype = DType::from_ggml_type(type_id).ok_or_else(|| FileError::UnknownGgmlType {
            path: self.path.to_path_buf(),
            tensor: name.clone(),
            type_id,
        })?;
        let (ne, size) = ggml_shape_and_size(self.path, &name, dtype, &dims)?;
        Ok(GgufTensorInfo {
            name,
            dtype,
            n_dims,
            ne,
            offset,
            size,
        })
    }
}

#[cfg(test)]
mod tests;

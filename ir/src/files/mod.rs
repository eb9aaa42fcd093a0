//! Tensor file readers: GGUF (hand-written, over an mmap; written by
//! [`gguf_write`]), safetensors (over an mmap, through the `safetensors` crate)
//! and NumPy `.npy` (read and write, for test vectors).
//!
//! Invariants, for every reader:
//! - Opening never panics and never allocates more than a small multiple of the
//!   file's length, whatever the bytes are: every read is bounds-checked and
//!   every count read from the file is capped by the bytes that remain before
//!   anything is allocated for it. Malformed input is a [`FileError`] that names
//!   the file and says exactly what is wrong (and where, for byte-level damage).
//! - Every tensor a [`TensorSource`] hands out was validated at open time: its
//!   dtype is known, `ne0` is a whole number of blocks, and its bytes lie inside
//!   the file, so [`StoredTensor::data`] is exactly
//!   `dtype.row_bytes(ne[0]) * ne[1] * ne[2] * ne[3]` bytes long.
//! - Tensor names come back in a deterministic order (file order for GGUF,
//!   sorted for safetensors), never in hash order.
//!
//! Memory-mapped files are only ever read; see the `SAFETY` notes in
//! [`gguf`] and [`safetensors_file`] for what happens if another process
//! modifies a file while it is mapped.

pub mod gguf;
pub mod gguf_write;
pub mod npy;
pub mod safetensors_file;

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::dtype::DType;

/// A tensor stored in a file: its name, type, ggml shape and raw bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StoredTensor<'a> {
    /// The tensor's name in the file.
    pub name: &'a str,
    /// The element type of the stored bytes.
    pub dtype: DType,
    /// ggml shape: `ne[0]` is the innermost (contiguous) dimension, unused
    /// dimensions are 1.
    pub ne: [i64; 4],
    /// Exactly the tensor's contiguous bytes:
    /// `dtype.row_bytes(ne[0]) * ne[1] * ne[2] * ne[3]` of them.
    pub data: &'a [u8],
}

impl std::fmt::Debug for StoredTensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bytes can be hundreds of megabytes: print their length only.
        f.debug_struct("StoredTensor")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("ne", &self.ne)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// A file of named tensors that can be looked up without copying their bytes.
pub trait TensorSource: Send + Sync {
    /// The tensor called `name`, or `None` when the file has no usable tensor
    /// of that name (see [`TensorSource::require_tensor`] for the reason).
    fn tensor(&self, name: &str) -> Option<StoredTensor<'_>>;

    /// The names of every tensor [`TensorSource::tensor`] can return, in a
    /// deterministic order (file order or sorted; each reader documents which).
    fn tensor_names(&self) -> Vec<&str>;

    /// The path the file was opened from.
    fn path(&self) -> &Path;

    /// Like [`TensorSource::tensor`], but a missing or unusable tensor is an
    /// error that says why (for example an unsupported safetensors dtype).
    fn require_tensor(&self, name: &str) -> Result<StoredTensor<'_>, FileError> {
        self.tensor(name).ok_or_else(|| FileError::TensorNotFound {
            path: self.path().to_path_buf(),
            tensor: name.to_owned(),
        })
    }
}

/// Opens a tensor file, choosing the reader by extension (`.gguf` or
/// `.safetensors`, case-insensitive).
pub fn open_tensor_file(path: impl AsRef<Path>) -> Result<Box<dyn TensorSource>, FileError> {
    let path = path.as_ref();
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("gguf") => Ok(Box::new(gguf::GgufFile::open(path)?)),
        Some("safetensors") => Ok(Box::new(safetensors_file::SafetensorsFile::open(path)?)),
        _ => Err(FileError::UnknownExtension {
            path: path.to_path_buf(),
        }),
    }
}

/// Everything that can go wrong reading or writing a tensor file. Every variant
/// names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The operating system refused an operation on the file.
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done: "open", "map", "read", "write", "rename", ...
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The extension names no format this crate reads.
    #[error(
        "{}: unknown tensor file extension (known extensions: .gguf, .safetensors)",
        path.display()
    )]
    UnknownExtension {
        /// The file.
        path: PathBuf,
    },

    /// The file ends before a field it declares.
    #[error(
        "{}: file truncated at byte {offset} while reading {what} \
         (needed {needed} bytes, file is {file_size} bytes)",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the field starts.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// The file's length in bytes.
        file_size: u64,
        /// What was being read.
        what: String,
    },

    /// A count read from the file cannot possibly fit in the bytes that remain.
    #[error(
        "{}: {what} count {count} at byte {offset} cannot fit in the {remaining} bytes left",
        path.display()
    )]
    CountTooLarge {
        /// The file.
        path: PathBuf,
        /// What is being counted.
        what: String,
        /// The count read.
        count: u64,
        /// Where the count was read.
        offset: u64,
        /// Bytes left in the file after the count.
        remaining: u64,
    },

    /// The file does not start with the format's magic bytes.
    #[error("{}: not a {format} file (starts with \"{found}\", expected \"{expected}\")", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The format that was expected ("GGUF", "NumPy .npy").
        format: &'static str,
        /// The bytes found, escaped.
        found: String,
        /// The magic expected, escaped.
        expected: &'static str,
    },

    /// A GGUF version other than 2 or 3.
    #[error("{}: unsupported GGUF version {version} (supported: 2, 3)", path.display())]
    UnsupportedGgufVersion {
        /// The file.
        path: PathBuf,
        /// The version read.
        version: u32,
    },

    /// Bytes that are present but not well-formed (bad UTF-8, bad bool, an
    /// unknown metadata value type, nesting too deep, a duplicate key, ...).
    #[error("{}: corrupt data at byte {offset}: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad bytes start.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// `general.alignment` is zero, not a power of two, or not an integer.
    #[error("{}: invalid general.alignment {alignment} (must be a power of two)", path.display())]
    BadAlignment {
        /// The file.
        path: PathBuf,
        /// The value found, as text.
        alignment: String,
    },

    /// A GGUF tensor has a `ggml_type` number this crate has no [`DType`] for.
    #[error("{}: unknown ggml type {type_id} for tensor {tensor:?}", path.display())]
    UnknownGgmlType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The `ggml_type` number read.
        type_id: u32,
    },

    /// A tensor has more than 4 dimensions.
    #[error("{}: tensor {tensor:?} has {n_dims} dimensions (at most 4 are supported)", path.display())]
    TooManyDims {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The number of dimensions declared.
        n_dims: u64,
    },

    /// A tensor's shape is invalid: a dimension beyond `i64::MAX`, a byte size
    /// that overflows, or `ne0` not a whole number of blocks.
    #[error("{}: tensor {tensor:?} has invalid shape {shape:?}: {reason}", path.display())]
    BadShape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dimensions as stored in the file (file order).
        shape: Vec<u64>,
        /// What is wrong with it.
        reason: String,
    },

    /// A metadata entry to be written is invalid (a duplicate key, an array
    /// mixing element types).
    #[error("{}: metadata key {key:?} {reason}", path.display())]
    BadMetadata {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A tool that rewrites a file was asked to write onto the file it reads.
    #[error("{}: the output path is the input file; choose another output path", path.display())]
    OutputIsInput {
        /// The file.
        path: PathBuf,
    },

    /// Two tensors share a name.
    #[error("{}: duplicate tensor name {tensor:?}", path.display())]
    DuplicateTensor {
        /// The file.
        path: PathBuf,
        /// The name.
        tensor: String,
    },

    /// A tensor's bytes reach past the end of the file.
    #[error(
        "{}: data of tensor {tensor:?} out of bounds: offset {offset} + size {size} \
         exceeds the file size {file_size}",
        path.display()
    )]
    DataOutOfBounds {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Absolute byte offset of the tensor's data.
        offset: u64,
        /// Byte size of the tensor's data.
        size: u64,
        /// The file's length in bytes.
        file_size: u64,
    },

    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error(
        "{}: data of tensor {tensor:?} is misaligned: offset {offset} is not a multiple of {alignment}",
        path.display()
    )]
    Misaligned {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The data offset relative to the data section.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },

    /// No tensor of that name in the file.
    #[error("{}: no tensor named {tensor:?}", path.display())]
    TensorNotFound {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        tensor: String,
    },

    /// The `safetensors` crate rejected the file.
    #[error("{}: invalid safetensors file: {source}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The crate's error.
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// A safetensors tensor has a dtype with no [`DType`] counterpart.
    #[error(
        "{}: tensor {tensor:?} has unsupported safetensors dtype {dtype} (supported: F32, F16, BF16, I32)",
        path.display()
    )]
    UnsupportedSafetensorsDtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype's safetensors name.
        dtype: String,
    },

    /// A `.npy` header is malformed.
    #[error("{}: bad .npy header: {reason}", path.display())]
    NpyHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// A `.npy` element type this crate does not read.
    #[error(
        "{}: unsupported .npy dtype {descr:?} (supported: '<f4', '<f8', '<i4', '<i8', '<f2')",
        path.display()
    )]
    NpyUnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The `descr` field as written.
        descr: String,
    },

    /// A `.npy` file in Fortran (column-major) order.
    #[error(
        "{}: .npy array is in Fortran order; only C order is supported \
         (save it with np.ascontiguousarray)",
        path.display()
    )]
    NpyFortranOrder {
        /// The file.
        path: PathBuf,
    },

    /// A shape does not match the number of bytes or elements present.
    #[error(
        "{}: shape {shape:?} needs {expected_bytes} bytes of data but {actual_bytes} are present",
        path.display()
    )]
    ShapeDataMismatch {
        /// The file.
        path: PathBuf,
        /// The shape (outermost first).
        shape: Vec<u64>,
        /// Bytes the shape needs.
        expected_bytes: u64,
        /// Bytes present.
        actual_bytes: u64,
    },
}

/// Opens `path` read-only and maps it into memory.
///
/// # Risk of external modification
/// The mapping is only ever read and no `&mut` to it is handed out. If another
/// process truncates or rewrites the file while it is mapped, reads may see the
/// new bytes or fault (SIGBUS); this is the accepted cost of zero-copy weights,
/// as in ggml and the `safetensors` crate. Offsets are validated once at open,
/// against the length at that time.
pub(crate) fn map_read_only(path: &Path) -> Result<Mmap, FileError> {
    let file = File::open(path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        op: "open",
        source,
    })?;
    // SAFETY: the file is opened read-only and the map is immutable: this crate
    // never creates a `&mut` into it. Mutation by another process while mapped
    // is outside our control; it is documented above as an accepted risk (the
    // reader then sees changed bytes or gets SIGBUS, it does not corrupt our
    // own memory).
    unsafe { Mmap::map(&file) }.map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        op: "map",
        source,
    })
}

/// Escapes bytes for an error message (`b"GGUF"` -> `GGUF`, others as `\xNN`).
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Validates a ggml shape and returns the tensor's byte size.
///
/// `dims` are in ggml order (innermost first), at most 4 of them.
pub(crate) fn ggml_shape_and_size(
    path: &Path,
    tensor: &str,
    dtype: DType,
    dims: &[u64],
) -> Result<([i64; 4], u64), FileError> {
    let bad = |reason: String| FileError::BadShape {
        path: path.to_path_buf(),
        tensor: tensor.to_owned(),
        shape: dims.to_vec(),
        reason,
    };
    if dims.len() > 4 {
        return Err(FileError::TooManyDims {
            path: path.to_path_buf(),
            tensor: tensor.to_owned(),
            n_dims: dims.len() as u64,
        });
    }
    let mut ne = [1i64; 4];
    for (slot, &d) in ne.iter_mut().zip(dims) {
        *slot = i64::try_from(d).map_err(|_| bad(format!("dimension {d} exceeds i64::MAX")))?;
    }
    let row = dtype.row_bytes(ne[0] as u64).ok_or_else(|| {
        bad(format!(
            "ne0 = {} is not a multiple of the {dtype} block size {}",
            ne[0],
            dtype.block_elems()
        ))
    })?;
    let size = ne[1..]
        .iter()
        .try_fold(row, |acc, &d| acc.checked_mul(d as u64))
        .filter(|&s| s <= i64::MAX as u64)
        .ok_or_else(|| bad("byte size overflows".to_owned()))?;
    Ok((ne, size))
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the readers' tests.

    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A unique path under the system temp dir (removed by the caller).
    pub fn temp_path(stem: &str, extension: &str) -> PathBuf {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!(
            "ggplan-ir-test-{}-{n}-{stem}.{extension}",
            std::process::id()
        ))
    }

    /// A tiny deterministic generator (64-bit LCG, Knuth's constants).
    pub struct Lcg(pub u64);

    impl Lcg {
        /// The next 32 pseudo-random bits.
        pub fn next_u32(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 32) as u32
        }

        /// A value in `0..n` (`n > 0`).
        pub fn below(&mut self, n: usize) -> usize {
            (self.next_u32() as usize) % n
        }
    }
}

//! `RpcTensor`: one tensor as ggml's RPC protocol sends it (the server's
//! `rpc_tensor`, a packed little-endian record of [`RpcTensor::BYTES`] bytes).
//!
//! Facts of protocol version 7 (llama.cpp's `ggml-rpc.h`, `RPC_PROTO_MAJOR_VERSION`
//! 7, whose patch level pins `GGML_OP_COUNT` at 101):
//! - fields, in order: `id` u64, `type` u32, `buffer` u64, `ne` 4 x u32,
//!   `nb` 4 x u32, `op` u32, `op_params` 16 x i32, `flags` i32, `src` 10 x u64,
//!   `view_src` u64, `view_offs` u64, `data` u64, `name` 64 bytes
//!   (NUL-terminated), `use_count` i32;
//! - `id` is any non-zero number unique within one graph (the client's
//!   pointer in ggml); sources and `view_src` name other records by id, 0 for
//!   none;
//! - `buffer` is the server's handle of an allocated buffer and `data` the
//!   tensor's address inside it (the buffer's base, from `BUFFER_GET_BASE`,
//!   plus an offset); the server refuses data outside the buffer.
//!
//! Invariant: `encode` writes exactly [`RpcTensor::BYTES`] bytes, and
//! `decode(encode(t)) == t` for every tensor whose name fits in 63 bytes.

/// Dimensions of a ggml tensor.
pub const MAX_DIMS: usize = 4;
/// Sources of a ggml tensor.
pub const MAX_SRC: usize = 10;
/// 32-bit op parameters of a ggml tensor (64 bytes).
pub const MAX_OP_PARAMS: usize = 16;
/// Bytes of a tensor name, the terminating NUL included.
pub const MAX_NAME: usize = 64;

/// One tensor record of the RPC protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTensor {
    /// Unique within one message; 0 means "no tensor".
    pub id: u64,
    /// ggml type number (GGUF's numbering: F32 0, F16 1, Q4_0 2, ...).
    pub dtype: u32,
    /// The server's buffer handle, 0 for none.
    pub buffer: u64,
    /// Extents, innermost first.
    pub ne: [u32; MAX_DIMS],
    /// Byte strides.
    pub nb: [u32; MAX_DIMS],
    /// ggml op number (`GGML_OP_*`), 0 (`GGML_OP_NONE`) for leafs.
    pub op: u32,
    /// The op's parameters as ggml stores them (floats by their bits).
    pub op_params: [i32; MAX_OP_PARAMS],
    /// ggml tensor flags (input, output, param, loss).
    pub flags: i32,
    /// Source ids, 0 for none.
    pub src: [u64; MAX_SRC],
    /// Id of the tensor this one views, 0 for none.
    pub view_src: u64,
    /// Byte offset of the view in `view_src`.
    pub view_offs: u64,
    /// Server address of the first byte, 0 for none.
    pub data: u64,
    /// Name, at most 63 bytes (longer names are cut when encoded).
    pub name: String,
    /// How many nodes of the graph read this tensor (ggml's use count).
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> RpcTensor {
        RpcTensor {
            id: 0,
            dtype: 0,
            buffer: 0,
            ne: [1; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; MAX_OP_PARAMS],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: String::new(),
            use_count: 0,
        }
    }
}

impl RpcTensor {
    /// `len` bytes at server address `data` in buffer `buffer`, as one row of
    /// ggml's I8 (type 24): how set, get and copy address raw bytes. `None`
    /// when `len` does not fit a record's u32 extent.
    pub fn bytes(buffer: u64, data: u64, len: usize) -> Option<RpcTensor> {
        let n = u32::try_from(len.max(1)).ok()?;
        Some(RpcTensor {
            id: 1,
            dtype: 24,
            buffer,
            ne: [n, 1, 1, 1],
            nb: [1, n, n, n],
            data,
            ..RpcTensor::default()
        })
    }

    /// Size of one encoded record.
    pub const BYTES: usize = 8
        + 4
        + 8
        + 4 * MAX_DIMS
        + 4 * MAX_DIMS
        + 4
        + 4 * MAX_OP_PARAMS
        + 4
        + 8 * MAX_SRC
        + 8
        + 8
        + 8
        + MAX_NAME
        + 4;

    /// Appends the packed little-endian record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.dtype.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        for v in self.ne {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in self.nb {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        for v in self.op_params {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        for v in self.src {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        let mut name = [0u8; MAX_NAME];
        let bytes = self.name.as_bytes();
        let n = bytes.len().min(MAX_NAME - 1);
        name[..n].copy_from_slice(&bytes[..n]);
        out.extend_from_slice(&name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
        debug_assert_eq!(out.len() - start, RpcTensor::BYTES);
    }

    /// Reads one record from the first [`RpcTensor::BYTES`] bytes of `bytes`;
    /// `None` when there are fewer.
    pub fn decode(bytes: &[u8]) -> Option<RpcTensor> {
        let mut r = Reader {
            bytes: bytes.get(..RpcTensor::BYTES)?,
        };
        let id = r.u64();
        let dtype = r.u32();
        let buffer = r.u64();
        let ne = std::array::from_fn(|_| r.u32());
        let nb = std::array::from_fn(|_| r.u32());
        let op = r.u32();
        let op_params = std::array::from_fn(|_| r.u32() as i32);
        let flags = r.u32() as i32;
        let src = std::array::from_fn(|_| r.u64());
        let view_src = r.u64();
        let view_offs = r.u64();
        let data = r.u64();
        let raw = r.take(MAX_NAME);
        let end = raw.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        let name = String::from_utf8_lossy(&raw[..end]).into_owned();
        let use_count = r.u32() as i32;
        Some(RpcTensor {
            id,
            dtype,
            buffer,
            ne,
            nb,
            op,
            op_params,
            flags,
            src,
            view_src,
            view_offs,
            data,
            name,
            use_count,
        })
    }
}

/// Reads little-endian fields off a slice known to be long enough.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        head
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_296_bytes_like_the_servers() {
        assert_eq!(RpcTensor::BYTES, 296);
        let mut out = Vec::new();
        RpcTensor::default().encode(&mut out);
        assert_eq!(out.len(), 296);
    }

    #[test]
    fn records_round_trip() {
        let t = RpcTensor {
            id: 7,
            dtype: 2,
            buffer: 0xdead_beef,
            ne: [32, 3, 1, 1],
            nb: [18, 18, 54, 54],
            op: 29,
            op_params: std::array::from_fn(|i| i as i32 - 3),
            flags: 1,
            src: std::array::from_fn(|i| i as u64 * 11),
            view_src: 5,
            view_offs: 64,
            data: 0x1000,
            name: "l0.attn_q".to_string(),
            use_count: 2,
        };
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(RpcTensor::decode(&out), Some(t));
        assert_eq!(RpcTensor::decode(&out[..295]), None);
    }

    #[test]
    fn long_names_are_cut_to_63_bytes() {
        let t = RpcTensor {
            name: "x".repeat(100),
            ..RpcTensor::default()
        };
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(RpcTensor::decode(&out).unwrap().name.len(), 63);
    }
}

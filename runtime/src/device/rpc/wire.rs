//! The wire format of ggml's RPC protocol, version 7.0.0, as pure functions
//! over byte slices (no I/O).
//!
//! A request is one command byte, a u64 little-endian payload size and the
//! payload; a response is a u64 little-endian size and the payload. Every
//! struct is packed (no padding) and little-endian. Commands that modify
//! state without returning anything ([`Command::answers`] is false) get no
//! response at all, not even an empty one; the server handles the commands
//! of one connection strictly in order. A request the server refuses (an
//! unknown device or buffer, data outside a buffer, a wrong payload size)
//! makes it close the connection instead of answering.
//!
//! Invariants:
//! - every encoder returns a whole message whose size field equals the number
//!   of payload bytes that follow it, except [`set_tensor_head`] and
//!   [`graph_compute_head`], whose declared size also counts the bytes the
//!   caller sends right after them;
//! - every decoder checks the size the server declared against the size it
//!   expects before anything else, and returns a [`WireError`] for any bytes
//!   (it never panics and never allocates from a size the server sent).

use super::tensor::{MAX_SRC, RpcTensor};
use thiserror::Error;

/// The protocol's major version this client speaks (a server of another
/// major version is refused).
pub const PROTO_MAJOR: u8 = 7;
/// The highest minor version this client accepts.
pub const PROTO_MINOR: u8 = 0;
/// The patch version this client was written against.
pub const PROTO_PATCH: u8 = 0;
/// Bytes of the transport capabilities in `HELLO` (all zero for plain TCP).
pub const CONN_CAPS_BYTES: usize = 24;
/// Bytes of a request's header: the command byte and the payload size.
pub const REQUEST_HEADER_BYTES: usize = 9;
/// Bytes of a response's header: the payload size.
pub const RESPONSE_HEADER_BYTES: usize = 8;
/// Above this many bytes ggml's own client offers a tensor's data by its
/// hash first (`SET_TENSOR_HASH`), so a server with a file cache (`-c`) can
/// skip the transfer.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;
/// Bytes of `SET_TENSOR`'s payload before the data: the tensor, the cache
/// flag and the offset.
pub const SET_TENSOR_HEAD_BYTES: usize = RpcTensor::BYTES + 1 + 8;

/// The protocol's commands, with their numbers on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Command {
    /// Allocate a buffer on a device: handle and size back.
    AllocBuffer = 0,
    /// A device's buffer alignment.
    GetAlignment = 1,
    /// A device's largest buffer.
    GetMaxSize = 2,
    /// The address of a buffer's first byte.
    BufferGetBase = 3,
    /// Free a buffer (no response).
    FreeBuffer = 4,
    /// Fill a whole buffer with one byte value (no response).
    BufferClear = 5,
    /// Write bytes into a tensor (no response).
    SetTensor = 6,
    /// Write a tensor from the server's file cache by the data's hash.
    SetTensorHash = 7,
    /// Read bytes of a tensor.
    GetTensor = 8,
    /// Copy one tensor into another on the same server.
    CopyTensor = 9,
    /// Compute a graph (no response).
    GraphCompute = 10,
    /// A device's free and total memory.
    GetDeviceMemory = 11,
    /// Let the backend prepare a tensor (no response).
    InitTensor = 12,
    /// The bytes a tensor needs in a device's buffer.
    GetAllocSize = 13,
    /// The handshake, always the first command of a connection.
    Hello = 14,
    /// The number of devices the server offers.
    DeviceCount = 15,
    /// Compute a device's last graph again (no response).
    GraphRecompute = 16,
    /// Fill a region of a tensor with one byte value (no response).
    MemsetTensor = 17,
}

impl Command {
    /// The command's name in messages (`alloc_buffer`, `set_tensor`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Command::AllocBuffer => "alloc_buffer",
            Command::GetAlignment => "get_alignment",
            Command::GetMaxSize => "get_max_size",
            Command::BufferGetBase => "buffer_get_base",
            Command::FreeBuffer => "free_buffer",
            Command::BufferClear => "buffer_clear",
            Command::SetTensor => "set_tensor",
            Command::SetTensorHash => "set_tensor_hash",
            Command::GetTensor => "get_tensor",
            Command::CopyTensor => "copy_tensor",
            Command::GraphCompute => "graph_compute",
            Command::GetDeviceMemory => "get_device_memory",
            Command::InitTensor => "init_tensor",
            Command::GetAllocSize => "get_alloc_size",
            Command::Hello => "hello",
            Command::DeviceCount => "device_count",
            Command::GraphRecompute => "graph_recompute",
            Command::MemsetTensor => "memset_tensor",
        }
    }

    /// Whether the server answers this command. The others are
    /// fire-and-forget: a refusal shows only as a closed connection at the
    /// next command that waits for an answer.
    pub fn answers(self) -> bool {
        !matches!(
            self,
            Command::FreeBuffer
                | Command::BufferClear
                | Command::SetTensor
                | Command::GraphCompute
                | Command::InitTensor
                | Command::GraphRecompute
                | Command::MemsetTensor
        )
    }
}

/// A response that does not fit the protocol.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    /// The size the server declared is not the size this response has.
    #[error("the server declared a {declared}-byte answer where {expected} bytes were expected")]
    Size {
        /// The size in the response's header.
        declared: u64,
        /// The size the protocol (or the request) fixes.
        expected: u64,
    },
    /// Fewer bytes than the header or payload needs.
    #[error("short answer: {got} of {expected} bytes")]
    Short {
        /// Bytes present.
        got: usize,
        /// Bytes needed.
        expected: usize,
    },
    /// The server speaks another protocol version.
    #[error(
        "the server speaks RPC protocol {major}.{minor}.{patch}, but this client speaks \
         {PROTO_MAJOR}.{PROTO_MINOR}.{PROTO_PATCH} and needs a server of major version \
         {PROTO_MAJOR}, minor at most {PROTO_MINOR}"
    )]
    Version {
        /// The server's major version.
        major: u8,
        /// The server's minor version.
        minor: u8,
        /// The server's patch version.
        patch: u8,
    },
}

/// FNV-1a, 64 bits: the hash `SET_TENSOR_HASH` names data by (and the
/// server's cache files are named after).
pub fn fnv1a64(data: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    data.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// A message under construction: header first, size patched in by `finish`.
struct Message(Vec<u8>);

impl Message {
    fn new(cmd: Command, payload_capacity: usize) -> Message {
        let mut bytes = Vec::with_capacity(REQUEST_HEADER_BYTES + payload_capacity);
        bytes.push(cmd as u8);
        bytes.extend_from_slice(&0u64.to_le_bytes());
        Message(bytes)
    }
    fn u8(mut self, v: u8) -> Message {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Message {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Message {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> Message {
        self.0.extend_from_slice(v);
        self
    }
    fn tensor(mut self, t: &RpcTensor) -> Message {
        t.encode(&mut self.0);
        self
    }
    /// Sets the size field to the payload written plus `trailing` bytes the
    /// caller sends after the message.
    fn finish(mut self, trailing: usize) -> Vec<u8> {
        let size = (self.0.len() - REQUEST_HEADER_BYTES + trailing) as u64;
        self.0[1..REQUEST_HEADER_BYTES].copy_from_slice(&size.to_le_bytes());
        self.0
    }
}

/// `HELLO` with the given transport capabilities (all zero: plain TCP).
pub fn hello(caps: &[u8; CONN_CAPS_BYTES]) -> Vec<u8> {
    Message::new(Command::Hello, CONN_CAPS_BYTES)
        .bytes(caps)
        .finish(0)
}

/// `DEVICE_COUNT` (an empty payload).
pub fn device_count() -> Vec<u8> {
    Message::new(Command::DeviceCount, 0).finish(0)
}

/// `ALLOC_BUFFER`: device u32, size u64.
pub fn alloc_buffer(device: u32, size: u64) -> Vec<u8> {
    Message::new(Command::AllocBuffer, 12)
        .u32(device)
        .u64(size)
        .finish(0)
}

/// A command whose payload is one device index: `GET_ALIGNMENT`,
/// `GET_MAX_SIZE`, `GET_DEVICE_MEMORY` or `GRAPH_RECOMPUTE`.
pub fn device_request(cmd: Command, device: u32) -> Vec<u8> {
    Message::new(cmd, 4).u32(device).finish(0)
}

/// A command whose payload is one buffer handle: `BUFFER_GET_BASE` or
/// `FREE_BUFFER`.
pub fn buffer_request(cmd: Command, handle: u64) -> Vec<u8> {
    Message::new(cmd, 8).u64(handle).finish(0)
}

/// `BUFFER_CLEAR`: handle u64, value u8.
pub fn buffer_clear(handle: u64, value: u8) -> Vec<u8> {
    Message::new(Command::BufferClear, 9)
        .u64(handle)
        .u8(value)
        .finish(0)
}

/// `MEMSET_TENSOR`: tensor, offset u64, size u64, value u8.
pub fn memset_tensor(t: &RpcTensor, offset: u64, size: u64, value: u8) -> Vec<u8> {
    Message::new(Command::MemsetTensor, RpcTensor::BYTES + 17)
        .tensor(t)
        .u64(offset)
        .u64(size)
        .u8(value)
        .finish(0)
}

/// `INIT_TENSOR`: the tensor.
pub fn init_tensor(t: &RpcTensor) -> Vec<u8> {
    Message::new(Command::InitTensor, RpcTensor::BYTES)
        .tensor(t)
        .finish(0)
}

/// `GET_ALLOC_SIZE`: device u32, the tensor, then its [`MAX_SRC`] sources
/// (`None` encodes as an all-zero record).
pub fn get_alloc_size(device: u32, t: &RpcTensor, srcs: &[Option<RpcTensor>; MAX_SRC]) -> Vec<u8> {
    let mut m = Message::new(Command::GetAllocSize, 4 + RpcTensor::BYTES * (1 + MAX_SRC))
        .u32(device)
        .tensor(t);
    for src in srcs {
        m = match src {
            Some(s) => m.tensor(s),
            None => m.bytes(&[0; RpcTensor::BYTES]),
        };
    }
    m.finish(0)
}

/// The head of `SET_TENSOR`: header, tensor, cache flag u8 (1 asks a server
/// with a file cache to save the data under its hash) and offset u64; its
/// size field counts the `data_len` data bytes the caller sends right after.
pub fn set_tensor_head(t: &RpcTensor, cache: bool, offset: u64, data_len: usize) -> Vec<u8> {
    Message::new(Command::SetTensor, SET_TENSOR_HEAD_BYTES)
        .tensor(t)
        .u8(u8::from(cache))
        .u64(offset)
        .finish(data_len)
}

/// `SET_TENSOR_HASH`: tensor, offset u64, [`fnv1a64`] of the data u64.
pub fn set_tensor_hash(t: &RpcTensor, offset: u64, hash: u64) -> Vec<u8> {
    Message::new(Command::SetTensorHash, RpcTensor::BYTES + 16)
        .tensor(t)
        .u64(offset)
        .u64(hash)
        .finish(0)
}

/// `GET_TENSOR`: tensor, offset u64, size u64; the answer is `size` bytes.
pub fn get_tensor(t: &RpcTensor, offset: u64, size: u64) -> Vec<u8> {
    Message::new(Command::GetTensor, RpcTensor::BYTES + 16)
        .tensor(t)
        .u64(offset)
        .u64(size)
        .finish(0)
}

/// `COPY_TENSOR`: source tensor, destination tensor.
pub fn copy_tensor(src: &RpcTensor, dst: &RpcTensor) -> Vec<u8> {
    Message::new(Command::CopyTensor, 2 * RpcTensor::BYTES)
        .tensor(src)
        .tensor(dst)
        .finish(0)
}

/// The header of `GRAPH_COMPUTE` for a payload of `payload_len` bytes (from
/// [`graph_payload`]), which the caller sends right after it.
pub fn graph_compute_head(payload_len: usize) -> Vec<u8> {
    Message::new(Command::GraphCompute, 0).finish(payload_len)
}

/// `GRAPH_COMPUTE`'s payload: device u32, node count u32, the nodes' ids
/// (u64 each, in execution order), tensor count u32, then every tensor the
/// nodes reach (nodes, sources, view sources), each once.
pub fn graph_payload(device: u32, nodes: &[u64], tensors: &[RpcTensor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + 8 * nodes.len() + RpcTensor::BYTES * tensors.len());
    out.extend_from_slice(&device.to_le_bytes());
    out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    for id in nodes {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
    for t in tensors {
        t.encode(&mut out);
    }
    out
}

/// Checks a response header's declared size against the size the caller
/// expects (a fixed response's [`Response::BYTES`], or the byte count a
/// `GET_TENSOR` asked for). Returns the size, to read exactly that many
/// bytes next.
pub fn expect_size(
    header: [u8; RESPONSE_HEADER_BYTES],
    expected: usize,
) -> Result<usize, WireError> {
    let declared = u64::from_le_bytes(header);
    if declared != expected as u64 {
        return Err(WireError::Size {
            declared,
            expected: expected as u64,
        });
    }
    Ok(expected)
}

/// A fixed-size response's payload.
pub trait Response: Sized {
    /// Bytes of the payload.
    const BYTES: usize;
    /// Reads the payload; `body` must hold exactly [`Self::BYTES`] bytes.
    fn decode_body(body: &[u8]) -> Result<Self, WireError>;
}

/// Decodes a whole response (header and payload): checks the declared size,
/// then the bytes present, then reads the payload.
pub fn decode<R: Response>(response: &[u8]) -> Result<R, WireError> {
    let header = take::<RESPONSE_HEADER_BYTES>(response)?;
    expect_size(header, R::BYTES)?;
    R::decode_body(&response[RESPONSE_HEADER_BYTES..])
}

/// The first `N` bytes of `bytes`, or [`WireError::Short`].
fn take<const N: usize>(bytes: &[u8]) -> Result<[u8; N], WireError> {
    match bytes.get(..N) {
        Some(head) => {
            let mut out = [0; N];
            out.copy_from_slice(head);
            Ok(out)
        }
        None => Err(WireError::Short {
            got: bytes.len(),
            expected: N,
        }),
    }
}

/// Checks a payload's exact length, then returns its first `N` bytes.
fn exact<const N: usize>(body: &[u8]) -> Result<[u8; N], WireError> {
    if body.len() > N {
        return Err(WireError::Size {
            declared: body.len() as u64,
            expected: N as u64,
        });
    }
    take::<N>(body)
}

/// Two little-endian u64 at the start of a 16-byte array.
fn two_u64(b: [u8; 16]) -> (u64, u64) {
    let mut lo = [0; 8];
    let mut hi = [0; 8];
    lo.copy_from_slice(&b[..8]);
    hi.copy_from_slice(&b[8..]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// `HELLO`'s answer: the server's version and transport capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Major version (this client needs [`PROTO_MAJOR`]).
    pub major: u8,
    /// Minor version (this client needs at most [`PROTO_MINOR`]).
    pub minor: u8,
    /// Patch version (pins ggml's op count; not checked).
    pub patch: u8,
    /// The server's transport capabilities (all zero: plain TCP).
    pub caps: [u8; CONN_CAPS_BYTES],
}

impl Hello {
    /// Accepts the server's version when this client can speak it (the same
    /// rule as ggml's own client: same major, minor not newer).
    pub fn check_version(&self) -> Result<(), WireError> {
        if self.major != PROTO_MAJOR || self.minor > PROTO_MINOR {
            return Err(WireError::Version {
                major: self.major,
                minor: self.minor,
                patch: self.patch,
            });
        }
        Ok(())
    }
}

impl Response for Hello {
    const BYTES: usize = 4 + CONN_CAPS_BYTES;
    fn decode_body(body: &[u8]) -> Result<Hello, WireError> {
        let b = exact::<{ 4 + CONN_CAPS_BYTES }>(body)?;
        let mut caps = [0; CONN_CAPS_BYTES];
        caps.copy_from_slice(&b[4..]);
        Ok(Hello {
            major: b[0],
            minor: b[1],
            patch: b[2],
            caps,
        })
    }
}

/// `ALLOC_BUFFER`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocated {
    /// The buffer's handle; 0 when the server could not allocate.
    pub handle: u64,
    /// The buffer's size (at least the size asked for).
    pub size: u64,
}

impl Response for Allocated {
    const BYTES: usize = 16;
    fn decode_body(body: &[u8]) -> Result<Allocated, WireError> {
        let (handle, size) = two_u64(exact::<16>(body)?);
        Ok(Allocated { handle, size })
    }
}

/// `GET_DEVICE_MEMORY`'s answer, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Free memory.
    pub free: u64,
    /// Total memory.
    pub total: u64,
}

impl Response for DeviceMemory {
    const BYTES: usize = 16;
    fn decode_body(body: &[u8]) -> Result<DeviceMemory, WireError> {
        let (free, total) = two_u64(exact::<16>(body)?);
        Ok(DeviceMemory { free, total })
    }
}

/// `GET_ALIGNMENT`, `GET_MAX_SIZE`, `BUFFER_GET_BASE` and `GET_ALLOC_SIZE`
/// answer one u64.
impl Response for u64 {
    const BYTES: usize = 8;
    fn decode_body(body: &[u8]) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(exact::<8>(body)?))
    }
}

/// `DEVICE_COUNT` answers one u32.
impl Response for u32 {
    const BYTES: usize = 4;
    fn decode_body(body: &[u8]) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(exact::<4>(body)?))
    }
}

/// `SET_TENSOR_HASH` and `COPY_TENSOR` answer one result byte (non-zero:
/// done).
impl Response for u8 {
    const BYTES: usize = 1;
    fn decode_body(body: &[u8]) -> Result<u8, WireError> {
        Ok(exact::<1>(body)?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(declared: u64, body: &[u8]) -> Vec<u8> {
        let mut out = declared.to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn header(msg: &[u8]) -> (u8, u64) {
        let mut size = [0; 8];
        size.copy_from_slice(&msg[1..9]);
        (msg[0], u64::from_le_bytes(size))
    }

    #[test]
    fn command_numbers_are_the_protocols() {
        assert_eq!(Command::AllocBuffer as u8, 0);
        assert_eq!(Command::SetTensor as u8, 6);
        assert_eq!(Command::GraphCompute as u8, 10);
        assert_eq!(Command::Hello as u8, 14);
        assert_eq!(Command::MemsetTensor as u8, 17);
    }

    #[test]
    fn only_the_seven_fire_and_forget_commands_get_no_answer() {
        let silent: Vec<_> = (0..=17u8)
            .filter_map(|n| {
                let cmd = all_commands().into_iter().find(|c| *c as u8 == n)?;
                (!cmd.answers()).then_some(n)
            })
            .collect();
        assert_eq!(silent, vec![4, 5, 6, 10, 12, 16, 17]);
    }

    fn all_commands() -> Vec<Command> {
        use Command::*;
        vec![
            AllocBuffer,
            GetAlignment,
            GetMaxSize,
            BufferGetBase,
            FreeBuffer,
            BufferClear,
            SetTensor,
            SetTensorHash,
            GetTensor,
            CopyTensor,
            GraphCompute,
            GetDeviceMemory,
            InitTensor,
            GetAllocSize,
            Hello,
            DeviceCount,
            GraphRecompute,
            MemsetTensor,
        ]
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn request_sizes_match_the_servers_packed_structs() {
        let t = RpcTensor::default();
        let cases: Vec<(Vec<u8>, Command, u64)> = vec![
            (hello(&[0; 24]), Command::Hello, 24),
            (device_count(), Command::DeviceCount, 0),
            (alloc_buffer(1, 2), Command::AllocBuffer, 12),
            (
                device_request(Command::GetAlignment, 0),
                Command::GetAlignment,
                4,
            ),
            (
                buffer_request(Command::FreeBuffer, 9),
                Command::FreeBuffer,
                8,
            ),
            (buffer_clear(9, 1), Command::BufferClear, 9),
            (memset_tensor(&t, 0, 1, 2), Command::MemsetTensor, 313),
            (init_tensor(&t), Command::InitTensor, 296),
            (
                get_alloc_size(0, &t, &Default::default()),
                Command::GetAllocSize,
                4 + 296 * 11,
            ),
            (set_tensor_hash(&t, 0, 1), Command::SetTensorHash, 312),
            (get_tensor(&t, 0, 1), Command::GetTensor, 312),
            (copy_tensor(&t, &t), Command::CopyTensor, 592),
        ];
        for (msg, cmd, size) in cases {
            assert_eq!(header(&msg), (cmd as u8, size), "{}", cmd.name());
            assert_eq!(
                msg.len() as u64,
                REQUEST_HEADER_BYTES as u64 + size,
                "{}",
                cmd.name()
            );
        }
    }

    #[test]
    fn heads_declare_the_bytes_that_follow_them() {
        let t = RpcTensor::default();
        let head = set_tensor_head(&t, true, 5, 1000);
        assert_eq!(head.len(), REQUEST_HEADER_BYTES + SET_TENSOR_HEAD_BYTES);
        assert_eq!(header(&head), (6, (SET_TENSOR_HEAD_BYTES + 1000) as u64));
        assert_eq!(head[9 + 296], 1, "cache flag");
        assert_eq!(&head[9 + 297..], &5u64.to_le_bytes());
        assert_eq!(header(&graph_compute_head(77)), (10, 77));
    }

    #[test]
    fn fields_are_little_endian_in_order() {
        let msg = alloc_buffer(3, 0x0102_0304_0506_0708);
        assert_eq!(&msg[9..13], &[3, 0, 0, 0]);
        assert_eq!(&msg[13..], &[8, 7, 6, 5, 4, 3, 2, 1]);
        let t = RpcTensor {
            id: 42,
            ..RpcTensor::default()
        };
        let msg = get_tensor(&t, 7, 9);
        assert_eq!(RpcTensor::decode(&msg[9..]), Some(t));
        assert_eq!(&msg[9 + 296..9 + 304], &7u64.to_le_bytes());
        assert_eq!(&msg[9 + 304..], &9u64.to_le_bytes());
    }

    #[test]
    fn graph_payload_layout() {
        let t = RpcTensor {
            id: 5,
            ..RpcTensor::default()
        };
        let p = graph_payload(2, &[5], std::slice::from_ref(&t));
        assert_eq!(p.len(), 4 + 4 + 8 + 4 + 296);
        assert_eq!(&p[..8], &[2, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&p[8..16], &5u64.to_le_bytes());
        assert_eq!(&p[16..20], &1u32.to_le_bytes());
        assert_eq!(RpcTensor::decode(&p[20..]), Some(t));
    }

    #[test]
    fn fixed_responses_decode() {
        let mut body = vec![7, 0, 0, 0];
        body.extend_from_slice(&[0; 24]);
        let h: Hello = decode(&response(28, &body)).unwrap();
        assert_eq!((h.major, h.minor, h.patch), (7, 0, 0));
        assert_eq!(h.check_version(), Ok(()));

        let mut body = 11u64.to_le_bytes().to_vec();
        body.extend_from_slice(&22u64.to_le_bytes());
        let a: Allocated = decode(&response(16, &body)).unwrap();
        assert_eq!(
            a,
            Allocated {
                handle: 11,
                size: 22
            }
        );
        let m: DeviceMemory = decode(&response(16, &body)).unwrap();
        assert_eq!(
            m,
            DeviceMemory {
                free: 11,
                total: 22
            }
        );
        assert_eq!(decode::<u64>(&response(8, &body[..8])), Ok(11));
        assert_eq!(decode::<u32>(&response(4, &[3, 0, 0, 0])), Ok(3));
        assert_eq!(decode::<u8>(&response(1, &[1])), Ok(1));
    }

    #[test]
    fn wrong_declared_sizes_are_refused_before_reading() {
        assert_eq!(
            decode::<u64>(&response(u64::MAX, &[0; 8])),
            Err(WireError::Size {
                declared: u64::MAX,
                expected: 8
            })
        );
        assert_eq!(
            decode::<Allocated>(&response(8, &[0; 8])),
            Err(WireError::Size {
                declared: 8,
                expected: 16
            })
        );
        assert_eq!(
            expect_size(5u64.to_le_bytes(), 4),
            Err(WireError::Size {
                declared: 5,
                expected: 4
            })
        );
        assert_eq!(expect_size(4u64.to_le_bytes(), 4), Ok(4));
    }

    #[test]
    fn short_and_long_bodies_are_refused() {
        assert_eq!(
            decode::<u64>(&response(8, &[1, 2, 3])),
            Err(WireError::Short {
                got: 3,
                expected: 8
            })
        );
        assert_eq!(
            decode::<u8>(&[1, 0, 0]),
            Err(WireError::Short {
                got: 3,
                expected: 8
            })
        );
        assert!(matches!(
            decode::<u8>(&response(1, &[1, 2])),
            Err(WireError::Size { .. })
        ));
    }

    #[test]
    fn every_byte_string_decodes_or_errs_without_panicking() {
        let mut rng = 0x1234_5678_u64;
        for len in 0..80 {
            for _ in 0..50 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng as u8
                    })
                    .collect();
                let _ = decode::<Hello>(&bytes);
                let _ = decode::<Allocated>(&bytes);
                let _ = decode::<DeviceMemory>(&bytes);
                let _ = decode::<u64>(&bytes);
                let _ = decode::<u32>(&bytes);
                let _ = decode::<u8>(&bytes);
            }
        }
    }

    #[test]
    fn versions_other_than_7_0_are_refused_with_both_versions_named() {
        let h = |major, minor| Hello {
            major,
            minor,
            patch: 3,
            caps: [0; 24],
        };
        assert_eq!(h(7, 0).check_version(), Ok(()));
        for (major, minor) in [(6, 0), (8, 0), (7, 1), (3, 9)] {
            let e = h(major, minor).check_version().unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("{major}.{minor}.3")), "{text}");
            assert!(text.contains("7.0.0"), "{text}");
        }
    }
}

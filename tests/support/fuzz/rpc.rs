//! Fuzz body for the RPC client's reading of server answers: the fuzzer's
//! bytes are everything a `ggml-rpc-server` says back, served from memory
//! ([`RpcClient::over`]: no socket and no thread per run).
//!
//! Input: the `GET_TENSOR` size the script asks for (u16, little-endian,
//! modulo 4097), the most bytes one read hands the client (u8, 0: as many as
//! it asks for), then the answers. The wire decoders also get the whole
//! input and the answers alone.

use runtime::RuntimeError;
use runtime::device::rpc::client::RpcClient;
use runtime::device::rpc::tensor::RpcTensor;
use runtime::device::rpc::wire::{
    self, Allocated, DeviceMemory, Hello, RESPONSE_HEADER_BYTES, Response,
};
use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::time::Duration;

/// The server's name in every error.
const ENDPOINT: &str = "fuzz-server:50052";
/// Bytes before the answers: the `GET_TENSOR` size and the read size.
pub const PREFIX_BYTES: usize = 3;
/// The largest `GET_TENSOR` the script asks for.
const MAX_GET: usize = 4096;
/// The buffer the script allocates.
const BUFFER_BYTES: u64 = 1 << 20;
/// Never waited for: the fake server answers at once or ends.
const TIMEOUT: Duration = Duration::from_secs(1);

/// A server that says `answers` and nothing more: each read gets at most
/// `chunk` bytes (0: as many as asked for), then end-of-file, as from a
/// server that closed the connection. Requests are dropped unread.
#[derive(Debug)]
struct FakeServer<'a> {
    answers: &'a [u8],
    chunk: usize,
}

impl Read for FakeServer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.chunk {
            0 => buf.len(),
            c => c.min(buf.len()),
        };
        self.answers.read(&mut buf[..n])
    }
}

impl Write for FakeServer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The `rpc_answers` target: a client over a server answering the input
/// runs a fixed script of calls (the handshake, device queries, a buffer,
/// `get_tensor`, `set_tensor`, `copy_tensor`, `graph_compute`, `sync`,
/// `free_buffer`). Every call returns a value or a remote error naming the
/// endpoint; a value is exactly what the answer's bytes say (its declared
/// size the expected one); the handshake succeeds exactly when the first
/// answer is a well-formed 7.0 `HELLO`; after the connection fails every
/// call fails at once, reading nothing. The wire decoders accept exactly the
/// well-formed answers.
pub fn rpc_answers(data: &[u8]) {
    script(data);
}

/// Runs the script; how many calls succeeded (the handshake included).
fn script(data: &[u8]) -> usize {
    decoders(data);
    let Some((&[lo, hi, chunk], answers)) = data.split_first_chunk::<PREFIX_BYTES>() else {
        return 0;
    };
    decoders(answers);
    let get_len = usize::from(u16::from_le_bytes([lo, hi])) % (MAX_GET + 1);
    let server = FakeServer {
        answers,
        chunk: usize::from(chunk),
    };
    let hello_ok = answers.len() >= RESPONSE_HEADER_BYTES + Hello::BYTES
        && answers[..8] == (Hello::BYTES as u64).to_le_bytes()
        && speaks(answers[8], answers[9]);
    let c = match RpcClient::over(server, ENDPOINT, TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            check_error(&e);
            assert!(!hello_ok, "a well-formed 7.0 HELLO was refused: {e}");
            return 0;
        }
    };
    assert!(hello_ok, "a HELLO answer that is not 7.0's was accepted");
    assert_eq!(c.server_version(), (answers[8], answers[9], answers[10]));
    let mut s = Script { c, answers, ok: 1 };

    if let Some((n, body)) = s.call(Some(4), |c| c.device_count()) {
        assert_eq!(&n.to_le_bytes()[..], body);
    }
    for call in [RpcClient::alignment, RpcClient::max_size] {
        if let Some((v, body)) = s.call(Some(8), |c| call(c, 0)) {
            assert_eq!(&v.to_le_bytes()[..], body);
        }
    }
    if let Some(((free, total), body)) = s.call(Some(16), |c| c.memory(0)) {
        assert_eq!([free.to_le_bytes(), total.to_le_bytes()].concat(), body);
    }
    let mut handle = 1;
    if let Some(((h, size), body)) = s.call(Some(16), |c| c.alloc_buffer(0, BUFFER_BYTES)) {
        assert_ne!(h, 0, "a refused allocation was returned as a buffer");
        assert_eq!([h.to_le_bytes(), size.to_le_bytes()].concat(), body);
        handle = h;
    }
    let mut base = 0;
    if let Some((b, body)) = s.call(Some(8), |c| c.buffer_base(handle)) {
        assert_eq!(&b.to_le_bytes()[..], body);
        base = b;
    }
    let row = |id: u64, name: &str| RpcTensor {
        id,
        dtype: 24, // GGML_TYPE_I8: one byte per element
        buffer: handle,
        ne: [MAX_GET as u32, 1, 1, 1],
        nb: [1; 4],
        data: base.wrapping_add(id * MAX_GET as u64),
        name: name.to_string(),
        ..RpcTensor::default()
    };
    let (a, b) = (row(1, "a"), row(2, "b"));
    let mut out = vec![0xa5; get_len];
    if let Some(((), body)) = s.call(Some(get_len), |c| c.get_tensor(&a, 0, &mut out)) {
        assert_eq!(out, body, "get_tensor's bytes are not the answer's");
    }
    s.call(None, |c| c.set_tensor(&b, 0, &[7; 16]));
    if let Some((done, body)) = s.call(Some(1), |c| c.copy_tensor(&a, &b)) {
        assert_eq!(done, body[0] != 0);
    }
    let graph = wire::graph_payload(0, &[b.id], &[a, b]);
    s.call(None, |c| c.graph_compute(&graph));
    s.call(Some(8), |c| c.sync());
    s.call(None, |c| c.free_buffer(handle));
    if let Some((n, body)) = s.call(Some(4), |c| c.device_count()) {
        assert_eq!(&n.to_le_bytes()[..], body);
    }
    let received = s.c.stats().bytes_received;
    assert!(
        received <= answers.len() as u64,
        "{received} bytes received"
    );
    s.ok
}

/// The client and the answers it reads.
struct Script<'a> {
    c: RpcClient<FakeServer<'a>>,
    answers: &'a [u8],
    /// Calls that succeeded.
    ok: usize,
}

impl<'a> Script<'a> {
    /// Runs one call whose answer has `answer` payload bytes (`None`: a
    /// request with no answer) and checks it: on success, its value and the
    /// answer's payload as the server sent it.
    fn call<T>(
        &mut self,
        answer: Option<usize>,
        f: impl FnOnce(&mut RpcClient<FakeServer<'a>>) -> Result<T, RuntimeError>,
    ) -> Option<(T, &'a [u8])> {
        let failed_before = self.c.failure().is_some();
        let before = self.c.stats().bytes_received as usize;
        let result = f(&mut self.c);
        let after = self.c.stats().bytes_received as usize;
        let read = &self.answers[before..after];
        match result {
            Err(e) => {
                check_error(&e);
                if failed_before {
                    assert!(read.is_empty(), "a failed connection was read from");
                    let text = e.to_string();
                    assert!(
                        text.contains("not sent: the connection failed earlier"),
                        "{text}"
                    );
                }
                None
            }
            Ok(value) => {
                assert!(!failed_before, "a call on a failed connection succeeded");
                assert!(self.c.failure().is_none());
                let expected = answer.map_or(0, |n| RESPONSE_HEADER_BYTES + n);
                assert_eq!(read.len(), expected, "bytes read by a successful call");
                if let Some(n) = answer {
                    assert_eq!(read[..8], (n as u64).to_le_bytes(), "declared size");
                }
                self.ok += 1;
                Some((value, read.get(RESPONSE_HEADER_BYTES..).unwrap_or_default()))
            }
        }
    }
}

/// Whether this client speaks a server's version: the same major, a minor
/// not newer.
fn speaks(major: u8, minor: u8) -> bool {
    major == wire::PROTO_MAJOR && minor.cmp(&wire::PROTO_MINOR).is_le()
}

/// A client error must be a remote one that names the endpoint.
fn check_error(e: &RuntimeError) {
    match e {
        RuntimeError::Remote { endpoint, .. } if endpoint == ENDPOINT => {}
        other => panic!("not a remote error naming {ENDPOINT}: {other:?}"),
    }
    assert!(e.to_string().contains(ENDPOINT), "{e}");
}

/// The pure decoders over `bytes`: every fixed answer, and `expect_size`.
fn decoders(bytes: &[u8]) {
    decodes::<Hello>(bytes);
    decodes::<Allocated>(bytes);
    decodes::<DeviceMemory>(bytes);
    decodes::<u64>(bytes);
    decodes::<u32>(bytes);
    decodes::<u8>(bytes);
    if let Ok(hello) = Hello::decode_body(bytes.get(..Hello::BYTES).unwrap_or_default()) {
        let ok = speaks(hello.major, hello.minor);
        assert_eq!(hello.check_version().is_ok(), ok, "{hello:?}");
    }
    if let Some(&header) = bytes.first_chunk::<RESPONSE_HEADER_BYTES>() {
        let declared = u64::from_le_bytes(header);
        let mut sizes = vec![0, 1, 4, 8, 16, 28, MAX_GET, usize::MAX];
        sizes.extend(usize::try_from(declared));
        for expected in sizes {
            match wire::expect_size(header, expected) {
                Ok(n) => assert_eq!((n, declared), (expected, expected as u64)),
                Err(_) => assert_ne!(declared, expected as u64),
            }
        }
    }
}

/// `R` decodes `bytes` as a whole answer exactly when they are one (its
/// size declared, its payload present, nothing more), and its payload
/// exactly when it has `R::BYTES` bytes.
fn decodes<R: Response + Debug>(bytes: &[u8]) {
    let declared_ok = |b: &[u8]| b.get(..8) == Some(&(R::BYTES as u64).to_le_bytes()[..]);
    let whole = wire::decode::<R>(bytes);
    let expected = declared_ok(bytes) && bytes.len() == RESPONSE_HEADER_BYTES + R::BYTES;
    assert_eq!(whole.is_ok(), expected, "{whole:?}");
    if let Some(answer) = bytes.get(..RESPONSE_HEADER_BYTES + R::BYTES) {
        let first = wire::decode::<R>(answer);
        assert_eq!(first.is_ok(), declared_ok(answer), "{first:?}");
    }
    let body = R::decode_body(bytes);
    assert_eq!(body.is_ok(), bytes.len() == R::BYTES, "{body:?}");
}

/// Correct answers to the script from a server of protocol `version`, one
/// per call that waits for an answer: the `HELLO` answer first, then
/// `get_len` bytes for `GET_TENSOR` among the others.
pub fn script_answers(version: [u8; 3], get_len: u16) -> Vec<Vec<u8>> {
    let answer = |body: &[u8]| [&(body.len() as u64).to_le_bytes()[..], body].concat();
    let mut hello = version.to_vec();
    hello.resize(Hello::BYTES, 0);
    let get: Vec<u8> = (0..get_len as usize % (MAX_GET + 1))
        .map(|i| i as u8)
        .collect();
    let memory = [(1u64 << 30).to_le_bytes(), (2u64 << 30).to_le_bytes()].concat();
    let allocated = [0x5555u64.to_le_bytes(), BUFFER_BYTES.to_le_bytes()].concat();
    let (count, alignment) = (1u32.to_le_bytes(), 32u64.to_le_bytes());
    // hello, device_count, alignment, max_size, memory, alloc_buffer,
    // buffer_base, get_tensor, copy_tensor, sync, device_count.
    [
        &hello[..],
        &count,
        &alignment,
        &(1u64 << 30).to_le_bytes(),
        &memory,
        &allocated,
        &0x7f00_0000_0000u64.to_le_bytes(),
        &get,
        &[1],
        &alignment,
        &count,
    ]
    .map(answer)
    .to_vec()
}

/// An input for [`rpc_answers`]: the prefix, then `answers` back to back.
pub fn script_input(get_len: u16, chunk: u8, answers: &[Vec<u8>]) -> Vec<u8> {
    let mut out = get_len.to_le_bytes().to_vec();
    out.push(chunk);
    out.extend(answers.concat());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls in the script, the handshake included.
    const CALLS: usize = 14;

    #[test]
    fn correct_answers_make_every_call_succeed() {
        for (get_len, chunk) in [(0, 0), (64, 0), (4096, 1), (300, 7)] {
            let input = script_input(get_len, chunk, &script_answers([7, 0, 2], get_len));
            assert_eq!(script(&input), CALLS, "get {get_len}, chunk {chunk}");
        }
    }

    #[test]
    fn bad_answers_stop_the_script_where_they_start() {
        let answers = script_answers([7, 0, 0], 64);
        let input = script_input(64, 0, &answers);
        // Cut inside the get_tensor answer: every call before it succeeds;
        // it fails the connection, so every later call fails.
        let upto_get: usize = answers[..7].iter().map(Vec::len).sum();
        assert_eq!(script(&input[..PREFIX_BYTES + upto_get + 20]), 7);
        // Another version: the handshake fails.
        assert_eq!(
            script(&script_input(64, 0, &script_answers([7, 1, 0], 64))),
            0
        );
        // A refused allocation keeps the connection: every other call succeeds.
        let mut refused = answers.clone();
        refused[5][8..16].fill(0);
        assert_eq!(script(&script_input(64, 0, &refused)), CALLS - 1);
    }
}

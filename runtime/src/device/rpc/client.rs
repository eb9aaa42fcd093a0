//! [`RpcClient`]: one TCP connection to a `ggml-rpc-server`, one call at a
//! time, every read and write bounded by a timeout. The same client runs over
//! any byte stream ([`RpcClient::over`]), so tests and the `rpc_answers` fuzz
//! target drive it with in-memory servers.
//!
//! Invariants:
//! - the connection starts with `HELLO`, and a server whose protocol version
//!   this client cannot speak is refused before any other command;
//! - every answer's declared size is checked against the size expected
//!   before its bytes are read, and nothing is allocated from a size the
//!   server sent;
//! - after the first failure of the connection (an I/O error, a timeout, a
//!   closed connection, an answer of the wrong size) the client is poisoned:
//!   every later call fails at once with the first failure's text; there is
//!   no attempt to resynchronise. The server frees every buffer of a
//!   connection when it ends, so a new connection would not find them anyway.
//! - the socket closes only when the client is dropped, never on a failure:
//!   a `ggml-rpc-server` that writes an answer to a closed connection dies
//!   of SIGPIPE (it does not ignore the signal), so closing right after a
//!   timeout would kill a server that is merely slow. Start servers with
//!   SIGPIPE ignored (`scripts/rpc-servers.sh` does) to make them survive a
//!   client that leaves early.
//!
//! The server handles a connection's commands in order and answers some of
//! them only ([`wire::Command::answers`]); a request it refuses makes it
//! close the connection, so a refused fire-and-forget request (`set_tensor`,
//! `graph_compute`, `free_buffer`, ...) shows at the next call that waits
//! for an answer ([`RpcClient::sync`] is the cheapest).

use super::tensor::RpcTensor;
use super::wire::{self, Command, Response};
use crate::RuntimeError;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Traffic counters of one connection (for benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// Bytes written to the socket, headers included.
    pub bytes_sent: u64,
    /// Bytes read from the socket, headers included.
    pub bytes_received: u64,
    /// Requests sent, with or without an answer.
    pub requests: u64,
    /// Requests whose answer was waited for.
    pub round_trips: u64,
    /// Buffers the server allocated for this connection and that it has not
    /// been told to free (it frees the rest when the connection closes).
    pub buffers_held: u64,
}

/// A connection to one `ggml-rpc-server` (protocol 7.0), over TCP (`S`
/// is [`TcpStream`] unless made by [`RpcClient::over`]).
#[derive(Debug)]
pub struct RpcClient<S = TcpStream> {
    stream: S,
    endpoint: String,
    device: String,
    timeout: Duration,
    version: (u8, u8, u8),
    stats: RpcStats,
    /// The first failure's text; while set, every call fails at once.
    failure: Option<String>,
    /// The first request sent without an answer since the last answer: a
    /// refusal of it only shows when the next answer does not come.
    unanswered: Option<String>,
}

/// Largest fixed-size answer ([`wire::Hello`]).
const MAX_FIXED_ANSWER: usize = 32;

/// Why a read or write did not complete.
struct IoFailure {
    error: io::Error,
    reading: bool,
    /// Bytes of the current piece read before the failure, and its size.
    got: usize,
    expected: usize,
}

/// What a call's exchange failed with, before it is worded.
enum Failure {
    Io(IoFailure),
    Wire(wire::WireError),
}

impl From<IoFailure> for Failure {
    fn from(f: IoFailure) -> Failure {
        Failure::Io(f)
    }
}

impl From<wire::WireError> for Failure {
    fn from(e: wire::WireError) -> Failure {
        Failure::Wire(e)
    }
}

impl RpcClient {
    /// Connects to `endpoint` (`host:port`) and shakes hands. `timeout`
    /// bounds the connection and every later read and write (a read waits
    /// at most this long for the next bytes of an answer; a
    /// [`graph_compute`](Self::graph_compute) followed by
    /// [`sync`](Self::sync) must finish within it, see
    /// [`set_timeout`](Self::set_timeout)).
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<RpcClient, RuntimeError> {
        let error = |detail: String| RuntimeError::Remote {
            device: endpoint.to_string(),
            endpoint: endpoint.to_string(),
            what: "connect".to_string(),
            detail,
        };
        if timeout.is_zero() {
            return Err(error("the timeout must be longer than zero".to_string()));
        }
        let addrs: Vec<SocketAddr> = endpoint
            .to_socket_addrs()
            .map_err(|e| error(format!("cannot resolve '{endpoint}' as host:port: {e}")))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(stream) = stream else {
            return Err(error(match last {
                None => format!("'{endpoint}' resolves to no address"),
                Some(e) if is_timeout(&e) => {
                    format!("no connection within {}", seconds(timeout))
                }
                Some(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    "connection refused (is ggml-rpc-server listening there?)".to_string()
                }
                Some(e) => e.to_string(),
            }));
        };
        let setup = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(timeout)))
            .and_then(|()| stream.set_write_timeout(Some(timeout)));
        if let Err(e) = setup {
            return Err(error(format!("cannot set up the socket: {e}")));
        }
        RpcClient::over(stream, endpoint, timeout)
    }

    /// Changes the timeout of every later read and write (e.g. around a
    /// long graph computation).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), RuntimeError> {
        let what = "set_timeout";
        if timeout.is_zero() {
            return Err(self.error(what, "the timeout must be longer than zero".to_string()));
        }
        let set = self
            .stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.stream.set_write_timeout(Some(timeout)));
        match set {
            Ok(()) => {
                self.timeout = timeout;
                Ok(())
            }
            Err(e) => Err(self.error(what, format!("cannot set the socket's timeout: {e}"))),
        }
    }
}

impl<S: Read + Write> RpcClient<S> {
    /// Shakes hands over `stream`, an open connection to the server at
    /// `endpoint` (which errors name). `timeout` is the one the stream's
    /// own reads and writes obey, named in errors; an in-memory stream
    /// (tests, fuzzing) needs none and ends in end-of-file.
    pub fn over(stream: S, endpoint: &str, timeout: Duration) -> Result<Self, RuntimeError> {
        let mut client = RpcClient {
            stream,
            endpoint: endpoint.to_string(),
            device: endpoint.to_string(),
            timeout,
            version: (0, 0, 0),
            stats: RpcStats::default(),
            failure: None,
            unanswered: None,
        };
        client.hello()?;
        Ok(client)
    }

    /// Names the plan device in every later error (the endpoint until then).
    pub fn with_device_name(mut self, name: &str) -> Self {
        self.device = name.to_string();
        self
    }

    /// The server's `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server's protocol version (major, minor, patch).
    pub fn server_version(&self) -> (u8, u8, u8) {
        self.version
    }

    /// Traffic so far.
    pub fn stats(&self) -> RpcStats {
        self.stats
    }

    /// The first failure's text, once the connection has failed.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// How many devices the server offers.
    pub fn device_count(&mut self) -> Result<u32, RuntimeError> {
        self.ask("device_count", &wire::device_count())
    }

    /// Buffer alignment of device `dev`.
    pub fn alignment(&mut self, dev: u32) -> Result<u64, RuntimeError> {
        let msg = wire::device_request(Command::GetAlignment, dev);
        self.ask(&format!("get_alignment of device {dev}"), &msg)
    }

    /// Largest buffer device `dev` allocates.
    pub fn max_size(&mut self, dev: u32) -> Result<u64, RuntimeError> {
        let msg = wire::device_request(Command::GetMaxSize, dev);
        self.ask(&format!("get_max_size of device {dev}"), &msg)
    }

    /// Free and total memory of device `dev`, in bytes.
    pub fn memory(&mut self, dev: u32) -> Result<(u64, u64), RuntimeError> {
        let msg = wire::device_request(Command::GetDeviceMemory, dev);
        let m: wire::DeviceMemory =
            self.ask(&format!("get_device_memory of device {dev}"), &msg)?;
        Ok((m.free, m.total))
    }

    /// Allocates a buffer of at least `size` bytes on device `dev`: its
    /// handle and actual size. A server that cannot allocate answers handle
    /// 0, returned as an error (the connection stays usable).
    pub fn alloc_buffer(&mut self, dev: u32, size: u64) -> Result<(u64, u64), RuntimeError> {
        let what = format!("alloc_buffer of {size} bytes on device {dev}");
        let a: wire::Allocated = self.ask(&what, &wire::alloc_buffer(dev, size))?;
        if a.handle == 0 {
            let detail = format!("the server could not allocate {size} bytes on device {dev}");
            return Err(self.error(&what, detail));
        }
        self.stats.buffers_held += 1;
        Ok((a.handle, a.size))
    }

    /// The server address of a buffer's first byte (tensors' `data` are
    /// this plus their offset).
    pub fn buffer_base(&mut self, handle: u64) -> Result<u64, RuntimeError> {
        let msg = wire::buffer_request(Command::BufferGetBase, handle);
        self.ask(&format!("buffer_get_base of buffer {handle:#x}"), &msg)
    }

    /// Frees a buffer (no answer; an unknown handle closes the connection).
    pub fn free_buffer(&mut self, handle: u64) -> Result<(), RuntimeError> {
        let msg = wire::buffer_request(Command::FreeBuffer, handle);
        self.tell(&format!("free_buffer of buffer {handle:#x}"), &[&msg])?;
        self.stats.buffers_held = self.stats.buffers_held.saturating_sub(1);
        Ok(())
    }

    /// Sets every byte of a buffer to `value` (no answer).
    pub fn buffer_clear(&mut self, handle: u64, value: u8) -> Result<(), RuntimeError> {
        let msg = wire::buffer_clear(handle, value);
        self.tell(&format!("buffer_clear of buffer {handle:#x}"), &[&msg])
    }

    /// Writes `data` at byte `offset` of tensor `t`, in one message as the
    /// protocol requires. Above [`wire::HASH_THRESHOLD`] bytes the data is
    /// first offered by its hash (one round trip): a server with a file
    /// cache (`-c`) that has it answers yes and nothing more is sent;
    /// otherwise the data follows with the cache flag set, so such a server
    /// saves it. Meant for weights; data that changes between runs goes
    /// through [`set_tensor_uncached`](Self::set_tensor_uncached).
    pub fn set_tensor(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        let what = format!(
            "set_tensor '{}' ({} bytes at offset {offset})",
            t.name,
            data.len()
        );
        let mut cache = false;
        if data.len() > wire::HASH_THRESHOLD {
            let msg = wire::set_tensor_hash(t, offset, wire::fnv1a64(data));
            let found: u8 = self.ask(&what, &msg)?;
            if found != 0 {
                return Ok(());
            }
            cache = true;
        }
        let head = wire::set_tensor_head(t, cache, offset, data.len());
        self.tell(&what, &[&head, data])
    }

    /// Writes `data` at byte `offset` of tensor `t` without the hash round
    /// trip and without asking the server to cache it (inputs, state).
    pub fn set_tensor_uncached(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        let what = format!(
            "set_tensor '{}' ({} bytes at offset {offset})",
            t.name,
            data.len()
        );
        let head = wire::set_tensor_head(t, false, offset, data.len());
        self.tell(&what, &[&head, data])
    }

    /// Reads `out.len()` bytes at byte `offset` of tensor `t`.
    pub fn get_tensor(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let what = format!(
            "get_tensor '{}' ({} bytes at offset {offset})",
            t.name,
            out.len()
        );
        self.check_open(&what)?;
        let msg = wire::get_tensor(t, offset, out.len() as u64);
        let result = self.send(&[&msg]).and_then(|()| {
            let size = self.receive_header(out.len())?;
            self.read_full(&mut out[..size])?;
            Ok(())
        });
        self.finish(&what, result)
    }

    /// Copies tensor `src` into `dst` on the server; `false` when the
    /// server's backend cannot copy between their buffers.
    pub fn copy_tensor(&mut self, src: &RpcTensor, dst: &RpcTensor) -> Result<bool, RuntimeError> {
        let what = format!("copy_tensor '{}' -> '{}'", src.name, dst.name);
        let done: u8 = self.ask(&what, &wire::copy_tensor(src, dst))?;
        Ok(done != 0)
    }

    /// Sends a graph to compute (a [`wire::graph_payload`]); no answer: the
    /// next call that waits for one (e.g. [`sync`](Self::sync)) returns
    /// after the computation, or reports its refusal.
    pub fn graph_compute(&mut self, payload: &[u8]) -> Result<(), RuntimeError> {
        let head = wire::graph_compute_head(payload.len());
        let what = format!("graph_compute ({} bytes)", payload.len());
        self.tell(&what, &[&head, payload])
    }

    /// Computes device `dev`'s last graph again (no answer; refused, by
    /// closing the connection, when there is none or a buffer was freed
    /// since).
    pub fn graph_recompute(&mut self, dev: u32) -> Result<(), RuntimeError> {
        let msg = wire::device_request(Command::GraphRecompute, dev);
        self.tell(&format!("graph_recompute of device {dev}"), &[&msg])
    }

    /// Waits until the server has processed every earlier request (a cheap
    /// round trip: device 0's alignment; the server handles requests in
    /// order).
    pub fn sync(&mut self) -> Result<(), RuntimeError> {
        let msg = wire::device_request(Command::GetAlignment, 0);
        self.ask::<u64>("sync", &msg).map(|_| ())
    }

    /// The handshake: refuses a server of another protocol version.
    fn hello(&mut self) -> Result<(), RuntimeError> {
        let msg = wire::hello(&[0; wire::CONN_CAPS_BYTES]);
        let hello: wire::Hello = match self.ask("hello", &msg) {
            Ok(hello) => hello,
            Err(RuntimeError::Remote { detail, .. }) if detail.starts_with("no answer") => {
                let detail = format!(
                    "{detail} (the server serves one client at a time: is another one connected?)"
                );
                return Err(self.error("hello", detail));
            }
            Err(e) => return Err(e),
        };
        self.version = (hello.major, hello.minor, hello.patch);
        if let Err(e) = hello.check_version() {
            return Err(self.fail("hello", e.to_string()));
        }
        Ok(())
    }

    /// Sends a request with a fixed-size answer and decodes the answer.
    fn ask<R: Response>(&mut self, what: &str, msg: &[u8]) -> Result<R, RuntimeError> {
        self.check_open(what)?;
        let result = self.send(&[msg]).and_then(|()| {
            let size = self.receive_header(R::BYTES)?;
            let mut body = [0; MAX_FIXED_ANSWER];
            let body = body.get_mut(..size).ok_or(wire::WireError::Size {
                declared: size as u64,
                expected: MAX_FIXED_ANSWER as u64,
            })?;
            self.read_full(body)?;
            Ok(R::decode_body(body)?)
        });
        self.finish(what, result)
    }

    /// Sends a request that gets no answer.
    fn tell(&mut self, what: &str, parts: &[&[u8]]) -> Result<(), RuntimeError> {
        self.check_open(what)?;
        let result = self.send(parts);
        if result.is_ok() && self.unanswered.is_none() {
            self.unanswered = Some(what.to_string());
        }
        self.finish(what, result)
    }

    /// Writes a request's parts back to back.
    fn send(&mut self, parts: &[&[u8]]) -> Result<(), Failure> {
        self.stats.requests += 1;
        for part in parts {
            let expected = part.len();
            self.stream.write_all(part).map_err(|error| IoFailure {
                error,
                reading: false,
                got: 0,
                expected,
            })?;
            self.stats.bytes_sent += expected as u64;
        }
        Ok(())
    }

    /// Reads an answer's header and checks its declared size.
    fn receive_header(&mut self, expected: usize) -> Result<usize, Failure> {
        self.stats.round_trips += 1;
        let mut header = [0; wire::RESPONSE_HEADER_BYTES];
        self.read_full(&mut header)?;
        self.unanswered = None;
        Ok(wire::expect_size(header, expected)?)
    }

    /// Fills `buf` from the socket, counting the bytes that came.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<(), IoFailure> {
        let expected = buf.len();
        let mut got = 0;
        while got < expected {
            let failed = |error| IoFailure {
                error,
                reading: true,
                got,
                expected,
            };
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(failed(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    got += n;
                    self.stats.bytes_received += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(())
    }

    /// Turns an exchange's failure into the call's error, poisoning the
    /// client.
    fn finish<T>(&mut self, what: &str, result: Result<T, Failure>) -> Result<T, RuntimeError> {
        result.map_err(|failure| {
            let detail = match failure {
                Failure::Io(io) => self.io_detail(io),
                Failure::Wire(e) => e.to_string(),
            };
            self.fail(what, detail)
        })
    }

    /// Words an I/O failure: a timeout, a closed connection, a short answer.
    fn io_detail(&self, f: IoFailure) -> String {
        let secs = seconds(self.timeout);
        let closed = matches!(
            f.error.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
        );
        let mut detail = if is_timeout(&f.error) && !f.reading {
            format!("could not send within {secs} (the server is not reading)")
        } else if is_timeout(&f.error) && f.got == 0 {
            format!("no answer within {secs}")
        } else if is_timeout(&f.error) {
            format!(
                "no answer within {secs} after {} of {} bytes",
                f.got, f.expected
            )
        } else if closed && f.got > 0 {
            format!(
                "short answer: the server closed the connection after {} of {} bytes",
                f.got, f.expected
            )
        } else if closed {
            "the server closed the connection (it does so when it refuses a request: \
             an unknown device or buffer, data outside a buffer; it frees that \
             connection's buffers)"
                .to_string()
        } else {
            format!("connection error: {}", f.error)
        };
        if let Some(earlier) = &self.unanswered {
            detail.push_str(&format!(
                "; requests without an answer were sent before it, from {earlier} on, \
                 and the server may have refused one of them"
            ));
        }
        detail
    }

    /// Fails at once when the connection failed before.
    fn check_open(&self, what: &str) -> Result<(), RuntimeError> {
        match &self.failure {
            None => Ok(()),
            Some(first) => Err(self.error(
                what,
                format!("not sent: the connection failed earlier ({first})"),
            )),
        }
    }

    /// Poisons the client with its first failure and returns the error.
    fn fail(&mut self, what: &str, detail: String) -> RuntimeError {
        let error = self.error(what, detail);
        if self.failure.is_none() {
            self.failure = Some(error.to_string());
        }
        error
    }

    /// The error of call `what`.
    fn error(&self, what: &str, detail: String) -> RuntimeError {
        RuntimeError::Remote {
            device: self.device.clone(),
            endpoint: self.endpoint.clone(),
            what: what.to_string(),
            detail,
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// `2 s`, `0.25 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Instant;

    const TIMEOUT: Duration = Duration::from_millis(500);

    /// A fake server: `script` runs on the first connection, in a thread.
    fn fake(script: impl FnOnce(TcpStream) + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        thread::spawn(move || {
            if let Ok((stream, _)) = listener.accept() {
                script(stream);
            }
        });
        endpoint
    }

    /// Reads one request: its command and payload.
    fn request(s: &mut TcpStream) -> (u8, Vec<u8>) {
        let mut head = [0; 9];
        s.read_exact(&mut head).unwrap();
        let size = u64::from_le_bytes(head[1..].try_into().unwrap());
        let mut payload = vec![0; size as usize];
        s.read_exact(&mut payload).unwrap();
        (head[0], payload)
    }

    /// Writes an answer with the given declared size.
    fn answer(s: &mut TcpStream, declared: u64, body: &[u8]) {
        s.write_all(&declared.to_le_bytes()).unwrap();
        s.write_all(body).unwrap();
    }

    /// Reads `HELLO` and answers with version `major.minor.0`.
    fn hello(s: &mut TcpStream, major: u8, minor: u8) {
        let (cmd, payload) = request(s);
        assert_eq!((cmd, payload.len()), (14, 24));
        let mut body = vec![major, minor, 0, 0];
        body.extend_from_slice(&[0; 24]);
        answer(s, 28, &body);
    }

    fn text(r: Result<impl std::fmt::Debug, RuntimeError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn a_7_0_server_is_accepted_and_answers_decode() {
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            let (cmd, payload) = request(&mut s);
            assert_eq!(
                (cmd, payload),
                (0, [&2u32.to_le_bytes()[..], &100u64.to_le_bytes()].concat())
            );
            answer(
                &mut s,
                16,
                &[[5, 0, 0, 0, 0, 0, 0, 0], 128u64.to_le_bytes()].concat(),
            );
            let (cmd, _) = request(&mut s);
            assert_eq!(cmd, 11);
            answer(
                &mut s,
                16,
                &[1u64.to_le_bytes(), 2u64.to_le_bytes()].concat(),
            );
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        assert_eq!(c.server_version(), (7, 0, 0));
        assert_eq!(c.alloc_buffer(2, 100).unwrap(), (5, 128));
        assert_eq!(c.memory(0).unwrap(), (1, 2));
        let stats = c.stats();
        assert_eq!((stats.requests, stats.round_trips), (3, 3));
        assert_eq!(stats.bytes_received, 36 + 24 + 24);
    }

    #[test]
    fn other_versions_are_refused_naming_both() {
        for (major, minor) in [(6, 0), (7, 1), (8, 0)] {
            let endpoint = fake(move |mut s| hello(&mut s, major, minor));
            let e = text(RpcClient::connect(&endpoint, TIMEOUT));
            assert!(e.contains(&format!("protocol {major}.{minor}.0")), "{e}");
            assert!(e.contains("speaks 7.0.0"), "{e}");
            assert!(e.contains("hello failed"), "{e}");
        }
    }

    #[test]
    fn a_refused_allocation_names_the_size_and_keeps_the_connection() {
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
            answer(&mut s, 16, &[0; 16]);
            request(&mut s);
            answer(&mut s, 8, &32u64.to_le_bytes());
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let e = text(c.alloc_buffer(0, 1 << 40));
        assert!(
            e.contains("could not allocate 1099511627776 bytes on device 0"),
            "{e}"
        );
        assert_eq!(c.alignment(0).unwrap(), 32);
    }

    #[test]
    fn wrong_sizes_and_short_answers_are_refused() {
        // A declared size other than the fixed one.
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
            answer(&mut s, 3, &[1, 2, 3]);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let e = text(c.alignment(0));
        assert!(
            e.contains("declared a 3-byte answer where 8 bytes were expected"),
            "{e}"
        );

        // A huge declared size for get_tensor: refused before reading or allocating.
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
            answer(&mut s, u64::MAX, &[]);
            thread::sleep(TIMEOUT);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let e = text(c.get_tensor(&RpcTensor::default(), 0, &mut [0; 16]));
        assert!(
            e.contains(&format!("declared a {}-byte answer where 16", u64::MAX)),
            "{e}"
        );

        // The right size declared, fewer bytes sent, then closed.
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
            answer(&mut s, 16, &[1, 2, 3]);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let e = text(c.memory(0));
        assert!(
            e.contains("short answer: the server closed the connection after 3 of 16"),
            "{e}"
        );

        // Garbage instead of a hello.
        let endpoint = fake(|mut s| {
            request(&mut s);
            s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        });
        let e = text(RpcClient::connect(&endpoint, TIMEOUT));
        assert!(e.contains("hello failed: the server declared a"), "{e}");
    }

    #[test]
    fn a_server_closing_mid_call_is_an_error_and_poisons_the_client() {
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let t = RpcTensor {
            name: "w".to_string(),
            ..RpcTensor::default()
        };
        c.set_tensor(&t, 0, &[1; 8]).unwrap();
        let e = text(c.sync());
        assert!(
            e.contains("sync failed: the server closed the connection"),
            "{e}"
        );
        assert!(
            e.contains("from set_tensor 'w' (8 bytes at offset 0) on"),
            "{e}"
        );
        assert!(c.failure().is_some());
        let start = Instant::now();
        let later = text(c.device_count());
        assert!(start.elapsed() < Duration::from_millis(50));
        assert!(
            later.contains("device_count failed: not sent: the connection failed earlier"),
            "{later}"
        );
        assert!(later.contains(&e), "{later}");
    }

    #[test]
    fn a_silent_server_times_out_within_the_timeout() {
        let endpoint = fake(|mut s| {
            hello(&mut s, 7, 0);
            request(&mut s);
            thread::sleep(4 * TIMEOUT);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let start = Instant::now();
        let e = text(c.device_count());
        let took = start.elapsed();
        assert!(
            e.contains("device_count failed: no answer within 0.5 s"),
            "{e}"
        );
        assert!(took >= TIMEOUT && took < 2 * TIMEOUT, "{took:?}");
    }

    #[test]
    fn a_server_that_never_says_hello_times_out() {
        let endpoint = fake(|s| {
            thread::sleep(4 * TIMEOUT);
            drop(s);
        });
        let start = Instant::now();
        let e = text(RpcClient::connect(&endpoint, TIMEOUT));
        assert!(e.contains("hello failed: no answer within 0.5 s"), "{e}");
        assert!(start.elapsed() < 2 * TIMEOUT);
    }

    #[test]
    fn nobody_listening_is_refused_and_bad_endpoints_are_named() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = text(RpcClient::connect(&format!("127.0.0.1:{port}"), TIMEOUT));
        assert!(e.contains("connect failed: connection refused"), "{e}");
        let e = text(RpcClient::connect("no-port-here", TIMEOUT));
        assert!(e.contains("cannot resolve 'no-port-here'"), "{e}");
    }

    #[test]
    fn large_data_is_offered_by_hash_first() {
        let data = vec![7u8; wire::HASH_THRESHOLD + 1];
        let hash = wire::fnv1a64(&data);
        let endpoint = fake(move |mut s| {
            hello(&mut s, 7, 0);
            // First upload: no cache entry, the data follows with the cache flag.
            let (cmd, payload) = request(&mut s);
            assert_eq!(cmd, 7);
            assert_eq!(&payload[304..], &hash.to_le_bytes());
            answer(&mut s, 1, &[0]);
            let (cmd, payload) = request(&mut s);
            assert_eq!((cmd, payload[296]), (6, 1));
            assert_eq!(
                payload.len(),
                wire::SET_TENSOR_HEAD_BYTES + wire::HASH_THRESHOLD + 1
            );
            // Second upload: the server has it.
            request(&mut s);
            answer(&mut s, 1, &[1]);
            let (cmd, _) = request(&mut s);
            assert_eq!(cmd, 1);
            answer(&mut s, 8, &[1, 0, 0, 0, 0, 0, 0, 0]);
        });
        let mut c = RpcClient::connect(&endpoint, TIMEOUT).unwrap();
        let t = RpcTensor::default();
        c.set_tensor(&t, 0, &data).unwrap();
        let sent = c.stats().bytes_sent;
        c.set_tensor(&t, 0, &data).unwrap();
        assert!(c.stats().bytes_sent - sent < 1000);
        c.sync().unwrap();
    }

    #[test]
    fn the_client_is_send() {
        fn send<T: Send>() {}
        send::<RpcClient>();
    }
}

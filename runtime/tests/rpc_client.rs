//! The RPC client against a real `ggml-rpc-server` (llama.cpp's, protocol
//! 7.0): each test starts its own server on a free loopback port.
//!
//! The binary is `$GGPLAN_RPC_SERVER`, else `<repo>/.rpc/bin/ggml-rpc-server`
//! (`scripts/rpc-servers.sh build` makes it). Without it every test here
//! fails, saying so: they never pass silently.

use runtime::device::rpc::client::RpcClient;
use runtime::device::rpc::tensor::RpcTensor;
use runtime::device::rpc::wire;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);
const MIB: usize = 1024 * 1024;
/// ggml's type number of F32 and op number of ADD.
const GGML_TYPE_F32: u32 = 0;
const GGML_OP_ADD: u32 = 2;
/// ggml's flag of a node to compute.
const GGML_TENSOR_FLAG_COMPUTE: i32 = 16;

/// The server binary, or a failure that says how to make it.
fn server_binary() -> PathBuf {
    let path = match std::env::var_os("GGPLAN_RPC_SERVER") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.rpc/bin/ggml-rpc-server"),
    };
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/rpc-servers.sh build` (or set GGPLAN_RPC_SERVER to a \
         ggml-rpc-server of RPC protocol 7.0)",
        path.display()
    );
    path
}

/// One `ggml-rpc-server` child process, killed on drop.
struct Server {
    child: Child,
    endpoint: String,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[], &[])
    }

    /// Starts the server with extra arguments and environment, on a free
    /// port (another if someone takes it first), and waits until it accepts.
    fn start_with(args: &[&str], env: &[(&str, &std::path::Path)]) -> Server {
        let binary = server_binary();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            // Through sh, to start it with SIGPIPE ignored: the server does not
            // ignore it and would die answering a client that left early (std
            // resets SIGPIPE to its default in children it spawns). No core
            // file and no gdb backtrace when a test makes it abort.
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "trap '' PIPE; ulimit -c 0; exec \"$0\" \"$@\""])
                .arg(&binary)
                .env("GGML_NO_BACKTRACE", "1")
                .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
            let mut server = Server {
                child,
                endpoint: format!("127.0.0.1:{port}"),
            };
            if server.wait_until_accepting() {
                return server;
            }
        }
        panic!("{} did not start listening in 5 tries", binary.display());
    }

    /// A probe connection that sends nothing and closes: the server reads
    /// end-of-file where it expects `HELLO` and goes back to accepting.
    fn wait_until_accepting(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false; // e.g. the port was taken
            }
            if TcpStream::connect(&self.endpoint).is_ok() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn connect(&self) -> RpcClient {
        RpcClient::connect(&self.endpoint, TIMEOUT).expect("connect to the test server")
    }

    /// Whether the process has ended within `within`.
    fn exited_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {name}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-row F32 tensor of `n` values at byte `at` of a buffer.
fn f32_row(id: u64, name: &str, (handle, base): (u64, u64), at: u64, n: usize) -> RpcTensor {
    let bytes = 4 * n as u32;
    RpcTensor {
        id,
        dtype: GGML_TYPE_F32,
        buffer: handle,
        ne: [n as u32, 1, 1, 1],
        nb: [4, bytes, bytes, bytes],
        data: base + at,
        name: name.to_string(),
        ..RpcTensor::default()
    }
}

/// Seeded bytes (xorshift), different for each seed.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Allocates `size` bytes on device 0: (handle, base).
fn buffer(c: &mut RpcClient, size: usize) -> (u64, u64) {
    let (handle, got) = c.alloc_buffer(0, size as u64).unwrap();
    assert!(got >= size as u64);
    (handle, c.buffer_base(handle).unwrap())
}

#[test]
fn hello_and_device_queries() {
    let server = Server::start();
    let mut c = server.connect();
    assert_eq!(c.server_version(), (7, 0, 0));
    assert!(c.device_count().unwrap() >= 1);
    let align = c.alignment(0).unwrap();
    assert!(align.is_power_of_two(), "{align}");
    assert!(c.max_size(0).unwrap() > 0);
    let (free, total) = c.memory(0).unwrap();
    assert!(total > 0 && free <= total, "{free} of {total}");
    c.sync().unwrap();
    let stats = c.stats();
    assert_eq!(stats.round_trips, 6);
    assert_eq!(stats.requests, 6);
}

#[test]
fn buffers_allocate_clear_and_free() {
    let server = Server::start();
    let mut c = server.connect();
    let align = c.alignment(0).unwrap();
    let (handle, base) = buffer(&mut c, MIB);
    assert!(handle != 0 && base != 0);
    assert_eq!(base % align, 0);

    c.buffer_clear(handle, 0xab).unwrap();
    let t = f32_row(1, "t", (handle, base), 0, 4);
    let mut out = [0u8; 16];
    c.get_tensor(&t, 0, &mut out).unwrap();
    assert_eq!(out, [0xab; 16]);

    c.free_buffer(handle).unwrap();
    c.sync().unwrap();

    // More than the host has: refused with handle 0, and the connection lives on.
    let e = c.alloc_buffer(0, 1 << 60).unwrap_err().to_string();
    assert!(
        e.contains("the server could not allocate 1152921504606846976 bytes"),
        "{e}"
    );
    c.sync().unwrap();
}

#[test]
fn set_then_get_round_trips_1_mib() {
    let server = Server::start();
    let mut c = server.connect();
    let buf = buffer(&mut c, MIB + 4096);
    let data = pattern(MIB, 1);
    let t = f32_row(1, "small", buf, 4096, MIB / 4);
    let before = c.stats();
    c.set_tensor(&t, 0, &data).unwrap();
    let after = c.stats();
    assert_eq!(
        after.round_trips, before.round_trips,
        "no hash query under 10 MiB"
    );
    let mut out = vec![0; MIB];
    c.get_tensor(&t, 0, &mut out).unwrap();
    assert!(out == data);

    // A part, at an offset.
    let mut part = vec![0; 1000];
    c.get_tensor(&t, 12345, &mut part).unwrap();
    assert!(part[..] == data[12345..13345]);
}

#[test]
fn set_then_get_round_trips_11_mib_through_the_hash_fallback() {
    let server = Server::start();
    let mut c = server.connect();
    let n = 11 * MIB;
    let buf = buffer(&mut c, n);
    let data = pattern(n, 2);
    let t = f32_row(1, "big", buf, 0, n / 4);
    let before = c.stats();
    c.set_tensor(&t, 0, &data).unwrap();
    let after = c.stats();
    // The hash was offered (one round trip), the server has no cache (no -c)
    // and answered no, so the data followed.
    assert_eq!(after.round_trips - before.round_trips, 1);
    assert!(after.bytes_sent - before.bytes_sent > n as u64);
    let mut out = vec![0; n];
    c.get_tensor(&t, 0, &mut out).unwrap();
    assert!(out == data);
}

#[test]
fn a_caching_server_takes_known_data_by_its_hash() {
    let cache = std::env::temp_dir().join(format!("ggplan-rpc-cache-{}", std::process::id()));
    let server = Server::start_with(&["-c"], &[("LLAMA_CACHE", &cache)]);
    let mut c = server.connect();
    let n = 11 * MIB;
    let buf = buffer(&mut c, 2 * n);
    let data = pattern(n, 3);
    let first = f32_row(1, "first", buf, 0, n / 4);
    let second = f32_row(2, "second", buf, n as u64, n / 4);

    c.set_tensor(&first, 0, &data).unwrap();
    c.sync().unwrap();
    // The server saved the data under our FNV-1a hash.
    let file = cache
        .join("rpc")
        .join(format!("{:016x}", wire::fnv1a64(&data)));
    assert!(file.is_file(), "{} missing", file.display());

    let sent = c.stats().bytes_sent;
    c.set_tensor(&second, 0, &data).unwrap();
    assert!(c.stats().bytes_sent - sent < 1000, "the data went again");
    let mut out = vec![0; n];
    c.get_tensor(&second, 0, &mut out).unwrap();
    assert!(out == data);
    drop(server);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn copy_tensor_copies_within_a_server() {
    let server = Server::start();
    let mut c = server.connect();
    let buf = buffer(&mut c, 4096);
    let src = f32_row(1, "src", buf, 0, 256);
    let dst = f32_row(2, "dst", buf, 1024, 256);
    let data = pattern(1024, 4);
    c.set_tensor(&src, 0, &data).unwrap();
    assert!(c.copy_tensor(&src, &dst).unwrap());
    let mut out = vec![0; 1024];
    c.get_tensor(&dst, 0, &mut out).unwrap();
    assert_eq!(out, data);
}

#[test]
fn a_graph_computes_and_sync_waits_for_it() {
    let server = Server::start();
    let mut c = server.connect();
    let buf = buffer(&mut c, 4096);
    let a = f32_row(1, "a", buf, 0, 4);
    let b = f32_row(2, "b", buf, 64, 4);
    // The CPU backend skips nodes without GGML_TENSOR_FLAG_COMPUTE.
    let sum = RpcTensor {
        op: GGML_OP_ADD,
        flags: GGML_TENSOR_FLAG_COMPUTE,
        src: [1, 2, 0, 0, 0, 0, 0, 0, 0, 0],
        ..f32_row(3, "sum", buf, 128, 4)
    };
    let floats = |v: [f32; 4]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    c.set_tensor(&a, 0, &floats([1.0, 2.0, 3.0, 4.0])).unwrap();
    c.set_tensor(&b, 0, &floats([10.0, 20.0, 30.0, 40.0]))
        .unwrap();
    let payload = wire::graph_payload(0, &[3], &[a, b, sum.clone()]);
    c.graph_compute(&payload).unwrap();
    c.sync().unwrap();
    let mut out = vec![0; 16];
    c.get_tensor(&sum, 0, &mut out).unwrap();
    assert_eq!(out, floats([11.0, 22.0, 33.0, 44.0]));
}

#[test]
fn a_read_past_the_buffer_closes_the_connection_and_poisons_the_client() {
    let server = Server::start();
    let mut c = server.connect();
    let buf = buffer(&mut c, 4096);
    let t = f32_row(1, "edge", buf, 4096 - 64, 16);
    let mut out = vec![0; 128];
    let start = Instant::now();
    let e = c.get_tensor(&t, 0, &mut out).unwrap_err().to_string();
    assert!(start.elapsed() < TIMEOUT);
    assert!(
        e.contains(
            "get_tensor 'edge' (128 bytes at offset 0) failed: the server closed the connection"
        ),
        "{e}"
    );
    let later = c.sync().unwrap_err().to_string();
    assert!(
        later.contains("not sent: the connection failed earlier"),
        "{later}"
    );

    // The server itself lives on and serves the next client.
    let mut again = server.connect();
    again.sync().unwrap();
}

#[test]
fn a_refused_request_without_an_answer_shows_at_the_next_answer() {
    let server = Server::start();
    let mut c = server.connect();
    c.free_buffer(0x1234).unwrap();
    let e = c.sync().unwrap_err().to_string();
    assert!(
        e.contains("sync failed: the server closed the connection"),
        "{e}"
    );
    assert!(e.contains("from free_buffer of buffer 0x1234 on"), "{e}");
}

#[test]
fn a_tensor_record_outside_its_buffer_kills_the_server() {
    // The server checks a record's bytes against its buffer with an
    // assertion: it aborts, so every client of it must check first.
    let mut server = Server::start();
    let mut c = server.connect();
    let buf = buffer(&mut c, 4096);
    let t = f32_row(1, "outside", buf, 4096, 16);
    let e = c.get_tensor(&t, 0, &mut [0; 16]).unwrap_err().to_string();
    assert!(e.contains("the server closed the connection"), "{e}");
    assert!(server.exited_within(Duration::from_secs(5)));
}

#[test]
fn a_killed_server_fails_the_next_call_at_once() {
    let mut server = Server::start();
    let mut c = server.connect();
    c.sync().unwrap();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let start = Instant::now();
    let e = c.sync().unwrap_err().to_string();
    assert!(start.elapsed() < TIMEOUT, "{:?}", start.elapsed());
    assert!(
        e.contains("sync failed: the server closed the connection"),
        "{e}"
    );
    assert!(RpcClient::connect(&server.endpoint, TIMEOUT).is_err());
}

#[test]
fn a_stopped_server_times_out() {
    let server = Server::start();
    let timeout = Duration::from_secs(1);
    let mut c = RpcClient::connect(&server.endpoint, timeout).unwrap();
    c.sync().unwrap();
    server.signal("-STOP");
    let start = Instant::now();
    let e = c.memory(0).unwrap_err().to_string();
    let took = start.elapsed();
    server.signal("-CONT");
    assert!(
        e.contains("get_device_memory of device 0 failed: no answer within 1 s"),
        "{e}"
    );
    assert!(took >= timeout && took < 3 * timeout, "{took:?}");
}

#[test]
fn a_second_client_waits_for_the_first() {
    // The server serves one connection at a time: a second client's hello
    // is not answered while the first is connected. When the first leaves,
    // the server answers the second's hello into a closed connection, which
    // kills it unless SIGPIPE is ignored (as `Server::start` does).
    let server = Server::start();
    let first = server.connect();
    let e = RpcClient::connect(&server.endpoint, Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(e.contains("hello failed: no answer within 0.5 s"), "{e}");
    drop(first);
    server.connect().sync().unwrap();
}

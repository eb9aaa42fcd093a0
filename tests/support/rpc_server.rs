//! `RpcServer`: a `ggml-rpc-server` child process on a free loopback port,
//! for tests that run plans on remote devices.
//!
//! The binary is `$GGPLAN_RPC_SERVER`, else `<repo>/.rpc/bin/ggml-rpc-server`
//! (`scripts/rpc-servers.sh build` makes it).
//!
//! Invariants: `start` returns only once the server accepts connections;
//! the process is killed and reaped on `kill` or drop. The readiness probe
//! connects and closes without sending anything: the server reads
//! end-of-file where it expects `HELLO` and accepts its next client, so the
//! probe never holds the server (which serves one client at a time). The
//! server runs with SIGPIPE ignored, so a client that disconnects before
//! reading an answer does not kill it.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long `start` waits for the server to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// One running `ggml-rpc-server`.
#[derive(Debug)]
pub struct RpcServer {
    child: Option<Child>,
    endpoint: String,
}

/// The server binary's path (whether or not it exists).
pub fn server_binary() -> PathBuf {
    match std::env::var_os("GGPLAN_RPC_SERVER") {
        Some(p) => PathBuf::from(p),
        None => crate::workspace_root().join(".rpc/bin/ggml-rpc-server"),
    }
}

impl RpcServer {
    /// Starts a server with `threads` CPU threads on a free port of
    /// 127.0.0.1 and waits until it accepts connections.
    pub fn start(threads: usize) -> Result<RpcServer, String> {
        let binary = server_binary();
        if !binary.is_file() {
            return Err(format!(
                "{} is missing: run `scripts/rpc-servers.sh build` (or set GGPLAN_RPC_SERVER \
                 to a ggml-rpc-server of RPC protocol 7.0)",
                binary.display()
            ));
        }
        let mut last = String::new();
        // Another process may take the port between our probe and the bind.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free loopback port: {e}"))?
                .port();
            // sh ignores SIGPIPE for the server (std resets it to the default
            // in children); no core file should a test make it abort.
            let child = Command::new("sh")
                .args(["-c", "trap '' PIPE; ulimit -c 0; exec \"$0\" \"$@\""])
                .arg(&binary)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .args(["-t", &threads.max(1).to_string()])
                .env("GGML_NO_BACKTRACE", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
            let mut server = RpcServer {
                child: Some(child),
                endpoint: format!("127.0.0.1:{port}"),
            };
            match server.wait_until_accepting() {
                Ok(()) => return Ok(server),
                Err(why) => last = why,
            }
        }
        Err(format!("{} did not start: {last}", binary.display()))
    }

    /// The server's `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Kills the server and waits for it to end (also done on drop).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Probes until a connection is accepted, the process ends, or
    /// [`READY_WITHIN`] passes.
    fn wait_until_accepting(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("it exited ({status}) on {}", self.endpoint));
            }
            if TcpStream::connect(&self.endpoint).is_ok() {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Err(format!(
            "nothing accepted on {} within {READY_WITHIN:?}",
            self.endpoint
        ))
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_started_server_answers_hello_after_the_probe() {
        let mut server = RpcServer::start(1).unwrap_or_else(|e| panic!("{e}"));
        let mut s = TcpStream::connect(server.endpoint()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut hello = vec![14];
        hello.extend_from_slice(&24u64.to_le_bytes());
        hello.extend_from_slice(&[0; 24]);
        s.write_all(&hello).unwrap();
        let mut answer = [0; 8 + 28];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(&answer[..8], &28u64.to_le_bytes());
        assert_eq!(answer[8], 7, "major version");
        drop(s);
        server.kill();
        assert!(TcpStream::connect(server.endpoint()).is_err());
    }
}

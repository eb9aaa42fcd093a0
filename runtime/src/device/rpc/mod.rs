//! Remote devices: ggml's RPC server (`ggml-rpc-server` of llama.cpp) driven
//! as one more device of a plan.
//!
//! - `tensor.rs`: [`tensor::RpcTensor`], the protocol's tensor record;
//! - `wire.rs`: commands, message framing and the fixed-size requests and
//!   responses, as pure encode/decode functions (fuzzed);
//! - `client.rs`: [`client::RpcClient`], one TCP connection with a timeout on
//!   every call (or any byte stream, `RpcClient::over`: the fuzz target's);
//! - `ggml/`: plan steps as ggml graph nodes (`numbers.rs`: ggml's op numbers;
//!   `ops.rs`: op parameters and refusals; `mod.rs`: records and payload);
//! - `device.rs`: [`RemoteServers`] (the `--rpc` list, connected once per
//!   job) and [`RemoteDevice`] (a plan device's buffers on one server);
//! - `kernels.rs`: prepared steps a remote device computes, and copies with
//!   a remote end;
//! - `link.rs`: the link's latency and upload bandwidth, measured.

mod backend;
pub mod client;
pub mod device;
mod device_impl;
pub mod ggml;
pub mod kernels;
pub mod link;
mod prepare;
pub mod tensor;
pub mod wire;

pub use backend::RpcBackend;
pub use device::{RemoteDevice, RemoteServer, RemoteServers};

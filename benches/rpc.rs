//! Remote devices against llama.cpp's own RPC client, beside the machine's
//! ceilings and each server link's latency and upload bandwidth, all
//! measured in the same run. SmolLM2-135M (Q4_1, when installed by
//! `scripts/setup.sh`): prefill of 128 tokens over a 512-row F16 KV cache
//! (F16 as llama.cpp's default: llama-bench takes no F32 cache),
//! and decode (1 token after 100, attending the cache's first 128 rows, as
//! `generate`'s first bucket does), on `cpu` (one device, the baseline),
//! `cpu+rpc0` and `cpu+rpc0+rpc1` with a layer split, over
//! `ggml-rpc-server`s on loopback (`scripts/rpc-servers.sh build`).
//!
//! The remote plans list the CPU first (the presets list the servers first),
//! so the layer split puts the input layer and the first blocks on the CPU,
//! then the servers in order, as llama.cpp places layers; the bench prints
//! each plan's blocks per device, and `scripts/rpc-llama-bench.sh run --blocks`
//! turns them into llama.cpp's `-ngl`/`-ts` (that script documents why the
//! two splits are the same).
//!
//! Three passes over the same two servers (1 thread each; our runtime 1
//! thread per device):
//! 1. ggplan, direct: the three configurations take turns in blocks of runs
//!    (drifts of the shared machine hit all); median times, and traffic per
//!    run from the client's own counters (`RemoteServer::stats`);
//! 2. ggplan through `scripts/rpc-proxy.py` (a counting TCP proxy): bytes each
//!    way and round trips (direction changes server -> client) on the wire;
//! 3. llama.cpp's `llama-bench` (built by `scripts/rpc-llama-bench.sh build`;
//!    skipped with a note when missing) on the same servers: direct for its
//!    times (`-p 128`, and `-n 32 -d 100` for decode), through the proxy for
//!    its traffic, as the difference of two runs that differ only in the
//!    measured work (`-r 2` against `-r 1`; `-n 24` against `-n 8`), which
//!    cancels the model upload and the context set-up.
//!
//! Run: `cargo bench --bench rpc` (a few minutes).

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PlacementOptions, layer_of};
use compiler::target::Target;
use ggplan_tests::rpc_server::RpcServer;
use ir::files::gguf::GgufFile;
use ir::plan::Plan;
use ir::{Graph, Role};
use models::llama::{CacheConfig, LlamaConfig, build_cached_attending};
use runtime::device::rpc::client::RpcClient;
use runtime::device::rpc::{RemoteServer, RemoteServers};
use runtime::{LoadOptions, Runtime, Weights};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CTX: i64 = 512;
/// Blocks of turns in the timed pass.
const BLOCKS: usize = 5;
const CONFIGS: [&str; 3] = ["cpu", "cpu+rpc0", "cpu+rpc0+rpc1"];
/// One call's timeout (a prefill on a loaded 2-core machine takes ~1 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest one llama-bench run may take.
const LLAMA_BENCH_LIMIT: Duration = Duration::from_secs(300);

/// One workload: `t` tokens after `past`, attending `attend` cache rows.
struct Workload {
    name: &'static str,
    t: i64,
    attend: i64,
    past: i64,
    /// Runs per turn in the timed pass, and runs counted through the proxy.
    per_block: usize,
    counted: usize,
}

const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "prefill 128",
        t: 128,
        attend: CTX,
        past: 0,
        per_block: 2,
        counted: 2,
    },
    Workload {
        name: "decode",
        t: 1,
        attend: 128,
        past: 100,
        per_block: 30,
        counted: 20,
    },
];

/// Bytes each way and round trips.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Traffic {
    sent: u64,
    received: u64,
    round_trips: u64,
}

impl Traffic {
    fn minus(self, o: Traffic) -> Traffic {
        Traffic {
            sent: self.sent - o.sent,
            received: self.received - o.received,
            round_trips: self.round_trips - o.round_trips,
        }
    }

    fn plus(self, o: Traffic) -> Traffic {
        Traffic {
            sent: self.sent + o.sent,
            received: self.received + o.received,
            round_trips: self.round_trips + o.round_trips,
        }
    }

    /// Per unit, as floats: (sent, received, round trips).
    fn per(self, n: f64) -> [f64; 3] {
        [self.sent, self.received, self.round_trips].map(|v| v as f64 / n)
    }
}

/// What one ggplan or llama.cpp configuration measured on one workload.
#[derive(Clone, Copy, Default)]
struct Row {
    /// Median ms per run (prefill) or per token (decode).
    ms: Option<f64>,
    /// Traffic per token.
    per_token: Option<[f64; 3]>,
}

/// The preset with the CPU moved first: llama.cpp keeps the input layer and
/// the first blocks on the CPU and gives the last ones to its devices, and a
/// layer split gives units to devices in list order.
fn target(config: &str) -> Target {
    let mut t = Target::preset(config).expect("a preset");
    if let Some(i) = t.devices.iter().position(|d| d.is_cpu()) {
        let cpu = t.devices.remove(i);
        t.devices.insert(0, cpu);
    }
    t
}

fn plan(graph: &Graph, config: &str) -> Plan {
    let options = CompileOptions {
        placement: PlacementOptions {
            // The split by memory (equal in these presets), measured as
            // llama.cpp splits; the cost policy alone would keep the CPU.
            layer_split: (config != "cpu").then(|| vec![1.0; config.split('+').count()]),
            ..PlacementOptions::default()
        },
        micro_batches: 1,
        tensor_split: None,
        ..CompileOptions::default()
    };
    compile(graph, &target(config), &options).unwrap().plan
}

/// Blocks per device, in the plan's device order; panics unless each block
/// lives on one device and the devices hold consecutive runs of blocks.
fn blocks_per_device(plan: &Plan) -> Vec<usize> {
    let mut device_of: Vec<Option<usize>> = Vec::new();
    for t in plan.tensors.iter().filter(|t| t.role == Role::Weight) {
        if let Some(l) = layer_of(&t.name) {
            let l = l as usize;
            if device_of.len() <= l {
                device_of.resize(l + 1, None);
            }
            let d = t.device.index();
            assert!(
                device_of[l].is_none_or(|e| e == d),
                "block {l} is split over devices"
            );
            device_of[l] = Some(d);
        }
    }
    let order: Vec<usize> = device_of.iter().map(|d| d.expect("a block")).collect();
    assert!(order.is_sorted(), "blocks out of device order: {order:?}");
    let mut counts = vec![0; plan.devices.len()];
    for d in order {
        counts[d] += 1;
    }
    counts
}

/// Where the weights outside blocks live: (weight, device name).
fn others(plan: &Plan) -> Vec<String> {
    (plan.tensors.iter())
        .filter(|t| t.role == Role::Weight && layer_of(&t.name).is_none())
        .map(|t| format!("{} on {}", t.name, plan.devices[t.device.index()].name))
        .collect()
}

/// A causal step of `w.t` tokens after `w.past` cached ones.
fn set_inputs(rt: &mut Runtime, w: &Workload, vocab: i64) {
    let step = models::llama::step_inputs(w.past, w.t, CTX, w.attend).unwrap();
    let tokens: Vec<i32> = (0..w.t).map(|j| ((j * 37 + 11) % vocab) as i32).collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.set_input_i32("pos", &step.pos).unwrap();
    rt.set_input_i32("kv_idx", &step.kv_idx).unwrap();
    rt.set_input_f32("kq_mask", &step.kq_mask).unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn client_traffic(server: &RemoteServer) -> Traffic {
    let s = server.stats();
    Traffic {
        sent: s.bytes_sent,
        received: s.bytes_received,
        round_trips: s.round_trips,
    }
}

fn all_traffic(rpc: &RemoteServers) -> Traffic {
    (0..rpc.len() as u32)
        .filter_map(|i| rpc.get(i))
        .map(|s| client_traffic(s))
        .fold(Traffic::default(), Traffic::plus)
}

/// Each runtime's median ms per run and traffic per run, taking turns in
/// blocks of `per_block` runs.
fn race(rts: &mut [Runtime], rpc: &RemoteServers, per_block: usize) -> Vec<(f64, Traffic)> {
    let mut ms = vec![Vec::new(); rts.len()];
    let mut traffic = vec![Traffic::default(); rts.len()];
    for rt in rts.iter_mut() {
        rt.run().unwrap();
    }
    for _ in 0..BLOCKS {
        for (i, rt) in rts.iter_mut().enumerate() {
            let before = all_traffic(rpc);
            for _ in 0..per_block {
                let t = Instant::now();
                rt.run().unwrap();
                ms[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
            traffic[i] = traffic[i].plus(all_traffic(rpc).minus(before));
        }
    }
    let runs = (BLOCKS * per_block) as u64;
    ms.into_iter()
        .zip(traffic)
        .map(|(m, t)| {
            let per_run = Traffic {
                sent: t.sent / runs,
                received: t.received / runs,
                round_trips: t.round_trips / runs,
            };
            (median(m), per_run)
        })
        .collect()
}

/// Latency (median of 200 round trips, µs) and upload bandwidth (best of 5
/// uploads of 32 MiB, each followed by a round trip, GB/s) of one link.
fn measure_link(endpoint: &str) -> Result<(f64, f64), runtime::RuntimeError> {
    let mut c = RpcClient::connect(endpoint, CALL_TIMEOUT)?;
    let link = runtime::device::rpc::link::measure(&mut c, 200, 5, 32 << 20)?;
    Ok((link.latency_us, link.upload_gbps))
}

/// `scripts/rpc-proxy.py` over some servers; stopped on drop.
struct Proxy {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The proxy's endpoint for each server, in order.
    endpoints: Vec<String>,
    control: String,
}

impl Proxy {
    fn start(servers: &[String]) -> Result<Proxy, String> {
        let script = ggplan_tests::workspace_root().join("scripts/rpc-proxy.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .args(servers)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start python3 {}: {e}", script.display()))?;
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().expect("piped"));
        let mut endpoints = Vec::new();
        // One line per server, then the control line: at most servers + 1 lines.
        for _ in 0..=servers.len() {
            let mut line = String::new();
            if lines.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the proxy exited before it listened".to_string());
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["proxy", _, local] => endpoints.push(local.to_string()),
                ["control", local] => {
                    return Ok(Proxy {
                        child,
                        stdin,
                        endpoints,
                        control: local.to_string(),
                    });
                }
                _ => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("unexpected output from the proxy".to_string())
    }

    /// The counters so far, per server.
    fn reading(&self) -> Vec<Traffic> {
        let mut s = std::net::TcpStream::connect(&self.control).expect("the proxy's control port");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let n = |l: &serde_json::Value, k: &str| l[k].as_u64().unwrap();
        (v["links"].as_array().unwrap().iter())
            .map(|l| Traffic {
                sent: n(l, "sent"),
                received: n(l, "received"),
                round_trips: n(l, "round_trips"),
            })
            .collect()
    }

    /// The first `n` servers' counters, summed.
    fn total(&self, n: usize) -> Traffic {
        (self.reading().into_iter().take(n)).fold(Traffic::default(), Traffic::plus)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        drop(self.stdin.take()); // its end of file makes it exit
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scripts/rpc-llama-bench.sh run ARGS -o json`, bounded by
/// [`LLAMA_BENCH_LIMIT`]; its tests' JSON objects.
fn llama_bench(
    args: &[String],
    log_dir: &Path,
    tag: &str,
) -> Result<Vec<serde_json::Value>, String> {
    let script = ggplan_tests::workspace_root().join("scripts/rpc-llama-bench.sh");
    let out = log_dir.join(format!("{tag}.json"));
    let err = log_dir.join(format!("{tag}.log"));
    let file = |p: &PathBuf| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut child = Command::new(&script)
        .arg("run")
        .args(args)
        .args(["-o", "json"])
        .stdin(Stdio::null())
        .stdout(file(&out)?)
        .stderr(file(&err)?)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", script.display()))?;
    let deadline = Instant::now() + LLAMA_BENCH_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "llama-bench ran over {LLAMA_BENCH_LIMIT:?}; see {}",
                err.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        return Err(format!(
            "llama-bench failed ({status}); see {}",
            err.display()
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    let tests: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(tests.as_array().cloned().unwrap_or_default())
}

/// llama-bench's flags for `config` on `servers`: `--blocks` from our plan.
fn llama_split(config: &str, blocks: &[usize], servers: &[String]) -> Vec<String> {
    if config == "cpu" {
        return vec!["-ngl".into(), "0".into()];
    }
    let n = blocks.len() - 1;
    let counts: Vec<String> = blocks.iter().map(|b| b.to_string()).collect();
    vec![
        "--blocks".into(),
        counts.join(","),
        "--rpc".into(),
        servers[..n].join(","),
    ]
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Median ms of the samples of llama-bench's first test, divided by `per`.
fn llama_ms(tests: &[serde_json::Value], per: f64) -> Option<f64> {
    let samples = tests.first()?["samples_ns"].as_array()?;
    let ms: Vec<f64> = samples
        .iter()
        .filter_map(|v| v.as_f64())
        .map(|ns| ns / 1e6 / per)
        .collect();
    (!ms.is_empty()).then(|| median(ms))
}

/// `/proc/cpuinfo`'s first model name (Linux), else "unknown".
fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    (text.lines())
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown")
        .to_string()
}

/// `/proc/loadavg`'s 1, 5 and 15 minute averages (Linux): other work on
/// the machine shows here.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    println!("{}", runtime::ceiling::measure());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "cpu: {}; load average at the start: {}",
        cpu_model(),
        load_average()
    );
    println!(
        "host: {cores} cores shared by everything below: our runtime (1 thread per device), \
         each ggml-rpc-server (1 thread), the proxy and llama-bench (1 thread); a layer split \
         computes on one device at a time"
    );
    let Some(path) = ggplan_tests::models::smollm2_gguf() else {
        println!("SmolLM2: not installed (scripts/setup.sh installs it); skipped");
        return;
    };
    let servers: Vec<RpcServer> = match (0..2).map(|_| RpcServer::start(1)).collect() {
        Ok(s) => s,
        Err(e) => {
            println!("servers: {e}; skipped");
            return;
        }
    };
    let direct: Vec<String> = servers.iter().map(|s| s.endpoint().to_string()).collect();
    for (i, e) in direct.iter().enumerate() {
        let (us, gbps) = measure_link(e).unwrap();
        println!(
            "link rpc{i} ({e}, direct): round trip {us:.1} us (median of 200), upload {gbps:.2} GB/s (best of 5 x 32 MiB)"
        );
    }

    let file = GgufFile::open(&path).unwrap();
    let weights = Weights::open(&path).unwrap();
    let cache = CacheConfig {
        n_ctx: CTX,
        kv_dtype: ir::DType::F16,
    };
    let mut graphs = Vec::new();
    let mut blocks = Vec::new(); // [workload][config]
    for w in &WORKLOADS {
        let config = LlamaConfig::from_gguf(&file, w.t).unwrap();
        let graph = build_cached_attending(&config, &cache, w.attend).unwrap();
        let plans: Vec<Plan> = CONFIGS.iter().map(|c| plan(&graph, c)).collect();
        let counts: Vec<Vec<usize>> = plans.iter().map(blocks_per_device).collect();
        for (c, p) in CONFIGS.iter().zip(&plans) {
            let names: Vec<String> = (p.devices.iter().zip(blocks_per_device(p)))
                .map(|(d, n)| format!("{} {n}", d.name))
                .collect();
            println!(
                "{} on {c}: blocks per device: {}; {}",
                w.name,
                names.join(", "),
                others(p).join(", ")
            );
        }
        graphs.push((config, plans));
        blocks.push(counts);
    }

    // 1. ggplan, direct.
    let mut ours = [[Row::default(); 3]; 2];
    {
        let rpc = Arc::new(RemoteServers::connect(&direct, CALL_TIMEOUT).unwrap());
        for (wi, w) in WORKLOADS.iter().enumerate() {
            let (config, plans) = &graphs[wi];
            let mut rts: Vec<Runtime> = (plans.iter().zip(CONFIGS))
                .map(|(p, c)| {
                    let options = LoadOptions {
                        threads: 1,
                        rpc: (c != "cpu").then(|| Arc::clone(&rpc)),
                        ..LoadOptions::default()
                    };
                    let mut rt =
                        Runtime::load(Arc::new(p.clone()), weights.clone(), &options).unwrap();
                    set_inputs(&mut rt, w, config.n_vocab);
                    rt
                })
                .collect();
            for (ci, (ms, traffic)) in race(&mut rts, &rpc, w.per_block).into_iter().enumerate() {
                let t = w.t as f64;
                println!(
                    "ggplan {} on {}: {ms:.3} ms ({:.1} tokens/s); client counters per run: \
                     sent {} B, received {} B, {} round trips",
                    w.name,
                    CONFIGS[ci],
                    t / ms * 1e3,
                    traffic.sent,
                    traffic.received,
                    traffic.round_trips
                );
                ours[wi][ci].ms = Some(ms);
                // The wire's counts (pass 2) replace these when the proxy runs.
                ours[wi][ci].per_token = Some(traffic.per(w.t as f64));
            }
        }
    }

    // 2. ggplan through the counting proxy.
    let proxy = match Proxy::start(&direct) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("proxy: {e}; traffic on the wire not measured");
            None
        }
    };
    if let Some(proxy) = &proxy {
        for (i, e) in proxy.endpoints.iter().enumerate() {
            let (us, gbps) = measure_link(e).unwrap();
            println!(
                "link rpc{i} through the proxy ({e}): round trip {us:.1} us, upload {gbps:.2} GB/s"
            );
        }
        let rpc = Arc::new(RemoteServers::connect(&proxy.endpoints, CALL_TIMEOUT).unwrap());
        for (wi, w) in WORKLOADS.iter().enumerate() {
            let (config, plans) = &graphs[wi];
            for ci in 1..CONFIGS.len() {
                let options = LoadOptions {
                    threads: 1,
                    rpc: Some(Arc::clone(&rpc)),
                    ..LoadOptions::default()
                };
                let mut rt =
                    Runtime::load(Arc::new(plans[ci].clone()), weights.clone(), &options).unwrap();
                set_inputs(&mut rt, w, config.n_vocab);
                rt.run().unwrap();
                let (wire0, client0) = (proxy.total(ci), all_traffic(&rpc));
                let t = Instant::now();
                for _ in 0..w.counted {
                    rt.run().unwrap();
                }
                let ms = t.elapsed().as_secs_f64() * 1e3 / w.counted as f64;
                let wire = proxy.total(ci).minus(wire0);
                let client = all_traffic(&rpc).minus(client0);
                let [s, r, rt_] = wire.per(w.counted as f64);
                println!(
                    "ggplan {} on {} through the proxy ({} runs, {ms:.3} ms per run): per run \
                     sent {s:.0} B, received {r:.0} B, {rt_:.1} round trips on the wire{}",
                    w.name,
                    CONFIGS[ci],
                    w.counted,
                    if wire == client {
                        " (the client's counters agree)".to_string()
                    } else {
                        format!(" (the client's counters: {client:?})")
                    }
                );
                ours[wi][ci].per_token = Some(wire.per((w.counted as i64 * w.t) as f64));
            }
        }
    }

    // 3. llama.cpp's client on the same servers.
    let mut theirs = [[Row::default(); 3]; 2];
    let binary = ggplan_tests::workspace_root().join(".rpc/bin/llama-bench");
    if !binary.is_file() {
        println!(
            "llama.cpp: {} is missing (scripts/rpc-llama-bench.sh build makes it); skipped",
            binary.display()
        );
    } else {
        let log_dir = ggplan_tests::workspace_root().join("target/rpc-bench");
        std::fs::create_dir_all(&log_dir).unwrap();
        let common = strings(&["-fa", "off"]);
        for (ci, c) in CONFIGS.iter().enumerate() {
            // Timing, direct: the prefill split and the decode split are the same.
            let split = llama_split(c, &blocks[0][ci], &direct);
            if blocks[0][ci] != blocks[1][ci] {
                println!(
                    "note: the decode plan splits {:?}, the prefill plan {:?}",
                    blocks[1][ci], blocks[0][ci]
                );
            }
            let run = |extra: &[&str], tag: &str| {
                let args: Vec<String> = (split.iter().chain(&common).cloned())
                    .chain(strings(extra))
                    .collect();
                println!(
                    "llama.cpp {c}: scripts/rpc-llama-bench.sh run {}",
                    args.join(" ")
                );
                llama_bench(&args, &log_dir, tag)
            };
            let tag = c.replace('+', "_");
            match run(&["-p", "128", "-n", "0", "-r", "5"], &format!("{tag}-pp")) {
                Ok(tests) => theirs[0][ci].ms = llama_ms(&tests, 1.0),
                Err(e) => println!("llama.cpp {c} prefill: {e}"),
            }
            match run(
                &["-p", "0", "-n", "32", "-d", "100", "-r", "5"],
                &format!("{tag}-tg"),
            ) {
                Ok(tests) => theirs[1][ci].ms = llama_ms(&tests, 32.0),
                Err(e) => println!("llama.cpp {c} decode: {e}"),
            }
            for (wi, w) in WORKLOADS.iter().enumerate() {
                if let Some(ms) = theirs[wi][ci].ms {
                    let (unit, tokens) = if wi == 0 {
                        ("", w.t as f64)
                    } else {
                        (" per token", 1.0)
                    };
                    println!(
                        "llama.cpp {} on {c}: {ms:.3} ms{unit} ({:.1} tokens/s, median of 5 runs)",
                        w.name,
                        tokens / ms * 1e3
                    );
                }
            }
            if ci == 0 {
                theirs[0][0].per_token = Some([0.0; 3]);
                theirs[1][0].per_token = Some([0.0; 3]);
                continue;
            }
            // Traffic, through the proxy: two runs that differ only in the measured work.
            let Some(proxy) = &proxy else { continue };
            let split = llama_split(c, &blocks[0][ci], &proxy.endpoints);
            let n_servers = ci;
            let bytes_of = |extra: &[&str], tag: &str| -> Option<Traffic> {
                let args: Vec<String> = (split.iter().chain(&common).cloned())
                    .chain(strings(extra))
                    .chain(strings(&["--no-warmup"]))
                    .collect();
                println!(
                    "llama.cpp {c} through the proxy: scripts/rpc-llama-bench.sh run {}",
                    args.join(" ")
                );
                let before = proxy.total(n_servers);
                match llama_bench(&args, &log_dir, tag) {
                    Ok(_) => Some(proxy.total(n_servers).minus(before)),
                    Err(e) => {
                        println!("llama.cpp {c} through the proxy: {e}");
                        None
                    }
                }
            };
            let pp1 = bytes_of(
                &["-p", "128", "-n", "0", "-r", "1"],
                &format!("{tag}-pp-r1"),
            );
            let pp2 = bytes_of(
                &["-p", "128", "-n", "0", "-r", "2"],
                &format!("{tag}-pp-r2"),
            );
            let tg8 = bytes_of(
                &["-p", "0", "-n", "8", "-d", "100", "-r", "1"],
                &format!("{tag}-tg8"),
            );
            let tg24 = bytes_of(
                &["-p", "0", "-n", "24", "-d", "100", "-r", "1"],
                &format!("{tag}-tg24"),
            );
            if let (Some(a), Some(b)) = (pp1, pp2) {
                let one = b.minus(a);
                println!(
                    "llama.cpp prefill 128 on {c} through the proxy: per run sent {} B, received {} B, \
                     {} round trips (-r 2 minus -r 1; whole runs: {a:?}, {b:?})",
                    one.sent, one.received, one.round_trips
                );
                theirs[0][ci].per_token = Some(one.per(128.0));
            }
            if let (Some(a), Some(b)) = (tg8, tg24) {
                let d = b.minus(a);
                let [s, r, rt_] = d.per(16.0);
                println!(
                    "llama.cpp decode on {c} through the proxy: per token sent {s:.0} B, received \
                     {r:.0} B, {rt_:.2} round trips (-n 24 minus -n 8, 16 tokens)"
                );
                theirs[1][ci].per_token = Some(d.per(16.0));
            }
        }
    }
    drop(proxy);
    drop(servers);
    println!("load average at the end: {}", load_average());

    // The table (markdown, as docs/multi-device.md's measured sections).
    println!();
    println!(
        "| workload | configuration | ggplan | tokens/s | bytes sent / received per token | \
         round trips per token | llama.cpp | tokens/s | bytes sent / received per token | \
         round trips per token |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (wi, w) in WORKLOADS.iter().enumerate() {
        for (ci, c) in CONFIGS.iter().enumerate() {
            let cells = |r: &Row| -> [String; 4] {
                let unit = if wi == 0 { "ms" } else { "ms/token" };
                let time = r.ms.map_or("—".into(), |ms| format!("{ms:.2} {unit}"));
                let rate = r.ms.map_or("—".into(), |ms| {
                    let tokens = if wi == 0 { w.t as f64 } else { 1.0 };
                    format!("{:.0}", tokens / ms * 1e3)
                });
                let (bytes, trips) = match r.per_token {
                    Some(_) if ci == 0 => ("—".into(), "—".into()),
                    Some([s, rcv, t]) if wi == 0 => (
                        format!("{s:.0} / {rcv:.0}"),
                        format!("{t:.3} ({:.0} per run)", t * w.t as f64),
                    ),
                    Some([s, rcv, t]) => (format!("{s:.0} / {rcv:.0}"), format!("{t:.2}")),
                    None => ("not measured".into(), "not measured".into()),
                };
                [time, rate, bytes, trips]
            };
            let [a, b, c2, d] = cells(&ours[wi][ci]);
            let [e, f, g, h] = cells(&theirs[wi][ci]);
            let blocks = blocks[wi][ci]
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join("+");
            println!(
                "| {} | `{c}` ({blocks} blocks) | {a} | {b} | {c2} | {d} | {e} | {f} | {g} | {h} |",
                w.name
            );
        }
    }
}

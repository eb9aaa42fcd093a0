//! `ggplan` with remote devices (llama.cpp's `ggml-rpc-server`, built by
//! `scripts/rpc-servers.sh build`; these tests fail, never skip, without it):
//! a plan for `cpu+rpc0+rpc1` runs and checks every step with `--rpc`, is
//! refused by name without it, an unreachable server is named, `devices
//! --rpc` reports what a server offers, and `compile --target host --rpc`
//! puts the servers in the target.

mod common;

use common::{example, ggplan, scratch_dir, text};
use ggplan_tests::rpc_server::RpcServer;

fn servers(n: usize) -> (Vec<RpcServer>, String) {
    let servers: Vec<RpcServer> = (0..n)
        .map(|_| RpcServer::start(1).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let list: Vec<&str> = servers.iter().map(|s| s.endpoint()).collect();
    let list = list.join(",");
    (servers, list)
}

#[test]
fn a_plan_over_two_servers_runs_checked_and_is_refused_without_them() {
    let dir = scratch_dir("rpc_run");
    let plan = dir.join("plan.ron");
    let plan = plan.to_str().unwrap();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu+rpc0+rpc1",
        "--split-mode",
        "layer",
        "--tensor-split",
        "1,1,1",
        "-o",
        plan,
    ]);
    assert!(out.status.success(), "{}", text(&out));

    let out = ggplan(&["run", plan, "--random-weights", "7"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("rpc0") && text(&out).contains("--rpc"),
        "{}",
        text(&out)
    );

    let out = ggplan(&[
        "run",
        plan,
        "--random-weights",
        "7",
        "--rpc",
        "127.0.0.1:1,127.0.0.1:2",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("127.0.0.1:1"), "{}", text(&out));

    let (_servers, list) = servers(2);
    let out = ggplan(&[
        "run",
        plan,
        "--random-weights",
        "7",
        "--check=all",
        "--rpc",
        &list,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("uploaded to device memory"),
        "{}",
        text(&out)
    );
}

#[test]
fn devices_and_host_targets_ask_the_servers() {
    let (_servers, list) = servers(2);
    let out = ggplan(&["devices", "--rpc", &list]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("protocol 7.0.0"), "{}", text(&out));

    let dir = scratch_dir("rpc_host");
    let plan = dir.join("host.ron");
    let plan = plan.to_str().unwrap();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "host",
        "--rpc",
        &list,
        "--split-mode",
        "layer",
        "--tensor-split",
        "1,1,1",
        "-o",
        plan,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let written = std::fs::read_to_string(plan).unwrap();
    assert!(written.contains("Remote(server: 1)"), "no rpc1 in the plan");
    let out = ggplan(&[
        "run",
        plan,
        "--random-weights",
        "7",
        "--check",
        "--rpc",
        &list,
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // Without proportions the cost model chooses each device's layers from
    // the servers' measured link and matmul rates, and says so.
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "host",
        "--rpc",
        &list,
        "--split-mode",
        "layer",
        "-o",
        plan,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let notes = text(&out);
    assert!(
        notes.contains("rpc1 at ") && notes.contains(" GFLOP/s f32, "),
        "{notes}"
    );
    let out = ggplan(&["explain", plan, "l1.wq"]);
    let why = text(&out);
    assert!(
        why.contains("the cost model's layer split (")
            && why.contains(" for llama.cpp's split by device memory"),
        "{why}"
    );

    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--rpc",
        &list,
        "-o",
        plan,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("--target host"), "{}", text(&out));
}

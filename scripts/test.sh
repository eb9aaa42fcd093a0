#!/usr/bin/env bash
# Every check CI runs: set up, formatting, clippy with -D warnings, docs with
# no warnings, the facade without LLVM, all tests
# (the loom models of the concurrency crate included), a short smoke of every
# fuzz target and the runtime's unit tests under AddressSanitizer.
# Ends with one line totalling every test binary: "tests: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-shot build gains nothing from incremental state (3.5 GB of it).
export CARGO_INCREMENTAL=0
scripts/setup.sh
# NVRTC and ptxas (PyPI wheels) for tests/cuda_kernels.rs, required here.
. scripts/cuda-env.sh
# ...and the emulated AVX2-only host of cli/tests/avx2_host.rs...
export GGPLAN_REQUIRE_QEMU=1
# ...and the real models setup.sh installed: a test that would skip for a
# missing model fails instead (tests/support/models.rs).
export GGPLAN_REQUIRE_MODELS=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The facade's documentation builds without a warning (broken links included),
# and without its `jit` feature it builds with no runtime and so no LLVM...
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo build -p ggplan --no-default-features --locked
# ...and the runtime without its `cuda` feature (no cudarc) still builds, and
# without LLVM (the runtime of a GPU host's ggplan: scripts/gpu-check.sh).
cargo check -p ggplan --no-default-features --features jit --locked
cargo check -p ggplan-runtime --no-default-features --features cuda --locked
# The concurrency crate's loom models (concurrency/tests/loom.rs) build in their
# own target folder: `--cfg loom` rebuilds the crate and its dependencies.
loom=(env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom)
"${loom[@]}" cargo clippy -p ggplan-concurrency --release --all-targets --locked -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# llama.cpp's ggml-rpc-server, for the remote-device tests (tests/rpc.rs,
# runtime/tests/rpc_client.rs): built once into .rpc/ (about a minute).
scripts/rpc-servers.sh build
# llama.cpp's decode captured for comparison (tests/llama_capture.rs): the
# same vendored llama.cpp's library and tools/llama-capture (about 2 minutes).
scripts/llama-capture.sh build
# --no-fail-fast: every test binary runs, so the total counts them all.
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# The thread pool and the host events under loom, counted in the total.
"${loom[@]}" cargo test -p ggplan-concurrency --release --locked --test loom 2>&1 | tee -a "$log" ||
  status=$?
# Every fuzz target for 10 seconds from its seeds (nightly + cargo-fuzz are
# installed when missing), so a regression in a reader shows up here; long
# runs are scripts/fuzz.sh TARGET SECONDS.
GGPLAN_FUZZ_SMOKE=1 scripts/fuzz.sh all 10 2>&1 | tee -a "$log" || status=$?
# The runtime's unit tests (every CPU kernel, the executor, staging, weights)
# under AddressSanitizer, counted in the total; the integration tests under it
# are scripts/sanitizers.sh asan (about 12 minutes more than CI's budget holds).
scripts/sanitizers.sh asan-unit 2>&1 | tee -a "$log" || status=$?
# A test binary killed by a signal (loom aborts on a panic inside a model)
# prints no result line: it counts as one failure.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /process didn.t exit successfully: .*[(]signal: / { f += 1 }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"

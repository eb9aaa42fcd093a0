#!/usr/bin/env bash
# The unsafe code under the tools that see undefined behaviour:
#
#   scripts/sanitizers.sh [asan|asan-unit|miri|all]      default: all
#
# asan: the runtime's unit tests and the runtime, multi-device and fuzz-corpus
#       integration tests built with AddressSanitizer (nightly
#       -Zsanitizer=address), in target/asan. Every load, step, copy and
#       output read goes through instrumented code, so a plan that makes the
#       runtime read or write outside its arenas stops with a report.
# asan-unit: the runtime's unit tests alone, as CI runs them (scripts/test.sh;
#       about 9 minutes on 2 cores, most of it the instrumented build).
# miri: the code Miri can interpret, in target/miri:
#       - ggplan-concurrency: the pool, its barrier, the host events and the
#         executor's copy claims (unit tests);
#       - ggplan-runtime (without LLVM or cudarc): aligned buffers (memory::),
#         the CPU device's tensor set/get with offsets and its async events;
#         a selection that runs no test fails;
#       Miri cannot run, and this script leaves out: the LLVM JIT (machine code
#       it generates at run time), the matmul kernels (AVX2/AVX-512 intrinsics
#       through gemm and our own), the file readers over memory maps (mmap is
#       outside Miri's model), and the CPU ops' tests (their sizes take over
#       15 minutes interpreted: one test alone passes in minutes). ASan and the
#       fuzz targets cover those.
#
# Installs the pinned nightly with the miri and rust-src components when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
nightly=nightly-2026-10-29
what=${1:-all}
host=$(rustc -vV | awk '/^host:/ { print $2 }')

need_nightly() {
  if ! rustup run "$nightly" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$nightly" --profile minimal >&2
  fi
  rustup component add --toolchain "$nightly" "$@" >/dev/null 2>&1
}

run_asan_unit() {
  need_nightly rust-src
  echo "sanitizers.sh: AddressSanitizer (runtime unit tests)" >&2
  # --target keeps build scripts and proc macros uninstrumented; leak checking
  # is off because the JIT's LLVM context and the kernel cache live until exit
  # by design.
  RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address" \
    ASAN_OPTIONS="detect_leaks=0" CARGO_TARGET_DIR=target/asan \
    cargo "+$nightly" test --locked --target "$host" \
    -p ggplan-runtime --lib
}
run_asan() {
  run_asan_unit
  echo "sanitizers.sh: AddressSanitizer (runtime, multi-device, fuzz-corpus tests)" >&2
  RUSTFLAGS="-Zsanitizer=address" ASAN_OPTIONS="detect_leaks=0" CARGO_TARGET_DIR=target/asan \
    cargo "+$nightly" test --locked --target "$host" \
    -p ggplan-tests --test runtime --test multi_device --test fuzz_corpus
}

run_miri() {
  need_nightly miri rust-src
  echo "sanitizers.sh: Miri (concurrency; runtime buffers, claims, CPU device)" >&2
  export CARGO_TARGET_DIR=target/miri
  cargo "+$nightly" miri test --locked -p ggplan-concurrency --lib
  # Each selection on its own, and one that runs no test fails: a renamed or
  # moved module must not quietly drop out of Miri's view. The CPU device's
  # own tests are device::cpu::tests; the rest of device::cpu is the kernel
  # library (JIT, SIMD matmul) and the NUMA binding (the mbind syscall),
  # which Miri cannot run.
  for selection in memory:: device::cpu::tests; do
    miri_runtime_tests "$selection"
  done
}

# The runtime's unit tests whose names contain $1, under Miri; none is a failure.
miri_runtime_tests() {
  local log
  log=$(mktemp)
  # Reading /proc (memory, CPU list) needs the host: isolation off. Without
  # default features (no LLVM, no cudarc): a CPU device builds its kernel
  # families, and the JIT's host detection calls into LLVM, which Miri cannot.
  MIRIFLAGS="-Zmiri-disable-isolation" cargo "+$nightly" miri test --locked -p ggplan-runtime --lib \
    --no-default-features -- "$1" 2>&1 | tee "$log"
  if ! grep -Eq '^test result: ok\. [1-9][0-9]* passed' "$log"; then
    echo "sanitizers.sh: the Miri selection '$1' ran no test" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

case "$what" in
  asan) run_asan ;;
  asan-unit) run_asan_unit ;;
  miri) run_miri ;;
  all) run_asan && run_miri ;;
  *) echo "sanitizers.sh: asan, miri or all (got '$what')" >&2; exit 2 ;;
esac
echo "sanitizers.sh: $what passed" >&2

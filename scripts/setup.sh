#!/usr/bin/env bash
# Installs what ggplan needs on a fresh Debian 12 machine that has the Rust
# toolchain: rustfmt and clippy, and LLVM 19 (llvm-19-dev) for the CPU JIT.
# As root it installs with apt; otherwise it prints the exact command to run.
set -euo pipefail

have_llvm19() {
  command -v llvm-config-19 >/dev/null 2>&1 || [ -x /usr/lib/llvm-19/bin/llvm-config ]
}

if ! have_llvm19; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing llvm-19-dev with apt" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq llvm-19-dev >/dev/null
  else
    echo "setup: LLVM 19 is missing. Run:  sudo apt-get update && sudo apt-get install -y llvm-19-dev" >&2
    exit 1
  fi
fi

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "setup: adding the $component component" >&2
    rustup component add "$component"
  fi
done

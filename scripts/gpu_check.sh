#!/usr/bin/env bash
# What one call to the GPU machine runs: build, every test (GPU tests run there), optional
# compute-sanitizer and benchmarks. Logs go to $OUT (or /tmp/out); a short table prints last.
# Usage: bash scripts/gpu_check.sh [tests] [sanitize] [bench]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
summary=()
for what in "$@"; do
  case $what in
    tests)
      bash tests/run_all.sh $(find build/tests -maxdepth 1 -name 'test_*' -type f -executable | sort) >"$OUT/tests.log" 2>&1
      summary+=("tests: $(tail -1 "$OUT/tests.log")")
      grep -E "worst|FAILED|Failure|exited" "$OUT/tests.log" | head -60 ;;
    sanitize)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_golden --gtest_filter='*Gpu*' \
          >"$OUT/san_${tool}_golden.log" 2>&1
        summary+=("$tool test_golden (GPU engine): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_golden.log" | tail -1)")
      done ;;
    bench)
      python3 bench/bench_e2e.py 2>&1 | tee "$OUT/bench_e2e.log" | tail -8
      summary+=("bench: see bench_e2e.log") ;;
  esac
done
printf '%s\n' "${summary[@]}"

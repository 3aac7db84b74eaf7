#!/usr/bin/env bash
# FP8 on the GPU machine (issue 13): build, the FP8 tests, the golden tests, then the bf16 / fp8
# benchmark table printed last. Logs under $OUT. Run from the repository root, carry .carry/sys.
#   bash scripts/fp8_check.sh [quick]     quick: the 7B shape only
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 generate build/tests/test_fp8 build/tests/test_golden build/bench/bench_fp8 build/bench/bench_fp8_lines >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
build/tests/test_fp8 >"$OUT/test_fp8.log" 2>&1; echo "test_fp8 exit $?"
grep -E "FAILED|Failure|rel-L2" "$OUT/test_fp8.log" | grep -E "FAILED|Failure|fp8 (prefill|decode)|N=4096|N=1000 " | head -40
tail -3 "$OUT/test_fp8.log"
build/tests/test_golden --gtest_filter='*Gpu*' >"$OUT/test_golden.log" 2>&1; echo "test_golden exit $?"
grep -E "worst|FAILED|Failure" "$OUT/test_golden.log" | head -40
build/bench/bench_fp8 >"$OUT/bench_fp8_gemv.log" 2>&1; cat "$OUT/bench_fp8_gemv.log"
build/bench/bench_fp8_lines >"$OUT/bench_fp8_lines.log" 2>&1; cat "$OUT/bench_fp8_lines.log"
shapes="olmo2_1b olmo2_7b olmo2_32b mha_80l_8192"; [ "${1:-}" = quick ] && shapes="olmo2_7b"
python3 bench/bench_fp8.py --shapes $shapes 2>&1 | tee "$OUT/bench_fp8.log" | tail -12

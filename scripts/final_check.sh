#!/usr/bin/env bash
# The GPU-machine runs behind the closing notes, in two parts that each fit one device call:
#   bash scripts/final_check.sh tests   build, every test, compute-sanitizer memcheck + racecheck
#                                       on the GPU engine tests and the bf16 decode attention tests
#                                       (run side by side, each capped at 400 s: racecheck is slow)
#   bash scripts/final_check.sh bench   HF's own bf16 error on the fixtures, the bf16 golden test,
#                                       every benchmark (make bench; BATCHES=0 skips the batched
#                                       table), with the tables printed last
# Logs under $OUT (tarred into logs_<part>.tgz). Run from the repository root with carry .carry/sys.
set -uo pipefail
part=${1:?usage: final_check.sh tests|bench}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
bash scripts/device_prep.sh
make -j16 all build/bench/bench_attention >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
if [ "$part" = tests ]; then
  python3 tests/hf_bf16_error.py >"$OUT/hf_bf16.log" 2>&1; cat "$OUT/hf_bf16.log"
  bash tests/run_all.sh $(find build/tests -maxdepth 1 -name 'test_*' -type f -executable | sort) >"$OUT/tests.log" 2>&1
  # The six runs side by side (16 CPU cores), each capped. racecheck instruments our kernels only
  # (names end in _kernel): with cuBLAS's GEMMs instrumented too, test_batching ran past 8 minutes.
  for tool in memcheck racecheck; do
    filter=(); [ $tool = racecheck ] && filter=(--kernel-name kns=_kernel)
    san() { timeout 400 compute-sanitizer --tool $tool "${filter[@]}" "$@"; }
    san build/tests/test_golden --gtest_filter='*Gpu*:-*Bf16*' >"$OUT/san_${tool}_golden.log" 2>&1 &
    san build/tests/test_batching --gtest_filter='*Gpu*' >"$OUT/san_${tool}_batching.log" 2>&1 &
    san build/tests/test_attention --gtest_filter='Attention/2.DecodeMatchesCpu:AttentionGraph.*' \
      >"$OUT/san_${tool}_attention.log" 2>&1 &
  done
  wait
  grep -E "FAILED|Failure|exited" "$OUT/tests.log" | head -20
  grep -E "gpu bf16 worst|gpu fp32 worst|bf16 decode_logits" "$OUT/tests.log"
  tail -1 "$OUT/tests.log"
  for f in "$OUT"/san_*.log; do echo "$(basename $f): $(grep -E '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' $f | tr '\n' ' ')"; done
else
  python3 tests/hf_bf16_error.py >"$OUT/hf_bf16.log" 2>&1; cat "$OUT/hf_bf16.log"
  build/tests/test_golden --gtest_filter='*Bf16*' >"$OUT/golden_bf16.log" 2>&1; grep -E "bf16 decode_logits|PASSED|FAILED" "$OUT/golden_bf16.log"
  python3 bench/bench_e2e.py >"$OUT/bench_e2e.log" 2>&1
  [ "${BATCHES:-1}" = 1 ] && python3 bench/bench_e2e.py --batches 1 8 32 64 >"$OUT/bench_batch.log" 2>&1
  build/bench/bench_attention "$OUT/ours.txt" >"$OUT/bench_attn_ours.log" 2>&1 && \
    python3 -W ignore bench/bench_attention_torch.py --ours "$OUT/ours.txt" >"$OUT/bench_attn.log" 2>&1
  grep -E "read roofline|graph|decode ctx|decode batch|prefill S" "$OUT/bench_attn_ours.log"
  tail -5 "$OUT/bench_e2e.log"; [ -f "$OUT/bench_batch.log" ] && tail -7 "$OUT/bench_batch.log"; tail -8 "$OUT/bench_attn.log"
fi
tar -czf "$OUT/logs_$part.tgz" -C "$OUT" $(cd "$OUT" && ls *.log ours.txt 2>/dev/null) && rm -f "$OUT"/*.log "$OUT/ours.txt"

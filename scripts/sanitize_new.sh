#!/usr/bin/env bash
# compute-sanitizer over what issue 12 added on the GPU: every head size of the attention
# kernels (memcheck and racecheck), the GPU loader, the warm-up and the memory check. One device
# call, side by side; logs under $OUT, one summary line per run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
set -f
runs=("memcheck attn_fp32 test_attention Attention/0.*" "memcheck attn_fp16 test_attention Attention/1.*"
      "memcheck attn_bf16 test_attention Attention/2.*:AttentionArgs.*"
      "racecheck attn_heads_fp16 test_attention Attention/1.*EveryHeadSize*"
      "racecheck attn_heads_bf16 test_attention Attention/2.*EveryHeadSize*"
      "memcheck gpu_loader test_gpu_loader *" "racecheck gpu_loader test_gpu_loader *"
      "memcheck warm_up test_batching *WarmUp*" "memcheck limits test_limits *")
for r in "${runs[@]}"; do
  set -- $r
  timeout 480 compute-sanitizer --tool $1 build/tests/$3 --gtest_filter="$4" >"$OUT/san_$1_$2.log" 2>&1 &
done
set +f
wait
for f in "$OUT"/san_*.log; do
  echo "$(basename $f .log): $(grep -E '^\[  (PASSED|FAILED)|^\[  SKIPPED \] [0-9]|ERROR SUMMARY|RACECHECK SUMMARY' $f | tr '\n' ' ')"
done
tar -czf "$OUT/logs_sanitize_new.tgz" -C "$OUT" $(cd "$OUT" && ls *.log) && rm -f "$OUT"/*.log

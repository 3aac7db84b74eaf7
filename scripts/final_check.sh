#!/usr/bin/env bash
# The GPU-machine runs behind the closing notes, in four parts that each fit one device call:
#   bash scripts/final_check.sh tests      build, every test (run_all.sh)
#   bash scripts/final_check.sh sanitize   build, every GPU test under compute-sanitizer memcheck
#                                          and racecheck
#   bash scripts/final_check.sh sanitize-sampler   build, racecheck of the sampling kernel: each
#                                          SampleOnce test (one draw) in its own process
#   bash scripts/final_check.sh bench   HF's own bf16 error on the fixtures, the bf16 golden test,
#                                       every benchmark (make bench; BATCHES=0 skips the batched
#                                       table), with the tables printed last
# Logs under $OUT (tarred into logs_<part>.tgz). Run from the repository root with carry .carry/sys.
set -uo pipefail
part=${1:?usage: final_check.sh tests|sanitize|sanitize-sampler|bench}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
summarize() {  # one line per sanitizer log: the test results and the tool's summary
  for f in "$OUT"/san_*.log; do
    echo "$(basename $f .log): $(grep -E '^\[  (PASSED|FAILED)|^\[  SKIPPED \] [0-9]|ERROR SUMMARY|RACECHECK SUMMARY|draws:' $f | tr '\n' ' ')"
  done
}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
bash scripts/device_prep.sh
make -j16 all build/bench/bench_attention >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
if [ "$part" = tests ]; then
  bash tests/run_all.sh $(find build/tests -maxdepth 1 -name 'test_*' -type f -executable | sort) >"$OUT/tests.log" 2>&1
  grep -E "FAILED|Failure|exited" "$OUT/tests.log" | head -20
  grep -E "gpu bf16 worst|gpu fp32 worst|bf16 decode_logits" "$OUT/tests.log"
  tail -1 "$OUT/tests.log"
elif [ "$part" = sanitize ]; then
  # The GPU tests under memcheck and racecheck, side by side (16 CPU cores), each capped at
  # 450 s. Left out: test_kernels' Timing.* (speeds only), SamplingStats.* (thousands of
  # draws: memcheck ran past 450 s) and, from racecheck, the sampling tests with hundreds of
  # draws (one alone ran past 480 s): the sampling kernel is racechecked in the
  # sanitize-sampler part. racecheck instruments only our kernels (names ending in _kernel,
  # `kns`) for the fp32 engine tests: with cuBLAS's GEMMs instrumented too, test_batching ran
  # past 8 minutes. The bf16 engine runs unfiltered: with any kernel-name filter
  # compute-sanitizer stops there with "Internal Sanitizer Error: failed to handle a hardware
  # exception", while unfiltered racecheck, memcheck and the plain run are clean.
  set -f  # the filters are not file globs
  runs=("memcheck attention_fp32 test_attention Attention/0.*" "memcheck attention_fp16 test_attention Attention/1.*"
        "memcheck attention_bf16 test_attention Attention/2.*:AttentionGraph.*:AttentionArgs.*"
        "memcheck golden test_golden *Gpu*" "memcheck batching test_batching *Gpu*"
        "memcheck default_model test_default_model *Gpu*" "memcheck kernels test_kernels -Timing.*:SamplingStats.*"
        "racecheck attention_fp32 test_attention Attention/0.*" "racecheck attention_fp16 test_attention Attention/1.*"
        "racecheck attention_bf16 test_attention Attention/2.*:AttentionGraph.*:AttentionArgs.*"
        "racecheck golden_bf16 test_golden *Bf16*" "racecheck kernels test_kernels Kernels/*:-*Sample*"
        "racecheck-ours golden_fp32 test_golden *GpuFp32*" "racecheck-ours batching test_batching *Gpu*"
        "racecheck-ours default_model test_default_model *Gpu*")
  for r in "${runs[@]}"; do
    set -- $r
    tool=(--tool ${1%-ours}); [ $1 = racecheck-ours ] && tool+=(--kernel-name kns=_kernel)
    timeout 450 compute-sanitizer "${tool[@]}" build/tests/$3 --gtest_filter="$4" >"$OUT/san_$1_$2.log" 2>&1 &
  done
  set +f
  wait
  summarize
elif [ "$part" = sanitize-sampler ]; then
  # racecheck takes one to several minutes per launch of sample_kernel (a cluster of 8 blocks
  # of 1024 threads), so each (dtype, path) test runs in its own process, all side by side.
  for t in $(build/tests/test_kernels --gtest_list_tests --gtest_filter='Paths/SampleOnce.*' | awk '/^ /{print $1}'); do
    timeout 500 compute-sanitizer --tool racecheck build/tests/test_kernels --gtest_filter="Paths/SampleOnce.$t" \
      >"$OUT/san_racecheck_$(basename $t).log" 2>&1 &
  done
  wait
  summarize
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

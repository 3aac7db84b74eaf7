#!/usr/bin/env bash
# compute-sanitizer over the GPU code added since the last full pass (scripts/final_check.sh
# sanitize): the portable paths (OLMO_PORTABLE=1: the one-block sampler and the attention tiles
# of GPUs without Hopper's shared memory, issue 17) and the FP8 kernels, FP8 checkpoint loader
# and log-probability kernel (issue 13). Two parts, one device call each; side by side, each
# run capped at 420 s; logs under $OUT, one summary line per run.
#   bash scripts/sanitize_new.sh sampler   racecheck of the one-block sampler, each SampleOnce
#                                          test in its own process (as final_check.sh's
#                                          sanitize-sampler does for the cluster sampler)
#   bash scripts/sanitize_new.sh kernels   memcheck and racecheck of the rest. The summary
#                                          names the kernels of any reported race: racecheck
#                                          reports hazards inside cuBLASLt's FP8 GEMMs
#                                          (nvjet_sm90_*, NVIDIA's code, which synchronizes
#                                          through mbarriers); restricting it to our kernels
#                                          (--kernel-name) ends in "Internal Sanitizer Error"
# SAMPLER_CASES=*min_p:*exact_ties picks sampler cases (a gtest filter after "SampleOnce."), CAP=560
# raises the cap. Builds for Hopper alone (the portable paths are forced on it). Carry .carry/sys.
set -uo pipefail
part=${1:?usage: sanitize_new.sh sampler|kernels}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 CUDA_ARCHS=90a CUDA_PTX= all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export OLMO_PORTABLE=1
if [ "$part" = sampler ]; then
  for t in $(build/tests/test_kernels --gtest_list_tests --gtest_filter="Paths/SampleOnce.${SAMPLER_CASES:-*}" |
             awk '/^ /{print $1}'); do
    timeout ${CAP:-420} compute-sanitizer --tool racecheck build/tests/test_kernels --gtest_filter="Paths/SampleOnce.$t" \
      >"$OUT/san_racecheck_portable_$(basename $t).log" 2>&1 &
  done
else
  set -f  # the filters are not file globs
  runs=("memcheck attn_portable test_attention AttentionPortable.*:Attention/1.*:Attention/2.*"
        "racecheck attn_portable test_attention AttentionPortable.*:Attention/2.*"
        "memcheck golden_portable test_golden *GpuBf16*:*GpuFp8*"
        "memcheck kernels_portable test_kernels Kernels/*:Paths/SampleOnce.*:DeviceCaps.*"
        "memcheck fp8 test_fp8 *" "racecheck fp8 test_fp8 Fp8.*:-*Engine*"
        "memcheck fp8_checkpoint test_fp8_checkpoint_gpu *" "racecheck fp8_checkpoint test_fp8_checkpoint_gpu *"
        "memcheck logprob test_logprob *" "racecheck logprob test_logprob LogprobKernel.*")
  for r in "${runs[@]}"; do
    set -- $r
    timeout 420 compute-sanitizer --tool $1 build/tests/$3 --gtest_filter="$4" >"$OUT/san_$1_$2.log" 2>&1 &
  done
  set +f
fi
wait
for f in "$OUT"/san_*.log; do
  races=$(grep -oE "Race reported between [A-Za-z]+ access at [A-Za-z0-9_]+" $f | awk '{print $NF}' | sort -u | tr '\n' ' ')
  echo "$(basename $f .log): $(grep -E '^\[  (PASSED|FAILED)|^\[  SKIPPED \] [0-9]|ERROR SUMMARY|RACECHECK SUMMARY' $f | tr '\n' ' ')${races:+ races in: $races}"
done
tar -czf "$OUT/logs_sanitize_$part.tgz" -C "$OUT" $(cd "$OUT" && ls *.log) && rm -f "$OUT"/*.log

#!/usr/bin/env bash
# The GPU-machine run behind a closing note, in one device call: build (the fat binary), every
# test, every GPU test again in portable mode (OLMO_PORTABLE=1: the paths of GPUs without
# clusters or Hopper's shared memory), and the torch extension's quick check. Logs under $OUT,
# a summary last. Run from the repository root with carry .carry/sys.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
bash scripts/device_prep.sh
make -j16 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
# The FP8 checkpoint fixture comes from transformers (torch): made here, handed back in $OUT.
if [ ! -d tests/fixtures/olmo2_fp8 ]; then
  python3 tests/make_fp8_checkpoint.py >"$OUT/fp8_fixture.log" 2>&1 && tar czf "$OUT/olmo2_fp8.tgz" tests/fixtures/olmo2_fp8
  tail -3 "$OUT/fp8_fixture.log"
fi
bash tests/run_all.sh $(find build/tests -maxdepth 1 -name 'test_*' -type f -executable | sort) >"$OUT/tests.log" 2>&1
gpu_tests=$(for f in tests/test_*.cu; do echo build/tests/$(basename $f .cu); done)
OLMO_PORTABLE=1 bash tests/run_all.sh $gpu_tests build/tests/test_golden build/tests/test_batching >"$OUT/portable.log" 2>&1
[ "${1:-}" = no-torch ] || bash scripts/torch_ext_check.sh --quick >"$OUT/torch.log" 2>&1
echo "== failures"; grep -hE "FAILED|exited|crash" "$OUT/tests.log" "$OUT/portable.log" | head -20
echo "== fp8 goldens"; grep -hE "gpu fp8 worst|gpu fp8 decode" build/test-logs/test_golden.log | head -12
echo "== fp8 checkpoints"; grep -hE "rel-L2|max-abs|bit-identical" build/test-logs/test_fp8_checkpoint*.log | head -12
[ -f "$OUT/torch.log" ] && { echo "== torch"; grep -E "SUMMARY|passed|failed" "$OUT/torch.log" | tail -5; }
echo "== suite: $(tail -1 "$OUT/tests.log")"
echo "== portable: $(tail -1 "$OUT/portable.log")"

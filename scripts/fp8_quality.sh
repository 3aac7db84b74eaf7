#!/usr/bin/env bash
# What FP8 costs the default model (issue 13), on the GPU machine: the perplexity references from
# transformers (tests/make_perplexity_refs.py, written to $OUT/refs.json), the perplexity tests,
# ./perplexity over the corpus validation split (.carry/val.txt: the last 1% of
# ../shared/corpus/corpus.txt) in fp32, bf16 and fp8, and greedy continuations of three prompts
# in bf16 and fp8. Run from the repository root with carry .carry/sys and .carry/val.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
bash scripts/device_prep.sh
make -j16 generate perplexity build/tests/test_perplexity build/tests/test_logprob >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
python3 tests/make_perplexity_refs.py >"$OUT/refs.log" 2>&1; tail -3 "$OUT/refs.log"
cp tests/fixtures/perplexity/refs.json "$OUT/" 2>/dev/null
for t in test_perplexity test_logprob; do
  build/tests/$t >"$OUT/$t.log" 2>&1; echo "$t: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "rel|bar|nll|NLL" "$OUT/$t.log" | head -12
done
for dt in fp32 bf16 fp8; do
  echo "val split $dt: $(./perplexity --file .carry/val.txt --device cuda --dtype $dt --json -q 2>&1 | tail -1)"
done
echo "pinocchio cpu: $(./perplexity --file tests/fixtures/perplexity/pinocchio.txt --device cpu --json -q 2>&1 | tail -1)"
for p in "Once upon a time" "The little rabbit" "The old king said"; do
  a=$(./generate -p "$p" -n 32 --temperature 0 --dtype bf16 --device cuda 2>/dev/null)
  b=$(./generate -p "$p" -n 32 --temperature 0 --dtype fp8 --device cuda 2>/dev/null)
  [ "$a" = "$b" ] && same=identical || same=DIFFERENT
  echo "prompt \"$p\": 32 greedy tokens $same"; echo "  bf16: $a" | head -c 300; echo; echo "  fp8:  $b" | head -c 300; echo
done

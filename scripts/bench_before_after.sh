#!/usr/bin/env bash
# Speed before and after a change, in one run on the GPU machine: an older tree (Makefile, src/,
# kernels/, bench/ of a revision, made here by
#   git archive --format=tar REV Makefile src kernels bench | xz > .carry/before.tar.xz
# and carried) is built next to this one, and both run the attention benchmark and the
# end-to-end figures (random weights: decode tokens/s after a 128-token prompt, time to first
# token of a 4096-token prompt), interleaved, twice. Run from the repository root with carry
# .carry/sys and .carry/before.tar.xz.
#   SHAPES="olmo2_7b olmo2_1b olmo2_32b" DTYPES="fp8 bf16" bash scripts/bench_before_after.sh
# (defaults: the 7B shape in bf16); ATTENTION=0 skips the attention benchmark.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SHAPES=${SHAPES:-olmo2_7b} DTYPES=${DTYPES:-bf16} ATTENTION=${ATTENTION:-1}
bash scripts/device_prep.sh
before=/tmp/before; rm -rf $before; mkdir -p $before; tar -xJf .carry/before.tar.xz -C $before
build() { (cd "$1" && make -j16 CUDA_ARCHS=90a CUDA_PTX= generate build/bench/bench_attention) >"$OUT/build_$2.log" 2>&1 ||
          { tail -30 "$OUT/build_$2.log"; exit 1; }; }
build $before before & build . after & wait
e2e() {  # tree label shape dtype: one line of decode tok/s and TTFT at 4096
  local cfg=$PWD/bench/$3.json
  local d=$(cd "$1" && ./generate --device cuda --random-weights $cfg --prompt-len 128 -n 256 --stats --temperature 0 \
            --dtype $4 --max-seq-len 385 2>&1 | grep -oE "decode +[0-9.]+ tokens/s")
  local t=$(cd "$1" && ./generate --device cuda --random-weights $cfg --prompt-len 4096 -n 1 --stats --temperature 0 \
            --dtype $4 --max-seq-len 4200 2>&1 | grep -oE "time to 1st tok +[0-9.]+ ms")
  echo "$2 $3 $4: $d, $t"
}
for i in 1 2; do
  for t in "$before before" ". after"; do
    set -- $t
    [ "$ATTENTION" = 1 ] && (cd $1 && build/bench/bench_attention "$OUT/attn_$2_$i.txt") >"$OUT/attn_$2_$i.log" 2>&1
    for s in $SHAPES; do for dt in $DTYPES; do e2e $1 $2 $s $dt >>"$OUT/e2e.log"; done; done
  done
done
if [ "$ATTENTION" = 1 ]; then
  for i in 1 2; do for l in before after; do echo "== attention $l $i"; grep -E "^prefill|^decode ctx|^decode batch" "$OUT/attn_${l}_$i.log"; done; done
fi
sort -s -k2,3 "$OUT/e2e.log"

#!/usr/bin/env bash
# Speed before and after a change, in one run on the GPU machine: an older tree (Makefile, src/,
# kernels/, bench/ of a revision, made here by
#   git archive --format=tar REV Makefile src kernels bench | xz > .carry/before.tar.xz
# and carried) is built next to this one, and both run the attention benchmark and the 7B-shape
# end-to-end figures (random bf16 weights: decode tokens/s after a 128-token prompt, time to first
# token of a 4096-token prompt), interleaved, twice. Run from the repository root with carry
# .carry/sys and .carry/before.tar.xz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
before=/tmp/before; rm -rf $before; mkdir -p $before; tar -xJf .carry/before.tar.xz -C $before
build() { (cd "$1" && make -j16 CUDA_ARCHS=90a generate build/bench/bench_attention) >"$OUT/build_$2.log" 2>&1 ||
          { tail -30 "$OUT/build_$2.log"; exit 1; }; }
build $before before & build . after & wait
e2e() {  # tree label: one line of decode tok/s and TTFT at 4096
  local d=$(cd "$1" && ./generate --device cuda --random-weights $PWD/bench/olmo2_7b.json --prompt-len 128 -n 256 \
            --stats --temperature 0 2>&1 | grep -oE "decode +[0-9.]+ tokens/s")
  local t=$(cd "$1" && ./generate --device cuda --random-weights $PWD/bench/olmo2_7b.json --prompt-len 4096 -n 1 \
            --stats --temperature 0 --max-seq-len 4200 2>&1 | grep -oE "time to 1st tok +[0-9.]+ ms")
  echo "$2: $d, $t"
}
for i in 1 2; do
  for t in "$before before" ". after"; do
    set -- $t
    (cd $1 && build/bench/bench_attention "$OUT/attn_$2_$i.txt") >"$OUT/attn_$2_$i.log" 2>&1
    e2e $1 $2 >>"$OUT/e2e.log"
  done
done
for i in 1 2; do for l in before after; do echo "== attention $l $i"; grep -E "^prefill|^decode ctx|^decode batch" "$OUT/attn_${l}_$i.log"; done; done
cat "$OUT/e2e.log"

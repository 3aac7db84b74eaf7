#!/usr/bin/env bash
# The attention benchmark before and after a kernel change, in one run on the GPU machine: the
# engine's kernels/attention.cuh and an older copy in .carry/old/attention.cuh (e.g.
# `git show REV:kernels/attention.cuh > .carry/old/attention.cuh`), each in bench/bench_attention.cu.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 build/libolmo.a build/bench/bench_attention >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I.carry/old -Isrc -Ikernels \
  bench/bench_attention.cu build/libolmo.a -o build/bench/bench_attention_old -lcublasLt -lcublas -Xcompiler -fopenmp \
  -lsentencepiece -lutf8proc >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for i in 1 2; do
  build/bench/bench_attention_old "$OUT/old_$i.txt" >"$OUT/old_$i.log" 2>&1
  build/bench/bench_attention "$OUT/new_$i.txt" >"$OUT/new_$i.log" 2>&1
done
for f in old_1 new_1 old_2 new_2; do echo "== $f"; grep -E "^prefill|^decode ctx|^decode batch" "$OUT/$f.log"; done

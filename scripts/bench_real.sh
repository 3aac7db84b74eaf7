#!/usr/bin/env bash
# bench_real.sh: the figures of a real checkpoint run, on the GPU machine, in one device call
# (carry .carry/sys and .carry/llama; `bash scripts/make_carry.sh` makes both):
#   - a 7B OLMo-2 folder as save_pretrained writes it (random bf16, 3 shards, dolma2 tokenizer);
#   - ./generate --model DIR -p "..." -n 64: wall time, load, load GB/s, time to first token,
#     page cache warm (twice) and cold (the shards evicted with posix_fadvise first);
#   - the default model's time to first token (a plain run: warm-up inside load);
#   - llama.cpp's llama-completion on the same weights (bf16 GGUF), same prompt and length,
#     built from .carry/llama while the rest runs (LLAMA=0 skips it).
# Logs under $OUT; the table is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=${WORK:-/tmp/real}; mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PROMPT="The capital of France is"
now() { date +%s%N; }                          # nanoseconds
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }   # since $1
LL=$W/llama
if [ "${LLAMA:-1}" = 1 ]; then   # llama.cpp builds in the background (about 5 minutes)
  ( mkdir -p "$LL" && tar xJf .carry/llama/llama-trim.tar.xz -C "$LL" &&
    cmake -S "$LL" -B "$LL/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$LL/build" -j12 --target llama-completion ) >"$OUT/llama_build.log" 2>&1 &
  llama_pid=$!
fi
bash scripts/device_prep.sh
make -j4 generate >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
python3 scripts/make_checkpoint.py --config bench/olmo2_7b.json --out "$W/olmo2_7b" \
  --tokenizer tests/tokenizers/allenai_dolma2.json 2>&1 | tail -1 | tee "$OUT/checkpoint.log"

# ours: one run, its wall time and the --stats lines
ours() {  # label, then ./generate arguments
  local label=$1; shift
  local t0=$(now)
  ./generate "$@" --stats >"$OUT/$label.out" 2>"$OUT/$label.err"; local rc=$?
  local wall=$(secs $t0)
  local load=$(sed -n 's/^load *\([0-9.]*\) s.*/\1/p' "$OUT/$label.err")
  local gbs=$(sed -n 's/.*GB of weights, \([0-9.]*\) GB\/s.*/\1/p' "$OUT/$label.err")
  local ttft=$(sed -n 's/^time to 1st tok *\([0-9.]*\) ms/\1/p' "$OUT/$label.err")
  local dec=$(sed -n 's/^decode *\([0-9.]*\) tokens.*/\1/p' "$OUT/$label.err")
  printf "| %-24s | %6.2f s | %6s s | %6s | %8s ms | %7s | rc %d |\n" "$label" "$wall" "$load" "${gbs:--}" "$ttft" "${dec:--}" $rc \
    >>"$OUT/table.txt"
}
evict() { python3 -c "
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" "$@"; }

echo "| run | wall | load | GB/s | time to 1st tok | decode tok/s | |" >"$OUT/table.txt"
echo "|---|---|---|---|---|---|---|" >>"$OUT/table.txt"
M7=$W/olmo2_7b
ours 7b_warm_1 --model "$M7" -p "$PROMPT" -n 64 --temperature 0
ours 7b_warm_2 --model "$M7" -p "$PROMPT" -n 64 --temperature 0
evict "$M7"/*.safetensors
ours 7b_cold --model "$M7" -p "$PROMPT" -n 64 --temperature 0
ours 7b_warm_3 --model "$M7" -p "$PROMPT" -n 64 --temperature 0
ours 7b_fp16_converted --model "$M7" -p "$PROMPT" -n 64 --temperature 0 --dtype fp16
for i in 1 2 3; do ours default_$i -n 64 --temperature 0; done
cat "$OUT"/7b_warm_1.err

if [ "${LLAMA:-1}" = 1 ]; then
  wait $llama_pid || { echo "llama.cpp build failed"; tail -20 "$OUT/llama_build.log"; }
  python3 "$LL/convert_hf_to_gguf.py" "$M7" --outtype bf16 --outfile "$W/olmo2_7b.gguf" >"$OUT/convert.log" 2>&1 ||
    tail -5 "$OUT/convert.log"
  for i in 1 2; do
    t0=$(now)
    "$LL/build/bin/llama-completion" -m "$W/olmo2_7b.gguf" -ngl 99 -fa on -p "$PROMPT" -n 64 --temp 0 -no-cnv \
      >"$OUT/llama_$i.out" 2>"$OUT/llama_$i.err"
    wall=$(secs $t0)
    load=$(sed -n 's/.*load time = *\([0-9.]*\) ms.*/\1/p' "$OUT/llama_$i.err" | head -1)
    pe=$(sed -n 's/.*prompt eval time = *\([0-9.]*\) ms.*/\1/p' "$OUT/llama_$i.err" | head -1)
    ev=$(sed -n 's/.* eval time = .*, *\([0-9.]*\) tokens per second.*/\1/p' "$OUT/llama_$i.err" | tail -1)
    printf "| %-24s | %6.2f s | %6s ms | - | %8s ms (prompt eval) | %7s | |\n" "llama.cpp 7b bf16 #$i" "$wall" "$load" "$pe" "$ev" \
      >>"$OUT/table.txt"
  done
fi
tar -czf "$OUT/logs_real.tgz" -C "$OUT" $(cd "$OUT" && ls *.log *.err *.out 2>/dev/null) && rm -f "$OUT"/*.log "$OUT"/*.err "$OUT"/*.out
cat "$OUT/table.txt"

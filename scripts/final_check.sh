#!/usr/bin/env bash
# The full GPU-machine run behind the closing notes: build, default-model goldens (with beam
# references), every test, compute-sanitizer on the GPU engine tests, and every benchmark.
# Logs under $OUT; the tables print last. Run from the repository root with carry .carry/sys.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
bash scripts/device_prep.sh
make -j16 all build/bench/bench_attention >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
python3 tests/make_goldens.py --model weights --sp-model tokenizer/tokenizer.model \
  --prompt "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife." \
  --greedy-prompt "Once upon a time" --greedy-prompt "The little rabbit looked at the moon and" \
  --greedy-prompt "Alice was beginning to get very tired of sitting by her sister" \
  --beam-prompt "Once upon a time" --beam-prompt "The end. They all lived happily ever after." \
  --beam-prompt "Tom said" --out tests/default_model >"$OUT/goldens_default.log" 2>&1
cp tests/default_model/golden.safetensors "$OUT/default_golden.safetensors"
python3 -c "import inspect, transformers.generation.utils as u; print(inspect.getsource(u.GenerationMixin._check_early_stop_heuristic))" >"$OUT/hf_early_stop.log" 2>&1
bash tests/run_all.sh $(find build/tests -maxdepth 1 -name 'test_*' -type f -executable | sort) >"$OUT/tests.log" 2>&1
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool build/tests/test_golden --gtest_filter='*Gpu*:-*Bf16*' >"$OUT/san_${tool}_golden.log" 2>&1
  compute-sanitizer --tool $tool build/tests/test_batching --gtest_filter='*Gpu*' >"$OUT/san_${tool}_batching.log" 2>&1
done
python3 bench/bench_e2e.py >"$OUT/bench_e2e.log" 2>&1
python3 bench/bench_e2e.py --batches 1 8 32 64 >"$OUT/bench_batch.log" 2>&1
build/bench/bench_attention "$OUT/ours.txt" >"$OUT/bench_attn_ours.log" 2>&1 && \
  python3 -W ignore bench/bench_attention_torch.py --ours "$OUT/ours.txt" >"$OUT/bench_attn.log" 2>&1
grep -E "beam|WARN|Error" "$OUT/goldens_default.log" | head
grep -E "FAILED|Failure|exited" "$OUT/tests.log" | head -20
tail -1 "$OUT/tests.log"
for f in "$OUT"/san_*.log; do echo "$(basename $f): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
tail -5 "$OUT/bench_e2e.log"; tail -7 "$OUT/bench_batch.log"; tail -8 "$OUT/bench_attn.log"
tar -czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log ours.txt 2>/dev/null) && rm -f "$OUT"/*.log "$OUT/ours.txt"

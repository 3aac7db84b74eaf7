#!/usr/bin/env bash
# Runs each libFuzzer target given after the first argument for that many seconds (make fuzz:
# FUZZ_SECONDS), from its seed corpus tests/fuzz/NAME/ (read only: new inputs go to
# build-fuzz/corpus/NAME/, findings to build-fuzz/findings/), at libFuzzer's default limits
# (-rss_limit_mb=2048, -timeout=1200, -max_len 4096 unless a seed is longer). Prints one line
# per target (executions, new corpus size) and fails when any target found a crash, leak,
# timeout or out-of-memory. FUZZ_JOBS targets run side by side (default 1).
set -u
seconds=$1; shift
cd "$(dirname "$0")/../.."
mkdir -p build-fuzz/findings
run_one() {
  local bin=$1 name; name=$(basename "$bin"); name=${name#fuzz_}
  mkdir -p "build-fuzz/corpus/$name"
  local log="build-fuzz/$name.log"
  "$bin" "build-fuzz/corpus/$name" "tests/fuzz/$name" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$name-" >"$log" 2>&1
  local rc=$? runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "fuzz $name: ${seconds}s, ${runs:-?} executions, corpus $(ls "build-fuzz/corpus/$name" | wc -l) inputs, no findings"
  else
    echo "fuzz $name: FAILED (exit $rc), see $log and build-fuzz/findings/"; grep -m3 -E "ERROR|SUMMARY|Test unit written" "$log"
  fi
  return $rc
}
failed=0; pids=()
for bin in "$@"; do
  run_one "$bin" & pids+=($!)
  if [ ${#pids[@]} -ge "${FUZZ_JOBS:-1}" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed

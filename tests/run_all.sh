#!/usr/bin/env bash
# Runs each GoogleTest binary given on the command line and prints one line per binary: its
# passed / failed / skipped counts, the time it took and each distinct reason for its skips
# (once, with how many tests it skipped). A failed test's own output follows its binary's line;
# a binary that crashes shows the end of its output. The full output of every binary goes to
# <build>/test-logs/<binary>.log (build/test-logs/ for the default build). The last line sums
# everything up: "N passed, N failed, N skipped" (CI looks for it); the exit status is non-zero
# when a test failed or a binary crashed. Binaries run from the repository root, so tests find
# their fixtures at tests/fixtures.
passed=0; failed=0; skipped=0

# The blocks of the failed tests in a GoogleTest output: from "[ RUN ]" to "[ FAILED ]", at most
# 40 lines of each.
failed_blocks() {
  awk '/^\[ RUN      \]/ { n = 0; delete block }
       { block[n++] = $0 }
       /^\[  FAILED  \] .*\([0-9]+ ms\)$/ { for (i = 0; i < n && i < 40; i++) print "    " block[i]; n = 0 }'
}

# "reason (N tests)" for each distinct skip message: GoogleTest prints it on the line after
# "<file>:<line>: Skipped".
skip_reasons() {
  awk 'prev ~ /: Skipped$/ { print } { prev = $0 }' | sort | uniq -c | sort -rn |
    awk '{ n = $1; $1 = ""; sub(/^ /, ""); printf "%s%s (%d test%s)", sep, $0, n, n == 1 ? "" : "s"; sep = "; " }'
}

for bin in "$@"; do
  name=$(basename "$bin")
  logs="$(dirname "$(dirname "$bin")")/test-logs"
  mkdir -p "$logs"
  log="$logs/$name.log"
  start=$(date +%s%N)
  "$bin" --gtest_color=no >"$log" 2>&1; rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below.*/\1/p' "$log" | tail -1)
  p=${p:-0}; f=${f:-0}; s=${s:-0}
  line=$(printf '%-24s %4d passed, %d failed, %d skipped  %4d.%d s' "$name" "$p" "$f" "$s" $((ms / 1000)) $((ms % 1000 / 100)))
  [ "$s" -gt 0 ] && line="$line  (skipped: $(skip_reasons <"$log"))"
  echo "$line"
  [ "$f" -gt 0 ] && failed_blocks <"$log"
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "!!! $name exited with status $rc; the end of its output ($log):"
    tail -20 "$log" | sed 's/^/    /'
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]

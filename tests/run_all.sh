#!/usr/bin/env bash
# Runs each GoogleTest binary given on the command line and sums the results into one line:
#   "N passed, N failed, N skipped". Exits non-zero when any test failed or a binary crashed.
# A binary is run from the repository root, so tests find their fixtures at tests/fixtures.
passed=0; failed=0; skipped=0; crashed=0
for bin in "$@"; do
  echo "=== $bin"
  out=$("$bin" --gtest_color=no 2>&1); rc=$?
  echo "$out" | grep -E '^\[  (FAILED|SKIPPED) |^\[==========\]|Skipped|error|Failure|exception|rel-L2|Expected|Which is|Value of|Actual|  [a-z_]+$|^[a-z].*[0-9]e[-+][0-9]' | grep -v '^\[  FAILED  \] [0-9]* tests\?, listed below' | head -60
  p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' | tail -1)
  f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below.*/\1/p' | tail -1)
  s=$(echo "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below.*/\1/p' | tail -1)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
  if [ $rc -ne 0 ] && [ -z "$f" ]; then echo "!!! $bin exited with $rc"; echo "$out" | tail -20; crashed=$((crashed + 1)); failed=$((failed + 1)); fi
done
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]

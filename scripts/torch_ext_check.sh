#!/usr/bin/env bash
# torch_ext_check.sh: the olmo_kernels torch extension on a GPU machine with PyTorch (no network
# needed): builds it (`pip install --no-build-isolation --no-deps --no-index -e python/`; --no-index so that
# pip fails at once instead of retrying a download for minutes; if the
# package then does not import from python/, `setup.py build_ext --inplace`), runs its pytest
# suite and the benchmark, and prints a short summary last.
#   bash scripts/torch_ext_check.sh [--quick]      --quick: the benchmark's three cases only
# Logs in $OUT (default /tmp/out): torch_build.log, torch_pytest.log, torch_errors.log (every
# test case's error next to torch's), torch_bench.log. Run from anywhere.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-$(nproc)}
in_tree() { PYTHONPATH="$PWD/python" python3 -c "import olmo_kernels" 2>&1; }
tail_log() { echo "---- last lines of $1 ----"; tail -n "${2:-40}" "$1"; }

python3 -c "import torch; print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|',
            torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" || exit 1
nvcc --version | tail -1

# 1. build
t0=$(date +%s)
if python3 -m pip install --no-build-isolation --no-deps --no-index -e python/ >"$OUT/torch_build.log" 2>&1; then
    build="pip install -e python/: ok"
else
    build="pip install -e python/: FAILED"
    tail_log "$OUT/torch_build.log"
    if grep -qE '(\.(cu|cuh|cpp|h)(\([0-9]+\)|:[0-9]+:[0-9]+):? (fatal )?error' "$OUT/torch_build.log"; then
        echo "compiler errors (above); not retrying"; echo "SUMMARY: build FAILED"; exit 1
    fi
fi
if ! err=$(in_tree); then
    echo "olmo_kernels does not import from python/ after pip: $err"
    echo "---- python3 setup.py build_ext --inplace ----" >>"$OUT/torch_build.log"
    if (cd python && python3 setup.py build_ext --inplace) >>"$OUT/torch_build.log" 2>&1 && err=$(in_tree); then
        build="$build; setup.py build_ext --inplace: ok"
    else
        tail_log "$OUT/torch_build.log"; echo "$err"; echo "SUMMARY: build FAILED"; exit 1
    fi
fi
build="$build ($(( $(date +%s) - t0 )) s)"
grep -iE "warning" "$OUT/torch_build.log" | grep -v "UserWarning\|DeprecationWarning\|SetuptoolsDeprecation" | head -10

# 2. tests (python/tests/conftest.py puts python/ first on the import path)
t0=$(date +%s)
OLMO_KERNELS_ERROR_LOG="$OUT/torch_errors.log" python3 -m pytest -q -rs python/tests >"$OUT/torch_pytest.log" 2>&1
test_rc=$?
if [ $test_rc -ge 128 ]; then  # killed by a signal (a crash): which test, and the C++ stack if gdb is there
    echo "pytest died with signal $((test_rc - 128)); rerunning verbosely, log in $OUT/torch_crash.log"
    crash=(python3 -X faulthandler -m pytest -v -x -p no:cacheprovider python/tests)
    if command -v gdb >/dev/null; then crash=(gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args "${crash[@]}"); fi
    "${crash[@]}" >"$OUT/torch_crash.log" 2>&1
    grep -E "PASSED|FAILED|Fatal|SIGSEGV|^#[0-9]+ " "$OUT/torch_crash.log" | tail -40
fi
grep -E "^(FAILED|ERROR)|Error|error:" "$OUT/torch_pytest.log" | head -25
sed -n '/olmo_kernels errors vs fp64/,$p' "$OUT/torch_pytest.log" | grep -v "^=\+ .* in [0-9.]*s" | head -40
tests="$(tail -1 "$OUT/torch_pytest.log") ($(( $(date +%s) - t0 )) s, exit $test_rc)"

# 3. benchmark
PYTHONPATH="$PWD/python" python3 -W ignore -m olmo_kernels.bench "$@" >"$OUT/torch_bench.log" 2>&1
bench_rc=$?
[ $bench_rc -ne 0 ] && tail_log "$OUT/torch_bench.log" 20

echo "================ olmo_kernels summary ================"
echo "build: $build"
echo "tests: $tests"
echo "bench (exit $bench_rc):"
cat "$OUT/torch_bench.log" | grep -v "^Traceback" | tail -12
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]

#!/usr/bin/env bash
# Build fastopt with AddressSanitizer + UndefinedBehaviorSanitizer in a scratch
# copy of the checkout and run the whole test suite against that build.
#
#   bash .ci/sanitize.sh [extra pytest args]
#
# Uses the `python` on PATH (or $PYTHON): run it inside the environment that
# has the test extras installed. The build happens in place when Cython and
# setuptools are importable, else through pip into the scratch directory
# (like `pip install .`: an isolated build environment). Nothing is installed
# into the environment and the normal build is not touched.
# The ASan runtime is preloaded (CPython itself is not instrumented); leak
# detection is off because CPython keeps memory alive at exit -- leaks are
# covered by .ci/valgrind.sh and tests/test_leaks.py. Every sanitizer report
# is fatal (halt_on_error, -fno-sanitize-recover); ASan reports go to log
# files and UBSan reports to stderr, both of which this script checks, and a
# report inside a subprocess (the fuzz test) aborts it and fails its test. Exit status 0 only with zero reports and all
# tests passing.
set -uo pipefail

PY=${PYTHON:-python}
CC=${CC:-gcc}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fastopt-sanitize.XXXXXX")
LOGS="$WORK/sanitizer-logs"
KEEP=${FASTOPT_SANITIZE_KEEP:-0}
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

fail() { echo "SANITIZE: FAIL - $*"; exit 1; }

ASAN_LIB=$("$CC" -print-file-name=libasan.so)
UBSAN_LIB=$("$CC" -print-file-name=libubsan.so)
[ -f "$ASAN_LIB" ] || fail "libasan.so not found for $CC (install the compiler's ASan runtime, e.g. libasan8)"
[ -f "$UBSAN_LIB" ] || fail "libubsan.so not found for $CC (e.g. libubsan1)"
"$PY" -c "import numpy, pytest, hypothesis" 2>/dev/null \
    || fail "$PY lacks numpy/pytest/hypothesis: install the test extras first (pip install '.[test]')"

# --- a scratch copy of the checkout (sources only: no build products, caches
#     or virtual environments)
mkdir -p "$LOGS"
tar -C "$ROOT" -cf - --exclude=./.git --exclude=./build --exclude=./dist \
    --exclude='*.egg-info' --exclude='.venv*' --exclude=.hypothesis --exclude=.pytest_cache \
    --exclude=.benchmarks --exclude=__pycache__ --exclude='*.so' --exclude='./fastopt/*.c' \
    --exclude='./fastopt/*.html' . | tar -C "$WORK" -xf - \
    || fail "could not copy the checkout to $WORK"

# --- build with the sanitizers (the normal -O3 flags stay; these are added).
#     With Cython and setuptools in the environment: in place, offline. Else
#     like `pip install .` (an isolated build environment) into $WORK/site.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
export FASTOPT_EXTRA_CFLAGS="$SAN" FASTOPT_EXTRA_LDFLAGS="-fsanitize=address,undefined"
export FASTOPT_DEBUG=1
t0=$(date +%s)
if "$PY" -c "import Cython, setuptools" 2>/dev/null; then
    echo "sanitize: building in place in $WORK with: $SAN"
    SITE="$WORK"
    ( cd "$WORK" && "$PY" setup.py -q build_ext --inplace ) > "$WORK/build.log" 2>&1 \
        || { tail -40 "$WORK/build.log"; fail "sanitizer build failed"; }
else
    echo "sanitize: building with pip into $WORK/site with: $SAN"
    SITE="$WORK/site"
    "$PY" -m pip install --no-deps --no-cache-dir --target "$SITE" "$WORK" \
        > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "sanitizer build failed"; }
    rm -rf "$WORK/fastopt"      # so the tests cannot import the unbuilt sources
fi
unset FASTOPT_EXTRA_CFLAGS FASTOPT_EXTRA_LDFLAGS FASTOPT_DEBUG
t1=$(date +%s)

# --- run the suite against it
# libstdc++ too: ASan's __cxa_throw interceptor must find the real one at
# start-up, or the first C++ exception (jax, torch) aborts the process
STDCXX=$("$CC" -print-file-name=libstdc++.so.6)
[ -f "$STDCXX" ] || STDCXX=""
export LD_PRELOAD="$ASAN_LIB${STDCXX:+ $STDCXX}${LD_PRELOAD:+ $LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:log_path=$LOGS/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"   # (its log_path is ignored with ASan preloaded: stderr)
export PYTHONMALLOC=malloc          # Python objects through ASan's allocator too
export PYTHONFAULTHANDLER=1
export PYTHONDONTWRITEBYTECODE=1

# the tests must import the sanitized build
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
( cd "$WORK" && SITE="$SITE" "$PY" - <<'EOF'
import os, fastopt
where = os.path.dirname(os.path.abspath(fastopt.__file__))
assert where == os.path.join(os.path.abspath(os.environ["SITE"]), "fastopt"), where
assert "-fsanitize=address,undefined" in fastopt.config()["cflags"], fastopt.config()["cflags"]
EOF
) || fail "the tests would not import the sanitized build"

( cd "$WORK" && "$PY" -m pytest -q -p no:cacheprovider --capture=sys "$@" ) 2>&1 | tee "$WORK/pytest.log"
rc=${PIPESTATUS[0]}
t2=$(date +%s)

nfiles=$(find "$LOGS" -type f | wc -l)
nstderr=$(grep -cE 'runtime error:|ERROR: (Address|UndefinedBehavior|Leak)Sanitizer' "$WORK/pytest.log")
reports=$((nfiles + nstderr))
if [ "$nfiles" -gt 0 ]; then
    for f in "$LOGS"/*; do echo "==== $f"; head -60 "$f"; done
fi
result=$(grep -E '[0-9]+ (passed|failed|errors?)( |,|$)' "$WORK/pytest.log" | tail -1)
if [ -z "$result" ]; then
    if [ "$rc" -eq 0 ]; then result="pytest passed"; else result="pytest did not finish (crashed or aborted?)"; fi
fi
if [ "$rc" -ne 0 ] || [ "$reports" -gt 0 ]; then
    echo "SANITIZE: FAIL - pytest exit $rc, $reports sanitizer report(s); $result (build $((t1 - t0)) s, tests $((t2 - t1)) s)"
    exit 1
fi
echo "SANITIZE: PASS - 0 ASan/UBSan reports; $result (build $((t1 - t0)) s, tests $((t2 - t1)) s)"

#!/usr/bin/env bash
# Valgrind memcheck over a short run of every fastopt code path
# (.ci/valgrind_workload.py): fails on any invalid read or write, invalid
# free, use of uninitialised memory, or a block definitely lost whose
# allocation stack runs through fastopt's code (noise from the dynamic loader and from
# CPython's internals is suppressed by .ci/valgrind-python.supp; nothing in
# fastopt's extension is). Uses the `python` on PATH (or $PYTHON) and the
# fastopt it imports (the installed one, or set PYTHONPATH to an in-place
# build). PYTHONMALLOC=malloc so Python objects go through valgrind's malloc.
set -uo pipefail
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v valgrind >/dev/null || { echo "VALGRIND: FAIL - valgrind is not installed (apt-get install valgrind)"; exit 1; }
# the real interpreter, not a shim script (valgrind must trace python itself)
EXE=$("$PY" -c 'import sys; print(sys.executable)')
WHERE=$(cd /tmp && "$EXE" -c 'import fastopt, os; print(os.path.dirname(fastopt.__file__))') \
    || { echo "VALGRIND: FAIL - $EXE cannot import fastopt"; exit 1; }
LOG=$(mktemp "${TMPDIR:-/tmp}/fastopt-valgrind.XXXXXX")
t0=$(date +%s)
( cd /tmp && PYTHONMALLOC=malloc valgrind --tool=memcheck --error-exitcode=99 \
      --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=none \
      --num-callers=40 --suppressions="$HERE/valgrind-python.supp" \
      "$EXE" "$HERE/valgrind_workload.py" ) > "$LOG" 2>&1
rc=$?
t1=$(date +%s)
errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ errors' "$LOG" | grep -oE '[0-9]+' | tail -1)
suppressed=$(grep -oE 'suppressed: [0-9]+ from' "$LOG" | grep -oE '[0-9]+' | tail -1)
# definitely-lost blocks allocated in fastopt's own code (CPython and NumPy
# lose a few blocks at start-up; those are not ours)
ours=$("$EXE" - "$LOG" <<'PYEOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
blocks = re.split(r"\n==\d+== \n", text)
mine = re.compile(r"fastopt/_ext|_compiled|_flatcheck|src_c/|_ext\.c:|fastopt\.c:|agc\.c:")
n = 0
for b in blocks:
    if "definitely lost in loss record" in b and mine.search(b):
        n += 1
        print(b, file=sys.stderr)
print(n)
PYEOF
)
if [ "$rc" -ne 0 ] || [ "${errors:-1}" != 0 ] || [ "${ours:-1}" != 0 ] \
        || ! grep -q "valgrind workload: done" "$LOG"; then
    grep -vE '^==[0-9]+== +(at|by) 0x[0-9A-F]+: \?\?\?' "$LOG" | grep -v "definitely lost" | tail -60
    echo "VALGRIND: FAIL - exit $rc, ${errors:-?} memcheck errors, ${ours:-?} leaks from fastopt's code (fastopt from $WHERE, $((t1 - t0)) s); log $LOG"
    exit 1
fi
rm -f "$LOG"
echo "VALGRIND: PASS - memcheck: 0 errors (${suppressed:-0} CPython/loader reports suppressed), 0 blocks leaked by fastopt's code; fastopt from $WHERE ($((t1 - t0)) s)"

#!/usr/bin/env bash
# The catalog's C insert path (datahub/catalog/_put_rows.c) built with AddressSanitizer and
# UndefinedBehaviorSanitizer runs the tests that drive it; fails on any report. Part of
# `make sanitize` (scripts/sanitize.sh).
#   scripts/sanitize_put_rows.sh [PYTEST_ARGS...]
# The tests run in a tree of symbolic links to this checkout (var/sanitize-put-rows/tree) whose
# only real file is the sanitized module, so the checkout keeps its normal build and pytest's
# rootdir imports the sanitized one. As in scripts/sanitize.sh: libasan preloaded, no leak check
# (CPython's own allocations at exit), every report a file that fails the run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
WORK=$ROOT/var/sanitize-put-rows
TREE=$WORK/tree
REPORTS=$WORK/reports
TESTS=(tests/catalog/test_put_rows.py tests/catalog/test_put_lines.py tests/catalog/test_commit_writer.py)
(($#)) && TESTS=("$@")
rm -rf "$WORK" && mkdir -p "$TREE" "$REPORTS"
for entry in datahub tests bench pyproject.toml; do cp -rs "$ROOT/$entry" "$TREE/"; done
find "$TREE/datahub/catalog" -name '_put_rows*.so' -delete
PUT_ROWS_SANITIZE=$TREE "$ROOT/scripts/build_put_rows.sh" "$PY"
LIBASAN=$(gcc -print-file-name=libasan.so)
[[ -e "$LIBASAN" ]] || { echo "[sanitize] no libasan.so from gcc ($LIBASAN)" >&2; exit 1; }
cd "$TREE"
status=0
LD_PRELOAD=$LIBASAN${LD_PRELOAD:+:$LD_PRELOAD} \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$REPORTS/asan \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan \
  "$PY" - "${TESTS[@]}" <<'PYEOF' || status=$?
import sys
from pathlib import Path

import pytest

from datahub.catalog import put_rows

so = put_rows._put_rows.__file__
assert so.startswith(str(Path.cwd())) and not Path(so).is_symlink(), f"_put_rows came from {so}"
print(f"[sanitize] _put_rows {so}", file=sys.stderr)
sys.exit(pytest.main(["-q", "-n", "0", "-p", "no:cacheprovider", *sys.argv[1:]]))
PYEOF
if compgen -G "$REPORTS/*" >/dev/null; then
  echo "[sanitize] sanitizer reports:" >&2
  for f in "$REPORTS"/*; do echo "== $f" >&2; head -40 "$f" >&2; done
  exit 1
fi
((status == 0)) || exit "$status"
grep -q __asan_init "$TREE"/datahub/catalog/_put_rows*.so || { echo "[sanitize] the build has no ASan" >&2; exit 1; }
echo "[sanitize] _put_rows clean: no ASan or UBSan report" >&2

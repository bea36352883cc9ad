#!/usr/bin/env bash
# `make sanitize`: pyfuse3's C (third_party/pyfuse3) built with AddressSanitizer and
# UndefinedBehaviorSanitizer runs the real-mount tests of the C paths; fails on any report.
# Then (without PYTEST_ARGS) the catalog's C, the same way: scripts/sanitize_put_rows.sh.
#   scripts/sanitize.sh [PYTEST_ARGS...]      (default: the C paths' test files below)
# The list covers every C path a default mount uses (zero-message opens, READs answered in C
# from page files: fastread.h, LOOKUPs in C, READDIRPLUS packed in C: readdir.h, the reader
# thread and its hand-over queue under concurrent handlers, io_uring, the request counters, a
# page file evicted while published: the *_retract_file calls; one another process removed: the
# *_sweep calls) and the passthrough ones a flag
# turns on (a bucket mount's too), and the WRITEs in C of a --writes-in-c workspace mount (fastwrite.h).
# The sanitized build goes to var/pyfuse3-sanitize of this checkout (scripts/build_pyfuse3.sh with
# PYFUSE3_SANITIZE; rebuilt only when the tree changes), never into the venv: it is put first on
# PYTHONPATH for this run only, and the mount daemons the tests start inherit that. Not under
# .venv (c29): a worktree whose .venv links to another checkout's venv built its tree over the
# build another worktree's run was importing (tests/test_sanitize_dir.py). CPython is not
# built with ASan, so libasan is preloaded (it must come first) and leak detection is off (CPython's
# own allocations at exit are reported as leaks: noise). Each sanitizer report goes to a file
# under var/sanitize/; any file there fails the run even if the test that caused it passed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
DIR=$ROOT/var/pyfuse3-sanitize
REPORTS=$ROOT/var/sanitize
TESTS=(tests/fuse/test_passthrough.py tests/fuse/test_passthrough_opens.py tests/fuse/test_fastloop.py
       tests/fuse/test_uring.py tests/fuse/test_uring_offer.py tests/fuse/test_lookup_in_c.py
       tests/fuse/test_zero_message_open.py tests/fuse/test_fastread.py tests/fuse/test_warm_requests.py
       tests/fuse/test_cold_open.py tests/fuse/test_read_mode.py tests/fuse/test_paged_readdir.py
       tests/fuse/test_session_loop.py tests/fuse/test_request_counter.py
       tests/fuse/test_bucket_passthrough.py tests/fuse/test_evicted_published.py
       tests/fuse/test_evicted_elsewhere.py tests/fuse/test_workspace_cwrites19.py
       tests/fuse/test_loop20.py tests/fuse/test_leftovers21_dispatch.py tests/fuse/test_leftovers21_cwrites.py
       tests/fuse/test_long_names_listed.py tests/fuse/test_perf41d_write_view.py
       tests/fuse/test_wbfix73_held_recheck.py)
(($#)) && TESTS=("$@")
PYFUSE3_SANITIZE=$DIR scripts/build_pyfuse3.sh "$PY"
LIBASAN=$(gcc -print-file-name=libasan.so)
[[ -e "$LIBASAN" ]] || { echo "[sanitize] no libasan.so from gcc ($LIBASAN)" >&2; exit 1; }
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
export PYTHONPATH=$DIR${PYTHONPATH:+:$PYTHONPATH}
export LD_PRELOAD=$LIBASAN${LD_PRELOAD:+:$LD_PRELOAD}
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$REPORTS/asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan
# the run must use the sanitized extension, not the venv's
"$PY" - "$DIR" <<'EOF'
import sys, pyfuse3
so = pyfuse3.__file__
assert so.startswith(sys.argv[1]), f"pyfuse3 came from {so}, not the sanitized build"
assert pyfuse3.PASSTHROUGH and pyfuse3.FASTLOOP and pyfuse3.URING and pyfuse3.FASTREAD, \
    "the sanitized build lacks the C fast path"
print(f"[sanitize] pyfuse3 {so}", file=sys.stderr)
EOF
grep -q __asan_init "$DIR"/pyfuse3/__init__*.so || { echo "[sanitize] the build has no ASan" >&2; exit 1; }
status=0
"$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" || status=$?
if compgen -G "$REPORTS/*" >/dev/null; then
  echo "[sanitize] sanitizer reports:" >&2
  for f in "$REPORTS"/*; do echo "== $f" >&2; head -40 "$f" >&2; done
  exit 1
fi
((status == 0)) || exit "$status"
echo "[sanitize] clean: no ASan or UBSan report" >&2
# the catalog's C insert path (datahub/catalog/_put_rows.c), under the same sanitizers
(($#)) || "$ROOT/scripts/sanitize_put_rows.sh"

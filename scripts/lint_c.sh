#!/usr/bin/env bash
# `make lint-c` (part of `make lint`, so of `make test`): datahub's C (third_party/pyfuse3 first)
# compiled with -Wall -Wextra -Wconversion and more, -Werror: any warning fails.
#   scripts/lint_c.sh [LIBFUSE_PREFIX]     (default: .venv/opt/libfuse)
# Each header is compiled as a translation unit of its own (each must include what it uses;
# uring.h is the end of fastloop.h, which includes it), against the project's libfuse 3.17
# (the fast path) and, when pkg-config finds one, the system's libfuse (the fallback, where the
# fast path compiles out). -O2 so that warnings which need data flow (-Wformat-truncation,
# -Wmaybe-uninitialized, -Wnull-dereference) run. -D_GNU_SOURCE as in the real build, where
# Python.h defines it first. -Wno-unused-function only: a header's static functions that this
# one-header unit does not call (the extension calls them) are not defects.
# pyfuse3's own Cython output is not held to this (Cython's code is not ours to fix); the real
# build prints its warnings (scripts/build_pyfuse3.sh). Upstream pyfuse3's own C (macros.c,
# darwin_compat.c, ...) is not either.
# Then datahub's other C, with the same flags: the catalog's insert path (datahub/catalog/_put_rows.c
# with its _put_rows_lines.h, against this Python's headers) and the benchmark that reuses that
# header (bench/scale/sqlite_c_ceiling.c).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LIBFUSE=${1:-$ROOT/.venv/opt/libfuse}
PY=${PYTHON:-$ROOT/.venv/bin/python}
SRC=$ROOT/third_party/pyfuse3/src/pyfuse3
HEADERS=(passthrough.h fastopen.h lookup.h readdir.h fastread.h fastwrite.h fastloop.h)
FLAGS=(-std=gnu11 -O2 -D_GNU_SOURCE -DFUSE_USE_VERSION=32 -Werror -Wall -Wextra -Wconversion
       -Wshadow -Wformat=2 -Wpointer-arith -Wstrict-prototypes -Wundef -Wvla -Wnull-dereference
       -Wduplicated-cond -Wlogical-op -Wno-unused-function)
CC=${CC:-gcc}
builds=()
if [[ -e "$LIBFUSE/lib/pkgconfig/fuse3.pc" ]]; then
  builds+=("$LIBFUSE/lib/pkgconfig")
fi
if PKG_CONFIG_PATH= pkg-config --exists fuse3 2>/dev/null; then
  builds+=("")  # the system's libfuse
fi
((${#builds[@]})) || { echo "[lint-c] no libfuse headers (scripts/install.sh builds them)" >&2; exit 1; }
fail=0
for pc in "${builds[@]}"; do
  version=$(PKG_CONFIG_PATH=$pc pkg-config --modversion fuse3)
  read -ra cflags <<<"$(PKG_CONFIG_PATH=$pc pkg-config --cflags fuse3)"
  for h in "${HEADERS[@]}"; do
    if ! printf '#include "%s"\n' "$h" | "$CC" "${FLAGS[@]}" "${cflags[@]}" -I"$SRC" -x c -c -o /dev/null -; then
      echo "[lint-c] $h with libfuse $version: the warnings above are errors" >&2
      fail=1
    fi
  done
done
PYINCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
OTHER=(datahub/catalog/_put_rows.c bench/scale/sqlite_c_ceiling.c)
for c in "${OTHER[@]}"; do
  if ! "$CC" "${FLAGS[@]}" -I"$PYINCLUDE" -I"$ROOT/datahub/catalog" -c -o /dev/null "$ROOT/$c"; then
    echo "[lint-c] $c: the warnings above are errors" >&2
    fail=1
  fi
done
((fail == 0)) && echo "[lint-c] ok: ${HEADERS[*]} (libfuse ${#builds[@]} build(s)); ${OTHER[*]}" >&2
exit "$fail"

#!/usr/bin/env bash
# Builds datahub/catalog/_put_rows.c (a commit's put lines inserted by C, docs/catalog.md) into
# the source tree beside it, where the editable install and PYTHONPATH=checkout both import it.
#   scripts/build_put_rows.sh [PYTHON]       (default .venv/bin/python; called by scripts/install.sh)
# Warnings are errors. Rebuilt only when the sources or this script are newer than the module.
# PUT_ROWS_SANITIZE=DIR builds it with ASan + UBSan into DIR/datahub/catalog/ instead (the tree
# keeps its normal build), for scripts/sanitize.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${1:-$ROOT/.venv/bin/python}
SRC=$ROOT/datahub/catalog/_put_rows.c
HEADER=$ROOT/datahub/catalog/_put_rows_lines.h
read -r INCLUDE SUFFIX < <("$PY" -c 'import sysconfig as s; print(s.get_paths()["include"], s.get_config_var("EXT_SUFFIX"))')
FLAGS=(-std=gnu11 -O2 -fPIC -shared -Werror -Wall -Wextra -Wconversion -Wshadow -Wformat=2 -Wpointer-arith
       -Wstrict-prototypes -Wundef -Wvla -Wnull-dereference -Wduplicated-cond -Wlogical-op)
if [[ -n "${PUT_ROWS_SANITIZE:-}" ]]; then
  OUT=$PUT_ROWS_SANITIZE/datahub/catalog/_put_rows$SUFFIX
  FLAGS+=(-g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
else
  OUT=$ROOT/datahub/catalog/_put_rows$SUFFIX
fi
if [[ -e "$OUT" && "$OUT" -nt "$SRC" && "$OUT" -nt "$HEADER" && "$OUT" -nt "$0" ]]; then exit 0; fi
mkdir -p "$(dirname "$OUT")"
${CC:-gcc} "${FLAGS[@]}" -I"$INCLUDE" -o "$OUT.tmp" "$SRC" -lsqlite3
mv "$OUT.tmp" "$OUT"
printf '[install] built %s\n' "${OUT#"$ROOT"/}" >&2

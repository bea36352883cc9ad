#!/usr/bin/env bash
# Build and install pyfuse3 3.5.0 with datahub's patches (read by inode, queued requests
# answered in C) into a venv (see
# third_party/pyfuse3/README.md). Idempotent: does nothing when that build is installed.
#   scripts/build_pyfuse3.sh [PYTHON]     (default: .venv/bin/python)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${1:-$ROOT/.venv/bin/python}
VERSION=3.5.0
LOCAL=datahub.2
PATCHES=(no-open-read.patch burst.patch)  # in this order
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("pyfuse3"))' 2>/dev/null || true)
[[ "$have" == "$VERSION+$LOCAL" ]] && exit 0
echo "[install] pyfuse3 $VERSION+$LOCAL (sdist + third_party/pyfuse3 patches; was: ${have:-none})" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps --no-binary pyfuse3 "pyfuse3==$VERSION" -d "$work" \
  2> >(grep -v "^WARNING: Location 'file://" >&2)
tar -xzf "$work"/pyfuse3-$VERSION.tar.gz -C "$work"
for p in "${PATCHES[@]}"; do
  patch -s -p1 -d "$work/pyfuse3-$VERSION" <"$ROOT/third_party/pyfuse3/$p"
done
SETUPTOOLS_SCM_PRETEND_VERSION="$VERSION+$LOCAL" "$PY" -m pip install -q --no-deps "$work/pyfuse3-$VERSION" \
  2> >(grep -v "^WARNING: Location 'file://" >&2)
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("pyfuse3"))')
[[ "$have" == "$VERSION+$LOCAL" ]] || { echo "[install] pyfuse3 build failed: have $have" >&2; exit 1; }

#!/usr/bin/env bash
# Build and install pyfuse3 3.5.0 with datahub's patches (read by inode, queued requests
# answered in C, and -- against the project's libfuse 3.17 -- FUSE passthrough with opens of
# published backing files answered in C, by a C thread that reads /dev/fuse, requests over
# io_uring, one queue per CPU, and LOOKUPs of names answered before answered in C) into a venv
# (see third_party/pyfuse3/README.md). Idempotent: does nothing when that build is installed.
#   scripts/build_pyfuse3.sh [PYTHON] [LIBFUSE_PREFIX]
# PYTHON defaults to .venv/bin/python. LIBFUSE_PREFIX (scripts/build_libfuse.sh; default: the
# venv's opt/libfuse) holds libfuse >= 3.16: the build then links it (rpath) and adds
# passthrough.patch, fastopen.patch, fastloop.patch, uring.patch and lookup.patch (datahub.7). Without it, the system libfuse and no
# passthrough (datahub.2).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${1:-$ROOT/.venv/bin/python}
VENV_DIR=$("$PY" -c 'import sys; print(sys.prefix)')
LIBFUSE=${2:-$VENV_DIR/opt/libfuse}
VERSION=3.5.0
if [[ -e "$LIBFUSE/lib/pkgconfig/fuse3.pc" ]]; then
  LOCAL=datahub.7
  PATCHES=(no-open-read.patch burst.patch passthrough.patch fastopen.patch fastloop.patch uring.patch lookup.patch)  # in this order
  export PKG_CONFIG_PATH="$LIBFUSE/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # -L first: some Pythons (Debian's) put the multiarch dir, with the system libfuse, before pkg-config's
  export LDFLAGS="-L$LIBFUSE/lib -Wl,-rpath,$LIBFUSE/lib${LDFLAGS:+ $LDFLAGS}"
else
  LOCAL=datahub.2
  PATCHES=(no-open-read.patch burst.patch)
  echo "[install] no libfuse >= 3.16 at $LIBFUSE: pyfuse3 without FUSE passthrough (system libfuse)" >&2
fi
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

#!/usr/bin/env bash
# Build and install datahub's pyfuse3 from its source tree, third_party/pyfuse3 (pyfuse3 3.5.0's
# sdist plus datahub's commits: reads by inode, queued requests answered in C, FUSE passthrough,
# opens of published backing files answered in C, a C thread that reads /dev/fuse, requests over
# io_uring, LOOKUPs answered in C; see third_party/pyfuse3/README.md). No source download: only
# the tree. Its build requirements (Cython, setuptools, setuptools-scm) are the exact wheels
# third_party/pyfuse3/build-requirements.txt pins by version and sha256, installed into a
# temporary directory; the build runs without pip's build isolation, which would take whatever
# the index holds that day.
#   scripts/build_pyfuse3.sh [PYTHON] [LIBFUSE_PREFIX]
# PYTHON defaults to .venv/bin/python. LIBFUSE_PREFIX (scripts/build_libfuse.sh; default: the
# venv's opt/libfuse) holds libfuse >= 3.17: the build links it (rpath) and the C fast path is in.
# Without it the same tree is built against the system's libfuse (3.14 on Debian 12), where the
# fast path compiles out (pyfuse3.PASSTHROUGH, FASTLOOP and URING are False; see the README).
# Idempotent: the installed version is 3.5.0+datahub.t<hash>, the hash of the build's inputs (the
# tree's sources, the pinned build requirements, this script, which libfuse); the same hash
# installed means nothing to do, so a venv rebuilds once after any change to them and then skips.
# The built wheel is kept in a cache outside the checkout (DATAHUB_BUILD_CACHE, default
# ~/.cache/datahub), under that hash plus the Python and the compiler that built it: a fresh
# venv of the same inputs at the same path (a CI run's fresh clone) installs it in seconds
# instead of ~3 min of Cython and gcc on one core. The hash names libfuse's path (the .so's
# rpath, after symlinks), so a checkout elsewhere builds its own. DATAHUB_BUILD_CACHE=none: never cached.
# PYFUSE3_SANITIZE=DIR (scripts/sanitize.sh): build with ASan and UBSan instead and install into DIR
# (pip --target), not into the venv; importing it needs libasan preloaded (see the README).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${1:-$ROOT/.venv/bin/python}
# The venv's physical path: a worktree whose .venv is a symlink to another checkout's venv names
# the same libfuse, so the key below (and the .so's rpath) stays the same and nothing rebuilds.
VENV_DIR=$(cd "$("$PY" -c 'import sys; print(sys.prefix)')" && pwd -P)
LIBFUSE=${2:-$VENV_DIR/opt/libfuse}
[[ -d "$LIBFUSE" ]] && LIBFUSE=$(cd "$LIBFUSE" && pwd -P)
TREE=$ROOT/third_party/pyfuse3
BUILD_REQS=$TREE/build-requirements.txt
VERSION=3.5.0
SANITIZE=${PYFUSE3_SANITIZE:-}
if [[ -e "$LIBFUSE/lib/pkgconfig/fuse3.pc" ]]; then
  FUSE_LIB="libfuse $(PKG_CONFIG_PATH="$LIBFUSE/lib/pkgconfig" pkg-config --modversion fuse3) at $LIBFUSE"
  export PKG_CONFIG_PATH="$LIBFUSE/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # -L first: some Pythons (Debian's) put the multiarch dir, with the system libfuse, before pkg-config's
  export LDFLAGS="-L$LIBFUSE/lib -Wl,-rpath,$LIBFUSE/lib${LDFLAGS:+ $LDFLAGS}"
else
  FUSE_LIB="system libfuse $(pkg-config --modversion fuse3)"
  echo "[install] no libfuse >= 3.17 at $LIBFUSE: pyfuse3 against the $FUSE_LIB, without its C fast path" >&2
fi
# The build's inputs: what is copied below. Generated files (Cython's __init__.c, objects,
# caches) are never inputs, so a stale one can neither be built nor change the key.
inputs() {
  (cd "$TREE" && find pyproject.toml setup.cfg README.rst LICENSE util Include src -type f \
    ! -path 'src/pyfuse3/__init__.c' ! -name '*.so' ! -name '*.o' ! -name '*.pyc' \
    ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z)
}
KEY=$({ inputs | (cd "$TREE" && xargs -0 sha256sum); sha256sum <"$BUILD_REQS"; sha256sum <"$0"; echo "$FUSE_LIB${SANITIZE:+ sanitize}"; } \
  | sha256sum | cut -c1-12)
WANT="$VERSION+datahub.t$KEY"
PIP_TO=()
if [[ -n "$SANITIZE" ]]; then
  mkdir -p "$SANITIZE"
  SANITIZE=$(cd "$SANITIZE" && pwd)
  PIP_TO=(--target "$SANITIZE" --upgrade)
  export CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1${CFLAGS:+ $CFLAGS}"
  export LDFLAGS="-fsanitize=address,undefined${LDFLAGS:+ $LDFLAGS}"
fi
installed() {
  if [[ -n "$SANITIZE" ]]; then
    cat "$SANITIZE/.datahub-version" 2>/dev/null || true
  else
    "$PY" -c 'import importlib.metadata as m; print(m.version("pyfuse3"))' 2>/dev/null || true
  fi
}
have=$(installed)
[[ "$have" == "$WANT" ]] && exit 0
# the wheel cache (not for the sanitizer's build): this key's wheel, if a build left one
CACHE_ROOT=${DATAHUB_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/datahub}
CACHED=
if [[ -z "$SANITIZE" && "$CACHE_ROOT" != none ]]; then
  BUILT_BY=$({ "$PY" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform())'; "${CC:-gcc}" --version | head -1; \
    echo "CFLAGS=${CFLAGS:-} LDFLAGS=${LDFLAGS:-}"; } | sha256sum | cut -c1-12)
  CACHED=$CACHE_ROOT/pyfuse3/$KEY-$BUILT_BY
  for wheel in "$CACHED"/pyfuse3-*.whl; do
    [[ -f "$wheel" ]] || continue
    if "$PY" -m pip install -q --no-deps --force-reinstall "$wheel" >/dev/null 2>&1 && [[ "$(installed)" == "$WANT" ]]; then
      echo "[install] pyfuse3 $WANT from the build cache ($CACHED; $FUSE_LIB)" >&2
      exit 0
    fi
    echo "[install] pyfuse3: the cached wheel $wheel did not install; building" >&2
  done
fi
echo "[install] pyfuse3 $WANT from third_party/pyfuse3 ($FUSE_LIB${SANITIZE:+, ASan+UBSan into $SANITIZE}; was: ${have:-none})" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/pyfuse3"
inputs | (cd "$TREE" && xargs -0 cp --parents -t "$work/pyfuse3")
# the build environment: exactly the pinned wheels (any other version or file fails the hash check)
if ! "$PY" -m pip install --no-deps --require-hashes --only-binary :all: --target "$work/build-env" \
  -r "$BUILD_REQS" >"$work/build-env.log" 2>&1; then
  grep -v "^WARNING: Location 'file://" "$work/build-env.log" | tail -30 >&2
  echo "[install] pyfuse3's build requirements ($BUILD_REQS) could not be installed" >&2
  exit 1
fi
# --check-build-dependencies: the pins must still satisfy pyproject.toml's [build-system] requires.
# A wheel first (kept in the cache), then installed: the same build as an install of the tree.
if ! PYTHONPATH="$work/build-env${PYTHONPATH:+:$PYTHONPATH}" SETUPTOOLS_SCM_PRETEND_VERSION="$WANT" \
  "$PY" -m pip wheel -v --no-deps --no-build-isolation --check-build-dependencies -w "$work/wheel" \
  "$work/pyfuse3" >"$work/build.log" 2>&1 ||
  ! "$PY" -m pip install --no-deps --force-reinstall "${PIP_TO[@]}" "$work"/wheel/pyfuse3-*.whl >>"$work/build.log" 2>&1; then
  grep -v "^WARNING: Location 'file://" "$work/build.log" | tail -60 >&2
  echo "[install] pyfuse3 build failed (the log's end above)" >&2
  exit 1
fi
# what the compiler said: warnings are shown, not hidden by pip
grep -E "warning:" "$work/build.log" | sort -u | sed 's/^/[install] pyfuse3: /' >&2 || true
[[ -z "$SANITIZE" ]] || echo "$WANT" >"$SANITIZE/.datahub-version"
have=$(installed)
[[ "$have" == "$WANT" ]] || { echo "[install] pyfuse3 build failed: have $have, want $WANT" >&2; exit 1; }
if [[ -n "$CACHED" ]]; then  # whole or not at all (a copy, then a rename); a cache that cannot be written is skipped
  { mkdir -p "$CACHED" && cp "$work"/wheel/pyfuse3-*.whl "$CACHED/.tmp.$$" &&
    mv "$CACHED/.tmp.$$" "$CACHED/$(basename "$work"/wheel/pyfuse3-*.whl)"; } 2>/dev/null ||
    echo "[install] pyfuse3: could not keep the wheel in $CACHED (built and installed all the same)" >&2
fi

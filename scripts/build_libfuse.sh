#!/usr/bin/env bash
# Build libfuse 3.17 (FUSE passthrough, which Debian 12's 3.14 lacks) from Debian's fuse3
# source package into $VENV/opt/libfuse: only the library and headers, nothing system-wide
# (its soname, libfuse3.so.4, differs from the system's libfuse3.so.3). pyfuse3 is then built
# against it with an rpath (scripts/build_pyfuse3.sh). Idempotent: stamp-based.
#   scripts/build_libfuse.sh [VENV]        (default: .venv)
# Needs: meson, ninja-build, dpkg-dev and a deb-src entry for the suite that has FUSE3_DEB
# (scripts/install.sh adds /etc/apt/sources.list.d/datahub-fuse3-src.sources). Exits non-zero
# when it cannot build; callers then keep the system libfuse (no passthrough).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV=${1:-$ROOT/.venv}
FUSE3_DEB=3.17.2-3   # Debian trixie's fuse3 source package (upstream 3.17.2 + Debian's patches)
PREFIX=$VENV/opt/libfuse
STAMP=$VENV/.stamps/libfuse
want="fuse3=$FUSE3_DEB"
built=$(cat "$STAMP" 2>/dev/null || true)  # "$want", or "$want fallback: fuse3=V" when the pin was gone
if [[ -e "$PREFIX/lib/pkgconfig/fuse3.pc" && ("$built" == "$want" || "$built" == "$want fallback: "*) ]]; then
  exit 0
fi
echo "[install] libfuse from Debian source package fuse3 $FUSE3_DEB into $PREFIX" >&2
work=$(mktemp -d)
# a failed build leaves no prefix behind: build_pyfuse3.sh then uses the system libfuse
trap 'rc=$?; rm -rf "$work"; if ((rc)); then rm -rf "$PREFIX"; fi' EXIT
chmod 755 "$work"  # apt's sandbox user may write the download here
# The pinned version first; if the archive has moved on (a point release replaces it), the
# newest fuse3 source of 3.16 or later it offers, said out loud.
fetch() { (cd "$work" && apt-get source -q "fuse3=$1" >/dev/null 2>>"$work/apt.log"); }
if ! fetch "$FUSE3_DEB"; then
  newest=$(apt-cache showsrc fuse3 2>/dev/null | awk '/^Version:/ {print $2}' |
    while read -r v; do dpkg --compare-versions "$v" ge 3.16 && echo "$v"; done | sort -V | tail -1)
  [[ -n "$newest" ]] && echo "[install] fuse3 $FUSE3_DEB is gone from the archive; building $newest" >&2
  [[ -n "$newest" ]] && fetch "$newest" || { cat "$work/apt.log" >&2; exit 1; }
  built_as="$want fallback: fuse3=$newest"
fi
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'fuse3-*' | head -1)
[[ -n "$src" ]] || { echo "[install] fuse3 source not unpacked" >&2; exit 1; }
rm -rf "$PREFIX"
meson setup "$work/build" "$src" --prefix="$PREFIX" --libdir=lib --buildtype=release \
  -Dutils=false -Dexamples=false -Dtests=false -Ddisable-mtab=true >"$work/meson.log" 2>&1 || {
  tail -20 "$work/meson.log" >&2; exit 1; }
ninja -C "$work/build" install >"$work/ninja.log" 2>&1 || { tail -20 "$work/ninja.log" >&2; exit 1; }
grep -q fuse_passthrough_open "$PREFIX/include/fuse3/fuse_lowlevel.h"
mkdir -p "$(dirname "$STAMP")"
echo "${built_as:-$want}" >"$STAMP"

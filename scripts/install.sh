#!/usr/bin/env bash
# Install everything datahub needs on a Debian 12 machine (root, Python 3.11).
# Idempotent and quick when already done: each step is skipped when its stamp matches.
#   scripts/install.sh            apt packages + .venv + pip packages + project (editable)
# Environment: PYTHON (default python3.11 or python3), VENV (default .venv), SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
STAMPS=$VENV/.stamps
log() { printf '[install] %s\n' "$*" >&2; }
# this machine's pip config names optional local wheel dirs that may not exist; hide only that noise
quiet_pip() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v "^WARNING: Location 'file://" >&2); }
# A long quiet step says it is alive: "[install] LABEL: still running (N s)" every 30 s.
# Why: pip -q prints nothing for minutes on a first install, which looked hung (newuser13).
with_heartbeat() {
  local label=$1 start=$SECONDS ticker rc=0
  shift
  (  # its sleep is killed with it: a sleep left behind would hold a pipe on stderr open
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do sleep 30 & nap=$!; wait "$nap"; log "$label: still running ($((SECONDS - start)) s)"; done
  ) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  return "$rc"
}

# --- Debian packages -----------------------------------------------------------------
# fuse3/libfuse3-dev/pkg-config: pyfuse3 (built from source) and real mounts;
# chromium + chromium-driver: browser tests; ceph-*/radosgw/python3-rados: the real Ceph
# shared tier used by tests (scripts/ceph-dev/ceph-up.sh would install them too);
# rclone/s3fs: peers in the mount benchmark; strace: counts the requests reaching a FUSE
# daemon (tests/fuse/test_warm_requests.py); meson/ninja-build/dpkg-dev: libfuse 3.17 from
# Debian's source package (scripts/build_libfuse.sh, FUSE passthrough); libsqlite3-dev: the
# catalog's C insert path (scripts/build_put_rows.sh).
APT_PKGS=(fuse3 libfuse3-dev pkg-config gcc python3-dev chromium chromium-driver
          ceph-mon ceph-osd ceph-mgr ceph-common radosgw python3-rados rclone s3fs strace
          meson ninja-build dpkg-dev libsqlite3-dev)
if [[ "${SKIP_APT:-0}" != 1 ]]; then
  APT_LOG_TAG=install scripts/apt_ensure.sh "${APT_PKGS[@]}"
fi

# --- libfuse 3.17 (FUSE passthrough; Debian 12 ships 3.14) ------------------------------
# Built from Debian trixie's fuse3 source package into $VENV/opt/libfuse; its deb-src entry
# lives in its own sources file. Any failure keeps the system libfuse: mounts then run
# without passthrough (logged by the mount, docs/fuse.md).
FUSE_SRC_LIST=/etc/apt/sources.list.d/datahub-fuse3-src.sources
# The Debian archive this machine already uses (its first "deb" source), so no host is named here.
debian_archive() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [[ -n "$uri" ]] || uri=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  printf '%s' "$uri"
}
if [[ "${SKIP_APT:-0}" != 1 && ! -e "$FUSE_SRC_LIST" ]]; then
  archive=$(debian_archive)
  if [[ -n "$archive" ]]; then
    log "adding $FUSE_SRC_LIST (deb-src trixie from $archive: fuse3 3.17 source package)"
    cat >"$FUSE_SRC_LIST" <<SRC
# datahub scripts/install.sh: Debian's fuse3 3.17 source (FUSE passthrough), built into .venv/opt/libfuse
Types: deb-src
URIs: $archive
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null || log "apt-get update failed"
  else
    log "no Debian archive found in the apt sources: libfuse 3.17 cannot be fetched (no FUSE passthrough)"
  fi
fi

# --- virtualenv + pip packages ----------------------------------------------------------
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
mkdir -p "$STAMPS"
want=$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -c1-16)
# datahub's dependencies and dev tools but pyfuse3 (built here from third_party/pyfuse3), one a line
deps_but_pyfuse3() {
  "$VENV/bin/python" - <<'PY'
import re
import tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
for req in project["dependencies"] + project["optional-dependencies"]["dev"]:
    if re.split(r"[^A-Za-z0-9._-]", req, maxsplit=1)[0].lower() != "pyfuse3":
        print(req)
PY
}
# The pip packages install beside the two builds, in the background. Why: the builds compile
# on one core for minutes (pyfuse3's Cython and its one 55,000-line C file: ~3.5 min of a
# first install under load) while pip unpacks torch and ~100 wheels on the other; one after
# the other, a fresh clone's (CI's) install took ~9 min under load. pip upgrades itself first,
# alone: build_pyfuse3.sh runs this venv's pip. pyfuse3 is left out of the background step, and
# `pip install -e .[dev]` runs after both, so it finds the built pyfuse3 3.5.0 installed (never
# the index's) and everything else too.
deps_pid=
if [[ "$(cat "$STAMPS/pip" 2>/dev/null)" != "$want" ]]; then
  log "pip install (constraints: requirements/constraints.txt): pip, then torch and datahub's dependencies (beside the libfuse and pyfuse3 builds), then datahub; a few minutes the first time"
  quiet_pip install -q --upgrade pip >/dev/null
  mapfile -t deps < <(deps_but_pyfuse3)
  (
    # torch: exactly 2.13.0, a CPU wheel on local disk; any other spec pulls a multi-GB CUDA build.
    with_heartbeat "pip install torch==2.13.0 (CPU)" quiet_pip install -q -c requirements/constraints.txt 'torch==2.13.0'
    with_heartbeat "pip install datahub's dependencies" quiet_pip install -q -c requirements/constraints.txt "${deps[@]}"
  ) &
  deps_pid=$!
fi
# both builds are quiet for minutes on a first install (no output under load for ~4 min: newuser15)
with_heartbeat "libfuse 3.17 build" scripts/build_libfuse.sh "$VENV" || log "libfuse 3.17 not built: pyfuse3 uses the system libfuse (no FUSE passthrough)"
# pyfuse3 built from its source tree third_party/pyfuse3: before `pip install -e .[dev]` below,
# which then finds pyfuse3 3.5.0 installed. A no-op when that build is already there.
build_rc=0
with_heartbeat "pyfuse3 build" scripts/build_pyfuse3.sh "$VENV/bin/python" || build_rc=$?
if [[ -n "$deps_pid" ]]; then  # a failed build still waits: pip is never left writing the venv
  wait "$deps_pid" || { log "pip install of datahub's dependencies failed (its messages above)"; exit 1; }
fi
((build_rc == 0)) || exit "$build_rc"
if [[ -n "$deps_pid" ]]; then
  with_heartbeat "pip install -e .[dev]" quiet_pip install -q -c requirements/constraints.txt -e ".[dev]"
  echo "$want" > "$STAMPS/pip"
fi

# --- the catalog's C insert path (datahub/catalog/_put_rows.c, docs/catalog.md) -----------------
# Built into the source tree (the editable install imports it from there); without it commits
# insert the same rows through SQLite's json_each statement.
scripts/build_put_rows.sh "$VENV/bin/python" || log "datahub/catalog/_put_rows not built: commits insert through json_each (tests/catalog/test_put_rows.py fails)"

# --- npm packages (browser tests) ----------------------------------------------------------
# axe-core: the accessibility checker tests/browser injects into each page. Pinned; fetched
# from the npm registry into $VENV/node (inside the checkout). Debian's npm only if none is there.
AXE_CORE_VERSION=4.14.1
if [[ "$(cat "$STAMPS/npm" 2>/dev/null)" != "axe-core@$AXE_CORE_VERSION" ]]; then
  command -v npm >/dev/null || APT_LOG_TAG=install scripts/apt_ensure.sh npm
  log "npm install axe-core@$AXE_CORE_VERSION"
  npm install --silent --no-audit --no-fund --save-exact --prefix "$VENV/node" "axe-core@$AXE_CORE_VERSION" >/dev/null
  echo "axe-core@$AXE_CORE_VERSION" > "$STAMPS/npm"
fi

# --- generated code (CSI gRPC stubs), if the CSI package ships a generator ---------------
if [[ -x csi/gen_proto.sh ]]; then csi/gen_proto.sh "$VENV/bin/python"; fi

# --- bytecode of the project's own packages -------------------------------------------------
# Installed editable, they are compiled at import; where PYTHONDONTWRITEBYTECODE is set (this
# kind of machine) nothing is kept, and every daemon, CLI call and test subprocess compiled
# ~90 modules again at its start (a remote mount's daemon: ready in 1.2 s with bytecode, 4.6 s
# without; docs/benchmarks.md "cold-dir"). Compiled here once; changed files only on a re-run,
# and Python recompiles any source newer than its bytecode, so it is never stale.
"$VENV/bin/python" -m compileall -q -j 0 datahub fuse_adapter csi labelx >/dev/null
log "ok: $VENV"

#!/usr/bin/env bash
# `make image-clean`: drop the built images, their working containers, the layer cache and the
# debootstrap base (all under var/images/). The next `make image` starts from debootstrap.
set -euo pipefail
source "$(dirname "$0")/common.sh"
if command -v buildah >/dev/null && [[ -d $IMAGES_DIR/storage ]]; then
  bld rm --all >/dev/null 2>&1 || true
  bld rmi --all --force >/dev/null 2>&1 || true
fi
# what buildah left: storage directories only (the test's binds live in their own mount
# namespaces and are gone), never anything mounted
if findmnt -rno TARGET | grep -q "^$IMAGES_DIR/"; then
  echo "[image] something is still mounted under $IMAGES_DIR; not deleting it" >&2
  exit 1
fi
rm -rf "$IMAGES_DIR"

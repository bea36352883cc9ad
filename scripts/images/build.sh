#!/usr/bin/env bash
# `make image`: build the CSI plugin image (csi/deploy/Dockerfile) and the server image
# (csi/deploy/server/Dockerfile) on this machine from the repository alone, with Debian's
# buildah (chroot isolation, vfs storage under var/images/: no daemon, no registry), on the
# local Debian 12 base from scripts/images/base.sh. Prints each image's size.
#   scripts/images/build.sh [csi|server]...      (default: both, one after the other)
set -euo pipefail
source "$(dirname "$0")/common.sh"
# the image tools are Debian's; `make install` does not need them, so this step fetches them
APT_LOG_TAG=image "$(dirname "$0")/../apt_ensure.sh" buildah podman debootstrap
"$(dirname "$0")/base.sh"
cd "$ROOT"
# the commit `datahub --version` names inside the image (-dirty: tracked files differ from it)
commit=$(git rev-parse HEAD)
[[ -z $(git status --porcelain --untracked-files=no) ]] || commit+=-dirty
# pip inside the build trusts what the host trusts: a host behind a TLS-inspecting proxy has
# its CA in the system bundle only. The bundle and a pip.conf naming it are bind-mounted into
# each RUN step (buildah -v), never copied into a layer.
cat >"$IMAGES_DIR/pip.conf" <<PIPCONF
[global]
cert = /run/datahub-build-ca.crt
PIPCONF
trust=(-v "$HOST_CA_BUNDLE:/run/datahub-build-ca.crt:ro" -v "$IMAGES_DIR/pip.conf:/etc/pip.conf:ro")
targets=("$@")
((${#targets[@]})) || targets=(csi server)
for target in "${targets[@]}"; do
  case $target in
    csi) file=csi/deploy/Dockerfile tag=$CSI_IMAGE ;;
    server) file=csi/deploy/server/Dockerfile tag=$SERVER_IMAGE ;;
    *) echo "[image] unknown image '$target' (csi or server)" >&2; exit 2 ;;
  esac
  echo "[image] building $tag from $file (commit $commit)" >&2
  start=$SECONDS
  # --layers: unchanged steps (apt, libfuse, pip) are reused when only the code changed
  bld build --isolation chroot --layers --pull=never --format docker \
    "${trust[@]}" --build-arg "BASE=$BASE_IMAGE" --build-arg "DATAHUB_COMMIT=$commit" \
    -f "$file" -t "$tag" . >"$IMAGES_DIR/build-$target.log" 2>&1 ||
    { tail -40 "$IMAGES_DIR/build-$target.log" >&2; echo "[image] $tag failed: $IMAGES_DIR/build-$target.log" >&2; exit 1; }
  size=$(ctr image inspect --format '{{.Size}}' "$tag")
  echo "[image] $tag: $((size / 1000000)) MB ($((SECONDS - start)) s; log $IMAGES_DIR/build-$target.log)" >&2
done

#!/usr/bin/env bash
# Make the local stand-in for python:3.11-slim-bookworm: a Debian 12 root file system from
# Debian's own packages (debootstrap; no container registry), imported as the local image
# localhost/datahub-base:bookworm. Both Dockerfiles build on it with --build-arg BASE=...
# It carries what the public base carries that the Dockerfiles rely on: python3 3.11 with
# venv/ensurepip, ca-certificates, and deb822 apt sources in /etc/apt/sources.list.d/debian.sources.
# Updated to bookworm-updates/-security at creation. Cached: the rootfs tarball under var/images/ is reused until deleted (make image-clean).
#   scripts/images/base.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
BASE_TAR=$IMAGES_DIR/base-bookworm.tar
# Never tar or delete through a mount: take down whatever is mounted below $1, deepest first.
unmount_under() {
  { findmnt -rno TARGET | grep "^$1/" || true; } | sort -r | while read -r m; do umount -l "$m"; done
}
if [[ ! -s $BASE_TAR ]]; then
  APT_LOG_TAG=image "$(dirname "$0")/../apt_ensure.sh" debootstrap
  root=$IMAGES_DIR/base-rootfs
  if [[ -e $root ]]; then unmount_under "$root"; rm -rf --one-file-system "$root"; fi
  echo "[image] debootstrap bookworm (minbase + python3, python3-venv, ca-certificates) into $root" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$DEBIAN_MIRROR" >"$IMAGES_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$IMAGES_DIR/debootstrap.log" >&2; exit 1; }
  unmount_under "$root"  # debootstrap has been seen to leave the target's /proc mounted
  # the same apt sources layout as Debian's official images (deb822), which the CSI
  # Dockerfile reads to add its deb-src entry
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  # the security and point-release updates, as the public image carries them (DNS for the
  # chroot from the host's resolv.conf, removed again: the image gets its own at run time)
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  unshare --mount sh -c "mount -t proc proc '$root/proc' && chroot '$root' sh -c \
    'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get -y -q upgrade && apt-get clean'" \
    >>"$IMAGES_DIR/debootstrap.log" 2>&1 || { tail -20 "$IMAGES_DIR/debootstrap.log" >&2; exit 1; }
  rm -f "$root/etc/resolv.conf"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
  unmount_under "$root"
  tar --numeric-owner --one-file-system -C "$root" -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf --one-file-system "$root"
fi
if ! ctr image exists "$BASE_IMAGE"; then
  ctr import -q --change 'CMD ["python3"]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
fi
echo "[image] base $BASE_IMAGE ($(du -m "$BASE_TAR" | cut -f1) MB rootfs tar)" >&2

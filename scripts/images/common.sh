# Shared settings of scripts/images/*.sh (sourced). Everything the image builds write lives
# under var/images/ (gitignored): the base rootfs tarball and the container storage (vfs driver,
# chroot isolation: no daemon, no overlay mounts, no user namespaces needed).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
IMAGES_DIR=${DATAHUB_IMAGES_DIR:-$ROOT/var/images}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HOST_CA_BUNDLE=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
BASE_IMAGE=localhost/datahub-base:bookworm
CSI_IMAGE=localhost/datahub-csi:dev
SERVER_IMAGE=localhost/datahub-server:dev
mkdir -p "$IMAGES_DIR"
STORAGE=(--root "$IMAGES_DIR/storage" --runroot "$IMAGES_DIR/run" --storage-driver vfs)
# podman with the project's storage
ctr() { podman "${STORAGE[@]}" "$@"; }
# buildah with the project's storage
bld() { buildah "${STORAGE[@]}" "$@"; }

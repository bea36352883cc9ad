#!/usr/bin/env bash
# Install the Debian packages named here that are not installed yet. A fresh machine's apt
# lists may be stale, so the lists are updated first, but only when something is missing.
# The one way this repository installs Debian packages: scripts/install.sh (`make install`)
# and scripts/images/build.sh (`make image`, whose tools `make install` does not need).
#   scripts/apt_ensure.sh PKG...      (APT_LOG_TAG names the caller in the log line)
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]})) || exit 0
printf '[%s] apt-get install %s\n' "${APT_LOG_TAG:-apt}" "${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Installs, only when missing, the Debian packages nodelet's build and tests need:
# native addons (sd-notify needs libsystemd-dev; node-gyp needs python3, make, g++),
# the container runtime and image tools, and systemd-nspawn + debootstrap for the
# end-to-end suite. Idempotent; fast when everything is there.
set -euo pipefail
pkgs=(libsystemd-dev python3 make g++ util-linux iproute2 procps openssl
      containerd runc umoci busybox-static containernetworking-plugins
      debootstrap systemd-container inotify-tools python3-prometheus-client dbus-daemon strace)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "deps.sh: missing packages ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "deps.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

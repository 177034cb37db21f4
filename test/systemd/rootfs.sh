#!/usr/bin/env bash
# Builds (once per machine) the Debian bookworm root filesystem that the systemd end-to-end
# tests boot with systemd-nspawn, and prints its path on stdout.
#
#   NODELET_TEST_ROOTFS   where the rootfs lives (default /var/cache/nodelet-test/rootfs-bookworm)
#   NODELET_TEST_MIRROR   Debian mirror (default: the first URIs of /etc/apt/sources.list.d/debian.sources)
#
# Idempotent and safe to run concurrently: an flock serializes builders, the tree is built in a
# temporary directory beside the target and renamed into place only when complete (a build that
# died half-way leaves no half-built rootfs that the next run would trust). The box is started
# with --volatile=overlay, so this tree is never modified by a test.
# Exits non-zero with the reason on stderr when it cannot (not root, no network, apt failure).
set -euo pipefail

# Bump when the package list or the tweaks below change: an older cached tree is then rebuilt.
ROOTFS_VERSION=2
PACKAGES=systemd,systemd-sysv,dbus,libsystemd0,util-linux,procps

die() { echo "rootfs.sh: $*" >&2; exit 1; }

target=${NODELET_TEST_ROOTFS:-/var/cache/nodelet-test/rootfs-bookworm}
stamp="$target/.nodelet-rootfs-version"

if [[ -f $stamp && $(cat "$stamp") == "$ROOTFS_VERSION" ]]; then
  echo "$target"
  exit 0
fi

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap and systemd-nspawn need it); uid is $(id -u)"

# Host tools: debootstrap builds the tree, systemd-container provides systemd-nspawn.
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
if ((${#missing[@]})); then
  echo "rootfs.sh: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed"
fi

parent=$(dirname "$target")
mkdir -p "$parent"
exec 9>"$parent/.$(basename "$target").lock"
flock 9

# Another builder may have finished while we waited for the lock.
if [[ -f $stamp && $(cat "$stamp") == "$ROOTFS_VERSION" ]]; then
  echo "$target"
  exit 0
fi

mirror=${NODELET_TEST_MIRROR:-}
if [[ -z $mirror && -f /etc/apt/sources.list.d/debian.sources ]]; then
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
if [[ -z $mirror && -f /etc/apt/sources.list ]]; then
  mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

tmp=$(mktemp -d "$parent/.build-$(basename "$target").XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT

echo "rootfs.sh: debootstrap bookworm from $mirror into $tmp (about 45 s, once per machine)" >&2
start=$SECONDS
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
  tail -n 30 "$tmp.log" >&2
  rm -f "$tmp.log"
  die "debootstrap failed (log above)"
}
rm -f "$tmp.log"

# Units a test box does not need: timers that would run apt in the middle of a test, consoles,
# networking (the box shares the host's network namespace), and services that only slow boot.
for unit in \
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
  getty@.service console-getty.service serial-getty@.service getty.target \
  systemd-networkd.service systemd-networkd.socket systemd-networkd-wait-online.service \
  systemd-resolved.service systemd-timesyncd.service \
  systemd-hwdb-update.service systemd-firstboot.service systemd-random-seed.service \
  systemd-update-utmp.service systemd-update-utmp-runlevel.service \
  ldconfig.service man-db.timer; do
  ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
done
# A stable machine identity; systemd-nspawn would otherwise generate one per boot anyway.
: >"$tmp/etc/machine-id"
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*

echo "$ROOTFS_VERSION" >"$tmp/.nodelet-rootfs-version"
chmod 755 "$tmp"
# Replace an outdated tree (never a complete current one: the stamp check above ran under the lock).
if [[ -e $target ]]; then
  old=$(mktemp -d "$parent/.old-$(basename "$target").XXXXXX")
  mv "$target" "$old/tree"
  rm -rf --one-file-system "$old"
fi
mv "$tmp" "$target"
trap - EXIT
echo "rootfs.sh: built $target in $((SECONDS - start)) s" >&2
echo "$target"

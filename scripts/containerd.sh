#!/usr/bin/env bash
# Brings up a PRIVATE containerd for nodelet's development, tests and quick start.
#
#   scripts/containerd.sh [start]   install what is missing, build + import the local images,
#                                   start containerd unless it already answers; prints the
#                                   CRI endpoint (unix:///...) as the LAST stdout line.
#   scripts/containerd.sh stop      stop the containerd this script started (pidfile PID only)
#   scripts/containerd.sh status    "running <pid> <endpoint>" (exit 0) or "stopped" (exit 3)
#
# Everything lives under one base directory (env NODELET_CONTAINERD_DIR, default
# /var/lib/nodelet-dev/containerd): config.toml, containerd.sock, root/, state/, cni/,
# images/, containerd.log, containerd.pid, lock. Two base directories give two independent
# containerds. Needs root. Safe to run concurrently (flock on <base>/lock) and fast when
# containerd is already up.
#
#   scripts/containerd.sh subnet    prints this base directory's pod range (e.g. 10.244.17.0/24),
#                                   claiming one when it has none yet (for --cluster-cidr)
#
# Pod network: a CNI config in <base>/cni/net.d (Debian's containernetworking-plugins in
# /usr/lib/cni): `bridge` (isGateway) with `host-local` IPAM, then `portmap` and `loopback`.
# Each base directory claims its own /24 in POD_NET_PREFIX (10.244.<n>.0/24 by default;
# the claim is the file <CLAIMS>/<n> holding the base directory, and a range some route on
# the machine overlaps is skipped), and names its bridge `nodelet<n>` and its network
# `nodelet-<n>` (IPAM state in /var/lib/cni/networks/nodelet-<n>), so parallel containerds
# never share a bridge, a range or IPAM state. The bridge and the IPAM state outlive
# containerd: whoever runs pods removes them once the pods are gone (the config must stay
# until then, FACTS.md).
#
# Facts behind the choices (see FACTS.md): containerd 1.6 on these machines needs
# restrict_oom_score_adj (no CAP_SYS_RESOURCE), resolves short image names under
# docker.io (so images are imported with full names), and runs hostNetwork pods without any
# CNI config. No registry is ever contacted: the sandbox (pause) image is local.
set -euo pipefail

BASE="${NODELET_CONTAINERD_DIR:-/var/lib/nodelet-dev/containerd}"
SOCK="$BASE/containerd.sock"
ENDPOINT="unix://$SOCK"
PIDFILE="$BASE/containerd.pid"
LOG="$BASE/containerd.log"
CONFIG="$BASE/config.toml"
LOCK="$BASE/lock"
PROJECT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START_TIMEOUT="${NODELET_CONTAINERD_START_TIMEOUT:-60}"
# Pod ranges are $POD_NET_PREFIX.<n>.0/24 (n = 1..254): a private /16 that nothing on
# these machines routes (checked again at claim time). Override: NODELET_POD_NET_PREFIX.
POD_NET_PREFIX="${NODELET_POD_NET_PREFIX:-10.244}"
CLAIMS="${NODELET_CNI_CLAIMS_DIR:-/var/lib/nodelet-dev/cni-claims}"
CNI_CONF="$BASE/cni/net.d/10-nodelet.conflist"
BUSYBOX_IMAGE="docker.io/local/busybox"
PAUSE_IMAGE="docker.io/local/pause"

log() { echo "containerd.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$BASE" == /* ]] || die "NODELET_CONTAINERD_DIR must be an absolute path, got '$BASE'"
[[ "$POD_NET_PREFIX" =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)$ ]] && ((10#${POD_NET_PREFIX##*.} <= 255)) ||
  die "NODELET_POD_NET_PREFIX must be the first two octets of a private /16 (such as 10.244), got '$POD_NET_PREFIX'"
# sun_path holds 107 bytes; the ttrpc socket is the longest path containerd binds here.
((${#SOCK} + 6 <= 107)) || die "NODELET_CONTAINERD_DIR '$BASE' is too long for a unix socket path ($SOCK.ttrpc exceeds 107 bytes)"

# PID from the pidfile when that process is alive and is the containerd of THIS base
# directory (`containerd --config $CONFIG`); empty otherwise. A recycled PID can belong to
# any process, another base directory's containerd included (seen: a stopped containerd's
# PID reused by a benchmark's containerd, and `start` then waited for the wrong socket).
our_pid() {
  [[ -f "$PIDFILE" ]] || return 0
  local pid
  pid="$(tr -dc '0-9' <"$PIDFILE")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "containerd" ]] || return 0
  [[ "$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null)" == *$'\n'"$CONFIG"* ]] || return 0
  echo "$pid"
}

# True when the CRI runtime service answers Version on the socket. Uses the project's own
# gRPC client and proto when installed (the real CRI call); otherwise asks containerd
# whether its CRI plugin loaded.
cri_answers() {
  [[ -S "$SOCK" ]] || return 1
  if command -v node >/dev/null && [[ -d "$PROJECT/node_modules/@grpc/grpc-js" && -f "$PROJECT/proto/api.proto" ]]; then
    (cd "$PROJECT" && SOCK="$SOCK" timeout 10 node --input-type=module -e '
      import grpc from "@grpc/grpc-js";
      import loader from "@grpc/proto-loader";
      const def = loader.loadSync("proto/api.proto", { keepCase: false, enums: String, defaults: true });
      const pkg = grpc.loadPackageDefinition(def).runtime.v1;
      const c = new pkg.RuntimeService("unix://" + process.env.SOCK, grpc.credentials.createInsecure());
      c.Version({ version: "v1" }, { deadline: Date.now() + 2000 }, (err, res) => {
        c.close();
        if (err || !res.runtimeName) process.exit(1);
        process.exit(0);
      });
    ' >/dev/null 2>&1)
  else
    timeout 10 ctr --address "$SOCK" plugins ls 2>/dev/null | awk '$2 == "io.containerd.grpc.v1.cri" { found = ($4 == "ok") } END { exit found ? 0 : 1 }'
  fi
}

status() {
  local pid
  pid="$(our_pid)"
  if [[ -n "$pid" ]] && cri_answers; then
    echo "running $pid $ENDPOINT"
    return 0
  fi
  if [[ -n "$pid" ]]; then
    echo "starting-or-unresponsive $pid $ENDPOINT"
    return 3
  fi
  echo "stopped"
  return 3
}

stop() {
  local pid i
  pid="$(our_pid)"
  if [[ -z "$pid" ]]; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -d "/proc/$pid" ]] || break
    sleep 0.1
  done
  if [[ -d "/proc/$pid" ]]; then
    log "containerd $pid ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -d "/proc/$pid" ]] || break
      sleep 0.1
    done
  fi
  rm -f "$PIDFILE"
  log "stopped containerd $pid"
}

install_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  command -v umoci >/dev/null || missing+=(umoci)
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/portmap && -x /usr/lib/cni/loopback ]] || missing+=(containernetworking-plugins)
  # The images copy /bin/busybox into a scratch rootfs, so it must be the static build.
  if ! { [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; }; then missing+=(busybox-static); fi
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; } ||
    die "apt-get install ${missing[*]} failed"
}

# overlayfs is containerd's default and fastest snapshotter; some filesystems (or a
# nested overlay) refuse it, so try a real mount once and remember the answer.
choose_snapshotter() {
  local f="$BASE/snapshotter"
  if [[ -s "$f" ]]; then cat "$f"; return; fi
  local t="$BASE/overlay-probe" s=native
  rm -rf "$t"
  mkdir -p "$t/lower" "$t/upper" "$t/work" "$t/merged"
  if mount -t overlay overlay -o "lowerdir=$t/lower,upperdir=$t/upper,workdir=$t/work" "$t/merged" 2>/dev/null; then
    umount "$t/merged"
    s=overlayfs
  fi
  rm -rf "$t"
  echo "$s" >"$f"
  echo "$s"
}

write_config() {
  local snapshotter="$1" tmp
  mkdir -p "$BASE/root" "$BASE/state" "$BASE/cni/net.d" "$BASE/opt"
  tmp="$(mktemp "$BASE/config.toml.XXXXXX")"
  cat >"$tmp" <<EOF
# Written by scripts/containerd.sh; rewritten on every start.
version = 2
root = "$BASE/root"
state = "$BASE/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$BASE/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE:latest"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$BASE/cni/net.d"
EOF
  mv -f "$tmp" "$CONFIG"
}

# True when a route on the machine (besides the default route and our own bridge's)
# overlaps the /24 $1.
range_in_use() {
  local net="$1" bridge="$2"
  { ip -4 route show root "$net"; ip -4 route show match "$net"; } 2>/dev/null |
    grep -v -e '^default' -e " dev $bridge " -e " dev $bridge\$" | grep -q .
}

# Prints this base directory's index n (1..254), claiming one when it has none: the first
# free index from a hash of the path on, skipping ranges the machine already routes. A
# claim whose base directory is gone is free again. Serialized by a lock in CLAIMS.
pod_net_index() {
  mkdir -p "$CLAIMS"
  (
    flock -w 60 8 || die "timed out waiting for the lock $CLAIMS/.lock"
    f="" n="" i="" start="" owner=""
    for f in "$CLAIMS"/*; do
      [[ -f "$f" && "$(cat "$f")" == "$BASE" ]] && { basename "$f"; exit 0; }
    done
    start=$(($(cksum <<<"$BASE" | cut -d' ' -f1) % 254))
    for ((i = 0; i < 254; i++)); do
      n=$(((start + i) % 254 + 1))
      if [[ -f "$CLAIMS/$n" ]]; then
        owner="$(cat "$CLAIMS/$n")"
        [[ -d "$owner" ]] && continue
      fi
      range_in_use "$POD_NET_PREFIX.$n.0/24" "nodelet$n" && continue
      echo "$BASE" >"$CLAIMS/$n"
      echo "$n"
      exit 0
    done
    die "no free /24 left in $POD_NET_PREFIX.0.0/16 (claims in $CLAIMS)"
  ) 8>>"$CLAIMS/.lock"
}

# The pod network's CNI config, replaced only when it changed: containerd picks a new file
# up without a restart, and a sandbox is torn down with the config it was made under.
write_cni_config() {
  local n subnet tmp
  n="$(pod_net_index)"
  subnet="$POD_NET_PREFIX.$n.0/24"
  mkdir -p "$BASE/cni/net.d"
  tmp="$(mktemp "$CNI_CONF.XXXXXX")"
  cat >"$tmp" <<CONFLIST
{
  "cniVersion": "0.4.0",
  "name": "nodelet-$n",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "nodelet$n",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$subnet", "gateway": "$POD_NET_PREFIX.$n.1" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
CONFLIST
  chmod 0644 "$tmp"
  # A containerd started by an older version of this script looks for plugins in
  # <base>/cni/bin: link them there rather than restarting it under its pods.
  if [[ -f "$CONFIG" ]] && grep -qF "bin_dir = \"$BASE/cni/bin\"" "$CONFIG"; then
    mkdir -p "$BASE/cni/bin"
    local p
    for p in bridge host-local portmap loopback; do ln -sfn "/usr/lib/cni/$p" "$BASE/cni/bin/$p"; done
  fi
  if cmp -s "$tmp" "$CNI_CONF"; then rm -f "$tmp"; else mv -f "$tmp" "$CNI_CONF"; fi
  echo "$subnet" >"$BASE/pod-subnet"
}

launch() {
  local pid i
  rm -f "$SOCK" "$SOCK.ttrpc"
  echo "==== $(date -Is) starting containerd (config $CONFIG)" >>"$LOG"
  # New session so the caller's terminal/process group signals do not reach it; fd 9 (the
  # lock) is closed in the child or containerd would hold the lock for its whole life.
  setsid containerd --config "$CONFIG" </dev/null >>"$LOG" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  for ((i = 0; i < START_TIMEOUT * 5; i++)); do
    if [[ ! -d "/proc/$pid" ]]; then
      log "containerd exited during startup; last lines of $LOG:"
      tail -n 30 "$LOG" >&2
      rm -f "$PIDFILE"
      exit 1
    fi
    if cri_answers; then
      log "containerd $pid answers on $ENDPOINT"
      return 0
    fi
    sleep 0.2
  done
  log "containerd $pid did not answer the CRI Version call on $SOCK within ${START_TIMEOUT}s; last lines of $LOG:"
  tail -n 30 "$LOG" >&2
  exit 1
}

# Builds an OCI layout tarball with umoci: a scratch image holding the static busybox and
# its applet links. $1 = name, $2.. = the image's command.
build_image() {
  local name="$1"
  shift
  local dir="$BASE/images/$name" tarball="$BASE/images/$name.tar"
  [[ -s "$tarball" ]] && return 0
  rm -rf "$dir"
  mkdir -p "$dir"
  umoci init --layout "$dir/oci"
  umoci new --image "$dir/oci:latest"
  umoci unpack --image "$dir/oci:latest" "$dir/bundle" >/dev/null
  local rootfs="$dir/bundle/rootfs"
  mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/root"
  chmod 1777 "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ "$applet" == busybox ]] || ln -sf busybox "$rootfs/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  umoci repack --image "$dir/oci:latest" "$dir/bundle" >/dev/null
  local cfg=(--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.workingdir /)
  local arg
  for arg in "$@"; do cfg+=(--config.cmd "$arg"); done
  umoci config --image "$dir/oci:latest" "${cfg[@]}" >/dev/null
  umoci gc --layout "$dir/oci"
  tar -C "$dir/oci" -cf "$tarball.tmp" .
  mv -f "$tarball.tmp" "$tarball"
  rm -rf "$dir"
}

images_present() {
  local have
  have="$(ctr --address "$SOCK" -n k8s.io images ls -q 2>/dev/null)" || return 1
  grep -qx "$BUSYBOX_IMAGE:latest" <<<"$have" && grep -qx "$PAUSE_IMAGE:latest" <<<"$have"
}

ensure_images() {
  local snapshotter="$1" have
  have="$(ctr --address "$SOCK" -n k8s.io images ls -q 2>/dev/null || true)"
  if ! grep -qx "$BUSYBOX_IMAGE:latest" <<<"$have"; then
    build_image busybox /bin/sh
    ctr --address "$SOCK" -n k8s.io images import --snapshotter "$snapshotter" --base-name "$BUSYBOX_IMAGE" "$BASE/images/busybox.tar" >&2
  fi
  if ! grep -qx "$PAUSE_IMAGE:latest" <<<"$have"; then
    # PID 1 in its own PID namespace ignores SIGTERM unless it handles it: trap it, and
    # sleep in a child so the trap runs at once.
    build_image pause /bin/sh -c 'trap "exit 0" TERM INT; while :; do sleep 2147483647 & wait $!; done'
    ctr --address "$SOCK" -n k8s.io images import --snapshotter "$snapshotter" --base-name "$PAUSE_IMAGE" "$BASE/images/pause.tar" >&2
  fi
}

start() {
  [[ $EUID -eq 0 ]] || die "must run as root (containerd and runc need it)"
  mkdir -p "$BASE"
  exec 9>>"$LOCK"
  flock -w 300 9 || die "timed out waiting for the lock $LOCK held by another containerd.sh"
  local pid snapshotter
  pid="$(our_pid)"
  if [[ -n "$pid" ]] && [[ -s "$CNI_CONF" ]] && cri_answers && images_present; then
    echo "$ENDPOINT"
    return 0
  fi
  install_packages
  snapshotter="$(choose_snapshotter)"
  write_cni_config
  if [[ -z "$pid" ]]; then
    write_config "$snapshotter"
    launch
  elif ! cri_answers; then
    # Ours but not answering yet (for example still loading): give it the start timeout.
    local i
    for ((i = 0; i < START_TIMEOUT * 5; i++)); do
      cri_answers && break
      [[ -d "/proc/$pid" ]] || die "containerd $pid exited; see $LOG"
      sleep 0.2
    done
    cri_answers || { tail -n 30 "$LOG" >&2; die "containerd $pid does not answer on $SOCK"; }
  fi
  mkdir -p "$BASE/images"
  ensure_images "$snapshotter"
  echo "$ENDPOINT"
}

case "${1:-start}" in
  start) start ;;
  stop)
    mkdir -p "$BASE"
    exec 9>>"$LOCK"
    flock -w 300 9 || die "timed out waiting for the lock $LOCK"
    stop
    ;;
  status) status ;;
  subnet)
    [[ $EUID -eq 0 ]] || die "must run as root"
    mkdir -p "$BASE"
    n="$(pod_net_index)"
    echo "$POD_NET_PREFIX.$n.0/24"
    ;;
  *) die "unknown subcommand '$1' (expected start, stop, status or subnet)" ;;
esac

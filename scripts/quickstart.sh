#!/usr/bin/env bash
# nodelet's main job on a fresh Debian bookworm machine with Node 20, as root:
# installs what is missing, builds nodelet, brings up a private containerd
# (scripts/containerd.sh: local busybox and pause images, its own socket), writes a
# standalone configuration into one folder, and runs nodelet in the foreground with the
# example static pods of examples/static-pods. Ctrl-C stops it (the pods stay in
# containerd, and the next run adopts them, as a restarted kubelet does).
#
# Everything lives under NODELET_QUICKSTART_DIR (default /tmp/nodelet-quickstart):
#   kubelet.yaml   the configuration (see `nodelet config view --show-origin`)
#   manifests/     staticPodPath: add, edit or delete a Pod manifest here while it runs
#   root/          --root-dir (checkpoints land in root/checkpoints)
#   pki/           --cert-dir (serving certificate), plus a client CA and client cert
#   kubelet.lock   --lock-file
# Extra arguments go to nodelet (for example `-v 4`).
set -euo pipefail
PROJECT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${NODELET_QUICKSTART_DIR:-/tmp/nodelet-quickstart}"
cd "$PROJECT"

scripts/deps.sh
[[ -d node_modules && node_modules/.package-lock.json -nt package-lock.json ]] || npm ci --no-audit --no-fund
npm run build --silent
endpoint="$(scripts/containerd.sh start | tail -n 1)"

mkdir -p "$DIR/manifests" "$DIR/root" "$DIR/pki"
for f in examples/static-pods/*.yaml; do
  [[ -e "$DIR/manifests/$(basename "$f")" ]] || cp "$f" "$DIR/manifests/"
done

# A client CA and one client certificate, so the HTTPS server (x509 authentication,
# as the kubelet's) can be called: curl --cacert pki/kubelet.crt --cert pki/client.crt ...
if [[ ! -s "$DIR/pki/client.crt" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
    -subj "/CN=nodelet-quickstart-ca" -keyout "$DIR/pki/ca.key" -out "$DIR/pki/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/O=system:masters/CN=quickstart-admin" -keyout "$DIR/pki/client.key" -out "$DIR/pki/client.csr" 2>/dev/null
  openssl x509 -req -in "$DIR/pki/client.csr" -CA "$DIR/pki/ca.crt" -CAkey "$DIR/pki/ca.key" \
    -CAcreateserial -days 365 -out "$DIR/pki/client.crt" 2>/dev/null
  chmod 0600 "$DIR/pki/"*.key
fi

cat > "$DIR/kubelet.yaml" <<EOF
# Written by scripts/quickstart.sh: nodelet standalone on the private containerd.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $DIR/manifests
containerRuntimeEndpoint: $endpoint
readOnlyPort: 10255
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $DIR/pki/ca.crt
authorization:
  mode: AlwaysAllow
EOF

cat >&2 <<EOF
quickstart: nodelet runs standalone; its files are in $DIR
  curl -s http://127.0.0.1:10255/pods                  # the node's pods and their status
  curl -s http://127.0.0.1:10248/healthz?verbose       # health checks
  curl -s --cacert $DIR/pki/kubelet.crt --cert $DIR/pki/client.crt --key $DIR/pki/client.key \\
       -X POST https://127.0.0.1:10250/checkpoint/default/hello-$(hostname)/hello
  (containerd 1.6 cannot checkpoint: that answers 500 with the runtime's reason)
EOF
exec dist/nodelet/main.js --config "$DIR/kubelet.yaml" --root-dir "$DIR/root" --cert-dir "$DIR/pki" \
  --lock-file "$DIR/kubelet.lock" "$@"

#!/usr/bin/env bash
# The whole test suite, from a fresh Debian bookworm machine with Node 20, as root:
# packages (scripts/deps.sh), npm dependencies, build, then every test (unit, process,
# containerd, control plane, systemd-nspawn end-to-end). Extra arguments go to vitest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
[[ -d node_modules && node_modules/.package-lock.json -nt package-lock.json ]] || npm ci --no-audit --no-fund
npm test -- "$@"

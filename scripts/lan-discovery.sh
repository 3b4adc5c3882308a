#!/usr/bin/env bash
# LAN discovery conformance (issue #19): BigPeer's mDNS/DNS-SD against python-zeroconf, with real
# processes in network namespaces this script creates (a bridge with multicast snooping off): no
# multicast ever reaches a real interface. Needs root and iproute2.
#
#   scripts/lan-discovery.sh                       # builds bigpeer unless BIGPEER_BIN is set
#   BIGPEER_BIN=path/to/bigpeer scripts/lan-discovery.sh
#
# The checks are in scripts/lan_discovery_test.py (discovery, nodes pairing) and scripts/lan_mesh_test.py
# (small peers meshing with a node: links, multi-hop sync, presence, policy, remote execution). python-zeroconf is installed once into a venv
# under $BIGPEER_ZEROCONF_VENV (default /tmp/bigpeer-zeroconf-venv).
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "==> network namespaces need root: running again with sudo"
  exec sudo --preserve-env=BIGPEER_BIN,BIGPEER_ZEROCONF_VENV,PATH "$0" "$@"
fi
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"
venv="${BIGPEER_ZEROCONF_VENV:-/tmp/bigpeer-zeroconf-venv}"
if ! "$venv/bin/python" -c 'import zeroconf' 2>/dev/null; then
  echo "==> installing python-zeroconf into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'zeroconf>=0.130,<1'
fi
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build --product bigpeer >/dev/null
  bin=$(swift build --show-bin-path)/bigpeer
fi
"$venv/bin/python" -u scripts/lan_discovery_test.py "$bin"
exec "$venv/bin/python" -u scripts/lan_mesh_test.py "$bin"

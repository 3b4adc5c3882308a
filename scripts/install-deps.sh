#!/usr/bin/env bash
# Installs the Debian packages BigPeer builds and runs with. Idempotent: does nothing when all are present.
# Needs root (or sudo). The Swift 6 toolchain itself does not come from apt: see README.md.
set -euo pipefail

packages=(postgresql postgresql-contrib libpq-dev zlib1g-dev libssl-dev pkg-config ca-certificates curl python3 python3-venv util-linux iproute2 nftables dbus-daemon python3-dbus python3-gi)
if [ -n "${BIGPEER_EXTRA_PACKAGES:-}" ]; then read -r -a extra <<<"$BIGPEER_EXTRA_PACKAGES"; packages+=("${extra[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "==> installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Debian starts a system-wide cluster on install; BigPeer runs its own and does not need it.
  if command -v pg_lsclusters >/dev/null && [ "${BIGPEER_KEEP_SYSTEM_CLUSTER:-}" != 1 ]; then
    $sudo systemctl disable --now postgresql >/dev/null 2>&1 || true
  fi
fi

if ! command -v swift >/dev/null; then
  for d in /opt/swift/usr/bin /usr/share/swift/usr/bin; do [ -x "$d/swift" ] && export PATH="$d:$PATH"; done
fi
if ! command -v swift >/dev/null; then
  echo "error: the Swift 6 toolchain is not installed (it is not an apt package)." >&2
  echo "       Install it from https://www.swift.org/install/linux/ (Debian 12), then run this again." >&2
  exit 1
fi

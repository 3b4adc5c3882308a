#!/usr/bin/env bash
# Builds a Debian package of BigPeer: the binary (release, the Swift runtime linked in, its commit
# and build date built in: `bigpeer version`), the systemd unit, a default configuration, and a
# `bigpeer` system user created on install. The configuration (/etc/bigpeer/bigpeer.yaml) and the
# environment file are conffiles: an upgrade keeps the operator's edits.
#
#   scripts/package-deb.sh                   # release build, writes dist/bigpeer_VERSION_ARCH.deb
#   scripts/package-deb.sh --binary PATH     # package an existing binary instead (tests)
#   scripts/package-deb.sh --out DIR
# Prints the path of the .deb on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

binary=""
out="dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ -z "$binary" ]; then
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "==> building bigpeer (release, commit $commit)" >&2
  swift build -c release --product bigpeer --static-swift-stdlib --scratch-path .build-package \
    -Xcc "-DBIGPEER_COMMIT=\"$commit\"" -Xcc "-DBIGPEER_BUILD_DATE=\"$date\"" >&2
  binary="$(swift build -c release --scratch-path .build-package --show-bin-path)/bigpeer"
fi
[ -x "$binary" ] || { echo "not an executable: $binary" >&2; exit 1; }

version=$("$binary" version | sed -n 's/^bigpeer //p')
arch=$(dpkg --print-architecture)
root=$(mktemp -d /tmp/bigpeer-deb.XXXXXX)
trap 'rm -rf "$root"' EXIT

install -D -m 0755 "$binary" "$root/usr/bin/bigpeer"
install -D -m 0644 deploy/systemd/bigpeer.service "$root/lib/systemd/system/bigpeer.service"
install -D -m 0600 deploy/systemd/bigpeer.env.example "$root/etc/bigpeer/bigpeer.env"
install -D -m 0644 deploy/bigpeer.yaml "$root/etc/bigpeer/bigpeer.yaml"
install -D -m 0644 deploy/README.md "$root/usr/share/doc/bigpeer/DEPLOY.md"
install -D -m 0644 README.md "$root/usr/share/doc/bigpeer/README.md"
for doc in docs/OPERATIONS.md docs/API.md docs/PROTOCOL.md docs/DQL.md; do
  [ -f "$doc" ] && install -D -m 0644 "$doc" "$root/usr/share/doc/bigpeer/$(basename "$doc")"
done
mkdir -p "$root/DEBIAN"
# The shared libraries the binary links directly (its NEEDED entries), mapped to their Debian
# packages; what those need in turn, their own packages depend on.
depends=$(LC_ALL=C readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r soname; do
  path=$(ldconfig -p | awk -v s="$soname" '$1 == s {print $NF; exit}')
  [ -n "$path" ] && { dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true; }
done | cut -d: -f1 | sort -u | grep -v '^libc6$\|^libgcc-s1$\|^libstdc++6$' | paste -sd, | sed 's/,/, /g' || true)
cat >"$root/DEBIAN/control" <<EOF
Package: bigpeer
Version: $version
Architecture: $arch
Maintainer: BigPeer developers <bigpeer@localhost>
Depends: libc6, libgcc-s1, libstdc++6${depends:+, $depends}, adduser
Recommends: postgresql
Section: database
Priority: optional
Description: big peer of an offline-first, peer-to-peer document database
 BigPeer stores documents in PostgreSQL, answers DQL over a REST API shaped like
 Ditto's HTTP API v4, and replicates CRDT deltas to small peers over WebSocket,
 LAN TCP and BLE. Without DATABASE_URL it runs a private PostgreSQL cluster
 (the postgresql package) under /var/lib/bigpeer.
EOF
printf '%s\n' /etc/bigpeer/bigpeer.yaml /etc/bigpeer/bigpeer.env >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent passwd bigpeer >/dev/null; then
    adduser --system --group --home /var/lib/bigpeer --no-create-home --shell /usr/sbin/nologin bigpeer >/dev/null
  fi
  install -d -o bigpeer -g bigpeer -m 0700 /var/lib/bigpeer
  if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
fi
exit 0
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then systemctl stop bigpeer.service >/dev/null 2>&1 || true; fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
# The data in /var/lib/bigpeer and the bigpeer user stay after a purge: a database is not
# something a package manager should delete.
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
mkdir -p "$out"
deb="$out/bigpeer_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
echo "$deb"

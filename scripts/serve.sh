#!/usr/bin/env bash
# Sets up everything and runs the server: installs missing Debian packages, builds in release mode,
# and starts `bigpeer serve` on 127.0.0.1:8080 (extra arguments are passed on, e.g. --port 9000).
# With no DATABASE_URL, bigpeer starts its own PostgreSQL under ./.bigpeer/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"
echo "==> building (release)"
swift build -c release --product bigpeer
exec .build/release/bigpeer serve "$@"

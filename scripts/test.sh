#!/usr/bin/env bash
# Runs the whole test suite: installs missing Debian packages, checks the dependency graph has no
# SwiftNIO, builds, and runs every test (unit, integration against a real PostgreSQL the tests start
# themselves, conformance), then schemathesis against a running server (scripts/schemathesis.sh)
# the independent Python sync client (scripts/python-sync-client.sh), and LAN discovery against
# python-zeroconf and avahi in network namespaces (scripts/lan-discovery.sh, scripts/avahi-interop.sh:
# need root, as CI runs), and every file under deploy/ with its ecosystem's tools (scripts/deploy-check.sh).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

echo "==> dependency check (no SwiftNIO)"
scripts/check-no-nio.sh

echo "==> building"
swift build --build-tests

# The heavy suites (each starts servers or clusters of its own, moves tens of MB, holds 10,000
# sockets, runs CPU bombs or eight CLI peers at once, runs four server processes, or checks timing
# on a 2-core machine) run
# after the rest, one test at a time: run beside 700 other tests they starved each other (connect
# timeouts, 2 s tokens expiring before use), and the rest finish sooner without them.
heavy='LargeResultTests|PrivateClusterTests|SyncSessionBoundsTests|AnalystRoleTests|InMemoryEvaluationEndpointTests|IdleConnectionsTests|CLISyncSimulationTests|PostgresCopyStreamTests|GroupCommitGatherTests|UpstreamReplicationTests|SeveralHopsTests|UpstreamCredentialsTests|ReplicationSimulationTests|LinkFaultTests|RelayedSubscriptionsTests|UpstreamReplacedTests|KnownStatesReplicationTests|SeveralInstancesTests|LANLinkTests|PresenceTests|BLELinkTests|LinkSwitch|MixedLinkSimulation'

echo "==> swift test (in parallel, all but the heavy suites)"
swift test --skip-build --skip "$heavy" 2>&1 | tee /tmp/bigpeer-swift-test.log
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "swift test failed (exit $status)"; exit "$status"; }

echo "==> swift test (the heavy suites, one test at a time)"
swift test --skip-build --filter "$heavy" --no-parallel 2>&1 | tee /tmp/bigpeer-swift-test-heavy.log
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "swift test (heavy suites) failed (exit $status)"; exit "$status"; }

echo "==> Autobahn WebSocket conformance (quick, limits) against bigpeer serve --enable-echo"
BIGPEER_BIN="$PWD/.build/debug/bigpeer" scripts/autobahn.sh quick
BIGPEER_BIN="$PWD/.build/debug/bigpeer" scripts/autobahn.sh limits

echo "==> schemathesis (the running server against openapi.yaml)"
BIGPEER_BIN="$(swift build --show-bin-path)/bigpeer" scripts/schemathesis.sh

echo "==> independent Python sync client (docs/PROTOCOL.md, docs/CRDT.md §12) against a running server"
BIGPEER_BIN="$(swift build --show-bin-path)/bigpeer" scripts/python-sync-client.sh

echo "==> LAN discovery (mDNS against python-zeroconf, in network namespaces this script creates)"
BIGPEER_BIN="$(swift build --show-bin-path)/bigpeer" scripts/lan-discovery.sh

echo "==> avahi interop (avahi-daemon and avahi-browse in network namespaces; CI installs avahi)"
BIGPEER_BIN="$(swift build --show-bin-path)/bigpeer" scripts/avahi-interop.sh

echo "==> deploy/ files (systemd-analyze, hadolint, compose references, kubernetes-validate, nginx -t) and two instances behind a real nginx"
BIGPEER_BIN="$(swift build --show-bin-path)/bigpeer" scripts/deploy-check.sh

echo "==> Prometheus exposition (promtool check metrics against a running server)"
scripts/metrics-check.sh

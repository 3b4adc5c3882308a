#!/usr/bin/env bash
# Checks the Prometheus exposition of a real `bigpeer serve --metrics-port` with Prometheus's own
# `promtool check metrics` (Debian package `prometheus`, installed here): runs MetricsEndpointTests
# with BIGPEER_REQUIRE_PROMTOOL=1, so a missing promtool fails instead of skipping the check.
#
#   scripts/metrics-check.sh        # after `swift build --build-tests`
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

BIGPEER_EXTRA_PACKAGES="prometheus" scripts/install-deps.sh
# Debian starts a Prometheus server on install; only promtool is used here.
if [ "$(id -u)" -eq 0 ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
command -v promtool >/dev/null || { echo "promtool not found after installing prometheus" >&2; exit 1; }

BIGPEER_REQUIRE_PROMTOOL=1 swift test --skip-build --filter 'MetricsEndpointTests|ExpositionWriterTests|LogFormatTests'

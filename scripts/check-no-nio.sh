#!/usr/bin/env bash
# Proves the product does not depend on SwiftNIO or anything built on it: the resolved dependency
# graph names none of those packages, and the built binary has no NIO symbols.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='swift-nio|vapor|hummingbird|postgres-nio|async-http-client|websocket-kit|compress-nio|swift-websocket'
deps=$(swift package show-dependencies --format flatlist 2>/dev/null || swift package show-dependencies)
if echo "$deps" | grep -Eiq "$forbidden"; then
  echo "error: a NIO-based package is in the dependency graph:" >&2
  echo "$deps" | grep -Ei "$forbidden" >&2
  exit 1
fi
echo "dependency graph: $(echo "$deps" | tr '\n' ' ')"
bin=${1:-.build/debug/bigpeer}
if [ -x "$bin" ]; then
  if nm "$bin" 2>/dev/null | grep -q 'NIOCore\|NIOPosix\|7NIOCore'; then
    echo "error: $bin contains NIO symbols" >&2; exit 1
  fi
  echo "binary $bin: no NIO symbols"
fi

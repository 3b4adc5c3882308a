#!/usr/bin/env bash
# avahi interop (issue #19): BigPeer's mDNS responder and browser against avahi, the mDNS stack of
# most Linux machines, with real processes in two network namespaces on a veth pair this script
# creates (no multicast reaches a real interface). Each namespace runs its own avahi-daemon on a
# private D-Bus (a mount namespace hides the host's /run/avahi-daemon). Checks:
#
#   1. avahi-browse on the other machine resolves the node's NAME._bigpeer._tcp: SRV port, address,
#      TXT v/pk/g/role.
#   2. An avahi-daemon on the node's own machine keeps working beside it (both bind UDP 5353 with
#      SO_REUSEPORT): it resolves the node too, and `bigpeer lan browse` there finds a service
#      avahi-publish registers on the other machine.
#   3. SIGTERM on the node: avahi-browse reports the service gone (our goodbye) within 2 s.
#
# Needs root, iproute2, util-linux (unshare), dbus-daemon, avahi-daemon and avahi-utils. Without
# avahi it says so and skips, except under CI=true, where it installs them first (starting no
# daemon: Debian's policy-rc.d mechanism). It does not install avahi on a developer's machine,
# where the package would enable a system-wide mDNS daemon.
#
#   BIGPEER_BIN=path/to/bigpeer scripts/avahi-interop.sh
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "==> network namespaces need root: running again with sudo"
  exec sudo --preserve-env=BIGPEER_BIN,CI,PATH "$0" "$@"
fi
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

if ! command -v avahi-daemon >/dev/null || ! command -v avahi-browse >/dev/null; then
  if [ "${CI:-}" != true ]; then
    echo "==> avahi interop: skipped (avahi-daemon/avahi-utils not installed; CI installs them)"
    exit 0
  fi
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends avahi-daemon avahi-utils dbus >/dev/null
  [ -n "$guard" ] && rm -f "$guard"
fi

if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build --product bigpeer >/dev/null
  bin=$(swift build --show-bin-path)/bigpeer
fi

tag="av$(( $$ % 100000 ))"
a="${tag}a" b="${tag}b"
work=$(mktemp -d /tmp/bigpeer-avahi-XXXXXX)
chmod 755 "$work"
node_pid=""

cleanup() {
  for n in "$a" "$b"; do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    [ -n "$pids" ] && kill $pids 2>/dev/null || true
  done
  sleep 0.5
  for n in "$a" "$b"; do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "==> avahi interop: FAILED: $*"
  for f in "$work"/*.log; do echo "--- $(basename "$f"):"; tail -c 3000 "$f"; done
  exit 1
}

wait_for() {  # wait_for SECONDS FILE TEXT
  local deadline=$(( $(date +%s) + $1 ))
  until grep -qF -- "$3" "$2" 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

ip netns add "$a"
ip netns add "$b"
ip link add "${tag}x" netns "$a" type veth peer name "${tag}y" netns "$b"
ip netns exec "$a" sh -c "ip link set lo up; ip addr add 10.97.0.1/24 dev ${tag}x; ip link set ${tag}x up"
ip netns exec "$b" sh -c "ip link set lo up; ip addr add 10.97.0.2/24 dev ${tag}y; ip link set ${tag}y up"

# One avahi-daemon per namespace, each on a D-Bus of its own.
for side in a b; do
  ns=$a; [ "$side" = b ] && ns=$b
  cat > "$work/dbus-$side.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$work/bus-$side</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/></policy>
</busconfig>
EOF
  cat > "$work/avahi-$side.conf" <<EOF
[server]
host-name=avahi-host-$side
use-ipv4=yes
use-ipv6=yes
enable-dbus=yes
[publish]
publish-workstation=no
EOF
  ip netns exec "$ns" unshare -m --propagation private sh -c "
    mkdir -p /run/avahi-daemon && mount -t tmpfs tmpfs /run/avahi-daemon
    dbus-daemon --config-file=$work/dbus-$side.conf --fork --nopidfile
    for i in \$(seq 50); do [ -S $work/bus-$side ] && break; sleep 0.1; done
    export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$work/bus-$side
    exec avahi-daemon --no-drop-root --no-chroot --no-rlimits -f $work/avahi-$side.conf
  " > "$work/avahi-$side.log" 2>&1 &
done
wait_for 20 "$work/avahi-a.log" "Server startup complete" || fail "avahi-daemon did not start in $a"
wait_for 20 "$work/avahi-b.log" "Server startup complete" || fail "avahi-daemon did not start in $b"

# The node, on the machine that also runs avahi-daemon A.
ip netns exec "$a" "$bin" serve --port 18095 --threads 1 --insecure-dev --data-dir "$work/node" --log-level info \
  --lan --device-name avahi-ship --sync-group 5 > "$work/node.log" 2>&1 &
node_pid=$!
wait_for 90 "$work/node.log" "advertised on the LAN" || fail "the node did not advertise"

browse() {  # browse SIDE NAME: avahi-browse's resolved lines for NAME, via that side's daemon
  local ns=$a; [ "$1" = b ] && ns=$b
  DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus-$1" ip netns exec "$ns" timeout 10 avahi-browse -rtp _bigpeer._tcp 2>>"$work/browse.log" \
    | grep "^=" | grep ";$2;_bigpeer._tcp;" || true
}

# 1. avahi on the other machine resolves the node.
found=""
for _ in 1 2 3; do found=$(browse b avahi-ship | grep ";10.97.0.1;4040;" || true); [ -n "$found" ] && break; done
[ -n "$found" ] || fail "avahi-browse in $b did not resolve avahi-ship at 10.97.0.1:4040"
line=$(echo "$found" | head -1)
for t in '"v=1"' '"g=5"' '"role=node"' '"pk='; do
  echo "$line" | grep -qF -- "$t" || fail "TXT lacks $t: $line"
done
echo "==> avahi-browse (other machine) resolved the node: $line"

# 2. avahi-daemon on the node's own machine still works, and sees the node over loopback multicast.
[ -n "$(browse a avahi-ship)" ] || fail "the avahi-daemon beside the node did not resolve it"
echo "==> avahi-daemon beside the node resolves it too"
DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus-b" ip netns exec "$b" avahi-publish -s avahi-peer _bigpeer._tcp 4041 \
  v=1 pk=00112233aabbccdd g=5 role=peer > "$work/publish.log" 2>&1 &
wait_for 10 "$work/publish.log" "Established under name" || fail "avahi-publish did not establish its service"
seen=$(ip netns exec "$a" "$bin" lan browse --timeout 3 2>>"$work/browse.log" | grep '"name":"avahi-peer"' | tail -1 || true)
[ -n "$seen" ] || fail "bigpeer lan browse (beside avahi-daemon) did not find avahi-publish's service"
for t in '"port":4041' '"10.97.0.2"' '"pk":"00112233aabbccdd"' '"role":"peer"'; do
  echo "$seen" | grep -qF -- "$t" || fail "bigpeer lan browse: no $t in $seen"
done
echo "==> bigpeer lan browse found avahi-publish's service: $seen"

# 3. SIGTERM: avahi on the other machine sees the service go.
DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus-b" ip netns exec "$b" avahi-browse -p _bigpeer._tcp > "$work/watch.log" 2>&1 &
wait_for 10 "$work/watch.log" ";avahi-ship;_bigpeer._tcp;" || fail "avahi-browse (watching) did not list the node"
sent=$(date +%s%N)
kill -TERM "$node_pid"
wait_for 2 "$work/watch.log" "-;${tag}y;IPv4;avahi-ship;_bigpeer._tcp;" || fail "avahi did not see the node's goodbye within 2 s"
echo "==> SIGTERM: avahi saw the service removed after $(( ($(date +%s%N) - sent) / 1000000 )) ms"
wait "$node_pid" || true
grep -q "Server startup complete" "$work/avahi-a.log" && [ -n "$(ip netns pids "$a")" ] || fail "avahi-daemon beside the node stopped"
echo "==> avahi interop: all checks passed"

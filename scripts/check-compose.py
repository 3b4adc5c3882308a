#!/usr/bin/env python3
"""Checks deploy/compose.yaml without a Docker daemon (`docker compose config` needs the compose
plugin, which this machine lacks): the file parses, the services the README names are there, every
reference (services, secrets, volumes, build contexts, bind mounts) resolves, the BigPeer services
have a health check and a stop grace period longer than the server's drain, and the nginx service
rewrites the upstream of deploy/nginx/bigpeer.conf to the two instances.
Usage: check-compose.py deploy/compose.yaml   (exit status 1 with the problems listed)"""
import os
import re
import sys

import yaml


def seconds(value):
    m = re.fullmatch(r"(\d+)(s|m)?", str(value))
    if not m:
        return None
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def main(path):
    base = os.path.dirname(os.path.abspath(path))
    doc = yaml.safe_load(open(path))
    problems = []
    services = doc.get("services") or {}
    for name in ("postgres", "bigpeer-1", "bigpeer-2", "nginx"):
        if name not in services:
            problems.append(f"service {name} is missing")
    secrets = doc.get("secrets") or {}
    volumes = doc.get("volumes") or {}
    for name, secret in secrets.items():
        if not os.path.isfile(os.path.join(base, secret.get("file", ""))):
            problems.append(f"secret {name}: file {secret.get('file')} does not exist")
    for name, svc in services.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            if dep not in services:
                problems.append(f"{name} depends on unknown service {dep}")
            cond = (spec or {}).get("condition", "service_started")
            if cond not in ("service_started", "service_healthy", "service_completed_successfully"):
                problems.append(f"{name}: unknown depends_on condition {cond}")
            if cond == "service_healthy" and "healthcheck" not in services.get(dep, {}) and "build" not in services.get(dep, {}):
                problems.append(f"{name} waits for {dep} to be healthy, which has no health check")
        for s in svc.get("secrets") or []:
            if s not in secrets:
                problems.append(f"{name} uses unknown secret {s}")
        for v in svc.get("volumes") or []:
            source = v.split(":")[0]
            if source.startswith(".") or source.startswith("/"):
                if not os.path.exists(os.path.join(base, source)):
                    problems.append(f"{name}: bind mount {source} does not exist")
            elif source not in volumes:
                problems.append(f"{name}: unknown volume {source}")
        build = svc.get("build")
        if build:
            context = os.path.join(base, build.get("context", "."))
            dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
            if not os.path.isfile(dockerfile):
                problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
            elif "HEALTHCHECK" not in open(dockerfile).read() and "healthcheck" not in svc:
                problems.append(f"{name}: no health check (neither in the service nor in its Dockerfile)")
            grace = seconds(svc.get("stop_grace_period", "10s"))
            if grace is None or grace <= 15:
                problems.append(f"{name}: stop_grace_period must exceed the server's 10 s drain plus shutdown")
    nginx = services.get("nginx", {})
    command = " ".join(nginx.get("command") or [])
    conf = open(os.path.join(base, "nginx", "bigpeer.conf")).read()
    for upstream, instance in (("127.0.0.1:8081", "bigpeer-1:8080"), ("127.0.0.1:8082", "bigpeer-2:8080")):
        if f"server {upstream}" not in conf:
            problems.append(f"nginx/bigpeer.conf no longer lists {upstream}, which compose.yaml rewrites")
        if f"s/{upstream}/{instance}/" not in command:
            problems.append(f"the nginx service does not point {upstream} at {instance}")
    for p in problems:
        print(f"compose.yaml: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "deploy/compose.yaml"))

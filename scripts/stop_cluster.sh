#!/usr/bin/env bash
# Stop what start_cluster.sh started: the gateway, every Ray process of that cluster (found by the marker in their
# environment; other Ray instances on the machine are left alone), and the throwaway PostgreSQL server if it
# started one (its data goes with it).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=.think_actors/cluster
if [ ! -f "$STATE/marker" ]; then
  echo "no cluster started by scripts/start_cluster.sh here"
  exit 0
fi
marker="THINK_ACTORS_CLUSTER=$(cat "$STATE/marker")"
cluster_pids() {   # environ holds NUL-separated VAR=value entries: match one whole entry
  grep -lzxF "$marker" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$" || true
}
if [ -f "$STATE/serve.pid" ]; then
  kill "$(cat "$STATE/serve.pid")" 2>/dev/null || true
fi
pids=$(cluster_pids)
if [ -n "$pids" ]; then
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true   # raylets and the GCS stop their workers on the way out
  for _ in $(seq 1 20); do   # 5 s; the GCS may outstay its SIGTERM
    pids=$(cluster_pids)
    [ -z "$pids" ] && break
    sleep 0.25
  done
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
fi
if [ -f "$STATE/postgres.json" ]; then
  .venv/bin/python scripts/local_postgres.py stop "$STATE/postgres.json"
fi
rm -f "$STATE/env" "$STATE/marker" "$STATE/serve.pid"
echo "cluster stopped"

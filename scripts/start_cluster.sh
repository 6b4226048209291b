#!/usr/bin/env bash
# Start a local Ray cluster on this machine, the local equivalent of `ray up cluster.yaml`: a head and WORKERS
# worker nodes (default 2), each a real raylet; every agent's store in PostgreSQL; the gateway on the head
# (think-actors serve: http://127.0.0.1:$GATEWAY_PORT/). Then scripts/cluster_demo.sh; scripts/stop_cluster.sh.
#   THINK_STORE=postgresql://...  the database of every agent (default: a throwaway local PostgreSQL server that
#                                 stop_cluster.sh deletes; THINK_STORE=sqlite:///dir keeps SQLite files instead)
#   WORKERS=2  RAY_PORT=6379  GATEWAY_PORT=8787  APP=agents.team (the module whose agents the gateway serves)
#   MODEL_POOLS=1                 start every node's model-server pool now (think-actors serve --model-pools)
# What it started is in .think_actors/cluster/: env (RAY_ADDRESS, THINK_STORE), the gateway's log and pid.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s install
STATE=.think_actors/cluster
if [ -f "$STATE/env" ]; then
  echo "a cluster started here is up already ($STATE/env): scripts/stop_cluster.sh first" >&2
  exit 1
fi
mkdir -p "$STATE"
WORKERS=${WORKERS:-2}
RAY_PORT=${RAY_PORT:-6379}
GATEWAY_PORT=${GATEWAY_PORT:-8787}
APP=${APP:-agents.team}
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
# Ray 2.60 starts a head with token auth (token in ~/.ray/auth_token); joining nodes and drivers must say so too.
export RAY_AUTH_MODE=token
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # workers import the agents/ package
export THINK_ACTORS_DATA_DIR="${THINK_ACTORS_DATA_DIR:-$PWD/.think_actors}"
# Every process of this cluster carries this marker in its environment (raylets hand theirs to their workers), so
# stop_cluster.sh stops exactly these and no other Ray on the machine (`ray stop` would stop them all).
THINK_ACTORS_CLUSTER="$PWD:$(date +%s):$$"
echo "$THINK_ACTORS_CLUSTER" > "$STATE/marker"
trap 'echo "start_cluster.sh failed: stopping what it started" >&2; scripts/stop_cluster.sh' ERR
if [ -z "${THINK_STORE:-}" ]; then
  THINK_STORE=$(.venv/bin/python scripts/local_postgres.py start "$STATE/postgres.json")
  echo "PostgreSQL (throwaway) at $THINK_STORE"
fi
export THINK_STORE THINK_ACTORS_CLUSTER   # the marker after PostgreSQL started: stop_cluster.sh stops it by itself
RAY_ADDRESS="127.0.0.1:$RAY_PORT"
printf 'RAY_ADDRESS=%s\nTHINK_STORE=%s\nGATEWAY_URL=http://127.0.0.1:%s\n' "$RAY_ADDRESS" "$THINK_STORE" "$GATEWAY_PORT" \
  > "$STATE/env"
.venv/bin/ray start --head --port="$RAY_PORT" --num-cpus=1 --include-dashboard=false --disable-usage-stats >/dev/null
for _ in $(seq 1 "$WORKERS"); do
  .venv/bin/ray start --address="$RAY_ADDRESS" --num-cpus=1 --disable-usage-stats >/dev/null
done
# The gateway: a driver on the head that keeps one gateway actor per machine (and the model pools) running.
nohup .venv/bin/think-actors serve --address "$RAY_ADDRESS" --app "$APP" --host 127.0.0.1 --port "$GATEWAY_PORT" \
  ${MODEL_POOLS:+--model-pools} >"$STATE/serve.log" 2>&1 </dev/null &
echo $! > "$STATE/serve.pid"
for _ in $(seq 1 120); do
  if grep -q "gateway serving" "$STATE/serve.log"; then break; fi
  if ! kill -0 "$(cat "$STATE/serve.pid")" 2>/dev/null; then
    cat "$STATE/serve.log" >&2
    false
  fi
  sleep 0.5
done
grep -q "gateway serving" "$STATE/serve.log"
trap - ERR
.venv/bin/ray status --address="$RAY_ADDRESS" 2>/dev/null | sed -n '1,12p'
grep "think-actors:" "$STATE/serve.log"
echo "cluster up: head + $WORKERS worker node(s), agents in ${THINK_STORE%%://*}. Run: scripts/cluster_demo.sh"

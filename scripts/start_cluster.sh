#!/usr/bin/env bash
# Start a local Ray cluster on this machine: a head and WORKERS extra worker nodes (default 1), each a real
# raylet with its own resources, so agents can be placed on different nodes. Stop it with stop_cluster.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s install
WORKERS=${WORKERS:-1}
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
# Ray 2.60 starts a head with token auth (token in ~/.ray/auth_token); joining nodes and drivers must say so too.
export RAY_AUTH_MODE=token
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # workers import the agents/ package
export THINK_ACTORS_DATA_DIR="${THINK_ACTORS_DATA_DIR:-$PWD/.think_actors}"
.venv/bin/ray start --head --port=6379 --num-cpus=1 --include-dashboard=false --disable-usage-stats >/dev/null
for i in $(seq 1 "$WORKERS"); do
  .venv/bin/ray start --address=127.0.0.1:6379 --num-cpus=1 --disable-usage-stats >/dev/null
done
.venv/bin/ray status 2>/dev/null | sed -n '1,20p'
echo "cluster up: head + $WORKERS worker node(s). Run: scripts/cluster_demo.sh"

#!/usr/bin/env bash
# Run the multi-agent demo against a cluster: the one scripts/start_cluster.sh started on this machine (its Ray
# address and store), or, on the head of a `ray up cluster.yaml` cluster, the one running here (the store and
# tokens of /opt/think_actors.env, the file cluster.yaml copies to every node).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=.think_actors/cluster                        # what start_cluster.sh writes
NODE_ENV=${THINK_NODE_ENV:-/opt/think_actors.env}     # what cluster.yaml copies to every node
set -a
if [ -f "$STATE/env" ]; then
  # shellcheck disable=SC1091
  . "$STATE/env"   # RAY_ADDRESS, THINK_STORE (ta.init reads it; the URL travels to every agent actor)
elif [ -f "$NODE_ENV" ]; then
  # shellcheck disable=SC1090
  . "$NODE_ENV"    # THINK_STORE, RAY_AUTH_TOKEN, ...
  RAY_ADDRESS=${RAY_ADDRESS:-auto}   # the Ray of this node
else
  echo "no cluster: run scripts/start_cluster.sh first (or, on a 'ray up cluster.yaml' head, write $NODE_ENV)" >&2
  exit 1
fi
set +a
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
# Ray 2.60 starts a head with token auth (token in ~/.ray/auth_token); joining nodes and drivers must say so too.
export RAY_AUTH_MODE=token
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m agents.demo --address "$RAY_ADDRESS" "$@"

#!/usr/bin/env bash
# Run the multi-agent demo against the cluster scripts/start_cluster.sh started (its Ray address and its store).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=.think_actors/cluster
if [ ! -f "$STATE/env" ]; then
  echo "no cluster: run scripts/start_cluster.sh first" >&2
  exit 1
fi
set -a
# shellcheck disable=SC1091
. "$STATE/env"   # RAY_ADDRESS, THINK_STORE (ta.init reads it; the URL travels to every agent actor)
set +a
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
# Ray 2.60 starts a head with token auth (token in ~/.ray/auth_token); joining nodes and drivers must say so too.
export RAY_AUTH_MODE=token
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m agents.demo --address "$RAY_ADDRESS" "$@"

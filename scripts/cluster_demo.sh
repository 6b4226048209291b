#!/usr/bin/env bash
# Run the multi-agent demo against a running cluster (address="auto"): start_cluster.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
# Ray 2.60 starts a head with token auth (token in ~/.ray/auth_token); joining nodes and drivers must say so too.
export RAY_AUTH_MODE=token
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m agents.demo --address auto "$@"

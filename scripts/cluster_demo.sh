#!/usr/bin/env bash
# Run the multi-agent demo against a running cluster (address="auto"): start_cluster.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_USAGE_STATS_ENABLED=0 LITELLM_LOCAL_MODEL_COST_MAP=True
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m agents.demo --address auto "$@"

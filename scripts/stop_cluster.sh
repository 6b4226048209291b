#!/usr/bin/env bash
# Stop every Ray process of the local cluster started by start_cluster.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ray stop --force

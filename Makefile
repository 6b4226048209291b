# think_actors — every target does its own set-up, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/lock.txt pyproject.toml | sha256sum | cut -c1-12)
# The peer frameworks of scripts/bench_peers.py live in their own venv, never in .venv: the main lock plus theirs.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed-$(shell cat requirements/lock.txt requirements/bench-peers.txt pyproject.toml | sha256sum | cut -c1-12)
# Arize Phoenix, the trace backend the end-to-end tracing test starts, has its own venv too (~850 MB, its own stack).
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(shell cat requirements/phoenix.txt | sha256sum | cut -c1-12)
# The real-client protocol test runs the npm agents package: where npm exists, `make test` installs the pinned
# Node packages (tests/node/package-lock.json) itself; without npm that one test is skipped (and fails under CI).
NPM := $(shell command -v npm 2>/dev/null)
NODE_STAMP := $(if $(NPM),tests/node/node_modules/.installed)
# The MCP tests start the reference MCP server from npm (tests/mcp_node/package-lock.json), installed the same way.
MCP_NODE_STAMP := $(if $(NPM),tests/mcp_node/node_modules/.installed)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: help install demo serve test lint typecheck bench bench-peers clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): requirements/lock.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) scripts/check_site_packages.py
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

$(BENCH_STAMP): requirements/lock.txt requirements/bench-peers.txt pyproject.toml
	@test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements/lock.txt -r requirements/bench-peers.txt
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BENCH_PY) scripts/check_site_packages.py
	@rm -f $(BENCH_VENV)/.installed-* && touch $(BENCH_STAMP)

$(PHOENIX_STAMP): requirements/phoenix.txt
	@test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements/phoenix.txt
	$(PHOENIX_VENV)/bin/python scripts/check_site_packages.py
	@rm -f $(PHOENIX_VENV)/.installed-* && touch $(PHOENIX_STAMP)

ifneq ($(NPM),)
$(NODE_STAMP): tests/node/package-lock.json
	$(NPM) ci --prefix tests/node --no-audit --no-fund --ignore-scripts >/dev/null
	@touch $(NODE_STAMP)

$(MCP_NODE_STAMP): tests/mcp_node/package-lock.json
	$(NPM) ci --prefix tests/mcp_node --no-audit --no-fund --ignore-scripts >/dev/null
	@touch $(MCP_NODE_STAMP)
endif

install: $(STAMP) ## Create .venv and install the hash-pinned lock (requirements/lock.txt)

demo: $(STAMP) ## Run the demo with the scripted model (ARGS="--model openai/gpt-4o-mini" for a real one)
	$(PY) -m agents.demo $(ARGS)

serve: $(STAMP) ## Run the WebSocket gateway in front of the demo agents (ARGS="--app mymodule --port 8787 --local")
	$(VENV)/bin/think-actors serve $(ARGS)

test: $(STAMP) $(NODE_STAMP) $(MCP_NODE_STAMP) $(PHOENIX_STAMP) ## Run the whole test suite, Ray tests included
	$(PY) -m pytest $(ARGS)

lint: $(STAMP) ## ruff format check and lint; import-linter's contracts (the layers of docs/architecture.md)
	$(PY) -m ruff format --check think_actors tests agents scripts
	$(PY) -m ruff check think_actors tests agents scripts
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP) ## mypy --strict over the package
	$(PY) -m mypy

bench: $(STAMP) $(BENCH_STAMP) ## Benchmarks: harness vs bare loop; vs openai-agents and pydantic-ai; model path; 10k-message history; Ray; crash recovery; 100 WebSocket clients; scale (one node, a 3-node cluster, 1,000 agents through the gateway); MCP tool call vs plain tool; tracing off/on; scheduled prompts
	$(PY) scripts/bench_turn.py
	$(BENCH_PY) scripts/bench_peers.py
	$(PY) scripts/bench_model_path.py
	$(PY) scripts/bench_history.py
	$(PY) scripts/bench_ray.py
	$(PY) scripts/bench_recovery.py
	$(PY) scripts/bench_gateway.py
	$(PY) scripts/bench_scale.py --held --shared --skip a,c  # (b) on a fresh node; also first_chunk_at_once=False and hosting = "shared"
	$(PY) scripts/bench_scale.py --shared --skip b  # (a) start rate and (c) wakes (and bursts) in their own Ray: (b) once ran 4-5x slower right after (a) (perf notes §13)
	$(PY) scripts/bench_scale.py --cluster --agents 30 --shared  # head + 2 worker nodes here, PostgreSQL store (full size: 100)
	$(PY) scripts/bench_gateway_scale.py --duration 30  # 1,000 addressable agents through the gateway (full: 60 s)
	$(PY) scripts/bench_gateway_scale.py --duration 30 --shared  # the same, hosting = "shared"
	$(PY) scripts/bench_mcp.py
	$(PY) scripts/bench_tracing.py
	$(PY) scripts/bench_schedule.py --tasks 10000 --agents 200 --runner-agents 10000  # runners: 10,000 due in a minute; woken in their own actors: 200 (10,000 take two hours here)

bench-peers: $(BENCH_STAMP) ## The in-process turn in think_actors, openai-agents and pydantic-ai (own venv, .venv-bench)
	$(BENCH_PY) scripts/bench_peers.py $(ARGS)

clean: ## Remove .venv, .venv-bench, .venv-phoenix and caches
	rm -rf $(VENV) $(BENCH_VENV) $(PHOENIX_VENV) .pytest_cache .mypy_cache .ruff_cache

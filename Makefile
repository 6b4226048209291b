# think_actors — every target does its own set-up, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/lock.txt pyproject.toml | sha256sum | cut -c1-12)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: help install demo serve test lint typecheck bench clean

help: ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements/lock.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) scripts/check_site_packages.py
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP) ## Create .venv and install the hash-pinned lock (requirements/lock.txt)

demo: $(STAMP) ## Run the demo with the scripted model (ARGS="--model openai/gpt-4o-mini" for a real one)
	$(PY) -m agents.demo $(ARGS)

serve: $(STAMP) ## Run the WebSocket gateway in front of the demo agents (ARGS="--app mymodule --port 8787 --local")
	$(VENV)/bin/think-actors serve $(ARGS)

test: $(STAMP) ## Run the whole test suite, Ray tests included
	$(PY) -m pytest $(ARGS)

lint: $(STAMP) ## ruff format check and lint
	$(PY) -m ruff format --check think_actors tests agents scripts
	$(PY) -m ruff check think_actors tests agents scripts

typecheck: $(STAMP) ## mypy --strict over the package
	$(PY) -m mypy

bench: $(STAMP) ## Benchmarks: harness vs bare loop; 10k-message history; Ray; crash recovery; 100 WebSocket clients
	$(PY) scripts/bench_turn.py
	$(PY) scripts/bench_history.py
	$(PY) scripts/bench_ray.py
	$(PY) scripts/bench_recovery.py
	$(PY) scripts/bench_gateway.py

clean: ## Remove .venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

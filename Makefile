# Ajuste: `make run` starts everything on this machine; `make test` runs the tests (but the
# slow ones: `make test-slow`).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: install run test test-main test-browser test-slow test-fast test-images images lint format bench clean services lock

# Every install takes the locked versions (requirements/*.lock, package-lock.json): every
# machine tests the same software. `make lock` moves the locks forward. `make run` installs
# only what it runs (requirements/run.lock: same versions); the test and lint tools come with
# the first `make test` (requirements/dev.lock).
$(RUN_STAMP): pyproject.toml requirements/run.lock package.json package-lock.json
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q --require-hashes --no-deps -r requirements/run.lock
	$(PIP) install -q --no-deps --no-build-isolation -e .
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements/dev.lock
	$(PIP) install -q --require-hashes --no-deps -r requirements/dev.lock
	@touch $(STAMP)

install: $(STAMP)

run: $(RUN_STAMP)
	@$(PY) -m controlpanel.run

services:
	@scripts/ensure-services

# `make test`: every test but the slow ones (`make test-slow`) and the container images'
# (`make test-images`: they need podman and a build), in under 20 minutes on a 2-core machine.
# CI runs all four. Each tier fails fast: a systemic failure (every test waiting out its 300 s
# timeout) must end within CI's 90 minutes and show its cause. The main tier stops after
# MAXFAIL_MAIN failures or once BUDGET_MAIN seconds have passed; the browser and end-to-end tier
# (Chromium, real Celery workers: each may wait 60-300 s when something is wrong) after
# MAXFAIL_BROWSER or BUDGET_BROWSER; the slow tier (tests marked `slow`, > 30 s each: real
# fine-tunes, the fault suite's processes, the sweep journey, the ledger's 400-example property)
# after MAXFAIL_SLOW or BUDGET_SLOW. A budget is checked between tests (pytest-timeout's
# --session-timeout, so the summary is printed); `timeout` ends a tier whose last test hangs past
# it (SIGINT: fixtures still stop their processes). .ci/run runs the tiers one by one to say
# which failed first. The budgets are safety nets well above the tiers' measured times
# (BENCHMARKS.md, Test suite), so a slow CI machine does not fail a green suite.
MAXFAIL_MAIN ?= 20
BUDGET_MAIN ?= 1500
MAXFAIL_BROWSER ?= 3
BUDGET_BROWSER ?= 600
MAXFAIL_SLOW ?= 5
BUDGET_SLOW ?= 2400
MAIN_TIER := not images and not browser and not e2e and not slow
BROWSER_TIER := (browser or e2e) and not images and not slow
SLOW_TIER := slow and not images
# tier(marker expression, maxfail, budget): exit 5 (nothing of the tier selected) is a pass.
tier = timeout --signal=INT --kill-after=60 $$(( $(3) + 420 )) $(VENV)/bin/pytest -m "$(1)" \
	--maxfail=$(2) --session-timeout=$(3) $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] || exit $$rc; }

test: $(STAMP) services
	@$(MAKE) --no-print-directory -k test-main test-browser

test-main: $(STAMP) services
	$(call tier,$(MAIN_TIER),$(MAXFAIL_MAIN),$(BUDGET_MAIN))

test-browser: $(STAMP) services
	$(call tier,$(BROWSER_TIER),$(MAXFAIL_BROWSER),$(BUDGET_BROWSER))

test-slow: $(STAMP) services
	$(call tier,$(SLOW_TIER),$(MAXFAIL_SLOW),$(BUDGET_SLOW))

# The images built from the repository's Dockerfiles (panel, sync, CPU fine-tune) on a base made
# from Debian's packages, then run: migrate, serve, a job through the panel started from its image.
test-images: $(STAMP) services
	scripts/build-images --debian-base panel finetune-cpu
	$(VENV)/bin/pytest -m images tests/images $(PYTEST_ARGS)

# Ajuste's images, tagged with deploy/version.py's VERSION (docs/images.md: releasing).
images:
	scripts/build-images panel finetune serving

# The main tier without its budget or maxfail (a quick local run).
test-fast: $(STAMP) services
	$(VENV)/bin/pytest -m "$(MAIN_TIER)" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	DEBUG=1 $(VENV)/bin/mypy controlpanel storage deploy training

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP) services
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lock: $(STAMP)
	scripts/lock

clean:
	rm -rf $(VENV) node_modules var

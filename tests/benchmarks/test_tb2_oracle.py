"""Terminal-Bench 2.0 end to end on this machine: farm's oracle on real TB2 tasks, each built
from its own environment/Dockerfile by podman on `make images`' stand-in bases, graded by the
task's own verifier with the verifier cache. A fixed subset of fast tasks (`make tb2-oracle`
runs all 89; docs/benchmarks.md has the per-task results and timings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.shared import shared_path

from .standin import CACHE, REPO, ensure_standins

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# resolved by the oracle on the stand-ins (docs/benchmarks.md, measured 2026-12-01), chosen for
# short builds and solutions; both main bases: python:3.13-slim-bookworm (6) and ubuntu:24.04 (4)
SUBSET = [
    "cancel-async-tasks", "cobol-modernization", "code-from-image", "constraints-scheduling", "db-wal-recovery",
    "distribution-search", "dna-assembly", "dna-insert", "feal-differential-cryptanalysis",
    "feal-linear-cryptanalysis",
]
VERIFIER_CACHE = Path(os.environ.get("FARM_TB2_SUBSET_VERIFIER_CACHE", CACHE / "verifier-cache-tb2-subset"))


def _verifier_cache(tb2: Path, tmp_path: Path) -> Path:
    """`make verifier-cache` with the subset's test.sh pins (CPython 3.13 wheels, what their uvx
    asks for): reused when up to date, built when absent (PyPI + Debian only). Only the subset's
    pins, because the whole cache is uploaded into every sandbox."""
    tasks = tmp_path / "subset-tasks"
    tasks.mkdir()
    for name in SUBSET:
        (tasks / name).symlink_to(tb2 / name)
    res = subprocess.run([sys.executable, "-m", "farm.grade.verifier_cache", str(VERIFIER_CACHE),
                          "--tasks", str(tasks), "--pythons", "3.13"], capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-2000:]
    return VERIFIER_CACHE


@pytest.mark.timeout(5400)
def test_oracle_resolves_the_tb2_subset_on_standins(tmp_path: Path):
    tb2 = shared_path("fixtures", "terminal-bench-2.0")
    env = ensure_standins()
    cache = _verifier_cache(tb2, tmp_path)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "farm.cli", "run", "-q", "agent=oracle", "sandbox=docker",
           "sandbox.docker.engine=podman", "sandbox.image_policy=build", "sandbox.docker.pull=never",
           f"benchmark.path={tb2}", f"benchmark.task_ids=[{','.join(SUBSET)}]", f"store.uri={store}",
           "run.executor=local", "run.max_in_flight=2", f"grade.verifier_cache.dir={cache}"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=5000, cwd=REPO)
    rows = pq.read_table(store / "trials").to_pylist() if (store / "trials").exists() else []
    latest: dict[str, dict] = {}
    for r in rows:
        if r["task_id"] not in latest or r["attempt"] >= latest[r["task_id"]]["attempt"]:
            latest[r["task_id"]] = r
    summary = {t: (r["status"], r["error_class"], (r["error"] or "")[:200]) for t, r in sorted(latest.items())}
    assert res.returncode == 0, (res.returncode, res.stderr[-3000:], summary)
    assert sorted(latest) == sorted(SUBSET), summary
    for task, r in latest.items():
        assert r["status"] == "resolved", (task, summary[task])
        assert r["base_image_standin"] is True, task  # the stand-in label reached the row
        assert r["image_unfaithful"] is False, task
        assert r["image_source"] in ("built", "cached"), (task, r["image_source"])
        assert r["image_id"], task
    # and the run's own summary says the scores are not comparable
    assert "Stand-in base images" in res.stdout + res.stderr

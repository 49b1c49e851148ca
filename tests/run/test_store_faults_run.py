"""Whole runs against an S3 store that throttles, fails and drops connections (a fault-injecting
proxy in front of moto), and one whose store stops accepting writes mid-run: every trial lands
exactly once, admissions and rows agree, and a store that gives up is exit 6 with one line;
resuming records the attempts the stopped run lost before drawing them again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from farm.store import ResultStore
from tests.support.s3faults import FaultPlan, FaultProxy
from tests.support.tasks import CHECK_ANSWER, make_task_dir

FARM = [sys.executable, "-m", "farm.cli"]
N_TASKS = 6


def _args(tasks: Path, uri: str, endpoint: str, *extra: str) -> list[str]:
    return ["run", "--quiet", f"benchmark.path={tasks}", "agent=oracle", "run.executor=local", "run.id=faults",
            "run.max_in_flight=3", "run.retry_backoff_s=0", f"store.uri={uri}", f"store.endpoint_url={endpoint}",
            "store.batch_rows=2", "store.flush_interval_s=0.5", "store.request_timeout_s=1", *extra]


def _env() -> dict[str, str]:
    # the moto credentials the s3_endpoint fixture exported; nothing of CI's FARM_* settings
    return {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    for i in range(N_TASKS):
        make_task_dir(root, f"t{i}", CHECK_ANSWER)
    return root


@pytest.mark.integration
def test_a_run_through_store_faults_lands_every_trial_exactly_once(tasks, s3_endpoint, s3_bucket):
    plan = FaultPlan(seed=3, rates={"slowdown": 0.04, "500": 0.03, "drop": 0.03, "lost_answer": 0.04, "slow": 0.02},
                     burst=2, slow_s=1.2)
    proxy = FaultProxy(s3_endpoint, plan)
    uri = f"s3://{s3_bucket}/run"
    try:
        done = subprocess.run(FARM + _args(tasks, uri, proxy.endpoint), capture_output=True, text=True,
                              timeout=600, env=_env())
    finally:
        proxy.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sum(plan.injected.values()) >= 3, plan.injected  # the run really met faults
    store = ResultStore.open(uri, s3_endpoint, create=False)  # read past the proxy
    rows = store.read_trials("faults", dedupe=False).to_pylist()
    assert len(rows) == N_TASKS and len({r["trial_key"] for r in rows}) == N_TASKS
    assert {r["status"] for r in rows} == {"resolved"}
    # one admission per attempt that ran, and each has its row (nothing lost, nothing re-drawn)
    assert store.read_admitted("faults") == {(r["trial_key"], r["attempt"]) for r in rows}
    assert {r["attempt"] for r in rows} == {1}


@pytest.mark.integration
def test_a_store_that_gives_up_stops_the_run_and_resume_records_the_lost_attempts(tasks, s3_endpoint, s3_bucket):
    plan = FaultPlan()
    proxy = FaultProxy(s3_endpoint, plan)
    uri = f"s3://{s3_bucket}/stop"
    store = ResultStore.open(uri, s3_endpoint, create=False)
    stop = threading.Event()

    def watch() -> None:
        # once two attempts are admitted (their agents started), the store stops taking writes
        while not stop.is_set():
            if store.read_run_meta("faults") and len(store.read_admitted("faults")) >= 2:
                plan.fail_writes()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        done = subprocess.run(FARM + _args(tasks, uri, proxy.endpoint, "store.retry_budget_s=2"),
                              capture_output=True, text=True, timeout=600, env=_env())
    finally:
        stop.set()
        watcher.join()
        proxy.close()
    assert done.returncode == 6, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert f"S3 bucket {s3_bucket!r}" in lines[0] and "SLOW_DOWN" in lines[0]
    assert "Traceback" not in done.stderr + done.stdout

    # what the stopped run left is readable (no half-written file), and some agents it started have no row
    before = {(r["trial_key"], r["attempt"]) for r in store.read_trials("faults", dedupe=False).to_pylist()}
    admitted = store.read_admitted("faults")
    lost = admitted - before
    assert len(admitted) >= 2 and lost, (admitted, before)

    again = subprocess.run(FARM + _args(tasks, uri, s3_endpoint), capture_output=True, text=True, timeout=600,
                           env=_env())
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    rows = store.read_trials("faults", dedupe=False).to_pylist()
    lost_rows = {(r["trial_key"], r["attempt"]) for r in rows if r["error_class"] == "attempt_lost"}
    # every lost attempt is in the ledger as infra_error, once, and nothing else is
    assert lost_rows == lost
    assert all(r["status"] == "infra_error" for r in rows if r["error_class"] == "attempt_lost")
    graded = [r for r in rows if r["error_class"] != "attempt_lost"]
    assert len(graded) == N_TASKS and len({r["trial_key"] for r in graded}) == N_TASKS
    assert {r["status"] for r in graded} == {"resolved"}
    # a trial whose attempt was lost ran again under a later attempt number, never the same one
    for key, attempt in lost:
        assert [r["attempt"] for r in graded if r["trial_key"] == key][0] > attempt
    # every attempt that ran is admitted; every admission has exactly one row
    assert store.read_admitted("faults") == {(r["trial_key"], r["attempt"]) for r in rows}
    assert len(rows) == N_TASKS + len(lost)

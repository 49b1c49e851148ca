"""Preflight, then fail fast: a dead endpoint costs seconds and one line naming the URL; a run
whose trials keep failing in one infra class is stopped by the circuit breaker, and the
trials it did not finish stay unfinished (re-run on resume), never written as results.

Real parts: the `farm` command, bubblewrap sandboxes, farm's scripted policy server (real
HTTP on 127.0.0.1) answering HTTP 500, the openai client, a local Parquet store.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from farm.cli import EXIT_BREAKER, EXIT_INFRA, EXIT_OK, EXIT_PREFLIGHT, main
from farm.config import load_config
from farm.run.driver import Breaker, derive_run_id, load_tasks, run_experiment
from farm.run.endpoint import PreflightError
from farm.run.plan import build_plan, resume
from farm.store import ResultStore
from tests.support.config import local_run_overrides
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.bwrap
FARM = str(Path(sys.executable).with_name("farm"))
DEAD = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


def _tasks(root: Path, n: int) -> Path:
    for i in range(n):
        make_task(root, f"t{i}", CHECK_ANSWER)
    return root


def _failing_script(tmp_path: Path) -> Path:
    """Every model call of every trial answers HTTP 500 (the preflight probe is answered)."""
    p = tmp_path / "fail.yaml"
    p.write_text(yaml.safe_dump([{"error": {"status": 500, "times": 10_000, "message": "engine dead"}}]))
    return p


def _overrides(tmp_path: Path, tasks: Path, *extra: str) -> list[str]:
    # no in-trial retries of a failed model request: these tests are about failing fast
    return local_run_overrides(tmp_path, tasks, "model.max_retries=0", "model.request_retry_budget_s=0", *extra)


def test_a_dead_endpoint_exits_non_zero_within_seconds_naming_the_url(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run([FARM, "run", "-q", "model=endpoint", f"model.base_url={DEAD}",
                           f"store.uri={tmp_path / 'store'}", "run.executor=local"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert proc.returncode == EXIT_PREFLIGHT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and DEAD in lines[0], proc.stderr
    assert elapsed < 30, f"took {elapsed:.1f}s"
    run_ids = [p.name for p in (tmp_path / "store").glob("runs/*")] if (tmp_path / "store").exists() else []
    for rid in run_ids:  # no trial row was written: nothing ran
        assert ResultStore.open(str(tmp_path / "store")).read_trials(rid).num_rows == 0


def test_an_unwritable_store_fails_the_preflight_naming_the_store(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path / "tasks", 1)
    cfg = load_config(_overrides(tmp_path, tasks, "agent=oracle", "store.uri=/proc/farm-not-writable"))
    with pytest.raises(PreflightError, match="store.uri='/proc/farm-not-writable' is not writable"):
        asyncio.run(run_experiment(cfg))


def test_the_breaker_stops_the_run_and_leaves_the_rest_unfinished(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path / "tasks", 3)
    overrides = _overrides(tmp_path, tasks, "agent=scripted", f"agent.script={_failing_script(tmp_path)}",
                           "run.seeds=2", "run.max_attempts=2", "run.max_in_flight=1", "run.breaker_consecutive=3")
    cfg = load_config(overrides)
    summary = asyncio.run(run_experiment(cfg))
    assert summary.breaker is not None
    assert "3 trial attempts in a row" in summary.breaker and "llm_query_error" in summary.breaker
    assert "http://127.0.0.1:" in summary.breaker  # the cause names the endpoint
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist()
    assert len(rows) == 3 and {r["status"] for r in rows} == {"infra_error"}  # only the attempts that ran
    assert {r["error_class"] for r in rows} == {"llm_query_error"}
    # the stored error names the endpoint; no row names a model, since none answered
    assert all("http://127.0.0.1:" in r["error"] for r in rows)
    assert {(r["policy"], r["model"], r["model_preset"]) for r in rows} == {("scripted", None, "oracle")}
    # the trials that used up their attempts are infra_error; every other one is unfinished
    # (never started, or stopped before its retry) and none of them is counted as a result
    assert summary.executed_attempts == 3 and summary.counts == {"infra_error": summary.infra_left}
    assert summary.infra_left >= 1 and summary.unfinished == 6 - summary.infra_left
    # nothing the breaker stopped is a result: resume plans every trial again
    store = ResultStore.open(str(tmp_path / "store"))
    specs = build_plan(derive_run_id(cfg), load_tasks(cfg), 2, [("base", "scripted")])
    assert len(resume(specs, store.read_trials(summary.run_id, dedupe=False)).todo) == 6


def test_farm_run_exit_code_says_whether_every_trial_was_graded(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path / "tasks", 2)
    failing = _failing_script(tmp_path)
    breaker = main(["run", "-q", *_overrides(tmp_path / "a", tasks, "agent=scripted", f"agent.script={failing}",
                                             "run.max_attempts=2", "run.breaker_consecutive=2")])
    infra = main(["run", "-q", *_overrides(tmp_path / "b", tasks, "agent=scripted", f"agent.script={failing}",
                                           "run.max_attempts=2", "run.breaker_consecutive=0")])
    graded = main(["run", "-q", *_overrides(tmp_path / "c", tasks, "agent=nop")])
    assert (breaker, infra, graded) == (EXIT_BREAKER, EXIT_INFRA, EXIT_OK)


def test_the_breaker_counts_one_class_in_a_row() -> None:
    b = Breaker(3)
    for status, cls in [("infra_error", "sandbox_start"), ("infra_error", "sandbox_start"), ("unresolved", None),
                        ("infra_error", "sandbox_start"), ("infra_error", "llm_query_error"),
                        ("infra_error", "sandbox_start"), ("infra_error", "sandbox_start")]:
        assert not b.observe(status, cls, "boom")
    assert b.observe("infra_error", "sandbox_start", "sandbox could not start")
    assert "'sandbox_start'" in (b.reason or "") and "sandbox could not start" in (b.reason or "")
    assert not Breaker(0).observe("infra_error", "x", None)  # 0: never trips


def test_farm_run_help_documents_the_exit_codes() -> None:
    out = subprocess.run([FARM, "run", "--help"], capture_output=True, text=True, timeout=60).stdout
    for code in ("0 ", "2 ", "3 ", "4 ", "5 "):
        assert f"\n  {code}" in out, out
    assert "circuit breaker" in out and "preflight" in out


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.integration)])
def test_the_breaker_cancels_trials_in_flight_and_they_write_no_row(
        tmp_path: Path, executor: str, monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a private Ray of this test, never a cluster's
    tasks = _tasks(tmp_path / "tasks", 4)
    script = tmp_path / "mixed.yaml"
    fail = [{"error": {"status": 500, "times": 10_000, "message": "engine dead"}}]
    slow = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 30; echo fixed > /app/answer.txt"}}]},
            {"content": "done"}]
    script.write_text(yaml.safe_dump({"t0": fail, "t1": fail, "*": slow}))
    cfg = load_config(_overrides(tmp_path, tasks, "agent=scripted", f"agent.script={script}",
                                 f"run.executor={executor}",
                                 "run.workers=1", "run.max_in_flight=3", "run.max_attempts=1",
                                 "run.breaker_consecutive=2"))
    started = time.monotonic()
    summary = asyncio.run(run_experiment(cfg))
    elapsed = time.monotonic() - started
    assert summary.breaker is not None and "2 trial attempts in a row" in summary.breaker
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist()
    # t2 was inside its `sleep 30` when the breaker tripped: cancelled, no row; t3 never started
    assert sorted(r["task_id"] for r in rows) == ["t0", "t1"]
    assert summary.unfinished == 2 and summary.infra_left == 2
    assert elapsed < 30, f"the sleeping trial was waited for: {elapsed:.1f}s"


def test_a_task_whose_own_build_fails_does_not_stop_the_run_at_preflight(tmp_path: Path) -> None:
    # sorted first, so the preflight tries it first: its Dockerfile's RUN fails on every backend
    root = tmp_path / "tasks"
    for name in ("a-broken-build", "b-also-broken"):
        d = make_task(root, name, CHECK_ANSWER)
        df = d / "environment" / "Dockerfile"
        df.write_text(df.read_text() + "RUN echo 'this task cannot build here' && false\n")
    make_task(root, "c-fine", CHECK_ANSWER)
    cfg = load_config(_overrides(tmp_path, root, "agent=oracle", "run.max_attempts=2"))
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    by_task = {r["task_id"]: (r["status"], r["error_class"]) for r in rows}
    assert by_task["c-fine"] == ("resolved", None)
    assert by_task["a-broken-build"][0] == "infra_error" and "build_step" in by_task["a-broken-build"][1]
    assert by_task["b-also-broken"] == by_task["a-broken-build"]

"""One trial the whole way, with real parts: Harbor tasks, bubblewrap sandboxes, the policy
endpoint over HTTP, the Leaf loop, the Harbor verifier and the Parquet store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.config import load_config
from farm.errors import ConfigError
from farm.run.driver import run_experiment
from farm.store import ResultStore
from farm.tasks.benchmark import builtin_tasks


def _run(overrides: list[str]):
    cfg = load_config(overrides)
    return cfg, asyncio.run(run_experiment(cfg))


def _statuses(store_uri: str, run_id: str) -> dict[str, str]:
    trials = ResultStore.open(store_uri).read_trials(run_id).to_pylist()
    return {r["task_id"]: r["status"] for r in trials}


def test_oracle_resolves_every_builtin_task_and_nop_resolves_none(tmp_path: Path):
    uri = str(tmp_path / "store")
    n = len(builtin_tasks())
    assert n >= 12
    _, oracle = _run(["agent=oracle", "run.executor=local", f"store.uri={uri}", "run.max_in_flight=4"])
    statuses = _statuses(uri, oracle.run_id)
    assert statuses == {t.task_id: "resolved" for t in builtin_tasks()}
    _, nop = _run(["agent=nop", "run.executor=local", f"store.uri={uri}", "run.max_in_flight=4"])
    assert nop.run_id != oracle.run_id
    assert set(_statuses(uri, nop.run_id).values()) == {"unresolved"}  # graded, not errors
    rows = ResultStore.open(uri).read_trials(oracle.run_id).to_pylist()
    for r in rows:
        assert r["exit_reason"] == "agent" and r["tool_calls"] == 1 and r["reward"] == 1.0
        assert r["sandbox_backend"] == "local" and r["grading_mode"] == "in_place"
        if r["task_id"].startswith(("swe-", "sec-")):  # git repositories; terminal tasks are not
            assert r["patch_bytes"] > 0
        assert r["config_hash"] and r["farm_version"]
        # Harbor's oracle runs solve.sh under umask 022, the older Leaf transport's, not 2609's 077
        assert r["agent_compat"] == "leaf-legacy"
    store = ResultStore.open(uri)
    key = next(r["trial_key"] for r in rows if r["task_id"].startswith("swe-"))
    assert store.read_artifact(oracle.run_id, key, 1, "patch.diff").startswith(b"diff --git")
    steps = store.read_steps(oracle.run_id).to_pylist()
    assert len(steps) == 2 * n  # one Bash call, one final answer per trial
    # plain pyarrow reads the Hive-partitioned trials table without farm
    assert pq.read_table(Path(uri) / "trials").num_rows == 2 * n


def test_missing_reward_is_an_infra_error_and_is_retried(task_dir: Path, tmp_path: Path):
    uri = str(tmp_path / "store")
    cfg, summary = _run(["agent=oracle", "run.executor=local", f"benchmark.path={task_dir}",
                         f"store.uri={uri}", "run.max_attempts=2", "run.retry_backoff_s=0"])
    assert _statuses(uri, summary.run_id) == {"write-answer": "resolved", "no-reward": "infra_error"}
    attempts = ResultStore.open(uri).read_trials(summary.run_id, dedupe=False).to_pylist()
    no_reward = sorted((r["attempt"], r["error_class"]) for r in attempts if r["task_id"] == "no-reward")
    assert no_reward == [(1, "verifier_no_reward"), (2, "verifier_no_reward")]
    assert summary.counts == {"resolved": 1, "infra_error": 1} and summary.retried == 1


def test_rerun_resumes_and_changed_config_is_refused(task_dir: Path, tmp_path: Path):
    uri = str(tmp_path / "store")
    base = ["agent=oracle", "run.executor=local", f"benchmark.path={task_dir}", f"store.uri={uri}",
            "run.max_attempts=1", "run.id=fixed"]
    _, first = _run(base)
    assert first.executed_attempts == 2
    _, again = _run(base)
    # the resolved trial is skipped; the infra error re-runs with the next attempt number
    assert (again.skipped, again.executed_attempts) == (1, 1)
    rows = ResultStore.open(uri).read_trials("fixed", dedupe=False).to_pylist()
    assert sorted(r["attempt"] for r in rows if r["task_id"] == "no-reward") == [1, 2]
    with pytest.raises(ConfigError, match="agent.max_steps"):
        _run(base + ["agent.max_steps=7"])


def test_fresh_grading_applies_the_patch_in_a_new_sandbox(task_dir: Path, tmp_path: Path):
    uri = str(tmp_path / "store")
    _, s = _run(["agent=oracle", "run.executor=local", f"benchmark.path={task_dir}", f"store.uri={uri}",
                 "grade.mode=fresh", "benchmark.task_ids=[write-answer]"])
    rows = ResultStore.open(uri).read_trials(s.run_id).to_pylist()
    assert [(r["status"], r["grading_mode"]) for r in rows] == [("resolved", "fresh")]


def test_cli_reports_errors_in_one_line(capsys, tmp_path: Path):
    assert main(["run", "run.seeds=zero", f"store.uri={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "run.seeds" in err and "zero" in err and "Traceback" not in err
    assert main(["tasks", "list", "--path", str(tmp_path)]) == 2
    assert "no Harbor task" in capsys.readouterr().err
    assert main(["report", "no-such-run", "--store", str(tmp_path)]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err


def test_cli_tasks_list_shows_the_builtin_suite(capsys):
    assert main(["tasks", "list", "benchmark=builtin"]) == 0
    out = capsys.readouterr().out
    assert f"{len(builtin_tasks())} tasks" in out


def test_driver_heartbeat_marks_runs_alive_for_gc(task_dir: Path, tmp_path: Path):
    import json

    from farm.run.gc import run_liveness

    uri = str(tmp_path / "store")
    _, s = _run(["agent=oracle", "run.executor=local", f"benchmark.path={task_dir}", f"store.uri={uri}",
                 "benchmark.task_ids=[write-answer]"])
    store = ResultStore.open(uri)
    assert run_liveness(store, stale_after_s=600)(s.run_id)
    assert not run_liveness(store, stale_after_s=600)("never-ran")
    path = Path(uri) / "runs" / f"run_id={s.run_id}" / "heartbeat.json"
    beat = json.loads(path.read_text())
    path.write_text(json.dumps({**beat, "at": beat["at"] - 3600}))  # a driver that died an hour ago
    assert not run_liveness(store, stale_after_s=600)(s.run_id)

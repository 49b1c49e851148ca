"""`farm regrade` on real runs: Harbor tasks, bubblewrap sandboxes, the oracle over HTTP, the
Parquet store. A re-grade reproduces a deterministic grader's verdicts without running an agent,
and turns a verifier that could not set itself up into a graded verdict once its cause is fixed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from farm.cli import EXIT_OK, main
from farm.config import load_config
from farm.errors import ConfigError
from farm.run.driver import run_experiment
from farm.run.regrade import regrade_command, select
from farm.store import ResultStore
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.bwrap

# the verifier's own tool is missing: evidence of a set-up failure before any test ran
BROKEN_SETUP = "#!/bin/bash\necho 'bash: uvx: command not found'\necho 0 > /logs/verifier/reward.txt\n"


def _overrides(tmp_path: Path, tasks: Path) -> list[str]:
    return [f"benchmark.path={tasks}", "run.executor=local", f"store.uri={tmp_path / 'store'}",
            f"sandbox.local.root_dir={tmp_path / 'sandboxes'}", "run.retry_backoff_s=0", "run.progress=false",
            "agent=oracle", "grade.verifier_retries=0"]


def _rows(tmp_path: Path, run_id: str, dedupe: bool = True) -> dict[str, dict]:
    table = ResultStore.open(str(tmp_path / "store")).read_trials(run_id, dedupe=dedupe)
    return {r["task_id"]: r for r in table.to_pylist()}


def test_regrade_reproduces_every_verdict_without_running_an_agent(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    make_task(root, "right", CHECK_ANSWER)
    make_task(root, "wrong", CHECK_ANSWER, solve_sh="echo broken > /app/answer.txt\n")
    summary = asyncio.run(run_experiment(load_config(_overrides(tmp_path, root))))
    before = _rows(tmp_path, summary.run_id)
    assert {k: r["status"] for k, r in before.items()} == {"right": "resolved", "wrong": "unresolved"}
    store = ResultStore.open(str(tmp_path / "store"))
    steps_before = store.read_steps(summary.run_id).num_rows

    result = regrade_command(summary.run_id, [], store_cfg=load_config(_overrides(tmp_path, root)))
    assert (result.selected, result.regraded, result.changed) == (2, 2, 0)
    after = _rows(tmp_path, summary.run_id)
    for task_id, old in before.items():
        new = after[task_id]
        assert new["status"] == old["status"] and new["reward"] == old["reward"]
        assert new["attempt"] == old["attempt"] + 1 and new["grading_mode"] == "fresh"
        assert new["regraded_from"] == old["attempt_uid"] != new["attempt_uid"]
        assert new["original_status"] == old["status"]
        # what the agent did is the original attempt's, and no agent step was added
        assert (new["tool_calls"], new["steps"], new["policy"], new["patch_bytes"]) == (
            old["tool_calls"], old["steps"], old["policy"], old["patch_bytes"])
    assert store.read_steps(summary.run_id).num_rows == steps_before
    key = after["right"]["trial_key"]
    assert store.read_artifact(summary.run_id, key, after["right"]["attempt"], "patch.diff") == \
        store.read_artifact(summary.run_id, key, before["right"]["attempt"], "patch.diff")


def test_a_verifier_setup_failure_becomes_a_verdict_once_its_cause_is_fixed(tmp_path: Path, capsys) -> None:
    root = tmp_path / "tasks"
    task = make_task(root, "needs-tool", BROKEN_SETUP)
    make_task(root, "fine", CHECK_ANSWER)
    overrides = _overrides(tmp_path, root) + ["run.max_attempts=1"]
    summary = asyncio.run(run_experiment(load_config(overrides)))
    first = _rows(tmp_path, summary.run_id)
    assert (first["needs-tool"]["status"], first["needs-tool"]["error_class"]) == ("infra_error", "verifier_setup")
    assert first["fine"]["status"] == "resolved"

    (task / "tests" / "test.sh").write_text(CHECK_ANSWER)  # the verifier's cause, fixed
    code = main(["regrade", summary.run_id, "--only", "verifier", *overrides])
    assert code == EXIT_OK
    assert "regraded 1 of 1 selected trials" in capsys.readouterr().out
    after = _rows(tmp_path, summary.run_id)
    fixed = after["needs-tool"]
    assert (fixed["status"], fixed["original_status"], fixed["error_class"]) == ("resolved", "infra_error", None)
    assert fixed["regraded_from"] == first["needs-tool"]["attempt_uid"]
    assert after["fine"]["attempt"] == first["fine"]["attempt"]  # --only verifier left it alone
    every = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).num_rows
    assert every == 3  # nothing rewritten: one row appended


def test_selection_and_a_missing_run() -> None:
    rows = [{"status": "resolved"}, {"status": "unresolved"}, {"status": "model_error"},
            {"status": "infra_error", "error_class": "verifier_setup"},
            {"status": "infra_error", "error_class": "llm_query_error"}]
    assert [r["status"] for r in select(rows, "all")] == ["resolved", "unresolved", "infra_error", "infra_error"]
    assert [r.get("error_class") for r in select(rows, "infra")] == ["verifier_setup", "llm_query_error"]
    assert [r.get("error_class") for r in select(rows, "verifier")] == ["verifier_setup"]
    with pytest.raises(ConfigError, match="invalid value 'some' for '--only'"):
        select(rows, "some")


def test_regrade_of_an_unknown_run_names_the_run_and_the_store(tmp_path: Path) -> None:
    cfg = load_config([f"store.uri={tmp_path / 'store'}"])
    (tmp_path / "store").mkdir()
    with pytest.raises(ConfigError, match="no run 'nope' in store"):
        regrade_command("nope", [], store_cfg=cfg)

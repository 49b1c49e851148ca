"""Which failures are retried: only infrastructure hiccups. A task the backend can never run is
recorded once per trial (attempt 1, ``task_unsupported:<reason>``) and listed as "not run";
an agent stopped by a broken sandbox is an infra error; a bug of farm's own keeps its
traceback in the artifacts, not in the row."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.errors import ConfigError, TaskFormatError, UnsupportedTaskError
from farm.report import load_run
from farm.report.data import not_run, outcome_groups
from farm.report.render import build_report
from farm.run.driver import run_experiment
from farm.run.plan import TrialSpec
from farm.run.rows import INFRA_EXIT_REASONS
from farm.run.trial import run_trial
from farm.store import ResultStore
from farm.tasks.harbor import load_harbor_dir
from tests.support.config import local_run_config
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

from ..shared import shared_path

pytestmark = pytest.mark.bwrap


def _rows(store: Path, run_id: str) -> list[dict]:
    return sorted(ResultStore.open(str(store)).read_trials(run_id, dedupe=False).to_pylist(),
                  key=lambda r: (r["task_id"], r["seed"], r["attempt"]))


def _refused_task(root: Path, name: str = "needs-image") -> Path:
    """A well-formed task whose prebuilt image the local backend cannot stand in for."""
    d = make_task(root, name, CHECK_ANSWER)
    (d / "environment" / "Dockerfile").unlink()
    toml = (d / "task.toml").read_text()
    toml = toml.replace("[environment]\n", '[environment]\ndocker_image = "someone/thing:tag"\n')
    (d / "task.toml").write_text(toml)
    return d


def _run(tmp_path: Path, tasks: Path, *extra: str):
    cfg = local_run_config(tmp_path, tasks, "run.max_attempts=3", *extra)
    return cfg, asyncio.run(run_experiment(cfg))


def test_refused_image_is_one_row_per_trial_never_retried_and_reported_not_run(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "runs", CHECK_ANSWER)
    _refused_task(tasks)
    cfg, summary = _run(tmp_path, tasks, "run.seeds=2")
    rows = _rows(tmp_path / "store", summary.run_id)
    refused = [r for r in rows if r["task_id"] == "needs-image"]
    assert [(r["seed"], r["attempt"], r["status"], r["error_class"]) for r in refused] == [
        (0, 1, "infra_error", "task_unsupported:image_refused"),
        (1, 1, "infra_error", "task_unsupported:image_refused")]
    assert "someone/thing:tag" in refused[0]["error"] and refused[0]["sandbox_start_s"] is None
    assert [r["status"] for r in rows if r["task_id"] == "runs"] == ["resolved", "resolved"]
    assert summary.refused == 2 and summary.retried == 0 and summary.executed_attempts == 2

    # resuming the same run records nothing new for them: once per trial
    _, again = _run(tmp_path, tasks, "run.seeds=2")
    assert again.run_id == summary.run_id and len(_rows(tmp_path / "store", summary.run_id)) == len(rows)

    run = load_run(ResultStore.open(str(tmp_path / "store")), summary.run_id)
    (group,) = outcome_groups(run)
    (nr,) = not_run(group.trials)
    assert (nr.reason, nr.task_ids, nr.trials) == ("image_refused", ("needs-image",), 2)
    paths = build_report([run], tmp_path / "report")
    md = paths.markdown.read_text()
    section = md.split("## Not run", 1)[1].split("\n## ", 1)[0]
    assert "image_refused" in section and "needs-image" in section and "| 2 |" in section


def test_a_terminal_bench_task_runs_locally_from_its_dockerfile_and_a_verifier_without_its_tools_is_no_answer(
        tmp_path: Path) -> None:
    # the prebuilt image cannot run here; its Dockerfile (FROM ubuntu:24.04, a generic base) is
    # replayed instead. Its test.sh downloads uv from astral.sh, which this machine cannot reach:
    # that is the verifier's set-up failing, never the agent's wrong answer.
    real = shared_path("fixtures", "terminal-bench-2.0", "adaptive-rejection-sampler")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / real.name).symlink_to(real, target_is_directory=True)
    (task,) = load_harbor_dir(tasks, "terminal-bench-2.0")
    assert task.environment.image == "alexgshaw/adaptive-rejection-sampler:20251031"
    _, summary = _run(tmp_path, tasks, "run.max_attempts=1", "grade.verifier_retries=0")
    (row,) = _rows(tmp_path / "store", summary.run_id)
    assert (row["status"], row["error_class"]) == ("infra_error", "verifier_setup"), row["error"]
    assert row["image_source"] == "host" and row["image_unfaithful"] is False


def test_a_task_error_found_only_at_start_is_not_retried(tmp_path: Path) -> None:
    """The preflight cannot see a COPY source that is missing; the start can, once."""
    tasks = tmp_path / "tasks"
    d = make_task(tasks, "bad-copy", CHECK_ANSWER)
    with (d / "environment" / "Dockerfile").open("a") as f:
        f.write("COPY not-there.txt /app/\n")
    _, summary = _run(tmp_path, tasks)
    (row,) = _rows(tmp_path / "store", summary.run_id)
    assert (row["attempt"], row["status"], row["error_class"]) == (1, "infra_error", "task_unsupported:task_format")
    assert "not-there.txt" in row["error"] and summary.retried == 0


def test_a_failing_build_step_is_reported_once_not_retried(tmp_path: Path) -> None:
    """A replayed RUN that fails (here inside a pipe: pipefail) fails the same way every time."""
    tasks = tmp_path / "tasks"
    d = make_task(tasks, "bad-step", CHECK_ANSWER)
    with (d / "environment" / "Dockerfile").open("a") as f:
        f.write("RUN false | true\n")
    _, summary = _run(tmp_path, tasks)
    (row,) = _rows(tmp_path / "store", summary.run_id)
    assert (row["attempt"], row["status"], row["error_class"]) == (1, "infra_error", "sandbox_start:build_step")
    assert "(RUN false | true) exited with code 1" in row["error"] and summary.retried == 0


def test_an_agent_stopped_by_a_broken_sandbox_is_an_infra_error(tmp_path: Path) -> None:
    assert "tool_error" in INFRA_EXIT_REASONS
    tasks = tmp_path / "tasks"
    make_task(tasks, "only", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "break.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 60"}}]},
                                      {"content": "done"}]))
    # The agent's commands cannot reach the sandbox agent any more (inside/jail.py), so the
    # sandbox breaks from outside, as a node or an OOM kill would break it: this test's own
    # run's bwrap is killed while the command sleeps.
    killed: list[int] = []

    def kill_the_sandbox() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for owner in (tmp_path / "sandboxes").rglob("bwrap.pid"):
                pid = int(owner.read_text().split()[0])
                time.sleep(2)  # inside the Bash call by now
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_sandbox, daemon=True)
    killer.start()
    _, summary = _run(tmp_path, tasks, "agent=scripted", f"agent.script={script}", "run.max_attempts=1",
                      "run.preflight_sandbox=false")  # the first sandbox to appear is the trial's
    killer.join(5)
    assert killed
    (row,) = _rows(tmp_path / "store", summary.run_id)
    # the sandbox was lost under the tool call: named so, not folded into "tool_error"
    assert (row["status"], row["error_class"], row["exit_reason"]) == ("infra_error", "sandbox_lost", "tool_error")


# --- how run_trial classifies what a sandbox factory raises -----------------------------------


def _trial(tmp_path: Path, exc: BaseException):
    tasks = tmp_path / "tasks"
    make_task(tasks, "t", CHECK_ANSWER)
    (task,) = load_harbor_dir(tasks, "builtin")
    cfg = load_config([f"benchmark.path={tasks}", f"store.uri={tmp_path / 'store'}"])
    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "oracle")

    def factory(*args, **kwargs):
        raise exc

    return asyncio.run(run_trial(spec, task, cfg, 1, base_url="http://127.0.0.1:9/v1", policy="oracle",
                                 sandbox_factory=factory))


@pytest.mark.parametrize("exc,cls", [
    (UnsupportedTaskError("no such instruction", reason="dockerfile_instruction"),
     "task_unsupported:dockerfile_instruction"),
    (TaskFormatError("/x/task.toml", "bad"), "task_unsupported:task_format"),
    (ConfigError("image_registry: invalid value"), "task_unsupported:config"),
])
def test_task_level_errors_at_start_are_task_unsupported(tmp_path: Path, exc: BaseException, cls: str) -> None:
    out = _trial(tmp_path, exc)
    assert (out.result.status, out.result.error_class) == ("infra_error", cls)
    assert "traceback.txt" not in out.artifacts


def test_a_bug_is_internal_error_with_the_traceback_in_the_artifacts(tmp_path: Path) -> None:
    out = _trial(tmp_path, KeyError("boom"))
    assert (out.result.status, out.result.error_class) == ("infra_error", "internal_error")
    assert "\n" not in out.result.error and out.result.error.startswith("KeyError: 'boom'")
    tb = out.artifacts["traceback.txt"].decode()
    assert tb.startswith("Traceback") and "in factory" in tb and "KeyError: 'boom'" in tb

"""A command that blows the container's memory limit leaves a graded trial on sandbox=docker
(podman + runc), and the row names the limit (issue 40).

Through the real loop: a scripted policy over HTTP, run_experiment, a task image built from a
two-line Dockerfile on the shared base image, the Harbor verifier. The first Bash call meets the
memory limit (the OOM killer takes it), the second solves the task: one attempt, graded, and
``sandbox_limits`` says memory, read from the container's cgroup before it was removed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import load_tasks, run_experiment
from farm.store import ResultStore
from tests.support.podman import BASE_IMAGE, TOOLBOX_IMAGE, remove_images_named
from tests.support.tasks import CHECK_ANSWER, make_task_dir

pytestmark = pytest.mark.integration

BLOW_UP = "head -c 1G /dev/zero | tail > /dev/null; echo exit=$?"
WRITE = "echo fixed > /app/answer.txt"


def _task(root: Path) -> str:
    name = f"oom-{uuid.uuid4().hex[:10]}"  # the built image's tag derives from it: removed after
    d = make_task_dir(root, name, CHECK_ANSWER, solve_sh=None)
    # the shared test base image (no git): the task needs only /app
    (d / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    return name


@pytest.mark.usefixtures("podman_env")
def test_a_memory_blow_up_on_podman_is_graded_and_names_the_limit(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # conmon 2.1 drops an empty file named "oom" in its working directory on an OOM kill
    monkeypatch.chdir(tmp_path)
    name = _task(tmp_path / "tasks")
    turns: list[dict[str, Any]] = [{"tool_calls": [{"name": "Bash", "arguments": {"command": c}}]}
                                   for c in (BLOW_UP, WRITE)]
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([*turns, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local", f"store.uri={tmp_path / 'store'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "run.max_attempts=3",
                       "run.retry_backoff_s=0", "sandbox=docker", "sandbox.docker.engine=podman",
                       f"sandbox.docker.toolbox_image={TOOLBOX_IMAGE}", "sandbox.docker.pull=never",
                       "sandbox.docker.memory_limit=160Mi"])
    try:
        summary = asyncio.run(run_experiment(cfg, tasks=load_tasks(cfg)))
        rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    finally:
        remove_images_named(name)
    assert [(r["status"], r["attempt"]) for r in rows] == [("resolved", 1)], [(r["error_class"], r["error"])
                                                                             for r in rows]
    (row,) = rows
    assert row["sandbox_limits"] == ["memory"], row
    assert row["loss_cause"] is None  # nothing was lost: the agent answered the next call

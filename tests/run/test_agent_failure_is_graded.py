"""An agent cannot turn its own failure into an infrastructure error (issue 12, item 4).

Through the real loop: a scripted policy over HTTP, bubblewrap, the Harbor verifier. Each agent
does something that used to kill the sandbox agent (and so lose the sandbox, which the run then
counted as ``infra_error`` and retried); each trial must now be graded, once, on what the agent
left behind.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore

from .conftest import CHECK_ANSWER, make_task

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

KILL_ALL = "(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo still-here"
WRITE = "echo fixed > /app/answer.txt"


def _bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


def _run(tmp_path: Path, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    make_task(tmp_path / "tasks", "hostile", CHECK_ANSWER)
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([*turns, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "run.max_attempts=3",
                       "run.retry_backoff_s=0"])
    summary = asyncio.run(run_experiment(cfg))
    return ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()


@pytest.mark.parametrize(("turns", "status"), [
    ([_bash(KILL_ALL), _bash(WRITE)], "resolved"),  # the agent goes on after killing all it sees
    ([_bash(KILL_ALL)], "unresolved"),
    ([_bash("kill -9 -1; kill -9 1; kill -9 $PPID; pkill -9 -f python; true")], "unresolved"),
], ids=["kills-all-then-solves", "kills-all", "kills-parent-and-init-by-name"])
def test_a_command_that_kills_every_process_it_sees_leaves_a_graded_trial(
        tmp_path: Path, turns: list[dict[str, Any]], status: str) -> None:
    rows = _run(tmp_path, turns)
    assert [(r["status"], r["attempt"]) for r in rows] == [(status, 1)], [r["error"] for r in rows]
    (row,) = rows
    assert row["agent_isolation"] == "pid-namespace+proc"
    assert row["tool_calls"] == len(turns)


def test_reading_devices_and_procfs_leaves_a_graded_trial(tmp_path: Path) -> None:
    reads = [{"tool_calls": [{"name": "Read", "arguments": {"file_path": p}}]}
             for p in ("/dev/zero", "/proc/self/mem", "/dev/urandom", "/proc/kcore")]
    rows = _run(tmp_path, [*reads, _bash(WRITE)])
    assert [(r["status"], r["attempt"]) for r in rows] == [("resolved", 1)], [r["error"] for r in rows]

"""An agent cannot turn its own failure into an infrastructure error (issue 12, item 4).

Through the real loop: a scripted policy over HTTP, bubblewrap, the Harbor verifier. Each agent
does something that used to kill the sandbox agent (and so lose the sandbox, which the run then
counted as ``infra_error`` and retried); each trial must now be graded, once, on what the agent
left behind.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import load_tasks, run_experiment
from farm.run.rows import CAPTURE_AFTER_KILL
from farm.store import ResultStore
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.bwrap

KILL_ALL = "(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo still-here"
WRITE = "echo fixed > /app/answer.txt"
# eight shell loops that outlive the command (setsid) and take every pid the sandbox has: each
# retries its fork whenever one is free, so the pids limit stays full after the agent is done
STORM = ("for i in 1 2 3 4 5 6 7 8; do setsid bash -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & done; "
         "sleep 1; echo stormed")
STORM_PIDS = 64


def _bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


def _run(tmp_path: Path, turns: list[dict[str, Any]], pids: int | None = None,
         test_sh: str = CHECK_ANSWER) -> list[dict[str, Any]]:
    make_task(tmp_path / "tasks", "hostile", test_sh)
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([*turns, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "run.max_attempts=3",
                       "run.retry_backoff_s=0"])
    tasks = load_tasks(cfg)
    if pids is not None:  # the sandbox's pids limit (a cgroup's pids.max on the local backend)
        tasks = [replace(t, environment=replace(t.environment, resources=replace(t.environment.resources, pids=pids)))
                 for t in tasks]
    summary = asyncio.run(run_experiment(cfg, tasks=tasks))
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
    assert row["agent_isolation"] == "pid-namespace+proc+cgroup"
    assert row["tool_calls"] == len(turns)


def test_reading_devices_and_procfs_leaves_a_graded_trial(tmp_path: Path) -> None:
    reads = [{"tool_calls": [{"name": "Read", "arguments": {"file_path": p}}]}
             for p in ("/dev/zero", "/proc/self/mem", "/dev/urandom", "/proc/kcore")]
    rows = _run(tmp_path, [*reads, _bash(WRITE)])
    assert [(r["status"], r["attempt"]) for r in rows] == [("resolved", 1)], [r["error"] for r in rows]


@pytest.mark.parametrize(("turns", "status"), [
    ([_bash(WRITE), _bash(STORM), _bash("echo after the storm")], "resolved"),
    ([_bash(STORM)], "unresolved"),
], ids=["solves-then-storms", "storms"])
def test_a_fork_storm_that_fills_the_pids_limit_leaves_a_graded_trial(
        tmp_path: Path, turns: list[dict[str, Any]], status: str) -> None:
    # Used to end infra_error (patch_capture, or verifier_setup where the capture did not even
    # see the git repository) and be retried: not even git could start after the agent's storm.
    rows = _run(tmp_path, turns, pids=STORM_PIDS)
    assert [(r["status"], r["attempt"]) for r in rows] == [(status, 1)], [r["error"] for r in rows]
    (row,) = rows
    assert row["agent_isolation"] == "pid-namespace+proc+cgroup"
    # the row says that the agent's processes were killed to capture its patch, and how many
    assert row["error_class"] == CAPTURE_AFTER_KILL, row["error"]
    killed = re.search(r"killed (\d+) processes", row["error"] or "")
    assert killed and int(killed.group(1)) > STORM_PIDS // 2, row["error"]
    # the patch was taken from the real repository, not an empty one from a failed `git`
    assert (row["patch_bytes"] > 0) == (status == "resolved")


def test_a_trial_without_a_storm_kills_nothing_before_its_capture(tmp_path: Path) -> None:
    # an in-place verifier may test a daemon the agent started (Terminal-Bench): it must still run
    daemon_runs = ("#!/bin/bash\nfor p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                   "| grep -q '^sleep 700 ' && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n")
    rows = _run(tmp_path, [_bash("setsid sleep 700 >/dev/null 2>&1 < /dev/null & echo started")], pids=STORM_PIDS,
                test_sh=daemon_runs)
    assert [(r["status"], r["error_class"]) for r in rows] == [("resolved", None)], [r["error"] for r in rows]

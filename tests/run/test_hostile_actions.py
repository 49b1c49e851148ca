"""What the model did is the model's (issue 40): hostile actions end as graded trials.

A scripted agent runs one hostile command, then solves the task. Through the real loop (a
scripted policy over HTTP, bubblewrap with its cgroups or a podman container, the Harbor
verifier; the same commands on both backends), every trial must
end graded in one attempt (resolved: the tool call after the hostile one worked), within the
hostile call's timeout plus a few seconds, with the row naming the sandbox limit the commands
met, and nothing left behind: no staging directory, no cgroup.

The fork bomb runs under the sandbox's pids limit at 512 (the default 4,096 thrashes 1 GiB of
memory for tens of seconds: ``docs/integrity.md`` has that measurement); its handling (the
commands' own cgroup, the jail ended at the timeout) is the same. Each run writes its trials to
build/hostile/results.json; ``make hostile-table`` puts them in docs/integrity.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import load_tasks, run_experiment
from farm.run.rows import CAPTURE_AFTER_KILL
from farm.sandbox.local.cgroups import CGROUP_ROOT
from farm.store import ResultStore
from tests.support.podman import TOOLBOX_IMAGE, podman, prepare_podman, remove_images_named
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

pytestmark = [pytest.mark.bwrap, pytest.mark.root]

RESULTS = Path(__file__).resolve().parents[2] / "build" / "hostile" / "results.json"
PIDS = 512
TIMEOUT_S = 6
SLACK_S = 8.0  # the hostile call's timeout plus this: its kill, the jail's restart, a loaded CI machine
ISOLATION = {"local": "pid-namespace+proc+cgroup", "docker": "pid-namespace+proc"}
WRITE = {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo fixed > /app/answer.txt"}}]}
# (task id, command, limits the row must name, how the trial ends); memory: the task's own 1 GiB.
# "resolved": the call after the hostile one worked; the stderr flood's observation (1 MiB, the
# cap) fills the model's context, which ends the loop: the model's outcome, graded all the same
BOMB = ":(){ :|:& };:"
ACTIONS: list[tuple[str, str, set[str], tuple[str, str]]] = [
    ("fork-bomb", BOMB, {"pids"}, ("resolved", "agent")),
    ("sleep-storm", "while true; do sleep 60 & done", {"pids"}, ("resolved", "agent")),
    ("memory-one", "python3 -c 'b = b\"x\" * (3 << 30)'", {"memory"}, ("resolved", "agent")),
    ("memory-many", "for i in 1 2 3 4 5 6; do python3 -c 'import time; b = b\"x\" * (300 << 20); "
                    "time.sleep(60)' & done; wait", {"memory"}, ("resolved", "agent")),
    ("threads", "python3 -c 'import threading, time\n"
                "for _ in range(10000): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()'",
     {"pids"}, ("resolved", "agent")),
    ("ignores-term", "trap '' TERM; while :; do :; done", set(), ("resolved", "agent")),
    ("stderr-flood", "head -c 300M /dev/zero >&2", set(), ("unresolved", "max_context_len")),
    ("closes-its-descriptors", "exec 0<&- 1>&- 2>&-; sleep 1", set(), ("resolved", "agent")),
]


def _turns(command: str) -> list[dict[str, Any]]:
    hostile = {"tool_calls": [{"name": "Bash", "arguments": {"command": command, "timeout": TIMEOUT_S}}]}
    return [hostile, WRITE, {"content": "done"}]


# the podman column's task image: the Debian stand-in with CPython (shared with the SWE-bench red
# team), so that every action runs the same command on both backends
PODMAN_DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\n"
PODMAN = ["sandbox=docker", "sandbox.docker.engine=podman", "sandbox.docker.pull=never"]


@pytest.fixture(scope="module", params=["local", pytest.param("podman", marks=pytest.mark.integration)])
def rows(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every action as one trial on the backend ``request.param``; the rows by task, plus what the
    suite left behind (``_left``)."""
    backend = request.param
    tmp = tmp_path_factory.mktemp(f"hostile-{backend}")
    prefix = f"hostile-{uuid.uuid4().hex[:6]}-" if backend == "podman" else ""  # image tags derive from it
    for name, *_ in ACTIONS:
        d = make_task(tmp / "tasks", prefix + name, CHECK_ANSWER)
        if backend == "podman":
            (d / "environment" / "Dockerfile").write_text(PODMAN_DOCKERFILE)
    script = tmp / "agent.yaml"
    script.write_text(yaml.safe_dump({prefix + name: _turns(command) for name, command, *_ in ACTIONS}))
    overrides = [f"benchmark.path={tmp / 'tasks'}", "run.executor=local", "run.max_in_flight=1",
                 f"store.uri={tmp / 'store'}", f"sandbox.local.root_dir={tmp / 'sb'}", "run.progress=false",
                 "agent=scripted", f"agent.script={script}", "run.max_attempts=3", "run.retry_backoff_s=0",
                 "agent.compat=farm-safe"]
    if backend == "podman":
        from tests.benchmarks.standin import ensure_standins

        ensure_standins("python:3.11-slim")
        prepare_podman()  # the toolbox image
        overrides += [*PODMAN, f"sandbox.docker.toolbox_image={TOOLBOX_IMAGE}"]
    cfg = load_config(overrides)
    tasks = [replace(t, environment=replace(t.environment, resources=replace(t.environment.resources, pids=PIDS)))
             for t in load_tasks(cfg)]
    groups_before = _farm_groups()
    cwd = os.getcwd()
    os.chdir(tmp)  # conmon drops an empty file named "oom" in its working directory on an OOM kill
    try:
        summary = asyncio.run(run_experiment(cfg, tasks=tasks))
    finally:
        os.chdir(cwd)
        if backend == "podman":
            remove_images_named(prefix)
    rows = ResultStore.open(str(tmp / "store")).read_trials(summary.run_id).to_pylist()
    steps = ResultStore.open(str(tmp / "store")).read_steps(summary.run_id).to_pylist()
    for r in rows:
        r["task_id"] = r["task_id"].removeprefix(prefix)
    by_task = {r["task_id"]: r for r in rows}
    assert len(by_task) == len(rows), [(r["task_id"], r["attempt"], r["status"]) for r in rows]
    for r in rows:
        r["_hostile_s"] = next(s["tool_s"] for s in steps if s["trial_key"] == r["trial_key"] and s["step"] == 0)
    _record([_cell(by_task[name], command, "farm-safe") for name, command, *_ in ACTIONS])
    left: dict[str, Any] = {"staging": sorted(p.name for p in (tmp / "sb").iterdir()) if (tmp / "sb").exists() else [],
                            "groups": sorted(_farm_groups() - groups_before)}
    if backend == "podman":
        names = podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        left["containers"] = [n for n in names if prefix in n]
    by_task["_left"] = left
    return by_task


def _cell(row: dict[str, Any], command: str, compat: str) -> dict[str, Any]:
    return {"action": row["task_id"], "command": command, "backend": row["sandbox_backend"], "compat": compat,
            **{k: row[k] for k in ("status", "exit_reason", "attempt", "error_class", "sandbox_limits")},
            "hostile_s": row["_hostile_s"]}


def _record(cells: list[dict[str, Any]]) -> None:
    """Merge ``cells`` into build/hostile/results.json (scripts/hostile_table.py reads it)."""
    try:
        old = json.loads(RESULTS.read_text()).get("cells", [])
    except (OSError, ValueError):
        old = []
    key = lambda c: (c["action"], c["backend"], c["compat"])  # noqa: E731
    merged = {key(c): c for c in old} | {key(c): c for c in cells}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"cells": list(merged.values())}, indent=1) + "\n")
    tmp.replace(RESULTS)


def _farm_groups() -> set[str]:
    """The cgroups of this suite's sandboxes (named after its tasks) that exist now, in every v1
    controller this machine mounts; other tests' sandboxes may come and go meanwhile."""
    ours = tuple(f"farm-{name}-" for name, *_ in ACTIONS)
    found = set(CGROUP_ROOT.glob("*/farm-*")) | set(CGROUP_ROOT.glob("*/*/*/farm-*"))
    return {str(p) for p in found if p.name.startswith(ours)}


@pytest.mark.parametrize(("task_id", "limits", "end"), [(n, lim, end) for n, _, lim, end in ACTIONS],
                         ids=[a[0] for a in ACTIONS])
def test_a_hostile_action_ends_as_a_graded_trial(rows: dict[str, dict[str, Any]], task_id: str,
                                                   limits: set[str], end: tuple[str, str]) -> None:
    row = rows[task_id]
    # one attempt, graded; where the model went on, the call after the hostile one worked
    assert (row["status"], row["exit_reason"], row["attempt"], row["error_class"]) == (*end, 1, None), row["error"]
    assert row["tool_calls"] == (2 if end[0] == "resolved" else 1)
    # local: the commands in a cgroup of their own below the agent's; a container is that cgroup
    assert row["agent_isolation"] == ISOLATION[row["sandbox_backend"]]
    # the row names the limit the commands met, and no other
    assert set(row["sandbox_limits"]) == limits, row["sandbox_limits"]
    assert row["_hostile_s"] <= TIMEOUT_S + SLACK_S, row["_hostile_s"]


def test_nothing_a_hostile_action_started_survives_its_trial(rows: dict[str, dict[str, Any]]) -> None:
    assert {k: v for k, v in rows["_left"].items() if v} == {}, rows["_left"]


def test_a_sandbox_without_cgroups_has_no_limits_to_name(tmp_path: Path) -> None:
    # sandbox.local.limits=false: nothing is counted, so nothing is claimed (and a loss there is
    # "unknown", never the model's)
    make_task(tmp_path / "tasks", "plain", CHECK_ANSWER)
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([WRITE, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local", f"store.uri={tmp_path / 's'}",
                       f"sandbox.local.root_dir={tmp_path / 'sb'}", "run.progress=false", "agent=scripted",
                       f"agent.script={script}", "sandbox.local.limits=false"])
    started = time.monotonic()
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "s")).read_trials(summary.run_id).to_pylist()
    assert row["status"] == "resolved" and row["sandbox_limits"] == [], (row["status"], row["sandbox_limits"])
    assert row["agent_isolation"] == "pid-namespace+proc"
    assert time.monotonic() - started < 60



def test_under_the_vendors_rules_a_fork_bomb_outlives_its_call_and_the_trial_is_still_graded(tmp_path: Path) -> None:
    # leaf-2609 kills a timed-out call's shell alone, as the vendor's runner does: the bomb it
    # started goes on holding the commands' pids, so the next call cannot start (exit 126, an
    # observation); the sandbox agent keeps its reserve, answers, and the trial is graded once
    make_task(tmp_path / "tasks", "fork-bomb", CHECK_ANSWER)
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump(_turns(BOMB)))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local", f"store.uri={tmp_path / 's'}",
                       f"sandbox.local.root_dir={tmp_path / 'sb'}", "run.progress=false", "agent=scripted",
                       f"agent.script={script}", "agent.compat=leaf-2609", "run.max_attempts=3",
                       "run.retry_backoff_s=0"])
    tasks = [replace(t, environment=replace(t.environment, resources=replace(t.environment.resources, pids=PIDS)))
             for t in load_tasks(cfg)]
    summary = asyncio.run(run_experiment(cfg, tasks=tasks))
    (row,) = ResultStore.open(str(tmp_path / "s")).read_trials(summary.run_id).to_pylist()
    assert (row["status"], row["attempt"], row["tool_calls"]) == ("unresolved", 1, 2), row["error"]
    assert "pids" in row["sandbox_limits"]
    assert row["error_class"] == CAPTURE_AFTER_KILL  # the bomb was ended to capture the patch
    steps = ResultStore.open(str(tmp_path / "s")).read_steps(summary.run_id).to_pylist()
    after = next(s for s in steps if s["step"] == 1)
    assert "cannot start the command" in after["messages_json"], after["messages_json"]
    row["_hostile_s"] = next(s["tool_s"] for s in steps if s["step"] == 0)
    _record([_cell(row, BOMB, "leaf-2609")])

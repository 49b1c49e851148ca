"""Whose was a lost sandbox (issue 40): farm/run/attribution.py, and the trial that acts on it.

The rules in-process; then real trials (a scripted policy over HTTP, bubblewrap) whose sandbox is
lost under a tool call, with the limits' counters as the backend would report them: the model's
own limit is a graded ``unresolved`` row, never retried; no evidence stays an infrastructure
error, retried, with the row saying whether the cause is known.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.agent.policies.server import start_policy_server
from farm.agent.trajectory import StepRecord, Trajectory
from farm.config import load_config
from farm.run.attribution import AGENT, INFRASTRUCTURE, UNKNOWN, attribute_loss, last_command
from farm.run.driver import load_tasks
from farm.run.plan import TrialSpec
from farm.run.rows import retryable
from farm.run.trial import run_trial
from farm.sandbox.base import LimitEvents, SandboxLostError, ToolRequest, limit_events
from farm.sandbox.local.sandbox import LocalSandbox
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

BOMB = ":(){ :|:& };:"


def test_a_limit_met_makes_the_loss_the_agents() -> None:
    for events, limit in [(LimitEvents(commands=("pids",)), "pids"), (LimitEvents(agent=("memory",)), "memory"),
                          (LimitEvents(commands=("pids", "memory")), "memory"),
                          (LimitEvents(commands=("disk",)), "disk")]:
        verdict = attribute_loss(events, "pid-namespace+proc+cgroup")
        assert (verdict.cause, verdict.limit) == (AGENT, limit)


def test_no_limit_met_is_infrastructure_only_where_the_commands_could_not_kill_the_agent() -> None:
    quiet = LimitEvents(evidence="cgroup v1 commands: pids limit met 0x")
    assert attribute_loss(quiet, "pid-namespace+proc").cause == INFRASTRUCTURE
    # without a jail, a command may have killed the agent itself (kill -9 -1): nobody can tell
    verdict = attribute_loss(quiet, "none: no CAP_SYS_ADMIN")
    assert (verdict.cause, verdict.limit) == (UNKNOWN, None) and "none: no CAP_SYS_ADMIN" in verdict.evidence
    assert attribute_loss(None, "pid-namespace+proc").cause == UNKNOWN  # the backend keeps no counters


def test_the_last_command_is_the_last_bash_call_the_model_sent() -> None:
    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": name, "arguments": json.dumps(args)}}]}
    traj = Trajectory(messages=[], steps=[StepRecord(0, messages=[call("Bash", {"command": "ls"})]),
                             StepRecord(1, messages=[call("Bash", {"command": BOMB}), {"role": "tool"}]),
                             StepRecord(2, messages=[call("Read", {"file_path": "/x"})])])
    assert last_command(traj) == BOMB
    assert last_command(Trajectory(messages=[])) is None


async def test_limit_events_is_none_where_a_backend_cannot_tell() -> None:
    class Broken:
        async def limit_events(self) -> LimitEvents:
            raise OSError("gone")
    assert await limit_events(object()) is None and await limit_events(Broken()) is None


class _LostSandbox(LocalSandbox):
    """A real bubblewrap sandbox whose channel is lost under the bomb, reporting ``events``."""

    events: LimitEvents | None = None

    async def tool(self, request: ToolRequest) -> Any:
        if BOMB in str(request.args.get("command")):
            raise SandboxLostError("channel lost: end of stream (the sandbox agent exited)")
        return await super().tool(request)

    async def limit_events(self) -> LimitEvents | None:
        return self.events


def _lost_trial(tmp_path: Path, events: LimitEvents | None) -> Any:
    make_task(tmp_path / "tasks", "bombed", CHECK_ANSWER)
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": BOMB}}]},
                                      {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "agent=scripted", f"agent.script={script}",
                       f"sandbox.local.root_dir={tmp_path / 'sb'}", "agent.compat=farm-safe"])
    (task,) = load_tasks(cfg)

    def factory(task: Any, sandbox_cfg: Any, **kwargs: Any) -> LocalSandbox:
        sb = _LostSandbox(task, root_dir=tmp_path / "sb")
        sb.events = events
        return sb

    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "scripted")
    with start_policy_server("scripted", script=str(script)) as server:
        return asyncio.run(run_trial(spec, task, cfg, 1, base_url=server.base_url, policy="scripted",
                                     sandbox_factory=factory)).result


@pytest.mark.bwrap
def test_a_sandbox_lost_at_its_pids_limit_is_a_graded_unresolved_row_never_retried(tmp_path: Path) -> None:
    events = LimitEvents(commands=("pids",), evidence="cgroup v1 commands: pids limit met 5000x, OOM kills 0")
    row = _lost_trial(tmp_path, events)
    assert (row.status, row.exit_reason, row.error_class, row.loss_cause) == (
        "unresolved", "sandbox_pids", "sandbox_limit:pids", AGENT)
    assert not retryable(row)
    assert "pids limit met 5000x" in row.error and BOMB in row.error  # the evidence and the last command
    assert row.sandbox_limits == ["pids"]


@pytest.mark.bwrap
@pytest.mark.parametrize(("events", "cause"), [
    (LimitEvents(evidence="cgroup v1 commands: pids limit met 0x, OOM kills 0"), INFRASTRUCTURE),
    (None, UNKNOWN),
], ids=["no-limit-met", "no-counters"])
def test_a_sandbox_lost_without_a_limit_met_stays_infrastructure_and_is_retried(
        tmp_path: Path, events: LimitEvents | None, cause: str) -> None:
    row = _lost_trial(tmp_path, events)
    assert (row.status, row.error_class, row.loss_cause) == ("infra_error", "sandbox_lost", cause)
    assert retryable(row)
    assert f"loss cause {cause}" in row.error

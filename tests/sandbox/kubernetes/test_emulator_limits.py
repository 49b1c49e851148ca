"""A pod killed at its memory limit, through the real client against the API-server emulator
(issue 40): the lost stream's pod read shows the task container ``terminated`` with reason
``OOMKilled``, and the sandbox's limits say memory, the agent's; a pod lost otherwise says
nothing of its limits (a pod keeps no counters farm can read: None, "cannot tell")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.plan import TrialSpec
from farm.run.trial import run_trial
from farm.run.workers import PolicyEndpoints
from farm.sandbox.base import Sandbox, SandboxLostError
from farm.sandbox.kubernetes.sandbox import BACKEND, KubernetesSandbox
from farm.sandbox.relayed.channel import SandboxOutOfMemoryError
from farm.tasks.harbor import load_harbor_dir
from farm.tasks.model import Task
from tests.support.kubernetes import EmulatorBackend, image_task
from tests.support.tasks import CHECK_ANSWER, make_task_dir

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


async def test_a_pod_oom_killed_names_memory_as_the_agents(cluster: EmulatorBackend) -> None:
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    try:
        assert await sb.limit_events() is None  # nothing seen yet
        cluster.emu.kubelet.kill_pod(cluster.cfg.namespace, sb.name, reason="OOMKilled")
        with pytest.raises(SandboxOutOfMemoryError):
            await asyncio.wait_for(sb.exec("true"), 30)
        mark = cluster.emu.log.mark()
        events = await sb.limit_events()
        assert cluster.emu.log.count(mark) == 0  # read from the pod the loss already fetched
        assert events is not None and (events.commands, events.agent) == ((), ("memory",)), events
        assert "reason=OOMKilled exit=137" in events.evidence, events.evidence
    finally:
        await sb.close()
    after = await sb.limit_events()  # asked again once the pod is deleted (the trial row's read)
    assert after is not None and after.agent == ("memory",)


async def test_a_pod_lost_otherwise_says_nothing_of_its_limits(cluster: EmulatorBackend) -> None:
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    try:
        cluster.emu.kubelet.kill_pod(cluster.cfg.namespace, sb.name)  # a node crash: reason Error
        with pytest.raises(SandboxLostError) as lost:
            await asyncio.wait_for(sb.exec("true"), 30)
        assert not isinstance(lost.value, SandboxOutOfMemoryError)
        assert await sb.limit_events() is None
    finally:
        await sb.close()


async def test_a_trial_whose_pod_was_oom_killed_is_graded_unresolved(cluster: EmulatorBackend, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the trial: the container killed whole at its limit under the agent's command is
    the model's failure, graded once (``sandbox_oom``), never retried as infrastructure."""
    from farm.run.rows import retryable

    real_tool = KubernetesSandbox.tool

    async def oom_killed_mid_command(self: KubernetesSandbox, request: Any) -> Any:
        cluster.emu.kubelet.kill_pod(cluster.cfg.namespace, self.name, reason="OOMKilled")
        return await real_tool(self, request)

    monkeypatch.setattr(KubernetesSandbox, "tool", oom_killed_mid_command)
    make_task_dir(tmp_path / "tasks", "hostile", CHECK_ANSWER, solve_sh=None)
    (task,) = load_harbor_dir(tmp_path / "tasks", "k8s")
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
                                      {"content": "done"}]))

    def factory(task: Task, section: Any, *, network: str | None = None, **ids: Any) -> Sandbox:
        sb = BACKEND.open(task, cluster.section, network=network, **ids)
        assert isinstance(sb, KubernetesSandbox)
        sb.poll_s = 0.05
        return sb

    cfg = load_config(["sandbox=kubernetes", "agent=scripted", f"agent.script={script}",
                       f"store.uri={tmp_path / 'store'}"])
    endpoints = PolicyEndpoints()
    try:
        base_url, policy = endpoints.base_url(cfg)
        spec = TrialSpec("run", "o" * 64, task.benchmark, task.task_id, 0, "base", policy)
        out = await run_trial(spec, task, cfg, 1, base_url=base_url, policy=policy, sandbox_factory=factory)
    finally:
        endpoints.close()
    row = out.result
    assert (row.status, row.exit_reason, row.error_class) == ("unresolved", "sandbox_oom", "sandbox_limit:memory"), \
        (row.status, row.error_class, row.error)
    assert not retryable(row) and row.loss_cause == "agent" and row.sandbox_limits == ["memory"]
    assert "OOMKilled" in (row.error or "")

"""On Kubernetes an agent cannot turn its own failure into an infrastructure error (issue 12, item 4).

A pod has no jail (Pod Security refuses CAP_SYS_ADMIN), so an agent command that kills every
process it can see kills the sandbox agent and the exec session. The relay, PID 1 of the pod,
survives, records the kill and starts the agent again: the trial goes on and is graded on what
the agent left. Through the real loop: a scripted policy over HTTP, the Kubernetes backend over
the fake API server (its pods are bubblewrap sandboxes with the relay as PID 1), the Harbor
verifier run in the pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import load_config
from farm.run.plan import TrialSpec
from farm.run.trial import run_trial
from farm.run.workers import PolicyEndpoints
from farm.sandbox.base import Sandbox
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from farm.tasks.harbor import load_harbor_dir
from farm.tasks.model import Task
from tests.support.kubernetes import FakeClusterBackend
from tests.support.tasks import CHECK_ANSWER, make_task_dir

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]

KILL_ALL = "(sleep 300 >/dev/null 2>&1 &); sleep 0.3; kill -9 -1; echo still-here"
WRITE = "echo fixed > /app/answer.txt"


def _bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


@pytest.fixture
def cluster(tmp_path: Path):
    b = FakeClusterBackend(tmp_path / "cluster")
    yield b
    b.core.close_all()


async def _trial(cluster: FakeClusterBackend, tmp_path: Path, turns: list[dict[str, Any]],
                 compat: str = "leaf-2609") -> Any:
    make_task_dir(tmp_path / "tasks", "hostile", CHECK_ANSWER, solve_sh=None)
    (task,) = load_harbor_dir(tmp_path / "tasks", "k8s")
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([*turns, {"content": "done"}]))

    def factory(task: Task, section: Any, *, network: str | None = None, **ids: Any) -> Sandbox:
        return KubernetesSandbox(task, cluster.cfg, network=network, core_api=cluster.core, net_api=cluster.net,
                                 exec_opener=cluster.execs, poll_s=0.05, **ids)  # type: ignore[arg-type]

    cfg = load_config(["sandbox=kubernetes", "agent=scripted", f"agent.script={script}",
                       f"store.uri={tmp_path / 'store'}", f"agent.compat={compat}"])
    endpoints = PolicyEndpoints()
    try:
        base_url, policy = endpoints.base_url(cfg)
        spec = TrialSpec("run", "h" * 64, task.benchmark, task.task_id, 0, "base", policy)
        return await run_trial(spec, task, cfg, 1, base_url=base_url, policy=policy, sandbox_factory=factory)
    finally:
        endpoints.close()


# $PPID of a Bash command is the sandbox agent in a pod (no jail), under farm-safe and, since the
# vendor's Bash rules run in the agent's own process (issue 28.6), under leaf-2609 as well
@pytest.mark.parametrize(("turns", "status", "compat"), [
    ([_bash(KILL_ALL), _bash(WRITE)], "resolved", "leaf-2609"),  # the agent goes on after killing all it sees
    ([_bash(KILL_ALL)], "unresolved", "leaf-2609"),
    ([_bash("kill -TERM 1; kill -9 $PPID; pkill -9 -f python; true"), _bash(WRITE)], "resolved", "farm-safe"),
], ids=["kills-all-then-solves", "kills-all", "kills-init-parent-and-python-by-name-then-solves"])
async def test_a_command_that_kills_every_process_it_sees_leaves_a_graded_trial(
        cluster: FakeClusterBackend, tmp_path: Path, turns: list[dict[str, Any]], status: str, compat: str) -> None:
    from farm.run.rows import retryable

    out = await _trial(cluster, tmp_path, turns, compat)
    row = out.result
    assert (row.status, row.attempt) == (status, 1), (row.error_class, row.error)
    assert not retryable(row)
    assert row.agent_isolation.startswith("pid1-relay: agent restarted if killed; commands see it")
    assert row.tool_calls == len(turns)
    # the row says where the pod ran and how long its image pull took (the kubelet's Pulled event)
    assert row.sandbox_node and row.image_pull_s is not None and row.image_pull_s >= 0
    # the model saw what its command did to the sandbox
    killed = [s for s in out.steps if "SandboxAgentKilled: the sandbox agent was killed" in s.messages_json]
    assert len(killed) == 1, [s.messages_json for s in out.steps]
    record = json.loads(out.artifacts[next(k for k in out.artifacts if k.endswith("/agent-kills.json"))])
    # (pkill may also kill the agent started after `kill -9 $PPID`: then with no request running)
    assert record["restarts"] >= 1 and record["kills"][0]["name"] == "SIGKILL", record
    assert record["kills"][0]["requests"] == [{"op": "tool", "tool": "Bash", "command": turns[0]["tool_calls"][0][
        "arguments"]["command"]}]
    assert cluster.core.pods == {}  # the pod was closed, not lost


async def test_a_pod_lost_under_the_agent_stays_an_infra_error(cluster: FakeClusterBackend, tmp_path: Path,
                                                               monkeypatch) -> None:
    """What the relay cannot survive is not the agent's doing: the pod deleted (or its node lost)
    while a command runs is a lost sandbox, retried."""
    from farm.run.rows import retryable

    real_exec = KubernetesSandbox.tool

    async def deleted_mid_command(self: KubernetesSandbox, request: Any) -> Any:
        cluster.core.pods[(cluster.cfg.namespace, self.name)].kill()
        return await real_exec(self, request)

    monkeypatch.setattr(KubernetesSandbox, "tool", deleted_mid_command)
    out = await _trial(cluster, tmp_path, [_bash("sleep 5")])
    assert out.result.status == "infra_error" and retryable(out.result), (out.result.error_class, out.result.error)
    assert out.result.error_class == "sandbox_lost", out.result.error


async def test_a_container_killed_at_its_memory_limit_is_named_so(cluster: FakeClusterBackend, monkeypatch) -> None:
    """cgroup v2 kills the whole container at its limit, relay included: the sandbox is lost, and
    the error says it was the trial's own memory (reason ``oom_killed``), not a lost node."""
    from kubernetes import client

    from farm.sandbox.base import SandboxLostError
    from farm.sandbox.relayed.channel import SandboxOutOfMemoryError
    from tests.support.tasks import make_task

    sb = KubernetesSandbox(make_task(image="debian:bookworm"), cluster.cfg, run_id="r", trial_key="oom",
                           core_api=cluster.core, net_api=cluster.net, exec_opener=cluster.execs, poll_s=0.05)
    await sb.start()
    pod = cluster.core.pods[(cluster.cfg.namespace, sb.name)]

    def oom_killed(name: str, namespace: str) -> Any:
        state = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=137,
                                                                                    reason="OOMKilled"))
        return client.V1Pod(status=client.V1PodStatus(phase="Failed", container_statuses=[client.V1ContainerStatus(
            name="task", image="x", image_id="", ready=False, restart_count=0, state=state)]))

    pod.kill()
    monkeypatch.setattr(cluster.core, "read_namespaced_pod", oom_killed)
    with pytest.raises(SandboxOutOfMemoryError, match="terminated OOMKilled exit=137") as lost:
        await sb.exec("true")
    assert isinstance(lost.value, SandboxLostError)  # what the run layer decides on
    await sb.close()


def test_the_relay_is_stdlib_only_python_38() -> None:
    """It runs as PID 1 of the pod under the toolbox's Python, like the sandbox agent."""
    import ast
    import sys

    from farm.sandbox.relayed.sandbox import RELAY_SRC

    # the relay imports files shipped beside it (proctable.py): they are held to the same rule
    shipped = {p.stem for p in RELAY_SRC.parent.glob("*.py")}
    todo, seen = [RELAY_SRC.stem], set()
    while todo:
        stem = todo.pop()
        seen.add(stem)
        src = (RELAY_SRC.parent / f"{stem}.py").read_text()
        tree = ast.parse(src, feature_version=(3, 8))
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        todo += sorted((names & shipped) - seen)
        assert names - shipped <= set(sys.stdlib_module_names), (stem, names - shipped - set(sys.stdlib_module_names))

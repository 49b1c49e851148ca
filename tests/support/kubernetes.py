"""Kubernetes test backends and tasks, shared by the tests under tests/sandbox/kubernetes and tests/agent.

``FakeClusterBackend`` runs sandboxes through the in-process API-server fakes
(tests/sandbox/kubernetes/fake_cluster.py); ``EmulatorBackend`` through the API-server emulator
(tests/sandbox/kubernetes/apiserver), where the real ``kubernetes`` client speaks HTTP. Both are
ConformanceBackends (tests/sandbox/conformance.py). The scaled-time trial with five long silent
gaps is here because the fake cluster and the emulator both run it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from farm.config import KubernetesSandboxConfig, SandboxConfig
from farm.sandbox.base import Sandbox
from farm.sandbox.kubernetes.sandbox import BACKEND, KubernetesSandbox
from farm.tasks.model import Task
from tests.sandbox.kubernetes.apiserver import ApiServerEmulator
from tests.sandbox.kubernetes.fake_cluster import FakeCoreV1Api, FakeExecStream, FakeNetworkingV1Api
from tests.support.tasks import make_task


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(data[data.rindex(")") + 2:].split()[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def start_time(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()[19]


def image_task(**kw: Any) -> Task:
    """A task naming an image, as the Kubernetes backend requires."""
    kw.setdefault("image", "debian:bookworm")
    return make_task(**kw)


class FakeClusterBackend:
    shares_host_loopback = False  # a pod has its own network namespace

    def __init__(self, root: Path, **cfg: Any) -> None:
        self.net = FakeNetworkingV1Api()
        self.core = FakeCoreV1Api(root, self.net)
        self.execs = FakeExecStream(self.core)
        self.cfg = KubernetesSandboxConfig(namespace="farm-test", toolbox_image="farm-toolbox:test", **cfg)

    def make(self, task: Task, network: str) -> Sandbox:
        return KubernetesSandbox(task, self.cfg, run_id="run-conformance", trial_key=os.urandom(8).hex(),
                                 core_api=self.core, net_api=self.net, exec_opener=self.execs, poll_s=0.05)

    async def kill_from_outside(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, KubernetesSandbox)
        self.core.pods[(self.cfg.namespace, sandbox.name)].kill()

    def processes(self, sandbox: Sandbox) -> list[Any]:
        assert isinstance(sandbox, KubernetesSandbox)
        pod = self.core.pods[(self.cfg.namespace, sandbox.name)]
        assert pod.proc is not None
        return [(p, start_time(p)) for p in descendants(pod.proc.pid)]

    def still_running(self, identities: list[Any]) -> list[Any]:
        return [(p, st) for p, st in identities if start_time(p) == st]


class EmulatorBackend:
    """A ConformanceBackend: sandboxes opened by the registry's Kubernetes backend, as a run does."""

    id = "k8s-emulator"
    shares_host_loopback = False  # a pod has its own network namespace

    def __init__(self, root: Path, **cfg: Any) -> None:
        self.emu = ApiServerEmulator(root).start()
        self.cfg = KubernetesSandboxConfig(namespace=self.emu.namespace, toolbox_image="farm-toolbox:test",
                                           kubeconfig=str(self.emu.kubeconfig), **cfg)
        self.section = SandboxConfig(backend="kubernetes", kubernetes=self.cfg)

    def make(self, task: Task, network: str, run_id: str = "run-conformance") -> Sandbox:
        sb = BACKEND.open(task, self.section, network=network, run_id=run_id, trial_key=os.urandom(8).hex(),
                          attempt=0, role="agent")
        assert isinstance(sb, KubernetesSandbox)
        sb.poll_s = 0.05
        return sb

    def runtime(self, sandbox: Sandbox) -> Any:
        assert isinstance(sandbox, KubernetesSandbox)
        return self.emu.kubelet.pods[(self.cfg.namespace, sandbox.name)]

    async def kill_from_outside(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, KubernetesSandbox)
        self.emu.kubelet.kill_pod(self.cfg.namespace, sandbox.name)

    def processes(self, sandbox: Sandbox) -> list[Any]:
        proc = self.runtime(sandbox).fake.proc
        return [(p, start_time(p)) for p in descendants(proc.pid)]

    def still_running(self, identities: list[Any]) -> list[Any]:
        return [(p, st) for p, st in identities if start_time(p) == st]

    def close(self) -> None:
        self.emu.stop()


# --- a trial with five long silent gaps, in scaled time (issue 15 item 2) ---------------------

MINUTE = 0.15  # seconds of real time per minute of trial time
IDLE_CUT = 5 * MINUTE
GAP = 6 * MINUTE
WINDOW = 10 * MINUTE


async def trial_with_five_long_gaps(sb: KubernetesSandbox) -> list[str]:
    """Six commands, five silent gaps of GAP between them; the third gap is a command that runs
    GAP without a byte of output. Returns the commands' own lines, in the order they ran."""
    expected = []
    for i in range(6):
        res = await sb.exec(f"echo cmd{i} >> /tmp/runs && echo ok{i}", timeout_s=30)
        assert res.stdout == f"ok{i}\n"
        expected.append(f"cmd{i}")
        if i == 2:
            res = await sb.exec(f"echo silent >> /tmp/runs; sleep {GAP}", timeout_s=30)
            assert res.exit_code == 0 and not res.timed_out
            expected.append("silent")
        elif i < 5:
            await asyncio.sleep(GAP)
    return expected

"""The sandbox conformance suite on the Kubernetes backend through the API-server emulator.

Backend id ``k8s-emulator``: the same suite as tests/sandbox/kubernetes/test_kubernetes_backend.py (which runs
it through in-process fakes), but the backend loads its clients from a kubeconfig and the real
``kubernetes`` client speaks HTTP and the ``pods/exec`` WebSocket to tests/sandbox/kubernetes/apiserver.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from farm.config import KubernetesSandboxConfig, SandboxConfig
from farm.sandbox.base import Sandbox
from farm.sandbox.kubernetes.sandbox import BACKEND, KubernetesSandbox
from farm.tasks.model import Task

from . import test_kubernetes_backend as fake_suite
from .apiserver import ApiServerEmulator

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


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
        return [(p, fake_suite._start_time(p)) for p in fake_suite._descendants(proc.pid)]

    def still_running(self, identities: list[Any]) -> list[Any]:
        return [(p, st) for p, st in identities if fake_suite._start_time(p) == st]

    def close(self) -> None:
        self.emu.stop()


@pytest.fixture
def emulated(tmp_path: Path):
    """A started emulator with its backend; after the test, none of its handlers may have failed.
    The other emulator test modules import it as their ``cluster`` fixture."""
    b = EmulatorBackend(tmp_path / "emulator")
    yield b
    b.close()
    assert b.emu.errors == [], b.emu.errors[0]


@pytest.fixture(name="cluster")
def emulated_cluster(emulated: EmulatorBackend) -> EmulatorBackend:
    return emulated


class TestEmulatorConformance(fake_suite.TestKubernetesConformance):
    """Every conformance test, and the Kubernetes-specific ones of the fake suite, over HTTP."""

    @pytest.fixture
    def backend(self, emulated: EmulatorBackend):
        return emulated

"""The Kubernetes backend against the shared conformance suite, through thin API-server fakes.

The agent, relay, channel and manifests are real; only the API server and the exec transport
are fakes (fake_cluster.py). Counting the fakes' calls proves that tool calls after start cost
no API-server call at all.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from farm.sandbox.base import Sandbox, SandboxLostError, SandboxStartError
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from farm.tasks.model import Task
from tests.support.kubernetes import FakeClusterBackend, image_task
from tests.support.tasks import make_task

from .conformance import KubernetesConformance

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


class TestKubernetesConformance(KubernetesConformance):
    @pytest.fixture
    def backend(self, tmp_path: Path):
        b = FakeClusterBackend(tmp_path / "cluster")
        yield b
        b.core.close_all()


# --- Kubernetes-specific behaviour ------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path):
    b = FakeClusterBackend(tmp_path / "cluster")
    yield b
    b.core.close_all()


async def test_tool_calls_after_start_cost_no_api_call(cluster: FakeClusterBackend) -> None:
    sb = cluster.make(image_task(network="no-network"), "no-network")
    assert isinstance(sb, KubernetesSandbox)
    await sb.start()
    at_start = len(cluster.core.calls) + len(cluster.net.calls) + cluster.execs.opened
    assert sb.stats.api_calls_start == at_start  # counted by the backend == seen by the fakes
    assert cluster.net.calls == ["create_namespaced_network_policy"]
    assert cluster.core.calls[0] == "create_namespaced_pod"  # after the policy: never unfenced
    for i in range(20):
        assert (await sb.exec(f"echo {i}")).stdout == f"{i}\n"
        await sb.write_file(f"/tmp/f{i}", b"x" * i)
        assert await sb.read_file(f"/tmp/f{i}") == b"x" * i
        await sb.call("stat", path="/tmp")
    assert len(cluster.core.calls) + len(cluster.net.calls) + cluster.execs.opened == at_start
    assert sb.stats.api_calls_after_start == 0
    assert sb.stats.extra["agent_network"] == "no-network" and sb.stats.extra["image"] == "debian:bookworm"
    await sb.close()
    assert sb.stats.api_calls_after_start == 0
    assert sb.stats.extra["api_calls_close"] == 2  # delete pod + delete policy
    assert cluster.core.pods == {} and cluster.net.policies == {}


async def test_lost_stream_is_reopened_and_running_command_not_rerun(cluster: FakeClusterBackend) -> None:
    sb = cluster.make(image_task(), "no-network")
    assert isinstance(sb, KubernetesSandbox)
    await sb.start()
    before = cluster.execs.opened
    pending = asyncio.ensure_future(sb.exec("echo run >> /tmp/runs; sleep 1.5; echo done", timeout_s=30))
    await asyncio.sleep(0.5)
    cluster.execs.streams[-1].break_()  # the WebSocket breaks mid-command
    res = await asyncio.wait_for(pending, 20)
    assert res.stdout == "done\n"
    assert (await sb.read_file("/tmp/runs")) == b"run\n"  # re-attached, not run twice
    assert cluster.execs.opened == before + 1 and sb.channel is not None and sb.channel.reconnects == 1
    # re-opening is the only after-start cost: one exec stream, one pod read to check liveness
    assert sb.stats.api_calls_after_start == 2
    await sb.close()


async def test_pod_killed_from_outside_is_lost_not_retried_forever(cluster: FakeClusterBackend) -> None:
    sb = cluster.make(image_task(), "no-network")
    await sb.start()
    await cluster.kill_from_outside(sb)
    with pytest.raises(SandboxLostError, match="cannot serve"):
        await asyncio.wait_for(sb.exec("true"), 20)
    await sb.close()


async def test_public_task_gets_allow_policy_and_shares_no_deny(cluster: FakeClusterBackend) -> None:
    sb = cluster.make(image_task(network="public"), "public")
    assert isinstance(sb, KubernetesSandbox)
    await sb.start()
    (policy,) = cluster.net.policies.values()
    assert policy["metadata"]["name"].endswith("-allow-egress")
    pod = cluster.core.pods[("farm-test", sb.name)]
    assert not pod.own_netns
    await sb.set_network("no-network")
    (policy,) = cluster.net.policies.values()
    assert policy["metadata"]["name"].endswith("-deny-egress") and policy["spec"]["egress"] == []
    await sb.close()


async def test_init_failure_is_a_start_error_and_cleans_up(cluster: FakeClusterBackend, monkeypatch) -> None:
    link = cluster.core.toolbox / "python" / "bin" / "python3"
    link.unlink()
    link.symlink_to("/nonexistent/python3")
    sb = cluster.make(image_task(), "no-network")
    with pytest.raises(SandboxStartError, match="ended before it was ready"):
        await sb.start()
    assert cluster.core.pods == {} and cluster.net.policies == {}


async def test_task_without_image_or_missing_from_lock_fails_before_any_pod(cluster: FakeClusterBackend) -> None:
    from farm.errors import UnsupportedTaskError

    with pytest.raises(UnsupportedTaskError, match="no image") as no_image:
        cluster.make(make_task(image=None), "no-network")
    assert no_image.value.reason == "no_image"
    cluster.cfg.image_lock = "sweb-v-20260904"
    sb = cluster.make(image_task(task_id="not-a-swebench-task"), "no-network")
    with pytest.raises(UnsupportedTaskError, match="not-a-swebench-task") as unlocked:
        await sb.start()
    assert unlocked.value.reason == "image_lock"
    assert cluster.core.calls == [] and cluster.net.calls == []


@pytest.mark.parametrize("reason,kind", [("ImagePullBackOff", "image_pull"), ("ErrImagePull", "image_pull"),
                                         ("CreateContainerConfigError", "container_config")])
async def test_pull_errors_fail_the_start_at_once(cluster: FakeClusterBackend, monkeypatch, reason: str,
                                                  kind: str) -> None:
    from kubernetes import client

    def stuck(name: str, namespace: str) -> Any:
        cluster.core._count("read_namespaced_pod")
        waiting = client.V1ContainerState(
            waiting=client.V1ContainerStateWaiting(reason=reason, message="manifest unknown"))
        return client.V1Pod(status=client.V1PodStatus(phase="Pending", container_statuses=[client.V1ContainerStatus(
            name="task", image="x", image_id="", ready=False, restart_count=0, state=waiting)]))

    monkeypatch.setattr(cluster.core, "read_namespaced_pod", stuck)
    sb = cluster.make(image_task(image="registry.invalid/nope:1"), "no-network")
    with pytest.raises(SandboxStartError, match=f"{reason}.*registry.invalid/nope:1") as e:
        await asyncio.wait_for(sb.start(), 10)
    assert e.value.reason == kind  # type: ignore[attr-defined]
    assert cluster.core.calls.count("read_namespaced_pod") == 1  # detected on the first poll
    assert cluster.core.pods == {} and cluster.net.policies == {}


async def test_unschedulable_fails_after_the_grace(cluster: FakeClusterBackend, monkeypatch) -> None:
    from kubernetes import client

    def pending(name: str, namespace: str) -> Any:
        cond = client.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable",
                                     message="0/3 nodes are available: 3 Insufficient memory.")
        return client.V1Pod(status=client.V1PodStatus(phase="Pending", conditions=[cond]))

    monkeypatch.setattr(cluster.core, "read_namespaced_pod", pending)
    cluster.cfg.unschedulable_grace_s = 0.3
    sb = cluster.make(image_task(), "no-network")
    with pytest.raises(SandboxStartError, match="unschedulable: 0/3 nodes") as e:
        await asyncio.wait_for(sb.start(), 10)
    assert e.value.reason == "unschedulable"  # type: ignore[attr-defined]


class FakeWSClient:
    """The slice of kubernetes.stream.ws_client.WSClient that WebSocketStream uses, over a pipe."""

    def __init__(self, argv: list[str]) -> None:
        import subprocess

        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._buf = b""

    def is_open(self) -> bool:
        return self.proc.poll() is None or bool(self._buf)

    def update(self, timeout: float = 0) -> None:
        import select

        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if r:
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                self.proc.wait()
            self._buf += data

    def peek_stdout(self) -> bool:
        return bool(self._buf)

    def read_stdout(self, timeout: float = 0) -> bytes:
        data, self._buf = self._buf, b""
        return data

    def peek_stderr(self) -> bool:
        return False

    def write_stdin(self, data: bytes) -> None:
        self.proc.stdin.write(data)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def test_websocket_adapter_carries_the_protocol() -> None:
    import sys

    from farm.sandbox.channel import Channel
    from farm.sandbox.kubernetes.sandbox import WebSocketStream
    from farm.sandbox.relayed.sandbox import INSIDE_SRC

    ws = FakeWSClient([sys.executable, str(INSIDE_SRC / "server.py")])
    stream = WebSocketStream(ws, asyncio.get_running_loop(), 16 << 20)
    ch = Channel(stream.reader, stream, name="ws")
    ch.start()
    try:
        results = await asyncio.gather(*(ch.exec(f"echo {i}", timeout_s=10) for i in range(20)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
        blob = os.urandom(3 << 20)
        await ch.write_file("/tmp/farm-ws-adapter.bin", blob)
        assert await ch.read_file("/tmp/farm-ws-adapter.bin") == blob
    finally:
        await ch.close()
        stream.close()
        Path("/tmp/farm-ws-adapter.bin").unlink(missing_ok=True)


async def test_a_write_to_a_closed_websocket_is_a_lost_stream_not_an_internal_error() -> None:
    """websocket-client raises its own exception types; the channel must see a broken pipe, so
    the stream is re-opened (or the sandbox lost) instead of the error escaping to the trial."""
    import sys

    from websocket import WebSocketConnectionClosedException

    from farm.sandbox.channel import Channel
    from farm.sandbox.kubernetes.sandbox import WebSocketStream

    class Closed(FakeWSClient):
        def write_stdin(self, data: bytes) -> None:
            raise WebSocketConnectionClosedException("socket is already closed.")

    ws = Closed([sys.executable, "-c", "import time; time.sleep(30)"])
    stream = WebSocketStream(ws, asyncio.get_running_loop(), 1 << 20)
    ch = Channel(stream.reader, stream, name="ws")
    try:
        with pytest.raises(SandboxLostError, match="write failed.*WebSocketConnectionClosedException"):
            await ch.exec("true", timeout_s=5)
    finally:
        await ch.close()
        stream.close()


def test_a_stream_that_outlives_its_event_loop_ends_without_an_error_in_its_thread() -> None:
    """The receiving thread tells the loop about the end of the stream; when the loop was closed
    first (a trial's loop ending while the pod's exec stream still drains), there is nobody to
    tell, and that is no error (CI at stop 43 saw RuntimeError 'Event loop is closed' there)."""
    import sys
    import threading

    from farm.sandbox.kubernetes.sandbox import WebSocketStream

    seen: list[BaseException | None] = []
    saved = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)
    loop = asyncio.new_event_loop()
    try:
        ws = FakeWSClient([sys.executable, "-c", "import time; time.sleep(0.5)"])
        stream = WebSocketStream(ws, loop, 1 << 20)
        loop.close()  # before the process (the exec) ends
        stream._thread.join(10)
        assert not stream._thread.is_alive() and seen == []
    finally:
        threading.excepthook = saved
        stream._sender.shutdown()


# --- the fake API server validates what the backend sends --------------------------------------


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda pod: pod["spec"]["containers"][0]["securityContext"].update(runAsUser="0"),
                 id="runAsUser-string"),
    pytest.param(lambda pod: pod["spec"].update(terminationGracePeriodSeconds="5"), id="grace-string"),
    pytest.param(lambda pod: pod["spec"]["containers"][0].update(imagePullPolicy=None, ports=[{"port": 80}]),
                 id="unknown-field"),
])
async def test_a_schema_invalid_pod_is_refused_like_an_api_server_would(cluster: FakeClusterBackend, monkeypatch,
                                                                        mutate) -> None:
    from farm.sandbox.relayed import manifests as m

    real = m.pod_manifest

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        pod = real(*args, **kwargs)
        mutate(pod)
        return pod

    monkeypatch.setattr(m, "pod_manifest", broken)
    sb = cluster.make(image_task(network="no-network"), "no-network")
    with pytest.raises(SandboxStartError, match="422"):
        await sb.start()
    assert cluster.core.pods == {} and cluster.net.policies == {}


async def test_a_schema_invalid_network_policy_is_refused(cluster: FakeClusterBackend, monkeypatch) -> None:
    from farm.sandbox.relayed import manifests as m

    real = m.network_policies

    def broken(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        policies = real(*args, **kwargs)
        for p in policies:
            p["spec"]["policyTypes"] = "Egress"  # a string where the schema wants a list
        return policies

    monkeypatch.setattr(m, "network_policies", broken)
    sb = cluster.make(image_task(network="no-network"), "no-network")
    with pytest.raises(SandboxStartError, match="422"):
        await sb.start()
    assert cluster.core.calls.count("create_namespaced_pod") == 0


# --- the cause of a failed start reaches the trial row -----------------------------------------


@pytest.mark.parametrize("waiting,cls", [("ErrImagePull", "sandbox_start:image_pull"),
                                         ("CreateContainerConfigError", "sandbox_start:container_config")])
async def test_start_failure_reason_lands_in_the_row(cluster: FakeClusterBackend, monkeypatch, tmp_path: Path,
                                                     waiting: str, cls: str) -> None:
    from kubernetes import client

    from farm.config import SandboxConfig, load_config
    from farm.run.plan import TrialSpec
    from farm.run.trial import run_trial

    def stuck(name: str, namespace: str) -> Any:
        state = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason=waiting, message="no"))
        return client.V1Pod(status=client.V1PodStatus(phase="Pending", container_statuses=[client.V1ContainerStatus(
            name="task", image="x", image_id="", ready=False, restart_count=0, state=state)]))

    monkeypatch.setattr(cluster.core, "read_namespaced_pod", stuck)

    def factory(task: Task, section: SandboxConfig, *, network: str | None = None, run_id: str, trial_key: str,
                attempt: int, role: str) -> Sandbox:
        assert section.backend == "kubernetes"  # the run layer hands down the sandbox section only
        return KubernetesSandbox(task, cluster.cfg, run_id=run_id, trial_key=trial_key, attempt=attempt, role=role,
                                 network=network, core_api=cluster.core, net_api=cluster.net,  # type: ignore[arg-type]
                                 exec_opener=cluster.execs, poll_s=0.05)

    task = image_task(network="no-network")
    cfg = load_config(["sandbox=kubernetes", f"store.uri={tmp_path / 'store'}"])
    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "oracle")
    out = await run_trial(spec, task, cfg, 1, base_url="http://127.0.0.1:9/v1", policy="oracle",
                          sandbox_factory=factory)
    assert (out.result.status, out.result.error_class) == ("infra_error", cls)
    assert waiting in out.result.error


def test_registry_gc_for_kubernetes_uses_the_namespace_of_the_section(cluster: FakeClusterBackend) -> None:
    from farm.config import SandboxConfig
    from farm.sandbox.kubernetes import sandbox as k
    from farm.sandbox.registry import gc

    section = SandboxConfig(backend="kubernetes", kubernetes=cluster.cfg)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "left-behind", "namespace": cluster.cfg.namespace,
        "labels": {"app.kubernetes.io/name": "farm-sandbox", "farm.dev/run-id": "gone"},
        "annotations": {"farm.dev/run-id": "gone"}},
        "spec": {"containers": [{"name": "task", "image": "debian:bookworm", "command": ["sleep", "60"]}],
                 "initContainers": [{"name": "init", "image": "debian:bookworm", "command": ["true"]}]}}
    cluster.core.pods[(cluster.cfg.namespace, "left-behind")] = _Unstarted(pod)
    key = (cluster.cfg.kubeconfig, cluster.cfg.context)
    saved = k._CLIENTS.get(key)
    k._CLIENTS[key] = (cluster.core, cluster.net)  # what shared_clients would have built
    try:
        report = gc(section, lambda run_id: False)
    finally:
        if saved is None:
            k._CLIENTS.pop(key, None)
        else:
            k._CLIENTS[key] = saved
    assert report.deleted == {"pod": ["left-behind"]} and report.dead_runs == {"gone"}
    assert cluster.core.pods == {}


class _Unstarted:
    """A pod object the fake kubelet never ran (what a crashed driver can leave)."""

    def __init__(self, body: dict[str, Any]) -> None:
        from kubernetes import client

        self.body = body
        self.dir = Path("/nonexistent-farm-test")
        self._v1 = client.V1Pod(metadata=client.V1ObjectMeta(**{k: body["metadata"][k] for k in
                                                               ("name", "namespace", "labels", "annotations")}),
                                status=client.V1PodStatus(phase="Pending"))

    def as_v1(self) -> Any:
        return self._v1

    def kill(self) -> None:
        return None


async def test_in_place_grading_switches_the_pod_to_the_verifiers_network(cluster: FakeClusterBackend,
                                                                          tmp_path: Path) -> None:
    """A pod can change its egress (capabilities.set_network): the trial grades a task whose
    verifier has no network in the agent's pod after fencing it with a deny policy."""
    from farm.config import load_config
    from farm.run.plan import TrialSpec
    from farm.run.trial import run_trial
    from farm.run.workers import PolicyEndpoints
    from farm.tasks.harbor import load_harbor_dir
    from tests.support.tasks import CHECK_ANSWER, make_task_dir

    d = make_task_dir(tmp_path / "tasks", "switch", CHECK_ANSWER)
    toml = (d / "task.toml").read_text()
    (d / "task.toml").write_text(toml.replace('network_mode = "no-network"', 'network_mode = "public"', 1))
    (task,) = load_harbor_dir(tmp_path / "tasks", "k8s")
    assert (task.agent_network, task.verifier_network) == ("public", "no-network")

    def factory(task: Task, section: Any, *, network: str | None = None, **ids: Any) -> Sandbox:
        return KubernetesSandbox(task, cluster.cfg, network=network, core_api=cluster.core, net_api=cluster.net,
                                 exec_opener=cluster.execs, poll_s=0.05, **ids)  # type: ignore[arg-type]

    cfg = load_config(["sandbox=kubernetes", "agent=oracle", f"store.uri={tmp_path / 'store'}"])
    endpoints = PolicyEndpoints()
    try:
        base_url, policy = endpoints.base_url(cfg)
        spec = TrialSpec("run", "s" * 64, task.benchmark, task.task_id, 0, "base", "oracle")
        out = await run_trial(spec, task, cfg, 1, base_url=base_url, policy=policy, sandbox_factory=factory)
    finally:
        endpoints.close()
    assert out.result.status == "resolved", (out.result.error_class, out.result.error)
    created = [c for c in cluster.net.calls if c == "create_namespaced_network_policy"]
    assert len(created) == 2  # the agent's allow-egress policy, then the verifier's deny policy

"""Thin fakes of the Kubernetes API server for tests on a machine without a cluster.

FakeCoreV1Api / FakeNetworkingV1Api keep objects in dicts and count every call. A created pod
is "run" by a FakeKubelet: the init container's real command (with the toolbox's Python) fills
the shared volume, then the task container's real command runs in a bubblewrap sandbox whose
root is a private directory with the host's /usr mounted read-only (the "image"). A pod gets
its own network namespace iff a NetworkPolicy denying its egress exists when it is created,
which is the one cluster behaviour the backend's correctness depends on here.
A pod is bound to node ``fake-node-1`` and reports the kubelet's Scheduled / Pulling / Pulled
events; ``FakeCoreV1Api.pull_s`` makes the task image's pull take that long (0: the image is
already present on the node), during which the pod stays Pending in ContainerCreating.
The container's command is PID 1 of the pod's PID namespace, as on a kubelet.
FakeExecStream runs an exec command in the pod's PID, mount and network namespaces, as a
container runtime does: an agent command there can see and kill it.

Like a real API server, the fakes refuse (422 Invalid) any object that does not validate
against the official Kubernetes schema (kubernetes-validate ships it offline), so a backend
that sends a malformed Pod or NetworkPolicy fails its tests here, not first on a cluster.
What is not faked: the manifests, the sandbox agent, the relay and the channel: they are the
real programs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
from kubernetes import client
from kubernetes.client.rest import ApiException

from farm.sandbox.local.sandbox import agent_python, system_binds
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.channel import ProcStream

SCHEMA_VERSION = "1.37.0"  # the Kubernetes API version the objects are validated against


def validate_object(body: dict[str, Any]) -> None:
    """Raise what an API server answers to an invalid object: ApiException 422."""
    try:
        kubernetes_validate.validate(body, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = "/".join(str(p) for p in e.path)
        raise ApiException(status=422, reason=f"Invalid: {where}: {e.message}") from None


class _Counted:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def _count(self, name: str) -> None:
        self.calls.append(name)


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    want = policy["spec"]["podSelector"].get("matchLabels", {})
    return all(labels.get(k) == v for k, v in want.items())


class FakeNetworkingV1Api(_Counted):
    def __init__(self) -> None:
        super().__init__()
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}

    def create_namespaced_network_policy(self, namespace: str, body: dict[str, Any]) -> Any:
        self._count("create_namespaced_network_policy")
        validate_object(body)
        key = (namespace, body["metadata"]["name"])
        if key in self.policies:
            raise ApiException(status=409, reason="AlreadyExists")
        body["metadata"].setdefault("creation_timestamp", dt.datetime.now(dt.UTC))
        self.policies[key] = body
        return body

    def delete_namespaced_network_policy(self, name: str, namespace: str, **_: Any) -> None:
        self._count("delete_namespaced_network_policy")
        if self.policies.pop((namespace, name), None) is None:
            raise ApiException(status=404, reason="NotFound")

    def list_namespaced_network_policy(self, namespace: str, label_selector: str = "") -> Any:
        self._count("list_namespaced_network_policy")
        k, _, v = label_selector.partition("=")
        items = [client.V1NetworkPolicy(metadata=client.V1ObjectMeta(**_meta(b["metadata"])))
                 for (ns, _), b in self.policies.items() if ns == namespace and b["metadata"]["labels"].get(k) == v]
        return client.V1NetworkPolicyList(items=items)

    def deny_egress(self, namespace: str, labels: dict[str, str]) -> bool:
        return any(ns == namespace and _selects(p, labels) and p["spec"]["egress"] == []
                   for (ns, _), p in self.policies.items())


def _meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {"name": meta["name"], "namespace": meta.get("namespace"), "labels": meta.get("labels"),
            "annotations": meta.get("annotations"), "uid": meta.get("uid"),
            "creation_timestamp": meta.get("creation_timestamp")}


class FakePod:
    NODE = "fake-node-1"

    def __init__(self, body: dict[str, Any], root: Path, net: FakeNetworkingV1Api, toolbox: Path,
                 pull_s: float = 0.0) -> None:
        self.body = body
        # the pull's clock starts at the driver's first look (creating the pod takes seconds
        # here on a loaded machine: the init container really runs inside the create call)
        self.created: float | None = None
        self.created_at = dt.datetime.now(dt.UTC)
        self.pull_s = pull_s
        self.name = body["metadata"]["name"]
        self.dir = root / self.name
        self.rootfs = self.dir / "rootfs"
        self.farm = self.dir / "farm"
        self.proc: subprocess.Popen[bytes] | None = None
        self.reads = 0
        self.own_netns = net.deny_egress(body["metadata"]["namespace"], body["metadata"]["labels"])
        self.toolbox = toolbox
        self.init_failed: str | None = None

    def host_path(self, arg: str) -> str:
        return arg.replace(m.TOOLBOX_PREFIX, str(self.toolbox)).replace(m.FARM_MOUNT, str(self.farm))

    def start(self) -> None:
        spec = self.body["spec"]
        for d in (self.rootfs / "tmp", self.rootfs / "root", self.farm, self.rootfs / ".farm"):
            d.mkdir(parents=True, exist_ok=True)
        (self.rootfs / "tmp").chmod(0o1777)
        init = spec["initContainers"][0]["command"]
        argv = [self.host_path(a) for a in init]
        argv[0] = str(self.toolbox / "python" / "bin" / "python3")  # the toolbox's own Python
        try:
            res = subprocess.run(argv, capture_output=True, timeout=60)
        except OSError as e:  # what a kubelet reports as StartError of the init container
            self.init_failed = f"init container failed to start: {e}"
            return
        if res.returncode != 0:
            self.init_failed = res.stderr.decode(errors="replace")[-500:]
            return
        c = spec["containers"][0]
        workdir = c.get("workingDir", "/")  # like a kubelet: the image's own WORKDIR otherwise
        (self.rootfs / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        python, python_binds = agent_python()
        argv = ["bwrap", "--bind", str(self.rootfs), "/", *system_binds(), *python_binds,
                "--dev", "/dev", "--proc", "/proc", "--ro-bind", str(self.farm), m.FARM_MOUNT,
                "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--die-with-parent", "--chdir", workdir]
        if self.own_netns:
            argv.append("--unshare-net")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               **{e["name"]: e["value"] for e in c.get("env", [])}}
        self.stderr = open(self.dir / "stderr", "wb")
        self.proc = subprocess.Popen([*argv, "--", *c["command"]], env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.stderr, stderr=self.stderr, start_new_session=True)

    def pulled(self) -> bool:
        return self.pull_s <= 0 or (self.created is not None and time.monotonic() - self.created >= self.pull_s)

    def phase(self) -> str:
        if self.init_failed:
            return "Failed"
        if self.proc is None or self.reads <= 1 or not self.pulled():
            return "Pending"  # the first poll sees what a real one would: not yet running
        return "Running" if self.proc.poll() is None else "Failed"

    def events(self) -> list[client.CoreV1Event]:
        """What a kubelet reports: the toolbox (init) image present, the task image pulled."""
        image = self.body["spec"]["containers"][0]["image"]
        toolbox = self.body["spec"]["initContainers"][0]["image"]
        ref = {"kind": "Pod", "name": self.name, "namespace": self.body["metadata"]["namespace"]}

        def event(reason: str, message: str, container: str | None, at: dt.datetime) -> client.CoreV1Event:
            path = f"spec.{'initContainers' if container != m.TASK_CONTAINER else 'containers'}{{{container}}}"
            obj = client.V1ObjectReference(**ref, field_path=path if container else None)
            return client.CoreV1Event(metadata=client.V1ObjectMeta(name=f"{self.name}.{reason.lower()}"),
                                      involved_object=obj, reason=reason, message=message, type="Normal",
                                      first_timestamp=at, last_timestamp=at)

        t0 = self.created_at
        out = [event("Scheduled", f"Successfully assigned {ref['namespace']}/{self.name} to {self.NODE}", None, t0),
               event("Pulled", f'Container image "{toolbox}" already present on machine', m.TOOLBOX_CONTAINER, t0)]
        if self.pull_s <= 0:
            return [*out, event("Pulled", f'Container image "{image}" already present on machine',
                                m.TASK_CONTAINER, t0)]
        out.append(event("Pulling", f'Pulling image "{image}"', m.TASK_CONTAINER, t0))
        if self.pulled():
            done = t0 + dt.timedelta(seconds=self.pull_s)
            out.append(event("Pulled", f'Successfully pulled image "{image}" in {self.pull_s:.3f}s '
                                       f"({self.pull_s:.3f}s including waiting). Image size: 123456789 bytes.",
                             m.TASK_CONTAINER, done))
        return out

    def kill(self) -> None:
        """Like a kubelet stopping the pod: PID 1 of the pod's PID namespace dies, and with it
        everything in that namespace. Killing bwrap's child first lets bwrap reap it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            except OSError:
                children = []
            for child in children:
                try:
                    os.kill(int(child), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=5 if children else 0.5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def as_v1(self) -> client.V1Pod:
        phase = self.phase()
        terminated = None
        waiting = None if phase != "Pending" or self.pulled() else client.V1ContainerStateWaiting(
            reason="ContainerCreating")
        if phase == "Failed":
            code = self.proc.returncode if self.proc else 1
            terminated = client.V1ContainerStateTerminated(exit_code=code or 137, reason="Error",
                                                           message=self.init_failed)
        status = client.V1PodStatus(
            phase=phase,
            container_statuses=[client.V1ContainerStatus(
                name=m.TASK_CONTAINER, image=self.body["spec"]["containers"][0]["image"], image_id="",
                ready=phase == "Running", restart_count=0,
                state=client.V1ContainerState(terminated=terminated, waiting=waiting))],
        )
        meta = client.V1ObjectMeta(**_meta(self.body["metadata"]))
        return client.V1Pod(metadata=meta, spec=client.V1PodSpec(containers=[], node_name=self.NODE), status=status)


class FakeCoreV1Api(_Counted):
    def __init__(self, root: Path, net: FakeNetworkingV1Api) -> None:
        super().__init__()
        self.root = root
        self.net = net
        self.pods: dict[tuple[str, str], FakePod] = {}
        self.toolbox = root / "toolbox"
        (self.toolbox / "python" / "bin").mkdir(parents=True, exist_ok=True)
        link = self.toolbox / "python" / "bin" / "python3"
        if not link.exists():
            link.symlink_to(agent_python()[0])
        self._uids = itertools.count(1)
        self.pull_s = 0.0  # how long the task image of the next pods takes to pull
        self.events_forbidden = False  # a driver whose Role lacks events: 403

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> client.V1Pod:
        self._count("create_namespaced_pod")
        validate_object(body)
        key = (namespace, body["metadata"]["name"])
        if key in self.pods:
            raise ApiException(status=409, reason="AlreadyExists")
        body["metadata"]["uid"] = str(uuid.UUID(int=next(self._uids)))
        body["metadata"].setdefault("creation_timestamp", dt.datetime.now(dt.UTC))
        pod = FakePod(body, self.root, self.net, self.toolbox, pull_s=self.pull_s)
        self.pods[key] = pod
        pod.start()
        return pod.as_v1()

    def read_namespaced_pod(self, name: str, namespace: str) -> client.V1Pod:
        self._count("read_namespaced_pod")
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise ApiException(status=404, reason="NotFound")
        pod.reads += 1
        if pod.created is None:
            pod.created, pod.created_at = time.monotonic(), dt.datetime.now(dt.UTC)
        return pod.as_v1()

    def list_namespaced_event(self, namespace: str, field_selector: str = "") -> client.CoreV1EventList:
        self._count("list_namespaced_event")
        if self.events_forbidden:
            raise ApiException(status=403, reason="Forbidden")
        key, _, name = field_selector.partition("=")
        assert key == "involvedObject.name", field_selector
        pod = self.pods.get((namespace, name))
        return client.CoreV1EventList(items=pod.events() if pod else [])

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        self._count("delete_namespaced_pod")
        pod = self.pods.pop((namespace, name), None)
        if pod is None:
            raise ApiException(status=404, reason="NotFound")
        pod.kill()
        shutil.rmtree(pod.dir, ignore_errors=True)

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Any:
        self._count("list_namespaced_pod")
        k, _, v = label_selector.partition("=")
        items = [p.as_v1() for (ns, _), p in self.pods.items()
                 if ns == namespace and p.body["metadata"]["labels"].get(k) == v]
        return client.V1PodList(items=items)

    def close_all(self) -> None:
        for pod in self.pods.values():
            pod.kill()


class _ProcStream(ProcStream):
    def describe(self) -> str:
        return f"fake exec exit status {self.proc.returncode}"

    def close(self) -> None:
        self.break_()

    def break_(self) -> None:
        """What a broken WebSocket does: the exec session ends (nsenter and what it forked)."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class FakeExecStream:
    """Stands in for kubernetes.stream: runs the exec command locally in the pod's namespaces."""

    def __init__(self, core: FakeCoreV1Api) -> None:
        self.core = core
        self.opened = 0
        self.streams: list[_ProcStream] = []

    async def open(self, pod_name: str, command: list[str]) -> _ProcStream:
        self.opened += 1
        pod = next((p for (_, n), p in self.core.pods.items() if n == pod_name), None)
        if pod is None or pod.proc is None or pod.proc.poll() is not None:
            raise ApiException(status=404, reason=f"pod {pod_name} is not running")
        # the relay's abstract socket lives in the pod's network namespace; inside its mount
        # namespace the command's paths are the container's own
        argv = ["nsenter", "-t", str(_child_pid(pod.proc.pid)), "-p", "-m", "-r", "-w",
                *(["-n"] if pod.own_netns else []), "--", *command]
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, limit=16 << 20,
                                                    start_new_session=True)
        stream = _ProcStream(proc)
        self.streams.append(stream)
        return stream


def _child_pid(pid: int) -> int:
    """bwrap's child: the container command, PID 1 of the pod's namespaces."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return pid
    return int(children[0]) if children else pid


def python_for_tests() -> str:
    return sys.executable

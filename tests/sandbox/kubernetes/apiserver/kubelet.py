"""The emulator's one node: schedules pods, "pulls" their images, runs them in real sandboxes.

A created pod goes through what a kubelet reports: Pending and unscheduled (or stuck
``Unschedulable`` while the ``unschedulable`` knob is set), scheduled, image pulls with
``Pulling``/``Pulled`` events (a pull takes ``pull_s``; an image in ``unpullable`` ends in
``ErrImagePull`` then ``ImagePullBackOff``), the init container, then Running. The containers
really run: the init container's command with the toolbox's Python fills the shared volume and
the task container's command runs under bubblewrap as PID 1 of its own PID namespace
(tests/sandbox/kubernetes/fake_cluster.py's FakePod, the same machinery the in-process fake uses). A pod gets
its own network namespace iff a NetworkPolicy denying its egress exists when it starts.
Deletion honours the grace period (SIGTERM to PID 1, SIGKILL when it runs out), and
``activeDeadlineSeconds`` ends a pod as Failed/DeadlineExceeded.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.sandbox.local.sandbox import agent_python

from ..fake_cluster import FakePod, _child_pid
from .store import ApiError, ObjectStore, now_rfc3339

NODE = "emulator-node-0"


@dataclass
class KubeletKnobs:
    pull_s: float = 0.1  # how long pulling an image that is not on the node takes
    pull_s_by_image: dict[str, float] = field(default_factory=dict)
    unpullable: set[str] = field(default_factory=set)  # images whose pull fails (ErrImagePull)
    unschedulable: str | None = None  # while set, new pods stay Pending with this message
    schedule_s: float = 0.05  # scheduler latency: the first read of a new pod sees it Pending


def _container_pid1(bwrap_pid: int, command: list[str]) -> int:
    """bwrap's child once it runs the container's command, found once.

    Until bwrap's child has exec'd the command its mounts are not set up (an exec entering its
    namespaces finds no /.farm); /proc/PID/task/TID/children can miss a child while processes
    come and go, and an exec aimed at bwrap itself would land in the host's namespaces."""
    want = "\0".join(command) + "\0"
    for _ in range(1000):
        child = _child_pid(bwrap_pid)
        try:
            status = Path(f"/proc/{child}/status").read_text()
            cmdline = Path(f"/proc/{child}/cmdline").read_text()
        except OSError:
            status = cmdline = ""
        if child != bwrap_pid and f"\nPPid:\t{bwrap_pid}\n" in status and cmdline == want:
            return child
        time.sleep(0.01)
    raise RuntimeError(f"bwrap {bwrap_pid} never ran the container command {command}")


class _PolicyView:
    """What FakePod asks of the network: does a deny-egress policy select this pod?"""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def deny_egress(self, namespace: str, labels: dict[str, str]) -> bool:
        items, _ = self.store.list("networkpolicies", namespace)
        for p in items:
            want = p["spec"].get("podSelector", {}).get("matchLabels", {})
            if (all(labels.get(k) == v for k, v in want.items()) and "Egress" in p["spec"].get("policyTypes", [])
                    and not p["spec"].get("egress")):
                return True
        return False


class PodRuntime:
    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        self.fake: FakePod | None = None
        self.phase = "Pending"
        self.conditions: dict[str, tuple[str, str | None, str | None]] = {}
        self.init_state: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        self.task_state: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        self.reason: str | None = None
        self.message: str | None = None
        self.started_at: float | None = None
        self.deleting = False
        self.gone = threading.Event()
        self.lock = threading.Lock()
        self.pid1: int | None = None  # host pid of the task container's PID 1
        # why kill_pod killed it: set before the kill, since the watcher thread may see the exit
        # (and write the status) before kill_pod's own call does
        self.kill_reason: str | None = None


class Kubelet:
    def __init__(self, store: ObjectStore, root: Path, knobs: KubeletKnobs) -> None:
        self.store = store
        self.root = root
        self.knobs = knobs
        self.policies = _PolicyView(store)
        self.pods: dict[tuple[str, str], PodRuntime] = {}
        self.present_images: set[str] = set()
        self._events = itertools.count(1)
        # every pod phase change as the kubelet published it: (monotonic s, namespace, name,
        # phase), "Gone" once the pod object is removed; a test reads the start queue from it
        self.phase_log: list[tuple[float, str, str, str]] = []
        self._phase_now: dict[tuple[str, str], str] = {}
        self._phase_lock = threading.Lock()
        self.toolbox = root / "toolbox"
        (self.toolbox / "python" / "bin").mkdir(parents=True, exist_ok=True)
        link = self.toolbox / "python" / "bin" / "python3"
        if not link.exists():
            link.symlink_to(agent_python()[0])

    # --- status and events ----------------------------------------------------------------

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal",
              container: str | None = None) -> None:
        meta = pod["metadata"]
        ref = {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta.get("uid"),
               "apiVersion": "v1"}
        if container:
            ref["fieldPath"] = f"spec.containers{{{container}}}"
        ts = now_rfc3339()
        self.store.create("events", meta["namespace"], {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{next(self._events):016x}", "namespace": meta["namespace"]},
            "involvedObject": ref, "reason": reason, "message": message, "type": kind, "count": 1,
            "source": {"component": "kubelet", "host": NODE}, "firstTimestamp": ts, "lastTimestamp": ts,
            "reportingComponent": "kubelet", "reportingInstance": NODE})

    def _note_phase(self, namespace: str, name: str, phase: str) -> None:
        with self._phase_lock:
            if self._phase_now.get((namespace, name)) != phase:
                self._phase_now[(namespace, name)] = phase
                self.phase_log.append((time.monotonic(), namespace, name, phase))

    def most_pending(self) -> int:
        """The most pods in phase Pending at one moment, from the phase log."""
        with self._phase_lock:
            log = list(self.phase_log)
        now: dict[tuple[str, str], str] = {}
        pending = most = 0
        for _, ns, name, phase in log:
            before = now.get((ns, name))
            now[(ns, name)] = phase
            pending += (phase == "Pending") - (before == "Pending")
            most = max(most, pending)
        return most

    def _publish(self, rt: PodRuntime) -> None:
        def change(obj: dict[str, Any]) -> None:
            spec = obj["spec"]
            init = spec.get("initContainers", [])
            cond = [{"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": now_rfc3339()}
                    for t, (s, r, m) in rt.conditions.items()]
            st: dict[str, Any] = {"phase": rt.phase, "conditions": cond, "qosClass": "Burstable"}
            if rt.reason:
                st["reason"], st["message"] = rt.reason, rt.message
            if spec.get("nodeName"):
                st["hostIP"], st["podIP"] = "10.0.0.10", f"10.244.0.{len(self.pods) % 250 + 2}"
                st["startTime"] = obj.get("status", {}).get("startTime") or now_rfc3339()
            if init:
                st["initContainerStatuses"] = [self._cstatus(init[0], rt.init_state)]
            st["containerStatuses"] = [self._cstatus(c, rt.task_state) for c in spec["containers"]]
            obj["status"] = st

        self.store.update("pods", rt.namespace, rt.name, change)
        self._note_phase(rt.namespace, rt.name, rt.phase)

    @staticmethod
    def _cstatus(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        running = "running" in state
        pulled = running or "terminated" in state
        return {"name": container["name"], "image": container["image"],
                "imageID": f"{container['image']}@sha256:{'0' * 64}" if pulled else "",
                "ready": running, "started": running, "restartCount": 0, "state": state}

    # --- the pod's life -------------------------------------------------------------------

    def admit(self, pod: dict[str, Any]) -> None:
        """A pod was stored: run its life in a thread (a kubelet works asynchronously too)."""
        rt = PodRuntime(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.pods[(rt.namespace, rt.name)] = rt
        rt.conditions["PodScheduled"] = ("False", None, None)
        self._publish(rt)
        threading.Thread(target=self._live, args=(rt,), name=f"kubelet-{rt.name}", daemon=True).start()

    def _live(self, rt: PodRuntime) -> None:
        try:
            self._run(rt)
        except Exception as e:  # noqa: BLE001 - an emulator bug shows on the pod, not as a hang
            rt.phase, rt.reason, rt.message = "Failed", "EmulatorError", repr(e)
            self._publish(rt)

    def _pod(self, rt: PodRuntime) -> dict[str, Any] | None:
        try:
            return self.store.get("pods", rt.namespace, rt.name)
        except ApiError:
            return None

    def _run(self, rt: PodRuntime) -> None:
        time.sleep(self.knobs.schedule_s)
        warned = False
        while self.knobs.unschedulable and not rt.deleting:
            msg = self.knobs.unschedulable
            if not warned and (pod := self._pod(rt)):
                self.event(pod, "FailedScheduling", msg, "Warning")
                rt.conditions["PodScheduled"] = ("False", "Unschedulable", msg)
                self._publish(rt)
                warned = True
            time.sleep(0.05)
        if rt.deleting:
            return
        self.store.update("pods", rt.namespace, rt.name, lambda o: o["spec"].__setitem__("nodeName", NODE))
        rt.conditions["PodScheduled"] = ("True", None, None)
        rt.conditions["Initialized"] = ("False", "ContainersNotInitialized", "containers with incomplete status: "
                                        "[farm-toolbox]")
        self._publish(rt)
        pod = self._pod(rt)
        if pod is None:
            return
        self.event(pod, "Scheduled", f"Successfully assigned {rt.namespace}/{rt.name} to {NODE}")
        spec = pod["spec"]
        todo = [(c, "init") for c in spec.get("initContainers", [])] + [(c, "task") for c in spec["containers"]]
        for c, which in todo:
            if not self._pull(rt, pod, c, which):
                return
        if rt.deleting:
            return
        self.event(pod, "Created", "Created container: farm-toolbox", container="farm-toolbox")
        self.event(pod, "Started", "Started container farm-toolbox", container="farm-toolbox")
        pod["metadata"].setdefault("labels", {})  # FakePod reads them (a deny policy selects on them)
        fake = FakePod(pod, self.root / "pods", self.policies, self.toolbox)  # type: ignore[arg-type]
        rt.fake = fake
        fake.start()
        if fake.init_failed:
            rt.init_state = {"terminated": {"exitCode": 1, "reason": "Error", "message": fake.init_failed[-300:],
                                            "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}}
            rt.phase = "Failed"
            self._publish(rt)
            return
        rt.init_state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now_rfc3339(),
                                        "finishedAt": now_rfc3339()}}
        rt.pid1 = _container_pid1(fake.proc.pid, spec["containers"][0]["command"])  # type: ignore[union-attr]
        name = spec["containers"][0]["name"]
        self.event(pod, "Created", f"Created container: {name}", container=name)
        self.event(pod, "Started", f"Started container {name}", container=name)
        rt.task_state = {"running": {"startedAt": now_rfc3339()}}
        rt.started_at = time.monotonic()
        rt.phase = "Running"
        for t in ("Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"):
            rt.conditions[t] = ("True", None, None)
        self._publish(rt)
        self._watch(rt, spec.get("activeDeadlineSeconds"))

    def _pull(self, rt: PodRuntime, pod: dict[str, Any], c: dict[str, Any], which: str) -> bool:
        image = c["image"]
        if image in self.present_images and image not in self.knobs.unpullable:
            self.event(pod, "Pulled", f'Container image "{image}" already present on machine', container=c["name"])
            return True
        self.event(pod, "Pulling", f'Pulling image "{image}"', container=c["name"])
        t0 = time.monotonic()
        time.sleep(self.knobs.pull_s_by_image.get(image, self.knobs.pull_s))
        if image in self.knobs.unpullable:
            err = f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found'
            self.event(pod, "Failed", f'Failed to pull image "{image}": {err}', "Warning", c["name"])
            self._waiting(rt, which, "ErrImagePull", err)
            time.sleep(0.1)
            self.event(pod, "BackOff", f'Back-off pulling image "{image}"', "Warning", c["name"])
            self._waiting(rt, which, "ImagePullBackOff", f'Back-off pulling image "{image}": ErrImagePull: {err}')
            return False
        took = time.monotonic() - t0
        self.present_images.add(image)
        self.event(pod, "Pulled", f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including '
                   'waiting). Image size: 123456789 bytes.', container=c["name"])
        return True

    def _waiting(self, rt: PodRuntime, which: str, reason: str, message: str) -> None:
        state = {"waiting": {"reason": reason, "message": message}}
        if which == "init":
            rt.init_state = state
        else:
            rt.task_state = state
        self._publish(rt)

    def _watch(self, rt: PodRuntime, deadline_s: int | None) -> None:
        assert rt.fake is not None and rt.fake.proc is not None
        proc = rt.fake.proc
        while proc.poll() is None and not rt.deleting:
            if deadline_s and rt.started_at and time.monotonic() - rt.started_at > deadline_s:
                rt.fake.kill()
                rt.reason = "DeadlineExceeded"
                rt.message = "Pod was active on the node longer than the specified deadline"
                break
            time.sleep(0.1)
        code = proc.wait()
        if not rt.deleting:
            self._ended(rt, code)

    # --- from the API and from tests ------------------------------------------------------

    def delete(self, namespace: str, name: str, grace_s: int) -> dict[str, Any]:
        """DELETE on a pod: gone at once with grace 0, else SIGTERM now and SIGKILL after the grace."""
        rt = self.pods.get((namespace, name))
        if rt is None or grace_s <= 0:
            self._stop(rt, 0)
            return self.store.remove("pods", namespace, name)

        def mark(obj: dict[str, Any]) -> None:
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["deletionGracePeriodSeconds"] = grace_s

        obj = self.store.update("pods", namespace, name, mark)
        if obj is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        self.event(obj, "Killing", "Stopping container task", container="task")

        def finish() -> None:
            self._stop(rt, grace_s)
            try:
                self.store.remove("pods", namespace, name)
            except ApiError:
                pass

        threading.Thread(target=finish, name=f"kubelet-delete-{name}", daemon=True).start()
        return obj

    def _stop(self, rt: PodRuntime | None, grace_s: float) -> None:
        if rt is None:
            return
        rt.deleting = True
        fake = rt.fake
        if fake is not None and fake.proc is not None and fake.proc.poll() is None and grace_s > 0:
            try:
                os.kill(rt.pid1 or _child_pid(fake.proc.pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
            t_end = time.monotonic() + grace_s
            while fake.proc.poll() is None and time.monotonic() < t_end:
                time.sleep(0.05)
        if fake is not None:
            fake.kill()
            shutil.rmtree(fake.dir, ignore_errors=True)
        self.pods.pop((rt.namespace, rt.name), None)
        self._note_phase(rt.namespace, rt.name, "Gone")
        rt.gone.set()

    def kill_pod(self, namespace: str, name: str, reason: str | None = None) -> None:
        """What a node crash or OOM kill does: the pod's PID 1 dies; the pod object stays (Failed).
        ``reason="OOMKilled"``: the status a kubelet writes when the container's memory limit
        killed it (terminated, reason OOMKilled, exit code 137); else "Error"."""
        rt = self.pods[(namespace, name)]
        assert rt.fake is not None and rt.fake.proc is not None
        rt.kill_reason = reason
        rt.fake.kill()
        self._ended(rt, rt.fake.proc.wait())  # the status says so before kill_pod returns

    def _ended(self, rt: PodRuntime, code: int) -> None:
        with rt.lock:
            if rt.phase in ("Failed", "Succeeded"):
                return
            code = 128 - code if code < 0 else code
            reason = rt.kill_reason or ("Completed" if code == 0 else "Error")
            rt.task_state = {"terminated": {"exitCode": code, "reason": reason,
                                            "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}}
            rt.phase = "Succeeded" if code == 0 and not rt.reason else "Failed"
            for t in ("ContainersReady", "Ready"):
                rt.conditions[t] = ("False", "PodCompleted" if code == 0 else "PodFailed", None)
            self._publish(rt)

    def exec_target(self, namespace: str, name: str, container: str) -> tuple[int, bool]:
        """(host pid of the container's PID 1, own network namespace) for an exec."""
        rt = self.pods.get((namespace, name))
        if rt is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        if rt.phase != "Running" or rt.fake is None or rt.fake.proc is None or rt.fake.proc.poll() is not None:
            raise ApiError(400, "BadRequest", f"container {container} is not running in pod {name} (phase {rt.phase})")
        if container not in ("", "task"):
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        assert rt.pid1 is not None
        return rt.pid1, rt.fake.own_netns

    def close(self) -> None:
        for rt in list(self.pods.values()):
            self._stop(rt, 0)

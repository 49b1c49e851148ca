"""Kubernetes sandbox backend: one pod per trial, one exec stream per pod.

Start-up costs a handful of API-server calls (create policy, create pod, poll readiness, open
the exec stream); after that every tool call rides the one stream to the sandbox agent, so a
trial's API-server load does not grow with its number of steps. The counts are measured in
``_api`` (every call to the cluster goes through it) and reported in ``stats``.

The stream runs ``relay.py attach`` (farm/sandbox/inside/relay.py), which connects to the relay that
is PID 1 of the task container and keeps the agent alive across streams; if a stream breaks,
one new stream is opened and outstanding requests are re-sent with their ids, which the agent
answers from memory instead of running them again. An idle stream carries a ``ping`` every
``keepalive_s`` (clusters cut exec streams idle for ~5 minutes), and re-opens are budgeted as a
rate, ``max_reconnects`` in any ``reconnect_window_s``, so a long trial survives many cuts and a
burst of them ends as a lost sandbox (stream_budget.py). An agent command that kills every process it
can see ends the stream and the sandbox agent but not the relay, which starts the agent again
and answers the request it died under; that loss is the agent's doing and uses up no reconnect.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from farm.config import KubernetesSandboxConfig, SandboxConfig
from farm.errors import ConfigError
from farm.sandbox.base import Capabilities, LimitEvents, Sandbox, SandboxError, SandboxStartError
from farm.sandbox.images.plan import registry_prefix
from farm.sandbox.images.resolve import check_relay_task
from farm.sandbox.kubernetes.gc import GcReport, gc_pods
from farm.sandbox.kubernetes.pod_status import oom_killed, pod_digest
from farm.sandbox.kubernetes.pull_events import pull_facts
from farm.sandbox.relayed import ctime_scan
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.channel import StreamPair
from farm.sandbox.relayed.sandbox import RelaySandbox
from farm.sandbox.relayed.stream_budget import ReconnectBudget
from farm.tasks.model import NetworkMode, Task

log = logging.getLogger(__name__)

# waiting reasons that never fix themselves while we wait: fail the start at once
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


def load_clients(cfg: KubernetesSandboxConfig) -> tuple[Any, Any]:
    """CoreV1Api and NetworkingV1Api from kubeconfig / in-cluster config (built once per driver)."""
    try:
        from kubernetes import client, config
    except ImportError as e:  # pragma: no cover - the [k8s] extra is missing
        raise ConfigError("sandbox.backend=kubernetes needs the 'kubernetes' package "
                          "(pip install farm[k8s])") from e
    try:
        if cfg.kubeconfig:
            api_client = config.new_client_from_config(config_file=cfg.kubeconfig, context=cfg.context or None)
        else:
            try:
                config.load_incluster_config()
                api_client = client.ApiClient()
            except config.ConfigException:
                api_client = config.new_client_from_config(context=cfg.context or None)
    except config.ConfigException as e:  # no usable credentials: a config problem, not a bug
        where = (f"sandbox.kubernetes.kubeconfig={cfg.kubeconfig!r}" if cfg.kubeconfig
                 else "$KUBECONFIG / ~/.kube/config")
        context = f", context {cfg.context!r}" if cfg.context else ""
        raise ConfigError(f"no Kubernetes credentials from {where}{context} (and not in a cluster): {e}") from None
    return client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)


# --- exec streams ----------------------------------------------------------------------------


class ExecOpener(Protocol):
    async def open(self, pod: str, command: list[str]) -> StreamPair: ...


class WebSocketStream:
    """An exec WebSocket (kubernetes.stream, _preload_content=False) as an asyncio byte stream.

    A daemon thread pumps stdout into an asyncio StreamReader; writes are sent in order from
    one worker thread so the event loop never blocks on the socket.
    """

    def __init__(self, ws: Any, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.ws = ws
        self.loop = loop
        self.reader = asyncio.StreamReader(limit=limit, loop=loop)
        self._stderr = bytearray()
        self._sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="k8s-exec-send")
        self._last_send: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._pump, name="k8s-exec-recv", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while self.ws.is_open():
                self.ws.update(timeout=1)
                if self.ws.peek_stdout():
                    data = self.ws.read_stdout(timeout=0)
                    if data:
                        self.loop.call_soon_threadsafe(self.reader.feed_data, _bytes(data))
                if self.ws.peek_stderr():
                    self._stderr += _bytes(self.ws.read_stderr(timeout=0))
                    del self._stderr[:-4096]
        except Exception as e:  # the socket broke: the channel sees EOF and re-opens
            self._stderr += f"\n[exec stream error: {e!r}]".encode()
        finally:
            with contextlib.suppress(RuntimeError):  # the event loop closed first: nobody to tell
                self.loop.call_soon_threadsafe(self.reader.feed_eof)

    def write(self, data: bytes) -> None:
        fut = self.loop.run_in_executor(self._sender, self.ws.write_stdin, data)
        self._last_send = fut

    async def drain(self) -> None:
        if self._last_send is not None:
            try:
                await self._last_send
            except Exception as e:  # websocket-client's own errors: to the channel, a broken pipe
                raise ConnectionError(f"exec stream write failed: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        self._sender.shutdown(wait=False)

    def describe(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()[-1000:]


def _bytes(data: Any) -> bytes:
    return data if isinstance(data, bytes) else str(data).encode("utf-8")


class KubeExecOpener:
    def __init__(self, core_api: Any, namespace: str, container: str = m.TASK_CONTAINER,
                 limit: int = 16 << 20) -> None:
        self.core = core_api
        self.namespace = namespace
        self.container = container
        self.limit = limit

    async def open(self, pod: str, command: list[str]) -> StreamPair:
        from kubernetes.stream import stream

        def connect() -> Any:
            # kubernetes.stream swaps the ApiClient's call_api for its WebSocket one while the
            # call runs: on the shared client, a pod read from another thread in that moment went
            # out as a WebSocket handshake and failed the start ("Handshake status 200 OK", seen
            # in a start storm of 50 at once); each exec opens on a client of its own (about 6 us
            # to build, measured 2026-12-04: nothing beside the WebSocket handshake, so no cache)
            api = self.core.api_client
            own = type(api)(api.configuration, cookie=api.cookie)
            own.default_headers = dict(api.default_headers)
            core = type(self.core)(own)
            return stream(core.connect_get_namespaced_pod_exec, pod, self.namespace,
                          container=self.container, command=command, stdin=True, stdout=True,
                          stderr=True, tty=False, _preload_content=False, binary=True)

        ws = await asyncio.to_thread(connect)
        return WebSocketStream(ws, asyncio.get_running_loop(), self.limit)


# --- the sandbox ----------------------------------------------------------------------------


class KubernetesSandbox(RelaySandbox):
    backend = "kubernetes"
    # egress is a NetworkPolicy: it can change in place. No jail: CAP_SYS_ADMIN, even for the
    # sandbox agent alone, is refused by the baseline and restricted Pod Security standards, so
    # commands can kill the sandbox agent; the relay (PID 1, out of their reach) restarts it and
    # the command it died under ends as killed (relayed/channel.py): rows say "pid1-relay: ..."
    # No engine diffs a pod against its image: system_changes() lists what changed since the
    # start by inode change time instead (relayed/ctime_scan.py)
    capabilities = Capabilities(set_network=True, system_diff=True)
    cfg: KubernetesSandboxConfig

    def __init__(
        self,
        task: Task,
        cfg: KubernetesSandboxConfig,
        *,
        run_id: str,
        trial_key: str,
        attempt: int = 0,
        core_api: Any = None,
        net_api: Any = None,
        exec_opener: ExecOpener | None = None,
        role: str = "agent",
        network: NetworkMode | None = None,
        poll_s: float = 2.0,
        image_policy: str = "pull-or-build",
    ) -> None:
        network = network or ((cfg.agent_network or task.agent_network) if role == "agent"
                              else (cfg.verifier_network or task.verifier_network))  # type: ignore[assignment]
        super().__init__(task, cfg, run_id=run_id, trial_key=trial_key, attempt=attempt, role=role,
                         network=network, image_policy=image_policy)  # type: ignore[arg-type]
        self.poll_s = poll_s
        if core_api is None or net_api is None:
            core_api, net_api = load_clients(cfg)
        self.core = core_api
        self.net = net_api
        self.exec_opener = exec_opener or KubeExecOpener(core_api, cfg.namespace)
        self._policies: list[str] = []
        self._calls = {"start": 0, "ready": 0, "closing": 0}
        self._system_baseline: dict[str, Any] | None = None
        self._oom: str | None = None  # the task container's OOMKilled, as a lost stream's pod read showed it

    @property
    def label(self) -> str:
        return f"pod {self.cfg.namespace}/{self.name}"

    def _spec_config(self) -> KubernetesSandboxConfig:
        return self.cfg

    def _describe(self) -> dict[str, Any]:
        return {"pod": self.name, "namespace": self.cfg.namespace}

    def _stream_policy(self) -> tuple[ReconnectBudget, float | None]:
        budget = ReconnectBudget(self.cfg.max_reconnects, self.cfg.reconnect_window_s,
                                 setting="sandbox.kubernetes.max_reconnects")
        return budget, self.cfg.keepalive_s

    def _count_call(self) -> None:
        # the environment build is part of the start; closing is counted on its own
        key = "start" if self._phase in ("new", "start", "build") else self._phase
        self._calls[key] = self._calls.get(key, 0) + 1
        self.stats.api_calls_start = self._calls["start"]
        self.stats.api_calls_after_start = self._calls["ready"]
        self.stats.extra["api_calls_close"] = self._calls["closing"]

    # every API-server call goes through here, so the trial row's counts are measured
    async def _api(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._count_call()
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _create(self) -> None:
        # the policy exists before the pod, so no process of the pod ever runs unfenced
        await self._apply_network(self.network)
        await self._api(self.core.create_namespaced_pod, self.cfg.namespace, self.pod)
        await self._wait_running(time.monotonic())

    async def _open_stream(self) -> StreamPair:
        self._count_call()  # opening an exec stream is one API call
        return await self.exec_opener.open(self.name, [m.PYTHON, m.RELAY, "attach", m.socket_name(self.name)])

    async def _why_dead(self) -> str | None:
        try:
            pod = await self._api(self.core.read_namespaced_pod, self.name, self.cfg.namespace)
        except Exception as e:
            return f"pod unreadable: {e!r}"
        self._oom = self._oom or oom_killed(pod)
        if pod.status is None or pod.status.phase != "Running":
            return pod_digest(pod)
        return None

    async def limit_events(self) -> LimitEvents | None:
        """The pod status's own word on the container's memory limit (issue 40): ``OOMKilled``
        means the kernel killed the task container whole at its limit (cgroup v2 kills the group,
        relay included), the agent's doing. Read from the pod a lost stream already fetched: no
        API call of its own. None otherwise: a pod keeps no counters farm can read."""
        return LimitEvents(agent=("memory",), evidence=self._oom) if self._oom else None

    async def _pull_done(self) -> bool | None:
        """Read the pod's events: True once the task image is on the node (``image_pull_s`` set),
        False while it is not, None when events cannot be read (a Role without them)."""
        try:
            events = await self._api(self.core.list_namespaced_event, self.cfg.namespace,
                                     field_selector=f"involvedObject.name={self.name}")
        except Exception as e:  # noqa: BLE001 - pull timing is a diagnostic; the start goes on
            self.stats.extra["image_pull_unknown"] = f"events unreadable: {getattr(e, 'status', None) or e!r}"
            return None
        facts = pull_facts(list(events.items or []), m.TASK_CONTAINER)
        if facts.pulled:
            self.stats.extra["image_pull_s"] = facts.pull_s
        return facts.pulled

    async def _wait_running(self, t0: float) -> None:
        """Poll until the task container runs. Until its image is pulled (the Pulled event)
        ``pull_timeout_s`` applies, counted from creation; after it ``pod_start_timeout_s``,
        counted from the pull, so a cold pull of a large image does not eat the start's time.
        Where events cannot be read, ``pod_start_timeout_s`` counts from creation."""
        delay = min(0.25, self.poll_s)
        unschedulable_since: float | None = None
        pulled_at: float | None = None
        events = True  # readable, as far as we know
        while True:
            pod = await self._api(self.core.read_namespaced_pod, self.name, self.cfg.namespace)
            st = pod.status
            phase = st.phase if st else None
            node = pod.spec.node_name if getattr(pod, "spec", None) is not None else None
            if node:
                self.stats.extra["node"] = node
            if pulled_at is None and events and (node or phase == "Running"):
                done = await self._pull_done()
                events = done is not None
                if done:
                    pulled_at = time.monotonic()
            if phase == "Running":
                if "image_pull_s" not in self.stats.extra:
                    self.stats.extra.setdefault("image_pull_unknown", "no Pulled event for the task container")
                return
            if phase in ("Failed", "Succeeded"):
                raise SandboxStartError(f"pod {self.name} ended before it was ready: {pod_digest(pod)}",
                                        reason="ended")
            for cs in list((st and st.init_container_statuses) or []) + list((st and st.container_statuses) or []):
                w = cs.state.waiting if cs.state else None
                if w and w.reason in FATAL_WAITING:
                    raise SandboxStartError(
                        f"pod {self.name}: {cs.name} {w.reason}: {w.message or ''} (image {self.image})",
                        reason="image_pull" if "Image" in w.reason else "container_config")
            for c in (st and st.conditions) or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    unschedulable_since = unschedulable_since or time.monotonic()
                    if time.monotonic() - unschedulable_since >= self.cfg.unschedulable_grace_s:
                        raise SandboxStartError(f"pod {self.name} unschedulable: {c.message}", reason="unschedulable")
            now = time.monotonic()
            if pulled_at is None and events and now - t0 > self.cfg.pull_timeout_s:
                raise SandboxStartError(f"pod {self.name}: image {self.image} not pulled after "
                                        f"{self.cfg.pull_timeout_s:g} s (sandbox.kubernetes.pull_timeout_s)"
                                        f"{' on node ' + node if node else ''}: {pod_digest(pod)}", reason="image_pull")
            since = pulled_at if pulled_at is not None else (t0 if not events else None)
            if since is not None and now - since > self.cfg.pod_start_timeout_s:
                after = "its image was pulled" if pulled_at is not None else "it was created"
                raise SandboxStartError(f"pod {self.name} not ready {self.cfg.pod_start_timeout_s:g} s after "
                                        f"{after}: {pod_digest(pod)}", reason="timeout")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.poll_s)

    async def _prepare(self) -> None:
        await super()._prepare()
        # after the replayed build steps, before the agent: what changes from here on is the agent's
        assert self.channel is not None
        res = await self.channel.exec(ctime_scan.baseline_command(m.PYTHON), 60, "/")
        try:
            self._system_baseline = json.loads(res.stdout) if res.exit_code == 0 else None
        except ValueError:
            self._system_baseline = None
        if self._system_baseline is None:  # the check is lost, not the start: system_changes says so
            self.stats.extra["system_baseline"] = f"not recorded: {res.output[-300:]}"

    async def system_changes(self) -> list[tuple[str, str]]:
        """What changed in the pod's system paths since its start, as ``(kind, path)`` with kind
        ``A`` (a name new to a ``bin`` directory) or ``C`` (changed), found by inode change time
        (relayed/ctime_scan.py; farm/grade/tamper.py reads the pairs).

        Raises:
            SandboxError: no start time was recorded, or the pod could not list its paths.
        """
        base = self._system_baseline
        if base is None:
            raise SandboxError(f"{self.name}: {self.stats.extra.get('system_baseline', 'no start time recorded')}")
        res = await self.exec(ctime_scan.changed_command(m.PYTHON, int(base["t"])), timeout_s=300, cwd="/",
                              output_cap=32 << 20)
        try:
            paths = json.loads(res.stdout) if res.exit_code == 0 else None
        except ValueError:
            paths = None
        if not isinstance(paths, list):
            raise SandboxError(f"{self.name}: listing changed system paths failed: {res.output[-300:]}")
        return ctime_scan.classify([str(x) for x in paths], base.get("bins") or {})

    async def _apply_network(self, network: NetworkMode) -> None:
        assert self.pod is not None
        wanted = m.network_policies(self.pod, network, except_cidrs=self.cfg.public_egress_except)
        wanted_names = {p["metadata"]["name"] for p in wanted}
        for name in [n for n in self._policies if n not in wanted_names]:
            await self._delete_policy(name)
        for body in wanted:
            name = body["metadata"]["name"]
            if name in self._policies:
                continue
            try:
                await self._api(self.net.create_namespaced_network_policy, self.cfg.namespace, body)
            except Exception as e:
                if getattr(e, "status", None) != 409:
                    raise
            self._policies.append(name)
        self.network = network

    async def set_network(self, network: str) -> None:
        """Switch the pod's egress (e.g. to the verifier's mode before grading in place)."""
        if network != self.network:
            await self._apply_network(network)  # type: ignore[arg-type]

    async def _delete_policy(self, name: str) -> None:
        try:
            await self._api(self.net.delete_namespaced_network_policy, name, self.cfg.namespace)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                log.warning("deleting NetworkPolicy %s failed: %r", name, e)
        if name in self._policies:
            self._policies.remove(name)

    async def _destroy(self, force: bool) -> None:
        if self.cfg.keep_pods and not force:
            return
        phase = self._phase
        self._phase = "closing"  # counted as close-time API calls, whatever phase we failed in
        try:
            try:
                await self._api(self.core.delete_namespaced_pod, self.name, self.cfg.namespace,
                                grace_period_seconds=0)
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    log.warning("deleting pod %s failed: %r", self.name, e)
            for name in list(self._policies):
                await self._delete_policy(name)
        finally:
            self._phase = phase


_CLIENTS: dict[tuple[str | None, str | None], tuple[Any, Any]] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_clients(cfg: KubernetesSandboxConfig) -> tuple[Any, Any]:
    """One client set per process and kubeconfig/context (not one per attempt)."""
    key = (cfg.kubeconfig, cfg.context)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = load_clients(cfg)
        return _CLIENTS[key]


class KubernetesBackend:
    """``sandbox.backend=kubernetes`` for the registry (farm/sandbox/registry.py)."""

    name = "kubernetes"

    def open(self, task: Task, cfg: SandboxConfig, *, network: str | None, run_id: str, trial_key: str,
             attempt: int, role: str) -> Sandbox:
        core, net = shared_clients(cfg.kubernetes)
        return KubernetesSandbox(task, cfg.kubernetes, run_id=run_id, trial_key=trial_key, attempt=attempt,
                                 role=role, network=network, core_api=core, net_api=net,  # type: ignore[arg-type]
                                 image_policy=cfg.image_policy)

    def check_task(self, task: Task, cfg: SandboxConfig) -> None:
        check_relay_task(task, cfg.kubernetes, self.name, cfg.image_policy)

    def check_environment(self, cfg: SandboxConfig) -> None:
        # keepalive_s, reconnect_window_s and pull_timeout_s are refused at config load
        # (farm/config.py validate); the build registry's form is checked only here
        if cfg.kubernetes.build_registry is not None:
            registry_prefix(cfg.kubernetes.build_registry)  # a bad value is one line naming the field
        try:
            import kubernetes  # noqa: F401
        except ImportError:  # pragma: no cover - the [k8s] extra is missing
            raise ConfigError("sandbox.backend=kubernetes needs the 'kubernetes' package "
                              "(pip install farm[k8s])") from None

    def gc(self, cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
        core, net = shared_clients(cfg.kubernetes)
        return gc_pods(core, net, cfg.kubernetes.namespace, is_run_alive, dry_run=dry_run)


BACKEND = KubernetesBackend()

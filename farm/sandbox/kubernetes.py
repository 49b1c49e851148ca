"""Kubernetes sandbox backend: one pod per trial, one exec stream per pod.

Start-up costs a handful of API-server calls (create policy, create pod, poll readiness, open
the exec stream); after that every tool call rides the one stream to the sandbox agent, so a
trial's API-server load does not grow with its number of steps. The counts are measured in
``_api`` (every call to the cluster goes through it) and reported in ``stats``.

The stream runs ``relay.py attach`` (farm/sandbox/relay.py), which connects to the relay that
is PID 1 of the task container and keeps the agent alive across streams; if a stream breaks,
one new stream is opened and outstanding requests are re-sent with their ids, which the agent
answers from memory instead of running them again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Protocol

from farm.errors import ConfigError, FarmError, UnsupportedTaskError
from farm.sandbox import manifests as m
from farm.sandbox.base import (
    SandboxClosedError,
    SandboxError,
    SandboxLostError,
    SandboxStartError,
    SandboxStats,
)
from farm.sandbox.channel import Channel
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.build import replay_build_steps, resolve_build_steps
from farm.tasks.image_lock import apply_image_policy, load_image_lock
from farm.tasks.model import NetworkMode, Task

log = logging.getLogger(__name__)

INSIDE_SRC = Path(__file__).with_name("inside")
RELAY_SRC = Path(__file__).with_name("relay.py")
LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts", "/tests", "/solution")
# waiting reasons that never fix themselves while we wait: fail the start at once
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


@dataclass
class KubernetesConfig:
    """``sandbox.kubernetes.*``: where and how trial pods run."""

    namespace: str = "farm-sandboxes"
    context: str | None = None
    kubeconfig: str | None = None
    image_registry: str | None = None  # mirror that replaces the images' registry host
    image_lock: str | None = None  # packaged lock name (sweb-v-20260904) or a JSON path
    toolbox_image: str = "ghcr.io/farm-eval/farm-toolbox:0.1.0"
    runtime_class: str | None = None  # e.g. gvisor, kata
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    priority_class: str | None = None
    service_account: str | None = None  # token is never mounted either way
    pull_secrets: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    capabilities: str = "restricted"  # restricted | none | runtime-default (manifests.py)
    cpu_limit_factor: float | None = 1.0  # CPU limit = request x factor; None: no CPU limit
    memory_limit: str | None = None  # overrides the task's memory as the limit
    pod_lifetime_s: float | None = None  # activeDeadlineSeconds; default agent+verifier+build+600
    pod_start_timeout_s: float = 900.0
    unschedulable_grace_s: float = 120.0  # an autoscaler may still add a node
    agent_network: str | None = None  # override the task's network mode for the agent phase
    verifier_network: str | None = None
    public_egress_except: list[str] = field(default_factory=lambda: list(m.DEFAULT_EGRESS_EXCEPT))
    keep_pods: bool = False
    max_reconnects: int = 3
    request_timeout_s: float = 300.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "KubernetesConfig":
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"sandbox.kubernetes: unknown key(s) {unknown}; known: {sorted(names)}")
        cfg = cls(**{k: v for k, v in data.items() if v is not None or k in ("cpu_limit_factor",)})
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.capabilities not in m.CAPABILITY_PROFILES:
            raise ConfigError(f"sandbox.kubernetes.capabilities: invalid value {self.capabilities!r}; "
                              f"expected one of {m.CAPABILITY_PROFILES}")
        for key in ("agent_network", "verifier_network"):
            v = getattr(self, key)
            if v not in (None, "public", "no-network"):
                raise ConfigError(f"sandbox.kubernetes.{key}: invalid value {v!r}; expected public | no-network")
        if self.cpu_limit_factor is not None and self.cpu_limit_factor < 1:
            raise ConfigError(f"sandbox.kubernetes.cpu_limit_factor: invalid value {self.cpu_limit_factor!r}; must be >= 1")
        if self.pod_start_timeout_s <= 0:
            raise ConfigError(f"sandbox.kubernetes.pod_start_timeout_s: invalid value {self.pod_start_timeout_s!r}")
        if not self.namespace:
            raise ConfigError("sandbox.kubernetes.namespace: must not be empty")


def load_clients(cfg: KubernetesConfig) -> tuple[Any, Any]:
    """CoreV1Api and NetworkingV1Api from kubeconfig / in-cluster config (built once per driver)."""
    try:
        from kubernetes import client, config
    except ImportError as e:  # pragma: no cover - the [k8s] extra is missing
        raise ConfigError("sandbox.backend=kubernetes needs the 'kubernetes' package (pip install farm[k8s])") from e
    api_client = client.ApiClient(configuration=client.Configuration())
    if cfg.kubeconfig:
        api_client = config.new_client_from_config(config_file=cfg.kubeconfig, context=cfg.context or None)
    else:
        try:
            config.load_incluster_config()
            api_client = client.ApiClient()
        except config.ConfigException:
            api_client = config.new_client_from_config(context=cfg.context or None)
    return client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)


# --- exec streams ----------------------------------------------------------------------------


class StreamPair(Protocol):
    reader: asyncio.StreamReader

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


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
            self.loop.call_soon_threadsafe(self.reader.feed_eof)

    def write(self, data: bytes) -> None:
        fut = self.loop.run_in_executor(self._sender, self.ws.write_stdin, data)
        self._last_send = fut

    async def drain(self) -> None:
        if self._last_send is not None:
            await self._last_send

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
            return stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace,
                          container=self.container, command=command, stdin=True, stdout=True,
                          stderr=True, tty=False, _preload_content=False, binary=True)

        ws = await asyncio.to_thread(connect)
        return WebSocketStream(ws, asyncio.get_running_loop(), self.limit)


class ReconnectingChannel(Channel):
    """A Channel whose requests survive the loss of the underlying stream.

    On ``SandboxLostError`` a new stream is opened (at most ``max_reconnects`` times per
    sandbox) and the same request id is sent again; the agent de-duplicates by id, so a lost
    reply is re-read and a running command is re-attached, never re-run.
    """

    def __init__(self, open_stream: Callable[[], Awaitable[StreamPair]], *, name: str,
                 max_reconnects: int, alive: Callable[[], Awaitable[str | None]]) -> None:
        self._open_stream = open_stream
        self._max_reconnects = max_reconnects
        self._alive = alive  # None if the pod can still serve, else why not
        self._inner: Channel | None = None
        self._stream: StreamPair | None = None
        self._reopen_lock = asyncio.Lock()
        self.reconnects = 0
        super().__init__(_NoStream(), _NoStream(), name=name)

    async def connect(self) -> None:
        stream = await self._open_stream()
        inner = Channel(stream.reader, stream, name=self._name, describe_loss=stream.describe)
        inner.start()
        self._stream, self._inner = stream, inner

    async def _reopen(self, broken: Channel) -> None:
        async with self._reopen_lock:
            if self._inner is not broken:
                return  # another request already re-opened the stream
            if self.reconnects >= self._max_reconnects:
                raise broken.lost or SandboxLostError(f"{self._name}: channel lost")
            why = await self._alive()
            if why:
                raise SandboxLostError(f"{self._name}: channel lost and the pod cannot serve: {why}")
            self.reconnects += 1
            log.warning("%s: exec stream lost (%s); re-opening (%d/%d)", self._name, broken.lost,
                        self.reconnects, self._max_reconnects)
            await broken.close()
            await self.connect()

    async def request(self, op: str, args: Mapping[str, Any] | None = None, *,
                      timeout: float | None = 300.0, request_id: str | None = None) -> dict[str, Any]:
        import uuid

        if self._closed:
            raise SandboxClosedError(f"{self._name}: channel is closed")
        rid = request_id or uuid.uuid4().hex
        while True:
            inner = self._inner
            if inner is None:
                raise SandboxClosedError(f"{self._name}: channel is not connected")
            try:
                result = await inner.request(op, args, timeout=timeout, request_id=rid)
                self.requests += 1
                return result
            except SandboxLostError:
                if self._closed:
                    raise SandboxClosedError(f"{self._name}: closed while a request was pending") from None
                await self._reopen(inner)

    async def close(self) -> None:
        self._closed = True
        if self._inner is not None:
            await self._inner.close()


class _NoStream:
    async def readline(self) -> bytes:
        return b""

    def write(self, data: bytes) -> None:
        raise RuntimeError("no stream")

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


# --- the sandbox ----------------------------------------------------------------------------


def pod_digest(pod: Any) -> str:
    """phase, reasons, container states and false conditions, for error messages."""
    st = getattr(pod, "status", None)
    if st is None:
        return "no status"
    parts = [f"phase={st.phase}"]
    if st.reason:
        parts.append(f"reason={st.reason}")
    if st.message:
        parts.append(f"message={st.message}")
    for cs in list(st.init_container_statuses or []) + list(st.container_statuses or []):
        state = cs.state
        if state and state.waiting:
            parts.append(f"{cs.name}: waiting {state.waiting.reason}: {state.waiting.message or ''}".rstrip(": "))
        if state and state.terminated:
            t = state.terminated
            parts.append(f"{cs.name}: terminated {t.reason} exit={t.exit_code} {t.message or ''}".rstrip())
    for c in st.conditions or []:
        if c.status == "False":
            parts.append(f"{c.type}=False {c.reason or ''} {c.message or ''}".rstrip())
    return "; ".join(parts)


class KubernetesSandbox(ChannelSandboxMixin):
    backend = "kubernetes"

    def __init__(
        self,
        task: Task,
        cfg: KubernetesConfig,
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
    ) -> None:
        if task.environment.image is None:
            raise UnsupportedTaskError(
                f"task {task.benchmark}/{task.task_id} has no image; sandbox=kubernetes needs one")
        self.task = task
        self.cfg = cfg
        self.run_id = run_id
        self.trial_key = trial_key
        self.role = role
        self.poll_s = poll_s
        if core_api is None or net_api is None:
            core_api, net_api = load_clients(cfg)
        self.core = core_api
        self.net = net_api
        self.exec_opener = exec_opener or KubeExecOpener(core_api, cfg.namespace)
        self.name = m.pod_name(task.benchmark.replace("_", "-"), task.task_id, trial_key, attempt,
                               "" if role == "agent" else role)
        self.network: NetworkMode = network or ((cfg.agent_network or task.agent_network) if role == "agent"
                                                else (cfg.verifier_network or task.verifier_network))  # type: ignore[assignment]
        self.stats = SandboxStats()
        self.channel: ReconnectingChannel | None = None
        self.image: str | None = None
        self.pod: dict[str, Any] | None = None
        self._policies: list[str] = []
        self._phase = "new"  # new -> start -> ready -> closing -> closed
        self._ready_for_build = False
        self._workdir = task.workdir
        self._env: dict[str, str] = {}
        self._calls = {"start": 0, "ready": 0, "closing": 0}

    # every API-server call goes through here, so the trial row's counts are measured
    async def _api(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        key = "start" if self._phase in ("new", "start") else self._phase
        self._calls[key] = self._calls.get(key, 0) + 1
        self.stats.api_calls_start = self._calls["start"]
        self.stats.api_calls_after_start = self._calls["ready"]
        self.stats.extra["api_calls_close"] = self._calls["closing"]
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _resolve_image(self) -> str:
        lock = load_image_lock(self.cfg.image_lock) if self.cfg.image_lock else None
        (task,) = apply_image_policy([self.task], registry=self.cfg.image_registry, lock=lock)
        return task.environment.image  # type: ignore[return-value]

    async def start(self) -> None:
        if self._phase != "new":
            raise SandboxError(f"{self.name}: start() called twice")
        self._phase = "start"
        t0 = time.monotonic()
        self.image = self._resolve_image()  # a task missing from the lock fails here, before any pod
        self.stats.extra.update({"image": self.image, "pod": self.name, "namespace": self.cfg.namespace,
                                 "agent_network": self.network if self.role == "agent" else None,
                                 "verifier_network": self.network if self.role != "agent" else None})
        inside = m.pack_inside(INSIDE_SRC, [RELAY_SRC])
        self.pod = m.pod_manifest(self.task, self.cfg, name=self.name, run_id=self.run_id,
                                  trial_key=self.trial_key, image=self.image, inside_b64=inside,
                                  network=self.network, role=self.role)
        try:
            # the policy exists before the pod, so no process of the pod ever runs unfenced
            await self._apply_network(self.network)
            await self._api(self.core.create_namespaced_pod, self.cfg.namespace, self.pod)
            await self._wait_running(t0)
            self.channel = ReconnectingChannel(self._open_stream, name=f"pod {self.cfg.namespace}/{self.name}",
                                               max_reconnects=self.cfg.max_reconnects, alive=self._why_dead)
            await self.channel.connect()
            await self.channel.request("ping", {}, timeout=60)
            await self._prepare()
        except BaseException as e:
            await self._cleanup(force=True)
            self._phase = "closed"
            if isinstance(e, (SandboxError, FarmError)) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"{self.name}: start failed: {e!r}") from e
        self.stats.start_s = time.monotonic() - t0
        self._phase = "ready"

    async def _open_stream(self) -> StreamPair:
        key = "start" if self._phase in ("new", "start") else self._phase
        self._calls[key] = self._calls.get(key, 0) + 1  # opening an exec stream is one API call
        self.stats.api_calls_start = self._calls["start"]
        self.stats.api_calls_after_start = self._calls["ready"]
        return await self.exec_opener.open(self.name, [m.PYTHON, m.RELAY, "attach", m.socket_name(self.name)])

    async def _why_dead(self) -> str | None:
        try:
            pod = await self._api(self.core.read_namespaced_pod, self.name, self.cfg.namespace)
        except Exception as e:
            return f"pod unreadable: {e!r}"
        if pod.status is None or pod.status.phase != "Running":
            return pod_digest(pod)
        return None

    async def _wait_running(self, t0: float) -> None:
        delay = min(0.25, self.poll_s)
        unschedulable_since: float | None = None
        while True:
            pod = await self._api(self.core.read_namespaced_pod, self.name, self.cfg.namespace)
            st = pod.status
            phase = st.phase if st else None
            if phase == "Running":
                return
            if phase in ("Failed", "Succeeded"):
                raise SandboxStartError(f"pod {self.name} ended before it was ready: {pod_digest(pod)}")
            for cs in list((st and st.init_container_statuses) or []) + list((st and st.container_statuses) or []):
                w = cs.state.waiting if cs.state else None
                if w and w.reason in FATAL_WAITING:
                    err = SandboxStartError(f"pod {self.name}: {cs.name} {w.reason}: {w.message or ''} "
                                            f"(image {self.image})")
                    err.reason = "image_pull" if "Image" in w.reason else "container_config"  # type: ignore[attr-defined]
                    raise err
            for c in (st and st.conditions) or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    unschedulable_since = unschedulable_since or time.monotonic()
                    if time.monotonic() - unschedulable_since >= self.cfg.unschedulable_grace_s:
                        err = SandboxStartError(f"pod {self.name} unschedulable: {c.message}")
                        err.reason = "unschedulable"  # type: ignore[attr-defined]
                        raise err
            if time.monotonic() - t0 > self.cfg.pod_start_timeout_s:
                raise SandboxStartError(f"pod {self.name} not ready after {self.cfg.pod_start_timeout_s:.0f} s: "
                                        f"{pod_digest(pod)}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.poll_s)

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

    async def set_network(self, network: NetworkMode) -> None:
        """Switch the pod's egress (e.g. to the verifier's mode before grading in place)."""
        if network != self.network:
            await self._apply_network(network)

    async def _delete_policy(self, name: str) -> None:
        try:
            await self._api(self.net.delete_namespaced_network_policy, name, self.cfg.namespace)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                log.warning("deleting NetworkPolicy %s failed: %r", name, e)
        if name in self._policies:
            self._policies.remove(name)

    async def _prepare(self) -> None:
        """Create the Harbor log dirs and replay the task's interpreted Dockerfile steps."""
        assert self.channel is not None
        mk = " ".join([*LOG_DIRS, self.task.workdir])
        res = await self.channel.exec(f"mkdir -p {mk}", timeout_s=60, cwd="/")
        if res.exit_code != 0:
            raise SandboxStartError(f"{self.name}: could not create {mk}: {res.output[-500:]}")
        # variables expand against what the image's env would give a root shell
        steps = resolve_build_steps(self.task, {"HOME": "/root", "PATH": DEFAULT_PATH, **self.task.environment.env})
        self._ready_for_build = True
        await replay_build_steps(self, self.task, steps)
        for step in steps:
            if step.kind == "workdir":
                self._workdir = step.path
        self._env = dict(steps[-1].env) if steps else {}

    # --- Sandbox protocol --------------------------------------------------------------------

    def _ch(self) -> ReconnectingChannel:
        if self._phase in ("closing", "closed"):
            raise SandboxClosedError(f"{self.name}: sandbox is closed")
        if self.channel is None or (self._phase != "ready" and not self._ready_for_build):
            raise SandboxError(f"{self.name}: sandbox was not started")
        return self.channel

    async def close(self) -> None:
        if self._phase == "closed":
            return
        self._phase = "closing"
        if self.channel is not None:
            self.stats.requests = self.channel.requests
            self.stats.extra["reconnects"] = self.channel.reconnects
        await self._cleanup(force=False)
        self._phase = "closed"

    async def _cleanup(self, force: bool) -> None:
        if self.channel is not None:
            try:
                if self.channel._inner is not None and self.channel._inner.lost is None:
                    await asyncio.wait_for(self.channel._inner.request("shutdown", {}, timeout=10), 15)
            except Exception:
                pass  # the pod is deleted next anyway
            await self.channel.close()
            if self.channel._stream is not None:
                self.channel._stream.close()
        if self.cfg.keep_pods and not force:
            return
        phase = self._phase
        self._phase = "closing"
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


def shared_clients(cfg: KubernetesConfig) -> tuple[Any, Any]:
    """One client set per process and kubeconfig/context (not one per attempt)."""
    key = (cfg.kubeconfig, cfg.context)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = load_clients(cfg)
        return _CLIENTS[key]


def make_kubernetes_sandbox(task: Task, cfg: Any, network: str | None = None, *, run_id: str | None = None,
                            trial_key: str | None = None, attempt: int = 0, role: str = "agent") -> KubernetesSandbox:
    """Factory used by farm.run.trial: ``cfg`` is the FarmConfig (sandbox.kubernetes is a dict)."""
    import uuid

    kcfg = KubernetesConfig.from_dict(_plain(cfg.sandbox.kubernetes))
    core, net = shared_clients(kcfg)
    return KubernetesSandbox(task, kcfg, run_id=run_id or getattr(cfg.run, "id", None) or "adhoc",
                             trial_key=trial_key or uuid.uuid4().hex, attempt=attempt, role=role,
                             network=network, core_api=core, net_api=net)  # type: ignore[arg-type]


def _plain(section: Any) -> dict[str, Any]:
    """A config section as plain Python containers (OmegaConf DictConfig or a dict)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(section):
            return OmegaConf.to_container(section, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return dict(section or {})

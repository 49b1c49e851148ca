"""What the relay-backed backends (a Kubernetes pod, a Docker/Podman container) share.

Both run the task image with ``relay.py serve`` as PID 1 and reach the sandbox agent through
an exec stream (``relay.py attach``) that may break; they differ only in how the pod or
container is created, reached and removed. This module holds the common part once: the
reconnecting channel, the image policy, the start sequence (create, connect, ping, log dirs,
build steps), close, and the preflight check of a task. A backend subclasses
``RelaySandbox`` and provides ``_create``, ``_open_stream``, ``_why_dead`` and ``_destroy``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from farm.config import KubernetesSandboxConfig
from farm.errors import FarmError
from farm.sandbox.base import (
    ExecResult,
    ImageProvenance,
    SandboxClosedError,
    SandboxError,
    SandboxLostError,
    SandboxStartError,
    SandboxStats,
    ToolRequest,
    ToolResponse,
)
from farm.sandbox.channel import Channel, RemoteOpError
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.images.plan import ImageFacts, task_build_tag
from farm.sandbox.images.resolve import ROOT_ENV, RelayConfig, built_view, relay_plan, resolve_image
from farm.sandbox.inside import relay as r
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.stream_budget import ReconnectBudget, ReconnectBudgetError
from farm.sandbox.replay import replay_build_steps, resolve_build_steps, runtime_env
from farm.tasks.model import NetworkMode, Task

log = logging.getLogger(__name__)

# everything shipped into a sandbox lives in farm/sandbox/inside/, the relay included
INSIDE_SRC = Path(__file__).resolve().parent.parent / "inside"
RELAY_SRC = INSIDE_SRC / "relay.py"
LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts", "/tests", "/solution")
# ops that can be sent again under a new id when the agent was killed under them (relay.py)
IDEMPOTENT_OPS = frozenset({"ping", "read", "stat", "list", "glob"})
KILL_RETRIES = 3


OOM_KILLED = "OOMKilled"  # a container status's reason when its memory limit killed it


class SandboxOutOfMemoryError(SandboxLostError):
    """The whole container was killed at its memory limit (cgroup v2 kills the group, relay
    included, since Kubernetes 1.28): the trial's own processes used more than the task allows.
    Nothing is left to grade in place; ``reason`` lets the run layer classify it."""

    reason = "oom_killed"


def agent_killed(exc: BaseException) -> bool:
    """The relay answered: the sandbox agent was killed by a signal while this request ran."""
    return isinstance(exc, RemoteOpError) and exc.type == r.KILLED


def killed_signal(exc: BaseException) -> int:
    found = re.search(r"killed by signal (\d+)", str(exc))
    return int(found.group(1)) if found else 9


# --- streams and the reconnecting channel ---------------------------------------------------


class StreamPair(Protocol):
    reader: asyncio.StreamReader

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


class ProcStream:
    """A subprocess's stdin/stdout as the stream pair a ReconnectingChannel reads and writes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.reader = proc.stdout  # type: ignore[assignment]

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()

    def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    def describe(self) -> str:
        return f"exec stream exit status {self.proc.returncode}"


class _NoStream:
    async def readline(self) -> bytes:
        return b""

    def write(self, data: bytes) -> None:
        raise RuntimeError("no stream")

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class ReconnectingChannel(Channel):
    """A Channel whose requests survive the loss of the underlying stream.

    On ``SandboxLostError`` a new stream is opened (as often as ``budget`` allows) and the same
    request id is sent again; the agent de-duplicates by id, so a lost reply is re-read and a
    running command is re-attached, never re-run. With ``keepalive_s`` a ``ping`` goes down the
    stream whenever nothing was written for that long (also while a long command runs), so a
    cluster that cuts idle streams never sees one idle.
    """

    def __init__(self, open_stream: Callable[[], Awaitable[StreamPair]], *, name: str,
                 budget: ReconnectBudget, alive: Callable[[], Awaitable[str | None]],
                 keepalive_s: float | None = None) -> None:
        self._open_stream = open_stream
        self._budget = budget
        self._alive = alive  # None if the sandbox can still serve, else why not
        self._inner: Channel | None = None
        self._stream: StreamPair | None = None
        self._reopen_lock = asyncio.Lock()
        self._keepalive_s = keepalive_s
        self._keepalive: asyncio.Task[None] | None = None
        self._last_write = time.monotonic()
        self.keepalives = 0
        self.reconnects = 0
        self.agent_restarts = 0  # how often the relay restarted a killed agent (last seen)
        self.agent_kills: list[dict[str, Any]] = []
        super().__init__(_NoStream(), _NoStream(), name=name)

    async def connect(self) -> None:
        stream = await self._open_stream()
        inner = Channel(stream.reader, stream, name=self._name, describe_loss=stream.describe)
        inner.start()
        self._stream, self._inner = stream, inner
        self._last_write = time.monotonic()
        if self._keepalive_s and (self._keepalive is None or self._keepalive.done()):
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive(self._keepalive_s))

    async def _keep_alive(self, every_s: float) -> None:
        """Ping down the stream when nothing was written for ``every_s``; a stream found lost
        is re-opened here (within the budget), so the next tool call does not wait for it."""
        while not self._closed:
            await asyncio.sleep(max(0.0, self._last_write + every_s - time.monotonic()))
            inner = self._inner
            if self._closed or inner is None or time.monotonic() - self._last_write < every_s:
                continue
            self._last_write = time.monotonic()
            try:
                if inner.lost is None:
                    await inner.request("ping", {}, timeout=max(60.0, every_s))
                    self.keepalives += 1
                    continue
            except SandboxLostError:
                pass
            except Exception as e:  # noqa: BLE001 - a ping must never end the sandbox by itself
                log.warning("%s: keepalive ping failed: %r", self._name, e)
                continue
            if self._closed:
                return
            try:
                await self._reopen(inner)
            except SandboxError as e:  # the next request raises it again, to its caller
                log.warning("%s: keepalive could not re-open the stream: %s", self._name, e)
                return

    async def _reopen(self, broken: Channel) -> None:
        async with self._reopen_lock:
            if self._inner is not broken:
                return  # another request already re-opened the stream
            if not self._budget.take():
                raise ReconnectBudgetError(
                    f"{self._name}: sandbox lost: the exec stream was lost more often than "
                    f"{self._budget.describe()} allows (re-opened {self.reconnects} times in all); "
                    f"last loss: {broken.lost}")
            why = await self._alive()
            if why:
                self._budget.give_back()
                lost = SandboxOutOfMemoryError if OOM_KILLED in why else SandboxLostError
                raise lost(f"{self._name}: channel lost and the sandbox cannot serve: {why}")
            self.reconnects += 1
            log.warning("%s: exec stream lost (%s); re-opening (%d so far; %s)", self._name, broken.lost,
                        self.reconnects, self._budget.describe())
            await broken.close()
            try:
                await self.connect()
            except Exception as e:  # the API server refused the exec (a 500, the kubelet unreachable)
                raise SandboxLostError(f"{self._name}: exec stream not re-opened: {type(e).__name__}: {e}") from e
            if await self.relay_status():
                # the agent's own command killed the exec session with the agent (kill -9 -1):
                # not a transport failure, so it does not use up the sandbox's reconnects
                self.reconnects -= 1
                self._budget.give_back()

    async def relay_status(self, timeout: float = 30.0) -> bool:
        """Read what the relay recorded; True when it restarted a killed agent since last asked."""
        inner = self._inner
        if inner is None or inner.lost is not None:
            return False
        try:
            status = await inner.request(r.STATUS_OP, {}, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - a diagnostic; the next request tells the truth
            log.warning("%s: relay status unavailable: %r", self._name, e)
            return False
        restarts = int(status.get("restarts") or 0)
        kills = status.get("kills")
        if isinstance(kills, list):
            self.agent_kills = kills
        if restarts > self.agent_restarts:
            log.warning("%s: the sandbox agent was killed and restarted (%d so far): %s", self._name, restarts,
                        self.agent_kills[-1:] or "")
            self.agent_restarts = restarts
            return True
        return False

    async def request(self, op: str, args: Mapping[str, Any] | None = None, *,
                      timeout: float | None = 300.0, request_id: str | None = None) -> dict[str, Any]:
        if self._closed:
            raise SandboxClosedError(f"{self._name}: channel is closed")
        rid = request_id or uuid.uuid4().hex
        kills = 0
        while True:
            inner = self._inner
            if inner is None:
                raise SandboxClosedError(f"{self._name}: channel is not connected")
            self._last_write = time.monotonic()
            try:
                result = await inner.request(op, args, timeout=timeout, request_id=rid)
                self.requests += 1
                return result
            except SandboxLostError:
                if self._closed:
                    raise SandboxClosedError(f"{self._name}: closed while a request was pending") from None
                await self._reopen(inner)
            except RemoteOpError as e:
                if not agent_killed(e) or op in ("exec", "tool"):
                    raise  # the sandbox's exec and tool turn a kill into the command's result
                if op not in IDEMPOTENT_OPS or kills >= KILL_RETRIES:
                    # a write cut short: whether it landed is unknown, so the sandbox is not sound
                    raise SandboxLostError(f"{self._name}: {op!r} interrupted: {e}") from e
                # a read that ran while something killed the agent changed nothing: ask again
                kills += 1
                rid = uuid.uuid4().hex

    async def exec(self, command: str, timeout_s: float = 120.0, *args: Any, **kwargs: Any) -> ExecResult:
        """As ``Channel.exec``; a command under which the agent was killed ends as killed by
        that signal (it is what killed the agent, or died with it), not as a lost sandbox."""
        try:
            return await super().exec(command, timeout_s, *args, **kwargs)
        except RemoteOpError as e:
            if not agent_killed(e):
                raise
            return ExecResult(exit_code=128 + killed_signal(e), stderr=f"farm: {e}\n")

    async def shutdown(self) -> None:
        """Ask the agent to stop (best effort: the sandbox is removed next anyway), then close."""
        inner = self._inner
        if inner is not None and inner.lost is None:
            try:
                await asyncio.wait_for(inner.request("shutdown", {}, timeout=10), 15)
            except Exception:  # noqa: BLE001 - removal below is what guarantees the outcome
                pass
        await self.close()
        if self._stream is not None:
            self._stream.close()

    async def close(self) -> None:
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)  # it only ever logs
            self._keepalive = None
        if self._inner is not None:
            await self._inner.close()


# --- the sandbox ----------------------------------------------------------------------------


def relay_isolation(agent: str | None) -> str | None:
    """The row's ``agent_isolation``: the jail's, or, where there is none, what the relay gives.

    Without the jail a command can see and kill the sandbox agent, but not the relay (PID 1),
    which restarts the agent and answers the request it was killed under (relay.py)."""
    if agent is None or not agent.startswith("none"):
        return agent
    return f"pid1-relay: agent restarted if killed; commands see it (jail {agent})"


class RelaySandbox(ChannelSandboxMixin):
    """A task image with the relay as PID 1, reached through re-openable exec streams."""

    backend = "relay"
    cfg: RelayConfig

    def __init__(self, task: Task, cfg: RelayConfig, *, run_id: str, trial_key: str, attempt: int,
                 role: str, network: NetworkMode, image_policy: str = "pull-or-build") -> None:
        if task.environment.image is None:
            resolve_image(task, cfg, self.backend)  # raises the typed refusal
        self.task, self.cfg, self.run_id, self.trial_key, self.role = task, cfg, run_id, trial_key, role
        self.image_policy = image_policy
        self.run_task = task  # the task as the container runs it (built_view once its image holds the build)
        self._replay = True  # replay the interpreted build steps on the running container
        self._image_facts: ImageFacts | None = None
        self.network: NetworkMode = network
        self.name = m.pod_name(task.benchmark.replace("_", "-"), task.task_id, trial_key, attempt,
                               "" if role == "agent" else role)
        self.stats = SandboxStats()
        self.channel: ReconnectingChannel | None = None
        self.image: str | None = None
        self.pod: dict[str, Any] | None = None
        self._phase = "new"  # new -> start -> build -> ready -> closing -> closed
        self._workdir = task.workdir
        self._env: dict[str, str] = {}

    # --- what a backend provides -----------------------------------------------------------

    def _spec_config(self) -> KubernetesSandboxConfig:
        """The settings pod_manifest reads (the pod's own config, or a container's equivalent)."""
        raise NotImplementedError

    def _describe(self) -> dict[str, Any]:
        """Backend-specific facts for ``stats.extra`` (pod and namespace, container and engine)."""
        return {}

    def _stream_policy(self) -> tuple[ReconnectBudget, float | None]:
        """How often the exec stream may be re-opened, and the keepalive interval (None: none).
        This default is a lifetime count of ``max_reconnects`` and no keepalive."""
        return ReconnectBudget(self.cfg.max_reconnects, None), None

    async def _ensure_image(self) -> str:
        """The image reference to run; sets ``run_task``, ``_replay`` and ``stats.image``.

        This default serves a cluster: the named image, or the content-hashed tag of a build
        that ``farm images build --push`` put in ``build_registry``.

        Raises:
            UnsupportedTaskError: as :func:`resolve_image`.
            SandboxStartError: the image could not be made present.
        """
        plan = relay_plan(self.task, self.cfg, self.image_policy, builder=False)
        if plan.build:
            tag = task_build_tag(self.task, getattr(self.cfg, "build_registry", None))
            assert tag is not None  # plan_image builds only a task with a Dockerfile
            self._replay, self.run_task = False, built_view(self.task, None)
            self.stats.image = ImageProvenance("cached", None, 0.0)
            return tag
        return resolve_image(self.task, self.cfg, self.backend)

    async def _create(self) -> None:
        """Bring up ``self.pod`` and return once the task container runs."""
        raise NotImplementedError

    async def _open_stream(self) -> StreamPair:
        raise NotImplementedError

    async def _why_dead(self) -> str | None:
        """None while the sandbox can serve a new stream, else why not."""
        raise NotImplementedError

    async def _destroy(self, force: bool) -> None:
        """Remove what ``_create`` made (``force``: even if the config says keep it)."""
        raise NotImplementedError

    # --- the shared sequence ---------------------------------------------------------------

    @property
    def label(self) -> str:
        return f"{self.backend} sandbox {self.name}"

    async def start(self) -> None:
        if self._phase != "new":
            raise SandboxError(f"{self.name}: start() called twice")
        self._phase = "start"
        t0 = time.monotonic()
        try:
            self.image = await self._ensure_image()  # refused or built before any container exists
        except BaseException as e:
            self._phase = "closed"
            if isinstance(e, FarmError) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"{self.name}: image: {type(e).__name__}: {e}", reason="engine") from e
        self.stats.extra["image_plan"] = "replay build steps" if self._replay else "image holds the build"
        self.pod = m.pod_manifest(self.run_task, self._spec_config(), name=self.name, run_id=self.run_id,
                                  trial_key=self.trial_key, image=self.image,
                                  inside_b64=m.pack_inside(INSIDE_SRC), network=self.network,
                                  role=self.role)
        self.stats.extra.update({"image": self.image, **self._describe(),
                                 "agent_network" if self.role == "agent" else "verifier_network": self.network})
        try:
            await self._create()
            budget, keepalive_s = self._stream_policy()
            self.channel = ReconnectingChannel(self._open_stream, name=self.label, budget=budget,
                                               alive=self._why_dead, keepalive_s=keepalive_s)
            await self.channel.connect()
            pong = await self.channel.request("ping", {}, timeout=60)
            self.stats.isolation = relay_isolation(pong.get("agent_isolation") if isinstance(pong, dict) else None)
            await self._prepare()
        except BaseException as e:
            await self._teardown(force=True)
            self._phase = "closed"
            if isinstance(e, SandboxError) and not isinstance(e, SandboxStartError):
                raise SandboxStartError(f"{self.name}: the sandbox agent did not answer: {e}", reason="agent") from e
            if isinstance(e, FarmError) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"{self.name}: start failed: {type(e).__name__}: {e}") from e
        self.stats.start_s = time.monotonic() - t0
        self._phase = "ready"

    async def _prepare(self) -> None:
        """Create the Harbor log dirs and replay the task's interpreted Dockerfile steps."""
        assert self.channel is not None
        mk = " ".join([*LOG_DIRS, self.run_task.workdir])
        res = await self.channel.exec(f"mkdir -p {mk}", timeout_s=60, cwd="/")
        if res.exit_code != 0:
            raise SandboxStartError(f"{self.name}: could not create {mk}: {res.output[-500:]}", reason="agent")
        facts = self._image_facts
        if not self._replay:
            # the image holds the build: its ENV and WORKDIR apply, task.toml's env on top
            self._workdir = self.run_task.workdir
            self._env = {**(facts.env if facts else {}), **self.run_task.environment.env}
            return
        # variables expand against what a root shell in the image would have
        base = {**ROOT_ENV, **(facts.env if facts else {})}
        steps = resolve_build_steps(self.task, {**base, **self.task.environment.env})
        self._phase = "build"
        await replay_build_steps(self, self.task, steps)
        for step in steps:
            if step.kind == "workdir":
                self._workdir = step.path
        self._env = runtime_env(steps)

    async def tool(self, request: ToolRequest) -> ToolResponse:
        """A tool call under which the agent was killed is an observation for the model (what
        its command did), not a lost sandbox: the relay has already started a new agent."""
        try:
            return await super().tool(request)
        except RemoteOpError as e:
            if not agent_killed(e):
                raise
            message = str(e).split(f"{r.KILLED}: ", 1)[-1]
            return ToolResponse(observation=f"{r.KILLED}: {message}", error=r.KILLED)

    def _ch(self) -> ReconnectingChannel:
        if self._phase in ("closing", "closed"):
            raise SandboxClosedError(f"{self.name}: sandbox is closed")
        if self.channel is None or self._phase not in ("ready", "build"):
            raise SandboxError(f"{self.name}: sandbox was not started")
        return self.channel

    async def close(self) -> None:
        if self._phase == "closed":
            return
        self._phase = "closing"
        if self.channel is not None:
            await self.channel.relay_status(timeout=5)  # kills nobody asked about (a daemon's, between calls)
            self.stats.requests = self.channel.requests
            self.stats.extra["reconnects"] = self.channel.reconnects
            self.stats.extra["keepalives"] = self.channel.keepalives
            self.stats.extra["agent_restarts"] = self.channel.agent_restarts
            if self.channel.agent_restarts:
                record = {"restarts": self.channel.agent_restarts, "kills": self.channel.agent_kills}
                self.stats.artifacts["agent-kills.json"] = json.dumps(record, indent=1).encode()
        await self._teardown(force=False)
        self._phase = "closed"

    async def _teardown(self, force: bool) -> None:
        if self.channel is not None:
            await self.channel.shutdown()
        await self._destroy(force)

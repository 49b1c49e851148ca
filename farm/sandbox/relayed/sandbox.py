"""What the relay-backed backends (a Kubernetes pod, a Docker/Podman container) share.

Both run the task image with ``relay.py serve`` as PID 1 and reach the sandbox agent through
an exec stream (``relay.py attach``) that may break; they differ only in how the pod or
container is created, reached and removed. This module holds the common part once: the
image policy, the start sequence (create, connect, ping, log dirs, build steps) and close; the
reconnecting channel it opens is :mod:`farm.sandbox.relayed.channel`. A backend subclasses
``RelaySandbox`` and provides ``_create``, ``_open_stream``, ``_why_dead`` and ``_destroy``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from farm.config import KubernetesSandboxConfig
from farm.errors import FarmError
from farm.sandbox.base import (
    ImageProvenance,
    SandboxClosedError,
    SandboxError,
    SandboxStartError,
    SandboxStats,
    ToolRequest,
    ToolResponse,
)
from farm.sandbox.channel import RemoteOpError
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.images.plan import ImageFacts, task_build_tag
from farm.sandbox.images.resolve import ROOT_ENV, RelayConfig, built_view, relay_plan, resolve_image
from farm.sandbox.inside import relay as r
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.channel import ReconnectingChannel, StreamPair, agent_killed
from farm.sandbox.relayed.stream_budget import ReconnectBudget
from farm.sandbox.replay import replay_build_steps, resolve_build_steps, runtime_env
from farm.tasks.model import NetworkMode, Task

# everything shipped into a sandbox lives in farm/sandbox/inside/, the relay included
INSIDE_SRC = Path(__file__).resolve().parent.parent / "inside"
RELAY_SRC = INSIDE_SRC / "relay.py"
LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts", "/tests", "/solution")


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
            self.stats.image = ImageProvenance("cached", None, 0.0, ref=tag)
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

    @property
    def step_label(self) -> str:
        """What the start's steps are prefixed with in the progress line (the engine's name)."""
        return self.backend

    async def start(self) -> None:
        if self._phase != "new":
            raise SandboxError(f"{self.name}: start() called twice")
        self._phase = "start"
        t0 = time.monotonic()
        try:
            self.stats.note_step(f"{self.step_label} image")  # a backend names its pull or build itself
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
            # the image is present from here on: a start timeout counts from now, so that a cold
            # pull or a build (bounded by their own timeouts) does not eat the start's time
            limit = self._start_timeout_s()
            try:
                async with asyncio.timeout(limit):
                    self.stats.note_step(f"{self.step_label} create")
                    await self._create()
                    budget, keepalive_s = self._stream_policy()
                    self.channel = ReconnectingChannel(self._open_stream, name=self.label, budget=budget,
                                                       alive=self._why_dead, keepalive_s=keepalive_s)
                    self.stats.note_step("agent ping")
                    await self.channel.connect()
                    pong = await self.channel.request("ping", {}, timeout=60)
            except TimeoutError as e:
                if limit is None:
                    raise
                raise SandboxStartError(f"{self.name}: not answering {limit:g} s after its image was present",
                                        reason="timeout") from e
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

    def _start_timeout_s(self) -> float | None:
        """How long the container may take, once its image is present, to answer (None: the
        backend bounds it itself, as a pod's Pulled event and ``pod_start_timeout_s`` do)."""
        return None

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

"""sandbox=docker: the pod semantics of the Kubernetes backend on one machine's container engine.

The same Pod manifest (manifests.py) is translated into engine CLI calls (Docker or Podman,
whichever ``engine`` names): a volume, the toolbox init container that fills it, then the task
image with the relay as its entrypoint; resources, capability drops, no-new-privileges,
seccomp default, labels and ``--network none`` for no-network roles follow the manifest. The
channel is one ``<engine> exec -i`` stream, re-opened on loss exactly like the pod's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from farm.errors import ConfigError, FarmError, UnsupportedTaskError
from farm.sandbox import manifests as m
from farm.sandbox.base import SandboxClosedError, SandboxError, SandboxStartError, SandboxStats
from farm.sandbox.kubernetes import (
    DEFAULT_PATH, INSIDE_SRC, LOG_DIRS, RELAY_SRC, KubernetesConfig, ReconnectingChannel,
)
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.build import replay_build_steps, resolve_build_steps
from farm.tasks.image_lock import apply_image_policy, load_image_lock
from farm.tasks.model import NetworkMode, Task


@dataclass
class ContainerConfig:
    """``sandbox.docker.*``."""

    engine: str = "docker"  # docker | podman | a path to either
    toolbox_image: str = "ghcr.io/farm-eval/farm-toolbox:0.1.0"
    image_registry: str | None = None
    image_lock: str | None = None
    capabilities: str = "restricted"
    cpu_limit_factor: float | None = 1.0
    memory_limit: str | None = None
    pull: str = "missing"  # missing | always | never
    runtime: str | None = None  # e.g. runsc for gVisor
    extra_args: list[str] = field(default_factory=list)
    keep_containers: bool = False
    max_reconnects: int = 3
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ContainerConfig":
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"sandbox.docker: unknown key(s) {unknown}; known: {sorted(names)}")
        cfg = cls(**data)
        if shutil.which(cfg.engine) is None:
            raise ConfigError(f"sandbox.docker.engine: {cfg.engine!r} is not on PATH (install Docker or Podman)")
        if cfg.pull not in ("missing", "always", "never"):
            raise ConfigError(f"sandbox.docker.pull: invalid value {cfg.pull!r}; expected missing | always | never")
        return cfg

    def as_kubernetes(self) -> KubernetesConfig:
        # manifests.py reads these fields; the rest are cluster-only
        return KubernetesConfig(namespace="local", toolbox_image=self.toolbox_image, capabilities=self.capabilities,
                                cpu_limit_factor=self.cpu_limit_factor, memory_limit=self.memory_limit,
                                labels=self.labels)


def run_args(pod: dict[str, Any], volume: str, network: NetworkMode, cfg: ContainerConfig) -> list[str]:
    """`<engine> run` arguments equivalent to the Pod's task container."""
    c = pod["spec"]["containers"][0]
    sc = c["securityContext"]
    args = ["run", "-d", "--name", pod["metadata"]["name"], "--init=false",
            "--security-opt", "no-new-privileges", "--pids-limit", "4096",
            "-v", f"{volume}:{m.FARM_MOUNT}:ro", f"--pull={cfg.pull}"]
    for k, v in pod["metadata"]["labels"].items():
        args += ["--label", f"{k}={v}"]
    for e in c["env"]:
        args += ["-e", f"{e['name']}={e['value']}"]
    caps = sc.get("capabilities") or {}
    for cap in caps.get("drop", []):
        args += ["--cap-drop", cap]
    for cap in caps.get("add", []):
        args += ["--cap-add", cap]
    limits = c["resources"]["limits"]
    if "cpu" in limits:
        args += ["--cpus", str(int(limits["cpu"].rstrip("m")) / 1000)]
    args += ["--memory", limits["memory"].replace("Mi", "m").replace("Gi", "g")]
    if network == "no-network":
        args += ["--network", "none"]
    if cfg.runtime:
        args += ["--runtime", cfg.runtime]
    args += [*cfg.extra_args, "--entrypoint", c["command"][0], c["image"], *c["command"][1:]]
    return args


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


class ContainerSandbox(ChannelSandboxMixin):
    backend = "docker"

    def __init__(self, task: Task, cfg: ContainerConfig, *, run_id: str, trial_key: str, attempt: int = 0,
                 role: str = "agent", network: NetworkMode | None = None) -> None:
        if task.environment.image is None:
            raise UnsupportedTaskError(f"task {task.benchmark}/{task.task_id} has no image; sandbox=docker needs one")
        self.task, self.cfg, self.run_id, self.trial_key, self.role = task, cfg, run_id, trial_key, role
        self.network: NetworkMode = network or (task.agent_network if role == "agent" else task.verifier_network)
        self.name = m.pod_name(task.benchmark.replace("_", "-"), task.task_id, trial_key, attempt,
                               "" if role == "agent" else role)
        self.volume = f"{self.name}-farm"
        self.stats = SandboxStats()
        self.channel: ReconnectingChannel | None = None
        self._phase = "new"
        self._workdir = task.workdir
        self._env: dict[str, str] = {}

    async def _engine(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        proc = await asyncio.create_subprocess_exec(self.cfg.engine, *args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            raise SandboxStartError(f"{self.cfg.engine} {args[0]} timed out after {timeout:.0f} s") from None
        if check and proc.returncode != 0:
            raise SandboxStartError(f"{self.cfg.engine} {' '.join(args[:2])} failed ({proc.returncode}): "
                                    f"{err.decode(errors='replace').strip()[-1500:]}")
        return out.decode(errors="replace")

    async def start(self) -> None:
        if self._phase != "new":
            raise SandboxError(f"{self.name}: start() called twice")
        self._phase = "start"
        t0 = time.monotonic()
        lock = load_image_lock(self.cfg.image_lock) if self.cfg.image_lock else None
        (task,) = apply_image_policy([self.task], registry=self.cfg.image_registry, lock=lock)
        image = task.environment.image
        assert image is not None
        kcfg = self.cfg.as_kubernetes()
        pod = m.pod_manifest(task, kcfg, name=self.name, run_id=self.run_id, trial_key=self.trial_key, image=image,
                             inside_b64=m.pack_inside(INSIDE_SRC, [RELAY_SRC]), network=self.network, role=self.role)
        self.stats.extra.update({"image": image, "container": self.name, "engine": self.cfg.engine,
                                 "agent_network" if self.role == "agent" else "verifier_network": self.network})
        init = pod["spec"]["initContainers"][0]
        try:
            await self._engine("volume", "create", "--label", f"{m.RUN_LABEL}={m.label_value(self.run_id)}", self.volume)
            await self._engine("run", "--rm", "--network", "none", "--security-opt", "no-new-privileges",
                               "--cap-drop", "ALL", "--user", "0:0", f"--pull={self.cfg.pull}",
                               "-v", f"{self.volume}:{m.FARM_MOUNT}", "--entrypoint", init["command"][0],
                               init["image"], *init["command"][1:])
            await self._engine(*run_args(pod, self.volume, self.network, self.cfg))
            self.channel = ReconnectingChannel(self._open_stream, name=f"container {self.name}",
                                               max_reconnects=self.cfg.max_reconnects, alive=self._why_dead)
            await self.channel.connect()
            await self.channel.request("ping", {}, timeout=60)
            mk = " ".join([*LOG_DIRS, self.task.workdir])
            res = await self.channel.exec(f"mkdir -p {mk}", timeout_s=60, cwd="/")
            if res.exit_code != 0:
                raise SandboxStartError(f"{self.name}: could not create {mk}: {res.output[-500:]}")
            steps = resolve_build_steps(self.task, {"HOME": "/root", "PATH": DEFAULT_PATH, **self.task.environment.env})
            self._phase = "build"
            await replay_build_steps(self, self.task, steps)
            for step in steps:
                if step.kind == "workdir":
                    self._workdir = step.path
            self._env = dict(steps[-1].env) if steps else {}
        except BaseException as e:
            await self._remove()
            self._phase = "closed"
            if isinstance(e, FarmError) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"{self.name}: start failed: {e!r}") from e
        self.stats.start_s = time.monotonic() - t0
        self._phase = "ready"

    async def _open_stream(self) -> ProcStream:
        proc = await asyncio.create_subprocess_exec(
            self.cfg.engine, "exec", "-i", self.name, m.PYTHON, m.RELAY, "attach", m.socket_name(self.name),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=16 << 20)
        return ProcStream(proc)

    async def _why_dead(self) -> str | None:
        state = (await self._engine("inspect", "-f", "{{.State.Status}}", self.name, check=False)).strip()
        return None if state == "running" else f"container state {state or 'gone'}"

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
            self.stats.requests = self.channel.requests
            self.stats.extra["reconnects"] = self.channel.reconnects
        await self._remove()
        self._phase = "closed"

    async def _remove(self) -> None:
        if self.channel is not None:
            inner = self.channel._inner
            if inner is not None and inner.lost is None:
                try:
                    await asyncio.wait_for(inner.request("shutdown", {}, timeout=10), 15)
                except Exception:
                    pass
            await self.channel.close()
            if self.channel._stream is not None:
                self.channel._stream.close()
        if self.cfg.keep_containers:
            return
        await self._engine("rm", "-f", "-t", "0", self.name, check=False)
        await self._engine("volume", "rm", "-f", self.volume, check=False)


def make_container_sandbox(task: Task, cfg: Any, network: str | None = None, *, run_id: str | None = None,
                           trial_key: str | None = None, attempt: int = 0, role: str = "agent") -> ContainerSandbox:
    """Factory used by farm.run.trial: ``cfg`` is the FarmConfig (sandbox.docker is a dict)."""
    import uuid

    ccfg = ContainerConfig.from_dict(_plain(cfg.sandbox.docker))
    return ContainerSandbox(task, ccfg, run_id=run_id or getattr(cfg.run, "id", None) or "adhoc",
                            trial_key=trial_key or uuid.uuid4().hex, attempt=attempt, role=role,
                            network=network)  # type: ignore[arg-type]


def _plain(section: Any) -> dict[str, Any]:
    """A config section as plain Python containers (OmegaConf DictConfig or a dict)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(section):
            return OmegaConf.to_container(section, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return dict(section or {})

"""sandbox=docker: the pod semantics of the Kubernetes backend on one machine's container engine.

The same Pod manifest (manifests.py) is translated into engine CLI calls (Docker or Podman,
whichever ``engine`` names): a volume, the toolbox init container that fills it, then the task
image with the relay as its entrypoint; resources, capability drops, no-new-privileges,
seccomp default, labels and ``--network none`` for no-network roles follow the manifest. The
channel is one ``<engine> exec -i`` stream, re-opened on loss exactly like the pod's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.config import DockerSandboxConfig, KubernetesSandboxConfig, SandboxConfig
from farm.errors import ConfigError
from farm.sandbox.base import JAIL_CAPS, JAIL_ENV, Capabilities, GcReport, LimitEvents, Sandbox, SandboxStartError
from farm.sandbox.docker.limits import ContainerCgroup, Counts, Ended, container_events, parse_state
from farm.sandbox.docker.toolbox import shared_volume
from farm.sandbox.images.engine import engine, remove_container, run_engine
from farm.sandbox.images.ensure import LOG_ARTIFACT, ensure_image
from farm.sandbox.images.resolve import built_view, check_relay_task, relay_plan, resolve_image
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.channel import ProcStream
from farm.sandbox.relayed.sandbox import RelaySandbox
from farm.tasks.model import NetworkMode, Task

# What docker and podman give a container by default (podman's containers.conf list; Docker also
# grants AUDIT_WRITE, MKNOD and NET_RAW): with capabilities=runtime-default the commands keep these.
ENGINE_DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETFCAP", "SETGID",
                       "SETPCAP", "SETUID", "SYS_CHROOT")


def spec_config(cfg: DockerSandboxConfig) -> KubernetesSandboxConfig:
    """The pod settings a container honours (the rest are cluster-only)."""
    return KubernetesSandboxConfig(namespace="local", toolbox_image=cfg.toolbox_image, capabilities=cfg.capabilities,
                                   cpu_limit_factor=cfg.cpu_limit_factor, memory_limit=cfg.memory_limit,
                                   labels=dict(cfg.labels))


def run_args(pod: dict[str, Any], volume: str, network: NetworkMode, cfg: DockerSandboxConfig,
             *, pids: int, pull: str | None = None) -> list[str]:
    """`<engine> run` arguments equivalent to the Pod's task container (``pull``: instead of
    ``cfg.pull``, e.g. ``never`` for an image that is already present; ``pids``: the task's pids
    limit, which a Pod cannot carry: a kubelet sets it per node)."""
    c = pod["spec"]["containers"][0]
    sc = c["securityContext"]
    args = ["run", "-d", "--name", pod["metadata"]["name"], "--init=false",
            "--security-opt", "no-new-privileges", "--pids-limit", str(pids if pids > 0 else -1),
            "-v", f"{volume}:{m.FARM_MOUNT}:ro", f"--pull={pull or cfg.pull}"]
    # engine labels take any value: the run label carries the full run id (a pod's is sanitised)
    labels = {**pod["metadata"]["labels"], m.RUN_LABEL: pod["metadata"]["annotations"][m.RUN_ANNOTATION]}
    for k, v in labels.items():
        args += ["--label", f"{k}={v}"]
    for e in c["env"]:
        args += ["-e", f"{e['name']}={e['value']}"]
    caps = sc.get("capabilities") or {}
    for cap in caps.get("drop", []):
        args += ["--cap-drop", cap]
    for cap in caps.get("add", []):
        args += ["--cap-add", cap]
    # for the sandbox agent only: it puts the agent's commands in a PID namespace of their own,
    # and every command drops again those of these it would not have had (inside/jail.py)
    has = set(caps.get("add", [])) if "ALL" in caps.get("drop", []) else set(ENGINE_DEFAULT_CAPS)
    extra = [cap for cap in JAIL_CAPS if cap.removeprefix("CAP_") not in has]
    for cap in extra:
        args += ["--cap-add", cap.removeprefix("CAP_")]
    args += ["-e", f"{JAIL_ENV}={','.join(extra)}"]
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


class ContainerSandbox(RelaySandbox):
    backend = "docker"
    # run_args grants the jail's caps, which also make the verifier's mount namespace (inside/verifier_ns.py)
    capabilities = Capabilities(isolated_commands=True, private_verifier=True, system_diff=True)
    cfg: DockerSandboxConfig

    def __init__(self, task: Task, cfg: DockerSandboxConfig, *, run_id: str, trial_key: str, attempt: int = 0,
                 role: str = "agent", network: NetworkMode | None = None, image_policy: str = "pull-or-build") -> None:
        super().__init__(task, cfg, run_id=run_id, trial_key=trial_key, attempt=attempt, role=role,
                         network=network or (task.agent_network if role == "agent" else task.verifier_network),
                         image_policy=image_policy)
        self.volume = f"{self.name}-farm"
        self._shared_volume = False  # the toolbox volume is the shared one (docker/toolbox.py): never removed here
        # what the container's limits did (docker/limits.py): its cgroup, found once it runs; the
        # last counters read; how it ended, once a lost channel asked; the answer kept at removal
        self._cgroup: ContainerCgroup | None = None
        self._counts: Counts | None = None
        self._current = False  # the last reading succeeded (after the end, once it ended)
        self._ended: Ended | None = None
        self._final: LimitEvents | None = None

    async def _ensure_image(self) -> str:
        plan = relay_plan(self.task, self.cfg, self.image_policy, builder=True)
        # the named image after the mirror and the digest lock; a build needs none
        named = resolve_image(self.task, self.cfg, self.backend) if plan.pull_first else None
        try:
            got = await ensure_image(self.cfg.engine, self.task, self.image_policy, named, pull=self.cfg.pull,
                                     scope=self.run_id, min_free_gb=self.cfg.image_min_free_gb,
                                     on_step=self.stats.note_step)
        except SandboxStartError as e:
            log = getattr(e, "build_log", None)
            if log:
                self.stats.artifacts[LOG_ARTIFACT] = log
            raise
        if got.log:
            self.stats.artifacts[LOG_ARTIFACT] = got.log
        self.stats.image, self._image_facts, self._replay = got.provenance, got.facts, got.replay
        if not got.replay:
            self.run_task = built_view(self.task, got.facts)
        self.stats.extra["image_ref"] = got.ref
        return got.ref

    def _start_timeout_s(self) -> float | None:
        return self.cfg.start_timeout_s

    @property
    def label(self) -> str:
        return f"container {self.name}"

    @property
    def step_label(self) -> str:
        return Path(self.cfg.engine).name

    def _spec_config(self) -> KubernetesSandboxConfig:
        return spec_config(self.cfg)

    def _describe(self) -> dict[str, Any]:
        return {"container": self.name, "engine": self.cfg.engine}

    async def _engine(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        return await engine(self.cfg.engine, *args, check=check, timeout=timeout)

    async def _create(self) -> None:
        assert self.pod is not None
        init = self.pod["spec"]["initContainers"][0]
        # the steps as the progress line names them: the volume and the toolbox init container that
        # fills it ("create"), then the task container (`run -d` creates and starts it: "run")
        self.stats.note_step(f"{self.step_label} create")

        def fill(volume: str) -> list[str]:
            return ["run", "--rm", "--network", "none", "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                    "--user", "0:0", f"--pull={self.cfg.pull}", "-v", f"{volume}:{m.FARM_MOUNT}",
                    "--entrypoint", init["command"][0], init["image"], *init["command"][1:]]

        shared = None
        if self.cfg.share_toolbox:
            shared = await shared_volume(self.cfg.engine, init["image"], init["command"], fill)
        if shared is not None:
            self.volume, self._shared_volume = shared, True
        else:
            await self._engine("volume", "create", "--label", f"{m.RUN_LABEL}={self.run_id}",
                               "--label", f"{m.APP_LABEL}={m.APP_NAME}", self.volume)
            await self._engine(*fill(self.volume))
        # ensure_image made the task image present: the run never pulls it again
        self.stats.note_step(f"{self.step_label} run")
        # the task's pids limit, as on sandbox=local (a fork storm meets the same wall on both)
        await self._engine(*run_args(self.pod, self.volume, self.network, self.cfg, pull="never",
                                     pids=self.task.environment.resources.pids))
        if self.role == "agent":  # the row's limits are the agent's sandbox's (run/trial.py)
            await self._find_cgroup()

    async def _find_cgroup(self) -> None:
        """Record the container's cgroup while it runs (one inspect): once the container ends,
        its init PID, and with it the way to the group, is gone."""
        out = await self._engine("inspect", "-f", "{{.Id}} {{.State.Pid}}", self.name, check=False)
        ident, _, pid = out.strip().partition(" ")
        found = ContainerCgroup.find(ident, int(pid)) if ident and pid.isdigit() and int(pid) > 0 else None
        self._cgroup = found
        self.stats.extra["limit_counters"] = found.describe() if found else "not visible from this host"

    async def _open_stream(self) -> ProcStream:
        proc = await asyncio.create_subprocess_exec(
            self.cfg.engine, "exec", "-i", self.name, m.PYTHON, m.RELAY, "attach", m.socket_name(self.name),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=16 << 20)
        return ProcStream(proc)

    async def system_changes(self) -> list[tuple[str, str]]:
        """What changed in the container against its image, as ``(kind, path)`` with kind
        ``A`` (added), ``C`` (changed) or ``D`` (deleted): ``<engine> diff`` (farm/grade/tamper.py).

        Raises:
            SandboxError: the engine could not say (the container is gone).
        """
        out = await self._engine("diff", self.name, timeout=300)
        changes = []
        for line in out.splitlines():
            kind, _, path = line.strip().partition(" ")
            if kind in ("A", "C", "D") and path.startswith("/"):
                changes.append((kind, path))
        return changes

    async def _why_dead(self) -> str | None:
        # the counters first: the engine removes the group soon after the container ended
        self._read_counts()
        out = await self._engine("inspect", "-f", "{{.State.Status}} {{.State.OOMKilled}} {{.State.ExitCode}}",
                                 self.name, check=False)
        ended = parse_state(out)
        if ended is None:
            return None
        self._ended = self._ended or ended
        return f"container state {ended.status}" + (" (OOMKilled)" if ended.oom_killed else "")

    def _read_counts(self) -> None:
        if self._cgroup is None or (self._ended is not None and self._current):
            return  # nothing to read, or the reading taken at the end stands
        counts = self._cgroup.counts()
        self._current = counts is not None
        self._counts = counts or self._counts

    async def limit_events(self) -> LimitEvents | None:
        """What the container's memory and pids limits did (docker/limits.py), also after it was
        lost or closed; None where nothing of it could be read from here."""
        if self._final is not None:
            return self._final
        self._read_counts()
        return container_events(self._counts, self._current, self._ended,
                                self._cgroup.describe() if self._cgroup else None)

    async def _destroy(self, force: bool) -> None:
        if self._final is None and self._cgroup is not None:
            self._final = await self.limit_events()  # the group goes with the container
        if self.cfg.keep_containers and not force:
            return
        left = await remove_container(self.cfg.engine, self.name)
        if left is not None:  # the row says so; `farm gc` removes a stopped container of a run later
            self.stats.extra["container_not_removed"] = left[-500:]
        if not self._shared_volume:
            await self._engine("volume", "rm", "-f", self.volume, check=False)


# --- garbage collection ---------------------------------------------------------------------


async def gc_containers(binary: str, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
    """Remove the containers and volumes of runs that are no longer alive, and stopped ones."""
    report = GcReport()
    selector = f"label={m.APP_LABEL}={m.APP_NAME}"
    alive: dict[str, bool] = {}

    def dead(run_id: str | None) -> bool:
        if not run_id:
            return True
        if run_id not in alive:
            alive[run_id] = bool(is_run_alive(run_id))
            if not alive[run_id]:
                report.dead_runs.add(run_id)
        return not alive[run_id]

    out = await engine(binary, "ps", "-a", "--filter", selector, "--format", "{{json .}}")
    for row in _json_rows(out):
        name = row.get("Names")
        name = name[0] if isinstance(name, list) else str(name)
        labels = _labels(row.get("Labels"))
        running = str(row.get("State", "")).lower() == "running"
        if dead(labels.get(m.RUN_LABEL)) or not running:
            if not dry_run:
                await remove_container(binary, name)
            report.add("container", name)
        else:
            report.kept += 1
    out = await engine(binary, "volume", "ls", "--filter", selector, "--format", "{{json .}}")
    busy = {n[: -len("-farm")] for n in report.deleted.get("container", [])}
    for row in _json_rows(out):
        name = str(row.get("Name"))
        run_id = _labels(row.get("Labels")).get(m.RUN_LABEL)
        if dead(run_id) or name[: -len("-farm")] in busy:
            if not dry_run:
                await engine(binary, "volume", "rm", "-f", name, check=False)
            report.add("volume", name)
    return report


def _json_rows(out: str) -> list[dict[str, Any]]:
    """``--format '{{json .}}'`` output: one object a line (docker) or one array (podman)."""
    text = out.strip()
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _labels(raw: Any) -> dict[str, str]:
    """Engine label output: a mapping (podman) or ``k=v,k=v`` (docker)."""
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    out: dict[str, str] = {}
    for part in str(raw or "").split(","):
        k, sep, v = part.partition("=")
        if sep:
            out[k] = v
    return out


class DockerBackend:
    """``sandbox.backend=docker`` for the registry (farm/sandbox/registry.py)."""

    name = "docker"

    def open(self, task: Task, cfg: SandboxConfig, *, network: str | None, run_id: str, trial_key: str,
             attempt: int, role: str) -> Sandbox:
        return ContainerSandbox(task, cfg.docker, run_id=run_id, trial_key=trial_key, attempt=attempt, role=role,
                                network=network, image_policy=cfg.image_policy)  # type: ignore[arg-type]

    def check_task(self, task: Task, cfg: SandboxConfig) -> None:
        check_relay_task(task, cfg.docker, self.name, cfg.image_policy, builder=True)

    async def check_images(self, tasks: list[Task], cfg: SandboxConfig) -> dict[tuple[str, str], str]:
        """Preflight: the tasks whose image can certainly not be had (`farm images check`, without
        asking a registry), with why; a task absent from the result may still fail its pull."""
        from farm.sandbox.images.check import check_tasks

        rows = await check_tasks(cfg.docker.engine, tasks, cfg.docker, cfg.image_policy, registry=False)
        return {(t.benchmark, t.task_id): r.why for t, r in zip(tasks, rows, strict=True) if not r.ok}

    def check_environment(self, cfg: SandboxConfig) -> None:
        if shutil.which(cfg.docker.engine) is None:
            raise ConfigError(f"invalid value {cfg.docker.engine!r} for 'sandbox.docker.engine': not on PATH "
                              "(install Docker or Podman, or name the binary)")

    async def check_engine(self, cfg: SandboxConfig, timeout_s: float) -> str | None:
        """``<engine> info``: None when the engine answers, else its error and the setting to change.

        A missing daemon ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
        otherwise surfaces as one failed image build per trial, with nothing of the engine's
        message in the row's first line, until the circuit breaker stops the run."""
        binary = cfg.docker.engine
        rc, out, err = await run_engine(binary, "info", timeout=timeout_s)
        if rc == 0:
            return None
        said = (err.strip() or out.strip() or "(it printed nothing)").splitlines()
        text = " ".join(line.strip() for line in said[-3:] if line.strip())[-600:]
        name = Path(binary).name
        other = "docker" if "podman" in name else "podman"
        fix = f"sandbox.docker.engine={other}" + ("" if shutil.which(other) else f" once {other} is installed")
        why = f"did not answer in {timeout_s:g} s" if rc == 124 else f"exited with code {rc}"
        return (f"sandbox.docker.engine={binary!r} cannot run containers: `{binary} info` {why}: {text} "
                f"(start the {name} service, or choose another engine: {fix})")

    def gc(self, cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
        return asyncio.run(gc_containers(cfg.docker.engine, is_run_alive, dry_run=dry_run))


BACKEND = DockerBackend()

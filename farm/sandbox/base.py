"""The Sandbox protocol every backend implements, and its typed errors.

A command that times out is an ``ExecResult`` with ``timed_out=True``; only infrastructure
failures (the sandbox could not start, was lost, its channel broke) raise, and they raise a
``SandboxError`` so the runner can classify them as ``infra_error`` and retry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from farm.errors import FarmError


class SandboxError(FarmError, RuntimeError):
    """Infrastructure failure of a sandbox: retryable, never the agent's fault."""


class SandboxStartError(SandboxError):
    """The sandbox could not be created or its environment could not be built.

    ``reason`` is a short machine-readable cause that lands in the trial row as
    ``error_class = "sandbox_start:<reason>"``: ``image_pull``, ``container_config``,
    ``unschedulable``, ``timeout``, ``ended`` (the pod/container stopped before it was
    ready), ``build_step`` (a RUN step failed), ``engine`` (a container-engine command
    failed), ``network`` (the sandbox's network could not be set up), ``agent`` (the sandbox
    agent did not answer); None when the backend cannot tell.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class SandboxLostError(SandboxError):
    """The sandbox (or its channel) died while in use."""


class SandboxClosedError(SandboxError):
    """An operation was attempted on a sandbox that was already closed."""


class CapabilityError(SandboxError):
    """The backend lacks the capability an operation needs (see ``Sandbox.capabilities``)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the protocol's common core; callers test these flags
    instead of probing for methods."""

    set_network: bool = False  # egress can be switched after start (grading in the verifier's mode)
    # the agent's commands run in a PID namespace the sandbox agent is outside of, so that no
    # command can kill it (inside/jail.py); stats.isolation says whether it took effect
    isolated_commands: bool = False
    # the in-place verifier can run in a mount namespace of its own, with a /tests and a
    # /logs/verifier no agent process can see, outside the agent's PID namespace
    # (inside/verifier_ns.py; ``run_verifier``); where False, the verifier runs like a command
    private_verifier: bool = False
    # ``system_changes()`` lists what changed against the task's image (``podman diff``), for the
    # system-tamper check before in-place grading (farm/grade/tamper.py)
    system_diff: bool = False


@dataclass
class VerifierRun:
    """What ``run_verifier`` returns: the run, and the files it left in its private
    /logs/verifier (None where no private namespace could be made: ``why`` says why; empty where
    the run timed out or its report was lost, since then nothing outside it can be trusted)."""

    result: ExecResult
    files: dict[str, bytes] | None
    why: str = ""
    redirected: bool = False  # /tests or /logs/verifier was replaced by a link as it started


@dataclass
class ExecResult:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False  # the captured output exceeded the cap and was cut
    output_bytes: int = 0  # total bytes the command produced, before any cap

    @property
    def output(self) -> str:
        """stdout followed by stderr (merged when the command ran with merge_stderr)."""
        return self.stdout + self.stderr


@dataclass(frozen=True)
class ToolRequest:
    """One Leaf tool call, executed by the sandbox agent (inside/leaf_tools.py)."""

    name: str  # Bash | Read | Write | Edit | Glob
    args: Mapping[str, Any]
    workdir: str
    limits: Mapping[str, Any] = field(default_factory=dict)  # output caps, timeouts, env, truncation

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "args": dict(self.args), "workdir": self.workdir, "limits": dict(self.limits)}


@dataclass(frozen=True)
class ToolResponse:
    """The agent's answer to a tool call; a failing tool is an observation, not an exception."""

    observation: str
    truncated: bool = False
    error: str | None = None  # the exception type a failing tool reported (e.g. "ValueError")
    command_s: float | None = None  # time the command itself ran (Bash)
    duration_s: float | None = None  # time the whole tool call took inside the sandbox

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ToolResponse:
        def num(key: str) -> float | None:
            v = data.get(key)
            return None if v is None else float(v)

        return cls(observation=str(data.get("observation", "")), truncated=bool(data.get("truncated")),
                   error=data.get("error"), command_s=num("command_s"), duration_s=num("duration_s"))


@dataclass(frozen=True)
class StatResult:
    exists: bool
    is_dir: bool = False
    size: int = 0

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> StatResult:
        return cls(bool(data.get("exists")), bool(data.get("is_dir")), int(data.get("size") or 0))


@dataclass
class SandboxStats:
    """Counters a trial row reports (what the sandbox cost, how many remote calls it made)."""

    start_s: float = 0.0
    requests: int = 0
    api_calls_start: int = 0  # Kubernetes API-server calls made to start the sandbox
    api_calls_after_start: int = 0  # ... and afterwards (the exec channel should need none)
    cpu_s: float | None = None  # CPU seconds consumed inside the sandbox, when measurable
    image: ImageProvenance | None = None  # what the sandbox ran, when the backend knows
    # how the agent's commands are kept from the sandbox agent (inside/jail.py): "pid-namespace+proc",
    # or "none: <why>" where a command could kill it and lose the sandbox
    isolation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # files the trial keeps as artifacts under sandbox/<name> (an image build log, ...)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    # the step of its start the sandbox is in ("podman build", "agent ping", "build step 2/5: RUN
    # ..."), told to whoever listens (the run's progress line: farm/run/starts.py), so that a start
    # that stalls says where; a listener's failure never fails the start
    step: str = ""
    on_step: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def note_step(self, step: str) -> None:
        self.step = step
        if self.on_step is not None:
            try:
                self.on_step(step)
            except Exception:  # noqa: BLE001 - progress is advice; the start goes on
                pass


@dataclass(frozen=True)
class LimitEvents:
    """What the sandbox's own limits did during a trial, as its backend observed them (the
    kernel's counters: a cgroup's pids.events and OOM kills, an engine's OOMKilled).

    ``commands``: the limits the agent's commands met (``pids``, ``memory``, ``disk``);
    ``agent``: those that reached the sandbox agent itself (its reserve spent, or the OOM killer
    took it). A sandbox lost with either non-empty was lost by what ran inside it, the model's
    doing (farm/run/attribution.py); ``evidence`` keeps the counters in words for the row."""

    commands: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    evidence: str = ""

    def hit(self) -> list[str]:
        """Every limit met, commands' or agent's, in a fixed order (memory, pids, disk)."""
        return [name for name in LIMIT_NAMES if name in self.commands or name in self.agent]


LIMIT_NAMES = ("memory", "pids", "disk")


async def limit_events(sandbox: object) -> LimitEvents | None:
    """``sandbox.limit_events()`` where the backend has it; None: it cannot tell."""
    probe = getattr(sandbox, "limit_events", None)
    if probe is None:
        return None
    try:
        return await probe()
    except Exception:  # noqa: BLE001 - evidence is best effort: no evidence is "cannot tell"
        return None


# Granted to the sandbox agent only (bwrap, docker/podman), to put the agent's commands in a PID
# namespace of their own (inside/jail.py); every command drops them again before it starts.
JAIL_CAPS = ("CAP_SYS_ADMIN", "CAP_SYS_CHROOT", "CAP_SETPCAP")
JAIL_ENV = "FARM_AGENT_JAIL"


@dataclass
class ImageProvenance:
    """Where the sandbox's root filesystem came from; copied verbatim into the trial row.

    A score is only comparable with a published one when the image is the task's own: built
    from its Dockerfile or pulled, on the real base image. Anything else is marked here.
    """

    source: str  # pulled | built | cached (built earlier, same content hash) | local (already present) | host
    image_id: str | None = None  # the engine's image id of what ran
    build_s: float | None = None  # time this attempt spent building it (0 when it was cached)
    base_standin: bool = False  # built on a farm stand-in base image (make images), not the real one
    unfaithful: bool = False  # ran without the task's image or build steps (sandbox.local.allow_any_image)
    # the reference that ran (a build's tag, or the pulled reference after mirror and lock): the
    # row's ``image``, so that it never names a registry digest the trial did not run
    ref: str | None = None


@dataclass
class GcReport:
    """What a backend's ``gc`` removed (or would remove, in a dry run)."""

    deleted: dict[str, list[str]] = field(default_factory=dict)  # kind (pod, container, ...) -> names
    kept: int = 0
    errors: list[str] = field(default_factory=list)
    dead_runs: set[str] = field(default_factory=set)

    def add(self, kind: str, name: str) -> None:
        self.deleted.setdefault(kind, []).append(name)

    def summary(self) -> str:
        parts = [f"{len(names)} {kind}{'s' if len(names) != 1 else ''}" for kind, names in sorted(self.deleted.items())]
        return ", ".join(parts) or "nothing"


@runtime_checkable
class Sandbox(Protocol):
    """One isolated environment for one trial.

    Paths are absolute paths inside the sandbox. Every method except ``close`` raises
    ``SandboxClosedError`` after ``close``, and ``SandboxError`` before ``start``. Errors
    of the task itself (it cannot run on this backend, its files are malformed) are
    ``farm.errors.UnsupportedTaskError`` / ``TaskFormatError``, never ``SandboxError``.
    """

    stats: SandboxStats
    capabilities: Capabilities

    async def start(self) -> None:
        """Create the sandbox and build the task's environment in it.

        Raises:
            SandboxStartError: the sandbox could not be created or the environment build
                failed (``reason`` says why).
            UnsupportedTaskError: this backend can never run the task (``reason`` says why).
            TaskFormatError: the task's files are malformed (a COPY source is missing, ...).
        """
        ...

    async def exec(
        self,
        command: str,
        timeout_s: float = 120.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        output_cap: int | None = None,
    ) -> ExecResult:
        """Run ``bash -c command``; the timeout kills every process the command started.

        A command that times out or fails is an ``ExecResult``, not an exception.

        Raises:
            SandboxLostError: the sandbox or its channel died.
            SandboxClosedError: the sandbox was closed.
        """
        ...

    async def read_file(self, path: str) -> bytes:
        """The file's bytes.

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError: as the sandbox reports them.
            SandboxLostError, SandboxClosedError: as for ``exec``.
        """
        ...

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Create or replace ``path`` (parent directories are created).

        Raises:
            PermissionError, IsADirectoryError: as the sandbox reports them.
            SandboxLostError, SandboxClosedError: as for ``exec``.
        """
        ...

    async def upload(self, local_dir: Path, dest: str) -> None:
        """Copy a host directory's contents into ``dest`` (created if needed).

        Raises:
            NotADirectoryError: ``local_dir`` is not a directory.
            SandboxLostError, SandboxClosedError: as for ``exec``.
        """
        ...

    async def stat(self, path: str) -> StatResult:
        """Whether ``path`` exists, is a directory, and its size.

        Raises:
            SandboxLostError, SandboxClosedError: as for ``exec``.
        """
        ...

    async def tool(self, request: ToolRequest) -> ToolResponse:
        """Run one Leaf tool call inside the sandbox; bounded by the caller's time budget.

        Raises:
            SandboxLostError, SandboxClosedError: as for ``exec`` (a failing tool is an
                observation in the response, never an exception).
        """
        ...

    async def set_network(self, network: str) -> None:
        """Switch the sandbox's egress to ``network`` (``public`` | ``no-network``).

        Raises:
            CapabilityError: ``capabilities.set_network`` is False.
            SandboxError: the switch failed.
        """
        ...

    async def kill_leftovers(self) -> int:
        """Kill every process the agent's commands left running (daemons, ``setsid``/``nohup``
        survivors); the sandbox stays usable. Called before an in-place verifier runs, so nothing
        the agent started can write the reward while the tests run, and when the agent's
        processes hold the pids the patch capture needs (a fork storm: farm/run/trial.py
        ``capture_freeing_pids``). Returns how many were killed.

        Where commands run in a PID namespace of their own (``capabilities.isolated_commands``),
        the whole namespace is killed at once, by the kernel, so a storm that forks faster than
        a one-by-one kill cannot outrun it; later commands get a fresh namespace. Processes
        outside it, and every process on a backend without one, are killed one by one.

        Raises:
            SandboxError: the sandbox agent could not be reached, or some process survived.
        """
        ...

    async def close(self) -> None:
        """Stop every process in the sandbox and release it; idempotent, never raises for a
        sandbox that is already gone."""
        ...
